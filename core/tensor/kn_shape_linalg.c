/* kn_shape_linalg: shape rules for matmul, conv2d and the 2-D pools.
 *
 * These are the guards in front of kernels/cpu/kn_cpu_matmul.c and
 * kn_cpu_conv.c: every input the kernels index with has been checked here,
 * so the kernels can trust their shapes. Output sizes follow PyTorch's
 * formulas exactly (the test suite compares against them), and all size
 * arithmetic is overflow-checked because a view can carry any int64 dims.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kn_shape_linalg.h"

#define SHAPE_BUF 160 /* "{a,b,...}" with 8 int64 dims fits */

/* ---- shared checks ---- */

/* Input count within [lo, hi] and no NULL input. */
static kn_status check_inputs(const kn_opcall *c, int lo, int hi, const char *what)
{
    const char *name = kn_op_name(c->op);
    if (c->n_in < lo || c->n_in > hi) {
        if (lo == hi)
            return kn_error(KN_ERR_ARG, "%s: expects %d input%s, got %d", name, lo,
                            lo == 1 ? "" : "s", c->n_in);
        return kn_error(KN_ERR_ARG, "%s: expects %d to %d inputs (%s), got %d", name, lo, hi,
                        what, c->n_in);
    }
    for (int i = 0; i < c->n_in; i++)
        if (!c->in[i]) return kn_error(KN_ERR_ARG, "%s: input %d is missing (NULL)", name, i + 1);
    return KN_OK;
}

/* A float dtype for input i; `role` names it in the message ("weight"). */
static kn_status check_float(const kn_opcall *c, int i, const char *role)
{
    kn_dtype dt = c->in[i]->dtype;
    if (!kn_dtype_is_float(dt))
        return kn_error(KN_ERR_DTYPE, "%s: %s must be a float tensor (f32, f64, bf16, f16), got %s",
                        kn_op_name(c->op), role, kn_dtype_name(dt));
    return KN_OK;
}

static const char *shape_of(const kn_tensor *t, char *buf)
{
    return kn_shape_str(t->ndim, t->shape, buf, SHAPE_BUF);
}

/* Output size of a sliding window along one dim, as PyTorch computes it for
 * conv (ceil_mode 0) and pools:
 *   out = floor_or_ceil((in + 2*pad - dil*(k-1) - 1) / stride) + 1,
 * and in ceil mode the last window must start inside the input or the left
 * padding. Returns false when the window does not fit (out < 1) or the
 * arithmetic would overflow. All arguments are already checked positive
 * (pad non-negative). */
static bool window_out(int64_t in, int64_t pad, int64_t k, int64_t dil, int64_t stride,
                       bool ceil_mode, int64_t *out)
{
    int64_t span, padded, num;
    if (__builtin_mul_overflow(dil, k - 1, &span) || __builtin_add_overflow(span, 1, &span))
        return false;
    if (__builtin_add_overflow(in, 2 * pad, &padded)) return false;
    num = padded - span; /* both non-negative: cannot overflow */
    if (num < 0) return false;
    if (ceil_mode && __builtin_add_overflow(num, stride - 1, &num)) return false;
    int64_t o = num / stride + 1;
    if (ceil_mode && (o - 1) * stride >= in + pad) o--; /* (o-1)*stride <= num fits */
    if (o < 1) return false;
    *out = o;
    return true;
}

/* ---- matmul ---- */

/* PyTorch semantics: 1-D x 1-D is a dot product (0-dim result); a 1-D
 * operand gets a 1 prepended (left) or appended (right) that is removed from
 * the result; dims before the last two broadcast as batch dims. */
kn_status kn_infer_matmul(const kn_opcall *c, kn_meta *out)
{
    char sa[SHAPE_BUF], sb[SHAPE_BUF];
    KN_TRY(check_inputs(c, 2, 2, ""));
    const kn_tensor *a = c->in[0], *b = c->in[1];
    if (!kn_dtype_is_float(a->dtype) || !kn_dtype_is_float(b->dtype))
        return kn_error(KN_ERR_DTYPE, "matmul: expects float tensors (f32, f64, bf16, f16), got %s and %s",
                        kn_dtype_name(a->dtype), kn_dtype_name(b->dtype));
    if (a->ndim < 1 || b->ndim < 1)
        return kn_error(KN_ERR_SHAPE, "matmul: both operands need at least 1 dim, got shapes %s and %s",
                        shape_of(a, sa), shape_of(b, sb));
    int na = a->ndim, nb = b->ndim;
    int64_t ka = a->shape[na - 1];
    int64_t kb = nb == 1 ? b->shape[0] : b->shape[nb - 2];
    if (ka != kb)
        return kn_error(KN_ERR_SHAPE, "matmul: shapes %s and %s cannot be multiplied",
                        shape_of(a, sa), shape_of(b, sb));
    /* Batch dims: all but the last two of each operand, right-aligned. */
    int ba = na > 2 ? na - 2 : 0, bb = nb > 2 ? nb - 2 : 0;
    int nbat = ba > bb ? ba : bb;
    out->dtype = kn_dtype_promote(a->dtype, b->dtype);
    out->ndim = 0;
    for (int i = 0; i < nbat; i++) {
        int ia = i - (nbat - ba), ib = i - (nbat - bb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return kn_error(KN_ERR_SHAPE,
                            "matmul: shapes %s and %s cannot be multiplied (batch dims do not "
                            "broadcast: %lld and %lld)",
                            shape_of(a, sa), shape_of(b, sb), (long long)da, (long long)db);
        out->shape[out->ndim++] = da == 1 ? db : da;
    }
    if (na >= 2) out->shape[out->ndim++] = a->shape[na - 2];
    if (nb >= 2) out->shape[out->ndim++] = b->shape[nb - 1];
    return kn_shape_check("matmul", out->ndim, out->shape, out->dtype);
}

/* ---- conv2d ---- */

/* x (N,C,H,W) or unbatched (C,H,W); w (O, C/groups, kh, kw); bias (O). */
kn_status kn_infer_conv2d(const kn_opcall *c, kn_meta *out)
{
    char sx[SHAPE_BUF], sw[SHAPE_BUF];
    const kn_attrs *at = &c->a;
    KN_TRY(check_inputs(c, 2, 3, "x, weight [, bias]"));
    const kn_tensor *x = c->in[0], *w = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
    KN_TRY(check_float(c, 0, "input"));
    KN_TRY(check_float(c, 1, "weight"));
    if (bias) KN_TRY(check_float(c, 2, "bias"));
    /* channels-last (set by the layout pass only): x {N, H, W, C} when
     * in_layout is NHWC, the output {N, P, Q, K} when out_layout is; the
     * weight {K, kh, kw, Cw} with Cw >= C/groups (zero-padded channels) */
    bool x_cl = at->in_layout == KN_LAYOUT_NHWC, y_cl = at->out_layout == KN_LAYOUT_NHWC, w_cl = x_cl || y_cl;
    if ((at->in_layout != KN_LAYOUT_NCHW && !x_cl) || (at->out_layout != KN_LAYOUT_NCHW && !y_cl))
        return kn_error(KN_ERR_ARG, "conv2d: unknown layout (in %d, out %d)", at->in_layout, at->out_layout);
    if (x->ndim != 3 && x->ndim != 4)
        return kn_error(KN_ERR_SHAPE, "conv2d: input must have 4 dims {N, C, H, W} or 3 dims {C, H, W}, got %s",
                        shape_of(x, sx));
    if (w_cl && x->ndim != 4)
        return kn_error(KN_ERR_SHAPE, "conv2d: a channels-last conv needs a 4-dim input, got %s", shape_of(x, sx));
    if (w->ndim != 4)
        return kn_error(KN_ERR_SHAPE, "conv2d: weight must have 4 dims {out, in/groups, kh, kw}, got %s",
                        shape_of(w, sw));
    for (int i = 0; i < 2; i++) {
        if (at->stride[i] <= 0)
            return kn_error(KN_ERR_ARG, "conv2d: stride must be positive, got {%d,%d}",
                            at->stride[0], at->stride[1]);
        if (at->padding[i] < 0)
            return kn_error(KN_ERR_ARG, "conv2d: padding must be non-negative, got {%d,%d}",
                            at->padding[0], at->padding[1]);
        if (at->dilation[i] <= 0)
            return kn_error(KN_ERR_ARG, "conv2d: dilation must be positive, got {%d,%d}",
                            at->dilation[0], at->dilation[1]);
    }
    if (at->groups <= 0)
        return kn_error(KN_ERR_ARG, "conv2d: groups must be positive, got %d", at->groups);
    int xo = x->ndim - 3; /* index of the channel dim (NCHW) */
    int xc = x_cl ? 3 : xo, xh = x_cl ? 1 : xo + 1, xw = x_cl ? 2 : xo + 2;
    int64_t chans = x->shape[xc], oc = w->shape[0], per_group = w->shape[w_cl ? 3 : 1];
    int64_t kh = w->shape[w_cl ? 1 : 2], kw = w->shape[w_cl ? 2 : 3], want;
    if (kh <= 0 || kw <= 0)
        return kn_error(KN_ERR_SHAPE, "conv2d: weight kernel size must be positive, got weight %s",
                        shape_of(w, sw));
    if (__builtin_mul_overflow(per_group, (int64_t)at->groups, &want))
        want = -1;
    /* padded weight channels: one group only (groups split the padded dim otherwise) */
    bool fits = w_cl && at->groups == 1 ? want >= chans : want == chans;
    if (!fits)
        return kn_error(KN_ERR_SHAPE, "conv2d: input has %lld channels but weight expects %lld (groups %d): input %s, weight %s",
                        (long long)chans, (long long)per_group * at->groups, at->groups,
                        shape_of(x, sx), shape_of(w, sw));
    if (oc % at->groups != 0)
        return kn_error(KN_ERR_SHAPE, "conv2d: weight has %lld output channels, not divisible by groups %d",
                        (long long)oc, at->groups);
    if (bias && (bias->ndim != 1 || bias->shape[0] != oc))
        return kn_error(KN_ERR_SHAPE, "conv2d: bias must have shape {%lld} (one per output channel), got %s",
                        (long long)oc, shape_of(bias, sx));
    int64_t oh, ow;
    if (!window_out(x->shape[xh], at->padding[0], kh, at->dilation[0], at->stride[0], false, &oh) ||
        !window_out(x->shape[xw], at->padding[1], kw, at->dilation[1], at->stride[1], false, &ow))
        return kn_error(KN_ERR_SHAPE, "conv2d: input %s with padding {%d,%d} is smaller than the kernel %lldx%lld (dilation {%d,%d})",
                        shape_of(x, sx), at->padding[0], at->padding[1], (long long)kh,
                        (long long)kw, at->dilation[0], at->dilation[1]);
    kn_dtype dt = kn_dtype_promote(x->dtype, w->dtype);
    if (bias) dt = kn_dtype_promote(dt, bias->dtype);
    out->dtype = dt;
    out->ndim = 0;
    if (xo) out->shape[out->ndim++] = x->shape[0];
    if (!y_cl) out->shape[out->ndim++] = oc;
    out->shape[out->ndim++] = oh;
    out->shape[out->ndim++] = ow;
    if (y_cl) out->shape[out->ndim++] = oc;
    return kn_shape_check("conv2d", out->ndim, out->shape, out->dtype);
}

/* conv2d's gradients: the input's from (grad_out, w), the weight's from
 * (x, grad_out), the missing operand's shape in attr.shape. Checked as the
 * forward conv on that shape would be, and grad_out against the forward's
 * output. NCHW, 4 dims (autograd's rule makes them so); or, from the
 * layout pass, channels-last in and out (in_layout and out_layout NHWC):
 * every operand and the result {N, H, W, C} (a weight {K, kh, kw, C/groups}),
 * attr.shape so too. */
kn_status kn_infer_conv2d_grad(const kn_opcall *c, kn_meta *out)
{
    char sa[SHAPE_BUF], sb[SHAPE_BUF];
    const char *name = kn_op_name(c->op);
    bool input_grad = c->op == KN_OP_CONV2D_INPUT_GRAD;
    KN_TRY(check_inputs(c, 2, 2, input_grad ? "grad_output, weight" : "input, grad_output"));
    KN_TRY(check_float(c, 0, input_grad ? "grad_output" : "input"));
    KN_TRY(check_float(c, 1, input_grad ? "weight" : "grad_output"));
    bool nhwc = c->a.in_layout == KN_LAYOUT_NHWC && c->a.out_layout == KN_LAYOUT_NHWC;
    if (!nhwc && (c->a.in_layout != KN_LAYOUT_NCHW || c->a.out_layout != KN_LAYOUT_NCHW))
        return kn_error(KN_ERR_ARG, "%s: NCHW, or channels-last in and out", name);
    if (c->a.nshape != 4)
        return kn_error(KN_ERR_ARG, "%s: attr shape must be the %s's 4 dims, got %d", name,
                        input_grad ? "input" : "weight", c->a.nshape);
    for (int i = 0; i < 2; i++)
        if (c->in[i]->ndim != 4)
            return kn_error(KN_ERR_SHAPE, "%s: input %d must have 4 dims, got %s", name, i + 1, shape_of(c->in[i], sa));
    /* the forward call this is the gradient of, on headers (NCHW dims) */
    static const int nchw_of[4] = {0, 3, 1, 2};
    kn_tensor in0 = *c->in[0], in1 = *c->in[1];
    int64_t attr_shape[4];
    for (int d = 0; d < 4; d++) {
        int s = nhwc ? nchw_of[d] : d;
        in0.shape[d] = c->in[0]->shape[s];
        in1.shape[d] = c->in[1]->shape[s];
        attr_shape[d] = c->a.shape[s];
    }
    kn_tensor fx = {0}, fw = {0};
    const kn_tensor *g = input_grad ? &in0 : &in1, *known = input_grad ? &in1 : &in0;
    kn_tensor *shaped = input_grad ? &fx : &fw;
    *(input_grad ? &fw : &fx) = *known;
    shaped->dtype = known->dtype;
    shaped->ndim = 4;
    for (int d = 0; d < 4; d++) shaped->shape[d] = attr_shape[d];
    kn_opcall f;
    kn_opcall_init(&f, KN_OP_CONV2D);
    f.a = c->a;
    f.a.in_layout = f.a.out_layout = KN_LAYOUT_NCHW;
    f.n_in = 2;
    f.in[0] = &fx;
    f.in[1] = &fw;
    kn_meta fy;
    KN_TRY(kn_infer_conv2d(&f, &fy));
    if (fy.ndim != 4 || memcmp(fy.shape, g->shape, sizeof(int64_t) * 4) != 0)
        return kn_error(KN_ERR_SHAPE, "%s: grad_output %s is not the shape of the forward's output %s", name,
                        shape_of(g, sa), kn_shape_str(fy.ndim, fy.shape, sb, SHAPE_BUF));
    out->dtype = kn_dtype_promote(c->in[0]->dtype, c->in[1]->dtype);
    out->ndim = 4;
    memcpy(out->shape, c->a.shape, sizeof(int64_t) * 4);
    return kn_shape_check(name, out->ndim, out->shape, out->dtype);
}

/* ---- pools ---- */

/* Fixed-window pools (max, avg): kernel, stride, padding, ceil_mode; max
 * also takes dilation. */
static kn_status infer_window_pool(const kn_opcall *c, const kn_tensor *x, int64_t *oh,
                                   int64_t *ow)
{
    const char *name = kn_op_name(c->op);
    const kn_attrs *at = &c->a;
    char sx[SHAPE_BUF];
    bool is_max = c->op == KN_OP_MAX_POOL2D;
    for (int i = 0; i < 2; i++) {
        if (at->kernel[i] <= 0)
            return kn_error(KN_ERR_ARG, "%s: kernel size must be positive, got {%d,%d}", name,
                            at->kernel[0], at->kernel[1]);
        if (at->stride[i] <= 0)
            return kn_error(KN_ERR_ARG, "%s: stride must be positive, got {%d,%d}", name,
                            at->stride[0], at->stride[1]);
        if (at->padding[i] < 0 || at->padding[i] > at->kernel[i] / 2)
            return kn_error(KN_ERR_ARG, "%s: padding must be between 0 and half the kernel {%d,%d}, got {%d,%d}",
                            name, at->kernel[0], at->kernel[1], at->padding[0], at->padding[1]);
        if (is_max ? at->dilation[i] <= 0 : at->dilation[i] != 1)
            return kn_error(KN_ERR_ARG, is_max ? "%s: dilation must be positive, got {%d,%d}"
                                               : "%s: dilation must be 1, got {%d,%d}",
                            name, at->dilation[0], at->dilation[1]);
    }
    int xo = x->ndim - 3;
    if (!window_out(x->shape[xo + 1], at->padding[0], at->kernel[0], at->dilation[0],
                    at->stride[0], at->ceil_mode, oh) ||
        !window_out(x->shape[xo + 2], at->padding[1], at->kernel[1], at->dilation[1],
                    at->stride[1], at->ceil_mode, ow))
        return kn_error(KN_ERR_SHAPE, "%s: input %s with padding {%d,%d} is too small for kernel {%d,%d} (output size would be < 1)",
                        name, shape_of(x, sx), at->padding[0], at->padding[1], at->kernel[0],
                        at->kernel[1]);
    return KN_OK;
}

static kn_status infer_pool2d_nchw(const kn_opcall *c, kn_meta *out);

/* max_pool2d, avg_pool2d, adaptive_avg_pool2d on (N,C,H,W) or (C,H,W); or,
 * with in_layout and out_layout NHWC (the layout pass's form), on
 * {N, H, W, C} giving {N, OH, OW, C}. */
kn_status kn_infer_pool2d(const kn_opcall *c, kn_meta *out)
{
    const kn_attrs *at = &c->a;
    if (at->in_layout == KN_LAYOUT_NCHW && at->out_layout == KN_LAYOUT_NCHW) return infer_pool2d_nchw(c, out);
    const char *name = kn_op_name(c->op);
    if (at->in_layout != KN_LAYOUT_NHWC || at->out_layout != KN_LAYOUT_NHWC)
        return kn_error(KN_ERR_ARG, "%s: unknown layout (in %d, out %d)", name, at->in_layout, at->out_layout);
    KN_TRY(check_inputs(c, 1, 1, ""));
    if (c->in[0]->ndim != 4) {
        char sx[SHAPE_BUF];
        return kn_error(KN_ERR_SHAPE, "%s: a channels-last input must have 4 dims {N, H, W, C}, got %s", name,
                        shape_of(c->in[0], sx));
    }
    /* the same pool over the NCHW-ordered header of x (shape and strides
     * permuted by hand: kn_view would make this file depend on eager ops) */
    static const int from[4] = {0, 3, 1, 2};
    kn_opcall nchw = *c;
    kn_tensor xv = *c->in[0];
    for (int d = 0; d < 4; d++) {
        xv.shape[d] = c->in[0]->shape[from[d]];
        xv.strides[d] = c->in[0]->strides[from[d]];
    }
    nchw.in[0] = &xv;
    nchw.a.in_layout = nchw.a.out_layout = KN_LAYOUT_NCHW;
    KN_TRY(infer_pool2d_nchw(&nchw, out));
    int64_t ch = out->shape[1];
    out->shape[1] = out->shape[2];
    out->shape[2] = out->shape[3];
    out->shape[3] = ch;
    return KN_OK;
}

static kn_status infer_pool2d_nchw(const kn_opcall *c, kn_meta *out)
{
    const char *name = kn_op_name(c->op);
    char sx[SHAPE_BUF];
    KN_TRY(check_inputs(c, 1, 1, ""));
    const kn_tensor *x = c->in[0];
    KN_TRY(check_float(c, 0, "input"));
    if (x->ndim != 3 && x->ndim != 4)
        return kn_error(KN_ERR_SHAPE, "%s: input must have 4 dims {N, C, H, W} or 3 dims {C, H, W}, got %s",
                        name, shape_of(x, sx));
    int xo = x->ndim - 3;
    /* An empty window has no max and no mean: PyTorch refuses empty H, W. */
    if (x->shape[xo + 1] == 0 || x->shape[xo + 2] == 0)
        return kn_error(KN_ERR_SHAPE, "%s: input must have non-zero height and width, got %s", name,
                        shape_of(x, sx));
    int64_t oh, ow;
    if (c->op == KN_OP_ADAPTIVE_AVG_POOL2D) {
        const kn_attrs *at = &c->a;
        if (at->nshape != 2 || at->shape[0] <= 0 || at->shape[1] <= 0) {
            char so[SHAPE_BUF];
            int n = at->nshape < 0 ? 0 : at->nshape > KN_MAX_DIMS ? KN_MAX_DIMS : at->nshape;
            return kn_error(KN_ERR_ARG, "%s: output size must be 2 positive sizes {oh, ow}, got %s",
                            name, kn_shape_str(n, at->shape, so, SHAPE_BUF));
        }
        oh = at->shape[0];
        ow = at->shape[1];
    } else if (c->op == KN_OP_MAX_POOL2D || c->op == KN_OP_AVG_POOL2D) {
        KN_TRY(infer_window_pool(c, x, &oh, &ow));
    } else {
        return kn_error(KN_ERR_ARG, "%s: not a 2-D pool", name);
    }
    out->dtype = x->dtype;
    out->ndim = x->ndim;
    for (int i = 0; i <= xo; i++) out->shape[i] = x->shape[i];
    out->shape[xo + 1] = oh;
    out->shape[xo + 2] = ow;
    return kn_shape_check(name, out->ndim, out->shape, out->dtype);
}

/* ---- scaled_dot_product_attention ---- */

/* Every shape or dtype mismatch among q, k and v names all three, since the
 * fault is often in how the caller split heads, not in one tensor. */
static kn_status attention_mismatch(const kn_opcall *c, kn_status st, const char *why)
{
    char sq[SHAPE_BUF], sk[SHAPE_BUF], sv[SHAPE_BUF];
    const kn_tensor *q = c->in[0], *k = c->in[1], *v = c->in[2];
    return kn_error(st, "scaled_dot_product_attention: %s: q %s (%s), k %s (%s), v %s (%s)", why,
                    shape_of(q, sq), kn_dtype_name(q->dtype), shape_of(k, sk), kn_dtype_name(k->dtype),
                    shape_of(v, sv), kn_dtype_name(v->dtype));
}

kn_status kn_infer_attention(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_inputs(c, 3, 4, "q, k, v [, mask]"));
    const kn_tensor *q = c->in[0], *k = c->in[1], *v = c->in[2];
    if (!kn_dtype_is_float(q->dtype))
        return attention_mismatch(c, KN_ERR_DTYPE, "q, k and v must be float tensors (f32, f64, bf16, f16)");
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return attention_mismatch(c, KN_ERR_DTYPE, "q, k and v must have one dtype");
    if (q->ndim < 2 || k->ndim != q->ndim || v->ndim != q->ndim)
        return attention_mismatch(c, KN_ERR_SHAPE, "q, k and v need the same number of dims, at least 2 ([..., T, d])");
    int nd = q->ndim;
    for (int i = 0; i < nd - 2; i++)
        if (k->shape[i] != q->shape[i] || v->shape[i] != q->shape[i]) {
            char why[96];
            snprintf(why, sizeof why, "leading dim %d differs", i + 1);
            return attention_mismatch(c, KN_ERR_SHAPE, why);
        }
    if (k->shape[nd - 1] != q->shape[nd - 1])
        return attention_mismatch(c, KN_ERR_SHAPE, "k's last dim (head size) must equal q's");
    if (v->shape[nd - 2] != k->shape[nd - 2])
        return attention_mismatch(c, KN_ERR_SHAPE, "v's second-to-last dim (keys) must equal k's");
    if (!isfinite(c->a.scale))
        return kn_error(KN_ERR_ARG, "scaled_dot_product_attention: scale must be finite, got %g", c->a.scale);
    out->dtype = q->dtype;
    out->ndim = nd;
    for (int i = 0; i < nd - 1; i++) out->shape[i] = q->shape[i];
    out->shape[nd - 1] = v->shape[nd - 1];
    if (c->n_in == 4) {
        const kn_tensor *m = c->in[3];
        if (m->dtype != KN_BOOL && m->dtype != q->dtype)
            return kn_error(KN_ERR_DTYPE,
                            "scaled_dot_product_attention: mask must be bool (keep where true) or q's dtype %s "
                            "(added to the scores), got %s",
                            kn_dtype_name(q->dtype), kn_dtype_name(m->dtype));
        /* the mask broadcasts to the scores [..., Tq, Tk], never the reverse */
        int64_t scores[KN_MAX_DIMS];
        for (int i = 0; i < nd - 1; i++) scores[i] = q->shape[i];
        scores[nd - 1] = k->shape[nd - 2];
        bool fits = m->ndim <= nd;
        for (int i = 0; fits && i < m->ndim; i++) {
            int64_t dm = m->shape[m->ndim - 1 - i], ds = scores[nd - 1 - i];
            fits = dm == ds || dm == 1;
        }
        if (!fits) {
            char sm[SHAPE_BUF], ss[SHAPE_BUF];
            return kn_error(KN_ERR_SHAPE,
                            "scaled_dot_product_attention: mask of shape %s cannot be broadcast to the scores' "
                            "shape %s ([..., Tq, Tk])",
                            shape_of(m, sm), kn_shape_str(nd, scores, ss, SHAPE_BUF));
        }
    }
    return kn_shape_check("scaled_dot_product_attention", out->ndim, out->shape, out->dtype);
}
