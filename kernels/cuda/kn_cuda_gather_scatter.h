/* kn_cuda_gather_scatter: the gather_scatter op on the GPU (kernels/cuda;
 * kn_cuda_gather_scatter.c tells its variants), through the kernels of
 * kn_gather_scatter.cu in the template modules (kn_cuda_ops.h).
 */
#ifndef KN_CUDA_GATHER_SCATTER_H
#define KN_CUDA_GATHER_SCATTER_H

#include <stdbool.h>

#include "kn_op.h"
#include "kn_status.h"

kn_status kn_cuda_gather_scatter(const kn_opcall *c);
/* Whether kn_cuda_gather_scatter has a kernel for c: float rows and an
 * epilogue its kernels apply (needs no GPU; without tensors, the attrs
 * alone). */
bool kn_cuda_gather_scatter_supports(const kn_opcall *c);

#endif
