/* kn_cuda_tsrc: the embedded template texts of kernels/cuda (the .cu
 * files, kn_cuda_targs.h, kn_cuda_la_args.h, kn_cuda_attn_args.h and
 * core/base/kn_rng.h) and the per-dtype template modules assembled from
 * them, with the names of their kernels.
 *
 * A module holds one template kernel for one element dtype; its
 * source is assembled here, which needs no GPU, so
 * t/cuda_templates_compile.c can compile each module with NVRTC on any
 * machine with the toolkit. kn_cuda_ops.c loads and launches them.
 */
#ifndef KN_CUDA_TSRC_H
#define KN_CUDA_TSRC_H

#include "kn_dtype.h"
#include "kn_status.h"

/* The kernels of a module, looked up by name once and kept. */
typedef enum kn_tkernel {
    KN_TK_REDUCE,
    KN_TK_REDUCE_FINAL,
    KN_TK_REDUCE_COLS, /* sum / mean over the leading dims of a contiguous value */
    KN_TK_REDUCE_COLS_FINAL,
    KN_TK_REDUCE_COLS_VEC, /* the same, rows of whole 16-byte vectors */
    KN_TK_ARGMAX,
    KN_TK_POOL,
    KN_TK_POOL_GAP,
    KN_TK_POOL_GAP_PLANES,
    KN_TK_POOL_NHWC,
    KN_TK_POOL_NHWC_VEC,
    KN_TK_POOL_GAP_VEC,
    KN_TK_POOL_MAX3_NHWC_VEC,
    KN_TK_ICHECK,
    KN_TK_ISELECT,
    KN_TK_IROWS, /* index_select of contiguous rows */
    KN_TK_GATHER,
    KN_TK_IADD,
    KN_TK_IADD_ROWS, /* index_add of contiguous rows */
    KN_TK_RANDOM,
    KN_TK_CAT,
    KN_TK_CAT_ROWS, /* cat of contiguous row parts */
    KN_TK_CAT_SHORT, /* cat along the last dim of short rows */
    KN_TK_PATCHES,  /* a patch embedding's windows (kn_copy.cu) */
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

/* The source of dtype dt's module of kernel k (the CUDA prelude, the
 * argument structs, kn_rng.h, kn_ops.cu, then the family files kn_reduce.cu,
 * kn_index.cu, kn_pool.cu, kn_random.cu, kn_copy.cu and kn_gather_scatter.cu,
 * with KN_ONE_KERNEL and KN_KSEL_<name> defined so that only kernel k is
 * compiled), or with k < 0 the module of every kernel (the tests compile
 * that one). A model's first call compiles one module a kernel it runs:
 * NVRTC takes 0.1-0.4 s a kernel, and the module of all 31 took 2-2.7 s on
 * one core, most of a cold ResNet call, for the two or three a ResNet runs.
 * The caller frees *src. */
kn_status kn_cuda_ops_source(kn_dtype dt, int k, char **src);

/* The embedded template sources (the .cu files of kernels/cuda, made at build time). */
const char *kn_cuda_template(const char *name); /* "kn_ops" for kn_ops.cu; NULL if absent */
/* The file name of the i-th embedded template ("kn_ops.cu"), NULL past the last. */
const char *kn_cuda_template_name(int i);

#endif
