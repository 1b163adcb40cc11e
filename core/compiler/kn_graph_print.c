/* kn_graph_print: a graph as text, one line per node (KILN_LOGS=passes,
 * debugging, test failure messages). Dims in attributes print 1-based, as
 * the Lua user wrote them and as messages show them. */
#include "kn_graph_print.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_strbuf.h"

static void sb_ints(kn_strbuf *b, const char *key, const int *v, int n, int add)
{
    kn_strbuf_printf(b, " %s={", key);
    for (int i = 0; i < n; i++) kn_strbuf_printf(b, "%s%d", i ? "," : "", v[i] + add);
    kn_strbuf_printf(b, "}");
}

static void sb_shape(kn_strbuf *b, const char *key, const int64_t *v, int n)
{
    char s[160];
    kn_strbuf_printf(b, " %s=%s", key, kn_shape_str(n < 0 ? 0 : n > KN_MAX_DIMS ? KN_MAX_DIMS : n, v, s, sizeof s));
}

static void attrs_text(kn_strbuf *b, const kn_node *n)
{
    const kn_attrs *a = &n->a;
    kn_op op = (kn_op)n->op;
    switch (kn_op_kind_of(op)) {
    case KN_K_UNARY:
        if (op == KN_OP_CAST) kn_strbuf_printf(b, " to=%s", kn_dtype_name(a->dtype));
        break;
    case KN_K_MASKED: kn_strbuf_printf(b, " value=%g", a->value); break;
    case KN_K_REDUCE:
        if (a->ndims == 0) kn_strbuf_printf(b, " dims=all");
        else sb_ints(b, "dims", a->dims, a->ndims, 1);
        if (a->keepdim) kn_strbuf_printf(b, " keepdim");
        if (op == KN_OP_VAR) kn_strbuf_printf(b, " correction=%d", a->correction);
        break;
    case KN_K_ARGREDUCE: kn_strbuf_printf(b, " dim=%d%s", a->dim + 1, a->keepdim ? " keepdim" : ""); break;
    case KN_K_INDEX:
        if (op == KN_OP_GATHER_SCATTER) { /* rows: the zero fill folded; else the last input is the base */
            if (a->nshape == 1) kn_strbuf_printf(b, " rows=%lld", (long long)a->shape[0]);
            else kn_strbuf_printf(b, " base");
            break; /* its epilogue shows in the op column: gather_scatter+relu */
        }
        kn_strbuf_printf(b, " dim=%d", a->dim + 1);
        break;
    case KN_K_SOFTMAX:
    case KN_K_CAT: kn_strbuf_printf(b, " dim=%d", a->dim + 1); break;
    case KN_K_NORM:
        if (op == KN_OP_LAYER_NORM) sb_shape(b, "shape", a->shape, a->nshape);
        kn_strbuf_printf(b, " eps=%g", a->eps);
        break;
    case KN_K_CONV:
        kn_strbuf_printf(b, " stride={%d,%d} padding={%d,%d} dilation={%d,%d} groups=%d", a->stride[0],
                  a->stride[1], a->padding[0], a->padding[1], a->dilation[0], a->dilation[1],
                  a->groups);
        if (a->in_layout || a->out_layout)
            kn_strbuf_printf(b, " layout=%s->%s", a->in_layout ? "nhwc" : "nchw", a->out_layout ? "nhwc" : "nchw");
        break;
    case KN_K_POOL:
        if (op == KN_OP_ADAPTIVE_AVG_POOL2D) sb_shape(b, "size", a->shape, a->nshape);
        else
            kn_strbuf_printf(b, " kernel={%d,%d} stride={%d,%d} padding={%d,%d}", a->kernel[0],
                      a->kernel[1], a->stride[0], a->stride[1], a->padding[0], a->padding[1]);
        break;
    case KN_K_ATTENTION: kn_strbuf_printf(b, " scale=%g%s", a->scale, a->causal ? " causal" : ""); break;
    case KN_K_TRI: kn_strbuf_printf(b, " diagonal=%lld", (long long)a->diagonal); break;
    case KN_K_VIEW:
        if (op == KN_OP_PERMUTE) sb_ints(b, "dims", a->dims, a->ndims, 1);
        else if (op == KN_OP_SLICE)
            kn_strbuf_printf(b, " dim=%d start=%lld stop=%lld step=%lld", a->dim + 1, (long long)a->start,
                      (long long)a->stop, (long long)a->step);
        else sb_shape(b, "shape", a->shape, a->nshape);
        break;
    case KN_K_CREATE:
        sb_shape(b, "shape", a->shape, a->nshape);
        if (op == KN_OP_FULL) kn_strbuf_printf(b, " value=%g", a->value);
        else if (op == KN_OP_ARANGE) kn_strbuf_printf(b, " start=%g step=%g", a->value, a->value2);
        else kn_strbuf_printf(b, " seed=%llu", (unsigned long long)a->seed);
        break;
    default: break;
    }
}

static void node_text(kn_strbuf *b, const kn_graph *g, int i)
{
    static const char *const kinds[] = {"arg", "param", "graph output", "tensor", "value"};
    const kn_node *n = &g->nodes[i];
    char ins[160] = "", s[160];
    size_t len = 0;
    for (int k = 0; k < n->n_in && k < KN_MAX_INPUTS && len < sizeof ins - 16; k++) {
        int w = n->in_out[k] ? snprintf(ins + len, sizeof ins - len, "%s%d:%d", k ? ", " : "",
                                        n->in_node[k], n->in_out[k])
                             : snprintf(ins + len, sizeof ins - len, "%s%d", k ? ", " : "",
                                        n->in_node[k]);
        if (w > 0) len += (size_t)w;
    }
    char label[64];
    kn_strbuf_printf(b, "%4d  %-14s", i, kn_node_label(n, label, sizeof label));
    if (n->op < KN_OP_COUNT) {
        char paren[176];
        snprintf(paren, sizeof paren, "(%s)", ins);
        kn_strbuf_printf(b, " %-14s", paren);
    }
    for (int k = 0; k < n->n_out && k < KN_MAX_OUTPUTS; k++) {
        int nd = n->out[k].ndim < 0 ? 0 : n->out[k].ndim > KN_MAX_DIMS ? KN_MAX_DIMS : n->out[k].ndim;
        kn_strbuf_printf(b, "%s%s%s", k ? ", " : " ",
                  (unsigned)n->out[k].dtype < KN_DTYPE_COUNT ? kn_dtype_name(n->out[k].dtype) : "?",
                  kn_shape_str(nd, n->out[k].shape, s, sizeof s));
    }
    if (n->op == KN_NODE_INPUT) {
        bool ok = n->input >= 0 && n->input < g->n_inputs;
        const kn_graph_input *in = ok ? &g->inputs[n->input] : NULL;
        kn_strbuf_printf(b, " #%d '%s' (%s%s)", n->input, in ? in->name : n->name,
                  in && (unsigned)in->kind < 5 ? kinds[in->kind] : "?",
                  in && in->tensor ? ", bound" : "");
    } else if (n->op == KN_NODE_CONST) {
        kn_strbuf_printf(b, " value=%.9g", n->value);
        if (n->name[0]) kn_strbuf_printf(b, " '%s'", n->name);
    } else attrs_text(b, n);
    kn_strbuf_printf(b, "  at %s\n", n->where[0] ? n->where : "?");
}

kn_status kn_graph_format(const kn_graph *g, char **text)
{
    kn_strbuf b = {0};
    kn_strbuf_puts(&b, "");
    for (int i = 0; i < g->n_nodes; i++) node_text(&b, g, i);
    return kn_strbuf_finish(&b, text, "graph format");
}
