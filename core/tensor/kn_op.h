/* kn_op: the op enum (from kn_ops.def) and one op invocation (kn_opcall).
 *
 * A kn_opcall is what eager execution hands a backend and, later, what a
 * graph node stores: the op, its inputs, its attributes and its outputs.
 * All dims in attributes are 0-based and already normalized (non-negative);
 * the Lua boundary converts from the user's 1-based dims.
 */
#ifndef KN_OP_H
#define KN_OP_H

#include <stdint.h>

#include "kn_tensor.h"

typedef enum kn_op_kind {
    KN_K_UNARY,
    KN_K_BINARY,
    KN_K_COMPARE,
    KN_K_TERNARY,
    KN_K_MASKED,
    KN_K_REDUCE,
    KN_K_ARGREDUCE,
    KN_K_SOFTMAX,
    KN_K_NORM,
    KN_K_MATMUL,
    KN_K_CONV,
    KN_K_POOL,
    KN_K_ATTENTION,
    KN_K_COPY,
    KN_K_CAT,
    KN_K_INDEX,
    KN_K_TRI,
    KN_K_VIEW,
    KN_K_CREATE
} kn_op_kind;

typedef enum kn_op {
#define KN_OP(id, name, kind, nin, expr) KN_OP_##id,
#include "kn_ops.def"
#undef KN_OP
    KN_OP_COUNT
} kn_op;

const char *kn_op_name(kn_op op);
kn_op_kind kn_op_kind_of(kn_op op);
/* Whether op works element by element on broadcast operands (unary,
 * binary, compare, ternary, masked): what passes may fold, sink or fuse as
 * a pointwise step. False for an op outside the table. */
bool kn_op_is_elementwise(kn_op op);
int kn_op_arity(kn_op op); /* -1: variadic */
/* Look an op up by name; returns KN_OP_COUNT if there is none. */
kn_op kn_op_by_name(const char *name);

#define KN_MAX_INPUTS 8 /* cat takes up to this many inputs in one call */
#define KN_MAX_OUTPUTS 2

enum { KN_LAYOUT_NCHW = 0, KN_LAYOUT_NHWC = 1 };

#define KN_GATHER_SCATTER_EPILOGUE_MAX 3 /* ops a gather_scatter applies before its store */
#define KN_GATHER_SCATTER_ROW_MAX 64     /* columns its softmax / log_softmax epilogue normalizes */

typedef struct kn_attrs {
    int dims[KN_MAX_DIMS]; /* reduce dims; permute order */
    int ndims;             /* reduce: 0 means all dims */
    int64_t shape[KN_MAX_DIMS]; /* creation shape; layer_norm normalized shape; adaptive pool output */
    int nshape;
    int dim;          /* softmax, cat, max, index ops */
    int keepdim;      /* reductions */
    int correction;   /* var: 1 = unbiased (default), 0 = population */
    int64_t diagonal; /* tril / triu */
    int64_t start, stop, step; /* slice: 0-based, half-open */
    int kernel[2], stride[2], padding[2], dilation[2];
    int groups;
    int ceil_mode;        /* pools */
    int count_include_pad; /* avg_pool2d (default 1, as PyTorch) */
    int causal;           /* attention: 1 keeps key j for query i only where j <= i (top-left, as
                             PyTorch's is_causal) */
    /* conv2d's memory layouts (KN_LAYOUT_*), set only by the channels-last
     * pass (kn_pass_channels_last); users' convs are NCHW. With either one
     * NHWC the weight is {K, kh, kw, C/groups padded}: its extra channels
     * meet zeros (the input's channels are padded with zeros to match).
     * Two ints: together they fill the padding before eps, and attrs are
     * compared as bytes (cse). */
    int in_layout, out_layout;
    double eps;           /* norms */
    double value;         /* full value; masked_fill value; arange start; rand/randint low */
    double value2;        /* arange step; randint high */
    double scale;         /* attention: multiplies q.k^T before the softmax (the Lua API defaults it to 1/sqrt(d)) */
    uint64_t seed;        /* random creation */
    uint64_t rng_offset;  /* counter offset into the seed's stream */
    kn_dtype dtype;       /* cast target; creation dtype */
    int rng_fresh;        /* random creation without a seed: a draw from the caller's stream, so
                             seed and rng_offset are per call, not part of the graph (it fills
                             the padding after dtype) */
    /* gather_scatter (set only by kn_pass_gather_scatter): ops applied to
     * the summed rows before they are stored, in order (kn_op values):
     * elementwise relu, gelu, silu, sigmoid, tanh, and last, optionally,
     * softmax or log_softmax over the last dim of a 2-D result of at most
     * KN_GATHER_SCATTER_ROW_MAX columns. Four ints: no padding (cse). */
    int epilogue[KN_GATHER_SCATTER_EPILOGUE_MAX];
    int n_epilogue;
    /* attention (set only by kn_pass_attention): 1 makes a NaN in the
     * result 0, as the dynamo exporter's masked_fill(probs, isnan(probs),
     * 0) after the softmax does for a row whose every key is masked; the
     * kernel does it as it stores, instead of a fill kernel after it */
    int zero_nan;
    /* sum, mean, var (set only by kn_pass_split_reductions): 1 gives the
     * result in attr dtype, a float wider than the input's, the input
     * converted as it is read (a widening cast folded in). With zero_nan,
     * no tail padding (attrs are compared as bytes). */
    int widen;
} kn_attrs;

/* Whether a conv2d with attrs a and a kh x kw kernel is a patch embedding:
 * kernel = stride, no padding, no dilation, one group, more than one tap
 * (ViT's 16x16 stride 16). Its windows do not overlap, so its im2col
 * matrix is a permutation of the input: the CUDA backend runs it as a
 * GEMM over the input's own channels, and the channels-last pass leaves
 * its weight unpadded to match. */
bool kn_conv_is_patch_embedding(const kn_attrs *a, int64_t kh, int64_t kw);

struct kn_settings; /* kn_settings.h */

typedef struct kn_opcall {
    kn_op op;
    int n_in;
    kn_tensor *in[KN_MAX_INPUTS]; /* borrowed */
    kn_attrs a;
    int n_out;
    kn_tensor *out[KN_MAX_OUTPUTS]; /* owned by the caller once filled */
    int variant; /* library ops (matmul, conv2d): which of the backend's
                    algorithms runs it; 0 is its default pick (the autotuner
                    measures the others, kn_backend.library_variant_label);
                    KN_VARIANT_STRICT its strict f32 engine for matmul,
                    conv2d and attention */
    /* the caller's settings (TF32, the cache dir of the kernels it
     * compiles, the backends' logs), borrowed for the call; NULL: the
     * defaults (kn_settings.h) */
    const struct kn_settings *settings;
} kn_opcall;

/* kn_opcall.variant of a matmul, conv2d or attention: the backend's
 * engine that computes f32 with f32 arithmetic (no TF32, no split
 * products), which the "ieee" contract measures the others against; a
 * backend whose default is already that runs its default. */
#define KN_VARIANT_STRICT (-1)

/* Zero the call and set attribute defaults (correction 1, count_include_pad 1,
 * groups 1, dilation 1, eps 1e-5). */
void kn_opcall_init(kn_opcall *c, kn_op op);

/* Shape inference: check inputs (count, dtypes, shapes, attrs) and fill the
 * output metadata. On error, the message names the op, the argument, what was
 * expected and what came. Defined in core/tensor/kn_shape.c. */
kn_status kn_op_infer(const kn_opcall *c, kn_meta out[KN_MAX_OUTPUTS], int *n_out);

/* Eager execution: infer, allocate outputs on the inputs' device (or
 * `dev` for creation ops), run on that device's backend with c->settings.
 * On success c->out[0..n_out) hold new tensors owned by the caller.
 * Defined in core/tensor/kn_eager.c. */
kn_status kn_op_eager(kn_opcall *c, kn_device dev);

/* Whether device d's backend runs call c (its supports_op; c->out may be
 * empty, its inputs headers without storage): KN_OK, or the error that
 * eager execution and a plan's build both give, naming the op, the device
 * and the dtypes ("matmul: not supported on cuda:1 for these dtypes (f64,
 * f64)"). Defined in core/tensor/kn_eager.c. */
struct kn_device_ctx;
kn_status kn_op_check_supported(struct kn_device_ctx *d, const kn_opcall *c);

#endif
