/* bench/split_conv.c: kiln's split-precision f32 convolution (the
 * convolution form of kn_la_gemm_x3.cu) against cuDNN's strict f32
 * engines, NCHW (what f32 models ran before it) and channels-last, at the
 * convolutions of the convnet sample and of the suite's ResNets, for speed
 * and accuracy.
 *
 * Each problem gets fresh uniform(-1, 1) inputs, a bias and a ReLU (in the
 * epilogue where the engine has one). The reference is the same conv in
 * float64 through kiln's f64 conv2d on the GPU. Errors are max |got - ref|
 * / max |ref| (the precision ledger's measure), "x f32" the error over
 * cuDNN strict's (the "ieee" contract allows 2). Times are the mean of
 * REPS back-to-back calls between two CUDA events, in microseconds, with
 * the TFLOP/s of 2 N P Q K r s C.
 *
 *   build/bench/split_conv            CONV_ONLY=name,name  CONV_REPS=N
 *
 * Without a GPU, or off Hopper, it says so and exits 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_context.h"
#include "cuda/kn_cuda_conv_x3.h"
#include "cuda/kn_cuda_conv.h"
#include "kn_kernels.h"
#include "kn_op.h"
#include "kn_plan_impl.h"
#include "kn_tensor.h"
#include "kn_view.h"

#include "bench_gpu.h"

typedef struct problem {
    const char *name;
    int n, h, w, c, k, r, stride, pad;
} problem;

/* channels of 3 are the layout pass's 4 (an image padded to 16 bytes) */
static const problem PROBLEMS[] = {
    {"convnet_l1", 32, 224, 224, 4, 32, 3, 2, 1},  {"convnet_l2", 32, 112, 112, 32, 64, 3, 2, 1},
    {"convnet_l3", 32, 56, 56, 64, 128, 3, 2, 1},  {"convnet_l4", 32, 28, 28, 128, 256, 3, 2, 1},
    {"r18_stem", 32, 224, 224, 4, 64, 7, 2, 3},    {"r18_56", 32, 56, 56, 64, 64, 3, 1, 1},
    {"r18_56s2", 32, 56, 56, 64, 128, 3, 2, 1},    {"r18_28", 32, 28, 28, 128, 128, 3, 1, 1},
    {"r18_28s2", 32, 28, 28, 128, 256, 3, 2, 1},   {"r18_14", 32, 14, 14, 256, 256, 3, 1, 1},
    {"r18_14s2", 32, 14, 14, 256, 512, 3, 2, 1},   {"r18_7", 32, 7, 7, 512, 512, 3, 1, 1},
    {"r50_56", 16, 56, 56, 64, 64, 3, 1, 1},       {"r50_28", 16, 28, 28, 128, 128, 3, 1, 1},
    {"r50_14", 16, 14, 14, 256, 256, 3, 1, 1},     {"r50_7", 16, 7, 7, 512, 512, 3, 1, 1},
};

/* a GPU tensor of dtype dt and shape s holding v */
static kn_tensor *gpu_tensor(kn_dtype dt, int ndim, const int64_t *s, const double *v)
{
    kn_tensor *h = NULL, *c = NULL, *d = NULL;
    if (kn_tensor_new(KN_F64, ndim, s, KN_CPU, &h) != KN_OK) return NULL;
    memcpy(kn_tensor_data(h), v, sizeof(double) * (size_t)kn_tensor_numel(h));
    if (kn_tensor_cast(h, dt, &c) == KN_OK) kn_tensor_to_device(c, kn_cuda_current()->device, NULL, &d);
    kn_tensor_release(h);
    kn_tensor_release(c);
    return d;
}

typedef struct run {
    kn_opcall c;
    int act;
    int x3_variant; /* >= 0: kn_cuda_conv_x3_run with it */
} run;

static kn_status run_once(void *ud)
{
    run *r = ud;
    if (r->x3_variant >= 0)
        return kn_cuda_conv_x3_run(r->c.in[0], r->c.in[1], r->c.in[2], r->c.out[0], &r->c.a, r->act, NULL,
                                   r->x3_variant);
    return kn_cuda_conv2d_fused(&r->c, r->act);
}

static double err_of(kn_tensor *y, bool nhwc, kn_tensor *ref)
{
    kn_tensor v = nhwc ? kn_view_nhwc_as_nchw(y) : *y;
    double e = INFINITY;
    if (kn_plan_rel_error(&v, ref, NULL, &e) != KN_OK) printf("    error not measured: %s\n", kn_last_error());
    return e;
}

/* bench_bias of y (channels-last when nhwc) against the NCHW reference */
static void bias_of(kn_tensor *y, bool nhwc, kn_tensor *ref, double *shrink, double *down)
{
    kn_tensor v = nhwc ? kn_view_nhwc_as_nchw(y) : *y;
    bench_bias(&v, ref, shrink, down);
}

int main(void)
{
    int reps;
    cudaEvent_t e0, e1;
    if (!bench_gpu_begin("split_conv", "CONV_REPS", &reps, &e0, &e1)) return 0;
    if (!kn_cuda_conv_x3_available()) {
        printf("split_conv: the split-precision convolution runs on Hopper only\n");
        return 0;
    }
    printf("# %d SMs; us per call (mean of %d), TFLOP/s, max rel error vs f64, error over strict f32's, "
           "bias (toward zero, toward -inf)\n",
           kn_cuda_current()->sm_count, reps);
    for (size_t pi = 0; pi < sizeof PROBLEMS / sizeof PROBLEMS[0]; pi++) {
        const problem *pb = &PROBLEMS[pi];
        if (!bench_wanted("CONV_ONLY", pb->name)) continue;
        int p = (pb->h + 2 * pb->pad - pb->r) / pb->stride + 1, q = (pb->w + 2 * pb->pad - pb->r) / pb->stride + 1;
        int64_t nx = (int64_t)pb->n * pb->c * pb->h * pb->w, nw = (int64_t)pb->k * pb->c * pb->r * pb->r;
        double *x = malloc(sizeof(double) * (size_t)nx), *xl = malloc(sizeof(double) * (size_t)nx);
        double *w = malloc(sizeof(double) * (size_t)nw), *wl = malloc(sizeof(double) * (size_t)nw);
        double *b = malloc(sizeof(double) * (size_t)pb->k);
        /* NCHW values, and the same values channels-last */
        for (int64_t i = 0; i < nx; i++) x[i] = (float)(2 * bench_unit() - 1);
        for (int64_t i = 0; i < nw; i++) w[i] = (float)((2 * bench_unit() - 1) * 0.1);
        for (int i = 0; i < pb->k; i++) b[i] = (float)(2 * bench_unit() - 1);
        int64_t hw = (int64_t)pb->h * pb->w, rr = (int64_t)pb->r * pb->r;
        for (int n = 0; n < pb->n; n++)
            for (int c = 0; c < pb->c; c++)
                for (int64_t i = 0; i < hw; i++) xl[((int64_t)n * hw + i) * pb->c + c] = x[((int64_t)n * pb->c + c) * hw + i];
        for (int k = 0; k < pb->k; k++)
            for (int c = 0; c < pb->c; c++)
                for (int64_t i = 0; i < rr; i++) wl[((int64_t)k * rr + i) * pb->c + c] = w[((int64_t)k * pb->c + c) * rr + i];
        int64_t xs[4] = {pb->n, pb->c, pb->h, pb->w}, xls[4] = {pb->n, pb->h, pb->w, pb->c};
        int64_t ws[4] = {pb->k, pb->c, pb->r, pb->r}, wls[4] = {pb->k, pb->r, pb->r, pb->c}, bs[1] = {pb->k};
        int64_t ys[4] = {pb->n, pb->k, p, q}, yls[4] = {pb->n, p, q, pb->k};
        kn_tensor *x64 = gpu_tensor(KN_F64, 4, xs, x), *w64 = gpu_tensor(KN_F64, 4, ws, w), *b64 = gpu_tensor(KN_F64, 1, bs, b);
        kn_tensor *x32 = gpu_tensor(KN_F32, 4, xs, x), *w32 = gpu_tensor(KN_F32, 4, ws, w), *b32 = gpu_tensor(KN_F32, 1, bs, b);
        kn_tensor *xl32 = gpu_tensor(KN_F32, 4, xls, xl), *wl32 = gpu_tensor(KN_F32, 4, wls, wl);
        kn_tensor *y64 = NULL, *y32 = NULL, *yl32 = NULL;
        kn_tensor_new(KN_F64, 4, ys, kn_cuda_current()->device, &y64);
        kn_tensor_new(KN_F32, 4, ys, kn_cuda_current()->device, &y32);
        kn_tensor_new(KN_F32, 4, yls, kn_cuda_current()->device, &yl32);
        run r64, rs, rl;
        memset(&r64, 0, sizeof r64);
        kn_opcall_init(&r64.c, KN_OP_CONV2D);
        r64.c.a.stride[0] = r64.c.a.stride[1] = pb->stride;
        r64.c.a.padding[0] = r64.c.a.padding[1] = pb->pad;
        r64.c.n_in = 3, r64.c.n_out = 1;
        r64.act = 1, r64.x3_variant = -1;
        r64.c.in[0] = x64, r64.c.in[1] = w64, r64.c.in[2] = b64, r64.c.out[0] = y64;
        rs = r64, rl = r64;
        rs.c.in[0] = x32, rs.c.in[1] = w32, rs.c.in[2] = b32, rs.c.out[0] = y32;
        rs.c.variant = KN_VARIANT_STRICT;
        rl.c.in[0] = xl32, rl.c.in[1] = wl32, rl.c.in[2] = b32, rl.c.out[0] = yl32;
        rl.c.a.in_layout = rl.c.a.out_layout = KN_LAYOUT_NHWC;
        rl.c.variant = KN_VARIANT_STRICT;
        if (run_once(&r64) != KN_OK) {
            printf("%s: the float64 reference failed: %s\n", pb->name, kn_last_error());
            return 1;
        }
        double flops = 2.0 * pb->n * p * q * (double)pb->k * rr * pb->c;
        printf("%-11s %dx%dx%dx%d -> %d, %dx%d stride %d pad %d: %.2f GFLOP\n", pb->name, pb->n, pb->h, pb->w, pb->c,
               pb->k, pb->r, pb->r, pb->stride, pb->pad, flops / 1e9);
        /* cuDNN strict, NCHW: bias and ReLU as the engine takes them */
        float us = bench_time_us(run_once, &rs, reps, e0, e1);
        double es = err_of(y32, false, y64), zs, ds;
        bias_of(y32, false, y64, &zs, &ds);
        printf("  %-34s %9.2f us %6.1f TFLOP/s  err %.3e  bias %+.1e %+.1e  (%s)\n", "cuDNN strict NCHW", us,
               flops / us / 1e6, es, zs, ds, kn_cuda_current()->variant_label);
        float usl = bench_time_us(run_once, &rl, reps, e0, e1);
        double el = err_of(yl32, true, y64), zl, dl;
        bias_of(yl32, true, y64, &zl, &dl);
        printf("  %-34s %9.2f us %6.1f TFLOP/s  err %.3e  bias %+.1e %+.1e  (%s)\n", "cuDNN strict NHWC", usl,
               flops / usl / 1e6, el, zl, dl, kn_cuda_current()->variant_label);
        double strict_err = es < el ? es : el;
        float best = us < usl ? us : usl;
        for (int v = 0; v < kn_cuda_conv_x3_variant_count(); v++) {
            run rx = rl;
            rx.x3_variant = v;
            cudaMemsetAsync(kn_cuda_tensor_ptr(yl32), 0xff, (size_t)kn_tensor_numel(yl32) * 4, kn_cuda_stream());
            if (run_once(&rx) != KN_OK) {
                printf("  x3 variant %d: %s\n", v, kn_last_error());
                continue;
            }
            double ex = err_of(yl32, true, y64), zx, dx;
            bias_of(yl32, true, y64, &zx, &dx);
            char label[160];
            snprintf(label, sizeof label, "%s%s", v == 0 ? "default: " : "", kn_cuda_current()->variant_label);
            float ux = bench_time_us(run_once, &rx, reps, e0, e1);
            printf("  %-34.34s %9.2f us %6.1f TFLOP/s  err %.3e  %.2f x f32  speedup %.2f  bias %+.1e %+.1e\n", label,
                   ux, flops / ux / 1e6, ex, strict_err > 0 ? ex / strict_err : 0, best / ux, zx, dx);
        }
        kn_tensor *all[] = {x64, w64, b64, x32, w32, b32, xl32, wl32, y64, y32, yl32};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_release(all[i]);
        free(x), free(xl), free(w), free(wl), free(b);
        fflush(stdout);
    }
    return 0;
}
