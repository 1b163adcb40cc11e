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
#include "kn_cuda_module.h"
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

/* ---- the gradients ---- */

/* Where the input gradient's class a of a dim (input pixels a, a + st,
 * ...) takes its taps from: taps r = last, last - st, ... (n of them) meet
 * output pixel i + off + t for input pixel i st + a; none when n is 0
 * (a stride longer than the kernel). */
typedef struct dgrad_class {
    int n, last, off;
} dgrad_class;

static dgrad_class dgrad_class_of(int a, int st, int pad, int taps)
{
    dgrad_class k = {0, 0, 0};
    int first = ((a + pad) % st + st) % st;
    if (first >= taps) return k;
    k.n = (taps - 1 - first) / st + 1;
    k.last = first + (k.n - 1) * st;
    k.off = (a + pad - k.last) / st; /* exact: last = a + pad (mod st) */
    return k;
}

static bool all_f32_contiguous(const kn_opcall *c)
{
    const kn_tensor *t[3] = {c->in[0], c->in[1], c->out[0]};
    for (int i = 0; i < 3; i++)
        if (!t[i] || t[i]->dtype != KN_F32 || t[i]->ndim != 4 || !kn_tensor_is_contiguous(t[i])) return false;
    return true;
}

bool kn_cuda_conv_x3_grad_takes(const kn_opcall *c)
{
    if (!kn_cuda_conv_x3_available() || kn_cuda_allow_tf32()) return false;
    if (c->op != KN_OP_CONV2D_INPUT_GRAD && c->op != KN_OP_CONV2D_WEIGHT_GRAD) return false;
    if (c->n_in != 2 || c->n_out < 1 || !all_f32_contiguous(c)) return false;
    const kn_attrs *at = &c->a;
    if (at->groups != 1 || at->in_layout != KN_LAYOUT_NHWC || at->out_layout != KN_LAYOUT_NHWC) return false;
    if (c->op == KN_OP_CONV2D_INPUT_GRAD) {
        const kn_tensor *dy = c->in[0], *w = c->in[1], *dx = c->out[0];
        int64_t k = dy->shape[3], r = w->shape[1], s = w->shape[2];
        if (k % 4 || w->shape[0] != k || w->shape[3] != dx->shape[3] || at->dilation[0] != 1 || at->dilation[1] != 1)
            return false;
        if (at->stride[0] < 1 || at->stride[1] < 1 || at->stride[0] > KN_LA_DGRAD_MAX_STRIDE ||
            at->stride[1] > KN_LA_DGRAD_MAX_STRIDE || at->stride[0] > r || at->stride[1] > s)
            return false;
        /* one class's GEMM: dy's channels and pixels, the most taps */
        kn_cuda_x3_call x;
        memset(&x, 0, sizeof x);
        x.p.m = dx->shape[0] * dx->shape[1] * dx->shape[2];
        x.p.n = dx->shape[3];
        x.p.k = x.p.lda = x.p.ldb = r * s * k;
        x.count = 1, x.a_kmajor = x.b_kmajor = true;
        return kn_cuda_gemm_x3_shape_fits(&x) && dy->shape[1] * dy->shape[2] * k < ((int64_t)1 << 31);
    }
    const kn_tensor *x = c->in[0], *dy = c->in[1], *dw = c->out[0];
    int64_t cin = x->shape[3];
    if (cin % 4 || dw->shape[3] != cin || dw->shape[0] != dy->shape[3] || dy->shape[3] % 4) return false;
    return x->shape[1] * x->shape[2] * cin < ((int64_t)1 << 31) &&
           dy->shape[0] * dy->shape[1] * dy->shape[2] < ((int64_t)1 << 30);
}

/* dx = conv2d_input_grad(dy, w): a stride-1 convolution of dy per class */
static kn_status dgrad_run(const kn_opcall *c)
{
    const kn_tensor *dy = c->in[0], *w = c->in[1];
    kn_tensor *dx = c->out[0];
    const kn_attrs *at = &c->a;
    int sh = (int)at->stride[0], sw = (int)at->stride[1], ph = (int)at->padding[0], pw = (int)at->padding[1];
    int K = (int)w->shape[0], R = (int)w->shape[1], S = (int)w->shape[2], C = (int)w->shape[3];
    int H = (int)dx->shape[1], W = (int)dx->shape[2];
    dgrad_class rows[KN_LA_DGRAD_MAX_STRIDE], cols[KN_LA_DGRAD_MAX_STRIDE];
    kn_la_dgrad_weight_args wa;
    memset(&wa, 0, sizeof wa);
    long long at_float = 0;
    for (int a = 0; a < sh; a++) {
        rows[a] = dgrad_class_of(a, sh, ph, R);
        wa.rc[a] = rows[a].n, wa.rl[a] = rows[a].last;
    }
    for (int b = 0; b < sw; b++) {
        cols[b] = dgrad_class_of(b, sw, pw, S);
        wa.sc[b] = cols[b].n, wa.sl[b] = cols[b].last;
    }
    for (int a = 0; a < sh; a++)
        for (int b = 0; b < sw; b++) {
            wa.base[a * sw + b] = at_float;
            at_float += (long long)C * rows[a].n * cols[b].n * K;
        }
    if ((uintptr_t)kn_cuda_tensor_ptr(dy) % 16 || (uintptr_t)kn_cuda_tensor_ptr(w) % 16)
        return kn_error(KN_ERR_UNSUPPORTED, "conv2d_input_grad: the split-f32 gradient wants 16-byte aligned operands");
    /* the classes' weights, each 16-byte aligned (a multiple of K floats) */
    void *cw = NULL;
    KN_TRY(kn_cuda_malloc(at_float * (int64_t)sizeof(float), &cw));
    const void *fn;
    kn_status st = kn_cuda_linalg_kernel("kn_la_conv_dgrad_weight", &fn);
    if (st == KN_OK) {
        wa.w = kn_cuda_tensor_ptr(w);
        wa.out = cw;
        wa.n = kn_tensor_numel(w);
        wa.k = K, wa.r = R, wa.s = S, wa.c = C, wa.sh = sh, wa.sw = sw, wa.ph = ph, wa.pw = pw;
        st = kn_cuda_launch(fn, (wa.n + 255) / 256, 256, &wa, 0);
    }
    /* every class's tile, by the largest class's GEMM, (0, 0)'s: 128 rows,
     * or 64x64 where a layer has few pixels (a deep layer's): the 128-row
     * tiles left SMs idle (49 blocks a class for the convnet sample's last
     * layer) */
    kn_cuda_x3_call big;
    memset(&big, 0, sizeof big);
    big.p.m = dx->shape[0] * ((H + sh - 1) / sh) * ((W + sw - 1) / sw);
    big.p.n = C;
    int tile = kn_cuda_conv_x3_default_pick(&big);
    int64_t bn = C <= 64 ? 64 : 128, tiles128 = (big.p.m + 127) / 128 * ((C + bn - 1) / bn);
    if (tiles128 < 2 * (int64_t)kn_cuda_current()->sm_count) tile = KN_CUDA_X3_TILE_WG64;
    for (int a = 0; a < sh && st == KN_OK; a++)
        for (int b = 0; b < sw && st == KN_OK; b++) {
            int hc = (H - a + sh - 1) / sh, wc = (W - b + sw - 1) / sw;
            if (hc <= 0 || wc <= 0) continue;
            kn_cuda_x3_call x;
            memset(&x, 0, sizeof x);
            x.p.m = dx->shape[0] * hc * wc;
            x.p.n = C;
            x.p.k = x.p.lda = x.p.ldb = (int64_t)rows[a].n * cols[b].n * K;
            x.p.ldy = C;
            x.count = 1, x.a_kmajor = x.b_kmajor = true;
            x.p.a = kn_cuda_tensor_ptr(dy);
            x.p.b = (char *)cw + wa.base[a * sw + b] * (long long)sizeof(float);
            x.p.y = kn_cuda_tensor_ptr(dx);
            x.p.vec2 = C % 2 == 0 && kn_cuda_align_of(x.p.y, NULL, 0, 8) == 8;
            /* dy read as a stride-1 convolution's input by this class's
             * taps, the first at output pixel i + off */
            x.p.cv = (kn_la_conv_geom){(int)dy->shape[1], (int)dy->shape[2], K, hc, wc, cols[b].n, 1, 1,
                                       -rows[a].off, -cols[b].off, 1, 1};
            x.p.ys = (kn_la_row_scatter){hc, wc, H, W, sh, sw, a, b};
            if (!kn_cuda_conv_x3_fits(&x))
                st = kn_error(KN_ERR_UNSUPPORTED, "conv2d_input_grad: the split-f32 gradient cannot take these pointers");
            else st = kn_cuda_conv_x3(&x, tile);
        }
    kn_cuda_free(cw);
    if (st == KN_OK)
        kn_cuda_variant_label("kiln split-f32 input gradient %s (3xTF32, %d classes)", kn_cuda_gemm_x3_tile_name(tile),
                              sh * sw);
    return st;
}

/* dw = conv2d_weight_grad(x, dy): the weight-gradient form */
static kn_status wgrad_run(const kn_opcall *c)
{
    const kn_tensor *x = c->in[0], *dy = c->in[1];
    kn_tensor *dw = c->out[0];
    const kn_attrs *at = &c->a;
    kn_cuda_x3_call g;
    memset(&g, 0, sizeof g);
    g.p.m = dw->shape[0];
    g.p.n = dw->shape[1] * dw->shape[2] * dw->shape[3];
    g.p.k = dy->shape[0] * dy->shape[1] * dy->shape[2];
    g.p.lda = g.p.m;
    g.p.ldb = g.p.n;
    g.p.ldy = g.p.n;
    g.count = 1, g.a_kmajor = g.b_kmajor = false;
    g.p.a = kn_cuda_tensor_ptr(dy);
    g.p.b = kn_cuda_tensor_ptr(x);
    g.p.y = kn_cuda_tensor_ptr(dw);
    g.p.vec2 = g.p.n % 2 == 0 && kn_cuda_align_of(g.p.y, NULL, 0, 8) == 8;
    g.p.cv = (kn_la_conv_geom){(int)x->shape[1], (int)x->shape[2], (int)x->shape[3], (int)dy->shape[1],
                               (int)dy->shape[2], (int)dw->shape[2], (int)at->stride[0], (int)at->stride[1],
                               (int)at->padding[0], (int)at->padding[1], (int)at->dilation[0], (int)at->dilation[1]};
    if (!kn_cuda_conv_x3w_fits(&g))
        return kn_error(KN_ERR_UNSUPPORTED, "conv2d_weight_grad: the split-f32 gradient cannot take these pointers");
    KN_TRY(kn_cuda_conv_x3w(&g));
    kn_cuda_variant_label("kiln split-f32 weight gradient %s (3xTF32)",
                          kn_cuda_gemm_x3_tile_name(KN_CUDA_X3_TILE_WG64X128));
    return KN_OK;
}

kn_status kn_cuda_conv_x3_grad_run(const kn_opcall *c)
{
    if (!kn_cuda_conv_x3_grad_takes(c))
        return kn_error(KN_ERR_UNSUPPORTED, "%s: the split-f32 gradient does not take this call", kn_op_name(c->op));
    return c->op == KN_OP_CONV2D_INPUT_GRAD ? dgrad_run(c) : wgrad_run(c);
}
