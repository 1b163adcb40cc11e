/* kn_cuda_linalg: what kn_cuda_blas.c and kn_cuda_dnn.c share: the
 * argument structs of kiln's own kernels in kn_linalg.cu (the fallback for
 * cases cuBLASLt or cuDNN refuse, or when a library is missing) and the
 * helpers that launch them. The structs must stay field for field the same
 * as those in kn_linalg.cu: the kernel reads them by value.
 */
#ifndef KN_CUDA_LINALG_H
#define KN_CUDA_LINALG_H

#include "kn_cuda_internal.h"

#define KN_LA_MAX_BATCH 6 /* KN_MAX_DIMS minus the two matrix dims */

typedef struct kn_la_matmul_args {
    const char *a, *b; /* element 0 of each operand's view */
    char *out;         /* contiguous [batch..., m, n] */
    long long m, n, k, nbatch;
    long long a_rs, a_cs, b_rs, b_cs; /* matrix strides, elements */
    long long bsize[KN_LA_MAX_BATCH], a_bs[KN_LA_MAX_BATCH], b_bs[KN_LA_MAX_BATCH];
    int nbat, a_dt, b_dt, o_dt; /* dtype codes: kn_dtype values */
} kn_la_matmul_args;

typedef struct kn_la_conv_args {
    const char *x, *w, *bias; /* bias may be NULL */
    char *y;                  /* [n, k, p, q] through ys */
    long long n, c, h, wd, k, r, s, p, q;
    long long xs[4], ws[4], ys[4], bias_s;
    int sh, sw, ph, pw, dh, dw, groups;
    int x_dt, w_dt, b_dt, y_dt, pad_;
} kn_la_conv_args;

typedef struct kn_la_bias_args {
    char *y;          /* contiguous, updated in place */
    const char *bias; /* may be NULL (activation only) */
    long long total, inner, channels, bias_s;
    int y_dt, b_dt, act, pad_;
} kn_la_bias_args;

/* x [n, c, h, w] (any strides) as y [n, h, w, cp] contiguous, channels
 * c..cp zero: a channels-last convolution's input, padded for cuDNN. */
typedef struct kn_la_nhwc_args {
    const char *x;
    char *y;
    long long n, c, h, w, cp;
    long long xs[4];
    int esize, pad_;
} kn_la_nhwc_args;

/* A channels-last conv with few taps per output channel (a stem: image
 * channels times the kernel window, at most KN_LA_STEM_TAPS): x [n, c, h, w]
 * through any strides (NCHW), w {k, r, s, cw} contiguous (channels past c
 * ignored), y [n, p, q, k] contiguous; bias and ReLU fused. vec: y's
 * channel rows may be stored 16 bytes at a time. */
#define KN_LA_STEM_TAPS 64
typedef struct kn_la_stem_args {
    const char *x, *w, *bias;
    char *y;
    long long n, c, h, wd, k, r, s, p, q, cw;
    long long xs[4], bias_s;
    int sh, sw, ph, pw, dh, dw;
    int dt, b_dt, act, vec;
} kn_la_stem_args;

/* A kernel of kn_linalg.cu by name (compiled once, then cached). */
kn_status kn_cuda_linalg_kernel(const char *name, const void **fn);

/* y = act(y + bias[channel]) in place on the contiguous tensor y, where the
 * channel of element i is (i / inner) % channels (matmul: inner 1; conv
 * NCHW: inner P*Q); bias (any float dtype, any 1-D stride) may be NULL.
 * act: 0 none, 1 relu, 2 gelu with the tanh approximation. */
kn_status kn_cuda_bias_act(kn_tensor *y, const kn_tensor *bias, int64_t inner, int64_t channels,
                           int act);

/* KILN_LOGS contains "library": print on stderr, once per new call
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
