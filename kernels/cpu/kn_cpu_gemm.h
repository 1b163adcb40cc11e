/* kn_cpu_gemm: the CPU backend's one matrix-multiply engine, shared by
 * matmul (kn_cpu_matmul.c, which defines it) and conv2d (kn_cpu_conv.c, via
 * im2col).
 *
 * C = A * B with A (M x K) and B (K x N) given as strided views of any float
 * dtype, computed in f32 (KN_F32) or f64 (KN_F64) and written to a row-major
 * C of that compute type. Every element of C is the sum over k = 0..K-1 in
 * increasing order, one rounding per multiply and per add (no FMA), so the
 * result does not depend on the CPU's vector width or the block sizes.
 */
#ifndef KN_CPU_GEMM_H
#define KN_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kn_dtype.h"

/* A strided matrix. Element (r, k) is at data[off(r) + k * cs] (in elements
 * of `dtype`) where off(r) = r * rs, or, when `blk` is set, rows come in
 * blocks of `blk_rows`: off(r) = blk[r / blk_rows] + (r % blk_rows) * rs.
 * The blocks let a batch of matrices that share one B be one tall A. */
typedef struct kn_gemm_mat {
    const void *data;
    kn_dtype dtype;
    int64_t rs, cs;
    const int64_t *blk; /* borrowed; may be NULL */
    int64_t blk_rows;
} kn_gemm_mat;

/* Packing buffers, grown on demand and reused across calls; zero-initialize
 * it, and free with kn_gemm_ws_free. */
typedef struct kn_gemm_ws {
    void *a, *b;
    size_t a_cap, b_cap;
} kn_gemm_ws;

/* C[i*ldc + j] = sum_k A(i,k) * B(k,j) for i < M, j < N; C is float * for
 * ct KN_F32 and double * for KN_F64. K == 0 writes zeros. Only the packing
 * buffers are allocated (KN_ERR_OOM if that fails). */
kn_status kn_cpu_gemm(kn_gemm_ws *ws, kn_dtype ct, int64_t M, int64_t N, int64_t K,
                      const kn_gemm_mat *A, const kn_gemm_mat *B, void *C, int64_t ldc);

void kn_gemm_ws_free(kn_gemm_ws *ws);

/* Element i of p (dtype dt, a float type) as f32 / f64. */
static inline float kn_gemm_ld32(const void *p, kn_dtype dt, int64_t i)
{
    switch (dt) {
    case KN_F32: return ((const float *)p)[i];
    case KN_F64: return (float)((const double *)p)[i];
    case KN_BF16: return kn_bf16_to_f32(((const uint16_t *)p)[i]);
    case KN_F16: return kn_f16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.0f;
    }
}

static inline double kn_gemm_ld64(const void *p, kn_dtype dt, int64_t i)
{
    if (dt == KN_F64) return ((const double *)p)[i];
    return kn_gemm_ld32(p, dt, i);
}

/* Store element i of p (dtype dt, a float type), rounding once from f32/f64
 * (f64 -> bf16/f16 goes through f32, as kn_store_f64 does). */
static inline void kn_gemm_st(void *p, kn_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case KN_F32: ((float *)p)[i] = (float)v; break;
    case KN_F64: ((double *)p)[i] = v; break;
    case KN_BF16: ((uint16_t *)p)[i] = kn_f32_to_bf16((float)v); break;
    case KN_F16: ((uint16_t *)p)[i] = kn_f32_to_f16((float)v); break;
    default: break;
    }
}

#endif
