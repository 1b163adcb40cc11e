/* kn_cuda_ops: the template modules behind kn_cuda_ops_run (kernels/cuda).
 *
 * One module per element dtype holds every template kernel for it; its
 * source is assembled from the embedded files (kn_cuda_tsrc.c), which
 * needs no GPU, so t/cuda_templates_compile.c can compile each module
 * with NVRTC on any machine with the toolkit.
 */
#ifndef KN_CUDA_OPS_H
#define KN_CUDA_OPS_H

#include "kn_dtype.h"
#include "kn_status.h"

#include <stdbool.h>
#include <stdint.h>

/* The kernels of a module, looked up by name once and kept. */
typedef enum kn_tkernel {
    KN_TK_REDUCE,
    KN_TK_REDUCE_FINAL,
    KN_TK_ARGMAX,
    KN_TK_POOL,
    KN_TK_POOL_GAP,
    KN_TK_POOL_GAP_PLANES,
    KN_TK_ICHECK,
    KN_TK_ISELECT,
    KN_TK_GATHER,
    KN_TK_IADD,
    KN_TK_RANDOM,
    KN_TK_CAT,
    KN_TK_GS_ATOMIC,  /* gather_scatter (kn_gather_scatter.cu) */
    KN_TK_GS_SEGMENT,
    KN_TK_GS_COUNT,
    KN_TK_GS_SCAN,
    KN_TK_GS_FILL,
    KN_TK_GS_ORDER,
    KN_TK_GS_EPILOGUE,
    KN_TK_GS_EPILOGUE_ROWS,
    KN_TK_COPY, /* KN_TK_COPY + d: the copy into dtype d */
    KN_TK_COUNT = KN_TK_COPY + KN_DTYPE_COUNT
} kn_tkernel;

/* The extern "C" name of kernel k ("kn_reduce", "kn_copy_bf16", ...). */
const char *kn_cuda_ops_kernel_name(int k);

/* The full source of dtype dt's module (the CUDA prelude, the argument
 * structs, kn_rng.h, kn_ops.cu, then the family files kn_reduce.cu,
 * kn_index.cu, kn_pool.cu, kn_random.cu, kn_copy.cu and kn_gather_scatter.cu);
 * the caller frees
 * *src. */
kn_status kn_cuda_ops_source(kn_dtype dt, char **src);

/* Launch template kernel k of dtype dt's module over `work` items (a
 * grid-stride loop: KN_T_BLOCK threads a block, the grid capped). */
struct kn_tensor;
kn_status kn_cuda_ops_launch(kn_dtype dt, int k, int64_t work, void *args);
/* The index ops' range check: queue the check of idx against 1..size
 * (*check: whether the host may read it back, not while the stream is
 * recorded), then read the first bad flat position (-1: none) and its
 * value back (a stream synchronization). */
kn_status kn_cuda_index_check_launch(kn_dtype dt, const struct kn_tensor *idx, int64_t size, bool *check);
kn_status kn_cuda_index_check_read(const struct kn_tensor *idx, int64_t *pos, int64_t *value);
/* The gather_scatter op (kn_cuda_gather_scatter.c, kn_gather_scatter.cu). */
struct kn_opcall;
kn_status kn_cuda_gather_scatter(const struct kn_opcall *c);

#endif
