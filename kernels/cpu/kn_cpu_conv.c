/* kn_cpu_conv: conv2d (im2col + the shared gemm) and the 2-D pools on CPU.
 *
 * conv2d lowers each (image, group) to one gemm, out[o, p] = sum_k w[o, k] *
 * col[k, p], where col is the im2col matrix: row k = (c, ky, kx) holds the
 * input pixel under that kernel tap for every output pixel p. The columns
 * are built a band of output rows at a time so the scratch matrix stays
 * about 1 MiB however large the image. Sums are in f32 (f64 for f64 outputs),
 * bias is added before the one rounding to the output dtype.
 *
 * The pools follow PyTorch's CPU kernels window for window (clipping, the
 * avg divisor, NaN in max), because models ported from PyTorch are checked
 * against it. Shapes and attributes were validated by kn_infer_conv2d /
 * kn_infer_pool2d (core/tensor/kn_shape_linalg.c).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kn_cpu.h"
#include "cpu/kn_cpu_gemm.h"
#include "kn_view.h"

/* Elements of im2col scratch per band: 1 MiB of f32, so that a band is
 * still in L2 when the gemm packs it (measured: 2^21 was 20% slower). */
#define CONV_COL_LIMIT ((int64_t)1 << 18)

/* The dims of x (N,C,H,W) or unbatched (C,H,W) as a 4-D view. */
typedef struct img4 {
    int64_t n, c, h, w;     /* sizes */
    int64_t sn, sc, sh, sw; /* strides in elements */
} img4;

static img4 img4_of(const kn_tensor *t)
{
    int xo = t->ndim - 3;
    img4 v = {xo ? t->shape[0] : 1, t->shape[xo], t->shape[xo + 1], t->shape[xo + 2],
              xo ? t->strides[0] : 0, t->strides[xo], t->strides[xo + 1], t->strides[xo + 2]};
    return v;
}

/* ---- conv2d ---- */

typedef struct conv_geom {
    int64_t cg, h, w;          /* input channels per group, input size */
    int64_t kh, kw, oh, ow;    /* kernel and output size */
    int64_t sh, sw, ph, pw, dh, dw;
} conv_geom;

/* n elements of src (step `step`) into contiguous dst, esz 4 or 8. */
static void copy_strided(void *restrict dst, const void *restrict src, int64_t n, int64_t step,
                         size_t esz)
{
    if (step == 1) {
        memcpy(dst, src, (size_t)n * esz);
    } else if (esz == sizeof(float)) {
        float *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * step];
    } else {
        double *d = dst;
        const double *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * step];
    }
}

/* Kernel column kx reads input column ox*sw + x0 for output column ox;
 * those with 0 <= ox*sw + x0 < w, lo <= ox < hi (lo <= hi), are inside
 * the input, the rest meet the padding. */
static void tap_columns(const conv_geom *g, int64_t kx, int64_t *x0, int64_t *lo, int64_t *hi)
{
    *x0 = kx * g->dw - g->pw;
    *lo = *x0 >= 0 ? 0 : (-*x0 + g->sw - 1) / g->sw;
    *hi = g->w - 1 - *x0 < 0 ? 0 : (g->w - 1 - *x0) / g->sw + 1;
    if (*hi > g->ow) *hi = g->ow;
    if (*lo > *hi) *lo = *hi;
}

/* Output rows per im2col band of kc rows: the scratch stays about
 * CONV_COL_LIMIT elements (divisions, not a product, so no overflow). */
static int64_t im2col_band(const conv_geom *g, int64_t kc)
{
    int64_t band = kc > 0 && g->ow > 0 ? CONV_COL_LIMIT / kc / g->ow : g->oh;
    if (band < 1) band = 1;
    return band > g->oh ? g->oh : band;
}

/* im2col for output rows [y0, y1) of one group: img is that group's input,
 * contiguous (cg, h, w) in the compute type; col is (cg*kh*kw) x ((y1-y0)*ow). */
static void im2col(const conv_geom *g, const char *img, char *col, int64_t y0, int64_t y1,
                   size_t esz)
{
    int64_t width = (y1 - y0) * g->ow;
    for (int64_t ci = 0; ci < g->cg; ci++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                char *row = col + (size_t)(((ci * g->kh + ky) * g->kw + kx) * width) * esz;
                int64_t x0, lo, hi;
                tap_columns(g, kx, &x0, &lo, &hi);
                for (int64_t oy = y0; oy < y1; oy++) {
                    char *d = row + (size_t)((oy - y0) * g->ow) * esz;
                    int64_t iy = oy * g->sh - g->ph + ky * g->dh;
                    if (iy < 0 || iy >= g->h) {
                        memset(d, 0, (size_t)g->ow * esz);
                        continue;
                    }
                    const char *s = img + (size_t)((ci * g->h + iy) * g->w) * esz;
                    memset(d, 0, (size_t)lo * esz);
                    if (hi > lo) /* else the source pointer would leave the row */
                        copy_strided(d + (size_t)lo * esz, s + (size_t)(lo * g->sw + x0) * esz,
                                     hi - lo, g->sw, esz);
                    memset(d + (size_t)hi * esz, 0, (size_t)(g->ow - hi) * esz);
                }
            }
}

/* Channels [c0, c0+cg) of image n of x into contiguous (cg, h, w) of type ct. */
static void load_group(const kn_tensor *x, const img4 *v, int64_t n, int64_t c0, int64_t cg,
                       kn_dtype ct, void *dst)
{
    const void *xd = kn_tensor_data(x);
    size_t esz = kn_dtype_size(ct);
    int64_t i = 0;
    for (int64_t ci = 0; ci < cg; ci++)
        for (int64_t y = 0; y < v->h; y++) {
            int64_t off = n * v->sn + (c0 + ci) * v->sc + y * v->sh;
            if (x->dtype == ct) { /* no conversion: whole rows at once */
                copy_strided((char *)dst + (size_t)i * esz, (const char *)xd + (size_t)off * esz,
                             v->w, v->sw, esz);
                i += v->w;
                continue;
            }
            for (int64_t xx = 0; xx < v->w; xx++, i++) {
                if (ct == KN_F64) ((double *)dst)[i] = kn_gemm_ld64(xd, x->dtype, off + xx * v->sw);
                else ((float *)dst)[i] = kn_gemm_ld32(xd, x->dtype, off + xx * v->sw);
            }
        }
}

/* The weight as a contiguous (O, cg*kh*kw) matrix of type ct. */
static void load_weight(const kn_tensor *w, kn_dtype ct, void *dst)
{
    const void *wd = kn_tensor_data(w);
    int64_t i = 0;
    for (int64_t o = 0; o < w->shape[0]; o++)
        for (int64_t ci = 0; ci < w->shape[1]; ci++)
            for (int64_t ky = 0; ky < w->shape[2]; ky++)
                for (int64_t kx = 0; kx < w->shape[3]; kx++, i++) {
                    int64_t off = o * w->strides[0] + ci * w->strides[1] + ky * w->strides[2] +
                                  kx * w->strides[3];
                    if (ct == KN_F64) ((double *)dst)[i] = kn_gemm_ld64(wd, w->dtype, off);
                    else ((float *)dst)[i] = kn_gemm_ld32(wd, w->dtype, off);
                }
}

/* Scratch of one conv2d call, freed together. */
typedef struct conv_bufs {
    void *wmat, *img, *col, *acc;
    kn_gemm_ws ws;
} conv_bufs;

static void conv_bufs_free(conv_bufs *b)
{
    free(b->wmat);
    free(b->img);
    free(b->col);
    free(b->acc);
    kn_gemm_ws_free(&b->ws);
}

/* bias[o] added to every pixel of channel o, then the rounding to out's
 * dtype; `acc` holds image n's sums (O x P) in the compute type and may be
 * that image of `out` itself. */
static void conv_finish(const kn_tensor *bias, kn_tensor *out, const void *acc, kn_dtype ct,
                        int64_t n, int64_t oc, int64_t np)
{
    void *od = kn_tensor_data(out);
    const void *bd = bias ? kn_tensor_data(bias) : NULL;
    for (int64_t o = 0; o < oc; o++) {
        double b = bias ? kn_gemm_ld64(bd, bias->dtype, o * bias->strides[0]) : 0.0;
        int64_t base = (n * oc + o) * np;
        if (out->dtype == KN_F32 && acc == (float *)od + n * oc * np) { /* in place, no rounding */
            float *d = (float *)od + base, fb = (float)b;
            for (int64_t p = 0; p < np; p++) d[p] += fb;
            continue;
        }
        for (int64_t p = 0; p < np; p++) {
            double v;
            /* f32 sums add a f32 bias in f32, as the output would */
            if (ct == KN_F64) v = ((const double *)acc)[o * np + p] + b;
            else v = ((const float *)acc)[o * np + p] + (float)b;
            kn_gemm_st(od, out->dtype, base + p, v);
        }
    }
}

static kn_status conv2d_grad(const kn_opcall *c);

/* NCHW call `inner` (a conv or a conv gradient) computed into a new NCHW
 * tensor, then laid out into out {N, H, W, C} by one copy. */
static kn_status run_nchw_into_nhwc(kn_opcall *inner, kn_tensor *out)
{
    int64_t shape[4] = {out->shape[0], out->shape[3], out->shape[1], out->shape[2]};
    kn_tensor *tmp;
    KN_TRY(kn_tensor_new(out->dtype, 4, shape, KN_CPU, &tmp));
    inner->out[0] = tmp;
    kn_status st = inner->op == KN_OP_CONV2D ? kn_cpu_conv2d(inner) : conv2d_grad(inner);
    if (st == KN_OK) { /* out[n, p, q, k] = tmp[n, k, p, q]; both contiguous */
        size_t es = kn_dtype_size(out->dtype);
        const char *src = kn_tensor_data(tmp);
        char *dst = kn_tensor_data(out);
        int64_t k = shape[1], pq = shape[2] * shape[3];
        for (int64_t n = 0; n < shape[0]; n++)
            for (int64_t i = 0; i < pq; i++)
                for (int64_t o = 0; o < k; o++)
                    memcpy(dst + (size_t)((n * pq + i) * k + o) * es, src + (size_t)((n * k + o) * pq + i) * es, es);
    }
    kn_tensor_release(tmp);
    return st;
}

/* The channels-last forms (the layout pass's, KN_LAYOUT_NHWC): the same
 * sums as NCHW, read through permuted headers; the weight's padded
 * channels (which meet zeros) are left out; an NHWC output is computed
 * NCHW and laid out by one copy. The CPU is the reference here, not
 * the fast path: the pass turns channels-last on for the CPU only when
 * asked (kiln.config.channels_last = true). */
static kn_status conv_channels_last(const kn_opcall *c)
{
    const kn_tensor *x = c->in[0], *w = c->in[1];
    kn_tensor xv = c->a.in_layout == KN_LAYOUT_NHWC ? kn_view_nhwc_as_nchw(x) : *x;
    kn_tensor wv = kn_view_nhwc_as_nchw(w);
    wv.shape[1] = xv.shape[1] / c->a.groups;
    kn_opcall inner = *c;
    inner.a.in_layout = inner.a.out_layout = KN_LAYOUT_NCHW;
    inner.in[0] = &xv;
    inner.in[1] = &wv;
    if (c->a.out_layout != KN_LAYOUT_NHWC) return kn_cpu_conv2d(&inner);
    return run_nchw_into_nhwc(&inner, c->out[0]);
}

/* col2im for output rows [y0, y1) of one group: the mirror of im2col,
 * adding each column entry into the input pixel it was read from; img is
 * that group's (cg, h, w) accumulator in the compute type. */
static void col2im(const conv_geom *g, char *img, const char *col, int64_t y0, int64_t y1, kn_dtype ct)
{
    int64_t width = (y1 - y0) * g->ow;
    size_t esz = kn_dtype_size(ct);
    for (int64_t ci = 0; ci < g->cg; ci++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const char *row = col + (size_t)(((ci * g->kh + ky) * g->kw + kx) * width) * esz;
                int64_t x0, lo, hi;
                tap_columns(g, kx, &x0, &lo, &hi);
                for (int64_t oy = y0; oy < y1; oy++) {
                    int64_t iy = oy * g->sh - g->ph + ky * g->dh;
                    if (iy < 0 || iy >= g->h) continue;
                    int64_t src = (oy - y0) * g->ow, dst = (ci * g->h + iy) * g->w + x0;
                    if (ct == KN_F64)
                        for (int64_t ox = lo; ox < hi; ox++)
                            ((double *)img)[dst + ox * g->sw] += ((const double *)row)[src + ox];
                    else
                        for (int64_t ox = lo; ox < hi; ox++)
                            ((float *)img)[dst + ox * g->sw] += ((const float *)row)[src + ox];
                }
            }
}

/* conv2d's gradients, by the forward's im2col in reverse. The input's,
 * per image and group: the columns W^T g (a GEMM of the group's weight,
 * transposed, and its output gradient), added back into the pixels they
 * came from (col2im). The weight's: g times the columns of x, transposed,
 * summed over the images (in f64: one sum over the whole batch). */
static kn_status conv2d_grad(const kn_opcall *c)
{
    bool input_grad = c->op == KN_OP_CONV2D_INPUT_GRAD;
    const kn_tensor *gout = input_grad ? c->in[0] : c->in[1];
    kn_tensor *out = c->out[0];
    if (kn_tensor_numel(out) == 0) return KN_OK;
    int64_t xs[4], ws[4];
    for (int d = 0; d < 4; d++) {
        xs[d] = input_grad ? c->a.shape[d] : c->in[0]->shape[d];
        ws[d] = input_grad ? c->in[1]->shape[d] : c->a.shape[d];
    }
    int64_t N = xs[0], groups = c->a.groups, oc = ws[0], ocg = oc / groups;
    conv_geom g = {ws[1], xs[2], xs[3], ws[2], ws[3], gout->shape[2], gout->shape[3],
                   c->a.stride[0], c->a.stride[1], c->a.padding[0], c->a.padding[1],
                   c->a.dilation[0], c->a.dilation[1]};
    int64_t np = g.oh * g.ow, kc = g.cg * g.kh * g.kw, img_n = g.cg * g.h * g.w;
    kn_dtype ct = out->dtype == KN_F64 ? KN_F64 : KN_F32;
    size_t esz = kn_dtype_size(ct);
    int64_t band = im2col_band(&g, kc);
    img4 gv = img4_of(gout);
    conv_bufs b = {0};
    void *gbuf = malloc((size_t)(ocg * np) * esz + 1), *part = NULL;
    double *dw = NULL;
    b.col = malloc((size_t)(kc * band * g.ow) * esz + 1);
    b.img = malloc((size_t)img_n * esz + 1);
    if (input_grad) b.wmat = malloc((size_t)(oc * kc) * esz + 1);
    else {
        part = malloc((size_t)(ocg * kc) * esz + 1);
        dw = calloc((size_t)(oc * kc) + 1, sizeof *dw);
    }
    if (!gbuf || !b.col || !b.img || (input_grad ? !b.wmat : (!part || !dw))) {
        free(gbuf);
        free(part);
        free(dw);
        conv_bufs_free(&b);
        return kn_error(KN_ERR_OOM, "%s: out of memory for the im2col scratch", kn_op_name(c->op));
    }
    if (input_grad) load_weight(c->in[1], ct, b.wmat);
    img4 xv = input_grad ? gv : img4_of(c->in[0]);
    void *od = kn_tensor_data(out);
    kn_status st = KN_OK;
    for (int64_t n = 0; n < N && st == KN_OK; n++)
        for (int64_t gi = 0; gi < groups && st == KN_OK; gi++) {
            load_group(gout, &gv, n, gi * ocg, ocg, ct, gbuf); /* {ocg, oh * ow} */
            if (input_grad) memset(b.img, 0, (size_t)img_n * esz);
            else load_group(c->in[0], &xv, n, gi * g.cg, g.cg, ct, b.img);
            for (int64_t y0 = 0; y0 < g.oh && st == KN_OK; y0 += band) {
                int64_t y1 = y0 + band < g.oh ? y0 + band : g.oh, width = (y1 - y0) * g.ow;
                kn_gemm_mat G = {(const char *)gbuf + (size_t)(y0 * g.ow) * esz, ct, np, 1, NULL, 0};
                if (input_grad) {
                    /* col {kc, width} = W_g^T {kc, ocg} x g {ocg, width} */
                    kn_gemm_mat Wt = {(const char *)b.wmat + (size_t)(gi * ocg * kc) * esz, ct, 1, kc, NULL, 0};
                    st = kn_cpu_gemm(&b.ws, ct, kc, width, ocg, &Wt, &G, b.col, width);
                    if (st == KN_OK) col2im(&g, b.img, b.col, y0, y1, ct);
                } else {
                    /* part {ocg, kc} = g {ocg, width} x col^T {width, kc} */
                    im2col(&g, b.img, b.col, y0, y1, esz);
                    kn_gemm_mat Ct = {b.col, ct, 1, width, NULL, 0};
                    st = kn_cpu_gemm(&b.ws, ct, ocg, kc, width, &G, &Ct, part, kc);
                    for (int64_t i = 0; st == KN_OK && i < ocg * kc; i++)
                        dw[gi * ocg * kc + i] += ct == KN_F64 ? ((double *)part)[i] : ((float *)part)[i];
                }
            }
            if (input_grad && st == KN_OK) /* the group's channels of image n */
                for (int64_t i = 0; i < img_n; i++)
                    kn_gemm_st(od, out->dtype, (n * groups + gi) * img_n + i,
                               ct == KN_F64 ? ((double *)b.img)[i] : ((float *)b.img)[i]);
        }
    if (!input_grad && st == KN_OK)
        for (int64_t i = 0; i < oc * kc; i++) kn_gemm_st(od, out->dtype, i, dw[i]);
    free(gbuf);
    free(part);
    free(dw);
    conv_bufs_free(&b);
    return st;
}

/* The gradients' channels-last form (the layout pass's: every operand and
 * the result {N, H, W, C}, a weight {K, kh, kw, C/groups}): the NCHW
 * gradient read through permuted headers, laid out by one copy. */
static kn_status conv2d_grad_channels_last(const kn_opcall *c)
{
    kn_tensor v0 = kn_view_nhwc_as_nchw(c->in[0]), v1 = kn_view_nhwc_as_nchw(c->in[1]);
    kn_opcall inner = *c;
    inner.a.in_layout = inner.a.out_layout = KN_LAYOUT_NCHW;
    static const int nchw_of[4] = {0, 3, 1, 2};
    for (int d = 0; d < 4; d++) inner.a.shape[d] = c->a.shape[nchw_of[d]];
    inner.in[0] = &v0;
    inner.in[1] = &v1;
    return run_nchw_into_nhwc(&inner, c->out[0]);
}

kn_status kn_cpu_conv2d(const kn_opcall *c)
{
    if (c->op != KN_OP_CONV2D)
        return c->a.out_layout == KN_LAYOUT_NHWC ? conv2d_grad_channels_last(c) : conv2d_grad(c);
    if (c->a.in_layout != KN_LAYOUT_NCHW || c->a.out_layout != KN_LAYOUT_NCHW) return conv_channels_last(c);
    const kn_tensor *x = c->in[0], *w = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
    kn_tensor *out = c->out[0];
    img4 v = img4_of(x);
    int64_t groups = c->a.groups, oc = w->shape[0], ocg = oc / groups;
    conv_geom g = {w->shape[1], v.h, v.w, w->shape[2], w->shape[3],
                   out->shape[out->ndim - 2], out->shape[out->ndim - 1],
                   c->a.stride[0], c->a.stride[1], c->a.padding[0], c->a.padding[1],
                   c->a.dilation[0], c->a.dilation[1]};
    int64_t np = g.oh * g.ow, kc = g.cg * g.kh * g.kw;
    if (kn_tensor_numel(out) == 0) return KN_OK;

    kn_dtype ct = out->dtype == KN_F64 ? KN_F64 : KN_F32;
    size_t esz = kn_dtype_size(ct);
    int64_t band = im2col_band(&g, kc);
    /* The gemm writes straight into an output of the compute type (the bias
     * is then added in place); bf16/f16 outputs get an f32 image first. */
    bool direct = out->dtype == ct;
    conv_bufs b = {0};
    b.wmat = malloc((size_t)(oc * kc) * esz + 1);
    b.img = malloc((size_t)(g.cg * g.h * g.w) * esz + 1);
    b.col = malloc((size_t)(kc * band * g.ow) * esz + 1);
    if (!direct) b.acc = malloc((size_t)(oc * np) * esz);
    if (!b.wmat || !b.img || !b.col || (!direct && !b.acc)) {
        conv_bufs_free(&b);
        return kn_error(KN_ERR_OOM, "conv2d: out of memory for the im2col scratch");
    }
    load_weight(w, ct, b.wmat);

    kn_status st = KN_OK;
    for (int64_t n = 0; n < v.n && st == KN_OK; n++) {
        char *acc = direct ? (char *)kn_tensor_data(out) + (size_t)(n * oc * np) * esz : b.acc;
        for (int64_t gi = 0; gi < groups && st == KN_OK; gi++) {
            load_group(x, &v, n, gi * g.cg, g.cg, ct, b.img);
            kn_gemm_mat A = {(const char *)b.wmat + (size_t)(gi * ocg * kc) * esz, ct, kc, 1,
                             NULL, 0};
            for (int64_t y0 = 0; y0 < g.oh && st == KN_OK; y0 += band) {
                int64_t y1 = y0 + band < g.oh ? y0 + band : g.oh, width = (y1 - y0) * g.ow;
                im2col(&g, b.img, b.col, y0, y1, esz);
                kn_gemm_mat B = {b.col, ct, width, 1, NULL, 0};
                st = kn_cpu_gemm(&b.ws, ct, ocg, width, kc, &A, &B,
                                 acc + (size_t)(gi * ocg * np + y0 * g.ow) * esz, np);
            }
        }
        if (st == KN_OK && (!direct || bias)) conv_finish(bias, out, acc, ct, n, oc, np);
    }
    conv_bufs_free(&b);
    return st;
}

/* ---- pools ---- */

/* The input rows (or columns) each output row (column) of a pool reads:
 * taps start[i], start[i] + step, ... < end[i], all inside the input; div[i]
 * is the avg divisor's factor for that axis. Windows depend on one axis
 * only, so they are computed once per call rather than once per output. */
typedef struct pool_axis {
    int64_t *start, *end, *div;
    int64_t step;
} pool_axis;

/* a * b / c rounded down (or up), for 0 <= a, b and 0 < c. A stride-0
 * view can make b huge, so the product is checked; past int64 it falls back
 * to long double, which is merely inexact at sizes no one can pool. */
static int64_t muldiv(int64_t a, int64_t b, int64_t c, bool up)
{
    int64_t p;
    if (__builtin_mul_overflow(a, b, &p)) {
        long double q = (long double)a * (long double)b / (long double)c;
        return (int64_t)(up ? ceill(q) : floorl(q));
    }
    return p / c + (up && p % c != 0);
}

/* Windows along one axis of length `in` with `out` outputs, following
 * PyTorch's CPU kernels: max taps step by the dilation and are clipped to
 * the input; avg clips too, but its divisor (count_include_pad) counts the
 * padding taps, never those past the padding that only ceil_mode windows
 * reach; adaptive rows run floor(i*in/out) .. ceil((i+1)*in/out). */
static void pool_axis_fill(pool_axis *ax, kn_op op, const kn_attrs *a, int d, int64_t in,
                           int64_t out)
{
    int64_t k = a->kernel[d], s = a->stride[d], p = a->padding[d], dil = a->dilation[d];
    ax->step = op == KN_OP_MAX_POOL2D ? dil : 1;
    for (int64_t i = 0; i < out; i++) {
        int64_t st, en, div;
        if (op == KN_OP_ADAPTIVE_AVG_POOL2D) {
            st = muldiv(i, in, out, false);
            en = muldiv(i + 1, in, out, true);
            div = en - st;
        } else if (op == KN_OP_MAX_POOL2D) {
            st = i * s - p;
            en = st + (k - 1) * dil + 1;
            if (st < 0) st += (-st + dil - 1) / dil * dil; /* first tap inside */
            div = 1;
        } else {
            st = i * s - p;
            en = st + k;
            if (en > in + p) en = in + p;
            div = en - st; /* the padded extent */
            if (st < 0) st = 0;
        }
        if (en > in) en = in;
        if (st > en) st = en;
        if (op == KN_OP_AVG_POOL2D && !a->count_include_pad) div = en - st;
        ax->start[i] = st, ax->end[i] = en, ax->div[i] = div;
    }
}

/* Plane (n, ch) of x into contiguous doubles (exact for every float dtype). */
static void load_plane(const kn_tensor *x, const img4 *v, int64_t n, int64_t ch, double *dst)
{
    const void *xd = kn_tensor_data(x);
    int64_t base = n * v->sn + ch * v->sc;
    for (int64_t y = 0; y < v->h; y++, dst += v->w) {
        int64_t off = base + y * v->sh;
        if (x->dtype == KN_F32) {
            const float *s = (const float *)xd + off;
            for (int64_t i = 0; i < v->w; i++) dst[i] = s[i * v->sw];
        } else {
            for (int64_t i = 0; i < v->w; i++) dst[i] = kn_gemm_ld64(xd, x->dtype, off + i * v->sw);
        }
    }
}

/* One output of a pool over the plane: max (NaN wins, as in PyTorch; an
 * empty window is -inf) or the mean with the given divisor (0 if empty). */
static double pool_one(bool is_max, const double *pl, int64_t w, const pool_axis *ay,
                       const pool_axis *ax, int64_t oy, int64_t ox)
{
    int64_t ys = ay->start[oy], ye = ay->end[oy], xs = ax->start[ox], xe = ax->end[ox];
    if (is_max) {
        double m = -INFINITY;
        int nan = 0; /* kept apart so the compare can become a branch-free max */
        for (int64_t y = ys; y < ye; y += ay->step) {
            const double *row = pl + y * w;
            for (int64_t x = xs; x < xe; x += ax->step) {
                double e = row[x];
                m = e > m ? e : m;
                nan |= e != e;
            }
        }
        return nan ? NAN : m;
    }
    double s = 0.0;
    for (int64_t y = ys; y < ye; y++) {
        const double *row = pl + y * w;
        for (int64_t x = xs; x < xe; x++) s += row[x];
    }
    int64_t div = ay->div[oy] * ax->div[ox];
    return div > 0 ? s / (double)div : 0.0;
}

/* A channels-last pool (the layout pass's form: x {N, H, W, C}, out
 * {N, OH, OW, C}) reads x through an NCHW-ordered header and writes each
 * result at its NHWC place, so its sums are the NCHW pool's. */
kn_status kn_cpu_pool2d(const kn_opcall *c)
{
    bool nhwc = c->a.in_layout == KN_LAYOUT_NHWC;
    kn_tensor xv = nhwc ? kn_view_nhwc_as_nchw(c->in[0]) : *c->in[0];
    const kn_tensor *x = &xv;
    kn_tensor *out = c->out[0];
    img4 v = img4_of(x);
    int64_t oh = out->shape[out->ndim - (nhwc ? 3 : 2)], ow = out->shape[out->ndim - (nhwc ? 2 : 1)];
    if (kn_tensor_numel(out) == 0) return KN_OK;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(3 * (oh + ow)));
    double *pl = malloc(sizeof(double) * (size_t)(v.h * v.w));
    if (!idx || !pl) {
        free(idx);
        free(pl);
        return kn_error(KN_ERR_OOM, "%s: out of memory for a %lldx%lld plane", kn_op_name(c->op),
                        (long long)v.h, (long long)v.w);
    }
    pool_axis ay = {idx, idx + oh, idx + 2 * oh, 1};
    pool_axis ax = {idx + 3 * oh, idx + 3 * oh + ow, idx + 3 * oh + 2 * ow, 1};
    pool_axis_fill(&ay, c->op, &c->a, 0, v.h, oh);
    pool_axis_fill(&ax, c->op, &c->a, 1, v.w, ow);
    bool is_max = c->op == KN_OP_MAX_POOL2D;
    void *od = kn_tensor_data(out);
    int64_t i = 0;
    for (int64_t n = 0; n < v.n; n++)
        for (int64_t ch = 0; ch < v.c; ch++) {
            load_plane(x, &v, n, ch, pl);
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++, i++)
                    kn_gemm_st(od, out->dtype, nhwc ? ((n * oh + oy) * ow + ox) * v.c + ch : i,
                               pool_one(is_max, pl, v.w, &ay, &ax, oy, ox));
        }
    free(idx);
    free(pl);
    return KN_OK;
}
