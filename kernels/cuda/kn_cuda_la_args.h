/* kn_cuda_la_args: the argument structs of kiln's own linear-algebra
 * kernels (kernels/cuda/kn_linalg.cu: the fallback for cases cuBLASLt or
 * cuDNN refuse, or when a library is missing; kn_la_aux.cu, kn_la_stem.cu,
 * kn_la_stem_tc.cu), shared by the host (kn_cuda_linalg.h includes this
 * file) and the device (the build embeds this same text and
 * kn_cuda_linalg_module_source puts it before each module's kernels), so
 * the two layouts cannot drift apart. Each kernel takes one struct by
 * value. Plain C with no includes: NVRTC has no headers.
 */
#ifndef KN_CUDA_LA_ARGS_H
#define KN_CUDA_LA_ARGS_H

/* dtype codes: kiln's kn_dtype values */
#define KN_LA_F32 0
#define KN_LA_F64 1
#define KN_LA_BF16 2
#define KN_LA_F16 3

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
/* the tensor-core stem (bf16, f16): taps C x R x S at most this */
#define KN_LA_TC_TAPS 160
typedef struct kn_la_stem_args {
    const char *x, *w, *bias;
    char *y;
    long long n, c, h, wd, k, r, s, p, q, cw;
    long long xs[4], bias_s;
    int sh, sw, ph, pw, dh, dw;
    int dt, b_dt, act, vec;
} kn_la_stem_args;

/* A channels-last depthwise conv (groups = input channels = output
 * channels): x {n, h, wd, c} through NHWC strides xs, w {c, r, s, 1}
 * contiguous, y {n, p, q, c} contiguous; bias and ReLU fused. vec: 16-byte
 * loads and stores of 16 / esize channels (c, xs[0..2] and the pointers
 * allow it). */
#define KN_LA_DW_TAPS 25
#define KN_LA_DW_STRIP 4 /* outputs along a row a thread of kn_la_conv_dw_strip* takes */
typedef struct kn_la_dw_args {
    const char *x, *w, *bias;
    char *y;
    long long n, h, wd, c, p, q;
    long long xs[4], bias_s;
    int r, s, sh, sw, ph, pw, dh, dw;
    int dt, b_dt, act, vec;
} kn_la_dw_args;

/* kn_la_conv_dw_nchw<K>_<dtype>: a depthwise K x K conv (stride s in both
 * dims, 1 or 2; dilation 1) on NCHW planes. A block stages `ppb` whole
 * planes, or a band of `band` output rows of one plane (then `bands` blocks
 * a plane), as rows_alloc input rows of `pitch` floats (the halo and the
 * padding as zeros) in shared memory; a thread takes four output rows of
 * one column. y is contiguous {n, c, p, q}. */
/* kn_la_gemm_rows_<dtype>: y {m, n} (rows y_s0 apart) = act(a {m, k} (rows
 * a_s0 apart, k contiguous) . b {n, k} (rows b_s0 apart, k contiguous)^T +
 * bias); act 0 none, 1 relu, 3 hardswish. */
typedef struct kn_la_rows_args {
    const char *a, *b, *bias;
    char *y;
    long long m, n, k, a_s0, b_s0, y_s0, bias_s;
    int b_dt, act;
} kn_la_rows_args;

#define KN_LA_DWC_PLANES 256 /* at most this many planes a block (one a thread at least) */
typedef struct kn_la_dwc_args {
    const char *x, *w, *bias;
    char *y;
    long long n, c, h, wd, p, q, planes;
    long long xs[4], bias_s;
    int s, ph, pw, dt, b_dt, act;
    int ppb, band, bands, pitch, rows_alloc;
} kn_la_dwc_args;

/* The convolution form, kn_la_conv_x3_<tile> (KN_X3_CONV 1): an implicit
 * GEMM over a channels-last x {N, h, w, c} (contiguous, c a multiple of
 * 4): y {N, p, q, n} = conv(x, b) with b the weight {n, r, s, c}
 * (k-contiguous, k = r s c), so m = N p q output pixels, k = r s c, the
 * a operand x's windows, read in place; the rest as for the GEMM.
 *
 * The weight-gradient form, kn_la_conv_x3w_<tile> (KN_X3_CONV 2): y {m, r,
 * s, c} = the gradient of the weight of that convolution, sum over its
 * output pixels of a (the output's gradient {N, p, q, m}, m-contiguous,
 * lda m) times b (x's windows, gathered: n = r s c, n-contiguous), so k
 * = N p q output pixels; s, the geometry and x (at b) as above. */
typedef struct kn_la_conv_geom {
    int h, w, c, p, q, s, sh, sw, ph, pw, dh, dw;
} kn_la_conv_geom;

/* Where y's rows go when they are not one after another (pc 0: row r at r
 * ldy): row r = (n, i, j) of an N x pc x qc grid is pixel (n, i sh + oh,
 * j sw + ow) of a channels-last {N, h, w, ldy} output. An input gradient of
 * a strided convolution is computed one class of pixels at a time (the
 * convolution form, kn_cuda_conv_x3.c), each class a strided subgrid. */
typedef struct kn_la_row_scatter {
    int pc, qc, h, w, sh, sw, oh, ow;
} kn_la_row_scatter;

/* kn_la_gemm_x3_<tile>_<layout> (kn_la_gemm_x3.cu): y [m, n] (rows ldy
 * apart) = act(a . b + bias + res) in f32 by the split-precision method,
 * batch z of gridDim.z at a + z sa, b + z sb, y and res + z sy. a is [m, k]
 * (rows lda apart) or [k, m] (k-rows lda apart), b [n, k] or [k, n], as the
 * layout letters say (k: k-contiguous, m/n: the other); bias f32 over n
 * (contiguous) or NULL; res y's layout or NULL; act 0 none, 1 relu, 2 GELU
 * (tanh). vec2: y's rows and base allow 8-byte stores. Split-K (splits >
 * 1): gridDim.z is batches x splits, split s sums k in [s kchunk, (s + 1)
 * kchunk) into ws [batches x splits, m, n] (contiguous, no epilogue), and
 * kn_la_gemm_x3_sum (kn_la_aux.cu) adds the splits in order, then the
 * epilogue, into y. */
typedef struct kn_la_gemm_args {
    const char *a, *b, *bias, *res;
    char *y, *ws;
    long long m, n, k, lda, ldb, ldy, sa, sb, sy, kchunk, batches;
    int act, vec2, splits;
    kn_la_conv_geom cv; /* the convolution forms' geometry; unused by the GEMM */
    kn_la_row_scatter ys; /* y's rows scattered (pc > 0), or not */
} kn_la_gemm_args;

/* kn_la_conv_dgrad_weight (kn_la_aux.cu): a stride (sh, sw) convolution's
 * weight w {k, r, s, c} (contiguous) as the weights of its input
 * gradient's classes: class (a, b), the input pixels (i sh + a, j sw + b),
 * gets the taps r = rl[a] - sh t (t < rc[a]) and s = sl[b] - sw u (u <
 * sc[b]), laid out {c, rc[a], sc[b], k} (k-contiguous: the weight of a
 * stride-1 convolution over the output's gradient) at out + base[a sw + b]
 * floats. */
#define KN_LA_DGRAD_MAX_STRIDE 4
typedef struct kn_la_dgrad_weight_args {
    const char *w;
    char *out;
    long long n;
    int k, r, s, c, sh, sw, ph, pw;
    int rc[KN_LA_DGRAD_MAX_STRIDE], rl[KN_LA_DGRAD_MAX_STRIDE], sc[KN_LA_DGRAD_MAX_STRIDE],
        sl[KN_LA_DGRAD_MAX_STRIDE];
    long long base[KN_LA_DGRAD_MAX_STRIDE * KN_LA_DGRAD_MAX_STRIDE];
} kn_la_dgrad_weight_args;

#endif
