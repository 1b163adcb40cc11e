/* kn_fuse: the kernel IR of one group of fused nodes (see kn_fuse.h): a
 * POINTWISE kernel built from the expressions of its nodes, a ROW kernel
 * (a reduction, softmax or layer_norm over one dim, with its pointwise
 * producers), or a LIBRARY or FALLBACK kernel that only gets its name and
 * shape. Which nodes form a group, and why two are kept apart, is
 * kn_fuse_group.c's, which calls kn_fuse_build_kernel once a kernel. */
#include "kn_fuse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_fuse_internal.h"

/* A kernel's name holds its ops and sizes; one too long for the name is
 * cut, which is what the size is for. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

/* ---- building one kernel -------------------------------------------------- */

typedef struct {
    const kn_graph *g;
    kn_fusion *f;
    kn_kernel *k;
    int kid;
    int no;                    /* ndim of the original space (pointwise: the output; row: the row input) */
    int64_t oshape[KN_MAX_DIMS];
    int perm[KN_MAX_DIMS];     /* iteration dim j is original dim perm[j] */
    int *memo_expr;            /* per node: expression in this kernel, or -1 */
    int *memo_arg;             /* per node: argument in this kernel, or -1 */
} kctx;

static kn_status add_expr(kctx *c, kn_kexpr e, int *out)
{
    return kn_kernel_add_expr(c->k, &e, out);
}

static kn_kexpr kx(kn_kx_kind kind, int op, kn_dtype dt)
{
    kn_kexpr e;
    memset(&e, 0, sizeof e);
    e.kind = kind;
    e.op = op;
    e.a = e.b = e.c = -1;
    e.dtype = dt;
    return e;
}

static kn_status mk_const(kctx *c, double v, kn_dtype dt, int *out)
{
    kn_kexpr e = kx(KN_KX_CONST, 0, dt);
    e.value = v;
    return add_expr(c, e, out);
}

static kn_status mk_op(kctx *c, kn_op op, kn_dtype dt, int a, int b, int cc, int *out)
{
    kn_kexpr e = kx(KN_KX_OP, op, dt);
    e.a = a;
    e.b = b;
    e.c = cc;
    return add_expr(c, e, out);
}

/* A step inside one op's decomposition (kn_kexpr.internal): not an op's
 * result, so the renderer does not bring it back to its dtype. */
static kn_status mk_step(kctx *c, kn_op op, kn_dtype dt, int a, int b, int cc, int *out)
{
    KN_TRY(mk_op(c, op, dt, a, b, cc, out));
    c->k->exprs[*out].internal = true;
    return KN_OK;
}

/* The type a decomposed float op computes its steps in: f32 for the half
 * types (PyTorch's math type), the dtype itself otherwise. */
static kn_dtype math_dtype(kn_dtype dt)
{
    return dt == KN_BF16 || dt == KN_F16 ? KN_F32 : dt;
}

/* v as a tensor of dtype dt holds it (a full of 1e5 in f16 is inf). */
static double value_in(kn_dtype dt, double v)
{
    unsigned char b[8];
    kn_store_f64(b, dt, v);
    return kn_load_f64(b, dt);
}

static kn_status mk_cast(kctx *c, int e, kn_dtype dt, int *out)
{
    if (c->k->exprs[e].dtype == dt) {
        *out = e;
        return KN_OK;
    }
    return mk_op(c, KN_OP_CAST, dt, e, -1, -1, out);
}

static kn_status mk_index(kctx *c, int odim, int *out)
{
    int j = 0;
    while (j < c->k->ndim && c->perm[j] != odim) j++;
    kn_kexpr e = kx(KN_KX_INDEX, 0, KN_I64);
    e.dim = j;
    return add_expr(c, e, out);
}

/* The strides, per dim of the kernel's space, of a value of meta m laid
 * out as l; its dim vd is original dim first_odim + vd (first_odim < 0:
 * right-aligned broadcasting), a broadcast dim 0. */
static void space_strides(const kctx *c, const kn_meta *m, const kn_layout *l, int first_odim, int64_t *strides)
{
    int base = first_odim >= 0 ? first_odim : c->no - m->ndim;
    for (int j = 0; j < c->k->ndim; j++) {
        int vd = c->perm[j] - base;
        strides[j] = (vd >= 0 && vd < m->ndim && m->shape[vd] != 1) ? l->strides[vd] : 0;
    }
}

/* Load node `node`'s value; its dim vd is original dim first_odim + vd
 * (first_odim < 0: right-aligned broadcasting). */
static kn_status mk_load(kctx *c, int node, int out, int first_odim, int *res)
{
    const kn_meta *m = &c->g->nodes[node].out[out];
    kn_karg a;
    memset(&a, 0, sizeof a);
    a.node = node;
    a.out = out;
    a.dtype = m->dtype;
    space_strides(c, m, &c->f->layout[node], first_odim, a.strides);
    int ai;
    KN_TRY(kn_kernel_add_arg(c->k, &a, &ai));
    kn_kexpr e = kx(KN_KX_LOAD, 0, m->dtype);
    e.buf = ai;
    return add_expr(c, e, res);
}

static kn_status build(kctx *c, int node, int out, int *res);

/* The expression of a pointwise node, from its operands' expressions. */
static kn_status build_pointwise(kctx *c, int node, int *res)
{
    const kn_node *n = &c->g->nodes[node];
    kn_dtype dt = n->out[0].dtype;
    int e[KN_MAX_INPUTS];
    if (n->op == KN_OP_BATCH_NORM) { /* params are per channel: dim 1 of x, or its last (channels-last) */
        /* steps in the math type, the result rounded once (as eager) */
        kn_dtype mt = math_dtype(dt);
        KN_TRY(build(c, n->in_node[0], n->in_out[0], &e[0]));
        KN_TRY(mk_cast(c, e[0], mt, &e[0]));
        int channel_dim = n->a.in_layout == KN_LAYOUT_NHWC ? n->out[0].ndim - 1 : 1;
        for (int i = 1; i < n->n_in; i++) {
            KN_TRY(mk_load(c, n->in_node[i], n->in_out[i], channel_dim, &e[i]));
            KN_TRY(mk_cast(c, e[i], mt, &e[i]));
        }
        int eps, t, r;
        KN_TRY(mk_const(c, n->a.eps, mt, &eps));
        KN_TRY(mk_step(c, KN_OP_ADD, mt, e[2], eps, -1, &t));
        KN_TRY(mk_step(c, KN_OP_RSQRT, mt, t, -1, -1, &t));
        KN_TRY(mk_step(c, KN_OP_SUB, mt, e[0], e[1], -1, &r));
        KN_TRY(mk_step(c, KN_OP_MUL, mt, r, t, -1, &r));
        if (n->n_in > 3) KN_TRY(mk_step(c, KN_OP_MUL, mt, r, e[3], -1, &r));
        if (n->n_in > 4) KN_TRY(mk_step(c, KN_OP_ADD, mt, r, e[4], -1, &r));
        return mk_cast(c, r, dt, res);
    }
    if (n->op == KN_OP_FULL) return mk_const(c, value_in(dt, n->a.value), dt, res);
    if (n->op == KN_OP_ARANGE) {
        /* as the eager op: integral start and step of an integer arange in
         * wrapping int64, anything else start + i * step in f64, then the
         * dtype's conversion once */
        double lo = n->a.value, step = n->a.value2;
        bool int_path = (dt == KN_I64 || dt == KN_I32) && lo == trunc(lo) && step == trunc(step);
        kn_dtype wt = int_path ? KN_I64 : KN_F64;
        int i, s, st, r;
        KN_TRY(mk_index(c, 0, &i));
        KN_TRY(mk_cast(c, i, wt, &i));
        KN_TRY(mk_const(c, lo, wt, &s));
        KN_TRY(mk_const(c, step, wt, &st));
        KN_TRY(mk_step(c, KN_OP_MUL, wt, st, i, -1, &r));
        KN_TRY(mk_step(c, KN_OP_ADD, wt, s, r, -1, &r));
        return mk_cast(c, r, dt, res);
    }
    for (int i = 0; i < n->n_in; i++) KN_TRY(build(c, n->in_node[i], n->in_out[i], &e[i]));
    switch (kn_op_kind_of((kn_op)n->op)) {
    case KN_K_COPY: *res = e[0]; return KN_OK;
    case KN_K_UNARY:
        if (n->op == KN_OP_CAST) return mk_cast(c, e[0], dt, res);
        if (n->op != KN_OP_LOGICAL_NOT) KN_TRY(mk_cast(c, e[0], dt, &e[0]));
        return mk_op(c, (kn_op)n->op, dt, e[0], -1, -1, res);
    case KN_K_BINARY:
        KN_TRY(mk_cast(c, e[0], dt, &e[0]));
        KN_TRY(mk_cast(c, e[1], dt, &e[1]));
        return mk_op(c, (kn_op)n->op, dt, e[0], e[1], -1, res);
    case KN_K_COMPARE: {
        kn_dtype ct = kn_dtype_promote(c->k->exprs[e[0]].dtype, c->k->exprs[e[1]].dtype);
        KN_TRY(mk_cast(c, e[0], ct, &e[0]));
        KN_TRY(mk_cast(c, e[1], ct, &e[1]));
        return mk_op(c, (kn_op)n->op, KN_BOOL, e[0], e[1], -1, res);
    }
    case KN_K_TERNARY:
        KN_TRY(mk_cast(c, e[1], dt, &e[1]));
        KN_TRY(mk_cast(c, e[2], dt, &e[2]));
        return mk_op(c, KN_OP_WHERE, dt, e[0], e[1], e[2], res);
    case KN_K_MASKED: {
        KN_TRY(mk_cast(c, e[0], dt, &e[0]));
        kn_kexpr x = kx(KN_KX_OP, KN_OP_MASKED_FILL, dt);
        x.a = e[0];
        x.b = e[1];
        x.value = n->a.value;
        return add_expr(c, x, res);
    }
    case KN_K_TRI: {
        const kn_meta *m = &n->out[0];
        int row, col, d, diag, cond, zero;
        KN_TRY(mk_index(c, c->no - 2, &row));
        KN_TRY(mk_index(c, c->no - 1, &col));
        KN_TRY(mk_op(c, KN_OP_SUB, KN_I64, col, row, -1, &d));
        KN_TRY(mk_const(c, (double)n->a.diagonal, KN_I64, &diag));
        KN_TRY(mk_op(c, n->op == KN_OP_TRIL ? KN_OP_LE : KN_OP_GE, KN_BOOL, d, diag, -1, &cond));
        KN_TRY(mk_const(c, 0, m->dtype, &zero));
        return mk_op(c, KN_OP_WHERE, dt, cond, e[0], zero, res);
    }
    default: return kn_error(KN_ERR_UNSUPPORTED, "fusion: %s is not pointwise", kn_op_name((kn_op)n->op));
    }
}

/* Does `node` become an expression of this kernel built from its operands
 * (rather than a constant or a load)? */
static bool built_from_operands(const kctx *c, int node)
{
    return c->g->nodes[node].op != KN_NODE_CONST && c->f->disp[node] == KN_D_INLINE &&
           c->f->kernel[node] == c->kid;
}

/* How many of a pointwise node's inputs build_pointwise builds (in order);
 * the rest it loads itself. */
static int operands_built(const kn_node *n)
{
    if (n->op == KN_OP_INDEX_SELECT || n->op == KN_OP_RESHAPE) return 0; /* gathered: mk_gather_load */
    if (n->op == KN_OP_BATCH_NORM) return 1;
    if (n->op == KN_OP_FULL || n->op == KN_OP_ARANGE) return 0;
    return n->n_in;
}

/* An index_select of rows inlined as gathered loads (kn_fuse_group.c:
 * mark_gathered), read at `node` (it, or the reshape that splits its
 * rows): a load of the table W whose row comes from the index I at the
 * same position. The value's strides in this space (as mk_load finds
 * them, in elements of the n x row result) split into I's and W's: a
 * multiple of the row steps through I, the rest through W's columns. */
static kn_status mk_gather_load(kctx *c, int node, int *res)
{
    int sel = node;
    if (c->g->nodes[sel].op == KN_OP_RESHAPE) sel = c->g->nodes[sel].in_node[0];
    const kn_node *sn = &c->g->nodes[sel];
    int wn = sn->in_node[0], in = sn->in_node[1];
    const kn_meta *wm = &c->g->nodes[wn].out[sn->in_out[0]];
    /* an index whose wrap the grouping left to this load: read it raw */
    int raw = c->f->disp[in] == KN_D_INLINE ? kn_fuse_wrapped_index(c->g, in, wm->shape[0], NULL) : -1;
    bool from_end = raw >= 0;
    if (from_end) in = raw;
    const kn_meta *vm = &c->g->nodes[node].out[0];
    const kn_layout *vl = &c->f->layout[node], *wl = &c->f->layout[wn], *il = &c->f->layout[in];
    int64_t row = wm->shape[1];
    kn_karg w, ix;
    memset(&w, 0, sizeof w);
    memset(&ix, 0, sizeof ix);
    w.node = wn;
    w.out = sn->in_out[0];
    w.dtype = wm->dtype;
    ix.node = in;
    ix.out = from_end ? 0 : sn->in_out[1];
    ix.dtype = c->g->nodes[in].out[sn->in_out[1]].dtype;
    int64_t vs[KN_MAX_DIMS] = {0};
    space_strides(c, vm, vl, -1, vs);
    for (int j = 0; j < c->k->ndim; j++) {
        if (vs[j] % row == 0) ix.strides[j] = vs[j] / row * il->strides[0];
        else w.strides[j] = vs[j] * wl->strides[1];
    }
    int ia, wa;
    KN_TRY(kn_kernel_add_arg(c->k, &ix, &ia));
    w.gather_by = ia + 1;
    w.gather_stride = wl->strides[0];
    w.gather_size = wm->shape[0];
    w.gather_from_end = from_end;
    KN_TRY(kn_kernel_add_arg(c->k, &w, &wa));
    kn_kexpr e = kx(KN_KX_LOAD, 0, wm->dtype);
    e.buf = wa;
    return add_expr(c, e, res);
}

/* The expression of one node whose first outputs are built already. */
static kn_status build_node(kctx *c, int node, int *res)
{
    const kn_node *n = &c->g->nodes[node];
    kn_status st;
    if (n->op == KN_NODE_CONST) st = mk_const(c, n->value, n->out[0].dtype, res);
    else if (built_from_operands(c, node) && (n->op == KN_OP_INDEX_SELECT || n->op == KN_OP_RESHAPE))
        st = mk_gather_load(c, node, res);
    else if (built_from_operands(c, node)) st = build_pointwise(c, node, res);
    else st = mk_load(c, node, 0, -1, res);
    if (st == KN_OK) c->memo_expr[node] = *res;
    return st;
}

/* Build every operand of `root` that is itself built from operands, deepest
 * first, with a stack on the heap: a chain of 50,000 fused `x + 1` recursed
 * once per link and overflowed the C stack. Operands are visited in the
 * order build_pointwise visits them, so the expressions come out in the
 * same order as a recursive build would make them. A node is on the stack
 * at most once (a graph has no cycles), so n_nodes frames are enough. */
static kn_status build_operands_first(kctx *c, int root)
{
    int *node_at = malloc(sizeof(int) * 2 * (size_t)c->g->n_nodes);
    if (!node_at) return kn_error(KN_ERR_OOM, "fusion: out of host memory for %d nodes", c->g->n_nodes);
    int *next_operand = node_at + c->g->n_nodes;
    int depth = 0;
    kn_status st = KN_OK;
    node_at[depth] = root;
    next_operand[depth++] = 0;
    while (depth > 0 && st == KN_OK) {
        int node = node_at[depth - 1];
        const kn_node *n = &c->g->nodes[node];
        if (next_operand[depth - 1] < operands_built(n)) {
            int i = next_operand[depth - 1]++;
            int operand = n->in_node[i], unused;
            if (n->in_out[i] != 0 || c->memo_expr[operand] >= 0) continue; /* loaded, or built */
            if (built_from_operands(c, operand)) {
                node_at[depth] = operand;
                next_operand[depth++] = 0;
            } else {
                st = build_node(c, operand, &unused); /* a constant or a load */
            }
            continue;
        }
        depth--;
        if (node != root) { /* root is left to the caller */
            int unused;
            st = build_node(c, node, &unused);
        }
    }
    free(node_at);
    return st;
}

static kn_status build(kctx *c, int node, int out, int *res)
{
    if (out != 0) return mk_load(c, node, out, -1, res); /* a second output is always materialized */
    if (c->memo_expr[node] >= 0) {
        *res = c->memo_expr[node];
        return KN_OK;
    }
    if (built_from_operands(c, node)) KN_TRY(build_operands_first(c, node));
    return build_node(c, node, res);
}

static void kernel_name(kctx *c, int root, const char *what)
{
    kn_kernel *k = c->k;
    const kn_node *r = &c->g->nodes[root];
    char sizes[64] = "";
    size_t n = 0;
    for (int d = 0; d < r->out[0].ndim && n < sizeof sizes; d++)
        n += (size_t)snprintf(sizes + n, sizeof sizes - n, d ? "x%lld" : "%lld", (long long)r->out[0].shape[d]);
    if (!r->out[0].ndim) snprintf(sizes, sizeof sizes, "scalar");
    snprintf(k->name, sizeof k->name, "k%d_%s_%s_%s", c->kid, what, kn_dtype_name(r->out[0].dtype), sizes);
    for (char *p = k->name; *p; p++)
        if (*p == '-' || *p == '.' || *p == '+') *p = '_';
}

/* The output argument of a kernel: node's value, contiguous in its own
 * shape; `skip` (a row dim not kept) maps to stride 0. */
static kn_status out_arg(kctx *c, int node, int skip, bool keepdim, int *ai)
{
    const kn_meta *m = &c->g->nodes[node].out[0];
    int64_t cs[KN_MAX_DIMS];
    kn_contiguous_strides(m->ndim, m->shape, cs);
    kn_karg a;
    memset(&a, 0, sizeof a);
    a.node = node;
    a.dtype = m->dtype;
    a.is_output = true;
    for (int j = 0; j < c->k->ndim; j++) {
        int od = c->perm[j];
        if (od == skip) {
            a.strides[j] = 0;
            continue;
        }
        int md = (skip >= 0 && !keepdim && od > skip) ? od - 1 : od;
        md -= c->no - (skip >= 0 && !keepdim ? m->ndim + 1 : m->ndim);
        a.strides[j] = md >= 0 && md < m->ndim && m->shape[md] != 1 ? cs[md] : 0;
    }
    return kn_kernel_add_arg(c->k, &a, ai);
}

static void list_nodes(kctx *c, int root)
{
    (void)root; /* values riding on a row kernel may come after its root */
    for (int i = 0; i < c->g->n_nodes && c->k->n_nodes < KN_KIR_MAX_NODES; i++)
        if (c->f->kernel[i] == c->kid) c->k->nodes[c->k->n_nodes++] = i;
}

/* Node's input k is a constant equal to v. */
static bool input_is_const(const kn_graph *g, const kn_node *nd, int k, double v)
{
    const kn_node *p = &g->nodes[nd->in_node[k]];
    return p->op == KN_NODE_CONST && p->value == v;
}

/* The other input of a binary add of the constant v (on either side),
 * else -1. */
static int add_of_const(const kn_graph *g, int node, double v)
{
    const kn_node *nd = &g->nodes[node];
    if (nd->op != KN_OP_ADD || nd->n_in != 2 || nd->in_out[0] != 0 || nd->in_out[1] != 0) return -1;
    if (input_is_const(g, nd, 1, v)) return nd->in_node[0];
    if (input_is_const(g, nd, 0, v)) return nd->in_node[1];
    return -1;
}

int kn_fuse_wrapped_index(const kn_graph *g, int node, int64_t rows, int chain[4])
{
    int w = add_of_const(g, node, 1);
    if (w < 0 || g->nodes[w].op != KN_OP_WHERE || g->nodes[w].n_in != 3) return -1;
    const kn_node *wn = &g->nodes[w];
    int cond = wn->in_node[0], wrapped = wn->in_node[1], ix = wn->in_node[2];
    if (wn->in_out[0] != 0 || wn->in_out[1] != 0 || wn->in_out[2] != 0) return -1;
    const kn_node *cn = &g->nodes[cond];
    if (cn->op != KN_OP_LT || cn->n_in != 2 || cn->in_node[0] != ix || cn->in_out[0] != 0 ||
        !input_is_const(g, cn, 1, 0))
        return -1;
    if (add_of_const(g, wrapped, (double)rows) != ix) return -1;
    const kn_meta *m = &g->nodes[ix].out[0];
    if (m->ndim != 1 || (m->dtype != KN_I64 && m->dtype != KN_I32) || g->nodes[node].out[0].dtype != m->dtype)
        return -1;
    if (chain) {
        chain[0] = node;
        chain[1] = w;
        chain[2] = cond;
        chain[3] = wrapped;
    }
    return ix;
}

/* Whether node i is the arithmetic of an index that a gathered load of
 * this kernel wraps itself (kn_fuse_wrapped_index): the load's work, not
 * an op the kernel's name should lead with. */
static bool wraps_a_gathered_index(const kctx *c, int i, int root)
{
    const kn_graph *g = c->g;
    for (int s = i + 1; s <= root; s++) {
        const kn_node *sn = &g->nodes[s];
        if (c->f->kernel[s] != c->kid || sn->op != KN_OP_INDEX_SELECT || c->f->disp[sn->in_node[1]] != KN_D_INLINE)
            continue;
        int top = sn->in_node[1];
        int64_t rows = g->nodes[sn->in_node[0]].out[sn->in_out[0]].shape[0];
        int chain[4];
        if (kn_fuse_wrapped_index(g, top, rows, chain) < 0) continue;
        for (int k = 0; k < 4; k++)
            if (i == chain[k]) return true;
    }
    return false;
}

/* Whether node i belongs to a value riding on this kernel (kn_fusion.rides):
 * the kernel's name leads with its own ops. */
static bool rides_here(const kctx *c, int i)
{
    return c->f->rides && c->f->rides[i] && c->f->kernel[i] == c->kid;
}

/* A short name for what a kernel does: its ops, up to three. */
static void what_text(kctx *c, int root, char *buf, size_t size)
{
    size_t n = 0;
    int shown = 0;
    buf[0] = 0;
    for (int i = 0; i <= root; i++) {
        if (c->f->kernel[i] != c->kid || !kn_fuse_is_op(&c->g->nodes[i])) continue;
        if (wraps_a_gathered_index(c, i, root) || rides_here(c, i)) continue;
        if (shown == 3) {
            n += (size_t)snprintf(buf + n, size - n, "_etc");
            break;
        }
        char op[64]; /* "gather_scatter+relu" (an epilogue) becomes gather_scatter_relu in the name */
        n += (size_t)snprintf(buf + n, size - n, shown ? "_%s" : "%s", kn_node_label(&c->g->nodes[i], op, sizeof op));
        shown++;
        if (n >= size) break;
    }
}

static kn_status build_pointwise_kernel(kctx *c, int root)
{
    const kn_meta *m = &c->g->nodes[root].out[0];
    c->k->kind = KN_KERNEL_POINTWISE;
    c->k->ndim = c->no = m->ndim;
    memcpy(c->k->shape, m->shape, sizeof c->k->shape);
    memcpy(c->oshape, m->shape, sizeof c->oshape);
    for (int j = 0; j < m->ndim; j++) c->perm[j] = j;
    int e, o;
    KN_TRY(out_arg(c, root, -1, true, &o));
    KN_TRY(build_pointwise(c, root, &e));
    KN_TRY(mk_cast(c, e, m->dtype, &e));
    c->k->stores[c->k->n_stores++] = (kn_kstore){o, e, false};
    return KN_OK;
}

/* A ROW kernel's softmax or log_softmax of row x: max, x - max, exp, the
 * sum, then the quotient (or the log's difference), stored per element. */
static kn_status build_softmax_row(kctx *c, const kn_node *n, int root, int x, kn_kexpr a0, kn_kexpr a1)
{
    kn_kernel *k = c->k;
    kn_dtype dt = n->out[0].dtype;
    int o, acc0, acc1, t, r;
    /* max, x - max, exp, the sum and its log are steps of one op (in
     * the math type; in double where the target computes f32 math in
     * double, as eager): only the result is rounded to dt */
    kn_dtype mt = math_dtype(dt);
    KN_TRY(mk_cast(c, x, mt, &x));
    k->stages[k->n_stages++] = (kn_kstage){KN_OP_AMAX, x};
    a0.dtype = a1.dtype = mt;
    a0.internal = a1.internal = true;
    KN_TRY(add_expr(c, a0, &acc0));
    KN_TRY(mk_step(c, KN_OP_SUB, mt, x, acc0, -1, &t));
    int ex;
    KN_TRY(mk_step(c, KN_OP_EXP, mt, t, -1, -1, &ex));
    k->stages[k->n_stages++] = (kn_kstage){KN_OP_SUM, ex};
    KN_TRY(add_expr(c, a1, &acc1));
    if (n->op == KN_OP_SOFTMAX && mt != dt) {
        /* a half type: times the row's reciprocal, one multiply an
         * element instead of a division (within an f32 ulp of the
         * quotient, far below the half type's rounding) */
        int one, inv;
        KN_TRY(mk_const(c, 1.0, mt, &one));
        c->k->exprs[one].internal = true;
        KN_TRY(mk_step(c, KN_OP_DIV, mt, one, acc1, -1, &inv));
        KN_TRY(mk_step(c, KN_OP_MUL, mt, ex, inv, -1, &r));
    } else if (n->op == KN_OP_SOFTMAX) KN_TRY(mk_step(c, KN_OP_DIV, mt, ex, acc1, -1, &r));
    else {
        int lg;
        KN_TRY(mk_step(c, KN_OP_LOG, mt, acc1, -1, -1, &lg));
        KN_TRY(mk_step(c, KN_OP_SUB, mt, t, lg, -1, &r));
    }
    KN_TRY(mk_cast(c, r, dt, &r));
    KN_TRY(out_arg(c, root, -1, true, &o));
    k->stores[k->n_stores++] = (kn_kstore){o, r, false};
    return KN_OK;
}

/* A ROW kernel's layer_norm of row x (of len elements): mean and variance
 * over the row, then the normalized value times the weight plus the bias,
 * stored per element. */
static kn_status build_layer_norm_row(kctx *c, const kn_node *n, int root, int x, double len, kn_kexpr a0,
                                      kn_kexpr a1)
{
    kn_kernel *k = c->k;
    kn_dtype dt = n->out[0].dtype;
    int o, acc0, acc1, t, r;
    /* Statistics exact enough that a row of equal values normalizes to
     * exactly 0, not to rounding noise times 1/sqrt(eps): in f64 (as the
     * reference), or for the half types in f32 (internal steps, so a
     * target computing f32 math in double still uses double). A half
     * value has at most 11 significant bits, so any partial sum of up
     * to 2^13 equal values is exact in f32's 24, and sum / n then
     * gives the value back exactly; f32 keeps a GPU's row in f32
     * registers instead of converting every element to double. */
    bool half = dt == KN_BF16 || dt == KN_F16;
    kn_dtype st = half && len <= 8192 ? KN_F32 : KN_F64;
    int xs, nn, mean, var, eps, xm, sq;
    KN_TRY(mk_cast(c, x, st, &xs));
    c->k->exprs[xs].internal = true;
    k->stages[k->n_stages++] = (kn_kstage){KN_OP_SUM, xs};
    a0.dtype = a1.dtype = st;
    a0.internal = a1.internal = true;
    KN_TRY(add_expr(c, a0, &acc0));
    KN_TRY(mk_const(c, len, st, &nn));
    c->k->exprs[nn].internal = true;
    KN_TRY(mk_step(c, KN_OP_DIV, st, acc0, nn, -1, &mean));
    KN_TRY(mk_step(c, KN_OP_SUB, st, xs, mean, -1, &xm));
    KN_TRY(mk_step(c, KN_OP_MUL, st, xm, xm, -1, &sq));
    k->stages[k->n_stages++] = (kn_kstage){KN_OP_SUM, sq};
    KN_TRY(add_expr(c, a1, &acc1));
    KN_TRY(mk_step(c, KN_OP_DIV, st, acc1, nn, -1, &var));
    KN_TRY(mk_const(c, n->a.eps, st, &eps));
    c->k->exprs[eps].internal = true;
    KN_TRY(mk_step(c, KN_OP_ADD, st, var, eps, -1, &t));
    KN_TRY(mk_step(c, KN_OP_RSQRT, st, t, -1, -1, &t));
    KN_TRY(mk_step(c, KN_OP_MUL, st, xm, t, -1, &r));
    /* weight and bias: steps in the math type (double on the CPU, as
     * eager), the result rounded to dt once */
    kn_dtype mt = math_dtype(dt);
    if (n->n_in > 1) {
        KN_TRY(mk_cast(c, r, mt, &r));
        c->k->exprs[r].internal = true;
    }
    for (int i = 1; i < n->n_in; i++) {
        int p;
        KN_TRY(mk_load(c, n->in_node[i], n->in_out[i], -1, &p));
        KN_TRY(mk_cast(c, p, mt, &p));
        KN_TRY(mk_step(c, i == 1 ? KN_OP_MUL : KN_OP_ADD, mt, r, p, -1, &r));
    }
    KN_TRY(mk_cast(c, r, dt, &r));
    KN_TRY(out_arg(c, root, -1, true, &o));
    k->stores[k->n_stores++] = (kn_kstore){o, r, false};
    return KN_OK;
}

/* A ROW kernel's reduction of row x (of len elements) over dim d: sum,
 * mean, var, amax or amin, one value per row. */
static kn_status build_reduction_row(kctx *c, const kn_node *n, int root, int d, int x, double len, kn_kexpr a0,
                                     kn_kexpr a1)
{
    kn_kernel *k = c->k;
    kn_dtype dt = n->out[0].dtype;
    int o, acc0, acc1, r;
    /* reductions: one value per row; sums of floats accumulate in f64,
     * those of the half types in f32 steps (in double where the target
     * computes f32 math in double, as the CPU reference): the f32 sum's
     * error is far below a half type's rounding of the result, and a GPU
     * then does not convert every element to double */
    bool minmax = n->op == KN_OP_AMAX || n->op == KN_OP_AMIN;
    bool half = dt == KN_BF16 || dt == KN_F16;
    kn_dtype st = minmax ? dt : half ? KN_F32 : kn_dtype_is_float(dt) ? KN_F64 : KN_I64;
    KN_TRY(mk_cast(c, x, st, &x));
    if (half && !minmax) c->k->exprs[x].internal = true;
    int op = n->op == KN_OP_AMAX ? KN_OP_AMAX : n->op == KN_OP_AMIN ? KN_OP_AMIN : KN_OP_SUM;
    k->stages[k->n_stages++] = (kn_kstage){op, x};
    a0.dtype = a1.dtype = st;
    a0.internal = a1.internal = half && !minmax;
    KN_TRY(add_expr(c, a0, &acc0));
    r = acc0;
    if (n->op == KN_OP_MEAN || n->op == KN_OP_VAR) {
        int nn, mean;
        KN_TRY(mk_const(c, len, st, &nn));
        c->k->exprs[nn].internal = half;
        KN_TRY(mk_op(c, KN_OP_DIV, st, acc0, nn, -1, &mean));
        c->k->exprs[mean].internal = half;
        r = mean;
        if (n->op == KN_OP_VAR) {
            int xm, sq, den;
            KN_TRY(mk_op(c, KN_OP_SUB, st, x, mean, -1, &xm));
            KN_TRY(mk_op(c, KN_OP_MUL, st, xm, xm, -1, &sq));
            c->k->exprs[xm].internal = c->k->exprs[sq].internal = half;
            k->stages[k->n_stages++] = (kn_kstage){KN_OP_SUM, sq};
            KN_TRY(add_expr(c, a1, &acc1));
            KN_TRY(mk_const(c, len - n->a.correction, st, &den));
            KN_TRY(mk_op(c, KN_OP_DIV, st, acc1, den, -1, &r));
            c->k->exprs[den].internal = c->k->exprs[r].internal = half;
        }
    }
    KN_TRY(mk_cast(c, r, dt, &r));
    KN_TRY(out_arg(c, root, d, n->a.keepdim, &o));
    k->stores[k->n_stores++] = (kn_kstore){o, r, true};
    return KN_OK;
}

/* A ROW kernel: the row dim d of root's row input is iterated last, the
 * other dims are the rows; its body is its row op's. */
static kn_status build_row_kernel(kctx *c, int root, int d)
{
    const kn_graph *g = c->g;
    const kn_node *n = &g->nodes[root];
    const kn_meta *in = &g->nodes[n->in_node[0]].out[n->in_out[0]];
    kn_kernel *k = c->k;
    k->kind = KN_KERNEL_ROW;
    k->ndim = c->no = in->ndim;
    memcpy(c->oshape, in->shape, sizeof c->oshape);
    int j = 0;
    for (int od = 0; od < in->ndim; od++)
        if (od != d) c->perm[j++] = od;
    c->perm[j] = d;
    for (j = 0; j < k->ndim; j++) k->shape[j] = in->shape[c->perm[j]];
    kn_dtype dt = n->out[0].dtype;
    kn_dtype ct = kn_dtype_is_float(dt) ? dt : KN_I64;
    int x;
    double len = (double)in->shape[d];
    KN_TRY(build(c, n->in_node[0], n->in_out[0], &x));
    kn_kexpr a0 = kx(KN_KX_ACC, 0, ct), a1 = kx(KN_KX_ACC, 0, ct);
    a1.acc = 1;
    switch (n->op) {
    case KN_OP_SOFTMAX:
    case KN_OP_LOG_SOFTMAX: return build_softmax_row(c, n, root, x, a0, a1);
    case KN_OP_LAYER_NORM: return build_layer_norm_row(c, n, root, x, len, a0, a1);
    default: return build_reduction_row(c, n, root, d, x, len, a0, a1);
    }
}

/* Merge neighbouring dims of a pointwise kernel's iteration space where
 * every argument walks them as one (stride[d] == stride[d+1] * size[d+1]),
 * and drop dims of size 1. A contiguous kernel becomes one flat loop: on
 * the GPU that removes a 64-bit division and remainder per dim and element
 * from the index arithmetic, which had held a ReLU over 51 MB to a third
 * of the H100's bandwidth. Kernels that read loop indices (tril masks)
 * keep their dims. The name keeps the original shape. */
static void coalesce_dims(kn_kernel *k)
{
    for (int e = 0; e < k->n_exprs; e++)
        if (k->exprs[e].kind == KN_KX_INDEX) return;
    int nd = 0;
    int64_t shape[KN_MAX_DIMS];
    int64_t strides[KN_KIR_MAX_ARGS][KN_MAX_DIMS];
    for (int d = 0; d < k->ndim; d++) {
        if (k->shape[d] == 1 && k->ndim > 1) continue;
        bool merge = nd > 0;
        for (int a = 0; a < k->n_args && merge; a++)
            merge = strides[a][nd - 1] == k->args[a].strides[d] * k->shape[d];
        if (merge) {
            shape[nd - 1] *= k->shape[d];
            for (int a = 0; a < k->n_args; a++) strides[a][nd - 1] = k->args[a].strides[d];
        } else {
            shape[nd] = k->shape[d];
            for (int a = 0; a < k->n_args; a++) strides[a][nd] = k->args[a].strides[d];
            nd++;
        }
    }
    if (nd == 0) { /* every dim had size 1 */
        shape[0] = 1;
        for (int a = 0; a < k->n_args; a++) strides[a][0] = 0;
        nd = 1;
    }
    if (k->ndim == 0) return;
    k->ndim = nd;
    for (int d = 0; d < KN_MAX_DIMS; d++) k->shape[d] = d < nd ? shape[d] : 0;
    for (int a = 0; a < k->n_args; a++)
        for (int d = 0; d < KN_MAX_DIMS; d++) k->args[a].strides[d] = d < nd ? strides[a][d] : 0;
}

/* ---- the kernel of one group --------------------------------------------- */

kn_status kn_fuse_build_kernel(const kn_graph *g, kn_fusion *f, int root, kn_kernel_kind kind, int row_dim,
                               int *memo_expr, int *memo_arg)
{
    int kid = f->kernel[root];
    kn_kernel *k = &f->prog.kernels[kid];
    kctx c = {g, f, k, kid, 0, {0}, {0}, memo_expr, memo_arg};
    for (int m = 0; m < g->n_nodes; m++) memo_expr[m] = memo_arg[m] = -1;
    const kn_node *nd = &g->nodes[root];
    char what[48];
    /* named before its body is built: a limit hit while building
     * (kn_kernel_add_arg, _expr) names the kernel in its message */
    what_text(&c, root, what, sizeof what);
    if (nd->op == KN_OP_ATTENTION) snprintf(what, sizeof what, "attention"); /* the op's name is long */
    kernel_name(&c, root, what);
    kn_status st = KN_OK;
    if (kind == KN_KERNEL_POINTWISE) st = build_pointwise_kernel(&c, root);
    else if (kind == KN_KERNEL_ROW) st = build_row_kernel(&c, root, row_dim);
    else {
        k->kind = kind;
        k->ndim = nd->out[0].ndim;
        memcpy(k->shape, nd->out[0].shape, sizeof k->shape);
    }
    /* values riding on this row kernel: built over the rows' dims alone
     * (the space without its row dim, so their loads broadcast along the
     * row) and stored once a row */
    for (int m = 0; m < g->n_nodes && st == KN_OK && kind == KN_KERNEL_ROW && f->rides; m++) {
        if (!f->rides[m] || !f->stored[m] || f->kernel[m] != kid) continue; /* the value, not its steps */
        if (k->n_stores >= KN_KIR_MAX_STORES) {
            st = kn_error(KN_ERR_ARG, "kernel %s: more than %d stores", k->name, KN_KIR_MAX_STORES);
            break;
        }
        int e = -1, ai = -1, space = c.no;
        c.no = space - 1;
        st = build(&c, m, 0, &e);
        c.no = space;
        if (st == KN_OK) st = out_arg(&c, m, row_dim, false, &ai);
        if (st == KN_OK) k->stores[k->n_stores++] = (kn_kstore){.arg = ai, .expr = e, .per_row = true};
    }
    /* one-element values that joined this one-element kernel (kn_fusion.joins):
     * nothing here reads them, so they are built here, then stored below */
    for (int m = 0; m < root && st == KN_OK && kind == KN_KERNEL_POINTWISE && f->joins; m++) {
        if (!f->joins[m] || f->kernel[m] != kid || memo_expr[m] >= 0) continue;
        int e = -1;
        st = build(&c, m, 0, &e);
    }
    /* values computed here for readers in later kernels too (kn_fusion.stored) */
    for (int m = 0; m < root && st == KN_OK && (kind == KN_KERNEL_ROW || kind == KN_KERNEL_POINTWISE); m++) {
        if (!f->stored || !f->stored[m] || (f->rides && f->rides[m]) || f->kernel[m] != kid || memo_expr[m] < 0)
            continue;
        if (k->n_stores >= KN_KIR_MAX_STORES) {
            st = kn_error(KN_ERR_ARG, "kernel %s: more than %d stores", k->name, KN_KIR_MAX_STORES);
            break;
        }
        int ai;
        st = out_arg(&c, m, -1, true, &ai);
        if (st == KN_OK) k->stores[k->n_stores++] = (kn_kstore){.arg = ai, .expr = memo_expr[m], .per_row = false};
    }
    list_nodes(&c, root);
    if (k->kind == KN_KERNEL_POINTWISE) coalesce_dims(k);
    return st;
}

/* ---- the plan ------------------------------------------------------------ */

void kn_fusion_free(kn_fusion *f)
{
    free(f->disp);
    free(f->kernel);
    free(f->last_use);
    free(f->drop_head);
    free(f->drop_next);
    free(f->layout);
    free(f->kernel_at);
    free(f->why);
    free(f->edges);
    free(f->copies);
    free(f->limit_split);
    free(f->stored);
    free(f->rides);
    free(f->joins);
    kn_kprogram_free(&f->prog);
    memset(f, 0, sizeof *f);
}
