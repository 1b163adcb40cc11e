/* kn_cuda_context: the bottom of the CUDA backend (kernels/cuda only; the
 * rest of kiln sees kn_cuda.h and the backend vtable): each GPU's state,
 * the GPU the calling thread works on, its stream, its memory (the
 * caching allocator's pool, kn_cuda_alloc.h, worked for the current GPU)
 * and CUDA errors as kiln statuses. Every other file of kernels/cuda may
 * use it; it uses none of them but the pool.
 */
#ifndef KN_CUDA_CONTEXT_H
#define KN_CUDA_CONTEXT_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_backend.h"
#include "kn_settings.h"
#include "kn_cuda_alloc.h"
#include "kn_tensor.h"

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
    int sm_count;        /* streaming multiprocessors: what a launch must fill */
    kn_cuda_pool *pool;  /* the caching allocator */
    kn_cuda_blas *blas;  /* cuBLASLt handle, workspace, plans (NULL until the first matmul) */
    kn_cuda_dnn *dnn;    /* cuDNN handle and plans (NULL until the first conv2d) */
    struct kn_cuda_sdpa_plans *dnn_sdpa; /* cuDNN attention plans (kn_cuda_dnn_attention.c) */
    char variant_label[128]; /* what the last library call ran (max-autotune) */
    void *flush_buf;         /* twice the L2, written to evict it before a timed run */
    size_t flush_size;
    unsigned long long *index_flag; /* index ops' range check: first bad position */
} kn_cuda_dev;

/* The cuda kind's open (kn_backend_register_kind): cuda:N exists when CUDA
 * works and the driver reports more than N GPUs; d->state gets its GPU's
 * state. */
kn_status kn_cuda_open(kn_device_ctx *d);

/* The GPU the calling thread works on: set by each vtable slot from its
 * device object (kn_cuda_enter), as CUDA's own current device is; device 0
 * before any. The files of kernels/cuda reach their GPU's state through it. */
kn_cuda_dev *kn_cuda_current(void);
/* Make d's GPU the current one (cudaSetDevice when it changes) and start
 * it on first use: its stream, its compute capability. */
kn_status kn_cuda_enter(kn_device_ctx *d);
/* The same for a GPU's state (kn_cuda_current() of another thread): a
 * worker thread works on its caller's GPU. */
kn_status kn_cuda_enter_gpu(kn_cuda_dev *g);
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
/* Compute capability of the current GPU, e.g. 90. */
int kn_cuda_arch(void);
/* The settings of the op the calling thread runs (kn_opcall.settings of
 * the vtable slot that runs it; the defaults between calls). */
const kn_settings *kn_cuda_call_settings(void);
/* A vtable slot makes s (when not NULL) the call's settings for its
 * duration: enter returns the outer call's, which leave puts back, so an
 * op run inside another (a copy, the unfused attention's chain) without
 * settings of its own runs with those of the call it serves. */
const kn_settings *kn_cuda_call_settings_enter(const kn_settings *s);
void kn_cuda_call_settings_leave(const kn_settings *outer);
/* Whether f32 matmul/conv may use TF32 (kiln.config.allow_tf32). */
#define kn_cuda_allow_tf32() kn_settings_allow_tf32(kn_cuda_call_settings())

/* Pointer to element 0 of a CUDA tensor's view. */
char *kn_cuda_tensor_ptr(const kn_tensor *t);

/* ---- errors ---- */

/* A CUDA error as a kiln status with a message naming `what` (an
 * out-of-memory error becomes KN_ERR_OOM with the free/total bytes). */
kn_status kn_cuda_fail(cudaError_t e, const char *what);
#define KN_CUDA_TRY(call, what)                                                \
    do {                                                                       \
        cudaError_t kn_e_ = (call);                                            \
        if (kn_e_ != cudaSuccess) return kn_cuda_fail(kn_e_, (what));          \
    } while (0)
/* The out-of-memory status: KN_ERR_OOM with the request, the device's free
 * and total memory and what kiln caches (nbytes < 0: size unknown). */
kn_status kn_cuda_oom(int64_t nbytes, const char *what);

/* max-autotune: what the last library call on the current GPU ran
 * ("cublaslt algo 21 ...", "cudnn eng 7 knobs(...)"), for
 * kn_backend.library_variant_label. */
void kn_cuda_variant_label(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- memory: the current GPU's pool (kn_cuda_alloc.h) ---- */

/* A block of at least nbytes of the current GPU's memory, 256-byte
 * aligned; see kn_cuda_alloc.h for when a freed block is reused. */
kn_status kn_cuda_malloc(int64_t nbytes, void **p);
void kn_cuda_free(void *p);
void kn_cuda_alloc_stats_get(kn_cuda_alloc_stats *s);
void kn_cuda_alloc_reset_peak(void);
/* cudaFree every cached (unused) block. */
void kn_cuda_empty_cache(void);
/* A recording's blocks (kn_cuda_pool_capture_begin and the two after it). */
kn_status kn_cuda_alloc_capture_begin(void);
void kn_cuda_alloc_capture_end(void **held);
void kn_cuda_alloc_release_held(void *held);

#endif
