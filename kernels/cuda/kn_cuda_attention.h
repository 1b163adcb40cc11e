/* kn_cuda_attention: kiln's fused scaled-dot-product attention forward on
 * the GPU (kernels/cuda/kn_attention.cu and kn_attention_f32.cu), the same
 * result as PyTorch's F.scaled_dot_product_attention:
 *   o = softmax(q k^T * scale (+ mask)) v
 * computed FlashAttention-2 style (online softmax in f32, the score matrix
 * never stored). bf16/f16 run on tensor cores (mma.sync) when the head dims
 * are multiples of 8 up to 128 and the operands allow 16-byte loads. f32
 * runs on the TF32 tensor cores by the split-precision method, which keeps
 * f32 accuracy (head dims up to 64, 16-byte rows, sm_80 on), or else on a
 * tiled kernel of strict f32 FMA (head dims up to 128). Every other
 * supported case (other head dims up to 256, unaligned views) runs a SIMT
 * kernel that accumulates in f32 with f32 FMA.
 */
#ifndef KN_CUDA_ATTENTION_H
#define KN_CUDA_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "kn_dtype.h"
#include "kn_status.h"

typedef struct kn_attention_problem {
    kn_dtype dtype;       /* q, k, v and o: KN_F32, KN_BF16 or KN_F16 */
    int64_t batch, heads; /* the leading dims, flattened into two */
    int64_t tq, tk, d, dv; /* head dims d (q, k) and dv (v, o) */
    const void *q, *k, *v;
    void *o;
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3]; /* in elements: batch, head, row; the last dim is contiguous */
    const void *mask; /* NULL: none. KN_BOOL: keep where true; float (same dtype as q or f32): added to the scores */
    kn_dtype mask_dtype;
    int64_t mask_stride[4]; /* batch, head, query row, key col; 0 broadcasts */
    int causal;             /* key j is kept for query i iff j <= i (PyTorch's top-left is_causal) */
    double scale;           /* scores = q.k^T * scale */
    int allow_tf32;         /* kiln.config's TF32 permission (no kernel reads it: the split-f32 kernel keeps f32 accuracy in every mode) */
    int variant;            /* 0 = default pick; 1..n = the configurations kn_cuda_attention_variants lists;
                               KN_ATTENTION_STRICT = strict f32 FMA (the precision contract's yardstick) */
    int zero_nan;           /* store a NaN result as 0 (a fully masked row: 0, as the exporters' fill gives) */
} kn_attention_problem;

/* variant: the default's strict-f32 kernel, never the split-f32 one (the
 * op's KN_VARIANT_STRICT); for bf16 and f16, the default */
#define KN_ATTENTION_STRICT (-1)

/* The most configurations kn_cuda_attention_variants reports. */
#define KN_ATTENTION_MAX_VARIANTS 8

/* Enqueue the attention on the current GPU's stream (kn_cuda_stream()).
 * KN_ERR_UNSUPPORTED, naming what, for a problem no kernel takes (a dtype,
 * a head dim over 256, a misaligned pointer, an unknown variant), so the
 * caller can fall back to the unfused ops; KN_ERR_ARG for a malformed one
 * (a dim <= 0, a NULL operand). A query row whose every key is masked
 * gives NaN, as the unfused softmax does. */
kn_status kn_cuda_attention(const kn_attention_problem *p);

/* Whether p (f32) runs on a tiled f32 kernel by default (the split-f32
 * one, or the strict-f32 FMA one at shared-memory tiles): the fused path's
 * answer to f32 attention, where the SIMT kernel is not. */
bool kn_cuda_attention_f32_tiled(const kn_attention_problem *p);
/* Whether kiln's tensor-core kernel is the better default for this bf16 or
 * f16 problem than cuDNN's engines: short sequences (kn_cuda_attention.c
 * says where the bound comes from). */
bool kn_cuda_attention_short_tc(const kn_attention_problem *p);

/* How many configurations (variants 1..n) can run p, for an autotuner; 0
 * when none can (kn_cuda_attention says why). labels (NULL, or room for
 * KN_ATTENTION_MAX_VARIANTS) gets a static name for each, e.g.
 * "tc bm64 bn64". */
int kn_cuda_attention_variants(const kn_attention_problem *p, const char **labels);

/* ---- for t/cuda_templates_compile.c: the modules and the kernel names ---- */

/* The kinds of module of kn_attention.cu (and kn_attention_f32.cu): the
 * SIMT kernel (size: output chunks of 32 columns, 1..8), the tensor-core kernels (bf16/f16; size:
 * the padded head dim 16..128 in steps of 16), the tiled f32 kernel
 * (size: the padded head dim 32, 64 or 128) and the split-f32 kernel
 * (size: the padded head dim 32 or 64). */
enum { KN_ATT_MODULE_SIMT, KN_ATT_MODULE_TC, KN_ATT_MODULE_F32T, KN_ATT_MODULE_X3 };

/* one module: its kind, dtype and size (the arguments of
 * kn_cuda_attention_source) */
typedef struct kn_att_module {
    int kind;
    kn_dtype dt;
    int size;
} kn_att_module;

/* The most modules kn_cuda_attention_modules lists. */
#define KN_ATTENTION_MAX_MODULES 64

/* Every module kn_cuda_attention.c can build, into out (room for cap):
 * tensor-core ones, then SIMT, then tiled f32, then split-f32. Returns how
 * many. */
int kn_cuda_attention_modules(kn_att_module *out, int cap);
/* A kind's short name in module names: "tc", "simt", "f32t" or "x3". */
const char *kn_cuda_attention_module_tag(int kind);

/* The source of one module of kn_attention.cu (and, for the f32 kinds,
 * kn_attention_f32.cu after it), of kind KN_ATT_MODULE_* (see above) and
 * dtype dt. *src is malloc'd. */
kn_status kn_cuda_attention_source(int kind, kn_dtype dt, int size, char **src);
/* The kernel names such a module holds (up to KN_ATTENTION_MAX_VARIANTS; returns how many). */
int kn_cuda_attention_kernel_names(int kind, kn_dtype dt, int size, char names[][48]);

#endif
