/* kn_cuda_eager: eager ops on the GPU through the kernel IR (kernels/cuda):
 * one op, fused into one POINTWISE or ROW kernel, rendered to CUDA and
 * launched; kept per call signature.
 */
#ifndef KN_CUDA_EAGER_H
#define KN_CUDA_EAGER_H

#include <stdbool.h>

#include "kn_op.h"
#include "kn_status.h"

/* KN_ERR_UNSUPPORTED for a call the IR does not make one kernel of (the
 * vtable then tries the templates, kn_cuda_ops.h). */
kn_status kn_cuda_eager_ir(const kn_opcall *c);
/* Whether kn_cuda_eager_ir makes one generated kernel of c (by its op,
 * and for a reduction its dims), the calls it declines at once otherwise;
 * needs no GPU and no tensors. */
bool kn_cuda_eager_supports(const kn_opcall *c);

#endif
