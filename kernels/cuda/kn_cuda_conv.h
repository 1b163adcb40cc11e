/* kn_cuda_conv: conv2d on the GPU, each call run by the engine chosen for
 * it: kiln's kernels, a GEMM, the split-precision convolution or cuDNN
 * (kernels/cuda). */
#ifndef KN_CUDA_CONV_H
#define KN_CUDA_CONV_H

#include <stdbool.h>

#include "kn_cuda_dnn.h"
#include "kn_op.h"
#include "kn_status.h"

/* conv2d, or its gradient ops; KN_ERR_UNSUPPORTED for a call it does not
 * cover. */
kn_status kn_cuda_conv2d(const kn_opcall *c);
/* Whether kn_cuda_conv2d has a kernel for c (cuDNN, or kiln's for what it
 * refuses, in either layout): float tensors, as conv_run checks. Without
 * tensors: the op alone. */
static inline bool kn_cuda_conv2d_supports(const kn_opcall *c)
{
    if (c && (c->op == KN_OP_CONV2D_INPUT_GRAD || c->op == KN_OP_CONV2D_WEIGHT_GRAD))
        return kn_cuda_conv2d_grad_supports(c);
    if (!c || c->op != KN_OP_CONV2D) return false;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i] && !kn_dtype_is_float(c->in[i]->dtype)) return false;
    return true;
}
/* conv2d (its own bias input, if any) with act (0 none, 1 relu, or
 * hardswish where a depthwise kernel of kiln's takes it) in one call: the
 * kernel's epilogue, or cuDNN's graph conv -> bias add -> ReLU. */
kn_status kn_cuda_conv2d_fused(const kn_opcall *c, int act);
/* act(conv + its bias + residual), residual contiguous like the output. */
kn_status kn_cuda_conv2d_fused_residual(const kn_opcall *c, int act, const struct kn_tensor *residual);
/* Whether conv2d of dtype dt should run channels-last on the current GPU
 * (the layout pass's "auto"): cuDNN present, and a half type on sm_80 or
 * later, or f32 where the split-precision convolution runs (Hopper). */
bool kn_cuda_conv_prefers_nhwc(kn_dtype dt);
/* Whether conv2d call c (headers will do: shapes, strides, dtypes, attrs)
 * runs in a kernel of kiln's whose epilogue adds a bias and ReLU at no
 * cost (kn_backend.conv_epilogue_free): the split-precision convolution
 * (a residual too), the stem kernels. */
bool kn_cuda_conv_epilogue_free(const kn_opcall *c);

#endif
