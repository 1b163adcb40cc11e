/* kn_fuse_group: which nodes share a kernel (kn_fuse_ex; the rules are in
 * kn_fuse.h). Every rule here is local and greedy, in node order, so the
 * grouping of a graph is easy to predict and to explain: each node gets
 * its disposition and layout, library outputs may be laid out permuted
 * for the reshape after them, each root's kernel is built (kn_fuse.c),
 * every edge between kernels gets its reason, and every value the
 * position where it dies. */
#include "kn_fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_fuse_internal.h"
#include "kn_view.h"

/* The fusion reasons name ops by their source lines; a line too long for
 * KN_FUSE_REASON_MAX is cut, which is what the size is for. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

/* ---- classification ------------------------------------------------------ */

/* Ops a generated pointwise kernel computes element by element. */
static bool is_pointwise(const kn_node *n)
{
    if (!kn_fuse_is_op(n)) return false;
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
    if (!kn_fuse_is_op(n)) return -1;
    const kn_meta *in = &g->nodes[n->in_node[0]].out[n->in_out[0]];
    switch (kn_op_kind_of((kn_op)n->op)) {
    case KN_K_SOFTMAX: return in->ndim ? n->a.dim : -1;
    case KN_K_REDUCE:
        if (n->a.widen) return -1; /* the backend's kernels convert as they read */
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

/* ---- the plan ------------------------------------------------------------ */

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
        if (n->a.widen) return "a reduction into a wider float than its input's, which the backend's kernel converts as it reads";
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
    if (f->stored && f->stored[p])
        snprintf(buf, size,
                 "%s is computed in the kernel of its first reader, a row op, which stores it; %s reads it from "
                 "memory after that kernel",
                 P, C);
    else if (runs_in_library(pn))
        snprintf(buf, size, "%s is a library call, which writes its value to memory, so %s reads it in another kernel",
                 P, C);
    else if (runs_in_library(cn))
        snprintf(buf, size, "%s is a library call, which reads its inputs from memory, so its producer %s ends a kernel",
                 C, P);
    else if (cn->op == KN_OP_INDEX_SELECT && f->disp[c] == KN_D_INLINE)
        snprintf(buf, size,
                 "%s gathers its rows inside the kernel that reads them, where each row's address needs its index "
                 "from memory, so %s ends a kernel",
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
    else if (!same_shape(&pn->out[0], &cn->out[0]) && pn->op != KN_OP_FULL)
        snprintf(buf, size, "%s broadcasts %s to a larger shape; computing it once is cheaper than once per element, so "
                            "%s ends a kernel",
                 C, P, P);
    else if (cn->op == KN_OP_BATCH_NORM)
        snprintf(buf, size, "%s reads %s as a parameter, so %s ends a kernel", C, P, P);
    else if (!is_pointwise(pn) && row_dim(g, pn) < 0)
        snprintf(buf, size, "%s has no element-by-element form to inline, so %s reads its value from memory", P, C);
    else if (f->limit_split && f->limit_split[p])
        snprintf(buf, size,
                 "with %s inlined, the kernel of %s would pass the kernel IR's limits (%d buffers, %d expressions), "
                 "so %s ends a kernel",
                 P, C, KN_KIR_MAX_ARGS, KN_KIR_MAX_EXPRS, P);
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

/* Which nodes the outputs need (`needed`), which are outputs (`is_out`),
 * how many reads of each value the needed nodes make (`uses`) and the last
 * node that reads it (`consumer`); no kernel and no lifetime yet. */
static void find_uses(const kn_graph *g, const int *outputs, int n_outputs, kn_fusion *f, int *uses, int *consumer,
                      int *first_reader, bool *is_out, bool *needed)
{
    int n = g->n_nodes;
    for (int i = 0; i < n_outputs; i++)
        if (outputs[i] >= 0 && outputs[i] < n) is_out[outputs[i]] = needed[outputs[i]] = true;
    for (int i = n - 1; i >= 0; i--)
        if (needed[i])
            for (int k = 0; k < g->nodes[i].n_in; k++) needed[g->nodes[i].in_node[k]] = true;
    for (int i = 0; i < n; i++) {
        f->kernel[i] = -1;
        f->last_use[i] = is_out[i] ? n : -1;
        consumer[i] = first_reader[i] = -1;
    }
    for (int i = 0; i < n; i++) {
        if (!needed[i]) continue;
        const kn_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_in; k++) {
            int p = nd->in_node[k];
            uses[p]++;
            consumer[p] = i;
            if (first_reader[p] < 0) first_reader[p] = i;
        }
    }
}

/* Whether row op c reads node p only as its row (input 0), not also as
 * a parameter. */
static bool reads_only_as_row(const kn_node *c, int p)
{
    if (c->in_node[0] != p || c->in_out[0] != 0) return false;
    for (int k = 1; k < c->n_in; k++)
        if (c->in_node[k] == p) return false;
    return true;
}

/* Whether node n reads a matmul's value: a bias or residual add there may
 * go into the matmul's library epilogue (kn_plan_epilogue.c), which a
 * row kernel holding the add prevents (the transformer sample's
 * `x + proj(y)` before its second layer norm): see residual_in_row. */
static bool reads_a_matmul(const kn_graph *g, const kn_node *n, const int *uses, int depth)
{
    for (int k = 0; k < n->n_in; k++) {
        const kn_node *p = &g->nodes[n->in_node[k]];
        if (p->op == KN_OP_MATMUL) return true;
        /* through the pointwise producers inlined into n (the bias add) */
        if (depth < 4 && uses[n->in_node[k]] == 1 && is_pointwise(p) && reads_a_matmul(g, p, uses, depth + 1))
            return true;
    }
    return false;
}

/* Whether a residual sum of dtype dt that reads a matmul's value
 * (x + proj(y) + b) goes into its row kernel too, rather than waiting for
 * the matmul's library epilogue to take the adds. In the half types the
 * row kernel folds the adds into the row it holds anyway, on packed pairs
 * (kn_kir_row.c: row_fold), and cuBLASLt's residual epilogue cost more: on
 * the H200, GPT-2 bf16 went from 218.3-219.2 to 211.9-212.3 us a call (its
 * 768-wide GEMMs from 8.7 to 7.3 us, its layer norms from 2.15 to 2.85
 * with the adds and the sum's store), and the transformer sample stayed
 * at 94 us. In f32 the two forms were within 0.6% either way (GPT-2 a
 * little faster in the row, the sample a little slower), so f32 keeps the
 * epilogue (bench/results/2026-11-30-h200-transformers6.md).
 * KILN_RESIDUAL_IN_ROW=0 or 1 takes one form for every dtype, for
 * measuring. */
static bool residual_in_row(kn_dtype dt)
{
    const char *v = getenv("KILN_RESIDUAL_IN_ROW");
    if (v && strcmp(v, "0") == 0) return false;
    if (v && strcmp(v, "1") == 0) return true;
    return dt == KN_BF16 || dt == KN_F16;
}

/* Every node's disposition and layout, in node order. */
static void assign_dispositions(const kn_graph *g, kn_fusion *f, const int *uses, int *consumer,
                                const int *first_reader, const bool *is_out, const bool *needed)
{
    int n = g->n_nodes;
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
        /* read by several, first by a row op as its row (the residual sum
         * before a pre-norm transformer's layer norm, also read by the
         * next residual add): computed in that row kernel, which stores
         * it for the readers after it; a kernel and a pass over the
         * value fewer. The row op is its first reader, so every other
         * runs after that kernel. */
        if (is_pointwise(nd) && uses[i] > 1 && !is_out[i] && first_reader[i] >= 0 &&
            (residual_in_row(nd->out[0].dtype) || !reads_a_matmul(g, nd, uses, 0)) &&
            row_dim(g, &g->nodes[first_reader[i]]) >= 0 && reads_only_as_row(&g->nodes[first_reader[i]], i)) {
            f->disp[i] = KN_D_INLINE;
            f->stored[i] = true;
            consumer[i] = first_reader[i];
            continue;
        }
        /* inline into the one consumer when it is pointwise over the same
         * shape, or a row op reading this as its row input */
        if (!is_pointwise(nd) || uses[i] != 1 || is_out[i]) continue;
        int cidx = consumer[i];
        const kn_node *cn = &g->nodes[cidx];
        const char *why = NULL;
        if (is_pointwise(cn)) {
            /* a full is one number wherever it is read: broadcast, it costs
             * nothing inline, and a kernel of its own a launch per call */
            if (!same_shape(&nd->out[0], &cn->out[0]) && nd->op != KN_OP_FULL)
                why = "a different shape (broadcast: computed once instead)";
            else if (cn->op == KN_OP_BATCH_NORM && cn->in_node[0] != i) why = "a batch_norm parameter";
        } else if (row_dim(g, cn) >= 0) {
            if (cn->in_node[0] != i) why = "not the row input of the reduction";
            else if (cn->in_out[0] != 0) why = "a second output";
        } else {
            why = kn_fuse_is_op(cn) ? "its consumer is not generated code (library call, view or reference op)"
                                    : "an output";
        }
        if (why) continue; /* find_edges says why, with both ops' lines */
        f->disp[i] = KN_D_INLINE;
    }
}

/* ---- one-element values in one kernel -------------------------------------- */

/* Whether every reader of node p comes after node r in graph order, a view
 * too: it runs at its own position, where the value must exist (a value a
 * later kernel computes, one that joins it or rides on it, exists from
 * there on). */
static bool readers_after(const kn_graph *g, const kn_fusion *f, int p, int r)
{
    for (int j = p + 1; j <= r && j < g->n_nodes; j++) {
        const kn_node *jn = &g->nodes[j];
        for (int k = 0; k < jn->n_in; k++)
            if (jn->in_node[k] == p && f->disp[j] != KN_D_DEAD) return false;
    }
    return true;
}

/* The farthest (in nodes) a one-element value joins a later kernel. */
#define KN_JOIN_WINDOW 64

/* Whether x is a one-element pointwise kernel of its own that another may
 * take in (nothing else already computes it elsewhere). */
static bool lone_scalar_root(const kn_graph *g, const kn_fusion *f, int x)
{
    const kn_node *nd = &g->nodes[x];
    return f->disp[x] == KN_D_ROOT && is_pointwise(nd) && !f->stored[x] && !f->rides[x] &&
           kn_numel_of(nd->out[0].ndim, nd->out[0].shape) == 1;
}

/* One-element pointwise kernels that read nothing of each other, each a
 * launch for one number: an optimizer's step has three a parameter (its
 * step count and two bias corrections, read by the parameter's update).
 * Walking back from the last, such a kernel joins the next one after it
 * (the target) when every reader of its value comes after the target and
 * none is in it: the target's kernel computes and stores it too
 * (kn_fusion.joins). A value the target reads stays where it is, for
 * merge_into_readers (the step count, read by both corrections, is
 * stored by their kernel then). */
static void join_scalars(const kn_graph *g, kn_fusion *f, int *consumer, bool *join_target)
{
    int n = g->n_nodes, target = -1, joined = 0;
    for (int y = n - 1; y >= 0; y--) {
        if (!lone_scalar_root(g, f, y)) continue;
        /* the target's stores (its own, the joined values', a value
         * merge_into_readers adds) stay within the kernel IR's limit, and
         * the scan for readers within a window of nodes */
        bool ok = target > y && target - y <= KN_JOIN_WINDOW && joined + 3 <= KN_KIR_MAX_STORES &&
                  same_shape(&g->nodes[y].out[0], &g->nodes[target].out[0]) && readers_after(g, f, y, target);
        if (!ok) {
            target = y;
            joined = 0;
            continue;
        }
        joined++;
        f->disp[y] = KN_D_INLINE;
        f->stored[y] = true;
        f->joins[y] = true;
        consumer[y] = target;
        join_target[target] = true;
        note_why(f, g, y, "is computed in the kernel of", target,
                 "one-element values that do not read each other share a kernel");
    }
}

/* ---- values stored by their readers' kernel ------------------------------- */

/* A pointwise value that is a result (an optimizer's new moment, written
 * into its state tensor) or has several readers, all of them pointwise
 * over its shape and all in one pointwise kernel (an AdamW update: the new
 * moments are read by the new parameter's expression): computed in that
 * kernel, which stores it, instead of in a kernel of its own whose result
 * that kernel loads again. One kernel a parameter's update instead of
 * three. Nodes are visited from the last, so a value's readers have their
 * kernels' roots (root[]) when it is looked at. */
static kn_status merge_into_readers(const kn_graph *g, kn_fusion *f, int *consumer, const bool *needed,
                                    const bool *join_target)
{
    int n = g->n_nodes, n_edges = 0;
    for (int i = 0; i < n; i++)
        if (needed[i]) n_edges += g->nodes[i].n_in;
    int *first = calloc((size_t)n + 2, sizeof *first), *readers = malloc(sizeof *readers * ((size_t)n_edges + 1));
    int *fill = calloc((size_t)n + 1, sizeof *fill), *root = malloc(sizeof *root * ((size_t)n + 1));
    if (!first || !readers || !fill || !root) {
        free(first), free(readers), free(fill), free(root);
        return kn_error(KN_ERR_OOM, "out of host memory planning kernels");
    }
    /* readers of each node, as lists: readers[first[p] .. first[p + 1]) */
    for (int i = 0; i < n; i++)
        for (int k = 0; needed[i] && k < g->nodes[i].n_in; k++) first[g->nodes[i].in_node[k] + 1]++;
    for (int i = 0; i < n; i++) first[i + 1] += first[i];
    for (int i = 0; i < n; i++)
        for (int k = 0; needed[i] && k < g->nodes[i].n_in; k++) {
            int p = g->nodes[i].in_node[k];
            readers[first[p] + fill[p]++] = i;
        }
    for (int x = n - 1; x >= 0; x--) {
        root[x] = f->disp[x] == KN_D_ROOT ? x : f->disp[x] == KN_D_INLINE ? root[consumer[x]] : -1;
        const kn_node *nd = &g->nodes[x];
        /* a kernel other values joined stays where it is: their readers were
         * checked against its position (join_scalars) */
        if (f->disp[x] != KN_D_ROOT || !is_pointwise(nd) || f->stored[x] || first[x] == first[x + 1] ||
            join_target[x])
            continue;
        int r0 = -1;
        bool ok = true;
        for (int e = first[x]; e < first[x + 1] && ok; e++) {
            int r = readers[e];
            const kn_node *rn = &g->nodes[r];
            ok = is_pointwise(rn) && same_shape(&rn->out[0], &nd->out[0]) && root[r] >= 0 &&
                 (r0 < 0 || root[r] == r0) && (rn->op != KN_OP_BATCH_NORM || rn->in_node[0] == x);
            r0 = root[r];
        }
        if (!ok || r0 <= x || !is_pointwise(&g->nodes[r0]) || !same_shape(&g->nodes[r0].out[0], &nd->out[0])) continue;
        f->disp[x] = KN_D_INLINE;
        f->stored[x] = true;
        consumer[x] = r0;
        root[x] = r0;
        note_why(f, g, x, "is computed in the kernel of", r0, "every reader of it is in that kernel, which also stores it");
    }
    free(first), free(readers), free(fill), free(root);
    return KN_OK;
}

/* ---- small values riding on a row kernel ---------------------------------- */

/* The most loads a riding value's group may add to its row kernel. */
#define KN_RIDE_MAX_LOADS 4

/* Whether value p (a value's node, through views) reaches a graph input or
 * a constant; *last_view gets the latest view on the way (views run in
 * node order, so the row kernel must come after it; an input is bound
 * early where a kernel reads it first, kn_plan_kernel_bufs). */
static bool from_inputs(const kn_graph *g, const kn_fusion *f, int p, int *last_view)
{
    while (f->disp[p] == KN_D_VIEW) {
        if (p > *last_view) *last_view = p;
        p = g->nodes[p].in_node[0];
    }
    return f->disp[p] == KN_D_INPUT || f->disp[p] == KN_D_CONST;
}

/* A pointwise kernel whose ops read only graph inputs and constants (BERT's
 * padding mask: the ids' mask turned into an additive B x T bias), with
 * the shape of the rows of a later-reading row kernel over the last dim
 * (the embeddings' layer norm over B x T rows of 768): computed by that
 * row kernel once a row and stored there, a launch (1.2 us on the H200)
 * fewer. The row kernel is the first such one; every reader of the value
 * must come after it, since the value exists from when it runs. */
static void ride_on_rows(const kn_graph *g, kn_fusion *f, int *consumer, const bool *is_out, const bool *join_target)
{
    int n = g->n_nodes;
    int *root = malloc(sizeof *root * ((size_t)n + 1));
    if (!root) return; /* an optimization: without memory, kernels stay as they are */
    for (int x = n - 1; x >= 0; x--)
        root[x] = f->disp[x] == KN_D_ROOT ? x : f->disp[x] == KN_D_INLINE ? root[consumer[x]] : -1;
    for (int p = 0; p < n; p++) {
        const kn_node *pn = &g->nodes[p];
        if (f->disp[p] != KN_D_ROOT || join_target[p] || !is_pointwise(pn) || f->stored[p] || is_out[p] ||
            pn->out[0].ndim < 1)
            continue;
        /* its group: pointwise ops of inputs and constants, nothing by position */
        bool ok = true;
        int loads = 0, last_view = -1;
        for (int i = 0; i <= p && ok; i++) {
            if (root[i] != p) continue;
            const kn_node *in = &g->nodes[i];
            ok = is_pointwise(in) && in->op != KN_OP_ARANGE && kn_op_kind_of((kn_op)in->op) != KN_K_TRI &&
                 in->op != KN_OP_BATCH_NORM;
            for (int k = 0; k < in->n_in && ok; k++) {
                int q = in->in_node[k];
                if (root[q] == p) continue;
                ok = from_inputs(g, f, q, &last_view);
                loads++;
            }
        }
        if (!ok || loads > KN_RIDE_MAX_LOADS) continue;
        for (int r = 0; r < n; r++) {
            const kn_node *rn = &g->nodes[r];
            if (f->disp[r] != KN_D_ROOT || r == p || r < last_view) continue;
            int d = row_dim(g, rn);
            const kn_meta *rin = d >= 0 ? &g->nodes[rn->in_node[0]].out[rn->in_out[0]] : NULL;
            if (!rin || d != rin->ndim - 1 || rin->ndim != pn->out[0].ndim + 1 ||
                memcmp(rin->shape, pn->out[0].shape, sizeof(int64_t) * (size_t)pn->out[0].ndim) != 0)
                continue;
            if (!readers_after(g, f, p, r)) break; /* a later row kernel runs later still */
            for (int i = 0; i <= p; i++)
                if (root[i] == p) f->rides[i] = true;
            f->disp[p] = KN_D_INLINE;
            f->stored[p] = true;
            consumer[p] = r;
            note_why(f, g, p, "is computed once a row by the kernel of", r,
                     "a small value of the inputs with that kernel's rows, a launch fewer");
            break;
        }
    }
    free(root);
}

/* ---- gathered loads ------------------------------------------------------ */

/* Whether the layout of a value of index_select's rows (n x row elements,
 * contiguous) seen through `l` splits every dim cleanly into whole rows
 * or a part of one row: each stride a multiple of the row, or within it. */
static bool splits_rows(const kn_layout *l, int64_t row)
{
    for (int d = 0; d < l->ndim; d++) {
        int64_t s = l->strides[d];
        if (s == 0 || l->shape[d] == 1 || s % row == 0) continue;
        if (s * (l->shape[d] - 1) >= row) return false;
    }
    return true;
}

/* Whether the reader c of a value of p's shape takes it inline: pointwise
 * over the same shape, or a row op reading it as its row. */
static bool inlines_into(const kn_graph *g, int p, int c)
{
    const kn_node *pn = &g->nodes[p], *cn = &g->nodes[c];
    if (is_pointwise(cn)) return same_shape(&pn->out[0], &cn->out[0]) && cn->op != KN_OP_BATCH_NORM;
    return row_dim(g, cn) >= 0 && cn->in_node[0] == p && cn->in_out[0] == 0;
}

/* The arithmetic of a wrapped index (kn_fuse_wrapped_index) inlined into
 * the gathered load that reads it, when that is its only reader: the
 * load wraps the index itself and the arithmetic needs no kernel. */
static void absorb_wrapped_index(const kn_graph *g, kn_fusion *f, const int *uses, const bool *is_out, int sel,
                                 int64_t rows)
{
    int top = g->nodes[sel].in_node[1], chain[4];
    if (g->nodes[sel].in_out[1] != 0 || kn_fuse_wrapped_index(g, top, rows, chain) < 0) return;
    for (int k = 0; k < 4; k++)
        if (uses[chain[k]] != 1 || is_out[chain[k]] || (f->disp[chain[k]] != KN_D_ROOT && f->disp[chain[k]] != KN_D_INLINE))
            return;
    f->disp[top] = KN_D_INLINE; /* the others already inline into it */
    note_why(f, g, top, "is the wrapped index of", sel, "the gathered load wraps a negative index itself");
}

/* index_select(W, dim 0, I) of a 2-D W and a 1-D integer I, read by one
 * generated kernel (directly, or through one reshape that splits its rows
 * into more dims: BERT's and GPT-2's token embeddings, gathered for B * T
 * tokens and viewed as B x T x 768): inlined there, with the reshape, as
 * a gathered argument of W (kn_fuse.c: mk_gather_load). */
static void mark_gathered(const kn_graph *g, kn_fusion *f, const int *uses, const int *consumer, const bool *is_out)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *nd = &g->nodes[i];
        if (f->disp[i] != KN_D_ROOT || nd->op != KN_OP_INDEX_SELECT || nd->a.dim != 0 || uses[i] != 1 || is_out[i])
            continue;
        const kn_meta *w = &g->nodes[nd->in_node[0]].out[nd->in_out[0]];
        const kn_meta *ix = &g->nodes[nd->in_node[1]].out[nd->in_out[1]];
        if (w->ndim != 2 || ix->ndim != 1 || (ix->dtype != KN_I64 && ix->dtype != KN_I32) || w->shape[0] < 1)
            continue;
        int r = consumer[i], c = r;
        if (r < 0) continue;
        if (g->nodes[r].op == KN_OP_RESHAPE) {
            if (f->disp[r] != KN_D_VIEW || uses[r] != 1 || is_out[r] || !splits_rows(&f->layout[r], w->shape[1]))
                continue;
            c = consumer[r];
        } else if (g->nodes[r].n_in > 0 && kn_op_kind_of((kn_op)g->nodes[r].op) == KN_K_VIEW) {
            continue;
        }
        if (c < 0 || !inlines_into(g, c == r ? i : r, c)) continue;
        f->disp[i] = KN_D_INLINE;
        if (r != c) f->disp[r] = KN_D_INLINE;
        note_why(f, g, i, "is read as gathered rows by", c, "the index_select runs inside its reader's kernel");
        absorb_wrapped_index(g, f, uses, is_out, i, w->shape[0]);
    }
}

/* The reshapes left that copy at run time (their source's strides cannot
 * express them): kn_fusion.copies, each noted. */
static kn_status mark_view_copies(const kn_graph *g, kn_fusion *f)
{
    int n = g->n_nodes;
    f->copies = calloc((size_t)n + 1, sizeof *f->copies);
    if (!f->copies) return kn_error(KN_ERR_OOM, "out of host memory planning kernels");
    for (int i = 0; i < n; i++) /* the copies left: a reshape its source's strides cannot express */
        if (f->disp[i] == KN_D_VIEW && g->nodes[i].op == KN_OP_RESHAPE &&
            reshape_copies(&g->nodes[i], &f->layout[g->nodes[i].in_node[0]])) {
            f->n_view_copies++;
            f->copies[i] = true;
            note_why(f, g, i, "copies", g->nodes[i].in_node[0],
                     "a reshape of a layout its strides cannot express, once per call");
        }
    return KN_OK;
}

/* The kernels: one per root, in node order; inlined nodes join their
 * consumer's. Each is built as the kind its root's op makes it. A kernel
 * that goes past the kernel IR's limits leaves its root in *failed_root
 * (else -1). */
static kn_status build_kernels(const kn_graph *g, kn_fusion *f, const int *consumer, int *memo_e, int *memo_a,
                               int *failed_root)
{
    *failed_root = -1;
    int n = g->n_nodes, nk = 0;
    for (int i = 0; i < n; i++) nk += f->disp[i] == KN_D_ROOT;
    f->prog.kernels = calloc((size_t)nk + 1, sizeof *f->prog.kernels);
    f->kernel_at = malloc(sizeof *f->kernel_at * ((size_t)nk + 1));
    if (!f->prog.kernels || !f->kernel_at) return kn_error(KN_ERR_OOM, "out of host memory planning kernels");
    int kid = 0;
    for (int i = 0; i < n; i++)
        if (f->disp[i] == KN_D_ROOT) f->kernel[i] = kid++;
    for (int i = n - 1; i >= 0; i--)
        if (f->disp[i] == KN_D_INLINE) f->kernel[i] = f->kernel[consumer[i]];
    kn_status st = KN_OK;
    for (int i = 0; i < n && st == KN_OK; i++) {
        if (f->disp[i] != KN_D_ROOT) continue;
        kid = f->kernel[i];
        f->kernel_at[kid] = i;
        f->prog.kernels[kid].lib_node = i;
        const kn_node *nd = &g->nodes[i];
        int d = row_dim(g, nd);
        kn_kernel_kind kind = is_pointwise(nd) ? KN_KERNEL_POINTWISE
                              : d >= 0 ? KN_KERNEL_ROW
                              : runs_in_library(nd) ? KN_KERNEL_LIBRARY : KN_KERNEL_FALLBACK;
        st = kn_fuse_build_kernel(g, f, i, kind, d, memo_e, memo_a);
        const kn_kernel *k = &f->prog.kernels[kid];
        if (st != KN_OK && (k->n_args >= KN_KIR_MAX_ARGS || k->n_exprs >= KN_KIR_MAX_EXPRS)) *failed_root = i;
        f->prog.n_kernels++;
    }
    return st;
}

/* Kernel `root` went past the kernel IR's limits: one of its inlined nodes
 * ends a kernel of its own instead, the one that splits the kernel's
 * inlined nodes most evenly (so a long chain halves at each retry). False
 * when nothing is inlined into it (the root alone is too big). */
static bool split_kernel(const kn_graph *g, kn_fusion *f, int root)
{
    int kid = f->kernel[root], n = g->n_nodes, total = 0, best = -1, best_small = -1;
    int *below = calloc((size_t)n + 1, sizeof *below); /* inlined nodes at and under each node, in this kernel */
    if (!below) return false;
    for (int i = 0; i <= root; i++) {
        if (f->kernel[i] != kid || f->disp[i] != KN_D_INLINE) continue;
        below[i] = 1;
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int p = g->nodes[i].in_node[k];
            if (f->kernel[p] == kid && f->disp[p] == KN_D_INLINE) below[i] += below[p];
        }
        total++;
    }
    for (int i = 0; i < root; i++) {
        if (!below[i]) continue;
        int small = below[i] < total - below[i] ? below[i] : total - below[i];
        if (small > best_small) best_small = small, best = i;
    }
    free(below);
    if (best < 0) return false;
    f->disp[best] = KN_D_ROOT;
    f->stored[best] = false;
    f->joins[best] = false;
    f->limit_split[best] = true;
    return true;
}

#define KN_FUSE_SPLIT_TRIES 32

/* Undo build_kernels, for another try after split_kernel. */
static void unbuild_kernels(const kn_graph *g, kn_fusion *f)
{
    kn_kprogram_free(&f->prog);
    free(f->kernel_at);
    f->kernel_at = NULL;
    for (int i = 0; i < g->n_nodes; i++) f->kernel[i] = -1;
}

/* Lifetimes: a value is read where its reader runs (an inlined node runs
 * inside its kernel, at the kernel's root): last_use, and per position the
 * values that die there (drop_head, drop_next). */
static kn_status plan_lifetimes(const kn_graph *g, kn_fusion *f)
{
    int n = g->n_nodes;
    f->drop_head = malloc(sizeof *f->drop_head * ((size_t)n + 1));
    f->drop_next = malloc(sizeof *f->drop_next * ((size_t)n + 1));
    if (!f->drop_head || !f->drop_next) return kn_error(KN_ERR_OOM, "out of host memory planning kernels");
    for (int i = 0; i < n; i++) {
        f->drop_head[i] = -1;
        f->drop_next[i] = -1;
    }
    for (int i = 0; i < n; i++) {
        if (f->disp[i] == KN_D_DEAD) continue;
        int pos = f->disp[i] == KN_D_INLINE ? f->kernel_at[f->kernel[i]] : i;
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int src = g->nodes[i].in_node[k];
            if (f->last_use[src] != n && f->last_use[src] < pos) f->last_use[src] = pos;
        }
    }
    for (int i = 0; i < n; i++) {
        int at = f->last_use[i];
        if (at < 0 || at >= n || (f->disp[i] == KN_D_INLINE && !f->stored[i]) || f->disp[i] == KN_D_DEAD) continue;
        f->drop_next[i] = f->drop_head[at];
        f->drop_head[at] = i;
    }
    return KN_OK;
}

kn_status kn_fuse(const kn_graph *g, const int *outputs, int n_outputs, kn_fusion *f)
{
    return kn_fuse_ex(g, outputs, n_outputs, NULL, NULL, f);
}

kn_status kn_fuse_ex(const kn_graph *g, const int *outputs, int n_outputs, kn_fuse_strided_out_fn strided_out,
                     void *ud, kn_fusion *f)
{
    return kn_fuse_gathering(g, outputs, n_outputs, strided_out, ud, false, f);
}

kn_status kn_fuse_gathering(const kn_graph *g, const int *outputs, int n_outputs, kn_fuse_strided_out_fn strided_out,
                            void *ud, bool gather_loads, kn_fusion *f)
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
    int *first_reader = malloc(sizeof *first_reader * ((size_t)n + 1));
    bool *join_target = calloc((size_t)n + 1, sizeof *join_target);
    f->stored = calloc((size_t)n + 1, sizeof *f->stored);
    f->rides = calloc((size_t)n + 1, sizeof *f->rides);
    f->joins = calloc((size_t)n + 1, sizeof *f->joins);
    kn_status st = KN_OK;
    if (!f->disp || !f->kernel || !f->last_use || !f->layout || !uses || !consumer || !is_out || !needed ||
        !memo_e || !memo_a || !first_reader || !join_target || !f->stored || !f->rides || !f->joins) {
        st = kn_error(KN_ERR_OOM, "out of host memory planning kernels");
        goto done;
    }
    find_uses(g, outputs, n_outputs, f, uses, consumer, first_reader, is_out, needed);
    assign_dispositions(g, f, uses, consumer, first_reader, is_out, needed);
    permuted_library_outputs(g, f, uses, consumer, is_out, strided_out, ud);
    if (gather_loads) mark_gathered(g, f, uses, consumer, is_out);
    st = mark_view_copies(g, f);
    if (st == KN_OK) join_scalars(g, f, consumer, join_target);
    if (st == KN_OK) st = merge_into_readers(g, f, consumer, needed, join_target);
    if (st == KN_OK) ride_on_rows(g, f, consumer, is_out, join_target);
    if (st == KN_OK && !(f->limit_split = calloc((size_t)n + 1, sizeof *f->limit_split)))
        st = kn_error(KN_ERR_OOM, "out of host memory planning kernels");
    /* a group past the kernel IR's limits (a sum of 20 inputs: more than
     * KN_KIR_MAX_ARGS buffers) splits and the kernels are built again,
     * rather than the whole graph running op by op; a few tries (each a
     * rebuild): a chain of 50,000 fused ops would need hundreds, and still
     * runs op by op */
    for (int tries = 0; st == KN_OK; tries++) {
        int failed = -1;
        st = build_kernels(g, f, consumer, memo_e, memo_a, &failed);
        if (st == KN_OK || failed < 0 || tries >= KN_FUSE_SPLIT_TRIES || !split_kernel(g, f, failed)) break;
        unbuild_kernels(g, f);
        st = KN_OK;
    }
    if (st == KN_OK) st = find_edges(g, f, uses, is_out);
    if (st == KN_OK) st = plan_lifetimes(g, f);
done:
    free(uses);
    free(first_reader);
    free(join_target);
    free(consumer);
    free(is_out);
    free(needed);
    free(memo_e);
    free(memo_a);
    if (st != KN_OK) kn_fusion_free(f);
    return st;
}
