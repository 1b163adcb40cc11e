/* kn_cuda_module: NVRTC programs of kernels/cuda, compiled once per process
 * and once per cache directory (memory, then a verified cubin file, then
 * NVRTC), their kernels by name, and the launch of one.
 */
#ifndef KN_CUDA_MODULE_H
#define KN_CUDA_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_status.h"

/* A source that holds this line uses features of one architecture only
 * (Hopper's wgmma): it is compiled for sm_90a, not sm_90, and only on a
 * compute capability 9.0 GPU (kn_cuda_module_get refuses it elsewhere). */
#define KN_CUDA_ARCH_SPECIFIC_LINE "#define KN_ARCH_SPECIFIC 1\n"
/* The NVRTC architecture (sm_XX or sm_XXa) of src on a GPU of compute
 * capability arch (major * 10 + minor), in buf; false when src cannot be
 * compiled for it. */
bool kn_cuda_module_arch(const char *src, int arch, char *buf, size_t size);

/* A loaded NVRTC program. */
typedef struct kn_cuda_module kn_cuda_module;
/* Compile (or find in the in-memory cache, then in cache_dir as a verified
 * cubin file) and load src; cache_dir may be NULL (memory only). */
kn_status kn_cuda_module_get(const char *src, const char *cache_dir, kn_cuda_module **m);
/* kn_cuda_module_get; *cached (when not NULL): found in memory or on disk, no NVRTC run. */
kn_status kn_cuda_module_get_ex(const char *src, const char *cache_dir, kn_cuda_module **m, bool *cached);
/* kn_cuda_module_get_ex of n sources at once, on up to n threads (the
 * calling one included), each on the calling thread's GPU: NVRTC compiles
 * one program on one core, and a model's kernels split into several
 * programs compile in the time of the largest. *all_cached: none needed
 * NVRTC. The first error (in source order) is the result. */
kn_status kn_cuda_modules_get(const char *const *srcs, int n, const char *cache_dir, kn_cuda_module **out,
                              bool *all_cached);
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
/* The same with 2-D grid and block (grid_y at most 65535). */
kn_status kn_cuda_launch_dims(const void *fn, unsigned grid_x, unsigned grid_y, unsigned block_x, unsigned block_y,
                              void *args_struct, size_t shmem);
/* The same with a 3-D grid (grid_y and grid_z at most 65535). */
kn_status kn_cuda_launch_grid3(const void *fn, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                               unsigned block_y, void *args_struct, size_t shmem);

#endif
