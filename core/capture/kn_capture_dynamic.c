/* kn_capture_dynamic: what a compiled function makes dynamic so that it
 * recompiles less: Lua numbers that changed between calls (inputs of the
 * graph instead of constants) and tensor dims (kiln.mark_dynamic,
 * kiln.compile's dynamic option, or automatic: a size that changed once),
 * whose sizes become symbols fitted against an older version. */
#include "kn_capture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_capture_internal.h"

/* Messages here are built into fixed buffers on purpose (they are kept in
 * arrays of records); a name long enough to overflow one is cut, not lost. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

/* ---- dynamic numbers ----------------------------------------------------- */

/* A Lua number that changed between calls (an argument, an upvalue, a value
 * read back with :item()) is made dynamic at its first recompile: later
 * traces make it a 0-dim input of the graph, bound to this call's value,
 * instead of a constant, so the graph and its plan stay the same. Only
 * numbers that enter ops as scalar operands come here; a number used as a
 * size, a dim or an attribute is part of the node (the graph's structure)
 * and a number the Lua code branches on changes which ops are traced, so
 * both stay guarded. */

#define NUMBER_PREFIX "number "

bool kn_input_is_number(const kn_graph_input *in)
{
    return in->kind == KN_IN_VALUE && strncmp(in->name, NUMBER_PREFIX, strlen(NUMBER_PREFIX)) == 0;
}

bool kn_capture_numbers_dynamic(const kn_compiled *cm)
{
    return cm->opt.dynamic_numbers && cm->opt.dynamic != 0;
}

/* A half number stays a constant: eager math does a number next to a half
 * tensor in f32, which a half 0-dim input could not reproduce. */
static bool number_can_be_input(kn_dtype dt)
{
    return dt != KN_F16 && dt != KN_BF16;
}

/* The graph's device, for a number made dynamic at a recompile: that of
 * its first tensor input. A graph of no tensor inputs keeps its numbers. */
static bool number_device(const kn_graph *g, kn_device *dev)
{
    for (int i = 0; i < g->n_inputs; i++)
        if (!kn_input_is_number(&g->inputs[i])) {
            *dev = g->inputs[i].device;
            return true;
        }
    return false;
}

/* Which number of line `where` the next one is: numbers (constants and
 * dynamic ones) of that line among the graph's first `upto` nodes. */
static int number_ordinal(const kn_graph *g, int upto, const char *where)
{
    int k = 0;
    for (int i = 0; i < upto; i++) {
        const kn_node *n = &g->nodes[i];
        if (strcmp(n->where, where) != 0) continue;
        k += n->op == KN_NODE_CONST || (n->op == KN_NODE_INPUT && kn_input_is_number(&g->inputs[n->input]));
    }
    return k;
}

static struct kn_dyn_number *dynamic_number(const kn_compiled *cm, int graph, const char *where, int ordinal)
{
    for (int i = 0; i < cm->dyn.n_numbers; i++) {
        struct kn_dyn_number *d = &cm->dyn.numbers[i];
        if (d->graph == graph && d->ordinal == ordinal && strcmp(d->where, where) == 0) return d;
    }
    return NULL;
}

static void keep_last(struct kn_dyn_number *d, kn_tensor *t)
{
    kn_tensor_retain(t);
    kn_tensor_release(d->last);
    d->last = t;
}

kn_tensor *kn_compiled_number_value(const kn_compiled *cm, int graph, const char *input_name)
{
    for (int i = 0; i < cm->dyn.n_numbers; i++)
        if (cm->dyn.numbers[i].graph == graph && strcmp(cm->dyn.numbers[i].name, input_name) == 0)
            return cm->dyn.numbers[i].last;
    return NULL;
}

/* A recompile: every number of the traced graph g whose value differs from
 * the same number (same line, the structure equal up to it) of the newest
 * version becomes dynamic, and its node in g an input now, so the version
 * compiled from g is the one later calls fit. */
kn_status kn_capture_make_numbers_dynamic(kn_compiled *cm, int k, const kn_version *newest, kn_graph *g,
                                      kn_recompile *rc)
{
    kn_device dev;
    if (!number_device(g, &dev)) return KN_OK;
    int n = newest->g.n_nodes < g->n_nodes ? newest->g.n_nodes : g->n_nodes;
    for (int i = 0; i < n; i++) {
        const kn_node *a = &newest->g.nodes[i];
        kn_node *b = &g->nodes[i];
        if (!kn_sym_same_node_modulo_sizes(a, b)) break; /* a different branch from here: its numbers are its own */
        if (b->op != KN_NODE_CONST || a->value == b->value || !number_can_be_input(b->out[0].dtype)) continue;
        int ordinal = number_ordinal(g, i, b->where);
        struct kn_dyn_number *d = dynamic_number(cm, k, b->where, ordinal);
        char iname[KN_NAME_MAX];
        if (d) {
            snprintf(iname, sizeof iname, "%s", d->name);
        } else {
            size_t len = b->name[0] ? (size_t)snprintf(iname, sizeof iname, NUMBER_PREFIX "'%s' at %s", b->name, b->where)
                                    : (size_t)snprintf(iname, sizeof iname, NUMBER_PREFIX "at %s", b->where);
            if (ordinal && len < sizeof iname) snprintf(iname + len, sizeof iname - len, " #%d", ordinal + 1);
            void *nn = realloc(cm->dyn.numbers, sizeof *cm->dyn.numbers * (size_t)(cm->dyn.n_numbers + 1));
            if (!nn) return kn_error(KN_ERR_OOM, "out of host memory for the dynamic numbers");
            cm->dyn.numbers = nn;
            d = &cm->dyn.numbers[cm->dyn.n_numbers++];
            memset(d, 0, sizeof *d);
            d->graph = k;
            snprintf(d->where, sizeof d->where, "%s", b->where);
            d->ordinal = ordinal;
            snprintf(d->name, sizeof d->name, "%s", iname);
        }
        kn_tensor *t;
        KN_TRY(kn_node_const_tensor(b, dev, &t));
        kn_status st = kn_graph_const_to_input(g, i, KN_IN_VALUE, iname, t);
        keep_last(d, t);
        kn_tensor_release(t);
        KN_TRY(st);
        if (rc->n_dynamic < KN_MAX_REASONS) snprintf(rc->dynamic[rc->n_dynamic++], KN_NAME_MAX, "%s", iname);
    }
    return KN_OK;
}

kn_status kn_capture_number(kn_capture *cap, double value, kn_dtype dt, kn_device dev, const char *name,
                            const char *where, kn_tensor **out)
{
    kn_compiled *cm = cap->cm;
    if (!where) where = "?";
    struct kn_dyn_number *d = NULL;
    if (cm && cm->dyn.n_numbers && kn_capture_numbers_dynamic(cm) && number_can_be_input(dt))
        d = dynamic_number(cm, cap->segment, where, number_ordinal(&cap->g, cap->g.n_nodes, where));
    if (!d) return kn_capture_const(cap, value, dt, name, where, out);
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = KN_NODE_CONST;
    n.value = value;
    n.n_out = 1;
    n.out[0].dtype = dt;
    kn_tensor *t;
    KN_TRY(kn_node_const_tensor(&n, dev, &t));
    int idx;
    kn_status st = kn_graph_add_input(&cap->g, KN_IN_VALUE, d->name, t, where, &idx);
    keep_last(d, t);
    kn_tensor_release(t);
    KN_TRY(st);
    return kn_capture_placeholder(cap, idx, 0, out);
}

kn_status kn_capture_const(kn_capture *cap, double value, kn_dtype dt, const char *name,
                           const char *where, kn_tensor **out)
{
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = KN_NODE_CONST;
    n.value = value;
    n.n_out = 1;
    n.out[0].dtype = dt;
    n.out[0].ndim = 0;
    snprintf(n.name, sizeof n.name, "%s", name ? name : "");
    snprintf(n.where, sizeof n.where, "%s", where ? where : "?");
    int idx;
    KN_TRY(kn_graph_add_node(&cap->g, &n, &idx));
    return kn_capture_placeholder(cap, idx, 0, out);
}

/* ---- dynamic dims -------------------------------------------------------- */

static struct {
    uint64_t tensor_id;
    int dim;
} g_marks[256];
static int g_n_marks;

void kn_mark_dynamic(uint64_t tensor_id, int dim)
{
    g_marks[g_n_marks % 256].tensor_id = tensor_id;
    g_marks[g_n_marks % 256].dim = dim;
    g_n_marks++;
}

static bool marked(uint64_t id, int dim)
{
    int n = g_n_marks < 256 ? g_n_marks : 256;
    for (int i = 0; i < n; i++)
        if (g_marks[i].tensor_id == id && g_marks[i].dim == dim) return true;
    return false;
}

static bool is_dynamic(void *ctx, const kn_graph_input *in, int dim)
{
    const kn_compiled *cm = ctx;
    if (in->kind == KN_IN_PARAM) return false;
    if (marked(in->tensor_id, dim)) return true;
    if (cm->opt.dynamic == 0) return false;
    if (cm->opt.dynamic == 1) return true;
    for (int i = 0; i < cm->dyn.n_dims; i++)
        if (cm->dyn.dims[i].dim == dim && strcmp(cm->dyn.dims[i].name, in->name) == 0) return true;
    return false;
}

void kn_capture_add_dynamic(kn_compiled *cm, const char *name, int dim)
{
    for (int i = 0; i < cm->dyn.n_dims; i++)
        if (cm->dyn.dims[i].dim == dim && strcmp(cm->dyn.dims[i].name, name) == 0) return;
    void *nd = realloc(cm->dyn.dims, sizeof *cm->dyn.dims * (size_t)(cm->dyn.n_dims + 1));
    if (!nd) return; /* stays static: correct, only recompiles more */
    cm->dyn.dims = nd;
    snprintf(cm->dyn.dims[cm->dyn.n_dims].name, sizeof cm->dyn.dims[cm->dyn.n_dims].name, "%s", name);
    cm->dyn.dims[cm->dyn.n_dims].dim = dim;
    cm->dyn.n_dims++;
}

/* Make the new version's symbolic sizes: choose symbols, then fit the
 * expressions against the newest older version traced from the same code. */
kn_status kn_capture_make_symbols(kn_compiled *cm, kn_graph_cache *gc, kn_version *v)
{
    bool any = false;
    KN_TRY(kn_sym_assign(&v->g, is_dynamic, cm, &v->sym, &any));
    v->dynamic = any;
    if (!any) {
        kn_sym_free(&v->sym);
        return KN_OK;
    }
    for (int o = gc->n_versions - 1; o >= 0; o--) {
        const kn_version *old = &gc->versions[o];
        if (old->g.n_nodes != v->g.n_nodes || old->g.n_inputs != v->g.n_inputs) continue;
        bool same = true;
        for (int i = 0; i < v->g.n_nodes && same; i++)
            same = kn_sym_same_node_modulo_sizes(&old->g.nodes[i], &v->g.nodes[i]);
        if (!same) continue;
        int64_t vals[KN_MAX_SYMS];
        memcpy(vals, v->sym.value, sizeof vals);
        for (int i = 0; i < v->g.n_inputs; i++)
            for (int d = 0; d < v->g.inputs[i].meta.ndim; d++)
                if (v->sym.input_sym[i][d] >= 0) vals[(int)v->sym.input_sym[i][d]] = old->g.inputs[i].meta.shape[d];
        return kn_sym_fit(&v->sym, &v->g, &old->g, vals);
    }
    return KN_OK;
}
