/* kn_cuda_targs: the argument structs of kiln's CUDA templates (kernels/cuda
 * *.cu), shared by the host (kn_cuda_ops.c includes this file) and the
 * device (the build embeds this same text and prepends it to every template
 * module), so the two layouts cannot drift apart. Each kernel takes one of
 * these structs by value. Plain C with no includes: NVRTC has no headers.
 *
 * Shapes and strides are in elements; pointers address element 0 of the
 * view (its offset already applied).
 */
#ifndef KN_CUDA_TARGS_H
#define KN_CUDA_TARGS_H

#define KN_T_MAXD 8 /* KN_MAX_DIMS */
#define KN_T_MAXCAT 8 /* KN_MAX_INPUTS */
#define KN_T_BLOCK 256 /* every template kernel runs with this many threads */
#define KN_T_RUN 8      /* consecutive elements a thread of strided copies and cats (kn_ops.cu) */
#define KN_T_CAT_SHORT 32 /* the longest row kn_cat_short takes a thread (a cat along the last dim) */

/* reduction ops (kn_reduce) */
#define KN_TR_SUM 0
#define KN_TR_MEAN 1
#define KN_TR_AMAX 2
#define KN_TR_AMIN 3
#define KN_TR_VAR 4

/* pools (kn_pool) */
#define KN_TP_MAX 0
#define KN_TP_AVG 1
#define KN_TP_ADAPTIVE 2

/* random creation (kn_random) */
#define KN_TRNG_NORMAL 0
#define KN_TRNG_UNIFORM 1
#define KN_TRNG_INT 2

/* dst (at dst_st) = src (at sst) over shape, converting the dtype */
typedef struct kn_copy_args {
    const char *src;
    char *dst;
    long long n;
    int ndim;
    long long shape[KN_T_MAXD], sst[KN_T_MAXD], dst_st[KN_T_MAXD];
} kn_copy_args;

/* contiguous dst = cat(src[0..nin)) along dim; every src has dst's dtype */
typedef struct kn_cat_args {
    char *dst;
    long long n;
    int ndim, dim, nin;
    long long shape[KN_T_MAXD];
    long long start[KN_T_MAXCAT + 1]; /* where each input begins along dim */
    const char *src[KN_T_MAXCAT];
    long long st[KN_T_MAXCAT][KN_T_MAXD];
} kn_cat_args;

/* A patch embedding's windows (kn_patches): dst [N, P, Q, KH, KW, C]
 * contiguous = x's KH x KW windows, x an NCHW view (strides sn, sc, sh,
 * sw); a band is one (n, p, kh): C input rows of Q * KW elements. */
#define KN_T_PATCHES_SMEM 16384 /* bytes of a band a block stages */
typedef struct kn_patches_args {
    const char *src;
    char *dst;
    long long bands; /* N * P * KH */
    int c, p, q, kh, kw;
    long long sn, sc, sh, sw;
} kn_patches_args;

/* One partial result of a reduction split across blocks. */
typedef struct kn_rpart {
    double s, m2;    /* float sum (or extreme); var: chunk mean and squared deviations */
    long long i, n;  /* integer sum or extreme; element count */
} kn_rpart;

/* Output o (over the kept dims) reduces `count` elements (over the reduced
 * dims); `group` threads work on one output, and when nsplit > 1 each
 * output's elements are cut into nsplit chunks of `chunk` whose partials
 * go to part[o * nsplit + s] for kn_reduce_final. */
typedef struct kn_reduce_args {
    const char *x;
    char *out;
    kn_rpart *part;
    int op, correction;
    int out_dt; /* the result's dtype (a kn_dtype): KN_DT, or a wider float (a folded widening cast) */
    int nk, nr;
    int group, nsplit;
    long long nout, count, chunk;
    long long ksize[KN_T_MAXD], kst[KN_T_MAXD];
    long long rsize[KN_T_MAXD], rst[KN_T_MAXD];
} kn_reduce_args;

/* max along one dim: values (raw copies) and 1-based i64 indices */
typedef struct kn_argmax_args {
    const char *x;
    char *val;
    long long *idx;
    int nk, group;
    long long nout, len, lst;
    long long ksize[KN_T_MAXD], kst[KN_T_MAXD];
} kn_argmax_args;

/* 2-D pools over (n, c, h, w) views; out is contiguous (n, c, oh, ow) */
typedef struct kn_pool_args {
    const char *x;
    char *out;
    int op, count_include_pad;
    int kh, kw, sy, sx, py, px, dy, dx;
    long long n, c, h, w, sn, sc, sh, sw, oh, ow, total;
} kn_pool_args;

/* The first out-of-range index (flat position in the index tensor) goes
 * to *flag through atomicMin; indices are 1-based, valid in 1..size. */
typedef struct kn_icheck_args {
    const char *idx;
    int idx64, ndim;
    long long n, size;
    long long shape[KN_T_MAXD], st[KN_T_MAXD];
    unsigned long long *flag;
} kn_icheck_args;

/* index_select (shape: the output's), gather (shape: the index's, which is
 * the output's) and index_add (shape: the source's; dst is the contiguous
 * output of x's shape): element p reads or writes x / dst at p with
 * p[dim] replaced by idx[...] - 1, clamped into range. */
typedef struct kn_index_args {
    const char *x; /* index_add: the source */
    char *dst;
    const char *idx;
    int idx64, ndim, dim;
    long long n, size;
    long long shape[KN_T_MAXD];
    long long xst[KN_T_MAXD];   /* x's (index_add: the source's) strides */
    long long ist[KN_T_MAXD];   /* the index's strides (index_select: only [0] is used) */
    long long dst_st[KN_T_MAXD];
} kn_index_args;

/* gather_scatter (kn_gather_scatter.cu): out[dst[e]] += h[src[e]] * w[e]
 * over rows of `row` elements; out is contiguous {rows, row}; h's and
 * base's columns are contiguous, their rows `h_st` / `base_st` apart; w
 * (NULL: none) holds one number per edge, `w_st` apart; base NULL: zeros.
 * Threads work on `vec` adjacent columns (nvec = row / vec groups a row);
 * vec > 1 only where every row start is 16-byte aligned. The segment
 * variant reads the edges in dst order: edge perm[k] for k in
 * start[r]..start[r + 1] ends at row r (count: scratch for building it).
 * The epilogue: act[0..n_act) (KN_GS_*) applied to each sum before the
 * store, then row_op (KN_GS_SOFTMAX, KN_GS_LOG_SOFTMAX, 0: none) over each
 * row of at most 64 elements, which a thread then keeps whole. */
enum { KN_GS_RELU = 1, KN_GS_GELU, KN_GS_SILU, KN_GS_SIGMOID, KN_GS_TANH, KN_GS_SOFTMAX, KN_GS_LOG_SOFTMAX };
typedef struct kn_gs_args {
    const char *h, *w, *base, *src, *dst;
    char *out;
    int src64, dst64, vec;
    long long edges, rows, hrows, row, nvec;
    long long h_st, w_st, base_st, src_st, dst_st;
    int *start, *count, *perm;
    int act[3], n_act, row_op;
} kn_gs_args;

/* element i of a contiguous out is element rng_offset + i of the stream */
typedef struct kn_random_args {
    char *out;
    int op;
    long long n;
    unsigned long long seed, offset;
    double lo, hi;
} kn_random_args;

#endif
