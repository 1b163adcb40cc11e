/* kn_graph: building, copying and running graphs. The runner here is the
 * reference executor: node by node through kn_op_eager, so any backend with
 * per-op kernels can run any graph; the compiler replaces it with fused
 * kernels for the nodes it takes. */
#include "kn_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_view.h"

void kn_graph_init(kn_graph *g)
{
    memset(g, 0, sizeof *g);
}

void kn_graph_unbind(kn_graph *g)
{
    for (int i = 0; i < g->n_inputs; i++) {
        kn_tensor_release(g->inputs[i].tensor);
        g->inputs[i].tensor = NULL;
    }
}

void kn_graph_free(kn_graph *g)
{
    kn_graph_unbind(g);
    free(g->nodes);
    free(g->inputs);
    kn_graph_init(g);
}

static kn_status grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return KN_OK;
    int ncap = *cap ? *cap * 2 : 32;
    while (ncap < need) ncap *= 2;
    void *np = realloc(*p, (size_t)ncap * elem);
    if (!np) return kn_error(KN_ERR_OOM, "out of host memory for a graph");
    *p = np;
    *cap = ncap;
    return KN_OK;
}

kn_status kn_graph_copy(const kn_graph *src, kn_graph *dst)
{
    kn_graph_init(dst);
    KN_TRY(grow((void **)&dst->nodes, &dst->cap_nodes, src->n_nodes, sizeof(kn_node)));
    if (src->n_inputs > 0 &&
        grow((void **)&dst->inputs, &dst->cap_inputs, src->n_inputs, sizeof(kn_graph_input)) != KN_OK) {
        kn_graph_free(dst);
        return KN_ERR_OOM;
    }
    if (src->n_nodes) memcpy(dst->nodes, src->nodes, sizeof(kn_node) * (size_t)src->n_nodes);
    if (src->n_inputs) memcpy(dst->inputs, src->inputs, sizeof(kn_graph_input) * (size_t)src->n_inputs);
    dst->n_nodes = src->n_nodes;
    dst->n_inputs = src->n_inputs;
    for (int i = 0; i < dst->n_inputs; i++) dst->inputs[i].tensor = NULL;
    return KN_OK;
}

kn_status kn_graph_add_node(kn_graph *g, const kn_node *n, int *index)
{
    KN_TRY(grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(kn_node)));
    g->nodes[g->n_nodes] = *n;
    *index = g->n_nodes++;
    return KN_OK;
}

/* An input's record of tensor t (retained: the graph holds it). */
static void fill_input(kn_graph_input *in, kn_input_kind kind, const char *name, kn_tensor *t)
{
    memset(in, 0, sizeof *in);
    in->kind = kind;
    snprintf(in->name, sizeof in->name, "%s", name);
    in->tensor = t;
    kn_tensor_retain(t);
    in->tensor_id = t->id;
    in->meta = kn_tensor_meta(t);
    memcpy(in->strides, t->strides, sizeof in->strides);
    in->device = kn_tensor_device(t);
}

kn_status kn_graph_add_input(kn_graph *g, kn_input_kind kind, const char *name, kn_tensor *t,
                             const char *where, int *node)
{
    KN_TRY(grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof(kn_graph_input)));
    kn_graph_input *in = &g->inputs[g->n_inputs];
    fill_input(in, kind, name, t);
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = KN_NODE_INPUT;
    n.input = g->n_inputs;
    n.n_out = 1;
    n.out[0] = in->meta;
    snprintf(n.name, sizeof n.name, "%s", name);
    snprintf(n.where, sizeof n.where, "%s", where ? where : "?");
    g->n_inputs++;
    return kn_graph_add_node(g, &n, node);
}

kn_status kn_graph_const_to_input(kn_graph *g, int node, kn_input_kind kind, const char *name, kn_tensor *t)
{
    kn_node *n = &g->nodes[node];
    if (n->op != KN_NODE_CONST) return kn_error(KN_ERR_ARG, "node %d is not a constant", node);
    KN_TRY(grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof(kn_graph_input)));
    /* inputs are numbered in the order their nodes appear, as a trace adds them */
    int at = 0;
    for (int i = 0; i < node; i++) at += g->nodes[i].op == KN_NODE_INPUT;
    memmove(&g->inputs[at + 1], &g->inputs[at], sizeof(kn_graph_input) * (size_t)(g->n_inputs - at));
    for (int i = node + 1; i < g->n_nodes; i++)
        if (g->nodes[i].op == KN_NODE_INPUT) g->nodes[i].input++;
    kn_graph_input *in = &g->inputs[at];
    fill_input(in, kind, name, t);
    g->n_inputs++;
    n->op = KN_NODE_INPUT;
    n->input = at;
    n->value = 0;
    n->out[0] = in->meta;
    snprintf(n->name, sizeof n->name, "%s", name);
    return KN_OK;
}

int kn_graph_op_count(const kn_graph *g)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].op < KN_OP_COUNT;
    return n;
}

int kn_graph_first_backward_reader(const kn_graph *g, int i, int o, int end, const unsigned char *dead)
{
    for (int j = i + 1; j < end; j++) {
        const kn_node *u = &g->nodes[j];
        if ((dead && dead[j]) || u->part != KN_PART_BACKWARD) continue;
        for (int k = 0; k < u->n_in; k++)
            if (u->in_node[k] == i && u->in_out[k] == o) return j;
    }
    return -1;
}

const char *kn_part_name(int part)
{
    return part == KN_PART_BACKWARD ? "backward" : part == KN_PART_UPDATE ? "update" : "forward";
}

const char *kn_node_op_name(const kn_node *n)
{
    if (n->op == KN_NODE_INPUT) return "input";
    if (n->op == KN_NODE_CONST) return "constant";
    return kn_op_name((kn_op)n->op);
}

const char *kn_node_label(const kn_node *n, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "%s", kn_node_op_name(n));
    if (n->op == KN_OP_GATHER_SCATTER)
        for (int i = 0; i < n->a.n_epilogue && i < KN_GATHER_SCATTER_EPILOGUE_MAX && len < size; i++)
            len += (size_t)snprintf(buf + len, size - len, "+%s", kn_op_name((kn_op)n->a.epilogue[i]));
    return buf;
}

kn_status kn_node_const_tensor(const kn_node *n, kn_device dev, kn_tensor **out)
{
    kn_tensor *t;
    KN_TRY(kn_tensor_new(n->out[0].dtype, 0, NULL, KN_CPU, &t));
    kn_store_f64(t->storage->data, n->out[0].dtype, n->value);
    if (dev == KN_CPU) {
        *out = t;
        return KN_OK;
    }
    kn_status st = kn_tensor_to_device(t, dev, NULL, out); /* contiguous: no kernel runs */
    kn_tensor_release(t);
    return st;
}

kn_status kn_graph_run(const kn_graph *g, const struct kn_settings *settings, kn_tensor **values)
{
    memset(values, 0, sizeof(kn_tensor *) * (size_t)g->n_nodes * KN_MAX_OUTPUTS);
    kn_device dev = g->n_inputs > 0 && g->inputs[0].tensor ? kn_tensor_device(g->inputs[0].tensor) : KN_CPU;
    kn_status st = KN_OK;
    for (int i = 0; i < g->n_nodes && st == KN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        kn_tensor **v = &values[i * KN_MAX_OUTPUTS];
        if (n->op == KN_NODE_INPUT) {
            v[0] = g->inputs[n->input].tensor;
            kn_tensor_retain(v[0]);
            if (!v[0]) st = kn_error(KN_ERR_ARG, "graph input '%s' is not bound", n->name);
            continue;
        }
        if (n->op == KN_NODE_CONST) {
            st = kn_node_const_tensor(n, dev, &v[0]);
            continue;
        }
        kn_opcall c;
        kn_opcall_init(&c, (kn_op)n->op);
        c.a = n->a;
        c.n_in = n->n_in;
        for (int k = 0; k < n->n_in; k++) c.in[k] = values[n->in_node[k] * KN_MAX_OUTPUTS + n->in_out[k]];
        c.settings = settings;
        st = kn_op_eager(&c, dev);
        if (st != KN_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", kn_last_error());
            st = kn_error(st, "%s (node %d, traced at %s)", msg, i, n->where);
            break;
        }
        for (int k = 0; k < c.n_out; k++) v[k] = c.out[k];
    }
    if (st != KN_OK)
        for (int i = 0; i < g->n_nodes * KN_MAX_OUTPUTS; i++) {
            kn_tensor_release(values[i]);
            values[i] = NULL;
        }
    return st;
}

void kn_graph_value_header(const kn_meta *m, kn_tensor *t)
{
    memset(t, 0, sizeof *t);
    t->refcount = 1;
    t->dtype = m->dtype;
    t->ndim = m->ndim;
    memcpy(t->shape, m->shape, sizeof t->shape);
    if ((unsigned)m->ndim <= KN_MAX_DIMS) kn_contiguous_strides(m->ndim, m->shape, t->strides);
}

bool kn_graph_node_call(const kn_graph *g, const kn_node *n, kn_tensor hdr[KN_MAX_INPUTS], kn_opcall *c)
{
    if (n->op >= KN_OP_COUNT || n->n_in > KN_MAX_INPUTS) return false;
    kn_opcall_init(c, (kn_op)n->op);
    c->a = n->a;
    c->n_in = n->n_in;
    for (int k = 0; k < n->n_in; k++) {
        kn_graph_value_header(&g->nodes[n->in_node[k]].out[n->in_out[k]], &hdr[k]);
        c->in[k] = &hdr[k];
    }
    return true;
}

kn_status kn_node_infer(const kn_graph *g, int i, kn_meta out[KN_MAX_OUTPUTS], int *n_out)
{
    const kn_node *n = &g->nodes[i];
    kn_tensor t[KN_MAX_INPUTS];
    kn_opcall c;
    *n_out = 0;
    if ((unsigned)n->op >= KN_OP_COUNT)
        return kn_error(KN_ERR_ARG, "node %d: not an op node", i);
    if (n->n_in < 0 || n->n_in > KN_MAX_INPUTS)
        return kn_error(KN_ERR_ARG, "node %d: %d inputs", i, n->n_in);
    for (int k = 0; k < n->n_in; k++) {
        int s = n->in_node[k], o = n->in_out[k];
        if (s < 0 || s >= g->n_nodes || o < 0 || o >= g->nodes[s].n_out)
            return kn_error(KN_ERR_ARG, "node %d: input %d names a missing value %d:%d", i, k + 1,
                            s, o);
    }
    kn_graph_node_call(g, n, t, &c);
    return kn_op_infer(&c, out, n_out);
}
