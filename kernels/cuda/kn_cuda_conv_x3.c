/* kn_cuda_conv_x3: conv2d through the split-precision implicit-GEMM
 * convolution (see kn_cuda_conv_x3.h). The GEMM's view: m = N P Q output
 * pixels (y's rows, channels-last), n = K output channels, k = r s C; the a
 * operand is x's windows, gathered as the kernel stages them. */
#include "kn_cuda_conv_x3.h"

#include <stdlib.h>
#include <string.h>

#include "kn_cuda_context.h"
#include "kn_cuda_gemm_x3.h"
#include "kn_cuda_linalg.h"
#include "kn_view.h"

/* The variants after the default: each tile shape */
static const int conv_tiles[] = {KN_CUDA_X3_TILE_WG128X64, KN_CUDA_X3_TILE_WG128, KN_CUDA_X3_TILE_WG64};
#define N_CONV_TILES ((int)(sizeof conv_tiles / sizeof conv_tiles[0]))

int kn_cuda_conv_x3_variant_count(void)
{
    return 1 + N_CONV_TILES;
}

static bool conv_x3_off(void)
{
    static int off = -1;
    if (off < 0) {
        const char *v = getenv("KILN_CONV_X3");
        off = v && strcmp(v, "0") == 0;
    }
    return off;
}

/* x laid out as the kernel reads it: channels-last, contiguous, with the
 * weight's (padded) channels */
static bool x_ready(const kn_tensor *x, const kn_tensor *w, const kn_attrs *at)
{
    return at->in_layout == KN_LAYOUT_NHWC && x->shape[3] == w->shape[3] && kn_tensor_is_contiguous(x);
}

bool kn_cuda_conv_x3_available(void)
{
    return !conv_x3_off() && kn_cuda_gemm_x3_tile_runs_here(KN_CUDA_X3_TILE_WG128X64);
}

/* The GEMM's sizes of a conv into y by weight w {K, r, s, cp} (pointers,
 * epilogue and geometry are the caller's): m = N P Q output pixels, n = K,
 * k = r s cp, both operands k-contiguous, one call */
static void conv_call_sizes(const kn_tensor *w, const kn_tensor *y, kn_cuda_x3_call *c)
{
    memset(c, 0, sizeof *c);
    c->p.m = y->shape[0] * y->shape[1] * y->shape[2];
    c->p.n = w->shape[0];
    c->p.k = w->shape[1] * w->shape[2] * w->shape[3];
    c->p.lda = c->p.ldb = c->p.k;
    c->p.ldy = c->p.n;
    c->count = 1, c->a_kmajor = c->b_kmajor = true;
}

bool kn_cuda_conv_x3_takes(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at)
{
    if (!kn_cuda_conv_x3_available() || kn_cuda_allow_tf32()) return false;
    if (x->dtype != KN_F32 || w->dtype != KN_F32 || y->dtype != KN_F32 || x->ndim != 4 || w->ndim != 4 ||
        y->ndim != 4)
        return false;
    if (at->groups != 1 || at->out_layout != KN_LAYOUT_NHWC || !kn_tensor_is_contiguous(w) ||
        !kn_tensor_is_contiguous(y))
        return false;
    bool x_nhwc = at->in_layout == KN_LAYOUT_NHWC;
    int64_t cp = w->shape[3], h = x->shape[x_nhwc ? 1 : 2], wd = x->shape[x_nhwc ? 2 : 3];
    if (cp % 4 || x->shape[x_nhwc ? 3 : 1] > cp) return false;
    kn_cuda_x3_call c;
    conv_call_sizes(w, y, &c);
    /* one image within 2^31 elements, as kn_cuda_conv_x3_fits asks (its geometry travels as ints) */
    return kn_cuda_gemm_x3_shape_fits(&c) && h * wd * cp < ((int64_t)1 << 31);
}

kn_status kn_cuda_conv_x3_run(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                              const kn_attrs *at, int act, const kn_tensor *residual, int v)
{
    if (v < 0 || v > N_CONV_TILES) return kn_error(KN_ERR_RANGE, "conv2d: the split-f32 convolution has no variant %d", v);
    if (!kn_cuda_conv_x3_takes(x, w, y, at))
        return kn_error(KN_ERR_UNSUPPORTED, "conv2d: the split-f32 convolution does not take this call");
    if (act != 0 && act != 1) return kn_error(KN_ERR_UNSUPPORTED, "conv2d: the split-f32 convolution has no activation %d", act);
    kn_tensor *tmp[2] = {NULL, NULL};
    kn_status st = KN_OK;
    if (!x_ready(x, w, at)) { /* the chain's entry (NCHW), or channels short of the weight's padding */
        kn_tensor nchw = at->in_layout == KN_LAYOUT_NHWC ? kn_view_nhwc_as_nchw(x) : *x;
        KN_TRY(kn_cuda_linalg_to_nhwc(&nchw, w->shape[3], &tmp[0]));
        x = tmp[0];
    }
    if (bias && (bias->dtype != KN_F32 || (bias->shape[0] > 1 && bias->strides[0] != 1))) {
        if ((st = kn_cuda_copy_as(bias, KN_F32, &tmp[1])) != KN_OK) goto out;
        bias = tmp[1];
    }
    kn_cuda_x3_call c;
    conv_call_sizes(w, y, &c);
    const int64_t cp = w->shape[3];
    c.p.a = kn_cuda_tensor_ptr(x);
    c.p.b = kn_cuda_tensor_ptr(w);
    c.p.y = kn_cuda_tensor_ptr(y);
    c.p.bias = bias ? kn_cuda_tensor_ptr(bias) : NULL;
    c.p.res = residual ? kn_cuda_tensor_ptr(residual) : NULL;
    c.p.act = act;
    c.p.vec2 = c.p.n % 2 == 0 && kn_cuda_align_of(c.p.y, NULL, 0, 8) == 8 &&
               (!c.p.res || kn_cuda_align_of(c.p.res, NULL, 0, 8) == 8);
    c.p.cv = (kn_la_conv_geom){(int)x->shape[1], (int)x->shape[2], (int)cp, (int)y->shape[1], (int)y->shape[2],
                               (int)w->shape[2], (int)at->stride[0], (int)at->stride[1], (int)at->padding[0],
                               (int)at->padding[1], (int)at->dilation[0], (int)at->dilation[1]};
    if (!kn_cuda_conv_x3_fits(&c)) {
        st = kn_error(KN_ERR_UNSUPPORTED, "conv2d: the split-f32 convolution cannot take these pointers");
        goto out;
    }
    int tile = v == 0 ? kn_cuda_conv_x3_default_pick(&c) : conv_tiles[v - 1];
    if ((st = kn_cuda_conv_x3(&c, tile)) != KN_OK) goto out;
    kn_cuda_variant_label("kiln split-f32 conv %s (3xTF32)%s%s", kn_cuda_gemm_x3_tile_name(tile),
                          bias || act ? " +epilogue" : "", residual ? " +residual" : "");
out:
    kn_tensor_release(tmp[0]);
    kn_tensor_release(tmp[1]);
    return st;
}
