/* kn_pass_attention: the attention pass. It finds the chain users write for
 * attention,
 *
 *   matmul(q, k viewed with its last two dims swapped)
 *     -> [* c or / c, c a positive constant]   (before or after the mask)
 *     -> [masked_fill(x, M, -inf) or x + m]    (m a float mask)
 *     -> softmax over the last dim
 *     -> matmul(probs, v)
 *
 * (or, as PyTorch's dynamo exporter writes scaled_dot_product_attention:
 * q and k^T each times a constant before the matmul, k^T as reshapes
 * around a permute, an added float mask, and masked_fill(probs, probs ~=
 * probs, 0) after the softmax, which becomes the same fill of the fused
 * result)
 *
 * where every intermediate has no other user, and replaces it with one
 * scaled_dot_product_attention node, which the backends run as one library
 * kernel (flash attention on the GPU: the T x T scores never reach memory).
 * A mask that is the causal one, logical_not(tril(ones bool {T, T})) or
 * triu(ones bool {T, T}, 1) with Tq == Tk (or, added, zeros {T, T} filled
 * with -inf where that mask is true), becomes the causal attribute and
 * its subgraph dies (the final dce removes it); any other bool M becomes the
 * mask input logical_not(M) (the op keeps where true, masked_fill fills
 * where true). A chain that starts like attention but breaks a condition is
 * left alone, and the reason, naming the ops and their lines, goes to the
 * pass notes (shown with KILN_LOGS=fusion).
 */
#include "kn_pass_attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The full bool {T, T} of ones a causal mask starts from. */
static bool is_ones_square(const kn_node *n, int64_t t)
{
    return n->op == KN_OP_FULL && n->out[0].dtype == KN_BOOL && n->a.value != 0 && n->out[0].ndim == 2 &&
           n->out[0].shape[0] == t && n->out[0].shape[1] == t;
}

/* Whether the masked_fill mask M (filled where true) is the causal one:
 * logical_not(tril(ones, 0)) or triu(ones, 1), over {T, T}. */
static bool is_causal_fill_mask(const kn_graph *g, int m, int64_t t)
{
    const kn_node *n = &g->nodes[m];
    if (n->out[0].dtype != KN_BOOL || n->out[0].ndim != 2 || n->out[0].shape[0] != t || n->out[0].shape[1] != t)
        return false;
    if (n->op == KN_OP_TRIU && n->a.diagonal == 1) return is_ones_square(&g->nodes[n->in_node[0]], t);
    if (n->op != KN_OP_LOGICAL_NOT) return false;
    const kn_node *tr = &g->nodes[n->in_node[0]];
    return tr->op == KN_OP_TRIL && tr->a.diagonal == 0 && tr->out[0].dtype == KN_BOOL &&
           is_ones_square(&g->nodes[tr->in_node[0]], t);
}

/* Whether the float mask added to the scores (node m) is the causal one:
 * masked_fill(full 0 {T, T}, causal fill mask, -inf), as PyTorch's
 * generate_square_subsequent_mask makes it and kiln's ONNX import rebuilds
 * it from its data. Adding it is masked_fill(scores, M, -inf). */
static bool is_causal_add_mask(const kn_graph *g, int m, int64_t t)
{
    const kn_node *n = &g->nodes[m];
    if (n->op != KN_OP_MASKED_FILL || !(isinf(n->a.value) && n->a.value < 0) || n->out[0].ndim != 2 ||
        n->out[0].shape[0] != t || n->out[0].shape[1] != t)
        return false;
    const kn_node *z = &g->nodes[n->in_node[0]];
    return z->op == KN_OP_FULL && z->a.value == 0 && kn_dtype_is_float(z->out[0].dtype) &&
           is_causal_fill_mask(g, n->in_node[1], t);
}

/* Whether an added mask value hides its key as -inf does: below -1e30
 * (f32's and bf16's lowest, as Hugging Face's models and PyTorch's
 * exporter write them), or f16's lowest (-65504) in an f16 mask. A score
 * plus such a value has an exponential of 0 beside a row's unmasked
 * diagonal, unless the scores themselves reach tens of thousands. */
static bool masks_out(double v, kn_dtype dt)
{
    return v < -1e30 || (dt == KN_F16 && v <= -65504.0);
}

/* The most elements of a constant mask read to see whether it is causal. */
#define KN_FIXED_MASK_MAX_ELEMS ((int64_t)1 << 24)

/* Whether the float mask added to the scores (node m) is a fixed value
 * that is the causal one: a T x T slice (over any leading dims, each the
 * same) of 0 on and below the diagonal and -inf or a number below -1e30
 * (the dtype's lowest) above it; for a bool mask (the op's: keep where
 * true), true on and below the diagonal and false above. GPT-2 exported without an attention
 * mask carries it so, a B x 1 x T x T initializer the exporter folded.
 * Adding it gives what the causal attribute gives: a score pushed below
 * -1e30 has exp 0 beside the row's unmasked diagonal. The plan builds
 * again if the value is written (kn_pass_read_fixed_value). */
static bool is_causal_fixed_mask(kn_pass_ctx *x, int m, int64_t t)
{
    const kn_node *n = &x->g->nodes[m];
    const kn_meta *mm = &n->out[0];
    if (n->op != KN_NODE_INPUT || !(kn_dtype_is_float(mm->dtype) || mm->dtype == KN_BOOL) || mm->ndim < 2 || t < 1 ||
        mm->shape[mm->ndim - 1] != t || mm->shape[mm->ndim - 2] != t)
        return false;
    int64_t numel = kn_numel_of(mm->ndim, mm->shape);
    if (numel > KN_FIXED_MASK_MAX_ELEMS || !kn_pass_fixed_value(x->g, m, 0)) return false;
    double *v = NULL;
    if (!kn_pass_read_fixed_value(x, m, &v)) return false;
    bool causal = true, keep_mask = mm->dtype == KN_BOOL;
    int64_t e = 0;
    for (; e < numel && causal; e++) {
        int64_t i = (e / t) % t, j = e % t;
        causal = keep_mask ? (v[e] != 0) == (j <= i) : j <= i ? v[e] == 0 : masks_out(v[e], mm->dtype);
    }
    if (!causal) {
        char who[200];
        e--;
        kn_pass_note(x, "attention at %s: its constant mask is not the causal one (query %lld, key %lld holds %g; "
                        "the causal one holds %s), so it stays a mask",
                     kn_pass_who(x->g, m, who, sizeof who), (long long)((e / t) % t + 1), (long long)(e % t + 1), v[e],
                     keep_mask ? "true on and below the diagonal, false above"
                               : "0 on and below the diagonal, below -1e30 (f16: -65504) above");
    }
    free(v);
    return causal;
}

/* Whether value kt is k viewed with its last two dims swapped: a permute
 * (possibly several merged into one, as simplify does with
 * reshape(...):transpose(2, 3):transpose(-2, -1)) or a bound input whose
 * strides say it is a transposed view (its second-to-last dim is the
 * contiguous one). *src gets the value to view and perm the permutation
 * that gives k from it (*identity: k is *src itself). */
static bool transposed_view(const kn_graph *g, int kt, int *src, int *perm, bool *identity)
{
    const kn_node *n = &g->nodes[kt];
    int nd = n->out[0].ndim;
    if (nd < 2) return false;
    if (n->op == KN_OP_PERMUTE && n->a.ndims == nd) {
        for (int d = 0; d < nd; d++) perm[d] = n->a.dims[d];
        *src = KN_REF(n->in_node[0], n->in_out[0]);
    } else if (n->op == KN_NODE_INPUT && g->inputs[n->input].strides[nd - 2] == 1 &&
               g->inputs[n->input].strides[nd - 1] != 1 && n->out[0].shape[nd - 1] > 1) {
        for (int d = 0; d < nd; d++) perm[d] = d;
        *src = KN_REF(kt, 0);
    } else {
        return false;
    }
    int t = perm[nd - 2]; /* k = kt with its last two dims swapped */
    perm[nd - 2] = perm[nd - 1];
    perm[nd - 1] = t;
    *identity = true;
    for (int d = 0; d < nd; d++) *identity = *identity && perm[d] == d;
    return true;
}

/* Whether value kt is reshape(permute(r, p)) whose reshape changes only
 * the leading dims (the last two are the permute's): the exporters' k^T,
 * reshape {B, H, T, D} -> {B*H, T, D}, transpose(-2, -1), reshape back
 * (BERT's and GPT-2's, PyTorch's dynamo export of
 * scaled_dot_product_attention), or a sequence-first {T, B*H, D} permuted
 * straight to {B*H, D, T} (nn.MultiheadAttention's, ViT's). Then k is
 * reshape(permute(r, p with its last two swapped), kt's shape with its
 * last two swapped): *r_ref, perm (the swapped p, r's rank) and kshape get
 * them. */
static bool reshaped_transposed_view(const kn_graph *g, int kt, int *r_ref, int *perm, int *pnd, int64_t *kshape)
{
    const kn_node *n = &g->nodes[kt];
    int nd = n->out[0].ndim;
    if (n->op != KN_OP_RESHAPE || nd < 2) return false;
    const kn_node *pm = &g->nodes[n->in_node[0]];
    const kn_meta *pmo = &pm->out[n->in_out[0]];
    int pn = pmo->ndim;
    if (pm->op != KN_OP_PERMUTE || pm->a.ndims != pn || pn < 2 ||
        pmo->shape[pn - 2] != n->out[0].shape[nd - 2] || pmo->shape[pn - 1] != n->out[0].shape[nd - 1])
        return false;
    /* the reshape keeps the last two dims: their element order is the
     * permute's, and only the leading dims merge or split */
    for (int d = 0; d < pn; d++) perm[d] = pm->a.dims[d];
    int t = perm[pn - 2];
    perm[pn - 2] = perm[pn - 1];
    perm[pn - 1] = t;
    *pnd = pn;
    *r_ref = KN_REF(pm->in_node[0], pm->in_out[0]);
    for (int d = 0; d < nd; d++) kshape[d] = n->out[0].shape[d];
    kshape[nd - 2] = n->out[0].shape[nd - 1];
    kshape[nd - 1] = n->out[0].shape[nd - 2];
    return true;
}

typedef struct attn_match {
    int mm1, scale_node, mask_node, softmax, mm2; /* nodes of the chain (-1: absent) */
    int q_scale, k_scale;    /* multiplications of q and of k^T by a constant before the matmul, or -1 */
    int nan_fill, nan_test;  /* masked_fill(probs, probs ~= probs, 0) after the softmax and its test, or -1 */
    int scale_before_mask;                        /* the scale comes first, reading the matmul */
    double scale;
    int mask_ref;     /* masked_fill's M or the added m (a ref), or -1 */
    bool mask_is_bool; /* masked_fill (fill where true) rather than an added float mask */
    int q, k, v;      /* refs (k: -1 until its view is made, see k_src) */
    int k_src, k_perm[KN_MAX_DIMS]; /* k = permute(k_src, k_perm), or k_src itself */
    bool k_identity;
    int k_perm_nd;                  /* > 0: k = reshape(permute(k_src, k_perm of this rank), k_shape) */
    int64_t k_shape[KN_MAX_DIMS];
} attn_match;

/* Whether node i multiplies (or divides) one value by a constant number
 * and has no other user: *other gets that value and *c the factor. */
static bool const_factor(const kn_pass_ctx *x, int i, int *other, double *c)
{
    const kn_graph *g = x->g;
    const kn_node *n = &g->nodes[i];
    if ((n->op != KN_OP_MUL && n->op != KN_OP_DIV) || !kn_pass_private_value(x, i)) return false;
    int ci = g->nodes[n->in_node[1]].op == KN_NODE_CONST ? 1
             : n->op == KN_OP_MUL && g->nodes[n->in_node[0]].op == KN_NODE_CONST ? 0 : -1;
    if (ci < 0) return false;
    double v = kn_pass_const_value(&g->nodes[n->in_node[ci]]);
    *c = n->op == KN_OP_MUL ? v : 1.0 / v;
    *other = KN_REF(n->in_node[1 - ci], n->in_out[1 - ci]);
    return *c > 0 && isfinite(*c);
}

static bool is_scores_op(int op)
{
    return op == KN_OP_MATMUL || op == KN_OP_MUL || op == KN_OP_DIV || op == KN_OP_MASKED_FILL || op == KN_OP_ADD;
}

/* Walk from the softmax's input up to the first matmul through at most one
 * scale and one mask. False with a note when the chain breaks a condition. */
static bool match_chain(kn_pass_ctx *x, int sm, attn_match *m)
{
    const kn_graph *g = x->g;
    char a[200], b[200];
    const char *head = kn_pass_who(g, sm, b, sizeof b);
    char head_text[200];
    snprintf(head_text, sizeof head_text, "%s", head);
    int cur = g->nodes[sm].in_node[0];
    for (int step = 0; step < 3; step++) {
        const kn_node *n = &g->nodes[cur];
        if (n->op == KN_OP_MATMUL) break;
        if (!is_scores_op(n->op)) {
            kn_pass_note(x, "attention not matched at %s: its scores come from %s, not matmul(q, k^T) with an optional scale "
                    "and mask", head_text, kn_pass_who(g, cur, a, sizeof a));
            return false;
        }
        if (!kn_pass_private_value(x, cur)) {
            kn_pass_note(x, "attention not matched at %s: %s is used elsewhere too (the fused kernel never makes it)",
                 head_text, kn_pass_who(g, cur, a, sizeof a));
            return false;
        }
        if (n->op == KN_OP_MUL || n->op == KN_OP_DIV) {
            int ci = -1, xi = 0;
            if (g->nodes[n->in_node[1]].op == KN_NODE_CONST) ci = 1, xi = 0;
            else if (n->op == KN_OP_MUL && g->nodes[n->in_node[0]].op == KN_NODE_CONST) ci = 0, xi = 1;
            if (ci < 0 || m->scale_node >= 0) {
                kn_pass_note(x, "attention not matched at %s: the scale %s is not one multiplication or division by a "
                        "constant number", head_text, kn_pass_who(g, cur, a, sizeof a));
                return false;
            }
            double c = kn_pass_const_value(&g->nodes[n->in_node[ci]]);
            double s = n->op == KN_OP_MUL ? c : 1.0 / c;
            if (!(s > 0) || !isfinite(s)) {
                kn_pass_note(x, "attention not matched at %s: the scale %s is %g, not a positive finite number", head_text,
                     kn_pass_who(g, cur, a, sizeof a), s);
                return false;
            }
            m->scale_node = cur;
            m->scale = s;
            m->scale_before_mask = m->mask_node < 0 ? 0 : 1; /* walking up: a mask seen already comes after */
            cur = n->in_node[xi];
            continue;
        }
        if (m->mask_node >= 0) {
            kn_pass_note(x, "attention not matched at %s: a second mask %s", head_text, kn_pass_who(g, cur, a, sizeof a));
            return false;
        }
        if (n->op == KN_OP_MASKED_FILL) {
            if (!(isinf(n->a.value) && n->a.value < 0)) {
                kn_pass_note(x, "attention not matched at %s: %s fills %g, not -inf", head_text, kn_pass_who(g, cur, a, sizeof a),
                     n->a.value);
                return false;
            }
            m->mask_node = cur;
            m->mask_is_bool = true;
            m->mask_ref = KN_REF(n->in_node[1], n->in_out[1]);
            cur = n->in_node[0];
            continue;
        }
        /* x + m: the scores are the operand that comes from the chain and has the sum's shape */
        int si = -1;
        for (int k = 0; k < 2 && si < 0; k++) {
            const kn_node *o = &g->nodes[n->in_node[k]];
            if (is_scores_op(o->op) && o->out[0].ndim == n->out[0].ndim &&
                !memcmp(o->out[0].shape, n->out[0].shape, sizeof(int64_t) * (size_t)n->out[0].ndim))
                si = k;
        }
        if (si < 0 || !kn_dtype_is_float(g->nodes[n->in_node[1 - si]].out[0].dtype)) {
            kn_pass_note(x, "attention not matched at %s: %s is not scores + a float mask", head_text,
                 kn_pass_who(g, cur, a, sizeof a));
            return false;
        }
        m->mask_node = cur;
        m->mask_is_bool = false;
        m->mask_ref = KN_REF(n->in_node[1 - si], n->in_out[1 - si]);
        cur = n->in_node[si];
    }
    const kn_node *mm = &g->nodes[cur];
    if (mm->op != KN_OP_MATMUL) {
        kn_pass_note(x, "attention not matched at %s: its scores come from %s, not matmul(q, k^T) with one scale and one "
                "mask", head_text, kn_pass_who(g, cur, a, sizeof a));
        return false;
    }
    if (!kn_pass_private_value(x, cur)) {
        kn_pass_note(x, "attention not matched at %s: the scores %s are used elsewhere too", head_text,
             kn_pass_who(g, cur, a, sizeof a));
        return false;
    }
    m->mm1 = cur;
    m->q = KN_REF(mm->in_node[0], mm->in_out[0]);
    /* the scale split between q and k^T (each times d^-1/4: PyTorch's
     * export of scaled_dot_product_attention) joins the chain's */
    int kt = mm->in_node[1], q_src, kt_src;
    double cq, ck;
    if (const_factor(x, mm->in_node[0], &q_src, &cq) && const_factor(x, kt, &kt_src, &ck) &&
        KN_REF_OUT(kt_src) == 0) {
        m->q_scale = mm->in_node[0];
        m->k_scale = kt;
        m->q = q_src;
        m->scale *= cq * ck;
        kt = KN_REF_NODE(kt_src);
    }
    m->k_perm_nd = 0;
    if (!transposed_view(g, kt, &m->k_src, m->k_perm, &m->k_identity) &&
        !reshaped_transposed_view(g, kt, &m->k_src, m->k_perm, &m->k_perm_nd, m->k_shape)) {
        kn_pass_note(x, "attention not matched at %s: the second operand of %s is %s, not k viewed with its last two dims "
                "swapped", head_text, kn_pass_who(g, cur, a, sizeof a), kn_pass_who(g, kt, b, sizeof b));
        return false;
    }
    return true;
}

/* "matmul f.lua:27, mul :27, ...": each op once with its line, the file
 * named on the first only when all share it. */
static void covers_text(const kn_graph *g, const attn_match *m, bool causal, char *buf, size_t size)
{
    int order[9], n = 0;
    if (m->q_scale >= 0) order[n++] = m->q_scale;
    if (m->k_scale >= 0) order[n++] = m->k_scale;
    order[n++] = m->mm1;
    if (m->scale_node >= 0 && m->scale_before_mask) order[n++] = m->scale_node;
    if (m->mask_node >= 0) order[n++] = m->mask_node;
    if (m->scale_node >= 0 && !m->scale_before_mask) order[n++] = m->scale_node;
    order[n++] = m->softmax;
    if (m->nan_fill >= 0) order[n++] = m->nan_fill;
    order[n++] = m->mm2;
    kn_pass_covers_text(g, order, n, causal ? " (causal mask folded)" : NULL, buf, size);
}

/* The live nodes that read node i, up to `cap` of them (more: cap + 1). */
static int readers(const kn_pass_ctx *x, int i, int *out, int cap)
{
    const kn_graph *g = x->g;
    int n = 0;
    for (int j = i + 1; j < g->n_nodes && n <= cap; j++) {
        if (x->dead[j]) continue;
        for (int k = 0; k < g->nodes[j].n_in; k++)
            if (g->nodes[j].in_node[k] == i) {
                if (n < cap) out[n] = j;
                n++;
                break;
            }
    }
    return n;
}

/* Whether softmax sm is read only by masked_fill(sm, ne(sm, sm), 0) (the
 * IsNaN and Where the dynamo exporter writes after the softmax of
 * scaled_dot_product_attention, so that a row whose every key is masked
 * gives zeros, not NaN), itself read once: *fill and *test get its nodes. */
static bool nan_fill_after(const kn_pass_ctx *x, int sm, int *fill, int *test)
{
    const kn_graph *g = x->g;
    int r[3];
    if (readers(x, sm, r, 2) != 2) return false;
    for (int o = 0; o < 2; o++) {
        const kn_node *f = &g->nodes[r[o]], *t = &g->nodes[r[1 - o]];
        if (f->op == KN_OP_MASKED_FILL && f->a.value == 0 && f->in_node[0] == sm && f->in_node[1] == r[1 - o] &&
            t->op == KN_OP_NE && t->in_node[0] == sm && t->in_node[1] == sm && kn_pass_private_value(x, r[1 - o]) &&
            !kn_pass_is_output(x, sm)) {
            *fill = r[o];
            *test = r[1 - o];
            return true;
        }
    }
    return false;
}

/* The matmul(probs, v) that reads softmax sm (or the NaN fill after it,
 * *fill and *test, else -1), in *mm2_out, when sm may end an attention
 * chain; false when it may not (noted where sm looked like one). */
static bool softmax_reader(kn_pass_ctx *x, int sm, int *mm2_out, int *fill, int *test)
{
    kn_graph *g = x->g;
    char a[200];
    const kn_node *s = &g->nodes[sm];
    *fill = *test = -1;
    int probs = nan_fill_after(x, sm, fill, test) ? *fill : sm;
    /* the probabilities' one reader: matmul(probs, v) */
    int mm2 = -1;
    for (int i = probs + 1; i < g->n_nodes && mm2 < 0; i++) {
        if (x->dead[i]) continue;
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in_node[k] == probs) mm2 = i;
    }
    bool reader_is_pv = mm2 >= 0 && g->nodes[mm2].op == KN_OP_MATMUL && g->nodes[mm2].in_node[0] == probs;
    int in_op = g->nodes[s->in_node[0]].op;
    bool from_scores = in_op == KN_OP_MATMUL || in_op == KN_OP_MASKED_FILL;
    if (!reader_is_pv && !from_scores) return false; /* an ordinary softmax: nothing to say */
    if (s->a.dim != s->out[0].ndim - 1) {
        kn_pass_note(x, "attention not matched at %s: the softmax is over dim %d, not the last (%d)", kn_pass_who(g, sm, a, sizeof a),
             s->a.dim + 1, s->out[0].ndim);
        return false;
    }
    if (!reader_is_pv) {
        kn_pass_note(x, "attention not matched at %s: its result is not read by matmul(probs, v)%s", kn_pass_who(g, sm, a, sizeof a),
             mm2 >= 0 ? "" : " (nothing reads it)");
        return false;
    }
    if (!kn_pass_private_value(x, probs)) {
        kn_pass_note(x, "attention not matched at %s: the probabilities are used elsewhere too", kn_pass_who(g, sm, a, sizeof a));
        return false;
    }
    *mm2_out = mm2;
    return true;
}

/* The mask input of the attention node in *mask_in_out (-1: none, or a
 * causal mask, which becomes the attribute): for a bool M the op keeps
 * where logical_not(M) holds; a float mask added before the scale is
 * scaled too. A node either needs is appended before `before`; false
 * (noted) when it cannot be. */
static bool mask_input(kn_pass_ctx *x, int sm, const attn_match *m, bool causal, int before, int *mask_in_out)
{
    kn_graph *g = x->g;
    char a[200], b[200];
    int mask_in = -1;
    kn_status st;
    if (m->mask_ref >= 0 && !causal) {
        if (m->mask_is_bool) {
            /* masked_fill fills where M is true; the op keeps where its mask is true */
            const kn_node *mn = &g->nodes[KN_REF_NODE(m->mask_ref)];
            if (mn->op == KN_OP_LOGICAL_NOT && g->nodes[mn->in_node[0]].out[mn->in_out[0]].dtype == KN_BOOL) {
                mask_in = KN_REF(mn->in_node[0], mn->in_out[0]);
            } else {
                int idx;
                st = kn_pass_append_node(x, KN_OP_LOGICAL_NOT, &m->mask_ref, 1, NULL, before, g->nodes[m->mask_node].where, &idx);
                if (st != KN_OK) {
                    kn_pass_note(x, "attention not matched at %s: the mask of %s: %s", kn_pass_who(g, sm, a, sizeof a),
                         kn_pass_who(g, m->mask_node, b, sizeof b), kn_last_error());
                    return false;
                }
                mask_in = KN_REF(idx, 0);
            }
        } else if (m->scale_node >= 0 && m->scale_before_mask == 0) {
            /* (s + m) * c = s * c + m * c: the op adds its mask after the scale */
            const kn_node *sc = &g->nodes[m->scale_node];
            int ci = g->nodes[sc->in_node[1]].op == KN_NODE_CONST ? 1 : 0;
            int refs[2] = {m->mask_ref, KN_REF(sc->in_node[ci], sc->in_out[ci])};
            int idx;
            st = kn_pass_append_node(x, sc->op, refs, 2, &sc->a, before, sc->where, &idx);
            if (st != KN_OK) {
                kn_pass_note(x, "attention not matched at %s: scaling the mask: %s", kn_pass_who(g, sm, a, sizeof a), kn_last_error());
                return false;
            }
            mask_in = KN_REF(idx, 0);
        } else {
            mask_in = m->mask_ref;
        }
    }
    *mask_in_out = mask_in;
    return true;
}

/* k as the attention node reads it (m->k): the source of the view that
 * swapped its last two dims, permuted back by a node appended before
 * `before` unless the view was the identity; false (noted) when it cannot
 * be. */
static bool k_input(kn_pass_ctx *x, int sm, attn_match *m, int before)
{
    kn_graph *g = x->g;
    char a[200];
    kn_status st;
    m->k = m->k_src;
    if (m->k_perm_nd > 0) { /* reshape(permute(r, p')): the exporters' k before its transpose */
        bool same_order = true; /* p' keeps r's order: k is r reshaped */
        for (int d = 0; d < m->k_perm_nd; d++) same_order = same_order && m->k_perm[d] == d;
        int nd = g->nodes[m->mm1].out[0].ndim;
        if (same_order) {
            /* BERT's and GPT-2's: r = reshape(k {B, H, T, D}) to {B*H, T, D},
             * so k is r's source itself, a view, or that source reshaped */
            int src = m->k_src;
            const kn_node *rn = &g->nodes[KN_REF_NODE(src)];
            if (rn->op == KN_OP_RESHAPE) src = KN_REF(rn->in_node[0], rn->in_out[0]);
            const kn_meta *sm_meta = &g->nodes[KN_REF_NODE(src)].out[KN_REF_OUT(src)];
            if (sm_meta->ndim == nd && !memcmp(sm_meta->shape, m->k_shape, sizeof(int64_t) * (size_t)nd)) {
                m->k = src;
                return true;
            }
        }
        kn_opcall init;
        kn_opcall_init(&init, KN_OP_PERMUTE);
        kn_attrs pa = init.a;
        pa.ndims = m->k_perm_nd;
        for (int d = 0; d < m->k_perm_nd; d++) pa.dims[d] = m->k_perm[d];
        char where[KN_WHERE_MAX]; /* copied: appending nodes may move the node array */
        memcpy(where, g->nodes[m->k_scale >= 0 ? m->k_scale : g->nodes[m->mm1].in_node[1]].where, sizeof where);
        int pidx, ridx = -1;
        st = kn_pass_append_node(x, KN_OP_PERMUTE, &m->k_src, 1, &pa, before, where, &pidx);
        if (st == KN_OK) {
            g = x->g;
            kn_opcall_init(&init, KN_OP_RESHAPE);
            kn_attrs ra = init.a;
            ra.nshape = nd;
            for (int d = 0; d < nd; d++) ra.shape[d] = m->k_shape[d];
            int pref = KN_REF(pidx, 0);
            st = kn_pass_append_node(x, KN_OP_RESHAPE, &pref, 1, &ra, before, where, &ridx);
        }
        if (st != KN_OK) {
            kn_pass_note(x, "attention not matched at %s: viewing k: %s", kn_pass_who(x->g, sm, a, sizeof a),
                         kn_last_error());
            return false;
        }
        m->k = KN_REF(ridx, 0);
        return true;
    }
    if (!m->k_identity) { /* a view: no data moves */
        kn_attrs pa;
        kn_opcall pinit;
        kn_opcall_init(&pinit, KN_OP_PERMUTE);
        pa = pinit.a;
        int nd = g->nodes[m->mm1].out[0].ndim;
        pa.ndims = nd;
        for (int d = 0; d < nd; d++) pa.dims[d] = m->k_perm[d];
        int idx;
        st = kn_pass_append_node(x, KN_OP_PERMUTE, &m->k_src, 1, &pa, before, g->nodes[g->nodes[m->mm1].in_node[1]].where, &idx);
        if (st != KN_OK) {
            kn_pass_note(x, "attention not matched at %s: viewing k: %s", kn_pass_who(g, sm, a, sizeof a), kn_last_error());
            return false;
        }
        m->k = KN_REF(idx, 0);
    }
    return true;
}

/* An operand of the attention node as nn.MultiheadAttention's export
 * writes it (ViT): X {.., T, B, E} (sequence-first, leading 1s) reshaped
 * to {T, B*H, D}, permuted to {B*H, T, D}, reshaped to {B, H, T, D}. The
 * first reshape merges B with the heads split out of E, which strides
 * cannot express, so the plan copies there (three copies a layer, 2 us
 * each on the H200 at ViT-B/16's size). The same elements are
 * permute(reshape(X, {T, B, H, D}), {1, 2, 0, 3}): a split of E, a view.
 * Returns that view's ref (nodes appended before `before`), or `ref`
 * itself when the operand is not of that form. */
static int heads_view(kn_pass_ctx *x, int ref, int before, const char *where)
{
    kn_graph *g = x->g;
    const kn_node *r2 = &g->nodes[KN_REF_NODE(ref)];
    if (r2->op != KN_OP_RESHAPE || KN_REF_OUT(ref) != 0 || r2->out[0].ndim != 4) return ref;
    const kn_node *pm = &g->nodes[r2->in_node[0]];
    if (pm->op != KN_OP_PERMUTE || pm->out[0].ndim != 3 || pm->a.dims[0] != 1 || pm->a.dims[1] != 0 ||
        pm->a.dims[2] != 2)
        return ref;
    const kn_node *r1 = &g->nodes[pm->in_node[0]];
    if (r1->op != KN_OP_RESHAPE || pm->in_out[0] != 0) return ref;
    const int64_t *o = r2->out[0].shape; /* {B, H, T, D} */
    int64_t B = o[0], H = o[1], T = o[2], D = o[3];
    const kn_meta *xm = &g->nodes[r1->in_node[0]].out[r1->in_out[0]];
    int nd = xm->ndim;
    if (nd < 3 || xm->shape[nd - 3] != T || xm->shape[nd - 2] != B || xm->shape[nd - 1] != H * D) return ref;
    for (int d = 0; d < nd - 3; d++)
        if (xm->shape[d] != 1) return ref;
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_RESHAPE);
    kn_attrs ra = init.a;
    ra.nshape = 4;
    ra.shape[0] = T, ra.shape[1] = B, ra.shape[2] = H, ra.shape[3] = D;
    int src = KN_REF(r1->in_node[0], r1->in_out[0]), split, perm;
    if (kn_pass_append_node(x, KN_OP_RESHAPE, &src, 1, &ra, before, where, &split) != KN_OK) return ref;
    kn_opcall_init(&init, KN_OP_PERMUTE);
    kn_attrs pa = init.a;
    pa.ndims = 4;
    pa.dims[0] = 1, pa.dims[1] = 2, pa.dims[2] = 0, pa.dims[3] = 3;
    int sref = KN_REF(split, 0);
    if (kn_pass_append_node(x, KN_OP_PERMUTE, &sref, 1, &pa, before, where, &perm) != KN_OK) return ref;
    return KN_REF(perm, 0);
}

/* Replace the attention chain that softmax sm ends, if it is one, with
 * one attention node; otherwise leave the graph as it is and note why
 * (when sm looked like the end of one). */
static kn_status try_softmax(kn_pass_ctx *x, int sm)
{
    kn_graph *g = x->g;
    char a[200], b[200];
    int mm2, fill, test;
    if (!softmax_reader(x, sm, &mm2, &fill, &test)) return KN_OK;
    attn_match m = {.mm1 = -1, .scale_node = -1, .mask_node = -1, .softmax = sm, .mm2 = mm2, .scale = 1.0,
                    .mask_ref = -1, .q_scale = -1, .k_scale = -1, .nan_fill = fill, .nan_test = test};
    if (!match_chain(x, sm, &m)) return KN_OK;
    m.v = KN_REF(g->nodes[mm2].in_node[1], g->nodes[mm2].in_out[1]);
    const kn_meta *qm = &g->nodes[KN_REF_NODE(m.q)].out[KN_REF_OUT(m.q)];
    int64_t tq = qm->ndim >= 2 ? qm->shape[qm->ndim - 2] : -1;
    int64_t tk = g->nodes[m.mm1].out[0].ndim >= 1 ? g->nodes[m.mm1].out[0].shape[g->nodes[m.mm1].out[0].ndim - 1] : -2;
    bool causal = m.mask_ref >= 0 && tq == tk &&
                  (m.mask_is_bool ? is_causal_fill_mask(g, KN_REF_NODE(m.mask_ref), tq)
                                  : is_causal_add_mask(g, KN_REF_NODE(m.mask_ref), tq) ||
                                        (KN_REF_OUT(m.mask_ref) == 0 && is_causal_fixed_mask(x, KN_REF_NODE(m.mask_ref), tq)));
    char where[KN_WHERE_MAX]; /* copied: the nodes appended below may move the node array */
    memcpy(where, g->nodes[m.mm1].where, sizeof where);
    int before = mm2;
    int mask_in;
    if (!mask_input(x, sm, &m, causal, before, &mask_in) || !k_input(x, sm, &m, before)) return KN_OK;
    m.q = heads_view(x, m.q, before, where);
    m.k = heads_view(x, m.k, before, where);
    m.v = heads_view(x, m.v, before, where);
    g = x->g;
    int refs[4] = {m.q, m.k, m.v, mask_in};
    kn_attrs at;
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_ATTENTION);
    at = init.a;
    at.causal = causal;
    at.scale = m.scale;
    /* the exporter's NaN fill after the softmax: in the kernel's store,
     * except in a training step, whose backward reads the op's output as
     * the fill-less op gives it */
    bool fill_inside = m.nan_fill >= 0 && !kn_pass_graph_trains(g);
    at.zero_nan = fill_inside;
    int att;
    kn_status st = kn_pass_append_node(x, KN_OP_ATTENTION, refs, mask_in >= 0 ? 4 : 3, &at, before, where, &att);
    if (st == KN_OK) {
        const kn_meta *o = &g->nodes[att].out[0], *want = &g->nodes[mm2].out[0];
        if (o->dtype != want->dtype || o->ndim != want->ndim ||
            memcmp(o->shape, want->shape, sizeof(int64_t) * (size_t)o->ndim)) {
            x->dead[att] = 1;
            kn_pass_note(x, "attention not matched at %s: the fused result would differ in shape or dtype from %s",
                 kn_pass_who(g, sm, a, sizeof a), kn_pass_who(g, mm2, b, sizeof b));
            return KN_OK;
        }
    } else {
        kn_pass_note(x, "attention not matched at %s: the shapes do not fit: %s", kn_pass_who(g, sm, a, sizeof a), kn_last_error());
        return KN_OK;
    }
    covers_text(g, &m, causal, g->nodes[att].covers, sizeof g->nodes[att].covers);
    int result = KN_REF(att, 0);
    if (m.nan_fill >= 0 && !fill_inside) {
        /* the written-out chain zeroes the probabilities of a row that came
         * out NaN (every key masked): then its output row is zeros, which
         * the fused op's NaN row filled with 0 gives too */
        int ne, zero;
        int ne_refs[2] = {result, result};
        st = kn_pass_append_node(x, KN_OP_NE, ne_refs, 2, NULL, before, g->nodes[m.nan_test].where, &ne);
        if (st == KN_OK) {
            kn_attrs fa = g->nodes[m.nan_fill].a;
            int f_refs[2] = {result, KN_REF(ne, 0)};
            st = kn_pass_append_node(x, KN_OP_MASKED_FILL, f_refs, 2, &fa, before, g->nodes[m.nan_fill].where, &zero);
        }
        if (st != KN_OK) {
            x->dead[att] = 1;
            kn_pass_note(x, "attention not matched at %s: the NaN fill after it: %s", kn_pass_who(g, sm, a, sizeof a),
                         kn_last_error());
            return KN_OK;
        }
        result = KN_REF(zero, 0);
    }
    if (!kn_pass_replace(x, mm2, result)) {
        x->dead[att] = 1;
        return KN_OK;
    }
    x->dead[sm] = 1;
    x->dead[m.mm1] = 1;
    if (m.scale_node >= 0) x->dead[m.scale_node] = 1;
    if (m.mask_node >= 0) x->dead[m.mask_node] = 1;
    if (m.q_scale >= 0) x->dead[m.q_scale] = 1;
    if (m.k_scale >= 0) x->dead[m.k_scale] = 1;
    if (m.nan_fill >= 0) x->dead[m.nan_fill] = x->dead[m.nan_test] = 1;
    return KN_OK;
}

/* ---- causal_masks: fixed masks that fold_once computed ---- */

/* Attention node i with a fixed mask that holds the causal pattern gets
 * the causal attribute instead: a new node on q, k, v replaces it, and the
 * mask (no longer read) goes with dce. */
static kn_status causal_from_fixed_mask(kn_pass_ctx *x, int i)
{
    kn_graph *g = x->g;
    const kn_node *n = &g->nodes[i];
    if (n->n_in != 4 || n->a.causal || n->in_out[3] != 0) return KN_OK;
    const kn_meta *q = &g->nodes[n->in_node[0]].out[n->in_out[0]], *k = &g->nodes[n->in_node[1]].out[n->in_out[1]];
    if (q->ndim < 2 || k->ndim < 2 || q->shape[q->ndim - 2] != k->shape[k->ndim - 2]) return KN_OK;
    if (!is_causal_fixed_mask(x, n->in_node[3], q->shape[q->ndim - 2])) return KN_OK;
    int refs[3];
    for (int r = 0; r < 3; r++) refs[r] = KN_REF(n->in_node[r], n->in_out[r]);
    kn_attrs at = n->a;
    at.causal = 1;
    char where[KN_WHERE_MAX], covers[sizeof n->covers];
    memcpy(where, n->where, sizeof where);
    memcpy(covers, n->covers, sizeof covers);
    int att;
    KN_TRY(kn_pass_append_node(x, KN_OP_ATTENTION, refs, 3, &at, i, where, &att));
    g = x->g;
    if (!kn_pass_meta_equal(&g->nodes[att].out[0], &g->nodes[i].out[0]) || !kn_pass_replace(x, i, KN_REF(att, 0))) {
        x->dead[att] = 1;
        return KN_OK;
    }
    /* (a node with a mask was not causal: its covers do not say so yet) */
    snprintf(g->nodes[att].covers, sizeof g->nodes[att].covers, "%s (causal mask folded)", covers);
    x->dead[i] = 1;
    return KN_OK;
}

/* After fold_once: a mask computed from parameters alone (the real-size
 * GPT-2 export builds its causal mask from three bool parameters, where
 * the small export carries the folded result) is an input now, whose
 * values the attention pass could not read when it ran. */
kn_status kn_pass_attention_causal_masks(kn_pass_ctx *x)
{
    int n = x->n_orig;
    for (int i = 0; i < n; i++) {
        if (x->dead[i] || x->g->nodes[i].op != KN_OP_ATTENTION) continue;
        KN_TRY(causal_from_fixed_mask(x, i));
    }
    return KN_OK;
}

kn_status kn_pass_attention(kn_pass_ctx *x)
{
    int n = x->n_orig;
    for (int i = 0; i < n; i++) {
        if (x->dead[i] || (x->g->nodes[i].op != KN_OP_SOFTMAX)) continue;
        KN_TRY(try_softmax(x, i));
    }
    return KN_OK;
}
