/* kn_pass_recompute: see kn_pass_recompute.h.
 *
 * The values a training step keeps for its backward are the forward ops'
 * outputs that backward ops read: they live from the forward to the
 * backward, so they make the step's peak memory. A pointwise op (unary,
 * binary, compare, ternary) whose inputs are all kept anyway (or are graph
 * inputs or constants) can be computed again right before its first
 * backward reader, for one pointwise pass over memory: its own forward
 * value then dies with its last forward reader. The largest such values go
 * first, until the kept bytes are at most budget x the bytes kept before
 * (kn_settings.activation_memory_budget; 1, the default, keeps every
 * value). The inputs of a recomputed op are then pinned: recomputing one
 * of them too would only move where it is kept. Each copy is marked
 * `recomputed` (and part backward), which cm:saved() lists with its reason.
 * At any budget, a widening float cast of a value kept anyway is computed
 * again rather than kept (recompute_widening_casts).
 */
#include "kn_pass_recompute.h"

#include <stdlib.h>
#include <string.h>

#include "kn_settings.h"

static bool is_pointwise(int op)
{
    if (op < 0 || op >= KN_OP_COUNT) return false;
    switch (kn_op_kind_of((kn_op)op)) {
    case KN_K_UNARY:
    case KN_K_BINARY:
    case KN_K_COMPARE:
    case KN_K_TERNARY: return true;
    default: return false;
    }
}

static int64_t value_bytes(const kn_meta *m)
{
    return kn_numel_of(m->ndim, m->shape) * (int64_t)kn_dtype_size(m->dtype);
}

/* The first backward node reading output 0 of node i, or -1. */
static int first_backward_reader(const kn_pass_ctx *x, int i)
{
    return kn_graph_first_backward_reader(x->g, i, 0, x->n_orig, x->dead);
}

typedef struct {
    int node;
    int64_t bytes;
} candidate;

static int by_bytes_desc(const void *a, const void *b)
{
    int64_t x = ((const candidate *)a)->bytes, y = ((const candidate *)b)->bytes;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Node i's copy before its first backward reader, which the backward
 * reads instead (marked `recomputed` = why: KN_RECOMPUTED_*); *copy the
 * new node. */
static kn_status recompute_node(kn_pass_ctx *x, int i, unsigned char why, int *copy)
{
    kn_graph *g = x->g;
    const kn_node *nd = &g->nodes[i];
    int first = first_backward_reader(x, i);
    int refs[KN_MAX_INPUTS];
    for (int k = 0; k < nd->n_in; k++) refs[k] = KN_REF(nd->in_node[k], nd->in_out[k]);
    char where[KN_WHERE_MAX];
    memcpy(where, nd->where, sizeof where);
    kn_attrs a = nd->a;
    int op = nd->op, n_in = nd->n_in;
    KN_TRY(kn_pass_append_node(x, op, refs, n_in, &a, first, where, copy));
    g = x->g; /* the node array may have moved */
    g->nodes[*copy].part = KN_PART_BACKWARD;
    g->nodes[*copy].recomputed = why;
    memcpy(g->nodes[*copy].name, g->nodes[i].name, sizeof g->nodes[*copy].name);
    /* the backward reads the copy; the forward keeps the original */
    for (int j = i + 1; j < x->n_orig; j++) {
        kn_node *u = &g->nodes[j];
        if (x->dead[j] || u->part != KN_PART_BACKWARD) continue;
        for (int k = 0; k < u->n_in; k++)
            if (u->in_node[k] == i && u->in_out[k] == 0) u->in_node[k] = *copy;
    }
    return KN_OK;
}

/* Widening float casts the backward reads, of a value it keeps anyway
 * (or of a graph input): computed again from that value at any budget.
 * Keeping the wider copy costs its bytes from the forward to the backward
 * for nothing, since the backward kernel that reads it can convert the
 * narrow value as it loads it. Under bf16 autocast, the f32 casts that
 * BatchNorm's statistics read (and var's gradient reads again) were 92 of
 * the 194 MiB a convnet training step kept (the sample at 32 x 224 x 224). */
static kn_status recompute_widening_casts(kn_pass_ctx *x, const unsigned char *kept, unsigned char *done)
{
    for (int i = 0; i < x->n_orig; i++) {
        const kn_node *nd = &x->g->nodes[i];
        if (!kept[i] || nd->op != KN_OP_CAST || nd->n_in != 1 || nd->n_out != 1 || kn_pass_is_output(x, i))
            continue;
        int s = nd->in_node[0];
        const kn_meta *in = &x->g->nodes[s].out[nd->in_out[0]];
        if (!kn_dtype_is_float(in->dtype) || !kn_dtype_is_float(nd->out[0].dtype) ||
            kn_dtype_size(nd->out[0].dtype) <= kn_dtype_size(in->dtype))
            continue;
        int sop = x->g->nodes[s].op;
        if (!(sop == KN_NODE_INPUT || (kept[s] && !done[s] && nd->in_out[0] == 0))) continue;
        int copy;
        KN_TRY(recompute_node(x, i, KN_RECOMPUTED_WIDENING_CAST, &copy));
        done[i] = 1;
    }
    return KN_OK;
}

kn_status kn_pass_recompute(kn_pass_ctx *x)
{
    /* an inference graph keeps nothing for a backward: finding the kept
     * values asks every node for its first backward reader, a walk over
     * the nodes after it */
    if (!kn_pass_graph_trains(x->g)) return KN_OK;
    double budget = kn_settings_or_defaults(x->settings)->activation_memory_budget;
    kn_graph *g = x->g;
    int n = x->n_orig;
    /* kept: forward op outputs that a backward op reads */
    unsigned char *kept = calloc((size_t)n + 1, 1), *pinned = calloc((size_t)n + 1, 1), *done = calloc((size_t)n + 1, 1);
    candidate *cand = calloc((size_t)n + 1, sizeof *cand);
    kn_status st = KN_OK;
    if (!kept || !pinned || !done || !cand) {
        st = kn_error(KN_ERR_OOM, "recompute: out of host memory");
        goto out;
    }
    int64_t total = 0;
    int nc = 0;
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        if (x->dead[i] || nd->part != KN_PART_FORWARD || nd->op >= KN_OP_COUNT || nd->n_out < 1) continue;
        if (first_backward_reader(x, i) < 0) continue;
        kept[i] = 1;
        total += value_bytes(&nd->out[0]);
    }
    if ((st = recompute_widening_casts(x, kept, done)) != KN_OK) goto out;
    g = x->g;
    for (int i = 0; i < n; i++)
        if (done[i]) total -= value_bytes(&g->nodes[i].out[0]);
    if (!(budget < 1)) goto out;
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        if (!kept[i] || done[i] || !is_pointwise(nd->op) || nd->n_out != 1 || kn_pass_is_output(x, i)) continue;
        cand[nc++] = (candidate){i, value_bytes(&nd->out[0])};
    }
    qsort(cand, (size_t)nc, sizeof *cand, by_bytes_desc);
    int64_t keep = total;
    for (int c = 0; c < nc && (double)keep > budget * (double)total; c++) {
        int i = cand[c].node;
        const kn_node *nd = &g->nodes[i];
        if (pinned[i]) continue;
        /* its inputs: kept anyway (and not recomputed themselves), inputs or constants */
        bool ok = true;
        for (int k = 0; k < nd->n_in && ok; k++) {
            int s = nd->in_node[k];
            int sop = g->nodes[s].op;
            ok = sop == KN_NODE_INPUT || sop == KN_NODE_CONST || (kept[s] && !done[s] && nd->in_out[k] == 0);
        }
        if (!ok) continue;
        int n_in = nd->n_in, ins[KN_MAX_INPUTS], copy;
        for (int k = 0; k < n_in; k++) ins[k] = nd->in_node[k];
        if ((st = recompute_node(x, i, KN_RECOMPUTED_BUDGET, &copy)) != KN_OK) break;
        g = x->g;
        done[i] = 1;
        for (int k = 0; k < n_in; k++) pinned[ins[k]] = 1;
        keep -= cand[c].bytes;
    }
out:
    free(kept);
    free(pinned);
    free(done);
    free(cand);
    return st;
}
