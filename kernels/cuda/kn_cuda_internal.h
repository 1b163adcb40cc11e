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
#include "kn_settings.h"
#include "kn_cuda.h"

/* ---- kn_cuda_trace.c: the backend's trace_* slots (kn_backend.h) ---------- */

kn_status kn_cuda_trace_begin(kn_device_ctx *d);
kn_status kn_cuda_trace_push(kn_device_ctx *d, uint64_t id);
kn_status kn_cuda_trace_pop(kn_device_ctx *d);
kn_status kn_cuda_trace_end(kn_device_ctx *d, void (*each)(void *ctx, uint64_t id, double ms), void *ctx);

/* ---- kn_cuda_backend.c ---------------------------------------------------- */

typedef struct kn_cuda_pool kn_cuda_pool; /* kn_cuda_alloc.c */
typedef struct kn_cuda_blas kn_cuda_blas; /* kn_cuda_blas.c */
typedef struct kn_cuda_dnn kn_cuda_dnn;   /* kn_cuda_dnn.c */

/* One GPU's state: the device object's `state` (kn_backend.h). Nothing of
 * one GPU is shared with another: stream, allocator, library handles and
 * their per-signature plans (which name this GPU's memory) live here. */
typedef struct kn_cuda_dev {
    int index; /* CUDA's device number */
    kn_device device;
    pthread_mutex_t init_lock;
    int init_state; /* 0 not yet, 1 ready, 2 failed (for good) */
    char init_why[512];
    cudaStream_t stream; /* the one stream all of this GPU's work goes to */
    int arch;            /* compute capability, e.g. 90 */
    kn_cuda_pool *pool;  /* the caching allocator */
    kn_cuda_blas *blas;  /* cuBLASLt handle, workspace, plans (NULL until the first matmul) */
    kn_cuda_dnn *dnn;    /* cuDNN handle and plans (NULL until the first conv2d) */
    char variant_label[128]; /* what the last library call ran (max-autotune) */
    void *flush_buf;         /* twice the L2, written to evict it before a timed run */
    size_t flush_size;
    unsigned long long *index_flag; /* index ops' range check: first bad position */
} kn_cuda_dev;

/* The GPU the calling thread works on: set by each vtable slot from its
 * device object (kn_cuda_enter), as CUDA's own current device is; device 0
 * before any. The files of kernels/cuda reach their GPU's state through it. */
kn_cuda_dev *kn_cuda_current(void);
/* Make d's GPU the current one (cudaSetDevice when it changes) and start
 * it on first use: its stream, its compute capability. */
kn_status kn_cuda_enter(kn_device_ctx *d);
/* Whether t's memory is the current GPU's (what a library call on it needs). */
static inline bool kn_cuda_on_current(const kn_tensor *t)
{
    return kn_tensor_device(t) == kn_cuda_current()->device;
}
/* Start the current GPU on first use; an error (no device, old driver)
 * names what is missing. */
kn_status kn_cuda_init(void);
/* The current GPU's stream: all of kiln's work on that GPU goes to it
 * (eager ops, plans, library calls, captures). */
cudaStream_t kn_cuda_stream(void);
/* A CUDA error as a kiln status with a message naming `what` (an
 * out-of-memory error becomes KN_ERR_OOM with the free/total bytes). */
kn_status kn_cuda_fail(cudaError_t e, const char *what);
#define KN_CUDA_TRY(call, what)                                                \
    do {                                                                       \
        cudaError_t kn_e_ = (call);                                            \
        if (kn_e_ != cudaSuccess) return kn_cuda_fail(kn_e_, (what));          \
    } while (0)
/* Compute capability of the current GPU, e.g. 90. */
int kn_cuda_arch(void);
/* The settings of the op the calling thread runs (kn_opcall.settings of
 * the vtable slot that runs it; the defaults between calls). */
const kn_settings *kn_cuda_call_settings(void);
/* Whether f32 matmul/conv may use TF32 (kiln.config.allow_tf32). */
#define kn_cuda_allow_tf32() (kn_cuda_call_settings()->allow_tf32)

/* ---- kn_cuda_alloc.c ------------------------------------------------------ */

/* Each GPU has its own allocator (kn_cuda_dev.pool); the functions below
 * work on the current GPU's. */
kn_cuda_pool *kn_cuda_pool_new(void);

/* Caching allocator: blocks are rounded up to size classes and kept on
 * free lists after kn_cuda_free instead of cudaFree; cudaMalloc only when
 * no cached block fits (and after emptying the cache once on OOM).
 * Pointers are 256-byte aligned. Work already queued on kn_cuda_stream
 * may still use a freed block: since everything runs on that one stream,
 * reuse by later work on the same stream is ordered after it. */
kn_status kn_cuda_malloc(int64_t nbytes, void **p);
void kn_cuda_free(void *p);
typedef struct kn_cuda_alloc_stats {
    int64_t allocated;      /* bytes in blocks handed out now */
    int64_t reserved;       /* bytes held from cudaMalloc (in use + cached) */
    int64_t peak_allocated; /* most `allocated` since the last reset */
    int64_t n_malloc;       /* cudaMalloc calls */
    int64_t n_reuse;        /* requests served from the cache */
} kn_cuda_alloc_stats;
void kn_cuda_alloc_stats_get(kn_cuda_alloc_stats *s);
void kn_cuda_alloc_reset_peak(void);
/* cudaFree every cached (unused) block. */
void kn_cuda_empty_cache(void);
/* Recording (CUDA graphs): between capture_begin and capture_end, blocks
 * freed are reusable only by later allocations of the same recording, and
 * every block handed out while recording stays reserved for it (a replay
 * writes there) even after it is freed: capture_end gives the recording
 * an opaque list of them, and kn_cuda_alloc_release_held (when the
 * recording is destroyed, after a sync) returns the free ones to the cache
 * and lets the others go to the cache when they are freed. One recording
 * at a time; capture_begin fails while one is open. */
kn_status kn_cuda_alloc_capture_begin(void);
void kn_cuda_alloc_capture_end(void **held);
void kn_cuda_alloc_release_held(void *held);
/* The out-of-memory status: KN_ERR_OOM with the request, the device's free
 * and total memory and what kiln caches (nbytes < 0: size unknown). */
kn_status kn_cuda_oom(int64_t nbytes, const char *what);

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
/* The cache dir the kernels of the op the calling thread runs are kept
 * in (kn_cuda_call_settings: kiln.config.cache_dir), NULL for none. */
const char *kn_cuda_cache_dir(void);
/* Launch a kernel taking one kn_kargs-like struct by value. */
kn_status kn_cuda_launch(const void *fn, int64_t grid, int block, void *args_struct, size_t shmem);

/* max-autotune: what the last library call on the current GPU ran
 * ("cublaslt algo 21 ...", "cudnn eng 7 knobs(...)"), for
 * kn_backend.library_variant_label. */
void kn_cuda_variant_label(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
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

/* The embedded template sources (the .cu files of kernels/cuda, made at build time). */
const char *kn_cuda_template(const char *name); /* "kn_ops" for kn_ops.cu; NULL if absent */

#endif
