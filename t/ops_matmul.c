/* ops_matmul: matmul against a float64 reference computed here with naive
 * loops, on fresh random inputs (the seed is printed; KILN_TEST_SEED=N
 * repeats a run).
 *
 * Covers PyTorch's 1-D / 2-D / batched / broadcast-batched rules, strided
 * operands (transposed, offset, every-other-row, stride-0 batch), sizes that
 * straddle the gemm's block sizes, zero-size dims, f32/f64/bf16/f16 and
 * mixed dtypes, both the AVX2 and the generic micro-kernels, NaN, and the
 * shape errors by message; and outputs with other strides than contiguous
 * (a plan's head-merge layout, padded rows, a transposed output). Tolerances are the textbook bound for a sum
 * computed in order, (K+2)u * sum|a*b|, plus the output's rounding, so a
 * wrong or missing term fails while rounding never does.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kn_backend.h"
#include "kn_op.h"
#include "kn_tensor.h"
#include "tap.h"
#include "kn_clock.h"

/* ---- random inputs ---- */

static uint64_t rng_state;

static uint64_t rnd_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rnd_uniform(void) /* [-1, 1) */
{
    return (double)(rnd_u64() >> 11) * 0x1p-52 - 1.0;
}

static void seed_rng(void)
{
    const char *s = getenv("KILN_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 10)
                      : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    rng_state = seed;
    printf("# seed %llu\n", (unsigned long long)seed);
}

/* A view of the given shape, strides (non-negative) and offset over fresh
 * random storage: the way to get transposed, sliced and expanded operands. */
static kn_tensor *rand_view(kn_dtype dt, int nd, const int64_t *shape, const int64_t *strides,
                            int64_t offset)
{
    int64_t span = offset + 1; /* one past the furthest element */
    for (int i = 0; i < nd; i++) span += shape[i] > 0 ? (shape[i] - 1) * strides[i] : 0;
    kn_tensor *base = NULL, *v = NULL;
    if (kn_tensor_new(dt, 1, &span, KN_CPU, &base) != KN_OK) return NULL;
    char *p = kn_tensor_data(base);
    size_t esz = kn_dtype_size(dt);
    for (int64_t i = 0; i < span; i++) kn_store_f64(p + (size_t)i * esz, dt, rnd_uniform());
    kn_tensor_view_of(base, nd, shape, strides, offset, &v);
    kn_tensor_release(base);
    return v;
}

static kn_tensor *rand_tensor(kn_dtype dt, int nd, const int64_t *shape)
{
    int64_t st[KN_MAX_DIMS];
    kn_contiguous_strides(nd, shape, st);
    return rand_view(dt, nd, shape, st, 0);
}

/* Element at a multi-index, through the strides (test-side, no kernel code). */
static double at(const kn_tensor *t, const int64_t *idx)
{
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) off += idx[i] * t->strides[i];
    return kn_load_f64((char *)t->storage->data + off * (int64_t)kn_dtype_size(t->dtype), t->dtype);
}

static void set_at(kn_tensor *t, const int64_t *idx, double v)
{
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) off += idx[i] * t->strides[i];
    kn_store_f64((char *)t->storage->data + off * (int64_t)kn_dtype_size(t->dtype), t->dtype, v);
}

/* Next multi-index in row-major order; 0 after the last. */
static int next_index(int nd, const int64_t *shape, int64_t *idx)
{
    for (int i = nd - 1; i >= 0; i--) {
        if (++idx[i] < shape[i]) return 1;
        idx[i] = 0;
    }
    return 0;
}

/* ---- the reference ---- */

/* ref[i] and mag[i] = sum|a*b| for every output element, in row-major order
 * over the output shape, computed from PyTorch's rules directly. */
static void ref_matmul(const kn_tensor *a, const kn_tensor *b, int ond, const int64_t *oshape,
                       double *ref, double *mag)
{
    int a1 = a->ndim == 1, b1 = b->ndim == 1;
    int nbat = ond - !a1 - !b1;
    int64_t K = a->shape[a->ndim - 1];
    int64_t oi[KN_MAX_DIMS] = {0}, n = kn_numel_of(ond, oshape);
    for (int64_t e = 0; e < n; e++, next_index(ond, oshape, oi)) {
        int64_t ai[KN_MAX_DIMS] = {0}, bi[KN_MAX_DIMS] = {0};
        for (int d = 0; d < a->ndim - 2; d++)
            ai[d] = a->shape[d] == 1 ? 0 : oi[nbat - (a->ndim - 2) + d];
        for (int d = 0; d < b->ndim - 2; d++)
            bi[d] = b->shape[d] == 1 ? 0 : oi[nbat - (b->ndim - 2) + d];
        if (!a1) ai[a->ndim - 2] = oi[nbat];
        if (!b1) bi[b->ndim - 1] = oi[ond - 1];
        double s = 0, m = 0;
        for (int64_t k = 0; k < K; k++) {
            ai[a->ndim - 1] = k;
            bi[b1 ? 0 : b->ndim - 2] = k;
            double p = at(a, ai) * at(b, bi);
            s += p;
            m += fabs(p);
        }
        ref[e] = s;
        mag[e] = m;
    }
}

/* Unit roundoff of the sums (f64 for f64 outputs, else f32) and of the
 * output's own rounding, and an absolute floor for f16 subnormals. */
static void tolerances(kn_dtype out, double *u_acc, double *u_out, double *u_abs)
{
    *u_acc = out == KN_F64 ? 0x1p-53 : 0x1p-24;
    *u_out = out == KN_BF16 ? 0x1p-8 : out == KN_F16 ? 0x1p-11 : 0.0;
    *u_abs = out == KN_F16 ? 0x1p-24 : 0x1p-1000;
}

/* Whether got matches want within the bound; NaN matches only NaN (the
 * test is written so that NaN fails `<=`). */
static int close_enough(double got, double want, double bound)
{
    if (isnan(want)) return isnan(got);
    return fabs(got - want) <= bound;
}

/* ---- one case ---- */

static kn_status run_matmul(kn_tensor *a, kn_tensor *b, kn_tensor **out)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_MATMUL);
    c.n_in = 2;
    c.in[0] = a;
    c.in[1] = b;
    kn_status st = kn_op_eager(&c, KN_CPU);
    *out = st == KN_OK ? c.out[0] : NULL;
    return st;
}

static void compare_case(const char *name, kn_tensor *a, kn_tensor *b, kn_tensor *o, int wnd, const int64_t *want);

/* Multiply a and b (released here), compare with the reference; `want` is
 * the expected output shape. */
static void check_case(const char *name, kn_tensor *a, kn_tensor *b, int wnd,
                       const int64_t *want)
{
    kn_tensor *o = NULL;
    kn_status st = run_matmul(a, b, &o);
    if (!ok(st == KN_OK, "%s: runs", name)) {
        printf("#   %s\n", kn_last_error());
        kn_tensor_release(a);
        kn_tensor_release(b);
        return;
    }
    compare_case(name, a, b, o, wnd, want);
}

/* Compare o = a @ b with the reference (a, b, o released here). */
static void compare_case(const char *name, kn_tensor *a, kn_tensor *b, kn_tensor *o, int wnd, const int64_t *want)
{
    int shape_ok = o->ndim == wnd && (wnd == 0 || memcmp(o->shape, want, sizeof(int64_t) * (size_t)wnd) == 0);
    char gs[128], ws[128];
    ok(shape_ok, "%s: shape %s (want %s)", name, kn_shape_str(o->ndim, o->shape, gs, sizeof gs),
       kn_shape_str(wnd, want, ws, sizeof ws));
    kn_dtype wdt = kn_dtype_promote(a->dtype, b->dtype);
    is_int(o->dtype, wdt, "dtype is the promoted one");
    int64_t n = kn_tensor_numel(o);
    if (shape_ok && o->dtype == wdt) {
        double *ref = malloc(sizeof(double) * (size_t)(n + 1));
        double *mag = malloc(sizeof(double) * (size_t)(n + 1));
        ref_matmul(a, b, o->ndim, o->shape, ref, mag);
        double ua, uo, uabs, worst = 0;
        tolerances(o->dtype, &ua, &uo, &uabs);
        int64_t K = a->shape[a->ndim - 1], bad = -1, idx[KN_MAX_DIMS] = {0};
        for (int64_t e = 0; e < n; e++, next_index(o->ndim, o->shape, idx)) {
            double got = at(o, idx), bound = (double)(K + 2) * ua * mag[e] + uo * fabs(ref[e]) + uabs;
            if (!close_enough(got, ref[e], bound)) {
                if (bad < 0) bad = e;
            } else if (mag[e] > 0 && fabs(got - ref[e]) / mag[e] > worst) {
                worst = fabs(got - ref[e]) / mag[e];
            }
        }
        if (!ok(bad < 0, "%s: %lld elements match the f64 reference (K %lld)", name,
                (long long)n, (long long)K)) {
            int64_t bi[KN_MAX_DIMS] = {0};
            for (int64_t e = 0; e < bad; e++) next_index(o->ndim, o->shape, bi);
            printf("#   element %lld: got %.17g want %.17g (mag %g)\n", (long long)bad, at(o, bi),
                   ref[bad], mag[bad]);
        }
        free(ref);
        free(mag);
    }
    kn_tensor_release(o);
    kn_tensor_release(a);
    kn_tensor_release(b);
}

#define SHAPE(...) (int64_t[]){__VA_ARGS__}
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
/* check a contiguous (a) @ (b) case of dtype dt against want */
#define CASE(name, dt, A, B, W)                                                         \
    check_case(name, rand_tensor(dt, NDIM A, SHAPE A), rand_tensor(dt, NDIM B, SHAPE B), \
               NDIM W, SHAPE W)

static void test_ranks(kn_dtype dt)
{
    printf("# ranks and batching, %s\n", kn_dtype_name(dt));
    check_case("1-D x 1-D dot", rand_tensor(dt, 1, SHAPE(7)), rand_tensor(dt, 1, SHAPE(7)), 0,
               NULL);
    CASE("2-D x 2-D", dt, (5, 7), (7, 3), (5, 3));
    CASE("1-D x 2-D", dt, (6), (6, 4), (4));
    CASE("2-D x 1-D", dt, (5, 6), (6), (5));
    CASE("batched 4-D", dt, (2, 3, 5, 6), (2, 3, 6, 4), (2, 3, 5, 4));
    CASE("broadcast batch (2,1) x (3)", dt, (2, 1, 5, 6), (3, 6, 4), (2, 3, 5, 4));
    CASE("broadcast batch (3,1) x (1,2)", dt, (3, 1, 4, 5), (1, 2, 5, 6), (3, 2, 4, 6));
    CASE("batched x 2-D (shared weight)", dt, (4, 5, 6), (6, 3), (4, 5, 3));
    CASE("2-D x batched", dt, (5, 6), (4, 6, 3), (4, 5, 3));
    CASE("1-D x batched", dt, (6), (3, 6, 4), (3, 4));
    CASE("batched x 1-D", dt, (3, 5, 6), (6), (3, 5));
}

static void test_block_edges(kn_dtype dt)
{
    printf("# sizes around the block sizes, %s\n", kn_dtype_name(dt));
    CASE("1x1x1", dt, (1, 1), (1, 1), (1, 1));
    CASE("one full 6x16 tile", dt, (6, 16), (16, 16), (6, 16));
    CASE("13x29x17", dt, (13, 29), (29, 17), (13, 17));
    CASE("M > MC, K > KC: 97x300x45", dt, (97, 300), (300, 45), (97, 45));
    CASE("K > 2 KC: 50x513x40", dt, (50, 513), (513, 40), (50, 40));
    CASE("N > NC: 3x5x2100", dt, (3, 5), (5, 2100), (3, 2100));
    CASE("batched shared weight, rows cross MC: 5x41x70 @ 70x33", dt, (5, 41, 70), (70, 33),
         (5, 41, 33));
}

/* Views whose strides are not the contiguous ones. */
static void test_strided(kn_dtype dt)
{
    printf("# strided operands, %s\n", kn_dtype_name(dt));
    /* x @ w:transpose(): w is (N, K) contiguous, seen as (K, N) */
    check_case("b transposed (linear layer)", rand_tensor(dt, 2, SHAPE(37, 70)),
               rand_view(dt, 2, SHAPE(70, 45), SHAPE(1, 70), 0), 2, SHAPE(37, 45));
    check_case("a transposed", rand_view(dt, 2, SHAPE(20, 30), SHAPE(1, 20), 0),
               rand_tensor(dt, 2, SHAPE(30, 9)), 2, SHAPE(20, 9));
    check_case("both transposed", rand_view(dt, 2, SHAPE(11, 300), SHAPE(1, 11), 0),
               rand_view(dt, 2, SHAPE(300, 19), SHAPE(1, 300), 0), 2, SHAPE(11, 19));
    check_case("offset, every other row, every third column",
               rand_view(dt, 2, SHAPE(7, 9), SHAPE(80, 3), 5),
               rand_view(dt, 2, SHAPE(9, 10), SHAPE(25, 2), 3), 2, SHAPE(7, 10));
    check_case("a expanded over the batch (stride 0)",
               rand_view(dt, 3, SHAPE(3, 5, 6), SHAPE(0, 6, 1), 0),
               rand_tensor(dt, 3, SHAPE(3, 6, 4)), 3, SHAPE(3, 5, 4));
    check_case("b expanded over the batch (stride 0)", rand_tensor(dt, 3, SHAPE(3, 5, 6)),
               rand_view(dt, 3, SHAPE(3, 6, 4), SHAPE(0, 4, 1), 0), 3, SHAPE(3, 5, 4));
    check_case("batch-inner layout (permuted)", rand_view(dt, 3, SHAPE(2, 5, 6), SHAPE(6, 12, 1), 0),
               rand_view(dt, 3, SHAPE(2, 6, 4), SHAPE(1, 2, 12), 2), 3, SHAPE(2, 5, 4));
    check_case("1-D strided", rand_view(dt, 1, SHAPE(8), SHAPE(3), 1),
               rand_view(dt, 2, SHAPE(8, 5), SHAPE(1, 9), 0), 1, SHAPE(5));
}

static void test_zero_size(void)
{
    printf("# zero-size dims\n");
    CASE("M = 0", KN_F32, (0, 5), (5, 3), (0, 3));
    CASE("K = 0 gives zeros", KN_F32, (4, 0), (0, 3), (4, 3));
    CASE("K = 0 gives zeros, f64 batched", KN_F64, (2, 4, 0), (0, 3), (2, 4, 3));
    CASE("N = 0", KN_F32, (4, 5), (5, 0), (4, 0));
    CASE("batch 0", KN_F32, (0, 3, 4), (4, 2), (0, 3, 2));
    CASE("batch 0 against 1", KN_BF16, (2, 0, 3, 4), (1, 4, 2), (2, 0, 3, 2));
    check_case("empty dot is 0", rand_tensor(KN_F32, 1, SHAPE(0)),
               rand_tensor(KN_F32, 1, SHAPE(0)), 0, NULL);
}

static void test_mixed_dtypes(void)
{
    printf("# mixed dtypes promote\n");
    check_case("f32 @ f64 -> f64", rand_tensor(KN_F32, 2, SHAPE(9, 33)),
               rand_tensor(KN_F64, 2, SHAPE(33, 7)), 2, SHAPE(9, 7));
    check_case("bf16 @ f16 -> f32", rand_tensor(KN_BF16, 2, SHAPE(9, 33)),
               rand_tensor(KN_F16, 2, SHAPE(33, 7)), 2, SHAPE(9, 7));
    check_case("f16 @ f32 -> f32", rand_tensor(KN_F16, 3, SHAPE(2, 9, 33)),
               rand_view(KN_F32, 2, SHAPE(33, 7), SHAPE(1, 33), 0), 3, SHAPE(2, 9, 7));
}

static void test_nan(void)
{
    printf("# NaN\n");
    ok(!close_enough(NAN, 1.0, 1e300), "a NaN result never passes the comparison");
    ok(!close_enough(1.0, NAN, 1e300), "a number never passes for an expected NaN");
    kn_tensor *a = rand_tensor(KN_F32, 2, SHAPE(8, 20));
    set_at(a, SHAPE(2, 13), NAN);
    check_case("a NaN in row 2 of a spreads over row 2 of the result", a,
               rand_tensor(KN_F32, 2, SHAPE(20, 19)), 2, SHAPE(8, 19));
}

/* The generic (SSE2 / NEON) kernels give the same bits as the AVX2 ones. */
static void test_generic_kernels(void)
{
    printf("# the generic micro-kernels (KILN_GEMM=generic)\n");
    setenv("KILN_GEMM", "generic", 1);
    test_block_edges(KN_F32);
    test_block_edges(KN_F64);
    kn_tensor *a = rand_tensor(KN_F32, 3, SHAPE(3, 50, 300));
    kn_tensor *b = rand_view(KN_F32, 2, SHAPE(300, 70), SHAPE(1, 300), 0);
    kn_tensor *o1 = NULL, *o2 = NULL;
    run_matmul(a, b, &o1);
    unsetenv("KILN_GEMM");
    run_matmul(a, b, &o2);
    ok(o1 && o2 && memcmp(kn_tensor_data(o1), kn_tensor_data(o2), sizeof(float) * 3 * 50 * 70) == 0,
       "generic and default kernels agree bit for bit");
    kn_tensor_release(o1);
    kn_tensor_release(o2);
    kn_tensor_release(a);
    kn_tensor_release(b);
}

/* Shape inference errors: status and message. */
static kn_status infer2(kn_tensor *a, kn_tensor *b, int n_in)
{
    kn_opcall c;
    kn_meta m[KN_MAX_OUTPUTS];
    int n = 0;
    kn_opcall_init(&c, KN_OP_MATMUL);
    c.n_in = n_in;
    c.in[0] = a;
    c.in[1] = b;
    return kn_op_infer(&c, m, &n);
}

static void test_errors(void)
{
    printf("# errors\n");
    kn_tensor *a = rand_tensor(KN_F32, 2, SHAPE(2, 3)), *b = rand_tensor(KN_F32, 2, SHAPE(4, 5));
    kn_tensor *v3 = rand_tensor(KN_F32, 1, SHAPE(3)), *v4 = rand_tensor(KN_F32, 1, SHAPE(4));
    kn_tensor *b1 = rand_tensor(KN_F32, 3, SHAPE(2, 3, 4)), *b2 = rand_tensor(KN_F32, 3, SHAPE(5, 4, 6));
    kn_tensor *s = rand_tensor(KN_F32, 0, SHAPE(1)) /* 0-dim; the shape is not read */, *i = NULL, *huge_a = NULL, *huge_b = NULL;
    kn_tensor_new(KN_I32, 2, SHAPE(3, 2), KN_CPU, &i);
    is_int(infer2(a, b, 2), KN_ERR_SHAPE, "inner dims differ: shape error");
    is_str(kn_last_error(), "matmul: shapes {2,3} and {4,5} cannot be multiplied", "its message");
    is_int(infer2(v3, v4, 2), KN_ERR_SHAPE, "1-D lengths differ: shape error");
    like(kn_last_error(), "matmul: shapes {3} and {4} cannot be multiplied", "its message");
    is_int(infer2(b1, b2, 2), KN_ERR_SHAPE, "batch dims that do not broadcast: shape error");
    like(kn_last_error(), "matmul: shapes {2,3,4} and {5,4,6} cannot be multiplied", "its message");
    is_int(infer2(s, v3, 2), KN_ERR_SHAPE, "0-dim operand: shape error");
    like(kn_last_error(), "matmul: both operands need at least 1 dim, got shapes {} and {3}",
         "its message");
    is_int(infer2(i, a, 2), KN_ERR_DTYPE, "i32 operand: dtype error");
    like(kn_last_error(), "matmul: expects float tensors (f32, f64, bf16, f16), got i32 and f32",
         "its message");
    is_int(infer2(a, NULL, 1), KN_ERR_ARG, "one input: argument error");
    like(kn_last_error(), "matmul: expects 2 inputs, got 1", "its message");
    is_int(infer2(a, NULL, 2), KN_ERR_ARG, "NULL input: argument error");
    like(kn_last_error(), "matmul: input 2 is missing", "its message");
    /* stride-0 views of a few bytes that claim 2^31 x 2^31 */
    kn_tensor_view_of(a, 2, SHAPE((int64_t)1 << 31, 3), SHAPE(0, 1), 0, &huge_a);
    kn_tensor_view_of(a, 2, SHAPE(3, (int64_t)1 << 31), SHAPE(1, 0), 0, &huge_b);
    kn_status st = infer2(huge_a, huge_b, 2);
    ok(st != KN_OK, "a 2^62-element result is refused, not allocated");
    like(kn_last_error(), "matmul:", "its message names the op");
    kn_tensor *t[] = {a, b, v3, v4, b1, b2, s, i, huge_a, huge_b};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) kn_tensor_release(t[k]);
}

/* Best-of-3 time of a @ b, in GFLOP/s. */
static double gflops(kn_tensor *a, kn_tensor *b, double flop)
{
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        kn_tensor *o = NULL;
        double t0 = kn_clock_s();
        kn_status st = run_matmul(a, b, &o);
        double t = kn_clock_s() - t0;
        kn_tensor_release(o);
        if (st != KN_OK) return 0;
        if (t < best) best = t;
    }
    return flop / best * 1e-9;
}

static void test_speed(void)
{
    kn_tensor *a = rand_tensor(KN_F32, 2, SHAPE(512, 512)), *b = rand_tensor(KN_F32, 2, SHAPE(512, 512));
    double g = gflops(a, b, 2.0 * 512 * 512 * 512);
    /* a comment, not a test: timings on a shared machine are not pass/fail */
    printf("# matmul 512x512x512 f32: %.1f GFLOP/s\n", g);
    kn_tensor_release(a);
    kn_tensor_release(b);
    /* the transformer block's MLP: (16*256, 512) @ w:transpose() with w (2048, 512) */
    a = rand_tensor(KN_F32, 3, SHAPE(16, 256, 512));
    b = rand_view(KN_F32, 2, SHAPE(512, 2048), SHAPE(1, 512), 0);
    printf("# matmul {16,256,512} @ {2048,512}^T f32: %.1f GFLOP/s\n",
           gflops(a, b, 2.0 * 16 * 256 * 512 * 2048));
    kn_tensor_release(a);
    kn_tensor_release(b);
}

/* The backend writing into a preallocated output with the given strides
 * (what a plan does for attention's head merge, kn_plan_run.c run_permuted):
 * the elements the strides reach match the reference, and the bytes of the
 * buffer they do not reach (row padding) keep their sentinel. */
static void check_strided_out(const char *name, kn_dtype dt, kn_tensor *a, kn_tensor *b, int nd,
                              const int64_t *shape, const int64_t *strides)
{
    int64_t span = 1;
    for (int i = 0; i < nd; i++) span += (shape[i] - 1) * strides[i];
    kn_tensor *buf = NULL, *o = NULL;
    kn_tensor_new(dt, 1, &span, KN_CPU, &buf);
    char *p = kn_tensor_data(buf);
    size_t esz = kn_dtype_size(dt);
    const double sentinel = 1024.0; /* exact in every float dtype; no product sum here reaches it */
    for (int64_t i = 0; i < span; i++) kn_store_f64(p + (size_t)i * esz, dt, sentinel);
    kn_tensor_view_of(buf, nd, shape, strides, 0, &o);
    /* which elements of the buffer the output reaches */
    unsigned char *reached = calloc((size_t)span, 1);
    int64_t idx[KN_MAX_DIMS] = {0}, n = kn_numel_of(nd, shape);
    for (int64_t e = 0; e < n; e++, next_index(nd, shape, idx)) {
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += idx[d] * strides[d];
        reached[off] = 1;
    }
    kn_device_ctx *dc = kn_backend_get(KN_CPU);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_MATMUL);
    c.n_in = 2;
    c.in[0] = a;
    c.in[1] = b;
    c.n_out = 1;
    c.out[0] = o;
    ok(dc->be->strided_out && dc->be->strided_out(dc, &c), "%s: the cpu backend says it writes these strides", name);
    kn_status st = dc->be->run(dc, &c);
    if (!ok(st == KN_OK, "%s: runs into the strided output", name)) printf("#   %s\n", kn_last_error());
    int64_t untouched = 0, pads = 0;
    for (int64_t i = 0; i < span; i++)
        if (!reached[i]) {
            pads++;
            untouched += kn_load_f64(p + (size_t)i * esz, dt) == sentinel;
        }
    ok(untouched == pads, "%s: the %lld buffer elements outside the output keep their value (%lld do)", name,
       (long long)pads, (long long)untouched);
    free(reached);
    kn_tensor_release(buf);
    compare_case(name, a, b, o, nd, shape);
}

static void test_strided_out(kn_dtype dt)
{
    printf("# strided outputs, %s\n", kn_dtype_name(dt));
    /* attention's head merge: (B, H, T, hd) written as (B, T, H, hd) contiguous */
    check_strided_out("head merge (2,3,5,7)@(2,3,7,4) into a (2,5,3,4) layout", dt,
                      rand_tensor(dt, 4, SHAPE(2, 3, 5, 7)), rand_tensor(dt, 4, SHAPE(2, 3, 7, 4)), 4,
                      SHAPE(2, 3, 5, 4), SHAPE(60, 4, 12, 1));
    /* q and k^T as views of one qkv tensor, as the transformer sample makes them */
    check_strided_out("views of a qkv tensor, head-merged output", dt,
                      rand_view(dt, 4, SHAPE(2, 3, 5, 4), SHAPE(5 * 36, 4, 36, 1), 0),
                      rand_view(dt, 4, SHAPE(2, 3, 4, 5), SHAPE(5 * 36, 4, 1, 36), 12), 4, SHAPE(2, 3, 5, 5),
                      SHAPE(75, 5, 15, 1));
    check_strided_out("batched x 2-D (shared weight) into a (5,4,3) layout", dt,
                      rand_tensor(dt, 3, SHAPE(4, 5, 6)), rand_tensor(dt, 2, SHAPE(6, 3)), 3, SHAPE(4, 5, 3),
                      SHAPE(3, 12, 1));
    check_strided_out("padded rows 13x29 @ 29x17, row stride 20", dt, rand_tensor(dt, 2, SHAPE(13, 29)),
                      rand_tensor(dt, 2, SHAPE(29, 17)), 2, SHAPE(13, 17), SHAPE(20, 1));
    check_strided_out("transposed output (column stride 5)", dt, rand_tensor(dt, 3, SHAPE(3, 5, 7)),
                      rand_tensor(dt, 3, SHAPE(3, 7, 4)), 3, SHAPE(3, 5, 4), SHAPE(20, 1, 5));
    check_strided_out("odd sizes across the blocks, head merge 97x300 @ 300x45", dt,
                      rand_tensor(dt, 3, SHAPE(2, 97, 300)), rand_tensor(dt, 3, SHAPE(2, 300, 45)), 3,
                      SHAPE(2, 97, 45), SHAPE(45, 90, 1));
}

int main(void)
{
    seed_rng();
    const kn_dtype dts[] = {KN_F32, KN_F64, KN_BF16, KN_F16};
    for (int d = 0; d < 4; d++) test_ranks(dts[d]);
    for (int d = 0; d < 4; d++) test_block_edges(dts[d]);
    for (int d = 0; d < 4; d++) test_strided(dts[d]);
    for (int d = 0; d < 4; d++) test_strided_out(dts[d]);
    test_zero_size();
    test_mixed_dtypes();
    test_nan();
    test_generic_kernels();
    test_errors();
    test_speed();
    return done_testing();
}
