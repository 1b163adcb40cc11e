/* kn_cuda_attention_op: the scaled_dot_product_attention op on the GPU.
 *
 * Maps one op call (q, k, v [, mask] of any rank >= 2, any views) onto the
 * fused kernel's problem (kn_cuda_attention.h: leading dims flattened into
 * batch x heads, element strides, the last dim contiguous). Whatever the
 * fused kernel declines (f64, a head dim over 256, leading dims that do not
 * flatten, a misaligned view) runs unfused here, through the same ops eager
 * code would run (matmul, scale, mask, softmax, matmul), so the op never
 * fails for want of a kernel and never gives another result than the
 * unfused chain would. The reason goes to stderr under KILN_LOGS=fusion (or
 * library), as the plan's fusion reasons do.
 *
 * bf16/f16 go to cuDNN's fused flash-attention engines first
 * (kn_cuda_dnn_attention.c: 1.2x faster than kiln's kernel at ViT's 197
 * tokens on the H200, 1.9x at 1024), kiln's kernel taking what cuDNN
 * does not, and short sequences, where it makes the faster model
 * (kn_cuda_attention_short_tc).
 *
 * Variants (max-autotune): 0 is the default pick (cuDNN where it takes
 * the call and kiln's kernel is not the short-sequence pick; for f32 up to
 * moderate sizes the unfused chain:
 * f32_runs_unfused), 1..n kiln's kernel's configurations, n + 1 cuDNN
 * where its engines may take the problem; past that is KN_ERR_RANGE, as
 * for the other library ops. KN_VARIANT_STRICT is the default with
 * strict f32 FMA in place of the split-f32 kernel: the precision
 * contract's yardstick (core/compiler/kn_plan_tune.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_attention_op.h"

#include "kn_cuda_attention.h"
#include "kn_cuda_context.h"
#include "kn_cuda_dnn_attention.h"
#include "kn_cuda_ops.h"
#include "kn_op.h"

static bool attention_log_on(void)
{
    return (kn_cuda_call_settings()->logs & KN_SETTINGS_LOG_ATTENTION) != 0;
}

/* Strides of t over the op's [lead..., rows, cols] frame of rank n
 * (t right-aligned into it; missing or size-1 dims broadcast with 0). */
static void frame_strides(const kn_tensor *t, int n, int64_t *st)
{
    int off = n - t->ndim;
    for (int i = 0; i < n; i++) {
        int j = i - off;
        st[i] = (j < 0 || t->shape[j] == 1) ? 0 : t->strides[j];
    }
}

/* Flatten the leading dims [0, nl) of a frame (sizes lead[], strides of
 * each operand in st[op][]) into two, batch and heads: heads is the last
 * leading dim merged with the ones before it while every operand's strides
 * allow, batch whatever is left (which must then merge too). */
static bool flatten_lead(int nl, const int64_t *lead, int nops, int64_t st[][KN_MAX_DIMS], int64_t *batch,
                         int64_t *heads, int64_t out_st[][2])
{
    *batch = 1;
    *heads = 1;
    for (int o = 0; o < nops; o++) out_st[o][0] = out_st[o][1] = 0;
    if (nl == 0) return true;
    /* merge dims from the right while dim i-1 steps over all of dim i */
    int split = nl - 1; /* heads = dims [split, nl) */
    while (split > 0) {
        bool ok = true;
        for (int o = 0; o < nops && ok; o++)
            ok = st[o][split - 1] == st[o][split] * lead[split] || lead[split - 1] == 1;
        if (!ok) break;
        split--;
    }
    for (int i = split; i < nl; i++) *heads *= lead[i];
    for (int o = 0; o < nops; o++) out_st[o][1] = st[o][nl - 1];
    /* the size-1 dims anywhere merge for free; take the innermost non-1 stride */
    for (int o = 0; o < nops; o++)
        for (int i = nl - 1; i >= split; i--)
            if (lead[i] != 1) {
                out_st[o][1] = st[o][i];
                break;
            }
    if (split == 0) return true;
    /* batch = dims [0, split): they must merge among themselves */
    for (int i = 0; i < split; i++) *batch *= lead[i];
    for (int i = split - 1; i > 0; i--)
        for (int o = 0; o < nops; o++)
            if (lead[i - 1] != 1 && lead[i] != 1 && st[o][i - 1] != st[o][i] * lead[i]) return false;
    for (int o = 0; o < nops; o++)
        for (int i = split - 1; i >= 0; i--)
            if (lead[i] != 1) {
                out_st[o][0] = st[o][i];
                break;
            }
    return true;
}

/* The fused kernel's problem for call c; KN_ERR_UNSUPPORTED (with a
 * message) when the call's layout does not fit it. */
static kn_status make_problem(const kn_opcall *c, kn_attention_problem *p)
{
    const kn_tensor *q = c->in[0], *k = c->in[1], *v = c->in[2], *m = c->n_in > 3 ? c->in[3] : NULL;
    kn_tensor *o = c->out[0];
    int n = q->ndim, nl = n - 2;
    memset(p, 0, sizeof *p);
    p->dtype = q->dtype;
    p->tq = q->shape[n - 2];
    p->tk = k->shape[n - 2];
    p->d = q->shape[n - 1];
    p->dv = v->shape[n - 1];
    const kn_tensor *ops[5] = {q, k, v, o, m};
    int nops = m ? 5 : 4;
    for (int i = 0; i < 4; i++)
        if (ops[i]->shape[n - 1] > 1 && ops[i]->strides[n - 1] != 1)
            return kn_error(KN_ERR_UNSUPPORTED, "attention: operand %d's last dim is strided", i + 1);
    int64_t st[5][KN_MAX_DIMS], flat[5][2];
    for (int i = 0; i < 4; i++) frame_strides(ops[i], n, st[i]);
    if (m) {
        if (m->ndim > n) return kn_error(KN_ERR_UNSUPPORTED, "attention: the mask has more dims than q");
        frame_strides(m, n, st[4]);
    }
    if (!flatten_lead(nl, q->shape, nops, st, &p->batch, &p->heads, flat))
        return kn_error(KN_ERR_UNSUPPORTED, "attention: the leading dims do not flatten into batch x heads");
    int64_t *dst[4] = {p->q_stride, p->k_stride, p->v_stride, p->o_stride};
    for (int i = 0; i < 4; i++) {
        dst[i][0] = flat[i][0];
        dst[i][1] = flat[i][1];
        dst[i][2] = st[i][n - 2];
    }
    p->q = kn_cuda_tensor_ptr(q);
    p->k = kn_cuda_tensor_ptr(k);
    p->v = kn_cuda_tensor_ptr(v);
    p->o = kn_cuda_tensor_ptr(o);
    if (m) {
        p->mask = kn_cuda_tensor_ptr(m);
        p->mask_dtype = m->dtype;
        p->mask_stride[0] = flat[4][0];
        p->mask_stride[1] = flat[4][1];
        p->mask_stride[2] = st[4][n - 2];
        p->mask_stride[3] = st[4][n - 1];
    }
    p->causal = c->a.causal;
    p->zero_nan = c->a.zero_nan;
    p->scale = c->a.scale;
    p->allow_tf32 = kn_cuda_allow_tf32();
    p->variant = c->variant == KN_VARIANT_STRICT ? KN_ATTENTION_STRICT : c->variant;
    return KN_OK;
}

/* ---- the unfused path --------------------------------------------------- */

static kn_status eager1(kn_opcall *oc, kn_tensor **out)
{
    *out = NULL;
    KN_TRY(kn_op_eager(oc, kn_tensor_device(oc->in[0])));
    *out = oc->out[0];
    return KN_OK;
}

/* softmax(q kᵀ scale (+ mask)) v through the ops eager code runs, each
 * result in the op's dtype, as the unfused chain computes it. */
static kn_status attention_unfused(const kn_opcall *c)
{
    const kn_tensor *q = c->in[0], *k = c->in[1], *v = c->in[2], *m = c->n_in > 3 ? c->in[3] : NULL;
    kn_tensor *o = c->out[0];
    int n = q->ndim;
    kn_tensor *kt = NULL, *s = NULL, *s2 = NULL, *sc = NULL, *keep = NULL, *drop = NULL, *pr = NULL,
              *y = NULL;
    kn_status st;
    kn_opcall oc;
    /* kᵀ: a view with the last two dims swapped */
    int64_t shp[KN_MAX_DIMS], str[KN_MAX_DIMS];
    for (int i = 0; i < n; i++) shp[i] = k->shape[i], str[i] = k->strides[i];
    shp[n - 2] = k->shape[n - 1], shp[n - 1] = k->shape[n - 2];
    str[n - 2] = k->strides[n - 1], str[n - 1] = k->strides[n - 2];
    if ((st = kn_tensor_view_of(k, n, shp, str, k->offset, &kt)) != KN_OK) goto out;
    kn_opcall_init(&oc, KN_OP_MATMUL);
    oc.n_in = 2, oc.in[0] = (kn_tensor *)q, oc.in[1] = kt;
    if ((st = eager1(&oc, &s)) != KN_OK) goto out;
    /* scale, as a 0-d constant of the scores' dtype */
    kn_opcall_init(&oc, KN_OP_FULL);
    oc.a.dtype = s->dtype, oc.a.value = c->a.scale, oc.a.nshape = 0;
    if ((st = kn_op_eager(&oc, kn_tensor_device(q))) != KN_OK) goto out;
    sc = oc.out[0];
    kn_opcall_init(&oc, KN_OP_MUL);
    oc.n_in = 2, oc.in[0] = s, oc.in[1] = sc;
    if ((st = eager1(&oc, &s2)) != KN_OK) goto out;
    kn_tensor_release(s);
    s = s2, s2 = NULL;
    /* the keep mask: causal (tril of ones) and/or the bool mask; or an additive mask */
    if (c->a.causal) {
        kn_opcall_init(&oc, KN_OP_FULL);
        oc.a.dtype = KN_BOOL, oc.a.value = 1, oc.a.nshape = 2;
        oc.a.shape[0] = s->shape[n - 2], oc.a.shape[1] = s->shape[n - 1];
        if ((st = kn_op_eager(&oc, kn_tensor_device(q))) != KN_OK) goto out;
        kn_tensor *ones = oc.out[0];
        kn_opcall_init(&oc, KN_OP_TRIL);
        oc.n_in = 1, oc.in[0] = ones, oc.a.diagonal = 0;
        st = eager1(&oc, &keep);
        kn_tensor_release(ones);
        if (st != KN_OK) goto out;
    }
    if (m && m->dtype == KN_BOOL) {
        if (keep) {
            kn_tensor *both = NULL;
            kn_opcall_init(&oc, KN_OP_MUL);
            oc.n_in = 2, oc.in[0] = keep, oc.in[1] = (kn_tensor *)m;
            if ((st = eager1(&oc, &both)) != KN_OK) goto out;
            kn_tensor_release(keep);
            keep = both;
        } else {
            keep = (kn_tensor *)m;
            kn_tensor_retain(keep);
        }
    } else if (m) {
        kn_opcall_init(&oc, KN_OP_ADD);
        oc.n_in = 2, oc.in[0] = s, oc.in[1] = (kn_tensor *)m;
        if ((st = eager1(&oc, &s2)) != KN_OK) goto out;
        kn_tensor_release(s);
        s = s2, s2 = NULL;
    }
    if (keep) {
        kn_opcall_init(&oc, KN_OP_LOGICAL_NOT);
        oc.n_in = 1, oc.in[0] = keep;
        if ((st = eager1(&oc, &drop)) != KN_OK) goto out;
        kn_opcall_init(&oc, KN_OP_MASKED_FILL);
        oc.n_in = 2, oc.in[0] = s, oc.in[1] = drop, oc.a.value = -INFINITY;
        if ((st = eager1(&oc, &s2)) != KN_OK) goto out;
        kn_tensor_release(s);
        s = s2, s2 = NULL;
    }
    kn_opcall_init(&oc, KN_OP_SOFTMAX);
    oc.n_in = 1, oc.in[0] = s, oc.a.dim = n - 1;
    if ((st = eager1(&oc, &pr)) != KN_OK) goto out;
    kn_opcall_init(&oc, KN_OP_MATMUL);
    oc.n_in = 2, oc.in[0] = pr, oc.in[1] = (kn_tensor *)v;
    if ((st = eager1(&oc, &y)) != KN_OK) goto out;
    if (c->a.zero_nan) { /* the exporter's NaN fill, folded into the op: NaN results become 0 */
        kn_tensor *isnan_y = NULL, *filled = NULL;
        kn_opcall_init(&oc, KN_OP_NE);
        oc.n_in = 2, oc.in[0] = y, oc.in[1] = y;
        if ((st = eager1(&oc, &isnan_y)) != KN_OK) goto out;
        kn_opcall_init(&oc, KN_OP_MASKED_FILL);
        oc.n_in = 2, oc.in[0] = y, oc.in[1] = isnan_y, oc.a.value = 0;
        st = eager1(&oc, &filled);
        kn_tensor_release(isnan_y);
        if (st != KN_OK) goto out;
        kn_tensor_release(y);
        y = filled;
    }
    /* into the caller's output, whatever its strides */
    kn_opcall_init(&oc, KN_OP_CONTIGUOUS);
    oc.n_in = 1, oc.in[0] = y, oc.n_out = 1, oc.out[0] = o;
    st = kn_cuda_ops_run(&oc);
out:
    kn_tensor_release(kt);
    kn_tensor_release(s);
    kn_tensor_release(s2);
    kn_tensor_release(sc);
    kn_tensor_release(keep);
    kn_tensor_release(drop);
    kn_tensor_release(pr);
    kn_tensor_release(y);
    return st;
}

/* f32 scores up to this size run unfused by default when the tiled f32
 * kernel cannot take the call (rows it cannot copy 16 bytes at a time,
 * head dims over 128): the SIMT kernel that remains for those is slow
 * (H200, 8 x 12 heads x 128 x 64: 61 us fused; ViT's 197 tokens: 174 us),
 * and two cuBLASLt GEMMs (strict f32 unless allow_tf32) around a softmax
 * beat it several times over. The tiled kernel, at shared-memory tiles
 * with f32 FMA, beats both. Longer sequences keep a fused kernel, where
 * the T x T scores would be large; max-autotune measures every variant. */
#define UNFUSED_F32_MAX_SCORE_BYTES ((int64_t)64 << 20)

static bool f32_runs_unfused(const kn_attention_problem *p)
{
    double bytes = (double)p->batch * (double)p->heads * (double)p->tq * (double)p->tk * 4.0;
    return p->dtype == KN_F32 && bytes <= (double)UNFUSED_F32_MAX_SCORE_BYTES && !kn_cuda_attention_f32_tiled(p);
}

/* KILN_ATTENTION_KERNEL=kiln or cudnn makes the default pick one library
 * for every call it can take, for measuring the two inside a model (the
 * variant tables time them one launch at a time, not inside a graph). */
static int forced_kernel(void) /* 0 none, 1 kiln's, 2 cuDNN */
{
    static int forced = -1;
    if (forced < 0) {
        const char *v = getenv("KILN_ATTENTION_KERNEL");
        forced = !v ? 0 : strcmp(v, "kiln") == 0 ? 1 : strcmp(v, "cudnn") == 0 ? 2 : 0;
    }
    return forced;
}

/* The default pick for a call cuDNN can take. */
static bool default_is_cudnn(const kn_attention_problem *p)
{
    if (!kn_cuda_dnn_attention_covers(p)) return false;
    int forced = forced_kernel();
    return forced ? forced == 2 : !kn_cuda_attention_short_tc(p);
}

/* Float q, k, v: the fused kernel where it takes the call, the unfused
 * chain (float matmul, softmax, ...) for everything else. */
bool kn_cuda_attention_op_supports(const kn_opcall *c)
{
    if (!c || c->op != KN_OP_ATTENTION) return false;
    for (int i = 0; i < c->n_in && i < 3; i++)
        if (c->in[i] && !kn_dtype_is_float(c->in[i]->dtype)) return false;
    return true;
}

kn_status kn_cuda_attention_op(const kn_opcall *c)
{
    if (c->n_in < 3 || c->n_in > 4 || c->n_out < 1 || !c->out[0])
        return kn_error(KN_ERR_ARG, "scaled_dot_product_attention: expects q, k, v [, mask] and an output");
    for (int i = 0; i < c->n_in; i++)
        if (!kn_cuda_on_current(c->in[i]))
            return kn_error(KN_ERR_DEVICE, "scaled_dot_product_attention: the CUDA backend got input %d on %s",
                            i + 1, kn_device_name(kn_tensor_device(c->in[i])));
    if (kn_tensor_numel(c->out[0]) == 0) return KN_OK;
    kn_attention_problem p;
    kn_status st = make_problem(c, &p);
    if (st == KN_OK && c->variant > 0) {
        int nv = kn_cuda_attention_variants(&p, NULL);
        bool dnn = kn_cuda_dnn_attention_covers(&p);
        if (c->variant == nv + 1 && dnn) return kn_cuda_dnn_attention(&p);
        if (c->variant > nv)
            return kn_error(KN_ERR_RANGE, "scaled_dot_product_attention: no variant %d (%d configurations)",
                            c->variant, nv + dnn);
    }
    if (st == KN_OK && c->variant < 0 && c->variant != KN_VARIANT_STRICT)
        return kn_error(KN_ERR_RANGE, "scaled_dot_product_attention: no variant %d", c->variant);
    bool pick = c->variant <= 0; /* the default, or its strict-f32 form */
    if (st == KN_OK && pick && default_is_cudnn(&p)) {
        st = kn_cuda_dnn_attention(&p);
        if (st != KN_ERR_UNSUPPORTED) return st; /* done, or failed running */
        if (attention_log_on()) fprintf(stderr, "kiln: scaled_dot_product_attention: %s; kiln's kernel runs it\n", kn_last_error());
        st = KN_OK;
    }
    if (st == KN_OK && pick && f32_runs_unfused(&p)) {
        kn_cuda_variant_label("unfused: strict-f32 GEMMs, softmax");
        return attention_unfused(c);
    }
    if (st == KN_OK) st = kn_cuda_attention(&p); /* which labels what it ran */
    if (st != KN_ERR_UNSUPPORTED) return st;
    if (c->variant > 0) return st; /* a variant is that kernel or nothing */
    if (attention_log_on())
        fprintf(stderr, "kiln: scaled_dot_product_attention runs unfused on the GPU: %s\n", kn_last_error());
    kn_cuda_variant_label("unfused: matmul, softmax, matmul");
    return attention_unfused(c);
}
