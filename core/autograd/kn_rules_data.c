/* kn_rules_data: gradient rules of the ops that move data: copies, cat,
 * the index ops, tril / triu, the views, and the fused message passing.
 * A view's gradient is the inverse view (reshape, permute) or the
 * gradient put back in place (slice: index_add into zeros; expand: the
 * sum over what was repeated). Indices are 1-based throughout. */
#include "kn_grad_rules.h"

#include <string.h>

#define G (gout[0])
#define IN0 (&n->in_meta[0])
#define AT (&n->call->a)

void kn_grad_identity(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    (void)b;
    (void)n;
    gin[0] = G;
}

void kn_grad_cat(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    int dim = AT->dim;
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t len = n->in_meta[i].shape[dim];
        if (KN_NEED(n, i)) gin[i] = kn_gb_slice(b, G, dim, off, off + len, 1);
        off += len;
    }
}

void kn_grad_index_select(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_index_add(b, kn_gb_zeros_like(b, IN0), AT->dim, n->saved_in[1], G);
}

/* gather(x, dim, idx): out[.., j, ..] = x[.., idx[.., j, ..], ..]. Its
 * gradient adds g[.., j, ..] into position idx[.., j, ..]: a one-hot of
 * idx against 1..K along a new dim after `dim`, times g, summed over j. */
void kn_grad_gather(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    int dim = AT->dim, nd = IN0->ndim;
    kn_tensor *idx = n->saved_in[1];
    const kn_meta *mi = &n->in_meta[1];
    int64_t K = IN0->shape[dim], su[KN_MAX_DIMS + 1], sk[KN_MAX_DIMS + 1];
    if (nd + 1 > KN_MAX_DIMS) {
        kn_gb_fail(b, KN_ERR_SHAPE, "gather's gradient needs one dim more than its %d-dim input (at most %d)", nd,
                   KN_MAX_DIMS);
        return;
    }
    for (int d = 0, e = 0; d <= nd; d++) {
        su[d] = d == dim + 1 ? 1 : mi->shape[e++];
        sk[d] = d == dim + 1 ? K : 1;
    }
    kn_tensor *hot = kn_gb_binary(b, KN_OP_EQ, kn_gb_reshape(b, idx, nd + 1, su),
                                  kn_gb_reshape(b, kn_gb_arange(b, K, 1, 1), nd + 1, sk));
    kn_tensor *spread = kn_gb_where(b, hot, kn_gb_reshape(b, G, nd + 1, su), kn_gb_scalar(b, 0, G->dtype));
    kn_tensor *gx;
    if (mi->shape[dim] == 1) {
        /* one index along dim (cross-entropy's target per row): the sum is
         * over one term, so a view drops the dim. Summed, it became a
         * reduction of one element an output: 86 us for 4096 x 1000 f32. */
        int64_t sg[KN_MAX_DIMS];
        for (int d = 0; d < nd; d++) sg[d] = d == dim ? K : su[d < dim ? d : d + 1];
        gx = kn_gb_reshape(b, spread, nd, sg);
    } else {
        gx = kn_gb_sum(b, spread, 1, &dim, false);
    }
    for (int d = 0; d < nd; d++) /* idx may be smaller than x off `dim` */
        if (d != dim && mi->shape[d] < IN0->shape[d]) gx = kn_gb_unslice(b, gx, d, IN0->shape[d], 0, 1);
    gin[0] = gx;
}

void kn_grad_index_add(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    if (KN_NEED(n, 0)) gin[0] = G;
    if (KN_NEED(n, 2)) gin[2] = kn_gb_index_select(b, G, AT->dim, n->saved_in[1]);
}

void kn_grad_tri(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    kn_opcall c;
    kn_opcall_init(&c, n->call->op);
    c.n_in = 1;
    c.in[0] = G;
    c.a.diagonal = AT->diagonal;
    gin[0] = kn_gb_call(b, &c, NULL);
}

/* ---- views ---- */

void kn_grad_reshape(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_reshape_meta(b, G, IN0);
}

void kn_grad_permute(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    int inverse[KN_MAX_DIMS];
    for (int i = 0; i < AT->ndims; i++) inverse[AT->dims[i]] = i;
    gin[0] = kn_gb_permute(b, G, inverse);
}

void kn_grad_slice(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    int64_t step = AT->step > 0 ? AT->step : 1;
    gin[0] = kn_gb_unslice(b, G, AT->dim, IN0->shape[AT->dim], AT->start, step);
}

void kn_grad_expand(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_sum_to(b, G, IN0);
}

/* ---- gather_scatter: out = base or 0; out[dst[e]] += h[src[e]] * w[e] ---- */

void kn_grad_gather_scatter(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    const kn_attrs *a = AT;
    if (a->n_epilogue > 0) {
        kn_gb_fail(b, KN_ERR_UNSUPPORTED,
                   "a gather_scatter with fused ops after its sum (made by a compiler pass) has no gradient rule");
        return;
    }
    bool has_base = a->nshape == 0;
    int n_w = n->n_in - 3 - (has_base ? 1 : 0);
    kn_tensor *h = n->saved_in[0], *src = n->saved_in[1], *dst = n->saved_in[2];
    kn_tensor *w = n_w ? n->saved_in[3] : NULL;
    kn_tensor *per_edge = kn_gb_index_select(b, G, 0, dst); /* dL/d(message e) */
    int nd = IN0->ndim;
    if (KN_NEED(n, 0)) {
        kn_tensor *msg = per_edge;
        if (w) {
            int64_t ws[KN_MAX_DIMS];
            for (int d = 0; d < nd; d++) ws[d] = d == 0 ? n->in_meta[3].shape[0] : 1;
            msg = kn_gb_mul(b, msg, kn_gb_reshape(b, w, nd, ws));
        }
        gin[0] = kn_gb_index_add(b, kn_gb_zeros_like(b, IN0), 0, src, msg);
    }
    if (w && KN_NEED(n, 3)) {
        int dims[KN_MAX_DIMS];
        for (int d = 1; d < nd; d++) dims[d - 1] = d;
        kn_tensor *dot = kn_gb_mul(b, per_edge, kn_gb_index_select(b, h, 0, src));
        if (nd > 1) dot = kn_gb_sum(b, dot, nd - 1, dims, false);
        gin[3] = kn_gb_reshape_meta(b, dot, &n->in_meta[3]);
    }
    if (has_base && KN_NEED(n, n->n_in - 1)) gin[n->n_in - 1] = G;
}
