/* compile_fuzz.c: the compiler against the reference on random graphs.
 * Each seeded graph (t/lib/graph_fuzz.h) runs node by node (the reference)
 * and through a compiled plan (passes, fusion, generated C); every output
 * must match within 1e-5 relative, NaN only where the reference has NaN.
 * KILN_FUZZ_GRAPHS sets how many graphs (default 300); KILN_SEED the first
 * seed (to rerun a failure); KILN_FUZZ_SEED fixes the corpus, as .ci/run does
 * so that CI is reproducible (without it every run draws new graphs). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "graph_fuzz.h"
#include "cpu/kn_cpu_jit.h"
#include "kn_plan.h"
#include "tap.h"

int main(void)
{
    if (!kn_jit_available()) skip_all("no C compiler for generated kernels");
    const char *env = getenv("KILN_FUZZ_GRAPHS");
    int count = env ? atoi(env) : 300;
    /* KILN_SEED reruns one graph; KILN_FUZZ_SEED fixes the corpus (CI) */
    const char *senv = getenv("KILN_SEED") ? getenv("KILN_SEED") : getenv("KILN_FUZZ_SEED");
    uint64_t seed0 = senv ? strtoull(senv, NULL, 10) : (uint64_t)time(NULL) * 1000003u + (uint64_t)getpid();
    printf("# first seed %llu, %d graphs\n", (unsigned long long)seed0, count);
    char dir[] = "/tmp/kiln-fuzz-cache-XXXXXX";
    if (!mkdtemp(dir)) skip_all("cannot make a temporary cache dir");
    kn_settings settings;
    kn_settings_init(&settings);
    kn_settings_set_cache_dir(&settings, dir, strlen(dir));

    int failed = 0, compiled = 0, kernels = 0, generated = 0;
    for (int i = 0; i < count; i++) {
        uint64_t seed = seed0 + (uint64_t)i;
        kn_graph g;
        int outs[KN_FUZZ_MAX_OUTPUTS], n_outs = 0;
        if (kn_fuzz_graph(seed, &g, outs, &n_outs) != KN_OK) {
            ok(0, "seed %llu: the fuzzer made no graph (%s)", (unsigned long long)seed, kn_last_error());
            failed++;
            continue;
        }
        kn_tensor **ref = calloc((size_t)g.n_nodes * KN_MAX_OUTPUTS, sizeof *ref);
        kn_status st = kn_graph_run(&g, NULL, ref);
        kn_plan_value want[KN_FUZZ_MAX_OUTPUTS];
        for (int k = 0; k < n_outs; k++) want[k] = (kn_plan_value){outs[k], 0};
        kn_plan *p = NULL;
        kn_tensor *got[KN_FUZZ_MAX_OUTPUTS] = {NULL};
        char why[512] = "";
        if (st == KN_OK) st = kn_plan_build(&g, want, n_outs, &settings, KN_PASSES_VERIFY, &p);
        if (st == KN_OK) {
            kn_tensor *ins[64];
            for (int k = 0; k < g.n_inputs && k < 64; k++) ins[k] = g.inputs[k].tensor;
            st = kn_plan_run(p, ins, got);
            compiled++;
            kernels += p->code.fusion.prog.n_kernels;
            for (int k = 0; k < p->code.fusion.prog.n_kernels; k++)
                generated += p->code.fusion.prog.kernels[k].kind == KN_KERNEL_POINTWISE ||
                             p->code.fusion.prog.kernels[k].kind == KN_KERNEL_ROW;
        }
        bool good = st == KN_OK;
        if (!good) snprintf(why, sizeof why, "%s", kn_last_error());
        for (int k = 0; k < n_outs && good; k++) {
            char w[256];
            if (!kn_fuzz_close(got[k], ref[outs[k] * KN_MAX_OUTPUTS], 1e-5, w, sizeof w)) {
                snprintf(why, sizeof why, "output %d (node %d): %s", k, outs[k], w);
                good = false;
            }
        }
        if (!good) {
            ok(0, "seed %llu: compiled graph equals the reference", (unsigned long long)seed);
            printf("#   %s\n", why);
            /* stderr too: prove shows it, so a CI log names the seed to rerun */
            fprintf(stderr, "compile_fuzz: KILN_SEED=%llu KILN_FUZZ_GRAPHS=1 fails: %s\n", (unsigned long long)seed, why);
            char *text = NULL;
            if (kn_graph_format(&g, &text) == KN_OK) printf("%s", text);
            free(text);
            if (p && getenv("KILN_FUZZ_DEBUG")) { /* the optimized graph and its kernels */
                if (kn_graph_format(&p->g, &text) == KN_OK) printf("# optimized:\n%s", text);
                free(text);
                for (int k = 0; k < p->code.fusion.prog.n_kernels; k++)
                    if (kn_kernel_dump(&p->code.fusion.prog.kernels[k], &text) == KN_OK)
                        printf("%s\n", text), free(text);
            }
            failed++;
        }
        for (int k = 0; k < n_outs; k++) kn_tensor_release(got[k]);
        for (int k = 0; k < g.n_nodes * KN_MAX_OUTPUTS; k++) kn_tensor_release(ref[k]);
        free(ref);
        kn_plan_free(p);
        kn_graph_free(&g);
    }
    ok(failed == 0, "%d random graphs compiled and matched the reference (%d failed)", count, failed);
    ok(compiled == count, "every graph compiled (%d of %d)", compiled, count);
    ok(generated > count, "fusion made generated kernels (%d of %d kernels)", generated, kernels);
    printf("# %d kernels for %d graphs, %d generated\n", kernels, count, generated);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    return done_testing();
}
