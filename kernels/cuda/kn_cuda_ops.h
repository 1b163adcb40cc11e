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

/* The kernels of a module, looked up by name once and kept. */
typedef enum kn_tkernel {
    KN_TK_REDUCE,
    KN_TK_REDUCE_FINAL,
    KN_TK_ARGMAX,
    KN_TK_POOL,
    KN_TK_ICHECK,
    KN_TK_ISELECT,
    KN_TK_GATHER,
    KN_TK_IADD,
    KN_TK_RANDOM,
    KN_TK_CAT,
    KN_TK_COPY, /* KN_TK_COPY + d: the copy into dtype d */
    KN_TK_COUNT = KN_TK_COPY + KN_DTYPE_COUNT
} kn_tkernel;

/* The extern "C" name of kernel k ("kn_reduce", "kn_copy_bf16", ...). */
const char *kn_cuda_ops_kernel_name(int k);

/* The full source of dtype dt's module (the CUDA prelude, the argument
 * structs, kn_rng.h, kn_ops.cu, then the family files kn_reduce.cu,
 * kn_index.cu, kn_pool.cu, kn_random.cu and kn_copy.cu); the caller frees
 * *src. */
kn_status kn_cuda_ops_source(kn_dtype dt, char **src);

#endif
