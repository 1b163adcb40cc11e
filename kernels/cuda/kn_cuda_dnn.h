/* kn_cuda_dnn: conv2d on the GPU through cuDNN's graph API, with kiln's
 * own kernels (kn_cuda_linalg.h) for whatever cuDNN refuses (kernels/cuda).
 */
#ifndef KN_CUDA_DNN_H
#define KN_CUDA_DNN_H

#include <stdbool.h>

#include "kn_op.h"
#include "kn_status.h"

/* KN_ERR_UNSUPPORTED for a call it does not cover. */
kn_status kn_cuda_conv2d(const kn_opcall *c);
/* conv2d (its own bias input, if any) with act (0 none, 1 relu) in cuDNN's
 * graph: conv -> bias add -> ReLU as one plan. */
kn_status kn_cuda_conv2d_fused(const kn_opcall *c, int act);
/* Whether conv2d of dtype dt should run channels-last on the current GPU
 * (the layout pass's "auto"): cuDNN present, a half type, sm_80 or later. */
bool kn_cuda_conv_prefers_nhwc(kn_dtype dt);

#endif
