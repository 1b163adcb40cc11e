/* t/cuda_split_conv.c: kiln's split-precision f32 convolution (the
 * convolution form of kn_la_gemm_x3.cu, kernels/cuda/kn_cuda_conv_x3.c)
 * and its place in conv2d (kn_cuda_conv.c), against float64 on fresh
 * random inputs (seed printed; KILN_SEED repeats).
 *
 * - The kernel: each tile shape on random geometries (sizes that are not
 *   tile multiples, strides, paddings, dilations, windows from 1x1 to 5x5
 *   and 1x3, channel counts from 4 up), with bias, ReLU and a residual, and
 *   split along k where few tiles meet a long sum. Its error (max |got -
 *   ref| / max |ref|) is held to the "ieee" contract: at most twice a
 *   true-f32 computation's on the same inputs (f32 FMA in the kernel's k
 *   order, on the host), plus the precision ledger's floor.
 * - Inputs spread over 1e-6 .. 1e6, and denormal inputs.
 * - kiln's conv2d on a channels-last call: the default is the kernel (on
 *   Hopper), KN_VARIANT_STRICT is not, the variants are its tiles and then
 *   cuDNN's engines, each within the contract; an NCHW input is laid out
 *   first; the residual form adds in the epilogue.
 * - Refusals: channels not a multiple of 4.
 *
 * Without a CUDA device, or off Hopper (the kernel is wgmma), it skips.
 */
#ifndef KILN_HAVE_CUDA
#include "tap.h"

int main(void)
{
    skip_all("no CUDA device (built without the CUDA toolkit)");
}
#else
#include <math.h>
#include <string.h>

#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_context.h"
#include "cuda/kn_cuda_conv_x3.h"
#include "cuda/kn_cuda_conv.h"
#include "cuda/kn_cuda_gemm_x3.h"
#include "kn_tensor.h"
#include "kn_view.h"
#include "ops_testlib.h"
#include "split_testlib.h"

typedef struct ccase {
    int n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw;
    int bias, act, residual, values; /* values: 0 uniform(-1, 1), 1 spread 1e-6 .. 1e6, 2 denormal x */
} ccase;

/* One case's tensors (channels-last x {n, h, w, c}, w {k, r, s, c}, y
 * {n, p, q, k}), its float64 reference and the true-f32 result (FMA over
 * k = (r, s, c) in order, then bias, then residual, then the ReLU). */
typedef struct prepared {
    ccase cs;
    int p, q;
    int64_t ny;
    kn_tensor *x, *w, *bias, *res;
    double *ref, *r32;
    kn_attrs at;
} prepared;

static void prepare(const ccase *cs, prepared *pr)
{
    memset(pr, 0, sizeof *pr);
    pr->cs = *cs;
    pr->p = st_out_dim(cs->h, cs->r, cs->sh, cs->ph, cs->dh);
    pr->q = st_out_dim(cs->w, cs->s, cs->sw, cs->pw, cs->dw);
    int64_t nx = (int64_t)cs->n * cs->h * cs->w * cs->c, nw = (int64_t)cs->k * cs->r * cs->s * cs->c;
    pr->ny = (int64_t)cs->n * pr->p * pr->q * cs->k;
    float *hx = malloc(sizeof(float) * (size_t)nx), *hw = malloc(sizeof(float) * (size_t)nw),
          *hb = malloc(sizeof(float) * (size_t)cs->k), *hr = malloc(sizeof(float) * (size_t)pr->ny);
    for (int64_t i = 0; i < nx; i++) hx[i] = st_draw(cs->values);
    for (int64_t i = 0; i < nw; i++) hw[i] = st_draw(cs->values == 2 ? 3 : cs->values) * (cs->values ? 1.0f : 0.3f);
    for (int i = 0; i < cs->k; i++) hb[i] = cs->bias ? st_draw(0) : 0;
    for (int64_t i = 0; i < pr->ny; i++) hr[i] = cs->residual ? st_draw(0) : 0;
    pr->ref = malloc(sizeof(double) * (size_t)pr->ny);
    pr->r32 = malloc(sizeof(double) * (size_t)pr->ny);
    for (int b = 0; b < cs->n; b++)
        for (int oh = 0; oh < pr->p; oh++)
            for (int ow = 0; ow < pr->q; ow++)
                for (int o = 0; o < cs->k; o++) {
                    double acc = 0;
                    float acc32 = 0;
                    for (int r = 0; r < cs->r; r++)
                        for (int s = 0; s < cs->s; s++) {
                            int ih = oh * cs->sh - cs->ph + r * cs->dh, iw = ow * cs->sw - cs->pw + s * cs->dw;
                            if (ih < 0 || ih >= cs->h || iw < 0 || iw >= cs->w) continue;
                            const float *xp = hx + (((int64_t)b * cs->h + ih) * cs->w + iw) * cs->c;
                            const float *wp = hw + (((int64_t)o * cs->r + r) * cs->s + s) * cs->c;
                            for (int c = 0; c < cs->c; c++) {
                                acc += (double)xp[c] * wp[c];
                                acc32 = fmaf(xp[c], wp[c], acc32);
                            }
                        }
                    int64_t i = (((int64_t)b * pr->p + oh) * pr->q + ow) * cs->k + o;
                    double v = acc + hb[o] + hr[i];
                    double v32 = (double)((acc32 + hb[o]) + hr[i]);
                    pr->ref[i] = cs->act && v < 0 ? 0 : v;
                    pr->r32[i] = cs->act && v32 < 0 ? 0 : v32;
                }
    int64_t xs[4] = {cs->n, cs->h, cs->w, cs->c}, ws[4] = {cs->k, cs->r, cs->s, cs->c}, bs[1] = {cs->k},
            ys[4] = {cs->n, pr->p, pr->q, cs->k};
    pr->x = st_gpu_of(hx, 4, xs);
    pr->w = st_gpu_of(hw, 4, ws);
    pr->bias = cs->bias ? st_gpu_of(hb, 1, bs) : NULL;
    pr->res = cs->residual ? st_gpu_of(hr, 4, ys) : NULL;
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_CONV2D);
    pr->at = init.a;
    pr->at.stride[0] = cs->sh, pr->at.stride[1] = cs->sw;
    pr->at.padding[0] = cs->ph, pr->at.padding[1] = cs->pw;
    pr->at.dilation[0] = cs->dh, pr->at.dilation[1] = cs->dw;
    pr->at.in_layout = pr->at.out_layout = KN_LAYOUT_NHWC;
    free(hx), free(hw), free(hb), free(hr);
}

static void release(prepared *pr)
{
    kn_tensor_release(pr->x);
    kn_tensor_release(pr->w);
    kn_tensor_release(pr->bias);
    kn_tensor_release(pr->res);
    free(pr->ref), free(pr->r32);
}

static kn_tensor *new_y(const prepared *pr)
{
    int64_t ys[4] = {pr->cs.n, pr->p, pr->q, pr->cs.k};
    kn_tensor *y = NULL;
    kn_tensor_new(KN_F32, 4, ys, kn_cuda_current()->device, &y);
    /* NaN: a missed store fails */
    cudaMemsetAsync(kn_cuda_tensor_ptr(y), 0xff, (size_t)pr->ny * 4, kn_cuda_stream());
    return y;
}

static void describe(const ccase *c, char *buf, size_t size)
{
    snprintf(buf, size, "%dx%dx%dx%d -> %d, %dx%d window, stride %d,%d pad %d,%d dil %d,%d%s%s%s%s", c->n, c->h, c->w,
             c->c, c->k, c->r, c->s, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->bias ? " +bias" : "",
             c->act ? " relu" : "", c->residual ? " +residual" : "",
             c->values == 1 ? ", values 1e-6..1e6" : c->values == 2 ? ", denormal x" : "");
}

/* the kernel itself in variant v (0 the default's tile, then each tile) */
static void check_kernel(const ccase *cs, int v, const char *what)
{
    prepared pr;
    prepare(cs, &pr);
    kn_tensor *y = new_y(&pr);
    kn_status st = kn_cuda_conv_x3_run(pr.x, pr.w, pr.bias, y, &pr.at, cs->act, pr.res, v);
    char d[256];
    describe(cs, d, sizeof d);
    if (st != KN_OK) {
        ok(0, "%s: %s variant %d ran: %s", what, d, v, kn_last_error());
    } else {
        double *got = st_host_of(y);
        double err = st_rel_err(got, pr.ref, pr.ny), err32 = st_rel_err(pr.r32, pr.ref, pr.ny);
        ok(err <= 2 * err32 + FLOOR, "%s: %s, variant %d (%s): error %.3g, true f32 %.3g", what, d, v,
           kn_cuda_current()->variant_label, err, err32);
        free(got);
    }
    kn_tensor_release(y);
    release(&pr);
}

/* kiln's conv2d on the same call: variant (or KN_VARIANT_STRICT); *err,
 * and the label of what ran */
static kn_status conv_call(const prepared *pr, int variant, bool fused_residual, double *err, char *label, size_t size)
{
    kn_tensor *y = new_y(pr);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CONV2D);
    c.a = pr->at;
    c.n_in = pr->bias ? 3 : 2;
    c.in[0] = pr->x, c.in[1] = pr->w, c.in[2] = pr->bias;
    c.n_out = 1, c.out[0] = y;
    c.variant = variant;
    kn_status st = fused_residual ? kn_cuda_conv2d_fused_residual(&c, pr->cs.act, pr->res)
                                  : kn_cuda_conv2d_fused(&c, pr->cs.act);
    if (st == KN_OK) {
        double *got = st_host_of(y);
        *err = st_rel_err(got, pr->ref, pr->ny);
        free(got);
        snprintf(label, size, "%s", kn_cuda_current()->variant_label);
    }
    kn_tensor_release(y);
    return st;
}

static void conv2d_paths(void)
{
    /* convnet's second layer, two images: 112x112x32 -> 56x56x64, 3x3 stride 2 */
    ccase cs = {2, 112, 112, 32, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0};
    prepared pr;
    prepare(&cs, &pr);
    double e_strict = 0, e = 0;
    char label[160];
    kn_status st = conv_call(&pr, KN_VARIANT_STRICT, false, &e_strict, label, sizeof label);
    ok(st == KN_OK && !strstr(label, "split"), "conv2d, strict variant: %s, error %.3g", st == KN_OK ? label : kn_last_error(),
       e_strict);
    st = conv_call(&pr, 0, false, &e, label, sizeof label);
    ok(st == KN_OK && strstr(label, "kiln split-f32 conv") && strstr(label, "+epilogue"),
       "conv2d, default: the split convolution with bias and ReLU in its epilogue (%s)", st == KN_OK ? label : kn_last_error());
    ok(st == KN_OK && e <= 2 * e_strict + FLOOR, "conv2d, default: error %.3g within the contract of strict's %.3g", e,
       e_strict);
    /* the variants: the split tiles, then the strict engines */
    int split_variants = 0, others = 0;
    for (int v = 1; v < 12; v++) {
        st = conv_call(&pr, v, false, &e, label, sizeof label);
        if (st == KN_ERR_RANGE) break;
        if (st != KN_OK) continue; /* an engine that refuses this call */
        if (strstr(label, "split")) split_variants++;
        else others++;
        ok(e <= 2 * e_strict + FLOOR, "conv2d variant %d (%s): error %.3g within the contract", v, label, e);
    }
    ok(split_variants == kn_cuda_conv_x3_variant_count() - 1 && others > 0,
       "the variants: %d split tiles, then %d of cuDNN's engines", split_variants, others);
    release(&pr);

    /* the residual form: a ResNet block's second conv, relu(conv + bias + residual) */
    ccase rc = {3, 14, 14, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    prepare(&rc, &pr);
    st = conv_call(&pr, KN_VARIANT_STRICT, true, &e_strict, label, sizeof label);
    ok(st == KN_OK, "residual form, strict: error %.3g", e_strict);
    st = conv_call(&pr, 0, true, &e, label, sizeof label);
    ok(st == KN_OK && strstr(label, "+residual") && e <= 2 * e_strict + FLOOR,
       "residual form, default: %s, error %.3g (strict %.3g)", st == KN_OK ? label : kn_last_error(), e, e_strict);
    release(&pr);

    /* an NCHW input (a chain's first conv): laid out channels-last, its 3
     * channels padded to the weight's 4 */
    ccase ic = {2, 40, 36, 4, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0};
    prepare(&ic, &pr);
    kn_tensor *y = new_y(&pr);
    /* x as NCHW with 3 channels: the NHWC x's first 3 channels, the 4th of the weight meeting zeros */
    kn_tensor *h = NULL, *x3 = NULL, *x3d = NULL;
    kn_tensor_to_device(pr.x, KN_CPU, NULL, &h);
    int64_t shp[4] = {ic.n, 3, ic.h, ic.w};
    kn_tensor_new(KN_F32, 4, shp, KN_CPU, &x3);
    const float *src = kn_tensor_data(h);
    float *dst = kn_tensor_data(x3);
    for (int b = 0; b < ic.n; b++)
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < ic.h * ic.w; i++) dst[((int64_t)b * 3 + c) * ic.h * ic.w + i] = src[((int64_t)b * ic.h * ic.w + i) * 4 + c];
    kn_tensor_to_device(x3, kn_cuda_current()->device, NULL, &x3d);
    /* the reference with the 4th channel zero: zero it in x and prepare again would redraw; instead compare against strict on the same call */
    kn_attrs at = pr.at;
    at.in_layout = KN_LAYOUT_NCHW;
    st = kn_cuda_conv_x3_run(x3d, pr.w, pr.bias, y, &at, ic.act, NULL, 0);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CONV2D);
    c.a = at;
    c.n_in = 3, c.in[0] = x3d, c.in[1] = pr.w, c.in[2] = pr.bias;
    kn_tensor *ys = new_y(&pr);
    c.n_out = 1, c.out[0] = ys;
    c.variant = KN_VARIANT_STRICT;
    kn_status st2 = kn_cuda_conv2d_fused(&c, ic.act);
    if (st == KN_OK && st2 == KN_OK) {
        double *a = st_host_of(y), *b = st_host_of(ys);
        double d = st_rel_err(a, b, pr.ny);
        ok(d < 1e-5, "an NCHW input of 3 channels, laid out and padded: against strict f32, %.3g", d);
        free(a), free(b);
    } else {
        ok(0, "an NCHW input of 3 channels: %s", kn_last_error());
    }
    kn_tensor *all[] = {y, ys, h, x3, x3d};
    for (int i = 0; i < 5; i++) kn_tensor_release(all[i]);
    release(&pr);
}

int main(void)
{
    if (!kn_cuda_available()) skip_all(kn_cuda_unavailable_reason());
    if (kn_cuda_init() != KN_OK) skip_all(kn_last_error());
    if (!kn_cuda_conv_x3_available()) skip_all("the split-precision convolution runs on Hopper (sm_90) only");
    tl_seed();
    /* random geometries through each variant */
    static const int chans[] = {4, 8, 12, 32, 64, 36};
    static const int wins[][2] = {{1, 1}, {3, 3}, {5, 5}, {1, 3}, {2, 2}, {7, 7}};
    for (int i = 0; i < 16; i++) {
        ccase cs;
        memset(&cs, 0, sizeof cs);
        cs.n = (int)tl_int(1, 3), cs.h = (int)tl_int(5, 40), cs.w = (int)tl_int(5, 40);
        cs.c = chans[tl_int(0, 5)], cs.k = (int)tl_int(1, 150);
        cs.r = wins[i % 6][0], cs.s = wins[i % 6][1];
        cs.sh = (int)tl_int(1, 2), cs.sw = (int)tl_int(1, 2);
        cs.ph = (int)tl_int(0, cs.r / 2 + 1), cs.pw = (int)tl_int(0, cs.s / 2 + 1);
        cs.dh = cs.dw = (int)tl_int(1, 2);
        if (st_out_dim(cs.h, cs.r, cs.sh, cs.ph, cs.dh) < 1 || st_out_dim(cs.w, cs.s, cs.sw, cs.pw, cs.dw) < 1) cs.dh = cs.dw = 1;
        cs.bias = (int)tl_int(0, 1), cs.act = (int)tl_int(0, 1), cs.residual = i % 3 == 0;
        check_kernel(&cs, i % kn_cuda_conv_x3_variant_count(), "random");
    }
    /* the samples' and ResNet's layers, each tile */
    ccase convnet3 = {2, 56, 56, 64, 128, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0};
    ccase resnet = {2, 14, 14, 256, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    for (int v = 0; v < kn_cuda_conv_x3_variant_count(); v++) {
        check_kernel(&convnet3, v, "convnet layer 3");
        check_kernel(&resnet, v, "resnet 14x14x256 (k 2304: split along k)");
    }
    ccase stem = {2, 64, 64, 4, 64, 7, 7, 2, 2, 3, 3, 1, 1, 1, 1, 0, 0};
    check_kernel(&stem, 0, "a 7x7 stem on 4 channels");
    /* values over twelve decades, and denormals */
    ccase wide = {2, 20, 20, 32, 48, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1};
    check_kernel(&wide, 0, "wide values");
    ccase tiny = {1, 16, 16, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 2};
    {
        prepared pr;
        prepare(&tiny, &pr);
        kn_tensor *y = new_y(&pr);
        kn_status st = kn_cuda_conv_x3_run(pr.x, pr.w, NULL, y, &pr.at, 0, NULL, 0);
        double err = INFINITY, err32 = st_rel_err(pr.r32, pr.ref, pr.ny);
        if (st == KN_OK) {
            double *got = st_host_of(y);
            err = st_rel_err(got, pr.ref, pr.ny);
            free(got);
        }
        ok(st == KN_OK && !isnan(err), "denormal x runs: error %.3g, true f32 %.3g (%s the contract)", err, err32,
           err <= 2 * err32 + FLOOR ? "within" : "outside");
        kn_tensor_release(y);
        release(&pr);
    }
    /* refusals */
    {
        ccase six = {1, 8, 8, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
        prepared pr;
        prepare(&six, &pr);
        kn_tensor *y = new_y(&pr);
        ok(!kn_cuda_conv_x3_takes(pr.x, pr.w, y, &pr.at), "6 channels (not a multiple of 4): not taken");
        ok(kn_cuda_conv_x3_run(pr.x, pr.w, NULL, y, &pr.at, 0, NULL, 0) == KN_ERR_UNSUPPORTED,
           "and the run says so: %s", kn_last_error());
        kn_tensor_release(y);
        release(&pr);
    }
    conv2d_paths();
    done_testing();
}
#endif
