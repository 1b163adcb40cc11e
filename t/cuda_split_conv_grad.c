/* t/cuda_split_conv_grad.c: kiln's split-precision f32 gradients of a
 * channels-last convolution (kernels/cuda/kn_cuda_conv_x3.c: the input's
 * gradient one stride-1 convolution a class of input pixels, scattered
 * into its strided subgrid; the weight's, the weight-gradient form of
 * kn_la_gemm_x3.cu split over the output pixels), against float64 on
 * fresh random inputs (seed printed; KILN_SEED repeats).
 *
 * - conv2d_input_grad and conv2d_weight_grad through kn_cuda_conv2d on
 *   random geometries (strides 1 to 3, windows 1x1 to 5x5, paddings,
 *   dilations for the weight's, sizes that are not tile multiples): the
 *   default runs the split kernels (their label says so), and its error
 *   (max |got - ref| / max |ref|) is held to the "ieee" contract against
 *   cuDNN's strict f32 engines on the same call (KN_VARIANT_STRICT): at
 *   most twice theirs, plus the precision ledger's floor.
 * - The convnet sample's layers, and a weight gradient split over many
 *   pixels.
 * - What the split kernels refuse runs cuDNN's: a stride longer than the
 *   window (an input pixel no tap reaches), channels not a multiple of 4.
 *
 * Without a CUDA device, or off Hopper (the kernels are wgmma), it skips.
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
#include "cuda/kn_cuda_conv.h"
#include "cuda/kn_cuda_conv_x3.h"
#include "kn_tensor.h"
#include "ops_testlib.h"
#include "split_testlib.h"

typedef struct gcase {
    int n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw;
} gcase;

static kn_tensor *gpu_nan(const int64_t *shape)
{
    kn_tensor *t = NULL;
    kn_tensor_new(KN_F32, 4, shape, kn_cuda_current()->device, &t);
    /* NaN: a missed store fails */
    cudaMemsetAsync(kn_cuda_tensor_ptr(t), 0xff, (size_t)kn_tensor_numel(t) * 4, kn_cuda_stream());
    return t;
}

/* One case: x {n, h, w, c}, w {k, r, s, c}, dy {n, p, q, k}, all
 * channels-last, and the float64 gradients of x and w */
typedef struct prepared {
    gcase cs;
    int p, q;
    int64_t xs[4], ws[4], ys[4];
    kn_tensor *x, *w, *dy;
    double *dx_ref, *dw_ref;
} prepared;

static void prepare(const gcase *cs, prepared *pr)
{
    memset(pr, 0, sizeof *pr);
    pr->cs = *cs;
    pr->p = st_out_dim(cs->h, cs->r, cs->sh, cs->ph, cs->dh);
    pr->q = st_out_dim(cs->w, cs->s, cs->sw, cs->pw, cs->dw);
    int64_t xs[4] = {cs->n, cs->h, cs->w, cs->c}, ws[4] = {cs->k, cs->r, cs->s, cs->c},
            ys[4] = {cs->n, pr->p, pr->q, cs->k};
    memcpy(pr->xs, xs, sizeof xs), memcpy(pr->ws, ws, sizeof ws), memcpy(pr->ys, ys, sizeof ys);
    int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], nw = ws[0] * ws[1] * ws[2] * ws[3], ny = ys[0] * ys[1] * ys[2] * ys[3];
    float *hx = malloc(sizeof(float) * (size_t)nx), *hw = malloc(sizeof(float) * (size_t)nw),
          *hy = malloc(sizeof(float) * (size_t)ny);
    for (int64_t i = 0; i < nx; i++) hx[i] = st_draw(0);
    for (int64_t i = 0; i < nw; i++) hw[i] = st_draw(0) * 0.3f;
    for (int64_t i = 0; i < ny; i++) hy[i] = st_draw(0);
    pr->dx_ref = calloc((size_t)nx, sizeof(double));
    pr->dw_ref = calloc((size_t)nw, sizeof(double));
    for (int b = 0; b < cs->n; b++)
        for (int oh = 0; oh < pr->p; oh++)
            for (int ow = 0; ow < pr->q; ow++)
                for (int r = 0; r < cs->r; r++)
                    for (int s = 0; s < cs->s; s++) {
                        int ih = oh * cs->sh - cs->ph + r * cs->dh, iw = ow * cs->sw - cs->pw + s * cs->dw;
                        if (ih < 0 || ih >= cs->h || iw < 0 || iw >= cs->w) continue;
                        const float *g = hy + (((int64_t)b * pr->p + oh) * pr->q + ow) * cs->k;
                        int64_t xo = (((int64_t)b * cs->h + ih) * cs->w + iw) * cs->c;
                        for (int o = 0; o < cs->k; o++) {
                            int64_t wo = (((int64_t)o * cs->r + r) * cs->s + s) * cs->c;
                            for (int c = 0; c < cs->c; c++) {
                                pr->dx_ref[xo + c] += (double)g[o] * hw[wo + c];
                                pr->dw_ref[wo + c] += (double)g[o] * hx[xo + c];
                            }
                        }
                    }
    pr->x = st_gpu_of(hx, 4, xs);
    pr->w = st_gpu_of(hw, 4, ws);
    pr->dy = st_gpu_of(hy, 4, ys);
    free(hx), free(hw), free(hy);
}

static void release(prepared *pr)
{
    kn_tensor_release(pr->x);
    kn_tensor_release(pr->w);
    kn_tensor_release(pr->dy);
    free(pr->dx_ref), free(pr->dw_ref);
}

/* the gradient op (input_grad or not) of case pr in variant v: its error
 * against float64 and the label of what ran */
static kn_status grad_call(const prepared *pr, bool input_grad, int variant, double *err, char *label, size_t size)
{
    const gcase *cs = &pr->cs;
    kn_tensor *out = gpu_nan(input_grad ? pr->xs : pr->ws);
    kn_opcall c;
    kn_opcall_init(&c, input_grad ? KN_OP_CONV2D_INPUT_GRAD : KN_OP_CONV2D_WEIGHT_GRAD);
    c.a.stride[0] = cs->sh, c.a.stride[1] = cs->sw;
    c.a.padding[0] = cs->ph, c.a.padding[1] = cs->pw;
    c.a.dilation[0] = cs->dh, c.a.dilation[1] = cs->dw;
    c.a.groups = 1;
    c.a.in_layout = c.a.out_layout = KN_LAYOUT_NHWC;
    c.a.nshape = 4;
    memcpy(c.a.shape, input_grad ? pr->xs : pr->ws, 4 * sizeof(int64_t));
    c.n_in = 2;
    c.in[0] = input_grad ? pr->dy : pr->x;
    c.in[1] = input_grad ? pr->w : pr->dy;
    c.n_out = 1, c.out[0] = out;
    c.variant = variant;
    kn_status st = kn_cuda_conv2d(&c);
    if (st == KN_OK) {
        double *got = st_host_of(out);
        *err = st_rel_err(got, input_grad ? pr->dx_ref : pr->dw_ref, kn_tensor_numel(out));
        free(got);
        snprintf(label, size, "%s", kn_cuda_current()->variant_label);
    }
    kn_tensor_release(out);
    return st;
}

static void describe(const gcase *c, char *buf, size_t size)
{
    snprintf(buf, size, "%dx%dx%dx%d -> %d, %dx%d window, stride %d,%d pad %d,%d dil %d,%d", c->n, c->h, c->w, c->c,
             c->k, c->r, c->s, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw);
}

/* Both gradients of cs: split (want_split) within the contract of
 * cuDNN's strict engines, or (not taken) cuDNN's own */
static void check(const gcase *cs, bool want_dx_split, bool want_dw_split, const char *what)
{
    prepared pr;
    prepare(cs, &pr);
    char d[200], label[200];
    describe(cs, d, sizeof d);
    for (int pass = 0; pass < 2; pass++) {
        bool input_grad = pass == 0, want = input_grad ? want_dx_split : want_dw_split;
        const char *op = input_grad ? "input gradient" : "weight gradient";
        double e_strict = 0, e = 0;
        char slabel[200];
        kn_status ss = grad_call(&pr, input_grad, KN_VARIANT_STRICT, &e_strict, slabel, sizeof slabel);
        kn_status st = grad_call(&pr, input_grad, 0, &e, label, sizeof label);
        if (st != KN_OK) {
            ok(0, "%s: %s, %s ran: %s", what, d, op, kn_last_error());
            continue;
        }
        bool split = strstr(label, "split-f32") != NULL;
        ok(split == want, "%s: %s, %s: %s (%s)", what, d, op, want ? "the split kernels" : "cuDNN's", label);
        /* cuDNN refusing the strict call leaves the contract's absolute form */
        double bound = ss == KN_OK ? 2 * e_strict + FLOOR : 1e-5;
        ok(e <= bound, "%s: %s, %s: error %.3g, strict f32 %.3g (%s)", what, d, op, e,
           ss == KN_OK ? e_strict : NAN, ss == KN_OK ? slabel : "refused");
    }
    release(&pr);
}

int main(void)
{
    if (!kn_cuda_available()) skip_all(kn_cuda_unavailable_reason());
    if (kn_cuda_init() != KN_OK) skip_all(kn_last_error());
    if (!kn_cuda_conv_x3_available()) skip_all("the split-precision convolution runs on Hopper (sm_90) only");
    tl_seed();
    /* the convnet sample's second layer (two images, a quarter of the
     * pixels) and its first, whose image channels the layout pass pads to 4 */
    check(&(gcase){2, 56, 56, 32, 64, 3, 3, 2, 2, 1, 1, 1, 1}, true, true, "convnet layer 2");
    check(&(gcase){2, 64, 64, 4, 32, 3, 3, 2, 2, 1, 1, 1, 1}, true, true, "convnet layer 1");
    check(&(gcase){2, 14, 14, 128, 256, 3, 3, 2, 2, 1, 1, 1, 1}, true, true, "convnet layer 4");
    /* many pixels: the weight's gradient split many ways */
    check(&(gcase){8, 48, 48, 16, 32, 3, 3, 1, 1, 1, 1, 1, 1}, true, true, "a long sum");
    /* stride 3 with a 5x5 window, stride 2 with 2x2 (one tap a class), odd
     * output channels of the input's gradient */
    check(&(gcase){2, 23, 19, 8, 12, 5, 5, 3, 3, 2, 2, 1, 1}, true, true, "stride 3");
    check(&(gcase){3, 16, 18, 12, 8, 2, 2, 2, 2, 0, 0, 1, 1}, true, true, "2x2 stride 2");
    check(&(gcase){2, 9, 11, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1}, true, false, "5 channels");
    /* not taken: a stride longer than the window; dilation (the input's) */
    check(&(gcase){2, 12, 12, 8, 8, 1, 1, 2, 2, 0, 0, 1, 1}, false, true, "1x1 stride 2");
    check(&(gcase){2, 15, 15, 8, 8, 3, 3, 1, 1, 2, 2, 2, 2}, false, true, "dilation 2");
    /* random geometries */
    static const int chans[] = {4, 8, 12, 20, 36};
    static const int wins[][2] = {{1, 1}, {3, 3}, {5, 5}, {1, 3}, {2, 2}, {3, 1}};
    for (int i = 0; i < 12; i++) {
        gcase cs;
        memset(&cs, 0, sizeof cs);
        cs.n = (int)tl_int(1, 3), cs.h = (int)tl_int(6, 30), cs.w = (int)tl_int(6, 30);
        cs.c = chans[tl_int(0, 4)], cs.k = chans[tl_int(0, 4)];
        cs.r = wins[i % 6][0], cs.s = wins[i % 6][1];
        cs.sh = (int)tl_int(1, cs.r < 2 ? cs.r : 2), cs.sw = (int)tl_int(1, cs.s < 2 ? cs.s : 2);
        cs.ph = (int)tl_int(0, cs.r / 2), cs.pw = (int)tl_int(0, cs.s / 2);
        cs.dh = cs.dw = 1;
        check(&cs, true, true, "random");
    }
    done_testing();
}
#endif
