/* kn_pass_reductions: see kn_pass_reductions.h. */
#include "kn_pass_reductions.h"

#include <stdio.h>
#include <string.h>

#include "kn_pass_flags.h"
#include "kn_shape.h"

/* The inner dims a row kernel reduces must be at least this long to pay
 * for the second, small reduction. */
#define SPLIT_MIN_INNER 32

typedef struct {
    kn_pass_ctx *x;
    int at;          /* the reduction's node: new nodes go before it */
    const char *where;
    unsigned char part;
} builder;

/* Append op on refs with attrs a; the new node takes the reduction's part
 * (forward, backward, update) so the views and the recompute pass see it
 * where the reduction was. */
static kn_status add(builder *b, int op, const int *refs, int n, const kn_attrs *a, int *ref)
{
    int node;
    KN_TRY(kn_pass_append_node(b->x, op, refs, n, a, b->at, b->where, &node));
    b->x->g->nodes[node].part = b->part;
    *ref = KN_REF(node, 0);
    return KN_OK;
}

static kn_status reshape(builder *b, int ref, int ndim, const int64_t *shape, int *out)
{
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_RESHAPE);
    kn_attrs a = init.a;
    a.nshape = ndim;
    memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
    return add(b, KN_OP_RESHAPE, &ref, 1, &a, out);
}

/* widen: the result in that float dtype, wider than ref's (KN_DTYPE_COUNT: ref's own) */
static kn_status reduce_widened(builder *b, int op, int ref, int ndims, const int *dims, bool keepdim,
                                int correction, kn_dtype widen, int *out)
{
    kn_opcall init;
    kn_opcall_init(&init, (kn_op)op);
    kn_attrs a = init.a;
    if (widen != KN_DTYPE_COUNT) {
        a.widen = 1;
        a.dtype = widen;
    }
    a.correction = correction;
    a.ndims = ndims;
    memcpy(a.dims, dims, sizeof(int) * (size_t)ndims);
    a.keepdim = keepdim;
    return add(b, op, &ref, 1, &a, out);
}

static kn_status reduce_corrected(builder *b, int op, int ref, int ndims, const int *dims, bool keepdim,
                                 int correction, int *out)
{
    return reduce_widened(b, op, ref, ndims, dims, keepdim, correction, KN_DTYPE_COUNT, out);
}

static kn_status reduce(builder *b, int op, int ref, int ndims, const int *dims, bool keepdim, int *out)
{
    return reduce_corrected(b, op, ref, ndims, dims, keepdim, 0, out);
}

static kn_status binary(builder *b, int op, int x, int y, int *out)
{
    int refs[2] = {x, y};
    return add(b, op, refs, 2, NULL, out);
}

static kn_status full(builder *b, int ndim, const int64_t *shape, double v, kn_dtype dt, int *out)
{
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_FULL);
    kn_attrs a = init.a;
    a.nshape = ndim;
    if (ndim) memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
    a.value = v;
    a.dtype = dt;
    return add(b, KN_OP_FULL, NULL, 0, &a, out);
}

static kn_status cast(builder *b, int ref, kn_dtype dt, int *out)
{
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_CAST);
    kn_attrs a = init.a;
    a.dtype = dt;
    return add(b, KN_OP_CAST, &ref, 1, &a, out);
}

/* Rows then the rest: x (meta m) reduced over `red` (a mask), whose last
 * t dims (t >= 1, `inner` elements) are all reduced. x viewed as
 * {first dims, inner}; the inner dim reduced by a row kernel; what remains
 * of `red` (`lead`) reduced after, on nd - t dims. VAR as the mean of the
 * squared deviations from the mean, both split so. */
static kn_status split_rows(builder *b, const kn_node *n, int xref, const kn_meta *m, const bool *red, int t,
                            int *result)
{
    int nd = m->ndim, f = nd - t, lead[KN_MAX_DIMS], n_lead = 0;
    int64_t shape[KN_MAX_DIMS], inner = 1;
    for (int d = 0; d < f; d++) {
        shape[d] = m->shape[d];
        if (red[d]) lead[n_lead++] = d;
    }
    for (int d = f; d < nd; d++) inner *= m->shape[d];
    shape[f] = inner;
    int xv, last = f;
    KN_TRY(reshape(b, xref, f + 1, shape, &xv));
    KN_TRY(cast(b, xv, KN_F64, &xv)); /* read by the row kernel, which then sums in f64 (see the header) */
    /* keepdim throughout: a mean and a var of the same dims (BatchNorm's)
     * then share their first two reductions (cse) */
    if (n->op == KN_OP_SUM || n->op == KN_OP_MEAN) {
        int r;
        KN_TRY(reduce(b, n->op, xv, 1, &last, true, &r));
        if (n_lead) KN_TRY(reduce(b, n->op, r, n_lead, lead, true, &r));
        *result = r;
        return KN_OK;
    }
    /* VAR */
    int mean, dev, neg_dev, sq, s, denom;
    KN_TRY(reduce(b, KN_OP_MEAN, xv, 1, &last, true, &mean));
    if (n_lead) KN_TRY(reduce(b, KN_OP_MEAN, mean, n_lead, lead, true, &mean));
    /* (x - m) * (m - x), summed, over -(count - correction): the same
     * numbers as the squares' (a difference negates exactly), with the
     * deviation made twice, each read once. Fusion inlines only a value
     * read once, so the product and its sum stay one row kernel over x;
     * one deviation squared would be written out whole first, and cse
     * would merge two equal subtractions back into one. */
    KN_TRY(binary(b, KN_OP_SUB, xv, mean, &dev));
    KN_TRY(binary(b, KN_OP_SUB, mean, xv, &neg_dev));
    KN_TRY(binary(b, KN_OP_MUL, dev, neg_dev, &sq));
    KN_TRY(reduce(b, KN_OP_SUM, sq, 1, &last, true, &s));
    if (n_lead) KN_TRY(reduce(b, KN_OP_SUM, s, n_lead, lead, true, &s));
    int64_t count = inner;
    for (int k = 0; k < n_lead; k++) count *= m->shape[lead[k]];
    KN_TRY(full(b, 0, NULL, -(double)(count - n->a.correction), KN_F64, &denom));
    return binary(b, KN_OP_DIV, s, denom, result);
}

/* A reduction of a permuted view (the layout pass's NCHW view of an NHWC
 * value: BatchNorm's statistics over N, H and W) whose dims, traced back
 * to the view's source, are that source's leading ones, and whose kept
 * dims keep their order there: *src (meta *sm) and its leading *n_lead
 * dims reduced, the rest kept, are the same numbers in the same order.
 * A row kernel over the view walks H and W a channel row apart: 173 us for
 * a 32 x 32 x 112 x 112 batch's mean on the H200, 7% of the memory roof.
 * Over the source, it is the backend's column reduction, which reads each
 * row once, contiguous. */
static bool columns_behind_view(const kn_pass_ctx *x, const kn_node *n, const bool *red, int *src, kn_meta *sm,
                                int *n_lead)
{
    const kn_graph *g = x->g;
    const kn_node *v = &g->nodes[n->in_node[0]];
    if (v->op != KN_OP_PERMUTE || n->in_out[0] != 0) return false;
    const kn_meta *vm = &v->out[0];
    *src = KN_REF(v->in_node[0], v->in_out[0]);
    *sm = g->nodes[v->in_node[0]].out[v->in_out[0]];
    if (v->a.ndims != vm->ndim || sm->ndim != vm->ndim) return false;
    bool src_red[KN_MAX_DIMS] = {false};
    int last_kept = -1;
    for (int d = 0; d < vm->ndim; d++) {
        int sd = v->a.dims[d] < 0 ? v->a.dims[d] + vm->ndim : v->a.dims[d];
        if (sd < 0 || sd >= vm->ndim) return false;
        src_red[sd] = red[d];
        if (!red[d]) {
            if (sd < last_kept) return false; /* the kept dims would come out in another order */
            last_kept = sd;
        }
    }
    *n_lead = kn_shape_leading_reduced(sm->ndim, src_red);
    return *n_lead > 0;
}

/* Whether value ref is written to memory whatever this pass does: a graph
 * input, or the output of an op no generated pointwise kernel computes (a
 * conv, a matmul, a reduction). A pointwise op's value may instead live
 * only inside the kernel that fuses it with its readers. */
static bool stored_anyway(const kn_graph *g, int ref)
{
    int op = g->nodes[KN_REF_NODE(ref)].op;
    if (op >= KN_OP_COUNT) return op == KN_NODE_INPUT;
    switch (kn_op_kind_of((kn_op)op)) {
    case KN_K_MATMUL:
    case KN_K_CONV:
    case KN_K_REDUCE:
    case KN_K_ARGREDUCE:
    case KN_K_SOFTMAX:
    case KN_K_POOL:
    case KN_K_ATTENTION:
    case KN_K_CAT:
    case KN_K_INDEX: return true;
    default: return false;
    }
}

/* *ref, where it is a cast of a narrower float to a wider one (a half
 * value's statistics in f32 under autocast), becomes the cast's input and
 * *widen its dtype, which the column reduction then converts as it reads:
 * the cast's f32 copy was written once and read by mean and var (a
 * 32 x 32 x 112 x 112 batch: 51 MB, 17 us to write on the H200, and its
 * reads twice a bf16 read's; a backward that reads the cast too computes
 * it again from the kept half value, kn_pass_recompute). Only where the
 * half value is stored anyway (a conv's output): a cast of a pointwise
 * op's value is made in that op's kernel (a ReLU's gradient, cast as it
 * is computed), and reading the half value instead would store it too. */
static void fold_widening_cast(const kn_graph *g, int *ref, kn_dtype *widen)
{
    const kn_node *c = &g->nodes[KN_REF_NODE(*ref)];
    *widen = KN_DTYPE_COUNT;
    if (c->op != KN_OP_CAST || KN_REF_OUT(*ref) != 0 || !stored_anyway(g, KN_REF(c->in_node[0], c->in_out[0])))
        return;
    kn_dtype from = g->nodes[c->in_node[0]].out[c->in_out[0]].dtype, to = c->out[0].dtype;
    if (!kn_dtype_is_float(from) || !kn_dtype_is_float(to) || kn_dtype_size(to) <= kn_dtype_size(from)) return;
    *ref = KN_REF(c->in_node[0], c->in_out[0]);
    *widen = to;
}

kn_status kn_pass_split_reductions(kn_pass_ctx *x)
{
    if (!(x->flags & KN_PASSES_SPLIT_REDUCTIONS)) return KN_OK;
    kn_graph *g = x->g;
    for (int i = 0; i < x->n_orig; i++) {
        if (x->dead[i]) continue;
        kn_pass_resolve_inputs(x, i);
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_SUM && n->op != KN_OP_MEAN && n->op != KN_OP_VAR) continue;
        int xref = KN_REF(n->in_node[0], n->in_out[0]);
        kn_meta m = g->nodes[n->in_node[0]].out[n->in_out[0]];
        if (m.ndim < 2 || !kn_dtype_is_float(m.dtype) || !kn_dtype_is_float(n->out[0].dtype)) continue;
        bool red[KN_MAX_DIMS] = {false};
        int n_red = 0;
        for (int d = 0; d < m.ndim; d++) red[d] = n->a.ndims == 0;
        for (int k = 0; k < n->a.ndims; k++)
            if (n->a.dims[k] >= 0 && n->a.dims[k] < m.ndim) red[n->a.dims[k]] = true;
        for (int d = 0; d < m.ndim; d++) n_red += red[d];
        int t = 0;
        while (t < m.ndim && red[m.ndim - 1 - t]) t++;
        int64_t inner = 1;
        for (int d = m.ndim - t; d < m.ndim; d++) inner *= m.shape[d];
        char where[KN_WHERE_MAX];
        snprintf(where, sizeof where, "%s", n->where);
        builder b = {x, i, where, n->part};
        kn_meta want = n->out[0];
        int r = -1, src, n_lead;
        kn_meta sm;
        if (columns_behind_view(x, n, red, &src, &sm, &n_lead)) {
            /* the source's leading dims, by the backend's column kernel,
             * which sums in f64 and rounds once, as the split below */
            int lead[KN_MAX_DIMS];
            for (int d = 0; d < n_lead; d++) lead[d] = d;
            kn_dtype widen;
            fold_widening_cast(g, &src, &widen);
            KN_TRY(reduce_widened(&b, n->op, src, n_lead, lead, false, n->a.correction, widen, &r));
        } else if (t >= 1 && t < m.ndim && inner >= SPLIT_MIN_INNER && (n_red > t || t >= 2)) {
            /* the last dims reduced, and more than one dim: rows, then the rest */
            if (n->op == KN_OP_VAR && inner * (n_red > t ? 2 : 1) - n->a.correction <= 0) continue;
            KN_TRY(split_rows(&b, n, xref, &m, red, t, &r));
        } else {
            continue;
        }
        /* one rounding, from f64 to the reduction's dtype, as the generic kernel's */
        if (g->nodes[KN_REF_NODE(r)].out[0].dtype != want.dtype) KN_TRY(cast(&b, r, want.dtype, &r));
        const kn_meta *got = &g->nodes[KN_REF_NODE(r)].out[0];
        if (!kn_pass_meta_equal(got, &want)) KN_TRY(reshape(&b, r, want.ndim, want.shape, &r));
        kn_pass_replace(x, i, r);
    }
    return KN_OK;
}
