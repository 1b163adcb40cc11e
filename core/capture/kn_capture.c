/* kn_capture: the capture state machine, the version cache with its guards,
 * and the messages that explain breaks and recompilations. */
#include "kn_capture.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kn_autotune.h"
#include "kn_passes.h"
#include "kn_clock.h"

/* Messages here are built into fixed buffers on purpose (they are kept in
 * arrays of records); a name long enough to overflow one is cut, not lost. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

/* ---- lazies and placeholders --------------------------------------------- */

_Static_assert(KN_LAZY_NAME_MAX == KN_NAME_MAX, "a lazy keeps the name of a graph input");

static kn_device graph_device(const kn_capture *cap)
{
    for (int i = 0; i < cap->g.n_inputs; i++)
        if (cap->g.inputs[i].tensor) return cap->g.inputs[i].device;
    return KN_CPU;
}

/* A placeholder for output `out` of node `node` of the open graph. */
static kn_status make_placeholder(kn_capture *cap, int node, int out, kn_tensor **t)
{
    if (cap->n_lazies == cap->cap_lazies) {
        int ncap = cap->cap_lazies ? cap->cap_lazies * 2 : 64;
        kn_lazy **np = realloc(cap->lazies, sizeof *np * (size_t)ncap);
        if (!np) return kn_error(KN_ERR_OOM, "out of host memory while capturing");
        cap->lazies = np;
        cap->cap_lazies = ncap;
    }
    kn_lazy *lz = calloc(1, sizeof *lz);
    if (!lz) return kn_error(KN_ERR_OOM, "out of host memory while capturing");
    lz->refcount = 2; /* the placeholder's and the capture's */
    lz->cap = cap;
    lz->segment = cap->segment;
    lz->node = node;
    lz->out = out;
    lz->output_index = -1;
    lz->device = graph_device(cap);
    kn_status st = kn_tensor_new_placeholder(&cap->g.nodes[node].out[out], lz, t);
    if (st != KN_OK) {
        free(lz);
        return st;
    }
    cap->lazies[cap->n_lazies++] = lz;
    return KN_OK;
}

static bool is_current(const kn_capture *cap, const kn_tensor *t)
{
    return t->lazy && t->lazy->cap == cap && t->lazy->segment == cap->segment && !t->lazy->value;
}

bool kn_capture_needs_input(const kn_capture *cap, const kn_tensor *t)
{
    return !is_current(cap, t);
}

/* name, or "name (N)" when graph g already has an input of that name.
 * Versions match a call's inputs by name, so two tensors found under one
 * name (two unnamed fields read on one line, both "tensor at f.lua:3")
 * would each fail the other's identity guard, and every call recompiled. */
static const char *unique_input_name(const kn_graph *g, const char *name, char *buf, size_t size)
{
    for (int n = 1; n <= g->n_inputs + 1; n++) {
        const char *candidate = name;
        if (n > 1) { /* the number must survive a long name's truncation */
            snprintf(buf, size, "%.*s (%d)", (int)size - 16, name, n);
            candidate = buf;
        }
        bool taken = false;
        for (int i = 0; i < g->n_inputs && !taken; i++) taken = strcmp(g->inputs[i].name, candidate) == 0;
        if (!taken) return candidate;
    }
    return name; /* not reached: n_inputs + 1 numbers cannot all be taken */
}

kn_status kn_capture_input(kn_capture *cap, kn_tensor *t, kn_input_kind kind, const char *name,
                           const char *where, kn_tensor **out)
{
    *out = NULL;
    if (is_current(cap, t)) {
        kn_tensor_retain(t);
        *out = t;
        return KN_OK;
    }
    char gname[KN_NAME_MAX];
    kn_tensor *real = t;
    if (t->lazy) {
        if (!t->lazy->value)
            return kn_error(KN_ERR_ARG, "a traced value was used after the compiled call that "
                                        "made it failed; it has no value");
        real = t->lazy->value;
        if (t->lazy->cap == cap && t->lazy->is_input) {
            /* an input of an earlier graph (an argument, a parameter) keeps its name */
            kind = t->lazy->input_kind;
            name = t->lazy->input_name;
        } else if (t->lazy->cap == cap) {
            snprintf(gname, sizeof gname, "graph %d output %d", t->lazy->segment,
                     t->lazy->output_index);
            kind = KN_IN_GRAPH_OUTPUT;
            name = gname;
        }
    } else if (kind == KN_IN_TENSOR && t->id >= cap->first_tensor_id) {
        kind = KN_IN_VALUE; /* made during this call: a new object every call */
    }
    int node = -1;
    for (int i = 0; i < cap->g.n_nodes && node < 0; i++) {
        const kn_node *n = &cap->g.nodes[i];
        if (n->op == KN_NODE_INPUT && cap->g.inputs[n->input].tensor_id == real->id) node = i;
    }
    if (node < 0) {
        char uname[KN_NAME_MAX];
        name = unique_input_name(&cap->g, name, uname, sizeof uname);
        KN_TRY(kn_graph_add_input(&cap->g, kind, name, real, where, &node));
    }
    return make_placeholder(cap, node, 0, out);
}

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

static bool numbers_dynamic(const kn_compiled *cm)
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
static kn_status make_numbers_dynamic(kn_compiled *cm, int k, const kn_version *newest, kn_graph *g,
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
    if (cm && cm->dyn.n_numbers && numbers_dynamic(cm) && number_can_be_input(dt))
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
    return make_placeholder(cap, idx, 0, out);
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
    return make_placeholder(cap, idx, 0, out);
}

kn_status kn_capture_op(kn_capture *cap, kn_opcall *c, const char *where)
{
    kn_node n;
    memset(&n, 0, sizeof n);
    for (int i = 0; i < c->n_in; i++) {
        if (!c->in[i]) continue; /* kn_op_infer explains a missing input */
        if (!is_current(cap, c->in[i]))
            return kn_error(KN_ERR_ARG, "%s: input %d is not part of the graph being captured",
                            kn_op_name(c->op), i + 1);
        n.in_node[i] = c->in[i]->lazy->node;
        n.in_out[i] = c->in[i]->lazy->out;
    }
    int n_out = 0;
    KN_TRY(kn_op_infer(c, n.out, &n_out));
    n.op = (int)c->op;
    n.n_in = c->n_in;
    n.a = c->a;
    n.n_out = n_out;
    snprintf(n.where, sizeof n.where, "%s", where ? where : "?");
    int idx;
    KN_TRY(kn_graph_add_node(&cap->g, &n, &idx));
    c->n_out = 0;
    for (int k = 0; k < n_out; k++) {
        kn_status st = make_placeholder(cap, idx, k, &c->out[k]);
        if (st != KN_OK) {
            for (int j = 0; j < k; j++) kn_tensor_release(c->out[j]);
            return st;
        }
    }
    c->n_out = n_out;
    return KN_OK;
}

/* ---- messages ------------------------------------------------------------ */

void kn_compiled_log(kn_compiled *cm, int kind, const char *fmt, ...)
{
    if (!(cm->log.flags & kind)) return;
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
    char *p = realloc(cm->log.text, cm->log.len + (size_t)n + 1);
    if (!p) return;
    memcpy(p + cm->log.len, buf, (size_t)n + 1);
    cm->log.text = p;
    cm->log.len += (size_t)n;
}

void kn_break_format(const kn_break *b, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "Graph break in user code at %s\n  Reason: %s: %s\n",
                                b->where, b->category, b->reason);
    if (n < size && b->hint[0]) n += (size_t)snprintf(buf + n, size - n, "  Hint: %s\n", b->hint);
    if (n < size) n += (size_t)snprintf(buf + n, size - n, "  User stack:\n");
    for (int i = 0; i < b->n_frames && n < size; i++) {
        if (b->frame_fn[i][0] == '<') /* Lua's name for a function it cannot name */
            n += (size_t)snprintf(buf + n, size - n, "    %s in function %s\n", b->frame_where[i],
                                  b->frame_fn[i]);
        else if (b->frame_fn[i][0])
            n += (size_t)snprintf(buf + n, size - n, "    %s in function '%s'\n", b->frame_where[i],
                                  b->frame_fn[i]);
        else
            n += (size_t)snprintf(buf + n, size - n, "    %s in main chunk\n", b->frame_where[i]);
    }
}

/* "{16, 256, 512}" as guards print shapes. */
static void shape_text(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "{");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < size) snprintf(buf + n, size - n, "}");
}

static bool input_contiguous(const kn_graph_input *in)
{
    int64_t s = 1;
    for (int i = in->meta.ndim - 1; i >= 0; i--) {
        if (in->meta.shape[i] != 1 && in->strides[i] != s) return false;
        s *= in->meta.shape[i];
    }
    return true;
}

/* "{16, s0, 512}": an input's shape with its symbols. */
static void input_shape_text(const kn_graph_input *in, const kn_symbols *sym, int i, char *buf,
                             size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "{");
    for (int d = 0; d < in->meta.ndim && n < size; d++) {
        int sj = sym && sym->input_sym ? sym->input_sym[i][d] : -1;
        if (sj >= 0) n += (size_t)snprintf(buf + n, size - n, d ? ", s%d" : "s%d", sj);
        else n += (size_t)snprintf(buf + n, size - n, d ? ", %lld" : "%lld", (long long)in->meta.shape[d]);
    }
    if (n < size) snprintf(buf + n, size - n, "}");
}

static void input_guard_text(const kn_graph_input *in, const kn_symbols *sym, int i, char *buf,
                             size_t size)
{
    char shp[256], str[256];
    input_shape_text(in, sym, i, shp, sizeof shp);
    if (input_contiguous(in)) snprintf(str, sizeof str, "contiguous");
    else {
        char s[200];
        shape_text(in->meta.ndim, in->strides, s, sizeof s);
        snprintf(str, sizeof str, "strides %s", s);
    }
    if (kn_input_is_number(in)) {
        snprintf(buf, size, "%s is dynamic: read at every call, dtype %s device %s", in->name,
                 kn_dtype_name(in->meta.dtype), kn_device_name(in->device));
        return;
    }
    const char *what = in->kind == KN_IN_PARAM ? "parameter" : "tensor";
    snprintf(buf, size, "%s '%s' shape %s dtype %s device %s %s%s", what, in->name, shp,
             kn_dtype_name(in->meta.dtype), kn_device_name(in->device), str,
             in->kind == KN_IN_PARAM || in->kind == KN_IN_TENSOR ? ", same object" : "");
}

/* ---- guards -------------------------------------------------------------- */

/* Where a size guard failed, so automatic dynamic shapes can act on it. */
typedef struct {
    int input, dim; /* -1 when the failure was not a static size */
} size_failure;

/* The first guard on input i of a version that the traced input fails, as
 * text in buf; false when they all hold. vals/seen collect symbol values. */
static bool input_failure(const kn_version *v, int i, const kn_graph_input *got, int64_t *vals,
                          bool *seen, size_failure *sf, char *buf, size_t size)
{
    const kn_graph_input *want = &v->g.inputs[i];
    const kn_symbols *sym = v->dynamic ? &v->sym : NULL;
    const char *what = want->kind == KN_IN_PARAM ? "parameter" : "tensor";
    char label[KN_NAME_MAX + 16]; /* "tensor 'x'", or a dynamic number's own name */
    if (kn_input_is_number(want)) snprintf(label, sizeof label, "%s", want->name);
    else snprintf(label, sizeof label, "%s '%s'", what, want->name);
    if ((want->kind == KN_IN_PARAM || want->kind == KN_IN_TENSOR) && want->tensor_id != got->tensor_id) {
        snprintf(buf, size, "%s was replaced", label);
        return true;
    }
    if (want->meta.dtype != got->meta.dtype) {
        snprintf(buf, size, "%s dtype mismatch: expected %s, actual %s", label,
                 kn_dtype_name(want->meta.dtype), kn_dtype_name(got->meta.dtype));
        return true;
    }
    if (want->device != got->device) {
        snprintf(buf, size, "%s device mismatch: expected %s, actual %s", label,
                 kn_device_name(want->device), kn_device_name(got->device));
        return true;
    }
    if (want->meta.ndim != got->meta.ndim) {
        snprintf(buf, size, "%s dim count mismatch: expected %d, actual %d", label,
                 want->meta.ndim, got->meta.ndim);
        return true;
    }
    for (int d = 0; d < want->meta.ndim; d++)
        if ((!sym || sym->input_sym[i][d] < 0) && want->meta.shape[d] != got->meta.shape[d]) {
            sf->input = i;
            sf->dim = d;
            break;
        }
    if (kn_sym_input_failure(sym, i, want, got, vals, seen, buf, size)) return true;
    bool wc = input_contiguous(want), gc = input_contiguous(got);
    /* with symbolic sizes the strides move with them: only contiguity is kept */
    bool exact = !sym && !wc;
    if (wc != gc || (exact && memcmp(want->strides, got->strides, sizeof(int64_t) * (size_t)want->meta.ndim))) {
        char ws[200], gs[200];
        if (wc) snprintf(ws, sizeof ws, "contiguous");
        else shape_text(want->meta.ndim, want->strides, ws, sizeof ws);
        if (gc) snprintf(gs, sizeof gs, "contiguous");
        else shape_text(got->meta.ndim, got->strides, gs, sizeof gs);
        snprintf(buf, size, "%s stride mismatch: expected %s, actual %s", label, ws, gs);
        return true;
    }
    return false;
}

static bool same_node(const kn_node *a, const kn_node *b)
{
    if (!kn_sym_same_node_modulo_sizes(a, b)) return false;
    for (int o = 0; o < a->n_out; o++)
        if (memcmp(a->out[o].shape, b->out[o].shape, sizeof(int64_t) * (size_t)a->out[o].ndim)) return false;
    if (a->op == KN_NODE_INPUT || a->op == KN_NODE_CONST) return true;
    /* sizes in attributes too (random ops' counter offsets excluded, as above) */
    kn_attrs x = a->a, y = b->a;
    x.rng_offset = y.rng_offset = 0;
    if (x.rng_fresh) x.seed = y.seed = 0; /* the caller's stream: per call, not structure */
    return memcmp(&x, &y, sizeof x) == 0;
}

/* A number as Lua would print it back: the shortest text that reads back
 * to the same double. */
static const char *num_text(double v, char *buf, size_t size)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

/* Why version v (index vi) does not fit the traced graph g: text in buf and
 * true, or false when it fits (then vals holds the symbol values of g). */
static bool version_failure(const kn_compiled *cm, const kn_version *v, int vi, const kn_graph *g,
                            int64_t *vals, size_failure *sf, char *buf, size_t size)
{
    bool seen[KN_MAX_SYMS] = {false};
    sf->input = sf->dim = -1;
    if (strcmp(v->mode, cm->id.mode) != 0) {
        snprintf(buf, size, "mode changed: %s -> %s", v->mode, cm->id.mode);
        return true;
    }
    for (int i = 0; i < v->g.n_inputs; i++)
        for (int j = 0; j < g->n_inputs; j++)
            if (strcmp(g->inputs[j].name, v->g.inputs[i].name) == 0) {
                if (input_failure(v, i, &g->inputs[j], vals, seen, sf, buf, size)) return true;
                break;
            }
    int n = v->g.n_nodes < g->n_nodes ? v->g.n_nodes : g->n_nodes, diff = -1;
    for (int i = 0; i < n && diff < 0; i++) {
        bool same = v->dynamic ? kn_sym_same_node_modulo_sizes(&v->g.nodes[i], &g->nodes[i])
                               : same_node(&v->g.nodes[i], &g->nodes[i]);
        if (!same) diff = i;
    }
    if (diff < 0 && v->g.n_nodes != g->n_nodes) diff = n;
    int limit = diff < 0 ? n : diff;
    for (int i = 0; i < limit; i++) {
        const kn_node *a = &v->g.nodes[i], *b = &g->nodes[i];
        if (a->op == KN_NODE_CONST && a->value != b->value) {
            char x[40], y[40];
            num_text(a->value, x, sizeof x);
            num_text(b->value, y, sizeof y);
            if (a->name[0])
                snprintf(buf, size, "number '%s' at %s changed: %s -> %s", a->name, a->where, x, y);
            else
                snprintf(buf, size, "number at %s changed: %s -> %s", a->where, x, y);
            return true;
        }
    }
    if (diff < 0 && v->dynamic && v->sym.fitted) diff = kn_sym_sizes_differ(&v->sym, &v->g, g, vals);
    if (diff >= 0) {
        const char *where = diff < g->n_nodes ? g->nodes[diff].where : v->g.nodes[diff].where;
        snprintf(buf, size, "graph differs from version %d from node %d at %s", vi, diff, where);
        return true;
    }
    return false;
}

static kn_status make_guards(kn_version *v)
{
    int n = v->g.n_inputs + 2;
    for (int i = 0; i < v->g.n_nodes; i++) n += v->g.nodes[i].op == KN_NODE_CONST;
    v->guards = calloc((size_t)n, sizeof *v->guards);
    if (!v->guards) return kn_error(KN_ERR_OOM, "out of host memory for guards");
    v->n_guards = 0;
    snprintf(v->guards[v->n_guards++], KN_REASON_MAX, "mode %s", v->mode);
    for (int i = 0; i < v->g.n_inputs; i++)
        input_guard_text(&v->g.inputs[i], v->dynamic ? &v->sym : NULL, i, v->guards[v->n_guards++],
                         KN_REASON_MAX);
    for (int i = 0; i < v->g.n_nodes; i++) {
        const kn_node *c = &v->g.nodes[i];
        if (c->op != KN_NODE_CONST) continue;
        char x[40];
        num_text(c->value, x, sizeof x);
        if (c->name[0])
            snprintf(v->guards[v->n_guards++], KN_REASON_MAX, "number '%s' at %s == %s", c->name, c->where, x);
        else
            snprintf(v->guards[v->n_guards++], KN_REASON_MAX, "number at %s == %s", c->where, x);
    }
    snprintf(v->guards[v->n_guards++], KN_REASON_MAX, "graph structure: %d nodes, %d ops%s",
             v->g.n_nodes, kn_graph_op_count(&v->g),
             v->dynamic ? (v->sym.fitted ? ", sizes as expressions of the symbols" : ", sizes fitted at the next call") : "");
    return KN_OK;
}

void kn_version_size_text(const kn_version *v, int node, int out, int dim, char *buf, size_t size)
{
    const kn_node *n = &v->g.nodes[node];
    if (v->dynamic && v->sym.fitted)
        kn_dimexpr_text(&v->sym.expr[node][out * KN_MAX_DIMS + dim], buf, size);
    else
        snprintf(buf, size, "%lld", (long long)n->out[out].shape[dim]);
}

bool kn_version_input_matches(const kn_version *v, int i, const kn_tensor *t)
{
    const kn_graph_input *want = &v->g.inputs[i];
    if (t->lazy || !t->storage || t->dtype != want->meta.dtype || t->ndim != want->meta.ndim ||
        kn_tensor_device(t) != want->device)
        return false;
    if (memcmp(t->shape, want->meta.shape, sizeof(int64_t) * (size_t)t->ndim) != 0) return false;
    return memcmp(t->strides, want->strides, sizeof(int64_t) * (size_t)t->ndim) == 0;
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

static void add_dynamic(kn_compiled *cm, const char *name, int dim)
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
static kn_status make_symbols(kn_compiled *cm, kn_graph_cache *gc, kn_version *v)
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

/* Find a cached version of graph K that fits g, or compile a new one
 * (explaining why). *version gets its index, or -1 when the graph must run
 * eagerly (cache limit). */
static kn_status lookup_or_compile(kn_compiled *cm, int k, kn_graph *g, int *version)
{
    *version = -1;
    if (k >= cm->cache.n_graphs) {
        kn_graph_cache *ng = realloc(cm->cache.graphs, sizeof *ng * (size_t)(k + 1));
        if (!ng) return kn_error(KN_ERR_OOM, "out of host memory for the graph cache");
        memset(ng + cm->cache.n_graphs, 0, sizeof *ng * (size_t)(k + 1 - cm->cache.n_graphs));
        cm->cache.graphs = ng;
        cm->cache.n_graphs = k + 1;
    }
    kn_graph_cache *gc = &cm->cache.graphs[k];
    if (gc->eager) return KN_OK;
    kn_recompile rc;
    memset(&rc, 0, sizeof rc);
    size_failure newest = {-1, -1};
    for (int v = gc->n_versions - 1; v >= 0; v--) {
        char why[KN_REASON_MAX - 16];
        int64_t vals[KN_MAX_SYMS];
        size_failure sf;
        kn_version *ver = &gc->versions[v];
        if (!version_failure(cm, ver, v, g, vals, &sf, why, sizeof why)) {
            if (ver->dynamic && !ver->sym.fitted) {
                KN_TRY(kn_sym_fit(&ver->sym, &ver->g, g, vals));
                free(ver->guards);
                KN_TRY(make_guards(ver));
            }
            *version = v;
            cm->stats.cache_hits++;
            return KN_OK;
        }
        if (v == gc->n_versions - 1) newest = sf;
        if (rc.n_reasons < KN_MAX_REASONS)
            snprintf(rc.reasons[rc.n_reasons++], KN_REASON_MAX, "%d/%d: %s", k, v, why);
    }
    rc.graph = k;
    rc.version = gc->n_versions;
    snprintf(rc.where, sizeof rc.where, "%s", cm->id.where);
    if (gc->n_versions > 0) {
        char msg[KN_MAX_REASONS * KN_REASON_MAX + 256];
        size_t n = (size_t)snprintf(msg, sizeof msg,
                                    "Recompiling %s (%s), graph %d, version %d\n"
                                    "  triggered by the guard failure(s):\n",
                                    cm->id.name, cm->id.where, k, rc.version);
        for (int i = 0; i < rc.n_reasons && n < sizeof msg; i++)
            n += (size_t)snprintf(msg + n, sizeof msg - n, "  - %s\n", rc.reasons[i]);
        if (gc->n_versions >= cm->opt.cache_size_limit) {
            gc->eager = true;
            kn_compiled_log(cm, KN_LOG_WARN,
                            "%s (%s) hit kiln.config.cache_size_limit (%d): graph %d runs eagerly from now on\n"
                            "  last reason: %s\n",
                            cm->id.name, cm->id.where, cm->opt.cache_size_limit, k, rc.reasons[0]);
            return KN_OK;
        }
        if (cm->opt.error_on_recompile)
            return kn_error(KN_ERR_ARG, "kiln.config.error_on_recompile is set and this call would recompile:\n%s", msg);
        if (numbers_dynamic(cm)) KN_TRY(make_numbers_dynamic(cm, k, &gc->versions[gc->n_versions - 1], g, &rc));
        for (int i = 0; i < rc.n_dynamic && n < sizeof msg; i++)
            n += (size_t)snprintf(msg + n, sizeof msg - n, "  %s is dynamic from now on\n", rc.dynamic[i]);
        kn_recompile *nr = realloc(cm->cache.recompiles, sizeof *nr * (size_t)(cm->cache.n_recompiles + 1));
        if (!nr) return kn_error(KN_ERR_OOM, "out of host memory for the recompile log");
        cm->cache.recompiles = nr;
        cm->cache.recompiles[cm->cache.n_recompiles++] = rc;
        kn_compiled_log(cm, KN_LOG_RECOMPILES, "%s", msg);
        /* automatic dynamic shapes: a size that changed once is made symbolic */
        if (newest.input >= 0 && cm->opt.dynamic < 0) {
            const kn_graph_input *in = &gc->versions[gc->n_versions - 1].g.inputs[newest.input];
            if (in->kind != KN_IN_PARAM) add_dynamic(cm, in->name, newest.dim);
        }
    }
    kn_version *nv = realloc(gc->versions, sizeof *nv * (size_t)(gc->n_versions + 1));
    if (!nv) return kn_error(KN_ERR_OOM, "out of host memory for the graph cache");
    gc->versions = nv;
    kn_version *v = &gc->versions[gc->n_versions];
    memset(v, 0, sizeof *v);
    KN_TRY(kn_graph_copy(g, &v->g));
    snprintf(v->mode, sizeof v->mode, "%s", cm->id.mode);
    kn_status st = make_symbols(cm, gc, v);
    if (st == KN_OK) st = make_guards(v);
    if (st != KN_OK) {
        kn_graph_free(&v->g);
        kn_sym_free(&v->sym);
        return st;
    }
    *version = gc->n_versions++;
    cm->stats.cache_misses++;
    if (cm->log.flags & KN_LOG_GUARDS) {
        kn_compiled_log(cm, KN_LOG_GUARDS, "Guards of %s (%s), graph %d, version %d:\n", cm->id.name,
                        cm->id.where, k, *version);
        for (int i = 0; i < v->n_guards; i++) kn_compiled_log(cm, KN_LOG_GUARDS, "  %s\n", v->guards[i]);
    }
    return KN_OK;
}

/* ---- segments ------------------------------------------------------------ */

kn_status kn_capture_begin(kn_compiled *cm)
{
    kn_capture *cap = &cm->cap;
    if (cap->active) return kn_error(KN_ERR_ARG, "%s is already being captured", cm->id.name);
    kn_graph_init(&cap->g);
    cap->cm = cm;
    cap->active = true;
    cap->segment = 0;
    cap->n_graphs = 0;
    cap->n_breaks = 0;
    cap->n_lazies = 0;
    cap->t_start = kn_clock_s();
    cap->capture_s = 0;
    cap->passes_s = cap->codegen_s = cap->backend_s = cap->compile_s = 0;
    cap->kernels_generated = cap->kernels_cached = 0;
    cap->first_tensor_id = kn_tensor_next_id();
    cm->stats.calls++;
    return KN_OK;
}

/* Drop the capture's references on the open graph's lazies; the ones still
 * referenced by placeholders stay, detached from this graph. */
static void drop_lazies(kn_capture *cap, bool detach)
{
    for (int i = 0; i < cap->n_lazies; i++) {
        kn_lazy *lz = cap->lazies[i];
        if (detach) lz->cap = NULL;
        kn_tensor_release(kn_lazy_release(lz));
    }
    cap->n_lazies = 0;
}

kn_plan *kn_version_plan(const kn_version *v)
{
    return v && v->n_plans ? v->plans[v->n_plans - 1].plan : NULL;
}

static bool same_wanted(const struct kn_plan_entry *e, const kn_plan_value *w, int n, const kn_graph *g, bool dyn)
{
    if (e->n_want != n || memcmp(e->want, w, sizeof *w * (size_t)n) != 0) return false;
    if (!dyn) return true;
    for (int i = 0; i < g->n_inputs; i++)
        if (memcmp(&e->in_metas[i], &g->inputs[i].meta, sizeof(kn_meta)) != 0) return false;
    return true;
}

/* The plan of v for these values, built now if needed; NULL (with
 * v->plan_error set) when it cannot be built. */
static kn_plan *version_plan(kn_compiled *cm, kn_version *v, const kn_graph *g, const kn_plan_value *w, int n)
{
    for (int i = v->n_plans - 1; i >= 0; i--)
        if (same_wanted(&v->plans[i], w, n, g, v->dynamic)) return v->plans[i].plan;
    if (v->plan_error[0] || v->n_plans >= 16) return NULL;
    kn_plan *plan;
    int flags = cm->opt.pass_flags | (kn_mode_autotunes(cm->id.mode) ? KN_PLAN_AUTOTUNE : 0);
    double t0 = kn_clock_s();
    kn_status st = kn_plan_build(g, w, n, cm->opt.settings, flags, &plan);
    cm->cap.compile_s += kn_clock_s() - t0;
    if (st != KN_OK) {
        snprintf(v->plan_error, sizeof v->plan_error, "%s", kn_last_error());
        kn_compiled_log(cm, KN_LOG_WARN, "kiln: %s (%s): could not compile a graph (%s); it runs op by op\n",
                        cm->id.name, cm->id.where, v->plan_error);
        return NULL;
    }
    struct kn_plan_entry *ne = realloc(v->plans, sizeof *ne * (size_t)(v->n_plans + 1));
    kn_plan_value *want = malloc(sizeof *want * (size_t)(n ? n : 1));
    kn_meta *metas = malloc(sizeof *metas * (size_t)(g->n_inputs ? g->n_inputs : 1));
    if (!ne || !want || !metas) {
        if (ne) v->plans = ne;
        free(want);
        free(metas);
        kn_plan_free(plan);
        return NULL;
    }
    v->plans = ne;
    memcpy(want, w, sizeof *want * (size_t)n);
    for (int i = 0; i < g->n_inputs; i++) metas[i] = g->inputs[i].meta;
    v->plans[v->n_plans++] = (struct kn_plan_entry){want, n, metas, plan};
    cm->stats.plans_built++;
    cm->stats.passes_s += plan->times.passes_s;
    cm->stats.codegen_s += plan->times.codegen_s;
    cm->stats.backend_s += plan->times.backend_s;
    cm->cap.passes_s += plan->times.passes_s;
    cm->cap.codegen_s += plan->times.codegen_s;
    cm->cap.backend_s += plan->times.backend_s;
    cm->stats.kernels_generated += plan->times.generated;
    cm->stats.kernels_cached += plan->times.cached;
    cm->cap.kernels_generated += plan->times.generated;
    cm->cap.kernels_cached += plan->times.cached;
    cm->stats.autotune_cache_hits += plan->tune.cache_hits;
    if (cm->log.flags & KN_LOG_FUSION) {
        const kn_fusion *f = &plan->code.fusion;
        kn_compiled_log(cm, KN_LOG_FUSION, "Fusion of %s (%s): %d kernel%s, %d edge%s between kernels\n%s",
                        cm->id.name, cm->id.where, f->prog.n_kernels, f->prog.n_kernels == 1 ? "" : "s", f->n_edges,
                        f->n_edges == 1 ? "" : "s", f->why ? f->why : "");
        for (int e = 0; e < f->n_edges; e++) {
            char reason[KN_FUSE_REASON_MAX + 160];
            kn_plan_edge_reason(plan, &f->edges[e], reason, sizeof reason);
            kn_compiled_log(cm, KN_LOG_FUSION, "  %s -> %s: %s\n", f->prog.kernels[f->edges[e].from_kernel].name,
                            f->prog.kernels[f->edges[e].to_kernel].name, reason);
        }
    }
    if (cm->log.flags & KN_LOG_KERNELS)
        for (int k = 0; k < plan->code.fusion.prog.n_kernels; k++)
            kn_compiled_log(cm, KN_LOG_KERNELS, "kernel %s (%d nodes)\n", plan->code.fusion.prog.kernels[k].name,
                            plan->code.fusion.prog.kernels[k].n_nodes);
    return plan;
}

static void autotune_log(void *ud, const char *text)
{
    kn_compiled_log(ud, KN_LOG_AUTOTUNE, "%s", text);
}

/* Whether a search Ctrl-C stopped waits in any plan of cm (resumed at
 * that plan's next call). */
static bool any_search_interrupted(const kn_compiled *cm)
{
    for (int k = 0; k < cm->cache.n_graphs; k++)
        for (int v = 0; v < cm->cache.graphs[k].n_versions; v++) {
            const kn_version *ver = &cm->cache.graphs[k].versions[v];
            for (int i = 0; i < ver->n_plans; i++)
                if (ver->plans[i].plan->tune.interrupted) return true;
        }
    return false;
}

/* The last progress report, and a line on how the search ended when it
 * did not finish (the budget, Ctrl-C): printed, not only logged. */
static void autotune_done(kn_compiled *cm, const kn_plan *p, kn_tune_session *s)
{
    const kn_autotune_opts *o = &kn_settings_or_defaults(cm->opt.settings)->autotune;
    if (o->progress) {
        kn_autotune_progress pr = {"", s->kernels_done, s->kernels_total, s->candidates, kn_clock_s() - s->t0,
                                   s->budget_s, true, s->resume_left, s->resume_total};
        o->progress(&pr, o->progress_ud);
    }
    int skipped = 0;
    for (int k = 0; p->tune.result && k < p->code.fusion.prog.n_kernels; k++)
        skipped += p->tune.result[k].source == KN_TUNED_SKIPPED;
    if (s->interrupted || s->out_of_budget) {
        char path[KN_CACHE_PATH_MAX];
        if (kn_autotune_cache_path(kn_settings_cache_dir(cm->opt.settings), path, sizeof path) != KN_OK)
            snprintf(path, sizeof path, "the process (the cache dir is too long)");
        kn_compiled_log(cm, KN_LOG_WARN,
                        "kiln: %s (%s): autotuning %s: %d kernels measured and saved in %s, %d keep their defaults\n",
                        cm->id.name, cm->id.where,
                        s->interrupted ? "interrupted" : "stopped at kiln.config.autotune_budget_s",
                        s->measured, path, skipped);
    }
}

/* A plan that baked values its inputs no longer hold (a parameter of a
 * folded batch norm written by copy_) is dropped; the caller builds it
 * again from this call's values. The reason is logged as a recompile's. */
static bool drop_stale_plan(kn_compiled *cm, kn_version *v, kn_plan *plan, kn_tensor *const *ins)
{
    char why[KN_REASON_MAX];
    if (!kn_plan_stale(plan, ins, why, sizeof why)) return false;
    for (int i = 0; i < v->n_plans; i++) {
        if (v->plans[i].plan != plan) continue;
        kn_plan_free(plan);
        free(v->plans[i].want);
        free(v->plans[i].in_metas);
        v->plans[i] = v->plans[--v->n_plans];
        break;
    }
    kn_compiled_log(cm, KN_LOG_RECOMPILES, "Rebuilding a plan of %s (%s): %s\n", cm->id.name, cm->id.where, why);
    return true;
}

kn_status kn_compiled_run(kn_compiled *cm, kn_version *v, const kn_graph *g, const kn_plan_value *wanted,
                          int n_wanted, kn_tensor **results)
{
    kn_tensor *ins[256];
    kn_plan *plan = v && cm->opt.compiler ? version_plan(cm, v, g, wanted, n_wanted) : NULL;
    if (plan && g->n_inputs > 256) return kn_error(KN_ERR_UNSUPPORTED, "a graph with more than 256 inputs");
    for (int i = 0; plan && i < g->n_inputs; i++) ins[i] = g->inputs[i].tensor;
    if (plan && plan->baked.storage && drop_stale_plan(cm, v, plan, ins))
        plan = version_plan(cm, v, g, wanted, n_wanted);
    if (plan) {
        /* fresh random nodes draw at this call's counters, not the build's */
        kn_plan_bind_rng(plan, g);
        plan->fault_kernel = cm->check.fault_kernel;
        if (cm->opt.check_numerics || cm->check.once) {
            int bad = -1;
            char why[KN_REASON_MAX];
            KN_TRY(kn_plan_check(plan, ins, 1e-4, &bad, why, sizeof why));
            cm->check.runs++;
            if (bad >= 0) {
                const kn_kernel *k = &plan->code.fusion.prog.kernels[bad];
                size_t n = (size_t)snprintf(cm->check.report, sizeof cm->check.report,
                                            "kernel %s (ops", k->name);
                for (int i = 0; i < k->n_nodes && n < sizeof cm->check.report; i++) {
                    const kn_node *nd = &plan->g.nodes[k->nodes[i]];
                    if (nd->op < KN_OP_COUNT)
                        n += (size_t)snprintf(cm->check.report + n, sizeof cm->check.report - n, " %s at %s",
                                              kn_op_name((kn_op)nd->op), nd->where);
                }
                if (n < sizeof cm->check.report)
                    snprintf(cm->check.report + n, sizeof cm->check.report - n, ") differs from the reference: %s",
                             why);
                kn_compiled_log(cm, KN_LOG_WARN, "kiln: numerics check of %s (%s): %s\n", cm->id.name, cm->id.where,
                                cm->check.report);
            }
        }
        kn_status st;
        if (plan->tune.enabled && plan->tune.state == KN_TUNE_PENDING && !cm->opt.check_numerics) {
            /* max-autotune's search, inside this first call */
            kn_tune_session ts = {0};
            ts.cache_dir = kn_settings_cache_dir(cm->opt.settings);
            ts.budget_s = kn_settings_or_defaults(cm->opt.settings)->autotune.budget_s - cm->stats.autotune_s;
            ts.log = autotune_log;
            ts.log_ud = cm;
            ts.t0 = kn_clock_s();
            st = kn_plan_autotune(plan, ins, results, &ts);
            if (ts.kernels_total) cm->stats.autotune_s += kn_clock_s() - ts.t0;
            cm->stats.autotune_kernels += ts.measured;
            cm->stats.autotune_candidates += ts.candidates;
            if (ts.resume_total) {
                kn_compiled_log(cm, KN_LOG_WARN,
                                "kiln: %s (%s): autotuning resumed where Ctrl-C stopped it: %d of %d kernels were "
                                "left to tune; %d tuned now\n",
                                cm->id.name, cm->id.where, ts.resume_left, ts.resume_total, ts.kernels_done);
                cm->stats.autotune_interrupted = ts.interrupted || any_search_interrupted(cm);
            }
            cm->stats.autotune_interrupted |= ts.interrupted;
            cm->stats.autotune_out_of_budget |= ts.out_of_budget;
            if (ts.kernels_total) autotune_done(cm, plan, &ts);
        } else if (kn_mode_records(cm->id.mode) && !cm->opt.check_numerics) {
            bool replayed = false;
            int before = plan->rec.state;
            st = kn_plan_run_recorded(plan, ins, results, &replayed);
            if (replayed) cm->stats.replays++;
            if (plan->rec.state == KN_REC_NEVER && before != KN_REC_NEVER) {
                snprintf(cm->stats.cuda_graph_why, sizeof cm->stats.cuda_graph_why, "%s", plan->rec.why);
                /* torch says "skipping cudagraphs due to ..." once; so does kiln, on a GPU */
                kn_compiled_log(cm, kn_device_kind_of(plan->device) == KN_DEVICE_CPU || plan->rec.by_choice ? KN_LOG_CUDAGRAPHS | KN_LOG_AUTOTUNE
                                                                                  : KN_LOG_WARN,
                                "kiln: %s (%s): a graph runs without a CUDA graph: %s\n", cm->id.name,
                                cm->id.where, plan->rec.why);
            }
        } else {
            st = kn_plan_run(plan, ins, results);
        }
        if (plan->mem.peak_bytes > cm->stats.peak_bytes) cm->stats.peak_bytes = plan->mem.peak_bytes;
        return st;
    }
    kn_tensor **values = calloc((size_t)g->n_nodes * KN_MAX_OUTPUTS + 1, sizeof *values);
    if (!values) return kn_error(KN_ERR_OOM, "out of host memory running a graph");
    kn_status st = kn_graph_run(g, cm->opt.settings, values);
    for (int i = 0; i < n_wanted; i++) {
        results[i] = st == KN_OK ? values[wanted[i].node * KN_MAX_OUTPUTS + wanted[i].out] : NULL;
        kn_tensor_retain(results[i]);
    }
    if (st == KN_OK)
        for (int i = 0; i < g->n_nodes * KN_MAX_OUTPUTS; i++) kn_tensor_release(values[i]);
    free(values);
    return st;
}

kn_status kn_capture_flush(kn_capture *cap)
{
    kn_compiled *cm = cap->cm;
    kn_graph *g = &cap->g;
    int ops = kn_graph_op_count(g);
    kn_status st = KN_OK;
    kn_tensor **values = NULL;
    if (g->n_nodes > 0) {
        double t0 = kn_clock_s();
        cm->stats.capture_s += t0 - cap->t_start;
        cap->capture_s += t0 - cap->t_start;
        int version = -1;
        if (ops > 0) {
            st = lookup_or_compile(cm, cap->segment, g, &version);
            cap->compile_s += kn_clock_s() - t0;
            if (st == KN_OK && version < 0) cm->stats.eager_fallbacks++;
        }
        /* the values still referenced are what this graph must produce */
        kn_plan_value *want = NULL;
        int n_want = 0;
        if (st == KN_OK) {
            want = malloc(sizeof *want * (size_t)(cap->n_lazies + 1));
            values = calloc((size_t)cap->n_lazies + 1, sizeof *values);
            if (!want || !values) st = kn_error(KN_ERR_OOM, "out of host memory running a graph");
        }
        for (int i = 0; st == KN_OK && i < cap->n_lazies; i++) {
            kn_lazy *lz = cap->lazies[i];
            if (lz->refcount < 2) continue; /* nothing refers to it any more */
            int j = 0;
            while (j < n_want && (want[j].node != lz->node || want[j].out != lz->out)) j++;
            if (j == n_want) want[n_want++] = (kn_plan_value){lz->node, lz->out};
        }
        kn_version *ver = version >= 0 ? &cm->cache.graphs[cap->segment].versions[version] : NULL;
        if (st == KN_OK) st = kn_compiled_run(cm, ver, g, want, n_want, values);
        if (st == KN_OK) {
            int next_output = 0;
            for (int i = 0; i < cap->n_lazies; i++) {
                kn_lazy *lz = cap->lazies[i];
                if (lz->refcount < 2) continue;
                int j = 0;
                while (want[j].node != lz->node || want[j].out != lz->out) j++;
                lz->value = values[j];
                kn_tensor_retain(lz->value);
                const kn_node *nd = &g->nodes[lz->node];
                if (nd->op == KN_NODE_INPUT) {
                    lz->is_input = true;
                    lz->input_kind = g->inputs[nd->input].kind;
                    snprintf(lz->input_name, sizeof lz->input_name, "%s", g->inputs[nd->input].name);
                }
                /* outputs are numbered among computed values, not inputs */
                if (nd->op < KN_OP_COUNT) lz->output_index = next_output++;
            }
            if (ops > 0) {
                if (cap->n_graphs < (int)(sizeof cap->ops_per_graph / sizeof cap->ops_per_graph[0])) {
                    cap->ops_per_graph[cap->n_graphs] = ops;
                    cap->graph_version[cap->n_graphs] = version;
                }
                cap->n_graphs++;
                cm->stats.graphs_run++;
            }
        }
        if (values) {
            for (int i = 0; i < n_want; i++) kn_tensor_release(values[i]);
            free(values);
        }
        free(want);
        cap->t_start = kn_clock_s();
    }
    /* Placeholders of this graph keep their lazies; lazies are retired from
     * the "current graph" by the segment number moving on. */
    drop_lazies(cap, false);
    kn_graph_free(g);
    kn_graph_init(g);
    if (ops > 0) cap->segment++;
    else cap->segment += 0; /* an op-less graph is not a graph: keep numbering */
    return st;
}

kn_status kn_capture_break(kn_capture *cap, const kn_break *b)
{
    kn_compiled *cm = cap->cm;
    kn_break rec = *b;
    rec.graph = cap->segment;
    if (cap->n_breaks == cap->cap_call_breaks) {
        int ncap = cap->cap_call_breaks ? cap->cap_call_breaks * 2 : 8;
        kn_break *nb = realloc(cap->call_breaks, sizeof *nb * (size_t)ncap);
        if (!nb) return kn_error(KN_ERR_OOM, "out of host memory for the break log");
        cap->call_breaks = nb;
        cap->cap_call_breaks = ncap;
    }
    cap->call_breaks[cap->n_breaks++] = rec;
    bool seen = false;
    for (int i = 0; i < cm->cache.n_breaks && !seen; i++)
        seen = strcmp(cm->cache.breaks[i].where, rec.where) == 0 &&
               strcmp(cm->cache.breaks[i].reason, rec.reason) == 0 &&
               strcmp(cm->cache.breaks[i].category, rec.category) == 0;
    if (!seen) {
        kn_break *nb = realloc(cm->cache.breaks, sizeof *nb * (size_t)(cm->cache.n_breaks + 1));
        if (!nb) return kn_error(KN_ERR_OOM, "out of host memory for the break log");
        cm->cache.breaks = nb;
        cm->cache.breaks[cm->cache.n_breaks++] = rec;
    }
    char text[4096];
    kn_break_format(&rec, text, sizeof text);
    if (cm->opt.fullgraph)
        return kn_error(KN_ERR_UNSUPPORTED, "fullgraph=true: %s compiles to one graph only, but:\n%s",
                        cm->id.name, text);
    if (!seen) kn_compiled_log(cm, KN_LOG_GRAPH_BREAKS, "%s", text);
    /* The values are needed now: run what was captured so far. Even a graph
     * of no ops is flushed, so its placeholders (inputs) get values. */
    return kn_capture_flush(cap);
}

kn_status kn_capture_end(kn_capture *cap, bool ok)
{
    kn_status st = KN_OK;
    if (ok) st = kn_capture_flush(cap);
    drop_lazies(cap, true);
    kn_graph_free(&cap->g);
    cap->active = false;
    return st;
}

/* ---- compiled functions -------------------------------------------------- */

kn_status kn_compiled_new(const char *fn_name, const char *fn_where, kn_compiled **out)
{
    kn_compiled *cm = calloc(1, sizeof *cm);
    if (!cm) return kn_error(KN_ERR_OOM, "out of host memory for a compiled function");
    snprintf(cm->id.name, sizeof cm->id.name, "%s", fn_name);
    snprintf(cm->id.where, sizeof cm->id.where, "%s", fn_where);
    snprintf(cm->id.mode, sizeof cm->id.mode, "default");
    cm->opt.cache_size_limit = 8;
    cm->opt.dynamic = -1;
    cm->opt.dynamic_numbers = true;
    cm->log.flags = KN_LOG_WARN;
    *out = cm;
    return KN_OK;
}

bool kn_mode_autotunes(const char *mode)
{
    return strncmp(mode, "max-autotune", 12) == 0;
}

bool kn_mode_records(const char *mode)
{
    return strcmp(mode, "reduce-overhead") == 0 || strcmp(mode, "max-autotune") == 0;
}

void kn_compiled_set_mode(kn_compiled *cm, const char *mode)
{
    snprintf(cm->id.mode, sizeof cm->id.mode, "%s", mode);
}

void kn_compiled_free(kn_compiled *cm)
{
    if (!cm) return;
    if (cm->cap.active) kn_capture_end(&cm->cap, false);
    free(cm->cap.lazies);
    free(cm->cap.call_breaks);
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        for (int v = 0; v < cm->cache.graphs[k].n_versions; v++) {
            kn_version *ver = &cm->cache.graphs[k].versions[v];
            for (int i = 0; i < ver->n_plans; i++) {
                kn_plan_free(ver->plans[i].plan);
                free(ver->plans[i].want);
                free(ver->plans[i].in_metas);
            }
            free(ver->plans);
            kn_graph_free(&cm->cache.graphs[k].versions[v].g);
            kn_sym_free(&cm->cache.graphs[k].versions[v].sym);
            free(cm->cache.graphs[k].versions[v].guards);
        }
        free(cm->cache.graphs[k].versions);
    }
    free(cm->cache.graphs);
    free(cm->cache.breaks);
    free(cm->cache.recompiles);
    free(cm->dyn.dims);
    for (int i = 0; i < cm->dyn.n_numbers; i++) kn_tensor_release(cm->dyn.numbers[i].last);
    free(cm->dyn.numbers);
    free(cm->log.text);
    free(cm);
}
