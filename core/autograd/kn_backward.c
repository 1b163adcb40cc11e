/* kn_backward: the backward pass (kn_autograd_backward).
 *
 * 1. Check the roots and their gradients (a one-element root without one
 *    gets 1; a larger one is an error).
 * 2. Collect every node reachable from the roots and check, before any
 *    work, that none was freed by an earlier backward and that no tensor
 *    a node saved was written in place since (storage versions).
 * 3. Run the nodes in decreasing recording order, which is a reverse
 *    topological order: every consumer of a tensor was recorded after it.
 *    Each node's rule turns its outputs' gradients into its inputs'; those
 *    are summed into the producing node's slots, or into the leaf's.
 * 4. Only when every node has run do the leaves' .grad change (backward),
 *    or the inputs' gradients come back (kiln.grad).
 * Grad mode is off meanwhile, so the rules' own ops record nothing.
 */
#include "kn_autograd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_grad_table.h"
#include "kn_lazy.h"

typedef struct {
    kn_autograd *ag;
    kn_exec *ex;
    const kn_backward_args *a;
    uint64_t id;
    kn_grad_node **nodes;
    kn_tensor *(*gout)[KN_MAX_OUTPUTS]; /* per node slot: its outputs' gradients so far (owned) */
    int n_nodes, cap_nodes;
    kn_grad_meta **leaves;
    kn_tensor **leaf_grad; /* owned */
    int n_leaves, cap_leaves;
    kn_tensor **wanted;    /* kiln.grad: the gradient of each input that has history (owned) */
} pass;

static kn_status oom(const pass *p)
{
    return kn_error(KN_ERR_OOM, "%s: out of host memory", p->a->what);
}

static const char *at(const kn_grad_node *n, char *buf, size_t size)
{
    if (n->where[0]) snprintf(buf, size, " (at %s)", n->where);
    else buf[0] = 0;
    return buf;
}

/* ---- running ops ------------------------------------------------------- */

static kn_status run(pass *p, kn_opcall *c, kn_device dev)
{
    return kn_autograd_run(p->ag, p->ex, c, dev);
}

/* *slot += g (g: a reference handed over; *slot: owned or NULL). */
static kn_status accumulate(pass *p, kn_tensor **slot, kn_tensor *g)
{
    if (!*slot) {
        *slot = g;
        return KN_OK;
    }
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ADD);
    c.n_in = 2;
    c.in[0] = *slot;
    c.in[1] = g;
    kn_status st = run(p, &c, kn_tensor_device(g));
    kn_tensor_release(g);
    if (st != KN_OK) return st;
    kn_tensor_release(*slot);
    *slot = c.out[0];
    return KN_OK;
}

static kn_status one_op(pass *p, kn_opcall *c, kn_device dev, kn_tensor **out)
{
    *out = NULL;
    KN_TRY(run(p, c, dev));
    *out = c->out[0];
    return KN_OK;
}

/* A fresh contiguous copy of g: a leaf's .grad is its own tensor, which an
 * in-place update (clipping) may change without touching anything else. */
static kn_status fresh_copy(pass *p, kn_tensor *g, kn_tensor **out)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CONTIGUOUS);
    c.n_in = 1;
    c.in[0] = g;
    return one_op(p, &c, kn_tensor_device(g), out);
}

static kn_status cast_to(pass *p, kn_tensor *g, kn_dtype dt, kn_tensor **out)
{
    if (g->dtype == dt) {
        kn_tensor_retain(g);
        *out = g;
        return KN_OK;
    }
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CAST);
    c.n_in = 1;
    c.in[0] = g;
    c.a.dtype = dt;
    return one_op(p, &c, kn_tensor_device(g), out);
}

/* ---- collecting the graph ---------------------------------------------- */

static kn_status add_node(pass *p, kn_grad_node *n)
{
    if (p->n_nodes == p->cap_nodes) {
        int cap = p->cap_nodes ? p->cap_nodes * 2 : 64;
        kn_grad_node **nodes = realloc(p->nodes, sizeof *nodes * (size_t)cap);
        if (!nodes) return oom(p);
        p->nodes = nodes;
        p->cap_nodes = cap;
    }
    n->visit = p->id;
    p->nodes[p->n_nodes++] = n;
    return KN_OK;
}

/* Every node reachable from the roots, in p->nodes (a depth-first walk
 * whose stack is the list itself: nodes [done, n_nodes) are still to
 * expand). */
static kn_status collect(pass *p)
{
    for (int r = 0; r < p->a->n_roots; r++) {
        kn_grad_node *fn = p->a->roots[r]->ag->fn;
        if (fn && fn->visit != p->id) KN_TRY(add_node(p, fn));
    }
    for (int done = 0; done < p->n_nodes; done++) {
        kn_grad_node *n = p->nodes[done];
        for (int i = 0; i < n->n_in; i++) {
            kn_grad_meta *e = n->edge[i];
            if (e && e->fn && e->fn->visit != p->id) KN_TRY(add_node(p, e->fn));
        }
    }
    return KN_OK;
}

/* A saved tensor written in place since the node saved it. */
static kn_status check_saved(const pass *p, const kn_grad_node *n, const kn_tensor *t, uint64_t version,
                             const char *role, int index)
{
    if (!t || !t->storage || t->storage->version == version) return KN_OK;
    char shp[96], w[KN_GRAD_WHERE_MAX + 8];
    return kn_error(KN_ERR_ARG,
                    "%s: %s %d of %s%s (shape %s), which its gradient needs, was modified in place after %s "
                    "used it (copy_, or an optimizer's step); clone the tensor before writing to it, or run "
                    "the forward pass again after the write",
                    p->a->what, role, index + 1, kn_op_name(n->call->op), at(n, w, sizeof w),
                    kn_shape_str(t->ndim, t->shape, shp, sizeof shp), kn_op_name(n->call->op));
}

/* A saved placeholder whose compiled graph ran without keeping its value
 * (the capture kept no values for a backward outside the graph). */
static kn_status check_kept(const pass *p, const kn_grad_node *n, const kn_tensor *t)
{
    if (!t || !t->lazy || t->lazy->value || (!t->lazy->dropped && t->lazy->cap)) return KN_OK;
    char w[KN_GRAD_WHERE_MAX + 8];
    return kn_error(KN_ERR_ARG,
                    "%s: %s%s ran in a graph of a compiled function that kept no values for a backward in a "
                    "later graph or after the call; kiln.compile keeps them when a module the call runs is in "
                    "train mode with grad mode on (m:train()), and for a function that ran backward in an "
                    "earlier call (call it again)",
                    p->a->what, kn_op_name(n->call->op), at(n, w, sizeof w));
}

static kn_status check_nodes(const pass *p)
{
    for (int s = 0; s < p->n_nodes; s++) {
        const kn_grad_node *n = p->nodes[s];
        char w[KN_GRAD_WHERE_MAX + 8];
        if (n->freed)
            return kn_error(KN_ERR_ARG,
                            "%s: the graph was already freed: an earlier backward through %s%s released the "
                            "tensors it saved; pass {retain_graph = true} to the first backward to go through "
                            "the graph twice",
                            p->a->what, kn_op_name(n->call->op), at(n, w, sizeof w));
        for (int i = 0; i < n->n_in; i++) KN_TRY(check_kept(p, n, n->saved_in[i]));
        for (int k = 0; k < n->n_out; k++) KN_TRY(check_kept(p, n, n->saved_out[k]));
        for (int i = 0; i < n->n_in; i++) KN_TRY(check_saved(p, n, n->saved_in[i], n->in_version[i], "input", i));
        for (int k = 0; k < n->n_out; k++)
            KN_TRY(check_saved(p, n, n->saved_out[k], n->out_version[k], "output", k));
    }
    return KN_OK;
}

static int later_first(const void *x, const void *y)
{
    const kn_grad_node *a = *(kn_grad_node *const *)x, *b = *(kn_grad_node *const *)y;
    return a->seq < b->seq ? 1 : a->seq > b->seq ? -1 : 0;
}

/* ---- routing gradients ------------------------------------------------- */

static bool is_input(const pass *p, const kn_grad_meta *m)
{
    for (int i = 0; i < p->a->n_inputs; i++)
        if (p->a->inputs[i]->ag == m) return true;
    return false;
}

/* Hand g (a reference) to the tensor whose meta is e: the slot of the node
 * that made it, or the leaf's gradient. */
static kn_status route(pass *p, kn_grad_meta *e, kn_tensor *g)
{
    if (e->fn) return accumulate(p, &p->gout[e->fn->slot][e->out_index], g);
    if (!e->requires_grad || (p->a->n_inputs > 0 && !is_input(p, e))) {
        kn_tensor_release(g);
        return KN_OK;
    }
    if (e->visit != p->id) {
        if (p->n_leaves == p->cap_leaves) {
            int cap = p->cap_leaves ? p->cap_leaves * 2 : 32;
            kn_grad_meta **leaves = realloc(p->leaves, sizeof *leaves * (size_t)cap);
            if (leaves) p->leaves = leaves;
            kn_tensor **lg = leaves ? realloc(p->leaf_grad, sizeof *lg * (size_t)cap) : NULL;
            if (!lg) {
                kn_tensor_release(g);
                return oom(p);
            }
            p->leaf_grad = lg;
            p->cap_leaves = cap;
        }
        e->visit = p->id;
        e->slot = p->n_leaves;
        p->leaves[p->n_leaves] = e;
        p->leaf_grad[p->n_leaves++] = NULL;
    }
    return accumulate(p, &p->leaf_grad[e->slot], g);
}

/* The gradient a root starts with: the caller's (checked against the root)
 * or 1 for a one-element root. */
static kn_status root_grad(pass *p, int r, kn_tensor **out)
{
    kn_tensor *root = p->a->roots[r], *g = p->a->grads ? p->a->grads[r] : NULL;
    char a[96], b[96];
    *out = NULL;
    if (!g) {
        if (kn_tensor_numel(root) != 1)
            return kn_error(KN_ERR_SHAPE,
                            "%s: the tensor has shape %s (%lld elements); a gradient can be implied only for a "
                            "one-element tensor (a loss): pass one of its shape, y:backward(grad)",
                            p->a->what, kn_shape_str(root->ndim, root->shape, a, sizeof a),
                            (long long)kn_tensor_numel(root));
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_FULL);
        c.a.nshape = root->ndim;
        memcpy(c.a.shape, root->shape, sizeof c.a.shape);
        c.a.value = 1;
        c.a.dtype = root->dtype;
        return one_op(p, &c, kn_tensor_device(root), out);
    }
    if (g->ndim != root->ndim || (g->ndim && memcmp(g->shape, root->shape, sizeof(int64_t) * (size_t)g->ndim) != 0))
        return kn_error(KN_ERR_SHAPE, "%s: the gradient has shape %s but the tensor has shape %s", p->a->what,
                        kn_shape_str(g->ndim, g->shape, a, sizeof a), kn_shape_str(root->ndim, root->shape, b, sizeof b));
    if (kn_tensor_device(g) != kn_tensor_device(root))
        return kn_error(KN_ERR_DEVICE, "%s: the gradient is on %s but the tensor is on %s", p->a->what,
                        kn_device_name(kn_tensor_device(g)), kn_device_name(kn_tensor_device(root)));
    if (!kn_dtype_is_float(g->dtype))
        return kn_error(KN_ERR_DTYPE, "%s: the gradient must be a float tensor, got %s", p->a->what,
                        kn_dtype_name(g->dtype));
    return cast_to(p, g, root->dtype, out);
}

static kn_status seed(pass *p)
{
    for (int r = 0; r < p->a->n_roots; r++) {
        kn_tensor *g;
        KN_TRY(root_grad(p, r, &g));
        KN_TRY(route(p, p->a->roots[r]->ag, g));
    }
    return KN_OK;
}

/* ---- running the nodes ------------------------------------------------- */

/* Check and convert rule output gi for input i of n (a new reference in *out). */
static kn_status input_grad(pass *p, const kn_grad_node *n, int i, kn_tensor *gi, kn_tensor **out)
{
    const kn_meta *m = &n->in_meta[i];
    char a[96], b[96];
    if (!gi)
        return kn_error(KN_ERR_ARG, "%s: the gradient rule of %s gave nothing for input %d (a kiln bug)", p->a->what,
                        kn_op_name(n->call->op), i + 1);
    if (gi->ndim != m->ndim || (m->ndim && memcmp(gi->shape, m->shape, sizeof(int64_t) * (size_t)m->ndim) != 0))
        return kn_error(KN_ERR_SHAPE, "%s: the gradient rule of %s gave input %d shape %s, expected %s (a kiln bug)",
                        p->a->what, kn_op_name(n->call->op), i + 1, kn_shape_str(gi->ndim, gi->shape, a, sizeof a),
                        kn_shape_str(m->ndim, m->shape, b, sizeof b));
    return cast_to(p, gi, m->dtype, out);
}

/* Put the node's name and line in front of an error from its rule. */
static kn_status wrap(const pass *p, const kn_grad_node *n, kn_status st)
{
    char msg[768], w[KN_GRAD_WHERE_MAX + 8];
    snprintf(msg, sizeof msg, "%s", kn_last_error());
    return kn_error(st, "%s through %s%s: %s", p->a->what, kn_op_name(n->call->op), at(n, w, sizeof w), msg);
}

static kn_status run_rule(pass *p, kn_grad_node *n, kn_tensor **gout)
{
    const kn_grad_entry *e = kn_grad_entry_of(n->call->op);
    kn_gb b;
    kn_gb_init(&b, kn_autograd_run, p->ag, p->ex, n->device);
    kn_tensor *full[KN_MAX_OUTPUTS] = {NULL}, *gin[KN_MAX_INPUTS] = {NULL};
    for (int k = 0; k < n->n_out; k++) {
        full[k] = gout[k];
        if (!full[k] && kn_dtype_is_float(n->out_meta[k].dtype)) full[k] = kn_gb_zeros_like(&b, &n->out_meta[k]);
    }
    /* the rule's ops carry the forward op's line: a backward kernel in
     * :time and the drawings names the op it differentiates */
    if (p->ex->set_where && n->where[0]) p->ex->set_where(p->ex, n->where);
    if (b.st == KN_OK) e->rule(&b, n, full, gin);
    if (p->ex->set_where && n->where[0]) p->ex->set_where(p->ex, NULL);
    kn_status st = b.st;
    for (int i = 0; i < n->n_in && st == KN_OK; i++) {
        if (!n->edge[i]) continue;
        kn_tensor *g;
        st = input_grad(p, n, i, gin[i], &g);
        if (st == KN_OK) st = route(p, n->edge[i], g);
    }
    kn_gb_done(&b);
    return st == KN_OK ? KN_OK : wrap(p, n, st);
}

static kn_status run_nodes(pass *p)
{
    for (int s = 0; s < p->n_nodes; s++) {
        kn_grad_node *n = p->nodes[s];
        kn_tensor **gout = p->gout[s];
        for (int i = 0; i < p->a->n_inputs; i++) { /* kiln.grad of a tensor with history */
            kn_grad_meta *m = p->a->inputs[i]->ag;
            if (m->fn == n && gout[m->out_index]) {
                kn_tensor_retain(gout[m->out_index]);
                p->wanted[i] = gout[m->out_index];
            }
        }
        bool any = false;
        for (int k = 0; k < n->n_out; k++) any |= gout[k] != NULL;
        kn_status st = any ? run_rule(p, n, gout) : KN_OK;
        for (int k = 0; k < n->n_out; k++) {
            kn_tensor_release(gout[k]);
            gout[k] = NULL;
        }
        if (!p->a->retain_graph) kn_grad_node_free_saved(n);
        if (st != KN_OK) return st;
    }
    return KN_OK;
}

/* ---- finishing --------------------------------------------------------- */

/* backward: every leaf's new .grad is computed first, then all are set. */
static kn_status commit_leaves(pass *p)
{
    kn_tensor **next = calloc((size_t)p->n_leaves + 1, sizeof *next);
    if (!next) return oom(p);
    kn_status st = KN_OK;
    for (int l = 0; l < p->n_leaves && st == KN_OK; l++) {
        kn_grad_meta *m = p->leaves[l];
        if (!m->grad) {
            st = fresh_copy(p, p->leaf_grad[l], &next[l]);
            continue;
        }
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_ADD);
        c.n_in = 2;
        c.in[0] = m->grad;
        c.in[1] = p->leaf_grad[l];
        st = one_op(p, &c, kn_tensor_device(m->grad), &next[l]);
    }
    /* traced: the sums are written into the existing .grad tensors when
     * the graph runs (accumulated in place, as PyTorch does) */
    for (int l = 0; l < p->n_leaves && st == KN_OK && p->ex->traces && p->ex->write; l++) {
        kn_grad_meta *m = p->leaves[l];
        if (!m->grad) continue;
        st = p->ex->write(p->ex, m->grad, next[l]);
        kn_tensor_release(next[l]);
        kn_tensor_retain(m->grad);
        next[l] = m->grad;
    }
    for (int l = 0; l < p->n_leaves; l++) {
        if (st == KN_OK) {
            kn_tensor_release(p->leaves[l]->grad);
            p->leaves[l]->grad = next[l];
        } else {
            kn_tensor_release(next[l]);
        }
    }
    free(next);
    return st;
}

/* kiln.grad: each input's gradient, from the leaves or from the nodes. */
static kn_status commit_inputs(pass *p)
{
    for (int i = 0; i < p->a->n_inputs; i++) {
        kn_grad_meta *m = p->a->inputs[i]->ag;
        kn_tensor *g = p->wanted[i];
        if (!m->fn && m->visit == p->id) g = p->leaf_grad[m->slot];
        if (!g && !p->a->allow_unused)
            return kn_error(KN_ERR_ARG,
                            "%s: input %d was not used to compute the outputs, so it has no gradient; pass "
                            "{allow_unused = true} to get nil for it",
                            p->a->what, i + 1);
    }
    for (int i = 0; i < p->a->n_inputs; i++) {
        kn_grad_meta *m = p->a->inputs[i]->ag;
        kn_tensor *g = p->wanted[i];
        if (!m->fn && m->visit == p->id) {
            g = p->leaf_grad[m->slot];
            kn_tensor_retain(g);
        }
        p->a->results[i] = g;
        p->wanted[i] = NULL;
    }
    return KN_OK;
}

static kn_status check_args(const kn_backward_args *a)
{
    if (a->n_roots < 1) return kn_error(KN_ERR_ARG, "%s: no tensor to differentiate", a->what);
    for (int r = 0; r < a->n_roots; r++)
        if (!kn_autograd_requires_grad(a->roots[r])) {
            kn_status st = kn_autograd_no_history(a->roots[r], a->what);
            if (a->n_roots == 1) return st;
            char msg[700];
            snprintf(msg, sizeof msg, "%s", kn_last_error());
            return kn_error(st, "output %d: %s", r + 1, msg);
        }
    for (int i = 0; i < a->n_inputs; i++)
        if (!kn_autograd_requires_grad(a->inputs[i]))
            return kn_error(KN_ERR_ARG,
                            "%s: input %d does not require grad, so it has no gradient (give it "
                            "{requires_grad = true} before computing the outputs)",
                            a->what, i + 1);
    return KN_OK;
}

static void pass_free(pass *p)
{
    for (int s = 0; p->gout && s < p->n_nodes; s++)
        for (int k = 0; k < KN_MAX_OUTPUTS; k++) kn_tensor_release(p->gout[s][k]);
    for (int l = 0; l < p->n_leaves; l++) kn_tensor_release(p->leaf_grad[l]);
    for (int i = 0; p->wanted && i < p->a->n_inputs; i++) kn_tensor_release(p->wanted[i]);
    free(p->nodes);
    free(p->gout);
    free(p->leaves);
    free(p->leaf_grad);
    free(p->wanted);
}

static kn_status backward(pass *p)
{
    KN_TRY(check_args(p->a));
    KN_TRY(collect(p));
    KN_TRY(check_nodes(p));
    if (p->n_nodes > 1) qsort(p->nodes, (size_t)p->n_nodes, sizeof *p->nodes, later_first);
    p->gout = calloc((size_t)p->n_nodes + 1, sizeof *p->gout);
    p->wanted = calloc((size_t)p->a->n_inputs + 1, sizeof *p->wanted);
    if (!p->gout || !p->wanted) return oom(p);
    for (int s = 0; s < p->n_nodes; s++) p->nodes[s]->slot = s;
    KN_TRY(seed(p));
    KN_TRY(run_nodes(p));
    return p->a->n_inputs > 0 ? commit_inputs(p) : commit_leaves(p);
}

/* Each pass marks the nodes and leaves it visits with its own number.
 * Process-wide, as tensor ids are: a number no other pass of any Lua state
 * had, so a mark is never mistaken for this pass's. */
static uint64_t kn_backward_passes;

kn_status kn_autograd_backward(kn_autograd *ag, kn_exec *ex, const kn_backward_args *a)
{
    pass p;
    memset(&p, 0, sizeof p);
    p.ag = ag;
    p.ex = ex;
    p.a = a;
    p.id = ++kn_backward_passes;
    bool was = ag->enabled;
    ag->enabled = false; /* the rules' ops record nothing */
    kn_status st = backward(&p);
    ag->enabled = was;
    pass_free(&p);
    return st;
}

/* Whether a backward without retain_graph went through t's history: a
 * node reachable from t released what it saved (kn_autograd.h). The walk
 * marks the nodes with a pass number of its own, as a backward does. */
bool kn_autograd_history_freed(const kn_tensor *t)
{
    if (!t->ag || !t->ag->fn) return false;
    uint64_t id = ++kn_backward_passes;
    int n = 0, cap = 64;
    kn_grad_node **list = malloc(sizeof *list * (size_t)cap);
    if (!list) return false; /* out of memory: "not freed", the cautious answer */
    list[n++] = t->ag->fn;
    t->ag->fn->visit = id;
    bool freed = false;
    for (int done = 0; done < n && !freed; done++) {
        kn_grad_node *node = list[done];
        freed = node->freed;
        for (int i = 0; i < node->n_in && !freed; i++) {
            kn_grad_meta *e = node->edge[i];
            if (!e || !e->fn || e->fn->visit == id) continue;
            if (n == cap) {
                kn_grad_node **more = realloc(list, sizeof *list * (size_t)(cap *= 2));
                if (!more) {
                    free(list);
                    return false;
                }
                list = more;
            }
            e->fn->visit = id;
            list[n++] = e->fn;
        }
    }
    free(list);
    return freed;
}
