/* kn_pass_gather_scatter: the message-passing pass. It finds the chain a
 * graph network writes to send messages along edges,
 *
 *   msg = index_select(h, dim 1, src)          gather a row per edge
 *         [* w, w one number per edge]         ({E, 1, ...}: scale each message)
 *   out = index_add(base, dim 1, dst, msg)     sum the messages into rows
 *
 * where the gathered rows and the messages have no other user, and
 * replaces it with one gather_scatter node, which the backends run as one
 * kernel (on the GPU, kernels/cuda/kn_gather_scatter.cu: no E x F message
 * tensor reaches memory). A base that is zeros of the output's shape
 * (`kiln.zeros(h:shape()):index_add(...)`) is folded in: the node has no
 * base input and the kernel writes every row. An index_add that does not
 * fit is left alone, and the reason, naming the ops and their lines, goes
 * to the pass notes (shown with KILN_LOGS=fusion).
 *
 * What follows the sum joins the node as its epilogue (attrs epilogue,
 * n_epilogue) while each value has that one reader: elementwise relu,
 * gelu, silu, sigmoid or tanh, then optionally a softmax or log_softmax
 * over the last dim of a 2-D result of at most KN_GATHER_SCATTER_ROW_MAX
 * columns (a GPU thread keeps the row in registers). The kernel applies
 * them before its store, so a GCN layer's activation is no kernel of its
 * own; an op that could be absorbed but is not says why in the notes.
 */
#include "kn_pass_gather_scatter.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool same_shape(const kn_meta *a, const kn_meta *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* w broadcasts one number per edge over msg: {E, 1, ...} with msg's rank
 * (a 1-D w against a 2-D msg would line up with the features instead). */
static bool per_edge(const kn_meta *w, const kn_meta *msg)
{
    if (w->ndim != msg->ndim || w->ndim < 1 || w->shape[0] != msg->shape[0]) return false;
    for (int d = 1; d < w->ndim; d++)
        if (w->shape[d] != 1) return false;
    return true;
}

/* The one reader of node's value, or -1 (none, several, or a caller output). */
static int only_reader(const kn_pass_ctx *x, int node)
{
    if (!kn_pass_private_value(x, node)) return -1;
    for (int i = 0; i < x->g->n_nodes; i++) {
        if (x->dead[i]) continue;
        const kn_node *n = &x->g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            if (n->in_node[k] == node) return i;
    }
    return -1;
}

static bool epilogue_activation(int op)
{
    return op == KN_OP_RELU || op == KN_OP_GELU || op == KN_OP_SILU || op == KN_OP_SIGMOID || op == KN_OP_TANH;
}

/* Whether op is one an epilogue might take (so leaving it says why). */
static bool epilogue_candidate(int op)
{
    return op < KN_OP_COUNT && (kn_op_kind_of((kn_op)op) == KN_K_UNARY || kn_op_kind_of((kn_op)op) == KN_K_SOFTMAX);
}

/* Walk from the sum (node ia, replaced by gather_scatter node gs) through
 * the ops that can be its epilogue; each one is recorded in gs's attrs and
 * appended to order (for covers). Returns the last node absorbed (ia when
 * none): the node whose uses gs takes over. */
static int absorb_epilogue(kn_pass_ctx *x, int ia, int gs, const char *head_text, int *order, int *no)
{
    kn_graph *g = x->g;
    char a[200];
    int cur = ia;
    for (;;) {
        kn_attrs *at = &g->nodes[gs].a;
        int user = only_reader(x, cur);
        if (user < 0) {
            /* a reader that could be absorbed, next to another use of the value */
            for (int i = 0; i < g->n_nodes; i++) {
                const kn_node *n = &g->nodes[i];
                if (x->dead[i] || !epilogue_candidate(n->op) || n->in_node[0] != cur) continue;
                kn_pass_note(x, "%s not fused into the gather_scatter at %s: the value it reads is %s too (the fused "
                                "kernel stores only its epilogue's result)", kn_pass_who(g, i, a, sizeof a), head_text,
                             kn_pass_is_output(x, cur) ? "a result of the function" : "used elsewhere");
                break;
            }
            return cur;
        }
        const kn_node *un = &g->nodes[user];
        if (!epilogue_candidate(un->op)) return cur;
        const kn_meta *in = &g->nodes[cur].out[0];
        const char *why = NULL;
        char whybuf[160];
        bool row = kn_op_kind_of((kn_op)un->op) == KN_K_SOFTMAX;
        if (at->n_epilogue > 0 && (at->epilogue[at->n_epilogue - 1] == KN_OP_SOFTMAX ||
                                   at->epilogue[at->n_epilogue - 1] == KN_OP_LOG_SOFTMAX))
            why = "the epilogue ends at its softmax";
        else if (!row && !epilogue_activation(un->op))
            why = "the epilogue applies relu, gelu, silu, sigmoid or tanh, then softmax or log_softmax";
        else if (un->out[0].dtype != in->dtype || !same_shape(&un->out[0], in))
            why = "it changes the dtype or shape";
        else if (at->n_epilogue == KN_GATHER_SCATTER_EPILOGUE_MAX) {
            snprintf(whybuf, sizeof whybuf, "the epilogue holds %d ops", KN_GATHER_SCATTER_EPILOGUE_MAX);
            why = whybuf;
        } else if (row && (in->ndim != 2 || un->a.dim != 1)) {
            snprintf(whybuf, sizeof whybuf, "it normalizes over dim %d of a %d-D value; the fused kernel normalizes "
                     "the rows of a 2-D value (dim 2)", un->a.dim + 1, in->ndim);
            why = whybuf;
        } else if (row && in->shape[1] > KN_GATHER_SCATTER_ROW_MAX) {
            snprintf(whybuf, sizeof whybuf, "its rows hold %lld elements, more than the %d a fused row keeps",
                     (long long)in->shape[1], KN_GATHER_SCATTER_ROW_MAX);
            why = whybuf;
        }
        if (why) {
            kn_pass_note(x, "%s not fused into the gather_scatter at %s: %s", kn_pass_who(g, user, a, sizeof a),
                         head_text, why);
            return cur;
        }
        at->epilogue[at->n_epilogue++] = un->op;
        order[(*no)++] = user;
        if (cur != ia) x->dead[cur] = 1; /* an absorbed op before the last */
        cur = user;
    }
}

/* The messages index_add node ia sums, when they are a chain the fused op
 * computes: the index_select node in *sel_out and, when the rows are
 * scaled per edge, the mul node in *mul_out (else -1) and the weight in
 * *w_ref_out; false (noted, naming head_text) when they are not. */
static bool match_messages(kn_pass_ctx *x, int ia, const char *head_text, int *sel_out, int *mul_out, int *w_ref_out)
{
    kn_graph *g = x->g;
    char a[200];
    const kn_node *add = &g->nodes[ia];
    int msg = add->in_node[2];
    const kn_node *mn = &g->nodes[msg];
    /* the message: index_select(h, src), or that times a per-edge weight */
    int sel = -1, mul = -1, w_ref = -1;
    if (mn->op == KN_OP_INDEX_SELECT) {
        sel = msg;
    } else if (mn->op == KN_OP_MUL) {
        for (int k = 0; k < 2 && sel < 0; k++)
            if (g->nodes[mn->in_node[k]].op == KN_OP_INDEX_SELECT) {
                sel = mn->in_node[k];
                mul = msg;
                w_ref = KN_REF(mn->in_node[1 - k], mn->in_out[1 - k]);
            }
    }
    if (sel < 0) {
        kn_pass_note(x, "gather_scatter not matched at %s: its source is %s, not index_select(h, 1, src) or that "
                        "times a per-edge weight", head_text, kn_pass_who(g, msg, a, sizeof a));
        return false;
    }
    const kn_node *sn = &g->nodes[sel];
    if (add->a.dim != 0 || sn->a.dim != 0) {
        kn_pass_note(x, "gather_scatter not matched at %s: it gathers or scatters along dim %d, not rows (dim 1)",
                     head_text, (add->a.dim != 0 ? add->a.dim : sn->a.dim) + 1);
        return false;
    }
    if (mul >= 0) {
        const kn_meta *wm = &g->nodes[KN_REF_NODE(w_ref)].out[KN_REF_OUT(w_ref)];
        if (!per_edge(wm, &sn->out[0]) || !same_shape(&mn->out[0], &sn->out[0])) {
            char ws[64];
            kn_pass_note(x, "gather_scatter not matched at %s: %s multiplies the gathered rows by a value of shape %s, "
                            "not one number per edge ({%lld, 1, ...})", head_text, kn_pass_who(g, mul, a, sizeof a),
                         kn_shape_str(wm->ndim, wm->shape, ws, (int)sizeof ws), (long long)sn->out[0].shape[0]);
            return false;
        }
        if (mn->out[0].dtype != sn->out[0].dtype || wm->dtype != sn->out[0].dtype) {
            kn_pass_note(x, "gather_scatter not matched at %s: %s mixes dtypes (%s rows, %s weight)", head_text,
                         kn_pass_who(g, mul, a, sizeof a), kn_dtype_name(sn->out[0].dtype), kn_dtype_name(wm->dtype));
            return false;
        }
        if (!kn_pass_private_value(x, mul)) {
            kn_pass_note(x, "gather_scatter not matched at %s: the messages %s are used elsewhere too (the fused "
                            "kernel never makes them)", head_text, kn_pass_who(g, mul, a, sizeof a));
            return false;
        }
    }
    if (!kn_pass_private_value(x, sel)) {
        kn_pass_note(x, "gather_scatter not matched at %s: the gathered rows %s are used elsewhere too", head_text,
                     kn_pass_who(g, sel, a, sizeof a));
        return false;
    }
    if (!kn_dtype_is_float(add->out[0].dtype)) {
        kn_pass_note(x, "gather_scatter not matched at %s: the fused op sums float rows, these are %s", head_text,
                     kn_dtype_name(add->out[0].dtype));
        return false;
    }
    *sel_out = sel;
    *mul_out = mul;
    *w_ref_out = w_ref;
    return true;
}

/* Replace index_add node ia, and the gather (and per-edge scale) it sums,
 * with one gather_scatter node taking what follows as its epilogue;
 * otherwise leave the graph as it is and note why. */
static kn_status try_index_add(kn_pass_ctx *x, int ia)
{
    kn_graph *g = x->g;
    char b[200];
    const kn_node *add = &g->nodes[ia];
    const char *head = kn_pass_who(g, ia, b, sizeof b);
    char head_text[200];
    snprintf(head_text, sizeof head_text, "%s", head);
    int sel, mul, w_ref;
    if (!match_messages(x, ia, head_text, &sel, &mul, &w_ref)) return KN_OK;
    const kn_node *sn = &g->nodes[sel];
    /* the base: zeros of the output's shape fold into the op */
    int base = add->in_node[0];
    const kn_node *bn = &g->nodes[base];
    /* (not -0: a row no edge reaches keeps the base's sign, and the op's zeros are +0) */
    bool folded = bn->op == KN_OP_FULL && bn->a.value == 0 && !signbit(bn->a.value) &&
                  bn->out[0].dtype == add->out[0].dtype &&
                  same_shape(&bn->out[0], &add->out[0]);
    int refs[5], n = 0;
    refs[n++] = KN_REF(sn->in_node[0], sn->in_out[0]);
    refs[n++] = KN_REF(sn->in_node[1], sn->in_out[1]);
    refs[n++] = KN_REF(add->in_node[1], add->in_out[1]);
    if (w_ref >= 0) refs[n++] = w_ref;
    kn_attrs at;
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_GATHER_SCATTER);
    at = init.a;
    if (folded) {
        at.nshape = 1;
        at.shape[0] = add->out[0].shape[0];
    } else {
        refs[n++] = KN_REF(base, add->in_out[0]);
    }
    int gs;
    kn_status st = kn_pass_append_node(x, KN_OP_GATHER_SCATTER, refs, n, &at, ia, sn->where, &gs);
    if (st != KN_OK) {
        kn_pass_note(x, "gather_scatter not matched at %s: the shapes do not fit: %s", head_text, kn_last_error());
        return KN_OK;
    }
    add = &g->nodes[ia]; /* appending may have moved the node array */
    const kn_meta *o = &g->nodes[gs].out[0];
    if (o->dtype != add->out[0].dtype || !same_shape(o, &add->out[0])) {
        x->dead[gs] = 1;
        kn_pass_note(x, "gather_scatter not matched at %s: the fused result would differ in shape or dtype", head_text);
        return KN_OK;
    }
    int order[4 + KN_GATHER_SCATTER_EPILOGUE_MAX], no = 0;
    order[no++] = sel;
    if (mul >= 0) order[no++] = mul;
    if (!folded) order[no++] = ia;
    else {
        order[no++] = base;
        order[no++] = ia;
    }
    int last = absorb_epilogue(x, ia, gs, head_text, order, &no);
    /* "index_select f.lua:46, mul :46, index_add :47, relu :48 (zero fill folded)" */
    kn_pass_covers_text(g, order, no, folded ? " (zero fill folded)" : NULL, g->nodes[gs].covers,
                        sizeof g->nodes[gs].covers);
    if (!kn_pass_replace(x, last, KN_REF(gs, 0))) {
        x->dead[gs] = 1;
        return KN_OK;
    }
    if (last != ia) x->dead[ia] = 1;
    x->dead[sel] = 1;
    if (mul >= 0) x->dead[mul] = 1;
    /* a folded zero fill with no other user goes in the final dce */
    return KN_OK;
}

kn_status kn_pass_gather_scatter(kn_pass_ctx *x)
{
    int n = x->n_orig;
    for (int i = 0; i < n; i++) {
        if (x->dead[i] || x->g->nodes[i].op != KN_OP_INDEX_ADD) continue;
        KN_TRY(try_index_add(x, i));
    }
    return KN_OK;
}
