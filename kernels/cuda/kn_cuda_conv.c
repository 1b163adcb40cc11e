/* kn_cuda_conv: conv2d on the GPU, the choice of engine for each call:
 * kiln's own kernels where they measured faster (an image's stem, the
 * depthwise convs, the split-precision f32 convolution on Hopper), a
 * GEMM where the conv is one (1x1, a patch embedding, one pixel), cuDNN
 * (kn_cuda_dnn.c) for the rest, and kiln's direct convolution for what
 * cuDNN refuses or where it is not built in. The order is also the order
 * of a call's variants, which max-autotune measures.
 */
#include "kn_cuda_conv.h"

#include <string.h>

#include "kn_cuda_blas.h"
#include "kn_cuda_context.h"
#include "kn_cuda_conv_x3.h"
#include "kn_cuda_linalg.h"
#include "kn_cuda_ops.h"
#include "kn_view.h"

/* The matmul a conv runs as (a . b into out), with the conv call's
 * settings: no attrs, variant 0 (the conv's variants were counted). */
static kn_opcall matmul_call(const kn_opcall *c, kn_tensor *a, kn_tensor *b, kn_tensor *out)
{
    kn_opcall mm = *c;
    mm.op = KN_OP_MATMUL;
    mm.n_in = 2;
    mm.in[0] = a;
    mm.in[1] = b;
    mm.in[2] = NULL;
    mm.out[0] = out;
    mm.n_out = 1;
    mm.variant = 0;
    memset(&mm.a, 0, sizeof mm.a);
    return mm;
}

/* Whether a channels-last 1x1 conv is a GEMM over x's own bytes: no
 * padding, one group, x's channels the weight's (no padded copy). */
static bool conv_is_gemm(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at)
{
    return at->in_layout == KN_LAYOUT_NHWC && at->out_layout == KN_LAYOUT_NHWC && at->groups == 1 && x->ndim == 4 &&
           w->ndim == 4 && w->shape[1] == 1 && w->shape[2] == 1 && at->padding[0] == 0 && at->padding[1] == 0 &&
           x->shape[3] == w->shape[3] && x->strides[3] == 1 && kn_tensor_is_contiguous(w) &&
           kn_tensor_is_contiguous(y) && x->dtype == y->dtype && w->dtype == y->dtype;
}

/* A channels-last 1x1 conv as a cuBLASLt matmul, bias and act in its
 * epilogue: y {N, P, Q, K} = x {N, P, Q, C} . w{K, C}^T, with x the
 * strided view of the conv's input that a stride picks (rows sw*C apart,
 * image rows sh*W*C: one strided batch when H = P*sh, as in ResNet's
 * downsample convs; else the matmul copies it). cuDNN's heuristic picks
 * ran such convs at 5-7% of their roofline (H100, bf16: ResNet-18's
 * 32x56x56x64 -> 28x28x128 stride 2, 53 us; MobileNetV3's 112 -> 672
 * expansions on 14x14, 34 us). */
static kn_status conv_gemm(const kn_opcall *c, const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias,
                           kn_tensor *y, int act, const kn_tensor *residual)
{
    kn_tensor v = *x, b = *w, a, out = *y;
    int64_t sh = c->a.stride[0], sw = c->a.stride[1];
    v.shape[1] = y->shape[1], v.shape[2] = y->shape[2];
    v.strides[1] = x->strides[1] * sh, v.strides[2] = x->strides[2] * sw;
    /* one GEMM of N*P*Q rows: a strided view is copied first (as a batch
     * of Q-row GEMMs, ResNet-50's 14 -> 7 downsample was 59 us, against
     * cuDNN's 7) */
    kn_tensor *tmp = NULL;
    if (!kn_tensor_is_contiguous(&v)) KN_TRY(kn_cuda_copy_as(&v, v.dtype, &tmp));
    a = tmp ? *tmp : v;
    int64_t rows = y->shape[0] * y->shape[1] * y->shape[2];
    a.ndim = 2;
    a.shape[0] = rows, a.shape[1] = x->shape[3];
    a.strides[0] = x->shape[3], a.strides[1] = 1;
    out.ndim = 2;
    out.shape[0] = rows, out.shape[1] = y->shape[3];
    out.strides[0] = y->shape[3], out.strides[1] = 1;
    b.ndim = 2; /* {C, K}: w {K, 1, 1, C} read transposed */
    b.shape[0] = w->shape[3], b.shape[1] = w->shape[0];
    b.strides[0] = 1, b.strides[1] = w->shape[3];
    kn_opcall mm = matmul_call(c, &a, &b, &out);
    kn_tensor res2;
    if (residual) { /* the conv's output shape, contiguous: the same rows */
        res2 = *residual;
        res2.ndim = 2;
        res2.shape[0] = rows, res2.shape[1] = y->shape[3];
        res2.strides[0] = y->shape[3], res2.strides[1] = 1;
    }
    kn_status st = kn_cuda_matmul_fused(&mm, bias, act, residual ? &res2 : NULL);
    kn_tensor_release(tmp);
    return st;
}

/* A 1x1 conv of one pixel in and out in NCHW (squeeze-excitation's two
 * fcs, which f32 models keep NCHW): NCHW and NHWC are then the same bytes,
 * so it can run as the channels-last GEMM. cuDNN's engines took 4-38 us
 * for MobileNetV3's (16 x 960 -> 240 the slowest, f32 on an H200), about
 * 290 us of the model's 1844; cuBLASLt's bf16 GEMMs of the same shapes
 * took 3. */
static bool conv_one_pixel_nchw(const kn_opcall *c, const kn_tensor *x, const kn_tensor *w, const kn_tensor *y)
{
    return c->a.in_layout == KN_LAYOUT_NCHW && c->a.out_layout == KN_LAYOUT_NCHW && c->a.groups == 1 &&
           x->ndim == 4 && w->ndim == 4 && y->ndim == 4 && x->shape[2] == 1 && x->shape[3] == 1 &&
           y->shape[2] == 1 && y->shape[3] == 1 && w->shape[2] == 1 && w->shape[3] == 1;
}

/* A patch embedding: a conv whose kernel is its stride (no padding, no
 * dilation, one group), as ViT's 16x16 stride-16 convolution. Its windows
 * do not overlap, so the im2col matrix is a permuted view of x's own
 * bytes: one copy makes it [N*P*Q, taps] in the weight's tap order, and
 * one GEMM does the rest. cuDNN's pick ran ViT-B/16's (bf16, 8 images)
 * at 4% of its roofline: 136 us on the H200. */
static bool conv_is_patches(const kn_opcall *c, const kn_tensor *x, const kn_tensor *w, const kn_tensor *y)
{
    const kn_attrs *at = &c->a;
    bool nhwc_w = at->in_layout == KN_LAYOUT_NHWC || at->out_layout == KN_LAYOUT_NHWC;
    int64_t kh = w->ndim == 4 ? w->shape[nhwc_w ? 1 : 2] : 0, kw = w->ndim == 4 ? w->shape[nhwc_w ? 2 : 3] : 0;
    return x->ndim == 4 && w->ndim == 4 && y->ndim == 4 && kn_conv_is_patch_embedding(at, kh, kw) &&
           kn_tensor_is_contiguous(w) &&
           w->shape[nhwc_w ? 3 : 1] == x->shape[at->in_layout == KN_LAYOUT_NHWC ? 3 : 1] && /* no padded channels */
           kn_tensor_is_contiguous(y) && x->dtype == y->dtype && w->dtype == y->dtype;
}

/* Whether conv_run takes call c (headers will do) to kiln's
 * split-precision convolution: not a conv that a GEMM runs (1x1, a patch
 * embedding), nor a chain's first conv (NCHW in) that the stem kernel
 * takes, which reads the image where it lies (convnet's, f32 on an H200:
 * 75 us with bias and ReLU, against 176 for the split kernel on 4 padded
 * channels, whose k of 36 leaves its tensor cores idle, and 60 more for
 * laying the image out; bench/split_conv.c) */
static bool conv_runs_split(const kn_opcall *c)
{
    const kn_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
    return kn_cuda_conv_x3_takes(x, w, y, &c->a) && !conv_is_gemm(x, w, y, &c->a) && !conv_is_patches(c, x, w, y) &&
           !kn_cuda_linalg_stem_fits(x, w, y, &c->a);
}

static kn_status conv_patches(const kn_opcall *c, const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias,
                              kn_tensor *y, int act)
{
    const kn_attrs *at = &c->a;
    bool x_nhwc = at->in_layout == KN_LAYOUT_NHWC, y_nhwc = at->out_layout == KN_LAYOUT_NHWC;
    bool w_nhwc = x_nhwc || y_nhwc; /* the weight is laid out as the conv's channels-last form, {K, KH, KW, C} */
    /* x's strides by logical dim */
    int64_t sn = x->strides[0], sc = x->strides[x_nhwc ? 3 : 1], sh = x->strides[x_nhwc ? 1 : 2],
            sw = x->strides[x_nhwc ? 2 : 3];
    int64_t C = x->shape[x_nhwc ? 3 : 1];
    int64_t K = w->shape[0], KH = w->shape[w_nhwc ? 1 : 2], KW = w->shape[w_nhwc ? 2 : 3];
    int64_t N = y->shape[0], P = y->shape[y_nhwc ? 1 : 2], Q = y->shape[y_nhwc ? 2 : 3];
    /* the patches [N, P, Q, taps...] with the taps in the weight's order */
    kn_tensor v = *x;
    v.ndim = 6;
    int64_t shp[6] = {N, P, Q, 0, 0, 0}, str[6] = {sn, sh * KH, sw * KW, 0, 0, 0};
    if (w_nhwc) {
        shp[3] = KH, shp[4] = KW, shp[5] = C;
        str[3] = sh, str[4] = sw, str[5] = sc;
    } else {
        shp[3] = C, shp[4] = KH, shp[5] = KW;
        str[3] = sc, str[4] = sh, str[5] = sw;
    }
    memcpy(v.shape, shp, sizeof shp);
    memcpy(v.strides, str, sizeof str);
    kn_tensor *pt = NULL;
    /* an NCHW image with taps channel-innermost: the staged copy (the view's
     * copy reads the channels' planes an element at a time; kn_patches) */
    kn_status pst = w_nhwc && !x_nhwc ? kn_cuda_patches(x, KH, KW, &pt) : KN_ERR_UNSUPPORTED;
    if (pst != KN_OK && pst != KN_ERR_UNSUPPORTED) return pst;
    if (!pt) KN_TRY(kn_cuda_copy_as(&v, v.dtype, &pt));
    int64_t taps = C * KH * KW;
    kn_tensor a = *pt, b = *w, out = *y;
    b.ndim = 2; /* {taps, K}: w {K, taps} read transposed */
    b.shape[0] = taps, b.shape[1] = K;
    b.strides[0] = 1, b.strides[1] = taps;
    if (y_nhwc) { /* y {N*P*Q, K} = patches {N*P*Q, taps} . w^T */
        a.ndim = 2;
        a.shape[0] = N * P * Q, a.shape[1] = taps;
        a.strides[0] = taps, a.strides[1] = 1;
        out.ndim = 2;
        out.shape[0] = N * P * Q, out.shape[1] = K;
        out.strides[0] = K, out.strides[1] = 1;
    } else { /* y {N, K, P*Q} = w {K, taps} . patches[n]^T {taps, P*Q} */
        a = *w;
        a.ndim = 2;
        a.shape[0] = K, a.shape[1] = taps;
        a.strides[0] = taps, a.strides[1] = 1;
        b = *pt;
        b.ndim = 3;
        b.shape[0] = N, b.shape[1] = taps, b.shape[2] = P * Q;
        b.strides[0] = P * Q * taps, b.strides[1] = 1, b.strides[2] = taps;
        out.ndim = 3;
        out.shape[0] = N, out.shape[1] = K, out.shape[2] = P * Q;
        out.strides[0] = K * P * Q, out.strides[1] = P * Q, out.strides[2] = 1;
    }
    kn_opcall mm = matmul_call(c, &a, &b, &out);
    kn_status st = y_nhwc ? kn_cuda_matmul_fused(&mm, bias, act, NULL) : kn_cuda_matmul(&mm);
    /* NCHW: the bias is per row of the GEMM, not per column */
    if (st == KN_OK && !y_nhwc && (bias || act)) st = kn_cuda_bias_act(y, bias, P * Q, K, act);
    kn_tensor_release(pt);
    return st;
}

static kn_status conv_run(const kn_opcall *c, int act)
{
    if (c->n_in < 2 || c->n_in > 3 || !c->in[0] || !c->in[1] || (c->n_in == 3 && !c->in[2]) ||
        c->n_out < 1 || !c->out[0])
        return kn_error(KN_ERR_ARG, "conv2d: expects x, weight [, bias] and a preallocated output");
    const kn_tensor *x = c->in[0], *w = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
    kn_tensor *y = c->out[0];
    for (int i = 0; i < c->n_in; i++)
        if (!kn_cuda_on_current(c->in[i]))
            return kn_error(KN_ERR_DEVICE, "conv2d: the CUDA backend got input %d on %s", i + 1,
                            kn_device_name(kn_tensor_device(c->in[i])));
    if (!kn_cuda_on_current(y) || !kn_dtype_is_float(y->dtype))
        return kn_error(KN_ERR_UNSUPPORTED, "conv2d: float cuda outputs only");
    KN_TRY(kn_cuda_init());
    if (kn_tensor_numel(y) == 0) return KN_OK;
    bool nhwc_out = c->a.out_layout == KN_LAYOUT_NHWC;
    if (w->shape[nhwc_out || c->a.in_layout == KN_LAYOUT_NHWC ? 3 : 1] == 0) { /* no input channels: the output is the bias */
        KN_CUDA_TRY(cudaMemsetAsync(kn_cuda_tensor_ptr(y), 0,
                                    (size_t)kn_tensor_numel(y) * kn_dtype_size(y->dtype),
                                    kn_cuda_stream()),
                    "conv2d: zero fill");
        int64_t inner = nhwc_out ? 1 : y->shape[y->ndim - 2] * y->shape[y->ndim - 1];
        return kn_cuda_bias_act(y, bias, inner, w->shape[0], act);
    }
    if (act == KN_EPI_HARDSWISH && !(c->variant == 0 && (kn_cuda_linalg_dw_fits(x, w, y, &c->a) ||
                                                         kn_cuda_linalg_dw_nchw_fits(x, w, y, &c->a)))) {
        /* only kiln's depthwise kernel has hardswish in its epilogue: any
         * other conv runs, then the activation as a pass of its own */
        KN_TRY(conv_run(c, KN_EPI_NONE));
        return kn_cuda_bias_act(y, NULL, 1, 1, KN_EPI_HARDSWISH);
    }
    /* KN_VARIANT_STRICT: the default's choice among the strict f32
     * engines (kiln's CUDA-core kernels, cuDNN's), never the split kernel */
    bool strict = c->variant == KN_VARIANT_STRICT;
    int variant = strict ? 0 : c->variant;
    /* f32 outside TF32 mode on Hopper: kiln's split-precision convolution
     * (its tiles are variants 0-3), where it takes the call and no GEMM
     * does (a 1x1 conv, a patch embedding) */
    if (!strict && conv_runs_split(c)) {
        if (variant < kn_cuda_conv_x3_variant_count()) {
            kn_status st = kn_cuda_conv_x3_run(x, w, bias, y, &c->a, act, NULL, variant);
            if (st != KN_ERR_UNSUPPORTED || variant) return st;
            /* the default, refused at run time (alignment): the engines below */
        }
        variant -= variant ? kn_cuda_conv_x3_variant_count() : 0;
    }
    /* a stem (an image's few channels): kiln's kernel is variant 0, and
     * cuDNN's configs follow it (max-autotune measures both) */
    if (kn_cuda_linalg_stem_tc_fits(x, w, y, &c->a)) { /* bf16, f16: the tensor cores first */
        if (variant == 0) return kn_cuda_linalg_conv_stem_tc(x, w, bias, y, &c->a, act);
        variant--;
    }
    if (kn_cuda_linalg_stem_fits(x, w, y, &c->a)) {
        if (variant == 0) return kn_cuda_linalg_conv_stem(x, w, bias, y, &c->a, act);
        variant--;
    }
    /* a 1x1 conv: cuBLASLt first, then cuDNN's engines */
    if (conv_is_gemm(x, w, y, &c->a)) {
        if (variant == 0) return conv_gemm(c, x, w, bias, y, act, NULL);
        variant--;
    } else if (conv_one_pixel_nchw(c, x, w, y)) {
        /* strict f32: kiln's kernel for a few rows first (cuBLASLt's f32
         * picks for 16 rows took up to 54 us), then cuBLASLt */
        kn_tensor a = *x, b = *w, o = *y;
        a.ndim = b.ndim = o.ndim = 2; /* {n, c}, {k, c}, {n, k}: the first two dims' sizes and strides */
        if (!kn_cuda_allow_tf32() && kn_cuda_linalg_gemm_rows_fits(&a, &b, &o)) {
            if (variant == 0) return kn_cuda_linalg_gemm_rows(&a, &b, bias, &o, act);
            variant--;
        }
        kn_opcall cl = *c;
        kn_tensor xl = kn_view_nchw_as_nhwc(x), wl = kn_view_nchw_as_nhwc(w), yl = kn_view_nchw_as_nhwc(y);
        cl.a.in_layout = cl.a.out_layout = KN_LAYOUT_NHWC;
        if (conv_is_gemm(&xl, &wl, &yl, &cl.a)) {
            if (variant == 0) return conv_gemm(&cl, &xl, &wl, bias, &yl, act, NULL);
            variant--;
        }
    }
    if (conv_is_patches(c, x, w, y)) {
        if (variant == 0) return conv_patches(c, x, w, bias, y, act);
        variant--;
    }
    /* a depthwise conv, likewise: cuDNN's heuristic picks ran MobileNet's
     * at 2-5% of their roofline */
    if (kn_cuda_linalg_dw_fits(x, w, y, &c->a)) {
        if (variant == 0) return kn_cuda_linalg_conv_dw(x, w, bias, y, &c->a, act);
        variant--;
    }
    if (kn_cuda_linalg_dw_nchw_fits(x, w, y, &c->a)) {
        if (variant == 0) return kn_cuda_linalg_conv_dw_nchw(x, w, bias, y, &c->a, act);
        variant--;
    }
    bool done = false;
    KN_TRY(kn_cuda_dnn_conv(x, w, bias, y, &c->a, act, variant, &done));
    if (done) return KN_OK;
    kn_cuda_variant_label("kiln conv2d kernel");
    if (c->a.in_layout != KN_LAYOUT_NCHW || nhwc_out) {
        /* channels-last: the same kernel through NCHW-ordered headers; the
         * weight's padded channels are left out (they meet zeros) */
        kn_tensor xv = c->a.in_layout == KN_LAYOUT_NHWC ? kn_view_nhwc_as_nchw(x) : *x;
        kn_tensor wv = kn_view_nhwc_as_nchw(w), yv = nhwc_out ? kn_view_nhwc_as_nchw(y) : *y;
        wv.shape[1] = xv.shape[1] / c->a.groups;
        KN_TRY(kn_cuda_linalg_conv2d(&xv, &wv, bias, &yv, &c->a));
        return act ? kn_cuda_bias_act(y, NULL, nhwc_out ? 1 : yv.shape[2] * yv.shape[3], w->shape[0], act) : KN_OK;
    }
    KN_TRY(kn_cuda_linalg_conv2d(x, w, bias, y, &c->a));
    return act ? kn_cuda_bias_act(y, NULL, y->shape[y->ndim - 2] * y->shape[y->ndim - 1], w->shape[0], act) : KN_OK;
}

kn_status kn_cuda_conv2d(const kn_opcall *c)
{
    if (c->op == KN_OP_CONV2D) return conv_run(c, 0);
    if (c->n_in != 2 || !c->in[0] || !c->in[1] || c->n_out < 1 || !c->out[0])
        return kn_error(KN_ERR_ARG, "%s: expects two inputs and a preallocated output", kn_op_name(c->op));
    for (int i = 0; i < 2; i++)
        if (!kn_cuda_on_current(c->in[i]))
            return kn_error(KN_ERR_DEVICE, "%s: the CUDA backend got input %d on %s", kn_op_name(c->op), i + 1,
                            kn_device_name(kn_tensor_device(c->in[i])));
    if (!kn_cuda_on_current(c->out[0]) || !kn_tensor_is_contiguous(c->out[0]))
        return kn_error(KN_ERR_UNSUPPORTED, "%s: a contiguous cuda output only", kn_op_name(c->op));
    KN_TRY(kn_cuda_init());
    if (kn_tensor_numel(c->out[0]) == 0) return KN_OK;
    /* f32 outside TF32 mode on Hopper, channels-last (a training step
     * compiled with kiln.config.channels_last = true): kiln's
     * split-precision gradients, which read and write NHWC where cuDNN's
     * strict f32 engines want NCHW copies; KN_VARIANT_STRICT keeps
     * cuDNN's */
    if (c->variant != KN_VARIANT_STRICT && kn_cuda_conv_x3_grad_takes(c)) {
        kn_status st = kn_cuda_conv_x3_grad_run(c);
        if (st != KN_ERR_UNSUPPORTED) return st;
    }
    return kn_cuda_dnn_conv_grad(c);
}

/* act(conv + bias + residual): a channels-last 1x1 conv in cuBLASLt's
 * epilogue; any other conv runs, then kiln's add and the activation. */
kn_status kn_cuda_conv2d_fused_residual(const kn_opcall *c, int act, const kn_tensor *residual)
{
    if (act != 0 && act != 1) return kn_error(KN_ERR_ARG, "conv2d: unknown activation %d", act);
    if (c->n_in < 2 || c->n_in > 3 || !c->in[0] || !c->in[1] || c->n_out < 1 || !c->out[0])
        return kn_error(KN_ERR_ARG, "conv2d: expects x, weight [, bias] and a preallocated output");
    kn_tensor *y = c->out[0];
    if (!kn_cuda_on_current(residual) || residual->dtype != y->dtype || !kn_tensor_is_contiguous(residual) ||
        residual->ndim != y->ndim || memcmp(residual->shape, y->shape, sizeof(int64_t) * (size_t)y->ndim) != 0)
        return kn_error(KN_ERR_SHAPE, "conv2d: a fused residual must be a contiguous cuda tensor like the output");
    KN_TRY(kn_cuda_init());
    const kn_tensor *x = c->in[0], *w = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
    if (c->variant == 0 && kn_tensor_numel(y) > 0 && conv_is_gemm(x, w, y, &c->a) && kn_cuda_on_current(x) &&
        kn_cuda_on_current(w))
        return conv_gemm(c, x, w, bias, y, act, residual);
    /* the split-precision convolution adds the residual in its epilogue too */
    if (c->variant == 0 && kn_tensor_numel(y) > 0 && kn_cuda_on_current(x) && kn_cuda_on_current(w) &&
        conv_runs_split(c)) {
        kn_status st = kn_cuda_conv_x3_run(x, w, bias, y, &c->a, act, residual, 0);
        if (st != KN_ERR_UNSUPPORTED) return st;
    }
    KN_TRY(conv_run(c, 0));
    KN_TRY(kn_cuda_add_into(y, residual));
    bool nhwc = c->a.out_layout == KN_LAYOUT_NHWC;
    int64_t inner = nhwc ? 1 : y->shape[y->ndim - 2] * y->shape[y->ndim - 1];
    return act ? kn_cuda_bias_act(y, NULL, inner, nhwc ? y->shape[3] : y->shape[y->ndim - 3], act) : KN_OK;
}

kn_status kn_cuda_conv2d_fused(const kn_opcall *c, int act)
{
    if (act != KN_EPI_NONE && act != KN_EPI_RELU && act != KN_EPI_HARDSWISH)
        return kn_error(KN_ERR_ARG, "conv2d: unknown activation %d", act);
    return conv_run(c, act);
}

bool kn_cuda_conv_epilogue_free(const kn_opcall *c)
{
    if (c->op != KN_OP_CONV2D || c->n_in < 2 || c->n_out < 1 || !c->in[0] || !c->in[1] || !c->out[0]) return false;
    const kn_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
    /* the split convolution, or the stem kernels (bias and ReLU in their
     * stores), as conv_run picks them */
    return conv_runs_split(c) || kn_cuda_linalg_stem_tc_fits(x, w, y, &c->a) || kn_cuda_linalg_stem_fits(x, w, y, &c->a);
}

bool kn_cuda_conv_prefers_nhwc(kn_dtype dt)
{
    size_t version;
    if (kn_cuda_init() != KN_OK || !kn_cuda_dnn_handle(&version)) return false;
    /* half types: the tensor-core engines of sm_80 and later read NHWC
     * (NCHW costs them transposes: convnet bf16's convs at 10-13% of their
     * roofline on the H100). f32: where kiln's split-precision convolution
     * runs (Hopper), which reads NHWC; cuDNN's strict f32 engines were not
     * measured faster so (KILN_CHANNELS_LAST=1 or kiln.config.channels_last
     * = true turns it on elsewhere). */
    if (dt == KN_F32) return kn_cuda_conv_x3_available();
    return (dt == KN_BF16 || dt == KN_F16) && kn_cuda_current()->arch >= 80;
}
