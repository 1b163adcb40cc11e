/* kn_cuda_internal: what the files of the CUDA backend share among
 * themselves (kernels/cuda only; the rest of kiln sees kn_cuda.h and the
 * backend vtable).
 *
 *   kn_cuda_backend.c  the vtable, the stream, copies, errors, events, graphs
 *   kn_cuda_alloc.c    the caching device allocator
 *   kn_cuda_module.c   NVRTC programs: in-memory and on-disk cubin cache, load, lookup
 *   kn_cuda_eager.c    eager ops through one-node kernel IR (elementwise, row ops)
 *   kn_cuda_ops.c      eager ops through kiln's CUDA templates (kernels/cuda/ *.cu files)
 *   kn_cuda_blas.c     matmul through cuBLASLt
 *   kn_cuda_dnn.c      convolution through cuDNN's graph API
 *   kn_cuda_attention.c the fused attention kernel (kn_attention.cu), kn_cuda_attention.h
 *   kn_cuda_libplans.c the per-signature plan cache both libraries use
 *   kn_cuda_trace.c    exact kernel times for profiling (CUPTI, loaded at run time)
 */
#ifndef KN_CUDA_INTERNAL_H
#define KN_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_backend.h"
#include "kn_op.h"
#include "kn_cuda.h"

/* ---- kn_cuda_trace.c: the backend's trace_* slots (kn_backend.h) ---------- */

kn_status kn_cuda_trace_begin(kn_device_ctx *d);
kn_status kn_cuda_trace_push(kn_device_ctx *d, uint64_t id);
kn_status kn_cuda_trace_pop(kn_device_ctx *d);
kn_status kn_cuda_trace_end(kn_device_ctx *d, void (*each)(void *ctx, uint64_t id, double ms), void *ctx);

#include "kn_cuda_context.h"

/* ---- kn_cuda_module.c ----------------------------------------------------- */

/* A loaded NVRTC program. */
typedef struct kn_cuda_module kn_cuda_module;
/* Compile (or find in the in-memory cache, then in cache_dir as a verified
 * cubin file) and load src; cache_dir may be NULL (memory only). */
kn_status kn_cuda_module_get(const char *src, const char *cache_dir, kn_cuda_module **m);
/* kn_cuda_module_get; *cached (when not NULL): found in memory or on disk, no NVRTC run. */
kn_status kn_cuda_module_get_ex(const char *src, const char *cache_dir, kn_cuda_module **m, bool *cached);
/* A kernel by its extern "C" name, as the pointer cudaLaunchKernel takes. */
kn_status kn_cuda_module_kernel(kn_cuda_module *m, const char *name, const void **fn);
/* Counters for kiln.jit_stats-like reporting. */
typedef struct kn_cuda_module_stats {
    int64_t compiles, disk_hits, memory_hits;
    double compile_s;
} kn_cuda_module_stats;
void kn_cuda_module_stats_get(kn_cuda_module_stats *s);
/* The cache dir eager ops use for their kernels (set from kiln.config). */
void kn_cuda_set_cache_dir(const char *dir);
const char *kn_cuda_cache_dir(void);
/* Launch a kernel taking one kn_kargs-like struct by value. */
kn_status kn_cuda_launch(const void *fn, int64_t grid, int block, void *args_struct, size_t shmem);

/* cuBLASLt's version (opening it), 0 without it. */
size_t kn_cuda_blas_version(void);

/* ---- kernels by op family (each returns KN_ERR_UNSUPPORTED for calls it
 * does not cover, so `run` can name the gap) ---- */
kn_status kn_cuda_eager_ir(const kn_opcall *c);  /* kn_cuda_eager.c */
kn_status kn_cuda_ops_run(const kn_opcall *c);   /* kn_cuda_ops.c: templates */
kn_status kn_cuda_matmul(const kn_opcall *c);    /* kn_cuda_blas.c */
/* Whether kn_cuda_matmul can write c->out[0] with its strides (unit-stride
 * rows, through cuBLASLt's D leading dim and batch stride). */
bool kn_cuda_matmul_strided_ok(const kn_opcall *c);
kn_status kn_cuda_conv2d(const kn_opcall *c);    /* kn_cuda_dnn.c */
kn_status kn_cuda_attention_op(const kn_opcall *c); /* kn_cuda_attention_op.c */

/* kn_cuda_blas.c: matmul with a fused epilogue, out = act(a @ b + bias),
 * for the compiler's matmul+bias(+act) groups. bias (may be NULL) is 1-D
 * {N} on cuda; any float dtype (cast to the output's when the runtime can,
 * else added by kiln's kernel). act: 0 none, 1 relu (exact), 2 GELU with
 * the tanh approximation (cuBLASLt's GELU epilogue is that one): kiln's
 * gelu op is the erf form, so pass 2 only for a graph that asks for tanh. */
/* matmul with bias (1-D over N), activation (0 none, 1 relu) and a
 * residual (contiguous, the output's shape) added in the library's
 * epilogue: out = act(a·b + bias) or a·b + bias + residual. */
kn_status kn_cuda_matmul_fused(const kn_opcall *c, const kn_tensor *bias, int act, const kn_tensor *residual);
/* conv2d (its own bias input, if any) with act (0 none, 1 relu) in cuDNN's
 * graph: conv -> bias add -> ReLU as one plan. */
kn_status kn_cuda_conv2d_fused(const kn_opcall *c, int act);
/* Whether conv2d of dtype dt should run channels-last on the current GPU
 * (the layout pass's "auto"): cuDNN present, a half type, sm_80 or later. */
bool kn_cuda_conv_prefers_nhwc(kn_dtype dt); /* kn_cuda_dnn.c */
kn_status kn_cuda_matmul_ex(const kn_opcall *c, const kn_tensor *bias, int act);
/* The roofline ceiling for :device: an 8192^3 GEMM of dtype dt through
 * kn_cuda_matmul (median of 5 event-timed runs after 2 warm-ups), in
 * TFLOP/s. f32 follows kiln.config.allow_tf32 like every matmul. */
kn_status kn_cuda_matmul_rate(kn_dtype dt, double *tflops);

#include "kn_cuda_tsrc.h"

#endif
