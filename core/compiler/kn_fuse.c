/* kn_fuse: which nodes share a kernel, and the kernel IR for each group.
 * See kn_fuse.h for the rules; every rule here is local and greedy, in node
 * order, so the grouping of a graph is easy to predict and to explain. */
#include "kn_fuse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_view.h"

/* The fusion reasons name ops by their source lines; a line too long for
 * KN_FUSE_REASON_MAX is cut, which is what the size is for. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

/* ---- classification ------------------------------------------------------ */

static bool is_op(const kn_node *n)
{
    return n->op < KN_OP_COUNT;
}

/* Ops a generated pointwise kernel computes element by element. */
static bool is_pointwise(const kn_node *n)
{
    if (!is_op(n)) return false;
    switch (kn_op_kind_of((kn_op)n->op)) {
    case KN_K_UNARY:
    case KN_K_BINARY:
    case KN_K_COMPARE:
    case KN_K_TERNARY:
    case KN_K_MASKED:
    case KN_K_COPY:
    case KN_K_TRI: return true;
    case KN_K_NORM: return n->op == KN_OP_BATCH_NORM;
    case KN_K_CREATE: return n->op == KN_OP_FULL || n->op == KN_OP_ARANGE;
    default: return false;
    }
}

/* The row dim of a row op (a reduction over one dim, softmax, layer_norm
 * over the last dim), or -1 when the op is not one a ROW kernel covers. */
static int row_dim(const kn_graph *g, const kn_node *n)
{
    if (!is_op(n)) return -1;
    const kn_meta *in = &g->nodes[n->in_node[0]].out[n->in_out[0]];
    switch (kn_op_kind_of((kn_op)n->op)) {
    case KN_K_SOFTMAX: return in->ndim ? n->a.dim : -1;
    case KN_K_REDUCE:
        if (n->a.ndims == 1) return n->a.dims[0];
        if (n->a.ndims == 0 && in->ndim == 1) return 0;
        return -1;
    case KN_K_NORM: return n->op == KN_OP_LAYER_NORM && n->a.nshape == 1 && in->ndim ? in->ndim - 1 : -1;
    default: return -1;
    }
}

static bool same_shape(const kn_meta *a, const kn_meta *b)
{
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

static void contiguous_layout(const kn_meta *m, kn_layout *l)
{
    l->ndim = m->ndim;
    memcpy(l->shape, m->shape, sizeof l->shape);
    kn_contiguous_strides(m->ndim, m->shape, l->strides);
}

/* The layout of a view node's value from its source's layout: the view
 * run on a header over no storage. A reshape the strides cannot express
 * copies at run time (kn_view_run), so its value is contiguous. */
/* A header for view node n's source laid out as src, over no storage: what
 * the view functions need to compute a layout, never released. */
static void layout_probe(const kn_node *n, const kn_layout *src, kn_tensor *probe)
{
    static kn_storage nothing = {1 << 30, KN_CPU, 0, NULL, true, 0};
    memset(probe, 0, sizeof *probe);
    probe->refcount = 1 << 30;
    probe->dtype = n->out[0].dtype;
    probe->ndim = src->ndim;
    memcpy(probe->shape, src->shape, sizeof probe->shape);
    memcpy(probe->strides, src->strides, sizeof probe->strides);
    probe->storage = &nothing;
}

static void view_layout(const kn_node *n, const kn_layout *src, kn_layout *out)
{
    kn_tensor probe;
    layout_probe(n, src, &probe);
    kn_tensor *v = NULL;
    kn_status st;
    if (n->op == KN_OP_RESHAPE) st = kn_view_view(&probe, n->a.nshape, n->a.shape, &v);
    else {
        kn_opcall c;
        kn_opcall_init(&c, (kn_op)n->op);
        c.a = n->a;
        c.n_in = 1;
        c.in[0] = &probe;
        st = kn_view_run(&c, &v);
    }
    if (st == KN_OK && v) {
        out->ndim = v->ndim;
        memcpy(out->shape, v->shape, sizeof out->shape);
        memcpy(out->strides, v->strides, sizeof out->strides);
        kn_tensor_release(v);
    } else {
        contiguous_layout(&n->out[0], out);
    }
}

/* ---- library outputs written permuted ------------------------------------ */

static void note_why(kn_fusion *f, const kn_graph *g, int a, const char *what, int b, const char *reason);

/* Whether node n runs as a LIBRARY kernel (its backend's library, or the
 * CPU reference): the kernel builder's rule, and the permuted layouts'. */
static bool runs_in_library(const kn_node *n)
{
    return n->op == KN_OP_MATMUL || n->op == KN_OP_CONV2D || n->op == KN_OP_ATTENTION || n->op == KN_OP_GATHER_SCATTER;
}

/* Whether reshape node n of a value laid out as src must copy. */
static bool reshape_copies(const kn_node *n, const kn_layout *src)
{
    kn_tensor probe;
    layout_probe(n, src, &probe);
    kn_tensor *v = NULL;
    kn_status st = kn_view_view(&probe, n->a.nshape, n->a.shape, &v);
    kn_tensor_release(v);
    return st != KN_OK;
}

/* The head merge of attention, `att:matmul(v):transpose(2, 3):reshape(...)`:
 * the reshape of a transposed value copies it. When a library kernel's
 * value is read only by a permute that such a reshape reads, and the
 * backend can write the library's output through strides (strided_out),
 * its value is laid out so that the permute is contiguous: the library
 * writes straight into the bytes the copy would have made, and the copy is
 * gone. The layouts of the views after it follow. Op-agnostic: any library
 * kernel whose backend says yes. */
static void permuted_library_outputs(const kn_graph *g, kn_fusion *f, const int *uses, const int *consumer,
                                     const bool *is_out, kn_fuse_strided_out_fn strided_out, void *ud)
{
    int n = g->n_nodes;
    bool changed = false;
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        if (f->disp[i] != KN_D_ROOT || !runs_in_library(nd) || is_out[i] || uses[i] != 1 || nd->n_out != 1) continue;
        int c = consumer[i];
        const kn_node *pn = &g->nodes[c];
        if (pn->op != KN_OP_PERMUTE || f->disp[c] != KN_D_VIEW || pn->in_out[0] != 0 || pn->a.ndims != nd->out[0].ndim)
            continue;
        int nd_ = pn->a.ndims, inv[KN_MAX_DIMS];
        bool perm = true, identity = true;
        for (int d = 0; d < nd_; d++) inv[d] = -1;
        for (int j = 0; j < nd_ && perm; j++) {
            int d = pn->a.dims[j] < 0 ? pn->a.dims[j] + nd_ : pn->a.dims[j];
            perm = d >= 0 && d < nd_ && inv[d] < 0;
            if (perm) inv[d] = j;
            identity = identity && d == j;
        }
        if (!perm || identity) continue;
        int reshape = -1;
        for (int j = c + 1; j < n && reshape < 0; j++)
            if (g->nodes[j].op == KN_OP_RESHAPE && f->disp[j] == KN_D_VIEW && g->nodes[j].in_node[0] == c &&
                reshape_copies(&g->nodes[j], &f->layout[c]))
                reshape = j;
        if (reshape < 0) continue;
        /* the permute's value contiguous: dim d of the library's value
         * is dim inv[d] of the permute's */
        int64_t pc[KN_MAX_DIMS];
        kn_contiguous_strides(nd_, pn->out[0].shape, pc);
        kn_layout want = f->layout[i];
        for (int d = 0; d < nd_; d++) want.strides[d] = pc[inv[d]];
        if (!strided_out || !strided_out(ud, g, i, &want)) {
            note_why(f, g, i, "is copied by", reshape, "the backend cannot write this library call's output permuted");
            continue;
        }
        f->layout[i] = want;
        f->n_permuted++;
        changed = true;
        note_why(f, g, i, "writes its value permuted for", c, "the reshape after it copies nothing");
    }
    if (!changed) return;
    for (int i = 0; i < n; i++)
        if (f->disp[i] == KN_D_VIEW) view_layout(&g->nodes[i], &f->layout[g->nodes[i].in_node[0]], &f->layout[i]);
}

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

/* Load node `node`'s value; its dim vd is original dim first_odim + vd
 * (first_odim < 0: right-aligned broadcasting). */
static kn_status mk_load(kctx *c, int node, int out, int first_odim, int *res)
{
    const kn_layout *l = &c->f->layout[node];
    const kn_meta *m = &c->g->nodes[node].out[out];
    kn_karg a;
    memset(&a, 0, sizeof a);
    a.node = node;
    a.out = out;
    a.dtype = m->dtype;
    int base = first_odim >= 0 ? first_odim : c->no - m->ndim;
    for (int j = 0; j < c->k->ndim; j++) {
        int vd = c->perm[j] - base;
        a.strides[j] = (vd >= 0 && vd < m->ndim && m->shape[vd] != 1) ? l->strides[vd] : 0;
    }
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
    if (n->op == KN_OP_BATCH_NORM) { /* params are per channel: dim 1 of x */
        /* steps in the math type, the result rounded once (as eager) */
        kn_dtype mt = math_dtype(dt);
        KN_TRY(build(c, n->in_node[0], n->in_out[0], &e[0]));
        KN_TRY(mk_cast(c, e[0], mt, &e[0]));
        for (int i = 1; i < n->n_in; i++) {
            KN_TRY(mk_load(c, n->in_node[i], n->in_out[i], 1, &e[i]));
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
    if (n->op == KN_OP_BATCH_NORM) return 1;
    if (n->op == KN_OP_FULL || n->op == KN_OP_ARANGE) return 0;
    return n->n_in;
}

/* The expression of one node whose first outputs are built already. */
static kn_status build_node(kctx *c, int node, int *res)
{
    const kn_node *n = &c->g->nodes[node];
    kn_status st;
    if (n->op == KN_NODE_CONST) st = mk_const(c, n->value, n->out[0].dtype, res);
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
    for (int i = 0; i <= root && c->k->n_nodes < KN_KIR_MAX_NODES; i++)
        if (c->f->kernel[i] == c->kid) c->k->nodes[c->k->n_nodes++] = i;
}

/* A short name for what a kernel does: its ops, up to three. */
static void what_text(kctx *c, int root, char *buf, size_t size)
{
    size_t n = 0;
    int shown = 0;
    buf[0] = 0;
    for (int i = 0; i <= root; i++) {
        if (c->f->kernel[i] != c->kid || !is_op(&c->g->nodes[i])) continue;
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
    int x, o, acc0, acc1, t, r;
    double len = (double)in->shape[d];
    KN_TRY(build(c, n->in_node[0], n->in_out[0], &x));
    kn_kexpr a0 = kx(KN_KX_ACC, 0, ct), a1 = kx(KN_KX_ACC, 0, ct);
    a1.acc = 1;
    switch (n->op) {
    case KN_OP_SOFTMAX:
    case KN_OP_LOG_SOFTMAX: {
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
    case KN_OP_LAYER_NORM: {
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
    default: break;
    }
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
    kn_kprogram_free(&f->prog);
    memset(f, 0, sizeof *f);
}

/* "matmul (f.lua:20)": an op as the user wrote it, for every message
 * fusion gives (node numbers appear nowhere a user looks). */
static void node_text(const kn_graph *g, int i, char *buf, size_t size)
{
    const kn_node *n = &g->nodes[i];
    char op[64];
    snprintf(buf, size, "%s (%s)", kn_node_label(n, op, sizeof op), n->where[0] ? n->where : "no source line");
}

static void note_text(kn_fusion *f, const char *line)
{
    size_t old = f->why ? strlen(f->why) : 0, n = strlen(line);
    char *p = realloc(f->why, old + n + 1);
    if (!p) return;
    memcpy(p + old, line, n + 1);
    f->why = p;
}

/* "A (f:1) <what> B (f:2): reason" */
static void note_why(kn_fusion *f, const kn_graph *g, int a, const char *what, int b, const char *reason)
{
    char an[KN_WHERE_MAX + 40], bn[KN_WHERE_MAX + 40], line[2 * KN_WHERE_MAX + 400];
    node_text(g, a, an, sizeof an);
    node_text(g, b, bn, sizeof bn);
    snprintf(line, sizeof line, "%s %s %s: %s\n", an, what, bn, reason);
    note_text(f, line);
}

/* Why node n has no generated kernel (its kernel is FALLBACK). */
static const char *fallback_why(const kn_graph *g, const kn_node *n)
{
    switch (kn_op_kind_of((kn_op)n->op)) {
    case KN_K_REDUCE:
        return g->nodes[n->in_node[0]].out[n->in_out[0]].ndim > 1 && n->a.ndims != 1
                   ? "a reduction over several dims or all of them, which a row kernel (one dim) does not cover"
                   : "a reduction no row kernel covers";
    case KN_K_NORM: return "a norm over more than the last dim, which a row kernel does not cover";
    case KN_K_ARGREDUCE: return "an index reduction, which no generated kernel covers";
    case KN_K_CAT: return "a concatenation, which no generated kernel covers";
    case KN_K_INDEX: return "an indexing op, which no generated kernel covers";
    case KN_K_POOL: return "a pooling op, which no generated kernel covers";
    default: return "an op no generated kernel covers";
    }
}

/* The nodes that read node p (x * x is one reader; uses[] counts two). */
static int readers(const kn_graph *g, const kn_fusion *f, int p)
{
    int n = 0;
    for (int j = p + 1; j < g->n_nodes; j++) {
        if (f->disp[j] == KN_D_DEAD) continue;
        bool reads = false;
        for (int k = 0; k < g->nodes[j].n_in && !reads; k++) reads = g->nodes[j].in_node[k] == p;
        n += reads;
    }
    return n;
}

/* Why consumer c's kernel reads producer p's value from memory instead of
 * computing it inline: the rule of kn_fuse_ex that kept them apart, in
 * the order that rule is checked, naming both ops by name and line. */
static void edge_reason(const kn_graph *g, const kn_fusion *f, const int *uses, const bool *is_out, int p, int c,
                        int view, bool view_copies, char *buf, size_t size)
{
    char P[KN_WHERE_MAX + 40], C[KN_WHERE_MAX + 40], V[KN_WHERE_MAX + 40];
    node_text(g, p, P, sizeof P);
    node_text(g, c, C, sizeof C);
    if (view >= 0) node_text(g, view, V, sizeof V);
    const kn_node *pn = &g->nodes[p], *cn = &g->nodes[c];
    const kn_kernel *pk = &f->prog.kernels[f->kernel[p]], *ck = &f->prog.kernels[f->kernel[c]];
    int ci = 0;
    while (ci < cn->n_in && cn->in_node[ci] != p && view < 0) ci++;
    if (runs_in_library(pn))
        snprintf(buf, size, "%s is a library call, which writes its value to memory, so %s reads it in another kernel",
                 P, C);
    else if (runs_in_library(cn))
        snprintf(buf, size, "%s is a library call, which reads its inputs from memory, so its producer %s ends a kernel",
                 C, P);
    else if (pk->kind == KN_KERNEL_FALLBACK)
        snprintf(buf, size, "%s is %s; it runs alone, so %s reads its value from memory", P, fallback_why(g, pn), C);
    else if (pk->kind == KN_KERNEL_ROW && f->kernel_at[f->kernel[p]] == p)
        snprintf(buf, size,
                 "%s is a row op, and a row kernel ends at its row op (nothing after it joins), so %s starts "
                 "another kernel",
                 P, C);
    else if (view >= 0 && view_copies)
        snprintf(buf, size, "%s reads %s through %s, which copies it (its strides cannot express the new shape), so %s "
                            "ends a kernel",
                 C, P, V, P);
    else if (view >= 0)
        snprintf(buf, size, "%s reads %s through the view %s; fusion does not inline across a view, so %s ends a kernel",
                 C, P, V, P);
    else if (is_out[p])
        snprintf(buf, size, "%s is an output of the graph, so its value is stored and %s reads it back", P, C);
    else if (uses[p] > 1 && readers(g, f, p) == 1)
        snprintf(buf, size, "%s reads %s more than once, and fusion inlines only a value read once, so %s ends a kernel",
                 C, P, P);
    else if (uses[p] > 1)
        snprintf(buf, size, "%s has %d readers (%s is one), so its value is computed once and stored", P,
                 readers(g, f, p), C);
    else if (ck->kind == KN_KERNEL_FALLBACK)
        snprintf(buf, size, "%s is %s, so its producer %s ends a kernel", C, fallback_why(g, cn), P);
    else if (row_dim(g, cn) >= 0 && cn->in_node[0] != p)
        snprintf(buf, size, "%s reads %s as a parameter, not as the row it reduces, so %s ends a kernel", C, P, P);
    else if (row_dim(g, cn) >= 0 && ci < cn->n_in && cn->in_out[ci] != 0)
        snprintf(buf, size, "%s reads a second output of %s, so %s ends a kernel", C, P, P);
    else if (!same_shape(&pn->out[0], &cn->out[0]))
        snprintf(buf, size, "%s broadcasts %s to a larger shape; computing it once is cheaper than once per element, so "
                            "%s ends a kernel",
                 C, P, P);
    else if (cn->op == KN_OP_BATCH_NORM)
        snprintf(buf, size, "%s reads %s as a parameter, so %s ends a kernel", C, P, P);
    else if (!is_pointwise(pn) && row_dim(g, pn) < 0)
        snprintf(buf, size, "%s has no element-by-element form to inline, so %s reads its value from memory", P, C);
    else
        snprintf(buf, size, "%s and %s are in different kernels (no fusion rule joins them)", P, C);
    size_t len = strlen(buf);
    if (view >= 0 && !view_copies && !strstr(buf, V) && len < size) /* q, k and v of one value: which one this is */
        len += (size_t)snprintf(buf + len, size - len, "; it reads it through %s", V);
    if (len >= size) return;
    if (view_copies && !strstr(buf, "which copies it") && len < size)
        snprintf(buf + len, size - len, "; on the way %s copies the value every call (its strides cannot express the "
                                        "new shape)",
                 V);
}

/* Every edge that crosses kernels, with its reason (kn_fusion.edges). */
static kn_status find_edges(const kn_graph *g, kn_fusion *f, const int *uses, const bool *is_out)
{
    int cap = 0;
    for (int c = 0; c < g->n_nodes; c++) {
        if (f->disp[c] != KN_D_ROOT && f->disp[c] != KN_D_INLINE) continue;
        const kn_node *cn = &g->nodes[c];
        for (int k = 0; k < cn->n_in; k++) {
            int p = cn->in_node[k], view = -1;
            bool copies = false;
            while (p >= 0 && f->disp[p] == KN_D_VIEW) {
                if (view < 0) view = p;
                copies = copies || f->copies[p];
                p = g->nodes[p].in_node[0];
            }
            if (p < 0 || (f->disp[p] != KN_D_ROOT && f->disp[p] != KN_D_INLINE)) continue;
            if (f->kernel[p] == f->kernel[c] || f->kernel[p] < 0) continue;
            bool seen = false; /* x * x reads x once; q, k and v of one value are three views */
            for (int e = f->n_edges - 1; e >= 0 && !seen && f->edges[e].consumer == c; e--)
                seen = f->edges[e].producer == p && f->edges[e].view == view;
            if (seen) continue;
            if (f->n_edges == cap) {
                int ncap = cap ? 2 * cap : 16;
                kn_fuse_edge *ne = realloc(f->edges, sizeof *ne * (size_t)ncap);
                if (!ne) return kn_error(KN_ERR_OOM, "out of host memory explaining kernels");
                f->edges = ne;
                cap = ncap;
            }
            kn_fuse_edge *e = &f->edges[f->n_edges++];
            e->producer = p;
            e->consumer = c;
            e->from_kernel = f->kernel[p];
            e->to_kernel = f->kernel[c];
            e->view = view;
            edge_reason(g, f, uses, is_out, p, c, view, copies, e->reason, sizeof e->reason);
        }
    }
    return KN_OK;
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

kn_status kn_fuse(const kn_graph *g, const int *outputs, int n_outputs, kn_fusion *f)
{
    return kn_fuse_ex(g, outputs, n_outputs, NULL, NULL, f);
}

kn_status kn_fuse_ex(const kn_graph *g, const int *outputs, int n_outputs, kn_fuse_strided_out_fn strided_out,
                     void *ud, kn_fusion *f)
{
    memset(f, 0, sizeof *f);
    int n = g->n_nodes;
    f->n_nodes = n;
    f->disp = calloc((size_t)n + 1, sizeof *f->disp);
    f->kernel = malloc(sizeof *f->kernel * ((size_t)n + 1));
    f->last_use = malloc(sizeof *f->last_use * ((size_t)n + 1));
    f->layout = calloc((size_t)n + 1, sizeof *f->layout);
    int *uses = calloc((size_t)n + 1, sizeof *uses), *consumer = malloc(sizeof *consumer * ((size_t)n + 1));
    bool *is_out = calloc((size_t)n + 1, sizeof *is_out), *needed = calloc((size_t)n + 1, sizeof *needed);
    int *memo_e = malloc(sizeof *memo_e * ((size_t)n + 1)), *memo_a = malloc(sizeof *memo_a * ((size_t)n + 1));
    kn_status st = KN_OK;
    if (!f->disp || !f->kernel || !f->last_use || !f->layout || !uses || !consumer || !is_out || !needed ||
        !memo_e || !memo_a) {
        st = kn_error(KN_ERR_OOM, "out of host memory planning kernels");
        goto done;
    }
    for (int i = 0; i < n_outputs; i++)
        if (outputs[i] >= 0 && outputs[i] < n) is_out[outputs[i]] = needed[outputs[i]] = true;
    for (int i = n - 1; i >= 0; i--)
        if (needed[i])
            for (int k = 0; k < g->nodes[i].n_in; k++) needed[g->nodes[i].in_node[k]] = true;
    for (int i = 0; i < n; i++) {
        f->kernel[i] = -1;
        f->last_use[i] = is_out[i] ? n : -1;
        consumer[i] = -1;
    }
    for (int i = 0; i < n; i++) {
        if (!needed[i]) continue;
        const kn_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_in; k++) {
            int p = nd->in_node[k];
            uses[p]++;
            consumer[p] = i;
        }
    }
    /* dispositions and layouts, in node order */
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        if (!needed[i]) {
            f->disp[i] = KN_D_DEAD;
            continue;
        }
        if (nd->op == KN_NODE_INPUT) {
            const kn_graph_input *in = &g->inputs[nd->input];
            f->disp[i] = KN_D_INPUT;
            f->layout[i].ndim = in->meta.ndim;
            memcpy(f->layout[i].shape, in->meta.shape, sizeof f->layout[i].shape);
            memcpy(f->layout[i].strides, in->strides, sizeof f->layout[i].strides);
            continue;
        }
        if (nd->op == KN_NODE_CONST) {
            f->disp[i] = KN_D_CONST;
            contiguous_layout(&nd->out[0], &f->layout[i]);
            continue;
        }
        if (kn_op_kind_of((kn_op)nd->op) == KN_K_VIEW) {
            f->disp[i] = KN_D_VIEW;
            view_layout(nd, &f->layout[nd->in_node[0]], &f->layout[i]);
            continue;
        }
        contiguous_layout(&nd->out[0], &f->layout[i]);
        f->disp[i] = KN_D_ROOT;
        /* inline into the one consumer when it is pointwise over the same
         * shape, or a row op reading this as its row input */
        if (!is_pointwise(nd) || uses[i] != 1 || is_out[i]) continue;
        int cidx = consumer[i];
        const kn_node *cn = &g->nodes[cidx];
        const char *why = NULL;
        if (is_pointwise(cn)) {
            if (!same_shape(&nd->out[0], &cn->out[0])) why = "a different shape (broadcast: computed once instead)";
            else if (cn->op == KN_OP_BATCH_NORM && cn->in_node[0] != i) why = "a batch_norm parameter";
        } else if (row_dim(g, cn) >= 0) {
            if (cn->in_node[0] != i) why = "not the row input of the reduction";
            else if (cn->in_out[0] != 0) why = "a second output";
        } else {
            why = is_op(cn) ? "its consumer is not generated code (library call, view or reference op)" : "an output";
        }
        if (why) continue; /* find_edges says why, with both ops' lines */
        f->disp[i] = KN_D_INLINE;
    }
    permuted_library_outputs(g, f, uses, consumer, is_out, strided_out, ud);
    f->copies = calloc((size_t)n + 1, sizeof *f->copies);
    if (!f->copies) {
        st = kn_error(KN_ERR_OOM, "out of host memory planning kernels");
        goto done;
    }
    for (int i = 0; i < n; i++) /* the copies left: a reshape its source's strides cannot express */
        if (f->disp[i] == KN_D_VIEW && g->nodes[i].op == KN_OP_RESHAPE &&
            reshape_copies(&g->nodes[i], &f->layout[g->nodes[i].in_node[0]])) {
            f->n_view_copies++;
            f->copies[i] = true;
            note_why(f, g, i, "copies", g->nodes[i].in_node[0],
                     "a reshape of a layout its strides cannot express, once per call");
        }
    /* kernels: one per root, in node order; inlined nodes join their consumer's */
    int nk = 0;
    for (int i = 0; i < n; i++) nk += f->disp[i] == KN_D_ROOT;
    f->prog.kernels = calloc((size_t)nk + 1, sizeof *f->prog.kernels);
    f->kernel_at = malloc(sizeof *f->kernel_at * ((size_t)nk + 1));
    if (!f->prog.kernels || !f->kernel_at) {
        st = kn_error(KN_ERR_OOM, "out of host memory planning kernels");
        goto done;
    }
    int kid = 0;
    for (int i = 0; i < n; i++)
        if (f->disp[i] == KN_D_ROOT) f->kernel[i] = kid++;
    for (int i = n - 1; i >= 0; i--)
        if (f->disp[i] == KN_D_INLINE) f->kernel[i] = f->kernel[consumer[i]];
    for (int i = 0; i < n && st == KN_OK; i++) {
        if (f->disp[i] != KN_D_ROOT) continue;
        kid = f->kernel[i];
        kn_kernel *k = &f->prog.kernels[kid];
        f->kernel_at[kid] = i;
        k->lib_node = i;
        kctx c = {g, f, k, kid, 0, {0}, {0}, memo_e, memo_a};
        for (int m = 0; m < n; m++) memo_e[m] = memo_a[m] = -1;
        const kn_node *nd = &g->nodes[i];
        char what[48];
        /* named before its body is built: a limit hit while building
         * (kn_kernel_add_arg, _expr) names the kernel in its message */
        what_text(&c, i, what, sizeof what);
        if (nd->op == KN_OP_ATTENTION) snprintf(what, sizeof what, "attention"); /* the op's name is long */
        kernel_name(&c, i, what);
        int d = row_dim(g, nd);
        if (is_pointwise(nd)) st = build_pointwise_kernel(&c, i);
        else if (d >= 0) st = build_row_kernel(&c, i, d);
        else {
            k->kind = runs_in_library(nd) ? KN_KERNEL_LIBRARY : KN_KERNEL_FALLBACK;
            k->ndim = nd->out[0].ndim;
            memcpy(k->shape, nd->out[0].shape, sizeof k->shape);
        }
        list_nodes(&c, i);
        if (k->kind == KN_KERNEL_POINTWISE) coalesce_dims(k);
        f->prog.n_kernels++;
    }
    if (st == KN_OK) st = find_edges(g, f, uses, is_out);
    /* lifetimes: a value is read where its reader runs: an inlined node
     * runs inside its kernel, at the kernel's root */
    f->drop_head = malloc(sizeof *f->drop_head * ((size_t)n + 1));
    f->drop_next = malloc(sizeof *f->drop_next * ((size_t)n + 1));
    if (st == KN_OK && (!f->drop_head || !f->drop_next)) st = kn_error(KN_ERR_OOM, "out of host memory planning kernels");
    for (int i = 0; st == KN_OK && i < n; i++) {
        f->drop_head[i] = -1;
        f->drop_next[i] = -1;
    }
    for (int i = 0; st == KN_OK && i < n; i++) {
        if (f->disp[i] == KN_D_DEAD) continue;
        int pos = f->disp[i] == KN_D_INLINE ? f->kernel_at[f->kernel[i]] : i;
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int src = g->nodes[i].in_node[k];
            if (f->last_use[src] != n && f->last_use[src] < pos) f->last_use[src] = pos;
        }
    }
    for (int i = 0; st == KN_OK && i < n; i++) {
        int at = f->last_use[i];
        if (at < 0 || at >= n || f->disp[i] == KN_D_INLINE || f->disp[i] == KN_D_DEAD) continue;
        f->drop_next[i] = f->drop_head[at];
        f->drop_head[at] = i;
    }
done:
    free(uses);
    free(consumer);
    free(is_out);
    free(needed);
    free(memo_e);
    free(memo_a);
    if (st != KN_OK) kn_fusion_free(f);
    return st;
}
