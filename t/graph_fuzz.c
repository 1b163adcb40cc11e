/* graph_fuzz: the pass list on a few hundred random graphs (t/lib/graph_fuzz.h):
 * every graph checks before and after, and every output has the same value
 * after the passes as before. KILN_SEED=N runs that one seed and prints its
 * graph before and after; KILN_FUZZ_SEEDS=N sets how many seeds run. */
#include <stdio.h>
#include <stdlib.h>

#include "graph_fuzz.h"
#include "kn_passes.h"
#include "tap.h"

typedef struct stats {
    int graphs, nodes_before, nodes_after, ops_before, ops_after, ops_live;
} stats;

static void print_graph(const char *title, const kn_graph *g, const int *outs, int n_outs)
{
    char *text = NULL;
    if (kn_graph_format(g, &text) != KN_OK) return;
    printf("# %s (outputs:", title);
    for (int k = 0; k < n_outs; k++) printf(" %d", outs[k]);
    printf(")\n");
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) printf("#   %s\n", line);
    free(text);
}

static void release_all(kn_tensor **v, int n)
{
    for (int i = 0; i < n; i++) kn_tensor_release(v[i]);
}

/* One seed: 0 when the values survive the passes, else prints why. */
static int check_seed(uint64_t seed, bool show, stats *s)
{
    kn_graph g, h;
    int outs[KN_FUZZ_MAX_OUTPUTS], outs2[KN_FUZZ_MAX_OUTPUTS], n_outs = 0;
    char why[1024];
    if (kn_fuzz_graph(seed, &g, outs, &n_outs) != KN_OK) {
        printf("# seed %llu: generator failed: %s\n", (unsigned long long)seed, kn_last_error());
        return 1;
    }
    int fail = 0;
    if (show) print_graph("generated", &g, outs, n_outs);
    if (kn_graph_verify(&g, why, sizeof why) != KN_OK) {
        printf("# seed %llu: generated graph does not check: %s\n", (unsigned long long)seed, why);
        kn_graph_free(&g);
        return 1;
    }
    kn_tensor **ref = calloc((size_t)g.n_nodes * KN_MAX_OUTPUTS, sizeof *ref);
    kn_tensor **got = NULL;
    if (kn_graph_run(&g, NULL, ref) != KN_OK) {
        printf("# seed %llu: reference run failed: %s\n", (unsigned long long)seed, kn_last_error());
        free(ref);
        kn_graph_free(&g);
        return 1;
    }
    memcpy(outs2, outs, sizeof outs);
    if (kn_fuzz_copy_bound(&g, &h) != KN_OK) fail = 1;
    else if (kn_passes_run(&h, outs2, n_outs, KN_PASSES_VERIFY) != KN_OK) {
        printf("# seed %llu: passes failed: %s\n", (unsigned long long)seed, kn_last_error());
        fail = 1;
    }
    if (show && !fail) print_graph("after the passes", &h, outs2, n_outs);
    if (!fail) {
        got = calloc((size_t)h.n_nodes * KN_MAX_OUTPUTS, sizeof *got);
        if (kn_graph_run(&h, NULL, got) != KN_OK) {
            printf("# seed %llu: run after the passes failed: %s\n", (unsigned long long)seed,
                   kn_last_error());
            fail = 1;
        }
    }
    for (int k = 0; k < n_outs && !fail; k++)
        if (!kn_fuzz_close(got[outs2[k] * KN_MAX_OUTPUTS], ref[outs[k] * KN_MAX_OUTPUTS], 1e-5, why,
                           sizeof why)) {
            printf("# seed %llu: output %d (node %d, now %d): %s\n", (unsigned long long)seed,
                   k + 1, outs[k], outs2[k], why);
            fail = 1;
        }
    if (!fail) {
        kn_graph d; /* how much of the graph is live at all: what the other passes start from */
        int outs3[KN_FUZZ_MAX_OUTPUTS];
        memcpy(outs3, outs, sizeof outs);
        if (kn_graph_copy(&g, &d) == KN_OK) {
            if (kn_pass_run(&d, "dce", outs3, n_outs, 0) == KN_OK) s->ops_live += kn_graph_op_count(&d);
            kn_graph_free(&d);
        }
        s->graphs++;
        s->nodes_before += g.n_nodes;
        s->nodes_after += h.n_nodes;
        s->ops_before += kn_graph_op_count(&g);
        s->ops_after += kn_graph_op_count(&h);
    }
    release_all(ref, g.n_nodes * KN_MAX_OUTPUTS);
    if (got) release_all(got, h.n_nodes * KN_MAX_OUTPUTS);
    free(ref);
    free(got);
    kn_graph_free(&h);
    kn_graph_free(&g);
    if (fail) printf("# failing seed: rerun with KILN_SEED=%llu\n", (unsigned long long)seed);
    return fail;
}

int main(void)
{
    const char *one = getenv("KILN_SEED"), *count = getenv("KILN_FUZZ_SEEDS");
    stats s = {0};
    if (one) {
        uint64_t seed = strtoull(one, NULL, 10);
        ok(check_seed(seed, true, &s) == 0, "seed %llu: values survive the passes",
           (unsigned long long)seed);
        return done_testing();
    }
    int n = count ? atoi(count) : 400, failed = 0;
    for (int seed = 1; seed <= n; seed++) failed += check_seed((uint64_t)seed, false, &s);
    ok(failed == 0, "%d random graphs: every output keeps its value through the passes (%d failed)",
       n, failed);
    printf("# %d graphs: %d -> %d nodes, %d -> %d ops (%d ops live before the passes)\n", s.graphs,
           s.nodes_before, s.nodes_after, s.ops_before, s.ops_after, s.ops_live);
    ok(s.ops_after < s.ops_live, "cse, folding and simplify removed live ops (%d of %d)",
       s.ops_live - s.ops_after, s.ops_live);

    /* Same seed, same graph. */
    kn_graph a, b;
    int oa[KN_FUZZ_MAX_OUTPUTS], ob[KN_FUZZ_MAX_OUTPUTS], na, nb;
    kn_fuzz_graph(7, &a, oa, &na);
    kn_fuzz_graph(7, &b, ob, &nb);
    char *ta = NULL, *tb = NULL;
    kn_graph_format(&a, &ta);
    kn_graph_format(&b, &tb);
    ok(na == nb && memcmp(oa, ob, sizeof(int) * (size_t)na) == 0 && ta && tb && strcmp(ta, tb) == 0,
       "a seed gives the same graph every time");
    free(ta);
    free(tb);
    kn_graph_free(&a);
    kn_graph_free(&b);
    return done_testing();
}
