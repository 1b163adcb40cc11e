/* kn_rules_linalg: gradient rules of matmul (batched, broadcast, 1-D
 * operands), conv2d (its input and weight gradients are convolutions
 * themselves, with the roles of the tensors exchanged), and attention
 * (recomputed from its math: scores, softmax, the two products).
 * The pools are kn_rules_pool.c. */
#include "kn_grad_rules.h"

#include "kn_backend.h"

#include <math.h>
#include <string.h>

#define G (gout[0])

/* ---- matmul ---- */

void kn_grad_matmul(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    const kn_meta *ma = &n->in_meta[0], *mb = &n->in_meta[1];
    kn_tensor *a = n->saved_in[0], *bt = n->saved_in[1], *g = G;
    /* 1-D operands as matrices: a {k} as {1, k}, b {k} as {k, 1}; the
     * gradient gets back the dims the result dropped */
    kn_meta a2 = *ma, b2 = *mb, g2 = n->out_meta[0];
    if (ma->ndim == 1) {
        a2.ndim = 2, a2.shape[0] = 1, a2.shape[1] = ma->shape[0];
        g2.shape[g2.ndim] = g2.ndim > 0 ? g2.shape[g2.ndim - 1] : 1;
        if (g2.ndim > 0) g2.shape[g2.ndim - 1] = 1;
        g2.ndim++;
        if (mb->ndim == 1) g2.shape[g2.ndim - 1] = 1; /* dot product: {1, 1} so far */
    }
    if (mb->ndim == 1) {
        b2.ndim = 2, b2.shape[0] = mb->shape[0], b2.shape[1] = 1;
        g2.shape[g2.ndim++] = 1;
    }
    a = kn_gb_reshape_meta(b, a, &a2);
    bt = kn_gb_reshape_meta(b, bt, &b2);
    g = kn_gb_reshape_meta(b, g, &g2);
    if (KN_NEED(n, 0))
        gin[0] = kn_gb_reshape_meta(b, kn_gb_sum_to(b, kn_gb_matmul(b, g, kn_gb_mT(b, bt)), &a2), ma);
    if (KN_NEED(n, 1)) {
        if (a2.ndim > 2 && b2.ndim == 2) {
            /* A weight applied to a batch of matrices ([..., M, K] @ [K, N]):
             * one GEMM over all the rows ([K, rows] @ [rows, N]) instead of
             * a product per batch summed after. That held a [batch, K, N]
             * temporary and a sum over it: 67 MB and 60 us for a 2048 x 512
             * weight over 16 sequences of 256 tokens (H200, f32). */
            int64_t rows = 1;
            for (int d = 0; d < a2.ndim - 1; d++) rows *= a2.shape[d];
            int64_t a_flat[2] = {rows, a2.shape[a2.ndim - 1]}, g_flat[2] = {rows, b2.shape[1]};
            kn_tensor *af = kn_gb_reshape(b, a, 2, a_flat), *gf = kn_gb_reshape(b, g, 2, g_flat);
            gin[1] = kn_gb_reshape_meta(b, kn_gb_matmul(b, kn_gb_mT(b, af), gf), mb);
        } else {
            gin[1] = kn_gb_reshape_meta(b, kn_gb_sum_to(b, kn_gb_matmul(b, kn_gb_mT(b, a), g), &b2), mb);
        }
    }
}

/* ---- conv2d ---- */

#define KN_GB_MAX_TAPS 64 /* kernel positions the weight gradient's GEMM form stacks (8 x 8) */

static kn_tensor *conv(kn_gb *b, kn_tensor *x, kn_tensor *w, const int *stride, const int *padding,
                       const int *dilation, int groups)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CONV2D);
    c.n_in = 2;
    /* the permuted views the weight gradient makes are copied once here,
     * so every backend's convolution gets the dense layout it expects */
    c.in[0] = x && !kn_tensor_is_contiguous(x) ? kn_gb_contiguous(b, x) : x;
    c.in[1] = w && !kn_tensor_is_contiguous(w) ? kn_gb_contiguous(b, w) : w;
    for (int i = 0; i < 2; i++) {
        c.a.stride[i] = stride[i];
        c.a.padding[i] = padding[i];
        c.a.dilation[i] = dilation[i];
    }
    c.a.groups = groups;
    return kn_gb_call(b, &c, NULL);
}

/* conv2d's gradient op `op` (conv2d_input_grad of g and w, or
 * conv2d_weight_grad of x and g; `shape` the other operand's) when the
 * device's backend runs it: one library call (cuDNN's backward data and
 * backward filter on a GPU, im2col's reverse on the CPU). NULL, with
 * nothing built, when it does not (f64 on a GPU): the forward-conv forms
 * below then run. */
static kn_tensor *conv_grad_op(kn_gb *b, kn_op op, kn_tensor *in0, kn_tensor *in1, const int64_t *shape,
                               const kn_attrs *a)
{
    kn_device_ctx *dc = kn_backend_get(b->dev);
    if (!in0 || !in1 || !dc || !dc->be->supports_op) return NULL;
    kn_opcall c;
    kn_opcall_init(&c, op);
    c.n_in = 2;
    c.in[0] = in0;
    c.in[1] = in1;
    for (int i = 0; i < 2; i++) {
        c.a.stride[i] = a->stride[i];
        c.a.padding[i] = a->padding[i];
        c.a.dilation[i] = a->dilation[i];
    }
    c.a.groups = a->groups;
    c.a.nshape = 4;
    memcpy(c.a.shape, shape, sizeof(int64_t) * 4);
    if (!dc->be->supports_op(dc, &c)) return NULL;
    return kn_gb_call(b, &c, NULL);
}

/* t along dim from `start`, `size` long, zeros past t's end. */
static kn_tensor *crop(kn_gb *b, kn_tensor *t, int dim, int64_t start, int64_t size)
{
    if (!t) return NULL;
    int64_t len = t->shape[dim];
    int64_t s0 = start < len ? start : len, s1 = start + size < len ? start + size : len;
    kn_tensor *part = kn_gb_slice(b, t, dim, s0, s1, 1);
    return s1 - s0 < size ? kn_gb_unslice(b, part, dim, size, 0, 1) : part;
}

/* The input's gradient: the output's gradient, spread out by the stride
 * and padded by the kernel's reach, convolved with the weight flipped in
 * space and with its in and out channels exchanged per group; then the
 * forward's padding cropped away. */
static kn_tensor *conv_input_grad(kn_gb *b, kn_tensor *g, kn_tensor *w, const kn_meta *mx, const kn_attrs *a)
{
    int64_t K = w->shape[0], cg = w->shape[1], kh = w->shape[2], kw = w->shape[3], G_ = a->groups;
    int64_t k2[2] = {kh, kw};
    for (int i = 0; i < 2; i++) {
        int64_t reach = (k2[i] - 1) * a->dilation[i], o = g->shape[2 + i];
        g = kn_gb_unslice(b, g, 2 + i, (o - 1) * a->stride[i] + 1 + 2 * reach, reach, a->stride[i]);
    }
    int64_t s5[5] = {G_, K / G_, cg, kh, kw}, s4[4] = {G_ * cg, K / G_, kh, kw};
    int order[5] = {0, 2, 1, 3, 4};
    kn_tensor *wt = kn_gb_reshape(b, kn_gb_permute(b, kn_gb_reshape(b, w, 5, s5), order), 4, s4);
    for (int i = 0; i < 2; i++) /* flip: indices k, k-1, ..., 1 (1-based) */
        wt = kn_gb_index_select(b, wt, 2 + i, kn_gb_arange(b, k2[i], (double)k2[i], -1));
    int one[2] = {1, 1}, zero[2] = {0, 0};
    kn_tensor *full = conv(b, g, wt, one, zero, a->dilation, a->groups);
    for (int i = 0; i < 2; i++) full = crop(b, full, 2 + i, a->padding[i], mx->shape[2 + i]);
    return full;
}

/* xs[0..n) joined along dim, in cats of at most KN_MAX_INPUTS each
 * (n <= KN_GB_MAX_TAPS). */
static kn_tensor *cat_many(kn_gb *b, int n, kn_tensor **xs, int dim)
{
    while (n > KN_MAX_INPUTS) {
        int m = 0;
        for (int i = 0; i < n; i += KN_MAX_INPUTS) {
            int k = n - i < KN_MAX_INPUTS ? n - i : KN_MAX_INPUTS;
            xs[m++] = k == 1 ? xs[i] : kn_gb_cat(b, k, xs + i, dim);
        }
        n = m;
    }
    return n == 1 ? xs[0] : kn_gb_cat(b, n, xs, dim);
}

/* The weight's gradient of an ungrouped convolution as one GEMM over
 * the input's patches (im2col): dW[k, (c, i, j)] = sum over (n, p, q) of
 * g[n, k, p, q] x_pad[n, c, i*dh + p*sh, j*dw + q*sw]. The patches are
 * the kh*kw strided views of the padded input, each [C, N, oh, ow],
 * stacked into [C*kh*kw, N*oh*ow]; the GEMM's long dim is the batch and
 * the output's positions, accumulated once in the GEMM's precision. The
 * convolution form below takes the output's gradient as a kernel as large
 * as the output (112 x 112 for a stride-2 stem on 224 x 224), which
 * libraries run far off their fast paths. */
static kn_tensor *conv_weight_grad_gemm(kn_gb *b, kn_tensor *x, kn_tensor *g, const kn_meta *mw, const kn_attrs *a)
{
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t K = g->shape[1], oh = g->shape[2], ow = g->shape[3], kh = mw->shape[2], kw = mw->shape[3];
    int to_cnhw[4] = {1, 0, 2, 3};
    kn_tensor *xp = kn_gb_contiguous(b, kn_gb_permute(b, x, to_cnhw)); /* [C, N, H, W] */
    xp = kn_gb_unslice(b, xp, 2, H + 2 * a->padding[0], a->padding[0], 1);
    xp = kn_gb_unslice(b, xp, 3, W + 2 * a->padding[1], a->padding[1], 1);
    if (!xp) return NULL;
    kn_tensor *taps[KN_GB_MAX_TAPS];
    if (kh * kw > KN_GB_MAX_TAPS) return kn_gb_fail(b, KN_ERR_UNSUPPORTED, "conv2d: a %lldx%lld kernel has too many "
                                                    "taps for its weight gradient", (long long)kh, (long long)kw);
    int64_t tap5[5] = {C, 1, N, oh, ow};
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
            int64_t r0 = i * a->dilation[0], c0 = j * a->dilation[1];
            kn_tensor *t = kn_gb_slice(b, xp, 2, r0, r0 + (oh - 1) * a->stride[0] + 1, a->stride[0]);
            t = kn_gb_slice(b, t, 3, c0, c0 + (ow - 1) * a->stride[1] + 1, a->stride[1]);
            taps[i * kw + j] = kn_gb_reshape(b, t, 5, tap5);
        }
    kn_tensor *cols = cat_many(b, (int)(kh * kw), taps, 1); /* [C, kh*kw, N, oh, ow] */
    int64_t cols2[2] = {C * kh * kw, N * oh * ow}, g2[2] = {K, N * oh * ow};
    cols = kn_gb_reshape(b, cols, 2, cols2);
    kn_tensor *gk = kn_gb_reshape(b, kn_gb_contiguous(b, kn_gb_permute(b, g, to_cnhw)), 2, g2);
    kn_tensor *dw = kn_gb_matmul(b, gk, kn_gb_mT(b, cols)); /* [K, C*kh*kw] */
    return kn_gb_reshape_meta(b, dw, mw);
}

/* The weight's gradient: a convolution of the input (its batch as
 * channels, per group) with the output's gradient as the kernel, stride
 * and dilation exchanged. For group j, channel j*N + n of the input is
 * batch n's channel of that group, and out channel k of group j reads
 * exactly those, so out[c, k, i, j] = dL/dw[k, c, i, j]. Grouped
 * convolutions (depthwise) take this form; ungrouped ones the GEMM above. */
static kn_tensor *conv_weight_grad(kn_gb *b, kn_tensor *x, kn_tensor *g, const kn_meta *mw, const kn_attrs *a)
{
    if (a->groups == 1 && mw->shape[2] * mw->shape[3] <= KN_GB_MAX_TAPS) return conv_weight_grad_gemm(b, x, g, mw, a);
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t K = g->shape[1], oh = g->shape[2], ow = g->shape[3], G_ = a->groups, cg = C / G_;
    int64_t xs5[5] = {N, G_, cg, H, W}, xs4[4] = {cg, G_ * N, H, W};
    int xo[5] = {2, 1, 0, 3, 4};
    kn_tensor *xt = kn_gb_reshape(b, kn_gb_permute(b, kn_gb_reshape(b, x, 5, xs5), xo), 4, xs4);
    int64_t gs5[5] = {N, G_, K / G_, oh, ow}, gs4[4] = {K, N, oh, ow};
    int go[5] = {1, 2, 0, 3, 4};
    kn_tensor *gt = kn_gb_reshape(b, kn_gb_permute(b, kn_gb_reshape(b, g, 5, gs5), go), 4, gs4);
    kn_tensor *r = conv(b, xt, gt, a->dilation, a->padding, a->stride, a->groups);
    r = kn_gb_slice(b, kn_gb_slice(b, r, 2, 0, mw->shape[2], 1), 3, 0, mw->shape[3], 1);
    int swap[4] = {1, 0, 2, 3};
    return kn_gb_permute(b, r, swap);
}

void kn_grad_conv2d(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    const kn_attrs *a = &n->call->a;
    if (a->in_layout != KN_LAYOUT_NCHW || a->out_layout != KN_LAYOUT_NCHW) {
        kn_gb_fail(b, KN_ERR_UNSUPPORTED, "a channels-last conv2d (made by a compiler pass) has no gradient rule");
        return;
    }
    const kn_meta *mx = &n->in_meta[0];
    kn_tensor *x = n->saved_in[0], *w = n->saved_in[1], *g = G;
    kn_meta x4 = *mx;
    if (mx->ndim == 3) { /* unbatched: a batch of one */
        x4.ndim = 4;
        memmove(x4.shape + 1, mx->shape, sizeof(int64_t) * 3);
        x4.shape[0] = 1;
        int64_t gs[4] = {1, g->shape[0], g->shape[1], g->shape[2]};
        x = kn_gb_reshape_meta(b, x, &x4);
        g = kn_gb_reshape(b, g, 4, gs);
    }
    if (!g || !x) return;
    if (KN_NEED(n, 0)) {
        kn_tensor *dx = conv_grad_op(b, KN_OP_CONV2D_INPUT_GRAD, g, w, x4.shape, a);
        gin[0] = kn_gb_reshape_meta(b, dx ? dx : conv_input_grad(b, g, w, &x4, a), mx);
    }
    if (KN_NEED(n, 1)) {
        kn_tensor *dw = conv_grad_op(b, KN_OP_CONV2D_WEIGHT_GRAD, x, g, n->in_meta[1].shape, a);
        gin[1] = dw ? dw : conv_weight_grad(b, x, g, &n->in_meta[1], a);
    }
    if (n->n_in > 2 && KN_NEED(n, 2)) {
        int dims[3] = {0, 2, 3};
        gin[2] = kn_gb_sum(b, g, 3, dims, false);
    }
}

/* ---- attention ---- */

void kn_grad_attention(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    const kn_attrs *a = &n->call->a;
    kn_tensor *q = n->saved_in[0], *k = n->saved_in[1], *v = n->saved_in[2], *out = n->saved_out[0];
    kn_tensor *mask = n->n_in > 3 ? n->saved_in[3] : NULL;
    int nd = n->in_meta[0].ndim, last = nd - 1;
    int64_t tq = n->in_meta[0].shape[nd - 2], tk = n->in_meta[1].shape[nd - 2];
    kn_dtype dt = n->in_meta[0].dtype;
    kn_tensor *s = kn_gb_muls(b, kn_gb_matmul(b, q, kn_gb_mT(b, k)), a->scale);
    kn_tensor *ninf = kn_gb_scalar(b, -INFINITY, dt);
    if (mask && mask->dtype == KN_BOOL) s = kn_gb_where(b, mask, s, ninf);
    else if (mask) s = kn_gb_add(b, s, mask);
    if (a->causal) { /* query i sees keys j <= i */
        int64_t col[2] = {tq, 1}, row[2] = {1, tk};
        kn_tensor *i = kn_gb_reshape(b, kn_gb_arange(b, tq, 0, 1), 2, col);
        kn_tensor *j = kn_gb_reshape(b, kn_gb_arange(b, tk, 0, 1), 2, row);
        s = kn_gb_where(b, kn_gb_binary(b, KN_OP_GT, j, i), ninf, s);
    }
    kn_tensor *p = kn_gb_softmax(b, KN_OP_SOFTMAX, s, last);
    if (KN_NEED(n, 2)) gin[2] = kn_gb_matmul(b, kn_gb_mT(b, p), G);
    /* softmax's gradient, with sum_j p_ij dp_ij = g_i . out_i */
    kn_tensor *gp = kn_gb_matmul(b, G, kn_gb_mT(b, v));
    kn_tensor *dot = kn_gb_sum(b, kn_gb_mul(b, G, out), 1, &last, true);
    kn_tensor *gs = kn_gb_mul(b, p, kn_gb_sub(b, gp, dot));
    if (KN_NEED(n, 0)) gin[0] = kn_gb_muls(b, kn_gb_matmul(b, gs, k), a->scale);
    if (KN_NEED(n, 1)) gin[1] = kn_gb_muls(b, kn_gb_matmul(b, kn_gb_mT(b, gs), q), a->scale);
    if (n->n_in > 3 && KN_NEED(n, 3)) gin[3] = kn_gb_sum_to(b, gs, &n->in_meta[3]);
}
