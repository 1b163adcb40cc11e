/* kn_rules_reduce: gradient rules of the reductions (over any set of dims,
 * keepdim or not), softmax and log_softmax, layer_norm and batch_norm. */
#include "kn_grad_rules.h"

#include <string.h>

#define G (gout[0])
#define X (n->saved_in[0])
#define IN0 (&n->in_meta[0])
#define AT (&n->call->a)

/* The reduced dims of a reduction call as a flag per dim of the input. */
static void reduced_dims(const kn_attrs *a, const kn_meta *in, bool *red)
{
    for (int d = 0; d < KN_MAX_DIMS; d++) red[d] = a->ndims == 0;
    for (int i = 0; i < a->ndims; i++) red[a->dims[i]] = true;
    (void)in;
}

/* g reshaped to the input's rank, reduced dims as 1 (broadcasts against x). */
static kn_tensor *keep_shape(kn_gb *b, kn_tensor *g, const kn_meta *in, const kn_attrs *a)
{
    if (!g || in->ndim == 0) return g;
    bool red[KN_MAX_DIMS];
    reduced_dims(a, in, red);
    int64_t s[KN_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++) s[d] = red[d] ? 1 : in->shape[d];
    return kn_gb_reshape(b, g, in->ndim, s);
}

/* How many elements each output of the reduction sums. */
static double reduced_count(const kn_meta *in, const kn_attrs *a)
{
    bool red[KN_MAX_DIMS];
    reduced_dims(a, in, red);
    double count = 1;
    for (int d = 0; d < in->ndim; d++)
        if (red[d]) count *= (double)in->shape[d];
    return count;
}

void kn_grad_sum(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_expand(b, keep_shape(b, G, IN0, AT), IN0->ndim, IN0->shape);
}

void kn_grad_mean(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    kn_tensor *g = kn_gb_muls(b, G, 1.0 / reduced_count(IN0, AT));
    gin[0] = kn_gb_expand(b, keep_shape(b, g, IN0, AT), IN0->ndim, IN0->shape);
}

void kn_grad_amax(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* the elements equal to the result share its gradient evenly, as PyTorch */
    kn_tensor *y = keep_shape(b, n->saved_out[0], IN0, AT);
    kn_tensor *mask = kn_gb_cast(b, kn_gb_binary(b, KN_OP_EQ, X, y), G->dtype);
    kn_attrs keep = *AT;
    keep.keepdim = 1;
    kn_tensor *count = kn_gb_sum(b, mask, keep.ndims, keep.dims, true);
    kn_tensor *share = kn_gb_div(b, keep_shape(b, G, IN0, AT), count);
    gin[0] = kn_gb_mul(b, mask, share);
}

void kn_grad_var(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* d var / dx = 2 (x - mean) / (N - correction) */
    const kn_attrs *a = AT;
    kn_tensor *mean = kn_gb_reduce(b, KN_OP_MEAN, X, a->ndims, a->dims, true);
    kn_tensor *xc = kn_gb_sub(b, X, mean);
    double denom = reduced_count(IN0, a) - a->correction;
    gin[0] = kn_gb_mul(b, kn_gb_muls(b, xc, 2.0 / denom), keep_shape(b, G, IN0, a));
}

void kn_grad_max_dim(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* the gradient goes to the element each index names (1-based) */
    const kn_attrs *a = AT;
    if (IN0->ndim == 0) {
        gin[0] = G;
        return;
    }
    kn_attrs one = *a;
    one.ndims = 1;
    one.dims[0] = a->dim;
    kn_tensor *idx = keep_shape(b, n->saved_out[1], IN0, &one);
    int64_t s[KN_MAX_DIMS];
    for (int d = 0; d < IN0->ndim; d++) s[d] = d == a->dim ? IN0->shape[d] : 1;
    kn_tensor *pos = kn_gb_reshape(b, kn_gb_arange(b, IN0->shape[a->dim], 1, 1), IN0->ndim, s);
    kn_tensor *hit = kn_gb_binary(b, KN_OP_EQ, idx, pos);
    gin[0] = kn_gb_where(b, hit, keep_shape(b, G, IN0, &one), kn_gb_scalar(b, 0, G->dtype));
}

/* ---- softmax ---- */

void kn_grad_softmax(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    kn_tensor *y = n->saved_out[0];
    int dim = AT->dim;
    kn_tensor *dot = kn_gb_sum(b, kn_gb_mul(b, G, y), 1, &dim, true);
    gin[0] = kn_gb_mul(b, y, kn_gb_sub(b, G, dot));
}

void kn_grad_log_softmax(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    kn_tensor *y = n->saved_out[0];
    int dim = AT->dim;
    kn_tensor *total = kn_gb_sum(b, G, 1, &dim, true);
    gin[0] = kn_gb_sub(b, G, kn_gb_mul(b, kn_gb_unary(b, KN_OP_EXP, y), total));
}

/* ---- normalizations ---- */

/* The dtype the statistics are recomputed in: halves in f32, as the
 * forward kernels compute them. */
static kn_dtype stat_dtype(kn_dtype dt)
{
    return dt == KN_F16 || dt == KN_BF16 ? KN_F32 : dt;
}

void kn_grad_layer_norm(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    const kn_attrs *a = AT;
    int nd = IN0->ndim, k = a->nshape, dims[KN_MAX_DIMS], lead[KN_MAX_DIMS];
    for (int i = 0; i < k; i++) dims[i] = nd - k + i;
    for (int i = 0; i < nd - k; i++) lead[i] = i;
    kn_dtype cd = stat_dtype(IN0->dtype);
    kn_tensor *x = kn_gb_cast(b, X, cd), *g = kn_gb_cast(b, G, cd);
    kn_tensor *w = n->n_in > 1 ? kn_gb_cast(b, n->saved_in[1], cd) : NULL;
    kn_tensor *mu = kn_gb_reduce(b, KN_OP_MEAN, x, k, dims, true);
    kn_tensor *xc = kn_gb_sub(b, x, mu);
    kn_tensor *var = kn_gb_reduce(b, KN_OP_MEAN, kn_gb_mul(b, xc, xc), k, dims, true);
    kn_tensor *rstd = kn_gb_unary(b, KN_OP_RSQRT, kn_gb_adds(b, var, a->eps));
    kn_tensor *xhat = kn_gb_mul(b, xc, rstd);
    if (KN_NEED(n, 0)) {
        kn_tensor *gh = w ? kn_gb_mul(b, g, w) : g;
        kn_tensor *m1 = kn_gb_reduce(b, KN_OP_MEAN, gh, k, dims, true);
        kn_tensor *m2 = kn_gb_reduce(b, KN_OP_MEAN, kn_gb_mul(b, gh, xhat), k, dims, true);
        gin[0] = kn_gb_mul(b, rstd, kn_gb_sub(b, kn_gb_sub(b, gh, m1), kn_gb_mul(b, xhat, m2)));
    }
    if (n->n_in > 1 && KN_NEED(n, 1)) gin[1] = nd > k ? kn_gb_sum(b, kn_gb_mul(b, g, xhat), nd - k, lead, false)
                                                      : kn_gb_mul(b, g, xhat);
    if (n->n_in > 2 && KN_NEED(n, 2)) gin[2] = nd > k ? kn_gb_sum(b, g, nd - k, lead, false) : g;
}

void kn_grad_batch_norm(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* y = (x - mean) rsqrt(var + eps) w + bias, per channel (dim 1) */
    int nd = IN0->ndim, other[KN_MAX_DIMS], n_other = 0;
    for (int d = 0; d < nd; d++)
        if (d != 1) other[n_other++] = d;
    int64_t bs[KN_MAX_DIMS];
    for (int d = 0; d < nd; d++) bs[d] = d == 1 ? IN0->shape[1] : 1;
    kn_dtype cd = stat_dtype(IN0->dtype);
    kn_tensor *x = kn_gb_cast(b, X, cd), *g = kn_gb_cast(b, G, cd);
    kn_tensor *mean = kn_gb_cast(b, n->saved_in[1], cd), *var = kn_gb_cast(b, n->saved_in[2], cd);
    kn_tensor *w = n->n_in > 3 ? kn_gb_cast(b, n->saved_in[3], cd) : NULL;
    kn_tensor *rstd = kn_gb_unary(b, KN_OP_RSQRT, kn_gb_adds(b, var, AT->eps));
    kn_tensor *scale = w ? kn_gb_mul(b, rstd, w) : rstd;
    kn_tensor *xc = kn_gb_sub(b, x, kn_gb_reshape(b, mean, nd, bs));
    kn_tensor *gsum = kn_gb_sum(b, g, n_other, other, false);
    kn_tensor *gxc = kn_gb_sum(b, kn_gb_mul(b, g, xc), n_other, other, false);
    if (KN_NEED(n, 0)) gin[0] = kn_gb_mul(b, g, kn_gb_reshape(b, scale, nd, bs));
    if (KN_NEED(n, 1)) gin[1] = kn_gb_unary(b, KN_OP_NEG, kn_gb_mul(b, gsum, scale));
    if (KN_NEED(n, 2)) {
        /* d rsqrt(v + eps) / dv = -1/2 rsqrt^3 */
        kn_tensor *r3 = kn_gb_mul(b, rstd, kn_gb_mul(b, rstd, rstd));
        kn_tensor *d = kn_gb_muls(b, kn_gb_mul(b, gxc, r3), -0.5);
        gin[2] = w ? kn_gb_mul(b, d, w) : d;
    }
    if (n->n_in > 3 && KN_NEED(n, 3)) gin[3] = kn_gb_mul(b, gxc, rstd);
    if (n->n_in > 4 && KN_NEED(n, 4)) gin[4] = gsum;
}
