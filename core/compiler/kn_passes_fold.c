/* kn_passes_fold: the passes that compute at compile time.
 *
 * fold_constants evaluates elementwise ops whose inputs are all constants
 * (0-dim Lua numbers) with the CPU reference, so the folded value is the
 * one the op would have produced. fold_batch_norm merges an inference-mode
 * batch_norm into the convolution that feeds it: new weights and bias,
 * computed now in float64 from the bound parameter tensors and stored in
 * the weight's dtype, become new inputs of the graph (kn_passes.h says what
 * that means for binding). fold_once computes, at compile time and on the
 * graph's device, the values that depend only on shapes, constants and
 * fixed values (a causal mask: full, tril, logical_not; embeddings gathered
 * by ids a model holds), so they are made once per plan instead of on
 * every call.
 *
 * Why fold_constants alone does not take a mask: a CONST node holds one
 * number, so it folds only 0-dim elementwise results of 0-dim constants;
 * creation ops (full, arange) and tensor-shaped results are out of its
 * reach. fold_once keeps them as tensors: new inputs the graph owns.
 */
#include "kn_passes_fold.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_settings.h"
#include "kn_view.h"

/* ---- fold_constants ---- */

/* Evaluate node n (all inputs CONST) on 0-dim CPU tensors. */
static kn_status eval_const_op(const kn_graph *g, const kn_node *n, double *value)
{
    kn_tensor *in[KN_MAX_INPUTS] = {NULL};
    kn_opcall c;
    kn_opcall_init(&c, (kn_op)n->op);
    c.a = n->a;
    c.n_in = n->n_in;
    kn_status st = KN_OK;
    for (int k = 0; k < n->n_in && st == KN_OK; k++) {
        const kn_node *p = &g->nodes[n->in_node[k]];
        st = kn_tensor_new(p->out[0].dtype, 0, NULL, KN_CPU, &in[k]);
        if (st == KN_OK) kn_store_f64(in[k]->storage->data, p->out[0].dtype, p->value);
        c.in[k] = in[k];
    }
    if (st == KN_OK) st = kn_op_eager(&c, KN_CPU);
    if (st == KN_OK) {
        if (c.n_out == 1 && c.out[0]->ndim == 0 && c.out[0]->dtype == n->out[0].dtype)
            *value = kn_load_f64(kn_tensor_data(c.out[0]), c.out[0]->dtype);
        else st = KN_ERR_ARG;
        for (int k = 0; k < c.n_out; k++) kn_tensor_release(c.out[k]);
    }
    for (int k = 0; k < n->n_in; k++) kn_tensor_release(in[k]);
    return st;
}

kn_status kn_pass_fold_constants(kn_pass_ctx *x)
{
    kn_graph *g = x->g;
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (!kn_op_is_elementwise((kn_op)n->op) || n->n_in < 1) continue;
        if (n->n_out != 1 || n->out[0].ndim != 0) continue;
        bool all_const = true;
        for (int k = 0; k < n->n_in; k++)
            all_const = all_const && g->nodes[n->in_node[k]].op == KN_NODE_CONST && n->in_out[k] == 0;
        if (!all_const) continue;
        double v = 0;
        if (eval_const_op(g, n, &v) != KN_OK) continue; /* leave it to run (and fail) as traced */
        kn_meta m = n->out[0];
        char where[KN_WHERE_MAX];
        memcpy(where, n->where, sizeof where);
        memset(n, 0, sizeof *n);
        n->op = KN_NODE_CONST;
        n->value = v;
        n->n_out = 1;
        n->out[0] = m;
        memcpy(n->where, where, sizeof where);
    }
    return KN_OK;
}

/* ---- fold_once ---- */

/* A value of at most this many bytes is kept; a larger one is computed per
 * call as before (a plan keeps what it folds for its whole life). */
#define KN_FOLD_ONCE_MAX_BYTES ((int64_t)64 << 20)

/* Ops whose result is not a function of their inputs: never folded. */
static bool is_random_op(int op)
{
    return op == KN_OP_RANDN || op == KN_OP_RAND || op == KN_OP_RANDINT;
}

/* The device the graph runs on: its bound inputs' (kn_plan_build's rule:
 * the last bound input's). */
static bool graph_device(const kn_graph *g, kn_device *dev)
{
    bool any = false;
    for (int i = 0; i < g->n_inputs; i++)
        if (g->inputs[i].tensor) {
            *dev = kn_tensor_device(g->inputs[i].tensor);
            any = true;
        }
    return any;
}

/* "computed once: full, tril, logical_not": the ops of root's subgraph, in
 * graph order (the name :kernels shows). */
static void once_name(const kn_graph *g, const unsigned char *needed_by, int root, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "%s", KN_ONCE_PREFIX);
    for (int i = 0; i <= root && used < size; i++) {
        const kn_node *n = &g->nodes[i];
        if (!needed_by[i] || n->op >= KN_OP_COUNT) continue;
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used > strlen(KN_ONCE_PREFIX) ? ", " : "",
                                 kn_op_name((kn_op)n->op));
    }
}

/* Evaluate every fixed node a root needs, in graph order, on dev: the
 * roots and what they read are marked (mark), and val[KN_REF(i, k)] gets
 * each value. A node whose op fails is left to run (and fail) as traced,
 * and so is everything that reads it (unmarked, no longer a root). */
static kn_status evaluate_marked(kn_pass_ctx *x, kn_device dev, unsigned char *root, unsigned char *mark,
                                 kn_tensor **val)
{
    kn_graph *g = x->g;
    int n = g->n_nodes;
    kn_status st = KN_OK;
    for (int i = n - 1; i >= 0; i--) {
        if (!root[i] && !mark[i]) continue;
        mark[i] = 1;
        for (int k = 0; k < g->nodes[i].n_in; k++) mark[g->nodes[i].in_node[k]] = 1;
    }
    for (int i = 0; i < n && st == KN_OK; i++) {
        const kn_node *nd = &g->nodes[i];
        if (!mark[i]) continue;
        if (nd->op == KN_NODE_CONST) {
            st = kn_node_const_tensor(nd, dev, &val[KN_REF(i, 0)]);
            continue;
        }
        if (nd->op == KN_NODE_INPUT) { /* a fixed value (fold_once marked no other input) */
            kn_tensor *t = kn_pass_fixed_input(g, i, 0);
            if (t && kn_tensor_device(t) != dev) t = NULL; /* a tensor elsewhere: left to the plan */
            if (t) kn_tensor_retain(t);
            val[KN_REF(i, 0)] = t;
            if (!t) st = kn_error(KN_ERR_ARG, "fold_once: input node %d has no fixed value (a kiln bug)", i);
            continue;
        }
        kn_opcall c;
        kn_opcall_init(&c, (kn_op)nd->op);
        c.a = nd->a;
        c.n_in = nd->n_in;
        for (int k = 0; k < nd->n_in; k++) c.in[k] = val[KN_REF(nd->in_node[k], nd->in_out[k])];
        c.settings = x->settings;
        st = kn_op_eager(&c, dev);
        if (st != KN_OK) {
            st = KN_OK; /* left to run (and fail) as traced */
            mark[i] = 0;
            root[i] = 0;
            for (int j = i + 1; j < n; j++) /* nothing that reads it can be computed */
                for (int k = 0; k < g->nodes[j].n_in; k++)
                    if (!mark[g->nodes[j].in_node[k]] && mark[j]) mark[j] = root[j] = 0;
            continue;
        }
        for (int k = 0; k < c.n_out; k++) val[KN_REF(i, k)] = c.out[k];
    }
    return st;
}

/* Every root whose value came out as its node says becomes an input of
 * the graph holding that value, named for its subgraph ("computed once:
 * full, tril, logical_not"); its readers read the input instead. */
static kn_status roots_to_inputs(kn_pass_ctx *x, const unsigned char *root, kn_tensor **val)
{
    kn_graph *g = x->g;
    int n = g->n_nodes;
    kn_status st = KN_OK;
    for (int i = 0; i < n && st == KN_OK; i++) {
        if (!root[i] || !val[KN_REF(i, 0)]) continue;
        bool reads_inputs = false; /* a parameter or captured tensor, not constants alone */
        const kn_meta *m = &g->nodes[i].out[0];
        kn_meta got = kn_tensor_meta(val[KN_REF(i, 0)]);
        if (got.dtype != m->dtype || got.ndim != m->ndim ||
            memcmp(got.shape, m->shape, sizeof(int64_t) * (size_t)m->ndim) != 0)
            continue;
        /* the subgraph of this root, for the name */
        unsigned char *sub = calloc((size_t)n + 1, 1);
        if (!sub) {
            st = kn_error(KN_ERR_OOM, "fold_once: out of host memory");
            break;
        }
        sub[i] = 1;
        for (int j = i; j >= 0; j--)
            if (sub[j]) {
                reads_inputs = reads_inputs || g->nodes[j].op == KN_NODE_INPUT;
                for (int k = 0; k < g->nodes[j].n_in; k++) sub[g->nodes[j].in_node[k]] = 1;
            }
        char name[KN_NAME_MAX], where[KN_WHERE_MAX];
        once_name(g, sub, i, name, sizeof name);
        free(sub);
        memcpy(where, g->nodes[i].where, sizeof where);
        int in_node;
        st = kn_pass_add_folded_value(x, name, val[KN_REF(i, 0)], where, i, &in_node);
        if (st != KN_OK) break;
        g = x->g; /* the node array may have moved */
        /* from constants alone: nothing a write could change, nothing for
         * the plan to check; read from a parameter: the plan builds again
         * when it is written */
        g->inputs[g->n_inputs - 1].from_inputs = reads_inputs;
        x->repl[KN_REF(i, 0)] = KN_REF(in_node, 0);
        x->dead[i] = 1;
    }
    return st;
}

/* Whether idx (1-D, integral) holds 1, 2, ..., size: index_select by it
 * is the identity. */

static bool is_identity_index(kn_tensor *idx, int64_t size, const kn_settings *settings)
{
    if (idx->ndim != 1 || idx->shape[0] != size || size > ((int64_t)1 << 20) || kn_dtype_is_float(idx->dtype))
        return false;
    double *v = NULL;
    bool same = kn_pass_load_doubles(idx, settings, &v) == KN_OK;
    for (int64_t i = 0; same && i < size; i++) same = v[i] == (double)(i + 1);
    free(v);
    return same;
}

/* An index_select whose index fold_once just computed and found to be
 * 1..n over all n entries of its dim reads its input unchanged: its uses
 * take the input instead (BERT's padding mask goes through GatherND with
 * such an index: a gather kernel per call for nothing). The index still
 * becomes an input of the graph, unused: when it was computed from
 * parameters, that is what makes the plan check them (kn_plan_stale). */
static void drop_identity_gathers(kn_pass_ctx *x, const unsigned char *root, kn_tensor **val)
{
    kn_graph *g = x->g;
    int n = g->n_nodes;
    for (int i = 0; i < n; i++) {
        if (!root[i] || !val[KN_REF(i, 0)]) continue;
        int identity = -1; /* not checked yet */
        for (int j = i + 1; j < n; j++) {
            const kn_node *nd = &g->nodes[j];
            if (x->dead[j] || nd->op != KN_OP_INDEX_SELECT || nd->in_node[1] != i || nd->in_out[1] != 0 ||
                nd->in_node[0] == i)
                continue;
            const kn_meta *src = &g->nodes[nd->in_node[0]].out[nd->in_out[0]];
            if (nd->a.dim < 0 || nd->a.dim >= src->ndim || !kn_pass_meta_equal(src, &nd->out[0])) continue;
            if (identity < 0) identity = is_identity_index(val[KN_REF(i, 0)], src->shape[nd->a.dim], x->settings);
            if (identity) kn_pass_replace(x, j, KN_REF(nd->in_node[0], nd->in_out[0]));
        }
    }
}

/* Whether t holds 1 in every element (at most 2^20 of them). */
static bool all_ones(kn_tensor *t, const kn_settings *settings)
{
    int64_t n = kn_tensor_numel(t);
    if (n < 1 || n > ((int64_t)1 << 20)) return false;
    double *v = NULL;
    bool ones = kn_pass_load_doubles(t, settings, &v) == KN_OK;
    for (int64_t i = 0; ones && i < n; i++) ones = v[i] == 1.0;
    free(v);
    return ones;
}

/* A mul by a value fold_once just computed and found to be all ones is
 * its other operand, broadcast to the product's shape: an expand, a view
 * (BERT's padding mask is multiplied by a query-side mask of ones, from
 * the exporter, which made it a B x 1 x T x T tensor a call where the
 * B x 1 x 1 x T mask is the information; as a view of that, sink_views
 * moves the mask's ops before the broadcast, and attention reads it with
 * stride 0). Only where the other operand has the product's dtype. As
 * with an identity gather, the ones still become an unused input. */
static void drop_unit_factors(kn_pass_ctx *x, const unsigned char *root, kn_tensor **val)
{
    int n = x->g->n_nodes;
    for (int i = 0; i < n; i++) {
        if (!root[i] || !val[KN_REF(i, 0)]) continue;
        int ones = -1; /* not checked yet */
        for (int j = i + 1; j < n; j++) {
            const kn_node *nd = &x->g->nodes[j];
            if (x->dead[j] || nd->op != KN_OP_MUL || nd->n_in != 2) continue;
            int side = nd->in_node[0] == i && nd->in_out[0] == 0 ? 1 : nd->in_node[1] == i && nd->in_out[1] == 0 ? 0 : -1;
            if (side < 0 || nd->in_node[side] == i) continue;
            int other = KN_REF(nd->in_node[side], nd->in_out[side]);
            const kn_meta *om = &x->g->nodes[nd->in_node[side]].out[nd->in_out[side]];
            if (om->dtype != nd->out[0].dtype) continue;
            if (ones < 0) ones = all_ones(val[KN_REF(i, 0)], x->settings);
            if (!ones) break;
            if (kn_pass_meta_equal(om, &nd->out[0])) {
                kn_pass_replace(x, j, other);
                continue;
            }
            kn_opcall defaults;
            kn_opcall_init(&defaults, KN_OP_EXPAND);
            kn_attrs a = defaults.a;
            a.nshape = nd->out[0].ndim;
            memcpy(a.shape, nd->out[0].shape, sizeof(int64_t) * (size_t)a.nshape);
            char where[KN_WHERE_MAX];
            memcpy(where, nd->where, sizeof where);
            int e;
            if (kn_pass_append_node(x, KN_OP_EXPAND, &other, 1, &a, j, where, &e) != KN_OK) continue;
            if (!kn_pass_meta_equal(&x->g->nodes[e].out[0], &x->g->nodes[j].out[0]) ||
                !kn_pass_replace(x, j, KN_REF(e, 0)))
                x->dead[e] = 1;
        }
    }
}

kn_status kn_pass_fold_once(kn_pass_ctx *x)
{
    kn_graph *g = x->g;
    kn_device dev = KN_CPU;
    if (!graph_device(g, &dev)) return KN_OK; /* an unbound copy: nothing runs here */
    int n = g->n_nodes;
    /* fixed: depends on no input and nothing random; work: its subgraph
     * computes something (a lone full, viewed or not, is inlined into its
     * reader as a constant: folding it would turn that into a load) */
    unsigned char *fixed = calloc((size_t)n + 1, 1), *work = calloc((size_t)n + 1, 1);
    unsigned char *root = calloc((size_t)n + 1, 1), *mark = calloc((size_t)n + 1, 1);
    kn_tensor **val = calloc((size_t)n * KN_MAX_OUTPUTS + 1, sizeof *val);
    kn_status st = KN_OK;
    if (!fixed || !work || !root || !mark || !val) {
        st = kn_error(KN_ERR_OOM, "fold_once: out of host memory");
        goto done;
    }
    /* a parameter or captured tensor is fixed too (not in a training step,
     * which writes its parameters at every call: kn_pass_fixed_value), so
     * BERT's position and token-type embeddings, gathered by ids the model
     * holds, are gathered once; the plan builds again when one is written
     * (kn_plan_stale) */
    bool trains = kn_pass_graph_trains(g);
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        if (x->dead[i]) continue;
        if (nd->op == KN_NODE_INPUT) {
            kn_tensor *t = trains ? NULL : kn_pass_fixed_input(g, i, 0);
            fixed[i] = t && kn_tensor_device(t) == dev;
            continue;
        }
        if (nd->op == KN_NODE_CONST) {
            fixed[i] = 1;
            continue;
        }
        if (is_random_op(nd->op)) continue;
        bool f = true, w = nd->op != KN_OP_FULL && kn_op_kind_of((kn_op)nd->op) != KN_K_VIEW;
        for (int k = 0; k < nd->n_in; k++) {
            f = f && fixed[nd->in_node[k]];
            w = w || work[nd->in_node[k]];
        }
        fixed[i] = f;
        work[i] = f && w;
    }
    /* roots: fixed values with work that a non-fixed node reads; never a
     * caller output (the caller would hold the plan's own buffer) */
    int n_roots = 0;
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        if (x->dead[i] || fixed[i]) continue;
        for (int k = 0; k < nd->n_in; k++) {
            int s = nd->in_node[k];
            const kn_node *sn = &g->nodes[s];
            if (!work[s] || root[s] || sn->n_out != 1 || kn_pass_is_output(x, s)) continue;
            int64_t bytes = kn_numel_of(sn->out[0].ndim, sn->out[0].shape) * (int64_t)kn_dtype_size(sn->out[0].dtype);
            if (bytes > KN_FOLD_ONCE_MAX_BYTES) continue;
            root[s] = 1;
            n_roots++;
        }
    }
    if (n_roots == 0) goto done;
    st = evaluate_marked(x, dev, root, mark, val);
    if (st == KN_OK) drop_identity_gathers(x, root, val);
    if (st == KN_OK) drop_unit_factors(x, root, val);
    if (st == KN_OK) st = roots_to_inputs(x, root, val);
done:
    for (int i = 0; val && i < n * KN_MAX_OUTPUTS; i++) kn_tensor_release(val[i]);
    free(val);
    free(fixed);
    free(work);
    free(root);
    free(mark);
    return st;
}

/* ---- fold_batch_norm ---- */

/* The bound tensor of INPUT node r (output 0) when it is the same tensor
 * at every call (its values can be baked: the plan checks their version
 * at each run), else NULL. */
static kn_tensor *bound(const kn_graph *g, int node, int out)
{
    const kn_node *n = &g->nodes[node];
    if (n->op != KN_NODE_INPUT || out != 0 || n->input < 0 || n->input >= g->n_inputs) return NULL;
    if (!kn_input_keeps_values(&g->inputs[n->input])) return NULL;
    kn_tensor *t = g->inputs[n->input].tensor;
    return t && t->storage && kn_dtype_is_float(t->dtype) ? t : NULL;
}

/* A new tensor of dtype/shape on dev holding v. */
static kn_status store_doubles(const double *v, kn_dtype dt, int ndim, const int64_t *shape,
                               kn_device dev, kn_tensor **out)
{
    kn_tensor *h;
    KN_TRY(kn_tensor_new(dt, ndim, shape, KN_CPU, &h));
    int64_t n = kn_tensor_numel(h);
    size_t es = kn_dtype_size(dt);
    unsigned char *p = h->storage->data;
    for (int64_t i = 0; i < n; i++) kn_store_f64(p + (size_t)i * es, dt, v[i]);
    if (dev == KN_CPU) {
        *out = h;
        return KN_OK;
    }
    kn_status st = kn_tensor_to_device(h, dev, NULL, out); /* contiguous: no kernel runs */
    kn_tensor_release(h);
    return st;
}

/* How many inputs of all nodes, and caller outputs, read node `node`. */
static int use_count(const kn_pass_ctx *x, int node)
{
    int uses = 0;
    for (int i = 0; i < x->g->n_nodes; i++) {
        if (x->dead[i]) continue;
        const kn_node *n = &x->g->nodes[i];
        for (int k = 0; k < n->n_in; k++) uses += n->in_node[k] == node;
    }
    for (int k = 0; k < x->n_outputs; k++) uses += x->outputs[k] == node;
    return uses;
}

typedef struct bn_fold {
    int conv, bn;
    kn_tensor *w, *cbias;            /* the conv's (bias may be NULL) */
    kn_tensor *p[4];                 /* mean, var, weight, bias (the last two may be NULL) */
    double eps;
} bn_fold;

/* Whether batch_norm node i can fold into its conv; fills f. */
static bool bn_match(kn_pass_ctx *x, int i, bn_fold *f)
{
    const kn_graph *g = x->g;
    const kn_node *bn = &g->nodes[i];
    if (bn->op != KN_OP_BATCH_NORM || bn->n_in < 3 || bn->in_out[0] != 0) return false;
    const kn_node *conv = &g->nodes[bn->in_node[0]];
    if (conv->op != KN_OP_CONV2D || conv->out[0].ndim != 4 || conv->n_in < 2) return false;
    memset(f, 0, sizeof *f);
    f->conv = bn->in_node[0];
    f->bn = i;
    f->eps = bn->a.eps;
    f->w = bound(g, conv->in_node[1], conv->in_out[1]);
    if (!f->w || f->w->ndim != 4) return false;
    if (conv->n_in > 2 && !(f->cbias = bound(g, conv->in_node[2], conv->in_out[2]))) return false;
    for (int k = 1; k < bn->n_in; k++)
        if (!(f->p[k - 1] = bound(g, bn->in_node[k], bn->in_out[k]))) return false;
    return use_count(x, f->conv) == 1;
}

/* w' = w * s, b' = (b_conv - mean) * s + beta, s = gamma / sqrt(var + eps),
 * per output channel. */
static kn_status bn_compute(const bn_fold *f, const kn_settings *settings, kn_tensor **w_out, kn_tensor **b_out)
{
    double *w = NULL, *cb = NULL, *p[4] = {NULL};
    int64_t oc = f->w->shape[0], per = kn_tensor_numel(f->w) / (oc > 0 ? oc : 1);
    kn_status st = kn_pass_load_doubles(f->w, settings, &w);
    if (st == KN_OK && f->cbias) st = kn_pass_load_doubles(f->cbias, settings, &cb);
    for (int k = 0; k < 4 && st == KN_OK; k++)
        if (f->p[k]) st = kn_pass_load_doubles(f->p[k], settings, &p[k]);
    double *b = st == KN_OK ? malloc(sizeof(double) * (size_t)(oc > 0 ? oc : 1)) : NULL;
    if (st == KN_OK && !b) st = kn_error(KN_ERR_OOM, "fold_batch_norm: out of host memory");
    if (st == KN_OK) {
        for (int64_t c = 0; c < oc; c++) {
            double s = (p[2] ? p[2][c] : 1.0) / sqrt(p[1][c] + f->eps);
            for (int64_t j = 0; j < per; j++) w[c * per + j] *= s;
            b[c] = ((cb ? cb[c] : 0.0) - p[0][c]) * s + (p[3] ? p[3][c] : 0.0);
        }
        kn_device dev = kn_tensor_device(f->w);
        kn_dtype bdt = f->cbias ? f->cbias->dtype : f->w->dtype;
        st = store_doubles(w, f->w->dtype, 4, f->w->shape, dev, w_out);
        if (st == KN_OK) {
            st = store_doubles(b, bdt, 1, &oc, dev, b_out);
            if (st != KN_OK) kn_tensor_release(*w_out);
        }
    }
    free(w);
    free(cb);
    free(b);
    for (int k = 0; k < 4; k++) free(p[k]);
    return st;
}

static kn_status bn_apply(kn_pass_ctx *x, const bn_fold *f)
{
    kn_tensor *wt, *bt;
    KN_TRY(bn_compute(f, x->settings, &wt, &bt));
    kn_graph *g = x->g;
    char where[KN_WHERE_MAX];
    memcpy(where, g->nodes[f->conv].where, sizeof where);
    int wn, bn_node;
    kn_status st = kn_pass_add_folded_value(x, "folded conv weight", wt, where, f->conv, &wn);
    kn_tensor_release(wt);
    if (st == KN_OK) st = kn_pass_add_folded_value(x, "folded conv bias", bt, where, f->conv, &bn_node);
    kn_tensor_release(bt);
    if (st != KN_OK) return st;
    g = x->g;
    kn_node *conv = &g->nodes[f->conv]; /* after add_input: nodes may have moved */
    kn_node saved = *conv;
    conv->n_in = 3;
    conv->in_node[1] = wn;
    conv->in_out[1] = 0;
    conv->in_node[2] = bn_node;
    conv->in_out[2] = 0;
    kn_meta m[KN_MAX_OUTPUTS];
    int n_out;
    if (kn_node_infer(g, f->conv, m, &n_out) != KN_OK || n_out != 1 ||
        m[0].dtype != g->nodes[f->bn].out[0].dtype) {
        *conv = saved; /* the new inputs stay, unused */
        return KN_OK;
    }
    x->repl[KN_REF(f->bn, 0)] = KN_REF(f->conv, 0);
    x->dead[f->bn] = 1;
    return KN_OK;
}

kn_status kn_pass_fold_batch_norm(kn_pass_ctx *x)
{
    int n = x->g->n_nodes;
    for (int i = 0; i < n; i++) {
        bn_fold f;
        if (!bn_match(x, i, &f)) continue;
        KN_TRY(bn_apply(x, &f));
    }
    return KN_OK;
}
