/* kn_pass_ctx: the rewrite context the passes share (see kn_pass_ctx.h). */
#include "kn_pass_ctx.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_view.h"

kn_status kn_pass_sync(kn_pass_ctx *x)
{
    int n = x->g->n_nodes;
    if (n <= x->cap) return KN_OK;
    int ncap = x->cap ? x->cap : 16;
    while (ncap < n) ncap *= 2;
    int *repl = realloc(x->repl, sizeof(int) * (size_t)ncap * KN_MAX_OUTPUTS);
    if (repl) x->repl = repl;
    unsigned char *dead = realloc(x->dead, (size_t)ncap);
    if (dead) x->dead = dead;
    int *before = realloc(x->before, sizeof(int) * (size_t)ncap);
    if (before) x->before = before;
    if (!repl || !dead || !before) return kn_error(KN_ERR_OOM, "passes: out of host memory");
    for (int i = x->cap; i < ncap; i++) {
        for (int k = 0; k < KN_MAX_OUTPUTS; k++) x->repl[KN_REF(i, k)] = KN_REF(i, k);
        x->dead[i] = 0;
        x->before[i] = -1;
    }
    x->cap = ncap;
    return KN_OK;
}

int kn_pass_resolve(const kn_pass_ctx *x, int r)
{
    while (x->repl[r] != r) r = x->repl[r];
    return r;
}

void kn_pass_resolve_inputs(kn_pass_ctx *x, int i)
{
    kn_node *n = &x->g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
        int r = kn_pass_resolve(x, KN_REF(n->in_node[k], n->in_out[k]));
        n->in_node[k] = KN_REF_NODE(r);
        n->in_out[k] = KN_REF_OUT(r);
    }
}

bool kn_pass_is_output(const kn_pass_ctx *x, int i)
{
    for (int k = 0; k < x->n_outputs; k++)
        if (kn_pass_resolve(x, KN_REF(x->outputs[k], 0)) == KN_REF(i, 0)) return true;
    return false;
}

bool kn_pass_replace(kn_pass_ctx *x, int i, int r)
{
    if (KN_REF_OUT(r) != 0 && kn_pass_is_output(x, i)) return false;
    x->repl[KN_REF(i, 0)] = r;
    x->dead[i] = 1;
    return true;
}

double kn_pass_const_value(const kn_node *n)
{
    /* a number next to an f16 or bf16 tensor enters the op in f32, the
     * type half ops compute in (x * (1 + 2^-11) is not x * 1 in f16) */
    kn_dtype dt = n->out[0].dtype == KN_F16 || n->out[0].dtype == KN_BF16 ? KN_F32 : n->out[0].dtype;
    unsigned char buf[16];
    kn_store_f64(buf, dt, n->value);
    return kn_load_f64(buf, dt);
}

/* ---- what the pattern passes share (kn_pass_attention, kn_pass_gather_scatter) ---- */

/* Append one line to the notes (best effort: a note that cannot be kept is
 * dropped, it never fails the compile). */
void kn_pass_note(kn_pass_ctx *x, const char *fmt, ...)
{
    if (!x->notes) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n <= 0) return;
    if ((size_t)n >= sizeof line) n = (int)sizeof line - 1;
    size_t old = *x->notes ? strlen(*x->notes) : 0;
    char *p = realloc(*x->notes, old + (size_t)n + 2);
    if (!p) return;
    memcpy(p + old, line, (size_t)n);
    p[old + (size_t)n] = '\n';
    p[old + (size_t)n + 1] = 0;
    *x->notes = p;
}

/* "matmul (f.lua:3)": how a note names a node */
const char *kn_pass_who(const kn_graph *g, int i, char *buf, size_t size)
{
    const kn_node *n = &g->nodes[i];
    char op[64];
    snprintf(buf, size, "%s (%s)", kn_node_label(n, op, sizeof op), n->where[0] ? n->where : "no source line");
    return buf;
}

void kn_pass_covers_text(const kn_graph *g, const int *order, int n, const char *folded, char *buf, size_t size)
{
    /* what was folded is kept whole: a list too long for the buffer (ONNX
     * node names are long) loses its end, marked "...", not the suffix */
    size_t tail = folded ? strlen(folded) : 0;
    if (tail + 8 > size) tail = 0, folded = NULL;
    size_t room = size - tail; /* the list and its NUL */
    size_t len = 0;
    bool cut = false;
    buf[0] = 0;
    const char *first = g->nodes[order[0]].where;
    const char *colon = strrchr(first, ':');
    size_t file_len = colon ? (size_t)(colon - first) : 0;
    for (int i = 0; i < n && !cut; i++) {
        const char *w = g->nodes[order[i]].where;
        const char *shown = w;
        if (i > 0 && file_len && !strncmp(w, first, file_len) && w[file_len] == ':') shown = w + file_len;
        int wrote = snprintf(buf + len, room - len, "%s%s%s%s", i ? ", " : "", kn_node_op_name(&g->nodes[order[i]]),
                             shown[0] ? " " : "", shown);
        if (wrote < 0 || len + (size_t)wrote >= room) {
            cut = true;
            len = room - 4;
            memcpy(buf + len, "...", 4);
            len += 3;
        } else {
            len += (size_t)wrote;
        }
    }
    if (folded) snprintf(buf + len, size - len, "%s", folded);
}

/* Readers of node's values, through the replacements made so far: a node
 * that reads one replaced by `node` reads `node` (its inputs are resolved
 * only when a pass visits it). */
static int use_count(const kn_pass_ctx *x, int node)
{
    int uses = 0;
    for (int i = 0; i < x->g->n_nodes; i++) {
        if (x->dead[i]) continue;
        const kn_node *n = &x->g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            uses += KN_REF_NODE(kn_pass_resolve(x, KN_REF(n->in_node[k], n->in_out[k]))) == node;
    }
    return uses;
}

/* One user and not a value the caller needs: the node can disappear. */
bool kn_pass_private_value(const kn_pass_ctx *x, int node)
{
    return use_count(x, node) == 1 && !kn_pass_is_output(x, node);
}

/* Append a node of op `op` on inputs refs[0..n) with attrs a, placed before
 * node `before`; its shape inferred. False (nothing added) when it does not
 * infer; the index in *out. */
kn_status kn_pass_append_node(kn_pass_ctx *x, int op, const int *refs, int n, const kn_attrs *a, int before,
                             const char *where, int *out)
{
    kn_graph *g = x->g;
    kn_node nd;
    memset(&nd, 0, sizeof nd);
    nd.op = op;
    nd.n_in = n;
    for (int k = 0; k < n; k++) {
        nd.in_node[k] = KN_REF_NODE(refs[k]);
        nd.in_out[k] = KN_REF_OUT(refs[k]);
    }
    kn_opcall defaults;
    kn_opcall_init(&defaults, (kn_op)op);
    nd.a = a ? *a : defaults.a;
    snprintf(nd.where, sizeof nd.where, "%s", where);
    int idx;
    KN_TRY(kn_graph_add_node(g, &nd, &idx));
    kn_meta m[KN_MAX_OUTPUTS];
    int n_out = 0;
    kn_status st = kn_node_infer(g, idx, m, &n_out);
    if (st != KN_OK) {
        g->n_nodes--; /* not kept: the pass context never saw it */
        return st;
    }
    g->nodes[idx].n_out = n_out;
    memcpy(g->nodes[idx].out, m, sizeof m);
    KN_TRY(kn_pass_sync(x));
    x->before[idx] = before;
    *out = idx;
    return KN_OK;
}

bool kn_pass_meta_equal(const kn_meta *a, const kn_meta *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim && d < KN_MAX_DIMS; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

bool kn_pass_graph_trains(const kn_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].part != KN_PART_FORWARD) return true;
    return false;
}

kn_tensor *kn_pass_fixed_value(const kn_graph *g, int node, int out)
{
    return kn_pass_graph_trains(g) ? NULL : kn_pass_fixed_input(g, node, out);
}

kn_tensor *kn_pass_fixed_input(const kn_graph *g, int node, int out)
{
    const kn_node *n = &g->nodes[node];
    if (n->op != KN_NODE_INPUT || out != 0 || n->input < 0 || n->input >= g->n_inputs) return NULL;
    const kn_graph_input *in = &g->inputs[n->input];
    if (!kn_input_keeps_values(in) && !in->pass_made) return NULL;
    kn_tensor *t = in->tensor;
    return t && t->storage ? t : NULL;
}

/* t's elements as float64, row-major (from any device, any layout: a
 * copy to make it contiguous runs with settings). */
kn_status kn_pass_load_doubles(kn_tensor *t, const struct kn_settings *settings, double **out)
{
    *out = NULL;
    kn_tensor *h = NULL;
    KN_TRY(kn_tensor_to_device(t, KN_CPU, settings, &h));
    int64_t n = kn_tensor_numel(h);
    size_t es = kn_dtype_size(h->dtype);
    unsigned char *raw = malloc((size_t)(n > 0 ? n : 1) * es);
    double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!raw || !v) {
        free(raw);
        free(v);
        kn_tensor_release(h);
        return kn_error(KN_ERR_OOM, "a pass reading values: out of host memory");
    }
    kn_tensor_gather_host(h, raw);
    for (int64_t i = 0; i < n; i++) v[i] = kn_load_f64(raw + (size_t)i * es, h->dtype);
    free(raw);
    kn_tensor_release(h);
    *out = v;
    return KN_OK;
}

kn_tensor *kn_pass_read_fixed_value(kn_pass_ctx *x, int node, double **out)
{
    *out = NULL;
    kn_tensor *t = kn_pass_fixed_value(x->g, node, 0);
    if (!t || kn_pass_load_doubles(t, x->settings, out) != KN_OK) {
        free(*out);
        *out = NULL;
        return NULL;
    }
    x->g->inputs[x->g->nodes[node].input].values_read = true;
    return t;
}

kn_status kn_pass_add_folded_value(kn_pass_ctx *x, const char *name, kn_tensor *t, const char *where, int before,
                                   int *node)
{
    kn_graph *g = x->g;
    KN_TRY(kn_graph_add_input(g, KN_IN_VALUE, name, t, where, node));
    g->inputs[g->n_inputs - 1].pass_made = g->inputs[g->n_inputs - 1].from_inputs = true;
    KN_TRY(kn_pass_sync(x));
    x->before[*node] = before;
    return KN_OK;
}
