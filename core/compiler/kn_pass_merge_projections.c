/* kn_pass_merge_projections: matmuls that read the same input, each times a
 * fixed weight (a parameter or a captured tensor) and plus a fixed bias,
 *
 *   q = x @ Wq + bq     k = x @ Wk + bk     v = x @ Wv + bv
 *
 * (BERT's query, key and value projections, as PyTorch's exporters write
 * them: three Linear layers on one hidden state) become one
 *
 *   y = x @ cat(Wq, Wk, Wv) + cat(bq, bk, bv);   q, k, v = slices of y
 *
 * whose slices are views: one GEMM of 3N columns instead of three of N
 * (on the H200, BERT's three 1024 x 768 x 768 bf16 GEMMs took 5.6-6 us
 * each at a quarter of their roofline; GPT-2's one 1024 x 2304 x 768 takes
 * 9.4). The merged weight and bias are computed now, on the weights'
 * device, and become inputs of the graph, as batch norm's fold does: the
 * plan builds again when a weight is written later (kn_plan_stale). A
 * weight may be given as [K, N] (the dynamo exporter's pre-transposed
 * initializer) or as the transpose of an [N, K] one (nn.Linear's
 * x @ W^T); the members of a group all take it the same way. What merged
 * goes to the pass notes (KILN_LOGS=fusion).
 */
#include "kn_pass_merge_projections.h"

#include "kn_pass_k_major.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUP 4 /* cat takes up to KN_MAX_INPUTS inputs; Q, K, V is three */

typedef struct projection {
    int mm;             /* the matmul node */
    int end;            /* the node whose value the group's slice replaces: the bias add, or the matmul */
    int a_ref;          /* the shared input */
    int w_node;         /* the fixed weight's input node: [K, N], or [N, K] under a transpose */
    int bias_node;      /* the fixed bias's input node ([N]), or -1 */
    bool transposed;    /* the matmul reads permute(W, {1, 0}) of an [N, K] weight */
    int64_t k, n;
    kn_dtype dtype;
} projection;

/* The one node that reads node i's output 0, or -1 (none or several, or a
 * caller output). */
static int sole_reader(const kn_pass_ctx *x, int i)
{
    if (kn_pass_is_output(x, i)) return -1;
    const kn_graph *g = x->g;
    int found = -1;
    for (int j = i + 1; j < g->n_nodes; j++) {
        if (x->dead[j]) continue;
        const kn_node *n = &g->nodes[j];
        for (int k = 0; k < n->n_in; k++) {
            if (kn_pass_resolve(x, KN_REF(n->in_node[k], n->in_out[k])) != KN_REF(i, 0)) continue;
            if (found >= 0 && found != j) return -1;
            found = j;
        }
    }
    return found;
}

/* Whether node i is x @ W (+ b) with W and b fixed; *p describes it. */
static bool projection_at(kn_pass_ctx *x, int i, projection *p)
{
    kn_graph *g = x->g;
    if (x->dead[i] || g->nodes[i].op != KN_OP_MATMUL || g->nodes[i].n_in != 2) return false;
    kn_pass_resolve_inputs(x, i);
    const kn_node *mm = &g->nodes[i];
    const kn_meta *am = &g->nodes[mm->in_node[0]].out[mm->in_out[0]];
    memset(p, 0, sizeof *p);
    p->mm = p->end = i;
    p->a_ref = KN_REF(mm->in_node[0], mm->in_out[0]);
    p->bias_node = -1;
    p->dtype = mm->out[0].dtype;
    if (am->ndim < 2 || am->dtype != p->dtype || !kn_dtype_is_float(p->dtype)) return false;
    int b_node = mm->in_node[1], b_out = mm->in_out[1];
    const kn_node *bn = &g->nodes[b_node];
    if (bn->op == KN_OP_PERMUTE && bn->a.ndims == 2 && bn->a.dims[0] == 1 && bn->a.dims[1] == 0) {
        p->transposed = true;
        b_node = bn->in_node[0], b_out = bn->in_out[0];
    }
    kn_tensor *w = kn_pass_fixed_value(g, b_node, b_out);
    if (!w || w->ndim != 2 || w->dtype != p->dtype) return false;
    p->w_node = b_node;
    p->k = w->shape[p->transposed ? 1 : 0];
    p->n = w->shape[p->transposed ? 0 : 1];
    if (am->shape[am->ndim - 1] != p->k) return false;
    /* the bias: the matmul's one reader adds a fixed [N] of the same dtype */
    int add = sole_reader(x, i);
    if (add < 0 || g->nodes[add].op != KN_OP_ADD || g->nodes[add].n_in != 2) return true;
    kn_pass_resolve_inputs(x, add);
    const kn_node *an = &g->nodes[add];
    int other = KN_REF(an->in_node[0], an->in_out[0]) == KN_REF(i, 0) ? 1 : 0;
    if (KN_REF(an->in_node[1 - other], an->in_out[1 - other]) != KN_REF(i, 0)) return true;
    kn_tensor *b = kn_pass_fixed_value(g, an->in_node[other], an->in_out[other]);
    if (b && b->ndim == 1 && b->shape[0] == p->n && b->dtype == p->dtype && an->out[0].dtype == p->dtype &&
        an->out[0].ndim == mm->out[0].ndim &&
        !memcmp(an->out[0].shape, mm->out[0].shape, sizeof(int64_t) * (size_t)an->out[0].ndim)) {
        p->bias_node = an->in_node[other];
        p->end = add;
    }
    return true;
}

static bool same_kind(const projection *a, const projection *b)
{
    return a->a_ref == b->a_ref && a->k == b->k && a->dtype == b->dtype && a->transposed == b->transposed &&
           (a->bias_node >= 0) == (b->bias_node >= 0);
}

/* cat(ts[0..n), dim) computed now on their device, a new reference. */
static kn_status cat_now(kn_pass_ctx *x, kn_tensor *const *ts, int n, int dim, kn_tensor **out)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CAT);
    c.n_in = n;
    for (int k = 0; k < n; k++) c.in[k] = ts[k];
    c.a.dim = dim;
    c.settings = x->settings;
    KN_TRY(kn_op_eager(&c, kn_tensor_device(ts[0])));
    for (int k = 1; k < c.n_out; k++) kn_tensor_release(c.out[k]);
    *out = c.out[0];
    return KN_OK;
}

static kn_status merge(kn_pass_ctx *x, const projection *ps, int n)
{
    kn_graph *g = x->g;
    char where[KN_WHERE_MAX];
    memcpy(where, g->nodes[ps[0].mm].where, sizeof where); /* appends move the node array */
    int first = ps[0].mm;
    kn_tensor *ws[MAX_GROUP], *bs[MAX_GROUP];
    for (int k = 0; k < n; k++) {
        ws[k] = kn_pass_fixed_value(g, ps[k].w_node, 0);
        bs[k] = ps[k].bias_node >= 0 ? kn_pass_fixed_value(g, ps[k].bias_node, 0) : NULL;
    }
    /* [K, N1 + N2 + ...], or [N1 + N2 + ..., K] read transposed: also
     * for [K, Ni] weights where the device's matmul wants the merged
     * weight k-contiguous (kn_pass_k_major would otherwise copy the
     * [K, N] merge again and leave it beside the copy) */
    int64_t n_total = 0;
    for (int k = 0; k < n; k++) n_total += ps[k].n;
    const kn_meta *am = &g->nodes[KN_REF_NODE(ps[0].a_ref)].out[KN_REF_OUT(ps[0].a_ref)];
    bool lay_out = !ps[0].transposed &&
                   kn_pass_wants_k_major(x, am, ps[0].dtype, ps[0].k, n_total, kn_tensor_device(ws[0]));
    bool transposed = ps[0].transposed || lay_out;
    kn_tensor *wcat = NULL, *bcat = NULL, *wt[MAX_GROUP] = {NULL};
    kn_status st = KN_OK;
    for (int k = 0; k < n && st == KN_OK && lay_out; k++) st = kn_pass_transpose_now(x, ws[k], &wt[k]);
    if (st == KN_OK) st = cat_now(x, lay_out ? wt : ws, n, transposed ? 0 : 1, &wcat);
    for (int k = 0; k < n; k++) kn_tensor_release(wt[k]);
    if (st == KN_OK && lay_out)
        kn_pass_note(x, "k_major_weights: the merged [%lld, %lld] weight is laid out k-contiguous, the device's "
                        "matmul runs faster so",
                     (long long)ps[0].k, (long long)n_total);
    if (st == KN_OK && ps[0].bias_node >= 0) st = cat_now(x, bs, n, 0, &bcat);
    int w_in = -1, b_in = -1;
    if (st == KN_OK) st = kn_pass_add_folded_value(x, "merged projection weight", wcat, where, first, &w_in);
    if (st == KN_OK && bcat) st = kn_pass_add_folded_value(x, "merged projection bias", bcat, where, first, &b_in);
    kn_tensor_release(wcat);
    kn_tensor_release(bcat);
    KN_TRY(st);
    int w_ref = KN_REF(w_in, 0);
    if (transposed) {
        kn_attrs t;
        memset(&t, 0, sizeof t);
        t.ndims = 2, t.dims[0] = 1, t.dims[1] = 0;
        int node;
        KN_TRY(kn_pass_append_node(x, KN_OP_PERMUTE, &w_ref, 1, &t, first, where, &node));
        w_ref = KN_REF(node, 0);
    }
    int refs[2] = {ps[0].a_ref, w_ref}, mm, y;
    KN_TRY(kn_pass_append_node(x, KN_OP_MATMUL, refs, 2, NULL, first, where, &mm));
    y = mm;
    if (b_in >= 0) {
        int add_refs[2] = {KN_REF(mm, 0), KN_REF(b_in, 0)};
        KN_TRY(kn_pass_append_node(x, KN_OP_ADD, add_refs, 2, NULL, first, where, &y));
    }
    int last_dim = x->g->nodes[y].out[0].ndim - 1;
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        kn_attrs s;
        memset(&s, 0, sizeof s);
        s.dim = last_dim, s.start = off, s.stop = off + ps[k].n, s.step = 1;
        off += ps[k].n;
        int yref = KN_REF(y, 0), slice;
        char member_where[KN_WHERE_MAX];
        memcpy(member_where, x->g->nodes[ps[k].mm].where, sizeof member_where);
        KN_TRY(kn_pass_append_node(x, KN_OP_SLICE, &yref, 1, &s, first, member_where, &slice));
        if (!kn_pass_replace(x, ps[k].end, KN_REF(slice, 0))) return KN_OK; /* cannot happen: slice is an output 0 */
    }
    return KN_OK;
}

kn_status kn_pass_merge_projections(kn_pass_ctx *x)
{
    int n0 = x->g->n_nodes;
    unsigned char *taken = calloc((size_t)n0 + 1, 1);
    if (!taken) return kn_error(KN_ERR_OOM, "out of host memory for a pass");
    kn_status st = KN_OK;
    for (int i = 0; i < n0 && st == KN_OK; i++) {
        projection group[MAX_GROUP];
        if (taken[i] || !projection_at(x, i, &group[0])) continue;
        int n = 1;
        for (int j = i + 1; j < n0 && n < MAX_GROUP; j++) {
            if (!taken[j] && projection_at(x, j, &group[n]) && same_kind(&group[0], &group[n])) n++;
        }
        if (n < 2) continue;
        for (int k = 0; k < n; k++) taken[group[k].mm] = 1;
        st = merge(x, group, n);
        if (st == KN_OK) {
            char who[200];
            int64_t total = 0;
            for (int k = 0; k < n; k++) total += group[k].n;
            kn_pass_note(x, "merge_projections: %d matmuls reading the same input (the first %s) run as one of "
                            "%lld columns%s",
                         n, kn_pass_who(x->g, group[0].mm, who, sizeof who), (long long)total,
                         group[0].bias_node >= 0 ? ", biases merged too" : "");
        }
    }
    free(taken);
    return st;
}
