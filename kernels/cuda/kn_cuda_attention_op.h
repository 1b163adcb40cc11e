/* kn_cuda_attention_op: the scaled_dot_product_attention op on the GPU
 * (kernels/cuda): the fused kernel (kn_cuda_attention.h) where it takes the
 * call, else the unfused chain of ops.
 */
#ifndef KN_CUDA_ATTENTION_OP_H
#define KN_CUDA_ATTENTION_OP_H

#include <stdbool.h>

#include "kn_op.h"
#include "kn_status.h"

kn_status kn_cuda_attention_op(const kn_opcall *c);
/* Whether kn_cuda_attention_op has a kernel for c (float q, k, v; any
 * mask kn_op_infer takes); needs no GPU, and no tensors for the op alone. */
bool kn_cuda_attention_op_supports(const kn_opcall *c);

#endif
