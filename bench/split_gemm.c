/* bench/split_gemm.c: kiln's split-precision f32 GEMM (kn_la_gemm_x3.cu)
 * against cuBLASLt's strict f32 GEMM (kiln's matmul in the "ieee" mode),
 * for speed and for accuracy, at the shapes of the samples and of the
 * real-model suite's f32 rows, and in every operand layout a forward and
 * a backward pass use.
 *
 * Each problem gets fresh uniform(-1, 1) inputs (and, for the "wide"
 * rows, values spread over 1e-6 .. 1e6 with random signs); the reference
 * is the same product in float64 through kiln's f64 matmul on the GPU.
 * Errors are max |got - ref| / max |ref| (the precision ledger's measure),
 * and "x f32" is that error over the strict f32 one: the "ieee" contract
 * allows at most 2. "bias" is the signed part of the error (bench_gpu.h's
 * bench_bias): toward zero, then toward minus infinity. Times are the mean of REPS back-to-back launches
 * between two CUDA events, in microseconds, with the TFLOP/s of 2 m n k.
 * Every tile shape is timed. (The forms of the kernel measured and not
 * kept are in bench/results/2026-11-30-h200-split-f32.md, with the runs
 * that measured them; this file's history has the code that built them.)
 *
 *   build/bench/split_gemm            SPLIT_ONLY=name,name  SPLIT_REPS=N
 *
 * KILN_X3_SPLITS=n splits every split-f32 call n ways (where its k allows):
 * how the launcher's wave model was fitted (session 16).
 *
 * Without a GPU it prints "split_gemm: no GPU" and exits 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_blas.h"
#include "cuda/kn_cuda_context.h"
#include "cuda/kn_cuda_gemm_x3.h"
#include "kn_kernels.h"
#include "kn_op.h"
#include "kn_plan_impl.h"
#include "kn_tensor.h"
#include "kn_view.h"

#include "bench_gpu.h"

typedef struct problem {
    const char *name;
    int64_t m, n, k, count;
    int a_kmajor, b_kmajor, wide;
} problem;

/* forward layers are a [m, k] . w [n, k]^T ("kk"); a backward pass's
 * input gradient is dy [m, n] . w [n, k] ("kn": b n-contiguous) and its
 * weight gradient dy^T [n_out, tokens] . x [tokens, k] ("mn") */
static const problem PROBLEMS[] = {
    {"large_linear", 64, 4096, 4096, 1, 1, 1, 0},
    {"block_qkv", 4096, 1536, 512, 1, 1, 1, 0},
    {"block_o", 4096, 512, 512, 1, 1, 1, 0},
    {"block_fc1", 4096, 2048, 512, 1, 1, 1, 0},
    {"block_fc2", 4096, 512, 2048, 1, 1, 1, 0},
    {"block_proj", 4096, 512, 512, 1, 1, 1, 0},
    {"block_fc1", 4096, 2048, 512, 1, 1, 1, 0},
    {"block_fc2", 4096, 512, 2048, 1, 1, 1, 0},
    {"bert_qkv", 1024, 2304, 768, 1, 1, 1, 0},
    {"bert_o", 1024, 768, 768, 1, 1, 1, 0},
    {"bert_ffn1", 1024, 3072, 768, 1, 1, 1, 0},
    {"bert_ffn2", 1024, 768, 3072, 1, 1, 1, 0},
    {"vit_qkv", 1576, 2304, 768, 1, 1, 1, 0},
    {"vit_o", 1576, 768, 768, 1, 1, 1, 0},
    {"vit_ffn1", 1576, 3072, 768, 1, 1, 1, 0},
    {"vit_ffn2", 1576, 768, 3072, 1, 1, 1, 0},
    {"bert_qkv_kn", 1024, 2304, 768, 1, 1, 0, 0},
    {"bert_o_kn", 1024, 768, 768, 1, 1, 0, 0},
    {"bert_ffn1_kn", 1024, 3072, 768, 1, 1, 0, 0},
    {"bert_ffn2_kn", 1024, 768, 3072, 1, 1, 0, 0},
    {"dx_fc2", 4096, 2048, 512, 1, 1, 0, 0},
    {"dw_fc1", 2048, 512, 4096, 1, 0, 0, 0},
    {"scores", 256, 256, 64, 128, 1, 1, 0},
    {"k128", 1024, 1024, 128, 1, 1, 1, 0},
    {"k256", 1024, 1024, 256, 1, 1, 1, 0},
    {"big", 4096, 4096, 4096, 1, 1, 1, 0},
    {"wide_k768", 1024, 768, 768, 1, 1, 1, 1},
    {"wide_k3072", 1024, 768, 3072, 1, 1, 1, 1},
};

static kn_tensor *gpu_tensor(kn_dtype dt, int64_t rows, int64_t cols, int64_t count, const double *vals)
{
    int64_t shape[3] = {count, rows, cols};
    kn_tensor *h = NULL, *d = NULL;
    if (kn_tensor_new(KN_F64, 3, shape, KN_CPU, &h) != KN_OK) return NULL;
    memcpy(kn_tensor_data(h), vals, sizeof(double) * (size_t)(count * rows * cols));
    kn_tensor *c = NULL;
    if (kn_tensor_cast(h, dt, &c) == KN_OK) kn_tensor_to_device(c, kn_cuda_current()->device, NULL, &d);
    kn_tensor_release(h);
    kn_tensor_release(c);
    return d;
}

/* the precision ledger's measure (kn_plan_ledger.c): max |got - ref| / max |ref| */
static double max_rel_err(kn_tensor *got, kn_tensor *ref)
{
    double e = INFINITY;
    if (kn_plan_rel_error(got, ref, NULL, &e) != KN_OK) printf("    error not measured: %s\n", kn_last_error());
    return e;
}

/* a logical [count, rows, cols] operand viewed from its stored layout:
 * stored transposed ([count, cols, rows]) when !row_major */
static kn_tensor *logical_view(kn_tensor *stored, bool transposed)
{
    if (!transposed) {
        kn_tensor_retain(stored);
        return stored;
    }
    int64_t shape[3] = {stored->shape[0], stored->shape[2], stored->shape[1]};
    int64_t strides[3] = {stored->strides[0], stored->strides[2], stored->strides[1]};
    kn_tensor *v = NULL;
    kn_tensor_view_of(stored, 3, shape, strides, stored->offset, &v);
    return v;
}

static kn_status run_lt(void *ud)
{
    return kn_cuda_matmul((const kn_opcall *)ud);
}

typedef struct x3_run {
    kn_cuda_x3_call call;
    int tile;
} x3_run;

static kn_status run_x3(void *ud)
{
    x3_run *r = ud;
    return kn_cuda_gemm_x3(&r->call, r->tile);
}


int main(void)
{
    int reps;
    cudaEvent_t e0, e1;
    if (!bench_gpu_begin("split_gemm", "SPLIT_REPS", &reps, &e0, &e1)) return 0;
    printf("# %d SMs; us per call (mean of %d), TFLOP/s, max rel error vs f64, error over strict f32's, "
           "bias (toward zero, toward -inf)\n",
           kn_cuda_current()->sm_count, reps);
    for (size_t pi = 0; pi < sizeof PROBLEMS / sizeof PROBLEMS[0]; pi++) {
        const problem *pb = &PROBLEMS[pi];
        if (!bench_wanted("SPLIT_ONLY", pb->name)) continue;
        int64_t na = pb->count * pb->m * pb->k, nb = pb->count * pb->n * pb->k, no = pb->count * pb->m * pb->n;
        double *va = malloc(sizeof(double) * (size_t)na), *vb = malloc(sizeof(double) * (size_t)nb);
        for (int64_t i = 0; i < na; i++)
            va[i] = pb->wide ? (bench_unit() < 0.5 ? -1 : 1) * pow(10.0, -6 + 12 * bench_unit()) : (float)(2 * bench_unit() - 1);
        for (int64_t i = 0; i < nb; i++)
            vb[i] = pb->wide ? (bench_unit() < 0.5 ? -1 : 1) * pow(10.0, -6 + 12 * bench_unit()) : (float)(2 * bench_unit() - 1);
        for (int64_t i = 0; i < na; i++) va[i] = (float)va[i];
        for (int64_t i = 0; i < nb; i++) vb[i] = (float)vb[i];
        /* stored: a as [count, m, k] (k-major) or [count, k, m]; b as [count, n, k] or [count, k, n] */
        kn_tensor *sa32 = gpu_tensor(KN_F32, pb->a_kmajor ? pb->m : pb->k, pb->a_kmajor ? pb->k : pb->m, pb->count, va);
        kn_tensor *sb32 = gpu_tensor(KN_F32, pb->b_kmajor ? pb->n : pb->k, pb->b_kmajor ? pb->k : pb->n, pb->count, vb);
        kn_tensor *sa64 = gpu_tensor(KN_F64, pb->a_kmajor ? pb->m : pb->k, pb->a_kmajor ? pb->k : pb->m, pb->count, va);
        kn_tensor *sb64 = gpu_tensor(KN_F64, pb->b_kmajor ? pb->n : pb->k, pb->b_kmajor ? pb->k : pb->n, pb->count, vb);
        if (!sa32 || !sb32 || !sa64 || !sb64) {
            printf("%s: setup failed: %s\n", pb->name, kn_last_error());
            return 1;
        }
        /* logical a [count, m, k], b [count, k, n] */
        kn_tensor *a32 = logical_view(sa32, !pb->a_kmajor), *b32 = logical_view(sb32, pb->b_kmajor);
        kn_tensor *a64 = logical_view(sa64, !pb->a_kmajor), *b64 = logical_view(sb64, pb->b_kmajor);
        int64_t oshape[3] = {pb->count, pb->m, pb->n};
        kn_tensor *o32 = NULL, *o64 = NULL, *ox = NULL;
        kn_tensor_new(KN_F32, 3, oshape, kn_cuda_current()->device, &o32);
        kn_tensor_new(KN_F64, 3, oshape, kn_cuda_current()->device, &o64);
        kn_tensor_new(KN_F32, 3, oshape, kn_cuda_current()->device, &ox);
        kn_opcall c32, c64;
        kn_opcall_init(&c32, KN_OP_MATMUL);
        c32.n_in = 2, c32.in[0] = a32, c32.in[1] = b32, c32.n_out = 1, c32.out[0] = o32;
        c64 = c32;
        /* cuBLASLt's strict engine, not kiln's default (the split kernel
         * itself at some shapes on Hopper) */
        c32.variant = KN_VARIANT_STRICT;
        c64.in[0] = a64, c64.in[1] = b64, c64.out[0] = o64;
        if (kn_cuda_matmul(&c64) != KN_OK || kn_cuda_matmul(&c32) != KN_OK) {
            printf("%s: matmul failed: %s\n", pb->name, kn_last_error());
            return 1;
        }
        double e32 = max_rel_err(o32, o64);
        double flops = 2.0 * (double)pb->m * (double)pb->n * (double)pb->k * (double)pb->count;
        float us = bench_time_us(run_lt, &c32, reps, e0, e1);
        printf("%-12s m=%lld n=%lld k=%lld batch=%lld %s%s\n", pb->name, (long long)pb->m, (long long)pb->n,
               (long long)pb->k, (long long)pb->count, pb->a_kmajor ? "a[m,k]" : "a[k,m]",
               pb->b_kmajor ? " b[n,k]" : " b[k,n]");
        double z32, d32;
        bench_bias(o32, o64, &z32, &d32);
        printf("  %-22s %9.2f us %7.1f TFLOP/s  err %.3e  bias %+.1e %+.1e\n", "cublasLt strict f32", us,
               flops / us / 1e6, e32, z32, d32);
        x3_run r;
        memset(&r, 0, sizeof r);
        r.call.p.a = kn_cuda_tensor_ptr(sa32);
        r.call.p.b = kn_cuda_tensor_ptr(sb32);
        r.call.p.y = kn_cuda_tensor_ptr(ox);
        r.call.p.m = pb->m, r.call.p.n = pb->n, r.call.p.k = pb->k;
        r.call.p.lda = pb->a_kmajor ? pb->k : pb->m;
        r.call.p.ldb = pb->b_kmajor ? pb->k : pb->n;
        r.call.p.ldy = pb->n;
        r.call.p.sa = pb->m * pb->k, r.call.p.sb = pb->n * pb->k, r.call.p.sy = pb->m * pb->n;
        r.call.p.vec2 = pb->n % 2 == 0;
        /* SPLIT_BIAS=1: a bias of zeros in the epilogue, as a model's
         * linear layers read one (the sums, and so the errors, unchanged) */
        kn_tensor *bias = NULL;
        if (getenv("SPLIT_BIAS") && atoi(getenv("SPLIT_BIAS"))) {
            double *vz = calloc((size_t)pb->n, sizeof *vz);
            bias = vz ? gpu_tensor(KN_F32, 1, pb->n, 1, vz) : NULL;
            free(vz);
            r.call.p.bias = bias ? kn_cuda_tensor_ptr(bias) : NULL;
        }
        r.call.a_kmajor = pb->a_kmajor, r.call.b_kmajor = pb->b_kmajor, r.call.count = pb->count;
        for (int tile = 0; tile < KN_CUDA_X3_TILES; tile++) {
            r.tile = tile;
            cudaMemsetAsync(r.call.p.y, 0xff, (size_t)no * 4, kn_cuda_stream()); /* NaN: a missed store shows */
            if (run_x3(&r) != KN_OK) {
                printf("  x3 %s: %s\n", kn_cuda_gemm_x3_tile_name(tile), kn_last_error());
                continue;
            }
            double ex = max_rel_err(ox, o64), zx, dx;
            bench_bias(ox, o64, &zx, &dx);
            float ux = bench_time_us(run_x3, &r, reps, e0, e1);
            char label[48];
            snprintf(label, sizeof label, "x3 %s", kn_cuda_gemm_x3_tile_name(tile));
            printf("  %-22s %9.2f us %7.1f TFLOP/s  err %.3e  %.2f x f32  speedup %.2f  bias %+.1e %+.1e\n", label,
                   ux, flops / ux / 1e6, ex, e32 > 0 ? ex / e32 : (ex > 0 ? INFINITY : 0), us / ux, zx, dx);
        }
        free(va);
        free(vb);
        kn_tensor *all[] = {sa32, sb32, sa64, sb64, a32, b32, a64, b64, o32, o64, ox, bias};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_release(all[i]);
        fflush(stdout);
    }
    return 0;
}
