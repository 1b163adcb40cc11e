/* kn_cuda_blas: matmul on the GPU through cuBLASLt, with kiln's own kernel
 * (kn_cuda_linalg.h) for whatever cuBLASLt refuses (kernels/cuda). Each
 * entry returns KN_ERR_UNSUPPORTED for a call it does not cover.
 */
#ifndef KN_CUDA_BLAS_H
#define KN_CUDA_BLAS_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_op.h"
#include "kn_status.h"

kn_status kn_cuda_matmul(const kn_opcall *c);
/* Whether kn_cuda_matmul has a kernel for c (cuBLASLt, or kiln's for what
 * it refuses): float operands, as matmul_run checks (more batch dims than
 * KN_LA_MAX_BATCH, which it declines too, cannot pass kn_op_infer:
 * KN_MAX_DIMS less the matrix dims). Without tensors: the op alone. */
static inline bool kn_cuda_matmul_supports(const kn_opcall *c)
{
    if (!c || c->op != KN_OP_MATMUL) return false;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i] && !kn_dtype_is_float(c->in[i]->dtype)) return false;
    return true;
}
/* Whether kn_cuda_matmul can write c->out[0] with its strides (unit-stride
 * rows, through cuBLASLt's D leading dim and batch stride). */
bool kn_cuda_matmul_strided_ok(const kn_opcall *c);
/* Whether the default matmul of an [m, k] by [k, n] product of dtype dt
 * runs faster with b k-contiguous (stored [n, k]) than n-contiguous: where
 * it runs kiln's split-f32 kernel (f32 under the "ieee" contract, on
 * Hopper), which ran 1.2-1.4x as fast with both operands k-contiguous as
 * with ONNX's [k, n] weights. tf32: the call's settings allow TF32. */
bool kn_cuda_matmul_wants_k_major_b(kn_dtype dt, bool tf32, int64_t m, int64_t n, int64_t k);
/* matmul with bias (1-D over N on cuda, may be NULL; any float dtype:
 * cast to the output's when the runtime can, else added by kiln's
 * kernel), activation and a residual (contiguous, the output's shape)
 * added in the library's epilogue: out = act(a·b + bias + residual). act: 0 none, 1 relu (exact), 2 GELU with the tanh
 * approximation (cuBLASLt's GELU epilogue is that one): kiln's gelu op is
 * the erf form, so pass 2 only for a graph that asks for tanh. */
kn_status kn_cuda_matmul_fused(const kn_opcall *c, const kn_tensor *bias, int act, const kn_tensor *residual);
/* o += r (same shape, contiguous o): kiln's add and a copy back. */
kn_status kn_cuda_add_into(kn_tensor *o, const kn_tensor *r);
/* The roofline ceiling for :device: an 8192^3 GEMM (b k-contiguous) of dtype dt through
 * kn_cuda_matmul (median of 5 event-timed runs after 2 warm-ups), in
 * TFLOP/s. f32 follows kiln.config.allow_tf32 like every matmul. */
kn_status kn_cuda_matmul_rate(kn_dtype dt, double *tflops);
/* cuBLASLt's version (opening it), 0 without it. */
size_t kn_cuda_blas_version(void);

#endif
