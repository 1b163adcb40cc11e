/* kn_cuda_alloc: the caching device allocator's pool (kernels/cuda only).
 *
 * One pool per GPU (kn_cuda_dev.pool): its blocks are memory of the CUDA
 * device that is current when they are made. The pool knows no device
 * object, stream or kiln message: kn_cuda_context.c works it for the
 * current GPU (kn_cuda_malloc, kn_cuda_free, ...) and words its failures,
 * so the pool is the one file of kernels/cuda below the context.
 *
 * Caching: blocks are rounded up to size classes and kept on free lists
 * after a free instead of cudaFree; cudaMalloc only when no cached block
 * fits (and after emptying the cache once on OOM). A size that keeps
 * missing gets several blocks from one cudaMalloc (a segment), cached until
 * asked for; emptying the cache gives back the segments whose blocks are
 * all free. Pointers are 256-byte
 * aligned. Work already queued on kn_cuda_stream may still use a freed
 * block: since everything runs on that one stream, reuse by later work on
 * the same stream is ordered after it.
 */
#ifndef KN_CUDA_ALLOC_H
#define KN_CUDA_ALLOC_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kn_status.h"

typedef struct kn_cuda_pool kn_cuda_pool;

typedef struct kn_cuda_alloc_stats {
    int64_t allocated;      /* bytes in blocks handed out now */
    int64_t reserved;       /* bytes held from cudaMalloc (in use + cached) */
    int64_t peak_allocated; /* most `allocated` since the last reset */
    int64_t peak_reserved;  /* most `reserved` since the last reset */
    int64_t n_malloc;       /* cudaMalloc calls */
    int64_t n_reuse;        /* requests served from the cache */
} kn_cuda_alloc_stats;

/* A new, empty pool; NULL when host memory runs out. */
kn_cuda_pool *kn_cuda_pool_new(void);

/* A block of at least nbytes (checked by the caller: 0 .. KN_MAX_BYTES).
 * KN_ERR_OOM with its message when host memory for the lists runs out;
 * when cudaMalloc fails, KN_ERR_DEVICE with *cuda_error set and no
 * message (the caller words it: the out-of-memory message reports the
 * pool's figures). */
kn_status kn_cuda_pool_malloc(kn_cuda_pool *pool, int64_t nbytes, void **p, cudaError_t *cuda_error);
void kn_cuda_pool_free(kn_cuda_pool *pool, void *p);
void kn_cuda_pool_stats(kn_cuda_pool *pool, kn_cuda_alloc_stats *s);
void kn_cuda_pool_reset_peak(kn_cuda_pool *pool);
/* cudaFree every cached (unused) block. */
void kn_cuda_pool_empty(kn_cuda_pool *pool);
/* Recording (CUDA graphs): between capture_begin and capture_end, blocks
 * freed are reusable only by later allocations of the same recording, and
 * every block handed out while recording stays reserved for it (a replay
 * writes there) even after it is freed: capture_end gives the recording
 * an opaque list of them, and kn_cuda_pool_release_held (when the
 * recording is destroyed, after a sync) returns the free ones to the cache
 * and lets the others go to the cache when they are freed. One recording
 * at a time; capture_begin fails while one is open. */
kn_status kn_cuda_pool_capture_begin(kn_cuda_pool *pool);
void kn_cuda_pool_capture_end(kn_cuda_pool *pool, void **held);
void kn_cuda_pool_release_held(kn_cuda_pool *pool, void *held);

#endif
