/* kn_rules_pool: gradient rules of the 2-D pools.
 *
 * An average pool is separable: along each axis, output i averages the
 * input rows of its window with a per-axis divisor, so the pool is
 * Mh x Mw^T with Mh[i, h] = 1 / div_h[i] on the window, and its gradient
 * Mh^T g Mw: two matmuls with constant matrices. The windows are computed
 * here exactly as the kernels compute them (kernels/cpu/kn_cpu_conv.c's
 * pool_axis_fill, which the CUDA templates follow).
 *
 * A max pool sends each output's gradient to the first element of its
 * window that equals the maximum (row-major order, as the kernels scan):
 * per kernel tap, the strided slice of the (-inf padded) input is compared
 * with the output, and the hits not taken by an earlier tap receive the
 * gradient at their positions.
 */
#include "kn_grad_rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define G (gout[0])

/* a * b / c rounded down or up, for 0 <= a, b and 0 < c (sizes here are
 * far from overflowing) */
static int64_t muldiv(int64_t a, int64_t b, int64_t c, bool up)
{
    int64_t p = a * b;
    return p / c + (up && p % c != 0);
}

/* Window i of axis d: input rows [*st, *en) and the avg divisor's factor. */
static void pool_window(kn_op op, const kn_attrs *a, int d, int64_t in, int64_t out, int64_t i, int64_t *st,
                        int64_t *en, int64_t *div)
{
    int64_t k = a->kernel[d], s = a->stride[d], p = a->padding[d];
    if (op == KN_OP_ADAPTIVE_AVG_POOL2D) {
        *st = muldiv(i, in, out, false);
        *en = muldiv(i + 1, in, out, true);
        *div = *en - *st;
    } else {
        *st = i * s - p;
        *en = *st + k;
        if (*en > in + p) *en = in + p;
        *div = *en - *st; /* the padded extent */
        if (*st < 0) *st = 0;
    }
    if (*en > in) *en = in;
    if (*st > *en) *st = *en;
    if (op == KN_OP_AVG_POOL2D && !a->count_include_pad) *div = *en - *st;
}

/* The {out, in} averaging matrix of axis d. A global pool's (one window
 * over the whole axis) is a fill op, which a traced backward computes in
 * its graph; any other is made on the host, which a traced call reads as
 * a new input every call (so it is traced again rather than replayed). */
static kn_tensor *axis_matrix(kn_gb *b, kn_op op, const kn_attrs *a, int d, int64_t in, int64_t out, kn_dtype dt)
{
    if (b->st != KN_OK) return NULL;
    if (out == 1) {
        int64_t st, en, div;
        pool_window(op, a, d, in, out, 0, &st, &en, &div);
        if (st == 0 && en == in && div == in) {
            int64_t shape[2] = {1, in};
            return kn_gb_full(b, 2, shape, 1.0 / (double)in, dt);
        }
    }
    double *m = calloc((size_t)(out * in) + 1, sizeof *m);
    if (!m) return kn_gb_fail(b, KN_ERR_OOM, "%s: out of host memory", kn_op_name(op));
    for (int64_t i = 0; i < out; i++) {
        int64_t st, en, div;
        pool_window(op, a, d, in, out, i, &st, &en, &div);
        for (int64_t h = st; h < en && div > 0; h++) m[i * in + h] = 1.0 / (double)div;
    }
    int64_t shape[2] = {out, in};
    kn_tensor *t = kn_gb_host(b, dt, 2, shape, m);
    free(m);
    return t;
}

/* Whether an avg pool of attrs a over H x W averages the whole of each
 * axis into one output (a global average pool). */
static bool global_pool(kn_op op, const kn_attrs *a, int64_t H, int64_t W, int64_t oh, int64_t ow)
{
    if (oh != 1 || ow != 1) return false;
    int64_t st, en, div;
    pool_window(op, a, 0, H, 1, 0, &st, &en, &div);
    if (st != 0 || en != H || div != H) return false;
    pool_window(op, a, 1, W, 1, 0, &st, &en, &div);
    return st == 0 && en == W && div == W;
}

void kn_grad_avg_pool2d(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    const kn_meta *mx = &n->in_meta[0];
    int nd = mx->ndim;
    int64_t H = mx->shape[nd - 2], W = mx->shape[nd - 1], oh = G->shape[nd - 2], ow = G->shape[nd - 1];
    if (global_pool(n->call->op, &n->call->a, H, W, oh, ow)) {
        /* each input's share of its one output, g / (H * W) broadcast:
         * one elementwise op, where the matmuls with the averaging rows
         * took 33 us of a convnet training step (bf16, H200) */
        kn_tensor *share = kn_gb_div(b, G, kn_gb_scalar(b, (double)(H * W), G->dtype));
        gin[0] = kn_gb_expand(b, share, nd, mx->shape);
        return;
    }
    kn_tensor *mh = axis_matrix(b, n->call->op, &n->call->a, 0, H, oh, G->dtype);
    kn_tensor *mw = axis_matrix(b, n->call->op, &n->call->a, 1, W, ow, G->dtype);
    gin[0] = kn_gb_matmul(b, kn_gb_matmul(b, kn_gb_mT(b, mh), G), mw);
}

/* t with `before` and `after` elements of value v added along dim. */
static kn_tensor *pad(kn_gb *b, kn_tensor *t, int dim, int64_t before, int64_t after, double v)
{
    if (!t) return NULL;
    kn_tensor *parts[3];
    int np = 0;
    int64_t s[KN_MAX_DIMS];
    memcpy(s, t->shape, sizeof s);
    if (before > 0) {
        s[dim] = before;
        parts[np++] = kn_gb_full(b, t->ndim, s, v, t->dtype);
    }
    parts[np++] = t;
    if (after > 0) {
        s[dim] = after;
        parts[np++] = kn_gb_full(b, t->ndim, s, v, t->dtype);
    }
    return kn_gb_cat(b, np, parts, dim);
}

void kn_grad_max_pool2d(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    const kn_attrs *a = &n->call->a;
    const kn_meta *mx = &n->in_meta[0];
    kn_tensor *x = n->saved_in[0], *y = n->saved_out[0], *g = G;
    kn_meta x4 = *mx, y4 = n->out_meta[0];
    if (mx->ndim == 3) { /* unbatched: a batch of one */
        x4.ndim = y4.ndim = 4;
        memmove(x4.shape + 1, mx->shape, sizeof(int64_t) * 3);
        memmove(y4.shape + 1, n->out_meta[0].shape, sizeof(int64_t) * 3);
        x4.shape[0] = y4.shape[0] = 1;
        x = kn_gb_reshape_meta(b, x, &x4);
        y = kn_gb_reshape_meta(b, y, &y4);
        g = kn_gb_reshape_meta(b, g, &y4);
    }
    int64_t size[2], outn[2], padded[2];
    for (int i = 0; i < 2; i++) {
        size[i] = x4.shape[2 + i];
        outn[i] = y4.shape[2 + i];
        int64_t reach = (outn[i] - 1) * a->stride[i] + (a->kernel[i] - 1) * a->dilation[i] + 1;
        padded[i] = size[i] + 2 * a->padding[i] > reach ? size[i] + 2 * a->padding[i] : reach;
        x = pad(b, x, 2 + i, a->padding[i], padded[i] - size[i] - a->padding[i], -INFINITY);
    }
    kn_meta gp = x4;
    gp.shape[2] = padded[0];
    gp.shape[3] = padded[1];
    kn_tensor *gx = kn_gb_zeros_like(b, &gp), *taken = kn_gb_zeros_like(b, &y4);
    for (int ki = 0; ki < a->kernel[0]; ki++)
        for (int kj = 0; kj < a->kernel[1]; kj++) {
            int64_t r0 = ki * a->dilation[0], c0 = kj * a->dilation[1];
            kn_tensor *tap = kn_gb_slice(b, x, 2, r0, r0 + (outn[0] - 1) * a->stride[0] + 1, a->stride[0]);
            tap = kn_gb_slice(b, tap, 3, c0, c0 + (outn[1] - 1) * a->stride[1] + 1, a->stride[1]);
            kn_tensor *hit = kn_gb_cast(b, kn_gb_binary(b, KN_OP_EQ, tap, y), y4.dtype);
            kn_tensor *first = kn_gb_mul(b, hit, kn_gb_sub(b, kn_gb_scalar(b, 1, y4.dtype), taken));
            taken = kn_gb_add(b, taken, first);
            kn_tensor *wide = kn_gb_unslice(b, kn_gb_mul(b, g, first), 3, padded[1], c0, a->stride[1]);
            kn_tensor *rows = kn_gb_arange(b, outn[0], (double)(r0 + 1), a->stride[0]);
            gx = kn_gb_index_add(b, gx, 2, rows, wide);
        }
    gx = kn_gb_slice(b, gx, 2, a->padding[0], a->padding[0] + size[0], 1);
    gx = kn_gb_slice(b, gx, 3, a->padding[1], a->padding[1] + size[1], 1);
    gin[0] = kn_gb_reshape_meta(b, gx, mx);
}
