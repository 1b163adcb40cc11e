/* kn_cuda_linalg: what kn_cuda_blas.c, kn_cuda_conv.c and kn_cuda_dnn.c share
 * (kn_cuda_linalg.c): kiln's own kernels in kn_linalg.cu (the fallback for
 * cases cuBLASLt or cuDNN refuse, or when a library is missing; their
 * argument structs are in kn_cuda_la_args.h, which the device code
 * shares), the helpers that launch them, and the helpers both libraries'
 * paths take their operands through.
 */
#ifndef KN_CUDA_LINALG_H
#define KN_CUDA_LINALG_H

#include <stdbool.h>
#include <stdint.h>

#include "kn_cuda_la_args.h"
#include "kn_op.h"
#include "kn_status.h"
#include "kn_tensor.h"

/* The NVRTC modules of kiln's own linear-algebra kernels (kn_linalg.cu,
 * kn_la_aux.cu, kn_la_stem.cu, kn_la_stem_tc.cu: a module by use, and by
 * dtype where the kernels are templates): how many, each one's name
 * ("stem_tc bf16 n8"), its k-th kernel (NULL past the last) and its source
 * (the caller frees *src). For t/cuda_templates_compile.c and
 * bench/nvrtc_modules.c. */
int kn_cuda_linalg_module_count(void);
const char *kn_cuda_linalg_module_name(int m);
const char *kn_cuda_linalg_module_kernel(int m, int k);
kn_status kn_cuda_linalg_module_source(int m, char **src);

/* A kernel of those modules by name: its module is compiled (or found in
 * the caches) the first time one of its kernels is asked for. */
kn_status kn_cuda_linalg_kernel(const char *name, const void **fn);

/* The grid of a launch over `work` items, per_block of them a block: at
 * least 1, at most 65535 (the kernels loop over what is left). */
int64_t kn_cuda_linalg_grid(int64_t work, int64_t per_block);

/* y = act(y + bias[channel]) in place on the contiguous tensor y, where the
 * channel of element i is (i / inner) % channels (matmul: inner 1; conv
 * NCHW: inner P*Q); bias (any float dtype, any 1-D stride) may be NULL.
 * act: 0 none, 1 relu, 2 gelu with the tanh approximation. */
kn_status kn_cuda_bias_act(kn_tensor *y, const kn_tensor *bias, int64_t inner, int64_t channels,
                           int act);

/* ---- conv2d's kernels (kn_cuda_conv.c runs them) ---- */

/* kiln's direct convolution: any strides (y's too), any float dtypes,
 * bias fused; x, w and y seen as NCHW (a channels-last call passes
 * permuted headers). */
kn_status kn_cuda_linalg_conv2d(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias,
                                kn_tensor *y, const kn_attrs *at);
/* x (seen as NCHW through any strides) as a new contiguous {N, H, W, cp}
 * of x's dtype, channels past C zero: a channels-last conv's input. */
kn_status kn_cuda_linalg_to_nhwc(const kn_tensor *x, int64_t cp, kn_tensor **out);
/* Whether the stem kernel takes this channels-last call (an image's few
 * input channels, one group, one float dtype), and the call through it
 * with bias and act (0 none, 1 relu) fused. */
bool kn_cuda_linalg_stem_tc_fits(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at);
kn_status kn_cuda_linalg_conv_stem_tc(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                                      const kn_attrs *at, int act);
bool kn_cuda_linalg_stem_fits(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at);
kn_status kn_cuda_linalg_conv_stem(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                                   const kn_attrs *at, int act);

/* Whether the depthwise kernel takes this channels-last call (NHWC in and
 * out, groups = channels = output channels, at most KN_LA_DW_TAPS taps),
 * and the kernel itself, with bias and act (0 none, 1 relu) fused. */
bool kn_cuda_linalg_dw_fits(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at);
kn_status kn_cuda_linalg_conv_dw(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                                 const kn_attrs *at, int act);
/* The same for NCHW planes: 3x3 and 5x5 windows, one stride of 1 or 2 in
 * both dims, dilation 1, y contiguous; act 0 none, 1 relu, 3 hardswish. */
bool kn_cuda_linalg_dw_nchw_fits(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at);
kn_status kn_cuda_linalg_conv_dw_nchw(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                                      const kn_attrs *at, int act);

/* y {m, n} = act(a {m, k} . b {n, k}^T + bias) for a few rows of a
 * (m <= KN_CUDA_GEMM_ROWS_MAX) in strict f32 (kn_la_rows.cu): the fits
 * check and the call; act 0 none, 1 relu, 3 hardswish. */
#define KN_CUDA_GEMM_ROWS_MAX 64
bool kn_cuda_linalg_gemm_rows_fits(const kn_tensor *a, const kn_tensor *b, const kn_tensor *y);
kn_status kn_cuda_linalg_gemm_rows(const kn_tensor *a, const kn_tensor *b, const kn_tensor *bias, kn_tensor *y,
                                   int act);

/* ---- for both libraries' paths ---- */

/* The call's settings log "library" (KILN_LOGS): print on stderr, once per new call
 * signature, whether cuBLASLt / cuDNN took it or why kiln's own kernel
 * runs instead (the fallback is silent otherwise). */
bool kn_cuda_lib_log_on(void);

/* The largest power of two (at most cap) that divides the address and
 * every given byte stride. */
int64_t kn_cuda_align_of(const void *p, const int64_t *byte_strides, int n, int64_t cap);

/* A converted (dtype dt) or contiguous copy of t made by kiln's own eager
 * ops on the GPU (KN_OP_CAST / KN_OP_CONTIGUOUS); *out is a new reference.
 * Fails (status set) when the runtime cannot do it yet: callers then use
 * the fallback kernels on the original view. */
kn_status kn_cuda_copy_as(const kn_tensor *t, kn_dtype dt, kn_tensor **out);

#endif
