/* kn_cpu_matmul: the CPU gemm engine (kn_cpu_gemm, see kn_cpu_gemm.h) and
 * the matmul op on top of it.
 *
 * The engine is the classic packed, cache-blocked design (Goto / BLIS): B is
 * copied in KC x NC blocks into NR-wide panels that stay in L1/L2, A in
 * MC x KC blocks into MR-tall panels, and a register-tiled micro-kernel
 * computes one MR x NR tile of C from one panel of each. Packing converts
 * from any float dtype and any strides (transposed weights, slices, expanded
 * views), so the kernels only ever see contiguous f32 or f64.
 *
 * The micro-kernels use GCC/Clang vector extensions rather than intrinsics:
 * the same source compiles to SSE2 on baseline x86-64 and to NEON on arm64.
 * On x86-64 an AVX2 variant is selected at run time when the CPU has it
 * (target attribute, no -march flags). No FMA: a multiply and an add each
 * round, and k is summed in order, so every variant gives identical bits.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kn_cpu.h"
#include "cpu/kn_cpu_gemm.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KN_GEMM_X86 1
#endif

/* Block sizes (elements). MC x KC of A (~96 KiB f32) sits in L2, a KC x NR
 * panel of B (16 KiB f32) in L1; NC bounds the packed B block (2 MiB f32). */
enum { GEMM_MC = 96, GEMM_KC = 256, GEMM_NC = 2048, GEMM_MAX_MR = 6, GEMM_MAX_NR = 16 };

typedef void (*gemm_kern_fn)(int64_t kc, const void *a, const void *b, void *c, int64_t ldc,
                             int acc);

typedef struct gemm_impl {
    int mr, nr;
    gemm_kern_fn kern;
} gemm_impl;

/* ---- micro-kernels ----
 * Each computes an mr x nr tile: c[r*ldc + j] (+)= sum_k a[k*mr + r] * b[k*nr + j]
 * (acc 0 overwrites, 1 continues the sum already in c). a and b are packed
 * panels; c need not be aligned (loads and stores go through memcpy). */

typedef float v4f __attribute__((vector_size(16)));
typedef double v2d __attribute__((vector_size(16)));

/* 6 x 8 f32 with 4-wide vectors: 12 accumulators + 2 of B fit in the 16
 * registers of SSE2 / 32 of NEON. */
static void kern_f32_6x8(int64_t kc, const void *ap, const void *bp, void *cp, int64_t ldc,
                         int acc)
{
    const float *a = ap, *b = bp;
    float *c = cp;
    v4f t[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) {
            if (acc) memcpy(&t[r][v], c + r * ldc + 4 * v, sizeof(v4f));
            else t[r][v] = (v4f){0};
        }
    for (int64_t k = 0; k < kc; k++, a += 6, b += 8) {
        v4f b0, b1;
        memcpy(&b0, b, sizeof b0);
        memcpy(&b1, b + 4, sizeof b1);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            t[r][0] += a[r] * b0;
            t[r][1] += a[r] * b1;
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) memcpy(c + r * ldc + 4 * v, &t[r][v], sizeof(v4f));
}

/* 6 x 4 f64 with 2-wide vectors: the same register budget as kern_f32_6x8. */
static void kern_f64_6x4(int64_t kc, const void *ap, const void *bp, void *cp, int64_t ldc,
                         int acc)
{
    const double *a = ap, *b = bp;
    double *c = cp;
    v2d t[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) {
            if (acc) memcpy(&t[r][v], c + r * ldc + 2 * v, sizeof(v2d));
            else t[r][v] = (v2d){0};
        }
    for (int64_t k = 0; k < kc; k++, a += 6, b += 4) {
        v2d b0, b1;
        memcpy(&b0, b, sizeof b0);
        memcpy(&b1, b + 2, sizeof b1);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            t[r][0] += a[r] * b0;
            t[r][1] += a[r] * b1;
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) memcpy(c + r * ldc + 2 * v, &t[r][v], sizeof(v2d));
}

#ifdef KN_GEMM_X86
/* The 8-wide types are only ever touched inside the avx2 functions below, so
 * no vector crosses a call boundary compiled without AVX. */
typedef float v8f __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));

/* 6 x 16 f32 with 8-wide AVX vectors: 12 of the 16 ymm registers. */
__attribute__((target("avx2"))) static void kern_f32_6x16_avx2(int64_t kc, const void *ap,
                                                               const void *bp, void *cp,
                                                               int64_t ldc, int acc)
{
    const float *a = ap, *b = bp;
    float *c = cp;
    v8f t[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) {
            if (acc) memcpy(&t[r][v], c + r * ldc + 8 * v, sizeof(v8f));
            else t[r][v] = (v8f){0};
        }
    for (int64_t k = 0; k < kc; k++, a += 6, b += 16) {
        v8f b0, b1;
        memcpy(&b0, b, sizeof b0);
        memcpy(&b1, b + 8, sizeof b1);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            t[r][0] += a[r] * b0;
            t[r][1] += a[r] * b1;
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) memcpy(c + r * ldc + 8 * v, &t[r][v], sizeof(v8f));
}

/* 6 x 8 f64 with 4-wide AVX vectors. */
__attribute__((target("avx2"))) static void kern_f64_6x8_avx2(int64_t kc, const void *ap,
                                                              const void *bp, void *cp,
                                                              int64_t ldc, int acc)
{
    const double *a = ap, *b = bp;
    double *c = cp;
    v4d t[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) {
            if (acc) memcpy(&t[r][v], c + r * ldc + 4 * v, sizeof(v4d));
            else t[r][v] = (v4d){0};
        }
    for (int64_t k = 0; k < kc; k++, a += 6, b += 8) {
        v4d b0, b1;
        memcpy(&b0, b, sizeof b0);
        memcpy(&b1, b + 4, sizeof b1);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            t[r][0] += a[r] * b0;
            t[r][1] += a[r] * b1;
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) memcpy(c + r * ldc + 4 * v, &t[r][v], sizeof(v4d));
}
#endif

/* The widest kernel this CPU runs. KILN_GEMM=generic forces the baseline
 * kernels (to test them on an AVX2 machine). */
static gemm_impl gemm_pick(kn_dtype ct)
{
#ifdef KN_GEMM_X86
    const char *env = getenv("KILN_GEMM");
    if (!(env && strcmp(env, "generic") == 0) && __builtin_cpu_supports("avx2"))
        return ct == KN_F64 ? (gemm_impl){6, 8, kern_f64_6x8_avx2}
                            : (gemm_impl){6, 16, kern_f32_6x16_avx2};
#endif
    return ct == KN_F64 ? (gemm_impl){6, 4, kern_f64_6x4} : (gemm_impl){6, 8, kern_f32_6x8};
}

/* ---- packing ----
 * A panel is `w` lines (rows of A, columns of B) of kc elements, stored
 * k-major: d[k*w + l]. Line l starts at element off[l] of src and steps by
 * ks; lines nl..w-1 are zero so the kernels never need an edge case. */

static void pack_f32(float *restrict d, int w, int nl, int64_t kc, const void *src, kn_dtype dt,
                     const int64_t *off, int64_t ks)
{
    if (dt == KN_F32 && ks != 1) {
        /* k outer: for row-major B the lines of one k are adjacent in memory */
        const float *s = src;
        bool adjacent = true;
        for (int l = 1; l < nl; l++) adjacent = adjacent && off[l] == off[0] + l;
        for (int64_t k = 0; k < kc; k++) {
            const float *sk = s + off[0] + k * ks;
            /* constant sizes let the compiler inline the copy of a full panel row */
            if (adjacent && nl == 16) memcpy(d + k * w, sk, 16 * sizeof(float));
            else if (adjacent && nl == 8) memcpy(d + k * w, sk, 8 * sizeof(float));
            else if (adjacent) memcpy(d + k * w, sk, sizeof(float) * (size_t)nl);
            else
                for (int l = 0; l < nl; l++) d[k * w + l] = s[off[l] + k * ks];
        }
    } else if (dt == KN_F32) {
        for (int l = 0; l < nl; l++) {
            const float *s = (const float *)src + off[l];
            for (int64_t k = 0; k < kc; k++) d[k * w + l] = s[k];
        }
    } else {
        for (int l = 0; l < nl; l++)
            for (int64_t k = 0; k < kc; k++) d[k * w + l] = kn_gemm_ld32(src, dt, off[l] + k * ks);
    }
    for (int64_t k = 0; k < kc && nl < w; k++)
        for (int l = nl; l < w; l++) d[k * w + l] = 0.0f;
}

static void pack_f64(double *restrict d, int w, int nl, int64_t kc, const void *src, kn_dtype dt,
                     const int64_t *off, int64_t ks)
{
    if (dt == KN_F64) {
        const double *s = src;
        if (ks == 1) {
            for (int l = 0; l < nl; l++)
                for (int64_t k = 0; k < kc; k++) d[k * w + l] = s[off[l] + k];
        } else {
            for (int64_t k = 0; k < kc; k++)
                for (int l = 0; l < nl; l++) d[k * w + l] = s[off[l] + k * ks];
        }
    } else {
        for (int l = 0; l < nl; l++)
            for (int64_t k = 0; k < kc; k++) d[k * w + l] = kn_gemm_ld64(src, dt, off[l] + k * ks);
    }
    for (int64_t k = 0; k < kc && nl < w; k++)
        for (int l = nl; l < w; l++) d[k * w + l] = 0.0;
}

static void pack(kn_dtype ct, void *d, int w, int nl, int64_t kc, const kn_gemm_mat *m,
                 const int64_t *off, int64_t ks)
{
    if (ct == KN_F64) pack_f64(d, w, nl, kc, m->data, m->dtype, off, ks);
    else pack_f32(d, w, nl, kc, m->data, m->dtype, off, ks);
}

/* Element offset of row r of A (see kn_gemm_mat). */
static int64_t row_off(const kn_gemm_mat *m, int64_t r)
{
    if (!m->blk) return r * m->rs;
    return m->blk[r / m->blk_rows] + (r % m->blk_rows) * m->rs;
}

static kn_status ws_reserve(void **p, size_t *cap, size_t need)
{
    if (need <= *cap) return KN_OK;
    free(*p);
    *cap = 0;
    need = (need + 63) & ~(size_t)63; /* aligned_alloc wants a multiple of the alignment */
    *p = aligned_alloc(64, need);
    if (!*p) return kn_error(KN_ERR_OOM, "matmul: out of memory for a %zu-byte packing buffer", need);
    *cap = need;
    return KN_OK;
}

void kn_gemm_ws_free(kn_gemm_ws *ws)
{
    free(ws->a);
    free(ws->b);
    memset(ws, 0, sizeof *ws);
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* One MR x NR tile at the edge of C: run the kernel on a full-size scratch
 * tile and copy the valid mv x nv corner in and out. */
static void edge_tile(const gemm_impl *g, size_t esz, int64_t kc, const char *ap, const char *bp,
                      char *c, int64_t ldc, int64_t mv, int64_t nv, int acc)
{
    _Alignas(64) char tile[GEMM_MAX_MR * GEMM_MAX_NR * sizeof(double)];
    size_t row = (size_t)g->nr * esz;
    if (acc)
        for (int64_t r = 0; r < mv; r++)
            memcpy(tile + (size_t)r * row, c + (size_t)(r * ldc) * esz, (size_t)nv * esz);
    g->kern(kc, ap, bp, tile, g->nr, acc);
    for (int64_t r = 0; r < mv; r++)
        memcpy(c + (size_t)(r * ldc) * esz, tile + (size_t)r * row, (size_t)nv * esz);
}

kn_status kn_cpu_gemm(kn_gemm_ws *ws, kn_dtype ct, int64_t M, int64_t N, int64_t K,
                      const kn_gemm_mat *A, const kn_gemm_mat *B, void *C, int64_t ldc)
{
    size_t esz = ct == KN_F64 ? sizeof(double) : sizeof(float);
    char *cb = C;
    if (M <= 0 || N <= 0) return KN_OK;
    if (K <= 0) {
        for (int64_t i = 0; i < M; i++) memset(cb + (size_t)(i * ldc) * esz, 0, (size_t)N * esz);
        return KN_OK;
    }
    gemm_impl g = gemm_pick(ct);
    int64_t mr = g.mr, nr = g.nr;
    /* Blocks of equal size rather than full blocks and a thin remainder:
     * K = 288 runs as 2 x 144, not 256 + 32, whose short k-loop would be
     * dominated by loading and storing the C tiles. */
    int64_t kcmax = ceil_div(K, ceil_div(K, GEMM_KC));
    int64_t mcmax = ceil_div(ceil_div(M, ceil_div(M, GEMM_MC)), mr) * mr;
    int64_t ncmax = ceil_div(min64(N, GEMM_NC), nr) * nr;
    KN_TRY(ws_reserve(&ws->a, &ws->a_cap, (size_t)(mcmax * kcmax) * esz));
    KN_TRY(ws_reserve(&ws->b, &ws->b_cap, (size_t)(ncmax * kcmax) * esz));
    char *abuf = ws->a, *bbuf = ws->b;
    int64_t off[GEMM_MAX_NR];

    for (int64_t jc = 0; jc < N; jc += GEMM_NC) {
        int64_t nc = min64(GEMM_NC, N - jc);
        for (int64_t pc = 0; pc < K; pc += kcmax) {
            int64_t kc = min64(kcmax, K - pc);
            int acc = pc > 0;
            /* B block: lines are columns of B, k steps by its row stride */
            for (int64_t jr = 0; jr < nc; jr += nr) {
                int nl = (int)min64(nr, nc - jr);
                for (int l = 0; l < nl; l++) off[l] = (jc + jr + l) * B->cs + pc * B->rs;
                pack(ct, bbuf + (size_t)(jr * kc) * esz, (int)nr, nl, kc, B, off, B->rs);
            }
            for (int64_t ic = 0; ic < M; ic += mcmax) {
                int64_t mc = min64(mcmax, M - ic);
                for (int64_t ir = 0; ir < mc; ir += mr) {
                    int nl = (int)min64(mr, mc - ir);
                    for (int l = 0; l < nl; l++) off[l] = row_off(A, ic + ir + l) + pc * A->cs;
                    pack(ct, abuf + (size_t)(ir * kc) * esz, (int)mr, nl, kc, A, off, A->cs);
                }
                /* jr outer: one B panel stays in L1 while the A panels stream by */
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    const char *bp = bbuf + (size_t)(jr * kc) * esz;
                    int64_t nv = min64(nr, nc - jr);
                    for (int64_t ir = 0; ir < mc; ir += mr) {
                        const char *ap = abuf + (size_t)(ir * kc) * esz;
                        int64_t mv = min64(mr, mc - ir);
                        char *c = cb + (size_t)((ic + ir) * ldc + jc + jr) * esz;
                        if (mv == mr && nv == nr) g.kern(kc, ap, bp, c, ldc, acc);
                        else edge_tile(&g, esz, kc, ap, bp, c, ldc, mv, nv, acc);
                    }
                }
            }
        }
    }
    return KN_OK;
}

/* ---- matmul ---- */

/* Element offsets of each batch matrix of a and b, over the output's batch
 * dims (row-major); a broadcast dim contributes stride 0. */
static void batch_offsets(const kn_tensor *a, const kn_tensor *b, const kn_tensor *o, int nbat,
                          int64_t nbatch, int64_t *aoff, int64_t *boff, bool *b_shared)
{
    int64_t sa[KN_MAX_DIMS], sb[KN_MAX_DIMS], idx[KN_MAX_DIMS] = {0};
    int ba = a->ndim > 2 ? a->ndim - 2 : 0, bb = b->ndim > 2 ? b->ndim - 2 : 0;
    *b_shared = true;
    for (int i = 0; i < nbat; i++) {
        int ia = i - (nbat - ba), ib = i - (nbat - bb);
        sa[i] = ia >= 0 && a->shape[ia] != 1 ? a->strides[ia] : 0;
        sb[i] = ib >= 0 && b->shape[ib] != 1 ? b->strides[ib] : 0;
        if (sb[i] != 0 && o->shape[i] > 1) *b_shared = false;
    }
    int64_t oa = 0, ob = 0;
    for (int64_t n = 0; n < nbatch; n++) {
        aoff[n] = oa;
        boff[n] = ob;
        for (int i = nbat - 1; i >= 0; i--) { /* odometer step */
            oa += sa[i];
            ob += sb[i];
            if (++idx[i] < o->shape[i]) break;
            oa -= sa[i] * idx[i];
            ob -= sb[i] * idx[i];
            idx[i] = 0;
        }
    }
}

/* Element offsets of each batch matrix of the output o (its own strides,
 * possibly not contiguous: a plan's permuted layout). */
static void out_batch_offsets(const kn_tensor *o, int nbat, int64_t nbatch, int64_t *ooff)
{
    int64_t idx[KN_MAX_DIMS] = {0}, off = 0;
    for (int64_t n = 0; n < nbatch; n++) {
        ooff[n] = off;
        for (int i = nbat - 1; i >= 0; i--) {
            off += o->strides[i];
            if (++idx[i] < o->shape[i]) break;
            off -= o->strides[i] * idx[i];
            idx[i] = 0;
        }
    }
}

/* Store the row-major values v (compute type ct) into o through its strides. */
static void scatter_out(kn_tensor *o, kn_dtype ct, const void *v, int64_t total)
{
    char *od = kn_tensor_data(o);
    size_t es = kn_dtype_size(o->dtype);
    int64_t idx[KN_MAX_DIMS] = {0}, off = 0;
    for (int64_t i = 0; i < total; i++) {
        double x = ct == KN_F64 ? ((const double *)v)[i] : (double)((const float *)v)[i];
        kn_store_f64(od + off * (int64_t)es, o->dtype, x);
        for (int d = o->ndim - 1; d >= 0; d--) {
            off += o->strides[d];
            if (++idx[d] < o->shape[d]) break;
            off -= o->strides[d] * idx[d];
            idx[d] = 0;
        }
    }
}

/* out = a @ b with PyTorch's 1-D and batch-broadcast rules (shapes checked
 * by kn_infer_matmul). When b is shared by every batch (x @ w, the linear
 * layer case) the batches of a become the rows of one tall gemm. The
 * output may have any strides (a plan writes attention's P·V straight into
 * its head-merged layout): unit-stride rows are written in place, one gemm
 * per batch matrix with the output's row stride; other layouts are
 * computed contiguous and stored through the strides. */
kn_status kn_cpu_matmul(const kn_opcall *c)
{
    const kn_tensor *a = c->in[0], *b = c->in[1];
    kn_tensor *o = c->out[0];
    int na = a->ndim, nb = b->ndim, no = o->ndim;
    int64_t M = na >= 2 ? a->shape[na - 2] : 1, K = a->shape[na - 1];
    int64_t N = nb >= 2 ? b->shape[nb - 1] : 1;
    int nbat = o->ndim - (na >= 2) - (nb >= 2);
    int64_t nbatch = kn_numel_of(nbat, o->shape);
    if (nbatch == 0 || M == 0 || N == 0) return KN_OK;

    kn_gemm_mat A = {kn_tensor_data(a), a->dtype, na >= 2 ? a->strides[na - 2] : 0,
                     a->strides[na - 1], NULL, 0};
    kn_gemm_mat B = {kn_tensor_data(b), b->dtype, nb >= 2 ? b->strides[nb - 2] : b->strides[0],
                     nb >= 2 ? b->strides[nb - 1] : 0, NULL, 0};
    kn_dtype ct = o->dtype == KN_F64 ? KN_F64 : KN_F32;
    size_t esz = kn_dtype_size(ct);
    int64_t total = nbatch * M * N; /* == numel(out), checked by inference */
    bool dense = kn_tensor_is_contiguous(o);
    /* a strided output written in place: both matrix dims, the compute
     * dtype, unit-stride rows that do not overlap */
    int64_t o_rs = no >= 2 ? o->strides[no - 2] : 0;
    bool direct = !dense && o->dtype == ct && na >= 2 && nb >= 2 && (N == 1 || o->strides[no - 1] == 1) &&
                  (M == 1 || o_rs >= N);
    void *cbuf = kn_tensor_data(o), *tmp = NULL;
    int64_t *aoff = malloc(sizeof(int64_t) * (size_t)nbatch * 3);
    bool need_tmp = o->dtype != ct || (!dense && !direct);
    if (need_tmp) cbuf = tmp = malloc((size_t)total * esz); /* bf16/f16 out: sum in f32 */
    if (!aoff || (need_tmp && !tmp)) {
        free(aoff);
        free(tmp);
        return kn_error(KN_ERR_OOM, "matmul: out of memory for a %lld-element result",
                        (long long)total);
    }
    int64_t *boff = aoff + nbatch, *ooff = aoff + 2 * nbatch;
    bool b_shared;
    batch_offsets(a, b, o, nbat, nbatch, aoff, boff, &b_shared);
    if (direct) out_batch_offsets(o, nbat, nbatch, ooff);

    kn_gemm_ws ws = {0};
    kn_status st = KN_OK;
    if (b_shared && !direct) {
        A.blk = aoff;
        A.blk_rows = M;
        st = kn_cpu_gemm(&ws, ct, nbatch * M, N, K, &A, &B, cbuf, N);
    } else {
        const char *a0 = A.data, *b0 = B.data;
        size_t asz = kn_dtype_size(a->dtype), bsz = kn_dtype_size(b->dtype);
        for (int64_t n = 0; n < nbatch && st == KN_OK; n++) {
            A.data = a0 + aoff[n] * (int64_t)asz;
            B.data = b0 + boff[n] * (int64_t)bsz;
            char *cn = direct ? (char *)cbuf + (size_t)ooff[n] * esz : (char *)cbuf + (size_t)(n * M * N) * esz;
            st = kn_cpu_gemm(&ws, ct, M, N, K, &A, &B, cn, direct ? (M == 1 ? N : o_rs) : N);
        }
    }
    kn_gemm_ws_free(&ws);
    if (st == KN_OK && tmp && dense) {
        void *od = kn_tensor_data(o);
        for (int64_t i = 0; i < total; i++) kn_gemm_st(od, o->dtype, i, ((const float *)tmp)[i]);
    } else if (st == KN_OK && tmp) {
        scatter_out(o, ct, tmp, total);
    }
    free(tmp);
    free(aoff);
    return st;
}
