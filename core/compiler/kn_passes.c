/* kn_passes: the pass list and its runner, the graph checker, and the
 * structural passes (dce, cse, simplify). The folding passes live in
 * kn_passes_fold.c; kn_pass_ctx.h explains how a pass rewrites a graph
 * (mark, redirect, commit). */
#include "kn_passes.h"

#include "kn_graph_print.h"
#include "kn_pass_attention.h"
#include "kn_pass_recompute.h"
#include "kn_pass_reductions.h"
#include "kn_pass_channels_last.h"
#include "kn_pass_merge_projections.h"
#include "kn_pass_k_major.h"
#include "kn_pass_gather_scatter.h"
#include "kn_pass_ctx.h"
#include "kn_passes_fold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the rewrite context ---- */

static kn_status ctx_begin(kn_pass_ctx *x, kn_graph *g, int *outputs, int n_outputs)
{
    memset(x, 0, sizeof *x);
    x->g = g;
    x->outputs = outputs;
    x->n_outputs = n_outputs;
    x->n_orig = g->n_nodes;
    return kn_pass_sync(x);
}

static void ctx_end(kn_pass_ctx *x)
{
    free(x->repl);
    free(x->dead);
    free(x->before);
    memset(x, 0, sizeof *x);
}

/* Build the new node array: survivors in order, each appended node just
 * before the original node it was placed before; then renumber inputs and
 * outputs through the replacements. */
static kn_status commit(kn_pass_ctx *x, const char *pass)
{
    kn_graph *g = x->g;
    int n = g->n_nodes;
    int *map = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    kn_node *nodes = malloc(sizeof(kn_node) * (size_t)(g->cap_nodes > 0 ? g->cap_nodes : 1));
    if (!map || !nodes) {
        free(map);
        free(nodes);
        return kn_error(KN_ERR_OOM, "passes: out of host memory");
    }
    int m = 0;
    for (int i = 0; i <= x->n_orig; i++) {
        for (int j = x->n_orig; j < n; j++)
            if ((x->before[j] == i || (i == x->n_orig && x->before[j] < 0)) && !x->dead[j]) {
                map[j] = m;
                nodes[m++] = g->nodes[j];
            }
        if (i == x->n_orig) break;
        map[i] = x->dead[i] ? -1 : m;
        if (!x->dead[i]) nodes[m++] = g->nodes[i];
    }
    for (int j = x->n_orig; j < n; j++)
        if (x->dead[j]) map[j] = -1;
    kn_status st = KN_OK;
    for (int i = 0; i < n && st == KN_OK; i++) {
        if (map[i] < 0) continue;
        kn_node *nd = &nodes[map[i]];
        for (int k = 0; k < nd->n_in; k++) {
            int r = kn_pass_resolve(x, KN_REF(nd->in_node[k], nd->in_out[k]));
            int to = map[KN_REF_NODE(r)];
            if (to < 0) {
                st = kn_error(KN_ERR_ARG, "passes: %s removed node %d that node %d still reads",
                              pass, KN_REF_NODE(r), i);
                break;
            }
            nd->in_node[k] = to;
            nd->in_out[k] = KN_REF_OUT(r);
        }
    }
    for (int k = 0; k < x->n_outputs && st == KN_OK; k++) {
        if (x->outputs[k] < 0 || x->outputs[k] >= n) {
            st = kn_error(KN_ERR_ARG, "passes: output %d names node %d of a graph of %d nodes", k + 1,
                          x->outputs[k], n);
            break;
        }
        int r = kn_pass_resolve(x, KN_REF(x->outputs[k], 0));
        if (map[KN_REF_NODE(r)] < 0 || KN_REF_OUT(r) != 0)
            st = kn_error(KN_ERR_ARG, "passes: %s lost output %d (node %d)", pass, k + 1,
                          x->outputs[k]);
        else x->outputs[k] = map[KN_REF_NODE(r)];
    }
    free(map);
    if (st != KN_OK) {
        free(nodes);
        return st;
    }
    free(g->nodes);
    g->nodes = nodes;
    g->n_nodes = m;
    return KN_OK;
}

/* ---- checking ---- */


static void meta_text(const kn_meta *m, char *buf, int size)
{
    char s[128];
    int nd = m->ndim < 0 ? 0 : m->ndim > KN_MAX_DIMS ? KN_MAX_DIMS : m->ndim;
    snprintf(buf, (size_t)size, "%s%s", (unsigned)m->dtype < KN_DTYPE_COUNT ? kn_dtype_name(m->dtype) : "?",
             kn_shape_str(nd, m->shape, s, sizeof s));
}

static kn_status verify_node(const kn_graph *g, int i, char *msg, size_t size)
{
    const kn_node *n = &g->nodes[i];
    if (n->op == KN_NODE_INPUT) {
        if (n->n_in != 0 || n->n_out != 1 || n->input < 0 || n->input >= g->n_inputs) {
            snprintf(msg, size, "input node names input %d of %d", n->input, g->n_inputs);
            return KN_ERR_ARG;
        }
        const kn_meta *m = &g->inputs[n->input].meta;
        if (!kn_pass_meta_equal(m, &n->out[0])) {
            char a[160], b[160];
            meta_text(&n->out[0], a, sizeof a);
            meta_text(m, b, sizeof b);
            snprintf(msg, size, "input node says %s but input %d is %s", a, n->input, b);
            return KN_ERR_ARG;
        }
        return KN_OK;
    }
    if (n->op == KN_NODE_CONST) {
        if (n->n_in != 0 || n->n_out != 1 || n->out[0].ndim != 0 ||
            (unsigned)n->out[0].dtype >= KN_DTYPE_COUNT) {
            snprintf(msg, size, "a constant must have no inputs and one 0-dim output");
            return KN_ERR_ARG;
        }
        return KN_OK;
    }
    if ((unsigned)n->op >= KN_OP_COUNT) {
        snprintf(msg, size, "unknown op %d", n->op);
        return KN_ERR_ARG;
    }
    int arity = kn_op_arity((kn_op)n->op);
    if (n->n_in < 0 || n->n_in > KN_MAX_INPUTS || (arity >= 0 && n->n_in != arity)) {
        snprintf(msg, size, "has %d inputs, %s takes %d", n->n_in, kn_op_name((kn_op)n->op), arity);
        return KN_ERR_ARG;
    }
    for (int k = 0; k < n->n_in; k++) {
        int s = n->in_node[k];
        if (s < 0 || s >= i) {
            snprintf(msg, size, "input %d reads node %d, which is not before it", k + 1, s);
            return KN_ERR_ARG;
        }
        if (n->in_out[k] < 0 || n->in_out[k] >= g->nodes[s].n_out) {
            snprintf(msg, size, "input %d reads output %d of node %d, which has %d", k + 1,
                     n->in_out[k] + 1, s, g->nodes[s].n_out);
            return KN_ERR_ARG;
        }
    }
    kn_meta out[KN_MAX_OUTPUTS];
    int n_out = 0;
    if (kn_node_infer(g, i, out, &n_out) != KN_OK) {
        snprintf(msg, size, "shape inference fails: %s", kn_last_error());
        return KN_ERR_ARG;
    }
    if (n_out != n->n_out) {
        snprintf(msg, size, "has %d outputs, shape inference says %d", n->n_out, n_out);
        return KN_ERR_ARG;
    }
    for (int k = 0; k < n_out; k++)
        if (!kn_pass_meta_equal(&out[k], &n->out[k])) {
            char a[160], b[160];
            meta_text(&n->out[k], a, sizeof a);
            meta_text(&out[k], b, sizeof b);
            snprintf(msg, size, "output %d is %s but shape inference says %s", k + 1, a, b);
            return KN_ERR_ARG;
        }
    return KN_OK;
}

kn_status kn_graph_verify(const kn_graph *g, char *why, size_t size)
{
    char msg[512];
    for (int i = 0; i < g->n_nodes; i++) {
        if (verify_node(g, i, msg, sizeof msg) == KN_OK) continue;
        const kn_node *n = &g->nodes[i];
        kn_status st = kn_error(KN_ERR_ARG, "graph check: node %d (%s at %s): %s", i,
                                kn_node_op_name(n), n->where, msg);
        if (why && size) snprintf(why, size, "%s", kn_last_error());
        return st;
    }
    if (why && size) why[0] = 0;
    return KN_OK;
}

/* ---- dce: drop what no output needs (INPUT nodes stay) ---- */

static kn_status pass_dce(kn_pass_ctx *x)
{
    kn_graph *g = x->g;
    unsigned char *live = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), 1);
    if (!live) return kn_error(KN_ERR_OOM, "dce: out of host memory");
    for (int k = 0; k < x->n_outputs; k++)
        if (x->outputs[k] >= 0 && x->outputs[k] < g->n_nodes) live[x->outputs[k]] = 1;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const kn_node *n = &g->nodes[i];
        if (!live[i]) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in_node[k] >= 0 && n->in_node[k] < i) live[n->in_node[k]] = 1;
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (!live[i] && g->nodes[i].op != KN_NODE_INPUT) x->dead[i] = 1;
    free(live);
    return KN_OK;
}

/* ---- cse: one node per (op, inputs, attrs); one constant per (value, dtype) ---- */

static bool cse_candidate(const kn_node *n)
{
    if (n->op == KN_NODE_INPUT) return false;
    return n->op != KN_OP_RANDN && n->op != KN_OP_RAND && n->op != KN_OP_RANDINT;
}

static uint64_t mix(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

static uint64_t cse_hash(const kn_node *n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    h = mix(h, &n->op, sizeof n->op);
    if (n->op == KN_NODE_CONST) {
        h = mix(h, &n->value, sizeof n->value);
        return mix(h, &n->out[0].dtype, sizeof n->out[0].dtype);
    }
    h = mix(h, &n->n_in, sizeof n->n_in);
    h = mix(h, n->in_node, sizeof(int) * (size_t)n->n_in);
    h = mix(h, n->in_out, sizeof(int) * (size_t)n->n_in);
    return mix(h, &n->a, sizeof n->a);
}

static bool cse_same(const kn_node *a, const kn_node *b)
{
    if (a->op != b->op) return false;
    if (a->op == KN_NODE_CONST)
        return a->out[0].dtype == b->out[0].dtype && memcmp(&a->value, &b->value, sizeof a->value) == 0;
    if (a->n_in != b->n_in) return false;
    for (int k = 0; k < a->n_in; k++)
        if (a->in_node[k] != b->in_node[k] || a->in_out[k] != b->in_out[k]) return false;
    return memcmp(&a->a, &b->a, sizeof a->a) == 0;
}

static kn_status pass_cse(kn_pass_ctx *x)
{
    kn_graph *g = x->g;
    int size = 64;
    while (size < 2 * g->n_nodes) size *= 2;
    int *table = malloc(sizeof(int) * (size_t)size);
    if (!table) return kn_error(KN_ERR_OOM, "cse: out of host memory");
    for (int s = 0; s < size; s++) table[s] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        kn_pass_resolve_inputs(x, i);
        const kn_node *n = &g->nodes[i];
        if (!cse_candidate(n)) continue;
        int s = (int)(cse_hash(n) & (uint64_t)(size - 1));
        while (table[s] >= 0 && !cse_same(&g->nodes[table[s]], n)) s = (s + 1) & (size - 1);
        if (table[s] < 0) {
            table[s] = i;
            continue;
        }
        int first = table[s];
        for (int k = 0; k < n->n_out; k++) x->repl[KN_REF(i, k)] = KN_REF(first, k);
        x->dead[i] = 1;
    }
    free(table);
    return KN_OK;
}

/* ---- simplify: algebraic identities and view chains ---- */

/* The value node i's output 0 would be replaced by r: only when it has
 * exactly the same dtype and shape. */
static bool try_replace(kn_pass_ctx *x, int i, int r)
{
    const kn_graph *g = x->g;
    if (!kn_pass_meta_equal(&g->nodes[i].out[0], &g->nodes[KN_REF_NODE(r)].out[KN_REF_OUT(r)])) return false;
    return kn_pass_replace(x, i, r);
}

static int in_ref(const kn_node *n, int k)
{
    return KN_REF(n->in_node[k], n->in_out[k]);
}

/* The op of the node producing value r (its output 0 only), else -1. */
static const kn_node *producer(const kn_pass_ctx *x, int r, int op)
{
    const kn_node *p = &x->g->nodes[KN_REF_NODE(r)];
    return KN_REF_OUT(r) == 0 && p->op == op ? p : NULL;
}

static bool is_const(const kn_pass_ctx *x, int r, double v)
{
    const kn_node *p = producer(x, r, KN_NODE_CONST);
    return p && kn_pass_const_value(p) == v;
}

/* A cast from `from` to `to` keeps every value exactly. */
static bool lossless(kn_dtype from, kn_dtype to)
{
    if (from == to || from == KN_BOOL) return true;
    switch (from) {
    case KN_I32: return to == KN_I64 || to == KN_F64;
    case KN_BF16:
    case KN_F16: return to == KN_F32 || to == KN_F64;
    case KN_F32: return to == KN_F64;
    default: return false;
    }
}

static void simplify_arith(kn_pass_ctx *x, int i)
{
    const kn_node *n = &x->g->nodes[i];
    int a = n->n_in > 0 ? in_ref(n, 0) : 0, b = n->n_in > 1 ? in_ref(n, 1) : 0;
    switch (n->op) {
    case KN_OP_MUL:
        if (is_const(x, b, 1) && try_replace(x, i, a)) return;
        if (is_const(x, a, 1)) try_replace(x, i, b);
        return;
    case KN_OP_ADD:
        if (is_const(x, b, 0) && try_replace(x, i, a)) return;
        if (is_const(x, a, 0)) try_replace(x, i, b);
        return;
    case KN_OP_SUB:
        if (is_const(x, b, 0)) try_replace(x, i, a);
        return;
    case KN_OP_DIV:
        if (is_const(x, b, 1)) try_replace(x, i, a);
        return;
    case KN_OP_NEG: {
        const kn_node *p = producer(x, a, KN_OP_NEG);
        if (p) try_replace(x, i, in_ref(p, 0));
        return;
    }
    default: return;
    }
}

static void simplify_cast(kn_pass_ctx *x, int i)
{
    kn_node *n = &x->g->nodes[i];
    int a = in_ref(n, 0);
    kn_dtype from = x->g->nodes[KN_REF_NODE(a)].out[KN_REF_OUT(a)].dtype;
    if (from == n->a.dtype && try_replace(x, i, a)) return;
    const kn_node *p = producer(x, a, KN_OP_CAST);
    if (!p) return;
    int src = in_ref(p, 0);
    kn_dtype orig = x->g->nodes[KN_REF_NODE(src)].out[KN_REF_OUT(src)].dtype;
    if (!lossless(orig, p->a.dtype)) return;
    /* cast(cast(x, wider), t) == cast(x, t): the inner cast kept x exactly */
    if (orig == n->a.dtype && try_replace(x, i, src)) return;
    n->in_node[0] = KN_REF_NODE(src);
    n->in_out[0] = KN_REF_OUT(src);
}

static bool identity_perm(const int *p, int n)
{
    for (int d = 0; d < n; d++)
        if (p[d] != d) return false;
    return true;
}

static void simplify_view(kn_pass_ctx *x, int i)
{
    kn_node *n = &x->g->nodes[i];
    int a = in_ref(n, 0);
    const kn_node *p = producer(x, a, n->op);
    switch (n->op) {
    case KN_OP_RESHAPE:
        if (p) { /* reshape(reshape(x, s1), s2) = reshape(x, s2) */
            a = in_ref(p, 0);
            n->in_node[0] = KN_REF_NODE(a);
            n->in_out[0] = KN_REF_OUT(a);
        }
        try_replace(x, i, a); /* to the shape it already has */
        return;
    case KN_OP_PERMUTE:
        if (p && p->a.ndims == n->a.ndims) {
            int comp[KN_MAX_DIMS];
            for (int d = 0; d < n->a.ndims; d++) comp[d] = p->a.dims[n->a.dims[d]];
            a = in_ref(p, 0);
            memcpy(n->a.dims, comp, sizeof(int) * (size_t)n->a.ndims);
            n->in_node[0] = KN_REF_NODE(a);
            n->in_out[0] = KN_REF_OUT(a);
        }
        if (identity_perm(n->a.dims, n->a.ndims)) try_replace(x, i, a);
        return;
    case KN_OP_SLICE:
        if (n->a.start == 0) try_replace(x, i, a); /* same size from 0: the whole dim */
        return;
    case KN_OP_EXPAND: try_replace(x, i, a); return; /* to the shape it already has */
    default: return;
    }
}

static kn_status pass_simplify(kn_pass_ctx *x)
{
    kn_graph *g = x->g;
    for (int i = 0; i < g->n_nodes; i++) {
        kn_pass_resolve_inputs(x, i);
        const kn_node *n = &g->nodes[i];
        if ((unsigned)n->op >= KN_OP_COUNT) continue;
        switch (kn_op_kind_of((kn_op)n->op)) {
        case KN_K_UNARY:
            if (n->op == KN_OP_CAST) simplify_cast(x, i);
            else simplify_arith(x, i);
            break;
        case KN_K_BINARY: simplify_arith(x, i); break;
        case KN_K_VIEW: simplify_view(x, i); break;
        case KN_K_COPY: {
            /* every op but a view writes a new contiguous tensor */
            const kn_node *p = &g->nodes[n->in_node[0]];
            if (p->op != KN_NODE_INPUT && (p->op == KN_NODE_CONST ||
                                           kn_op_kind_of((kn_op)p->op) != KN_K_VIEW))
                try_replace(x, i, in_ref(n, 0));
            break;
        }
        default: break;
        }
    }
    return KN_OK;
}

/* ---- sink_views: an elementwise op before the views it reads ----
 * op(view(y), c...) = view(op(y, c...)) for an elementwise op whose other
 * operands are single numbers (0-d: a constant, a fill value): it
 * commutes with any reshape, permute or expand. Moved ahead of the view,
 * it reads y in y's own shape, so fusion puts it in y's kernel (fusion
 * never inlines across a view): BERT's padding mask was `ne`, a reshape,
 * then a `cast` of it, two kernels a call where one does; and before an
 * expand it computes fewer elements (the mask's `ne` and `where` after
 * its B x 1 x 1 x T -> B x 1 x T x T broadcast: attention then reads the
 * small mask with stride 0). Only for a view whose one reader is the op,
 * of a computed value or of another view (the op moves on past that one
 * in turn: nodes appended here are visited too), not of an input (which
 * gains nothing), and outside training steps (appended nodes are
 * forward nodes). It runs after fold_once, which leaves such chains (an
 * identity gather or a mul by ones dropped between the ops). */
static bool sinks_past_views(const kn_node *u)
{
    if ((unsigned)u->op >= KN_OP_COUNT) return false;
    switch (kn_op_kind_of((kn_op)u->op)) {
    case KN_K_UNARY:
    case KN_K_BINARY:
    case KN_K_COMPARE:
    case KN_K_TERNARY: return true;
    default: return false;
    }
}

/* The one input of u that is a view, when every other is a single
 * number (0-d); -1 otherwise. */
static int the_viewed_input(const kn_graph *g, const kn_node *u)
{
    int viewed = -1;
    for (int k = 0; k < u->n_in; k++) {
        const kn_node *in = &g->nodes[u->in_node[k]];
        const kn_meta *m = &in->out[u->in_out[k]];
        bool view = in->op == KN_OP_RESHAPE || in->op == KN_OP_PERMUTE || in->op == KN_OP_EXPAND;
        if (view && viewed < 0 && u->in_out[k] == 0) viewed = k;
        else if (m->ndim != 0) return -1;
    }
    return viewed;
}

static bool is_view_op(int op)
{
    return op == KN_OP_RESHAPE || op == KN_OP_PERMUTE || op == KN_OP_EXPAND;
}

/* Whether a reshape in the chain (outermost view first) reads a permuted
 * or expanded layout: such a reshape may copy (strides cannot express
 * it), and the op moved before it would then be a kernel of its own
 * where it was one with its reader after the copy. */
static bool reshapes_a_strided(const kn_graph *g, const int *chain, int n_chain)
{
    bool strided = false;
    for (int c = n_chain - 1; c >= 0; c--) {
        int op = g->nodes[chain[c]].op;
        if (op == KN_OP_RESHAPE && strided) return true;
        strided = strided || op == KN_OP_PERMUTE || op == KN_OP_EXPAND;
    }
    return false;
}

static kn_status pass_sink_views(kn_pass_ctx *x)
{
    if (kn_pass_graph_trains(x->g)) return KN_OK;
    int n = x->n_orig;
    for (int i = 0; i < n; i++) {
        if (x->dead[i]) continue;
        kn_pass_resolve_inputs(x, i);
        const kn_node *u = &x->g->nodes[i];
        if (!sinks_past_views(u)) continue;
        int k = the_viewed_input(x->g, u);
        if (k < 0) continue;
        /* the chain of views, each with one reader, down to the value they view */
        int chain[16], n_chain = 0, src = KN_REF(u->in_node[k], u->in_out[k]);
        while (n_chain < 16) {
            const kn_node *vn = &x->g->nodes[KN_REF_NODE(src)];
            if (!is_view_op(vn->op) || KN_REF_OUT(src) != 0 || !kn_pass_private_value(x, KN_REF_NODE(src))) break;
            chain[n_chain++] = KN_REF_NODE(src);
            src = kn_pass_resolve(x, KN_REF(vn->in_node[0], vn->in_out[0]));
        }
        const kn_node *sn = &x->g->nodes[KN_REF_NODE(src)];
        if (n_chain == 0 || sn->op == KN_NODE_INPUT || sn->op == KN_NODE_CONST || reshapes_a_strided(x->g, chain, n_chain))
            continue;
        kn_node uc = *u; /* appending may move the node array */
        int refs[KN_MAX_INPUTS];
        for (int j = 0; j < uc.n_in; j++) refs[j] = j == k ? src : KN_REF(uc.in_node[j], uc.in_out[j]);
        int first = x->g->n_nodes, last;
        if (kn_pass_append_node(x, uc.op, refs, uc.n_in, &uc.a, i, uc.where, &last) != KN_OK) continue;
        bool ok = true;
        for (int c = n_chain - 1; c >= 0 && ok; c--) { /* the views again, innermost first */
            kn_node vc = x->g->nodes[chain[c]];
            int in = KN_REF(last, 0);
            ok = kn_pass_append_node(x, vc.op, &in, 1, &vc.a, i, vc.where, &last) == KN_OK;
        }
        ok = ok && kn_pass_meta_equal(&x->g->nodes[last].out[0], &x->g->nodes[i].out[0]) &&
             kn_pass_replace(x, i, KN_REF(last, 0));
        for (int j = first; j < x->g->n_nodes && !ok; j++) x->dead[j] = 1;
        for (int c = 0; c < n_chain && ok; c++) x->dead[chain[c]] = 1; /* their one reader is gone */
    }
    return KN_OK;
}

/* ---- the list and the runner ---- */

typedef struct pass_entry {
    const char *name;
    kn_status (*run)(kn_pass_ctx *x);
} pass_entry;

static const pass_entry pass_table[] = {
    {"dce", pass_dce},
    {"cse", pass_cse},
    {"fold_constants", kn_pass_fold_constants},
    {"fold_batch_norm", kn_pass_fold_batch_norm},
    {"simplify", pass_simplify},
    {"attention", kn_pass_attention},
    {"gather_scatter", kn_pass_gather_scatter},
    {"channels_last", kn_pass_channels_last},
    {"merge_projections", kn_pass_merge_projections},
    {"k_major_weights", kn_pass_k_major},
    {"fold_once", kn_pass_fold_once},
    {"causal_masks", kn_pass_attention_causal_masks},
    {"sink_views", pass_sink_views},
    {"recompute", kn_pass_recompute},
    {"split_reductions", kn_pass_split_reductions},
};

/* attention before fold_once: the pattern pass wants to see the causal
 * mask's subgraph, which fold_once would turn into an input; gather_scatter
 * too: it folds a zeros base, which fold_once would make an input.
 * causal_masks after it: a mask fold_once computed from parameters may
 * hold the causal pattern, which only its values show */
static const char *const pass_list[] = {"dce", "cse", "fold_constants", "fold_batch_norm", "simplify",
                                        "attention", "gather_scatter", "channels_last", "merge_projections",
                                        "k_major_weights", "split_reductions", "cse", "fold_once", "causal_masks", "simplify", "sink_views",
                                        "recompute", "dce", NULL};

const char *const *kn_passes_names(void)
{
    return pass_list;
}

/* KILN_LOGS=passes: the graph after `pass`, every line tagged with the
 * pass ("[passes:cse] ..."), so that a line grepped out of a long log says
 * which graph it is from; after a pass that changed nothing, "(unchanged)"
 * instead of the same graph again. before: the graph's text before the
 * pass (NULL after capture); *text gets the text now, for the next pass. */
static kn_status log_graph(const kn_graph *g, const char *pass, const char *before, char **text)
{
    KN_TRY(kn_graph_format(g, text));
    if (before && strcmp(before, *text) == 0) {
        fprintf(stderr, "[passes:%s] (unchanged)\n", pass);
        return KN_OK;
    }
    fprintf(stderr, "[passes:%s] %d nodes, %d ops\n", pass, g->n_nodes, kn_graph_op_count(g));
    for (const char *line = *text; *line;) {
        const char *end = strchr(line, '\n');
        int len = end ? (int)(end - line) : (int)strlen(line);
        fprintf(stderr, "[passes:%s] %.*s\n", pass, len, line);
        line += len + (end != NULL);
    }
    return KN_OK;
}

/* Run pass `name`. *logged: the graph's text as KILN_LOGS=passes last
 * printed it (updated here; NULL when the log is off). */
static kn_status run_pass(kn_graph *g, const char *name, int *outputs, int n_outputs, int flags, char **notes,
                          const struct kn_settings *settings, char **logged)
{
    const pass_entry *p = NULL;
    for (size_t k = 0; k < sizeof pass_table / sizeof pass_table[0]; k++)
        if (strcmp(pass_table[k].name, name) == 0) p = &pass_table[k];
    if (!p) return kn_error(KN_ERR_ARG, "passes: no pass named '%s'", name);
    for (int k = 0; k < n_outputs; k++)
        if (outputs[k] < 0 || outputs[k] >= g->n_nodes)
            return kn_error(KN_ERR_ARG, "passes: output %d names node %d of a graph of %d nodes",
                            k + 1, outputs[k], g->n_nodes);
    kn_pass_ctx x;
    KN_TRY(ctx_begin(&x, g, outputs, n_outputs));
    x.notes = notes;
    x.flags = flags;
    x.settings = settings;
    kn_status st = p->run(&x);
    if (st == KN_OK) st = commit(&x, p->name);
    ctx_end(&x);
    if (st != KN_OK) return st;
    if (flags & KN_PASSES_VERIFY) {
        char why[768];
        if (kn_graph_verify(g, why, sizeof why) != KN_OK)
            return kn_error(KN_ERR_ARG, "after pass %s: %s", p->name, why);
    }
    if ((flags & KN_PASSES_LOG) && logged) {
        char *text = NULL;
        st = log_graph(g, p->name, *logged, &text);
        free(*logged);
        *logged = text;
        return st;
    }
    return KN_OK;
}

kn_status kn_pass_run(kn_graph *g, const char *name, int *outputs, int n_outputs, int flags)
{
    char *logged = NULL;
    if (flags & KN_PASSES_LOG) KN_TRY(kn_graph_format(g, &logged));
    kn_status st = run_pass(g, name, outputs, n_outputs, flags, NULL, NULL, &logged);
    free(logged);
    return st;
}

kn_status kn_passes_run_noted(kn_graph *g, int *outputs, int n_outputs, int flags, char **notes,
                              const struct kn_settings *settings)
{
    if (flags & KN_PASSES_VERIFY) {
        char why[768];
        if (kn_graph_verify(g, why, sizeof why) != KN_OK)
            return kn_error(KN_ERR_ARG, "before the passes: %s", why);
    }
    char *logged = NULL;
    if (flags & KN_PASSES_LOG) KN_TRY(log_graph(g, "capture", NULL, &logged));
    kn_status st = KN_OK;
    for (int k = 0; pass_list[k] && st == KN_OK; k++) {
        if ((flags & KN_PASSES_NO_ATTENTION) && strcmp(pass_list[k], "attention") == 0) continue;
        if (!(flags & (KN_PASSES_NHWC_HALF | KN_PASSES_NHWC_F32)) && strcmp(pass_list[k], "channels_last") == 0)
            continue;
        st = run_pass(g, pass_list[k], outputs, n_outputs, flags, notes, settings, &logged);
    }
    free(logged);
    return st;
}

kn_status kn_passes_run(kn_graph *g, int *outputs, int n_outputs, int flags)
{
    return kn_passes_run_noted(g, outputs, n_outputs, flags, NULL, NULL);
}
