/* kn_cuda_linalg: what kn_cuda_blas.c and kn_cuda_dnn.c share: the
 * argument structs of kiln's own kernels in kn_linalg.cu (the fallback for
 * cases cuBLASLt or cuDNN refuse, or when a library is missing; the structs
 * themselves are in kn_cuda_la_args.h, which the device code shares) and
 * the helpers that launch them.
 */
#ifndef KN_CUDA_LINALG_H
#define KN_CUDA_LINALG_H

#include "kn_cuda_internal.h"

#include "kn_cuda_la_args.h"

/* kn_linalg.cu's module source: KN_LA_STANDALONE, the argument structs
 * (kn_cuda_la_args.h), then the kernels; caller frees *src. */
kn_status kn_cuda_linalg_source(char **src);

/* A kernel of kn_linalg.cu by name (compiled once, then cached). */
kn_status kn_cuda_linalg_kernel(const char *name, const void **fn);

/* y = act(y + bias[channel]) in place on the contiguous tensor y, where the
 * channel of element i is (i / inner) % channels (matmul: inner 1; conv
 * NCHW: inner P*Q); bias (any float dtype, any 1-D stride) may be NULL.
 * act: 0 none, 1 relu, 2 gelu with the tanh approximation. */
kn_status kn_cuda_bias_act(kn_tensor *y, const kn_tensor *bias, int64_t inner, int64_t channels,
                           int act);

/* The call's settings log "library" (KILN_LOGS): print on stderr, once per new call
 * signature, whether cuBLASLt / cuDNN took it or why kiln's own kernel
 * runs instead (the fallback is silent otherwise). */
bool kn_cuda_lib_log_on(void);

/* Pointer to element 0 of a CUDA tensor's view. */
char *kn_cuda_tensor_ptr(const kn_tensor *t);

/* The largest power of two (at most cap) that divides the address and
 * every given byte stride. */
int64_t kn_cuda_align_of(const void *p, const int64_t *byte_strides, int n, int64_t cap);

/* A converted (dtype dt) or contiguous copy of t made by kiln's own eager
 * ops on the GPU (KN_OP_CAST / KN_OP_CONTIGUOUS); *out is a new reference.
 * Fails (status set) when the runtime cannot do it yet: callers then use
 * the fallback kernels on the original view. */
kn_status kn_cuda_copy_as(const kn_tensor *t, kn_dtype dt, kn_tensor **out);

#endif
