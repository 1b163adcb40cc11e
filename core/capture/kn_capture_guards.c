/* kn_capture_guards: the version cache of a compiled function's graphs:
 * the guards a version keeps (as text, for explain() and KILN_LOGS=guards),
 * why a traced graph fails a version's guards, and the lookup that finds
 * the version a graph fits or makes a new one, explaining the recompile. */
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

/* ---- guards as text ------------------------------------------------------ */

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
    snprintf(buf, size, "%s '%s' shape %s dtype %s device %s %s%s%s", what, in->name, shp,
             kn_dtype_name(in->meta.dtype), kn_device_name(in->device), str,
             in->kind == KN_IN_PARAM || in->kind == KN_IN_TENSOR ? ", same object" : "",
             in->requires_grad ? ", requires_grad" : "");
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
    if (want->requires_grad != got->requires_grad) {
        snprintf(buf, size, "%s requires_grad changed: expected %s, actual %s", label,
                 want->requires_grad ? "true" : "false", got->requires_grad ? "true" : "false");
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
    if (v->training != cm->id.training) {
        const char *what = v->training ? v->training_what : cm->id.training_what;
        snprintf(buf, size, "train/eval mode changed: %s.training %s -> %s (m:train() / m:eval())",
                 what[0] ? what : "a module", v->training ? "true" : "false", cm->id.training ? "true" : "false");
        return true;
    }
    if (v->g.n_inputs != g->n_inputs) {
        /* Inputs made inside the call are named by line and count, so a
         * call that reads more of them (a training step's second call: the
         * optimizer's state exists now) would otherwise be reported as the
         * first name's dtype or shape changing, between two different
         * tensors. The count says what changed; the first new names where. */
        int len = snprintf(buf, size, "the graph reads %d tensors, version %d read %d", g->n_inputs, vi,
                           v->g.n_inputs);
        int named = 0;
        for (int j = 0; j < g->n_inputs && named < 2 && len > 0 && (size_t)len < size; j++) {
            bool known = false;
            for (int i = 0; i < v->g.n_inputs && !known; i++) known = strcmp(g->inputs[j].name, v->g.inputs[i].name) == 0;
            if (known) continue;
            len += snprintf(buf + len, size - (size_t)len, "%s'%s'", named ? ", " : " (new: ", g->inputs[j].name);
            named++;
        }
        if (named && len > 0 && (size_t)len < size) snprintf(buf + len, size - (size_t)len, ")");
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
    int n = v->g.n_inputs + 3;
    for (int i = 0; i < v->g.n_nodes; i++) n += v->g.nodes[i].op == KN_NODE_CONST;
    v->guards = calloc((size_t)n, sizeof *v->guards);
    if (!v->guards) return kn_error(KN_ERR_OOM, "out of host memory for guards");
    v->n_guards = 0;
    snprintf(v->guards[v->n_guards++], KN_REASON_MAX, "mode %s", v->mode);
    if (v->training)
        snprintf(v->guards[v->n_guards++], KN_REASON_MAX, "%s.training == true (train mode)",
                 v->training_what[0] ? v->training_what : "a module");
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

/* ---- the version cache --------------------------------------------------- */

/* Find a cached version of graph K that fits g, or compile a new one
 * (explaining why). *version gets its index, or -1 when the graph must run
 * eagerly (cache limit). */
kn_status kn_capture_lookup_or_compile(kn_compiled *cm, int k, kn_graph *g, int *version)
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
        if (kn_capture_numbers_dynamic(cm))
            KN_TRY(kn_capture_make_numbers_dynamic(cm, k, &gc->versions[gc->n_versions - 1], g, &rc));
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
            if (in->kind != KN_IN_PARAM) kn_capture_add_dynamic(cm, in->name, newest.dim);
        }
    }
    kn_version *nv = realloc(gc->versions, sizeof *nv * (size_t)(gc->n_versions + 1));
    if (!nv) return kn_error(KN_ERR_OOM, "out of host memory for the graph cache");
    gc->versions = nv;
    kn_version *v = &gc->versions[gc->n_versions];
    memset(v, 0, sizeof *v);
    KN_TRY(kn_graph_copy(g, &v->g));
    snprintf(v->mode, sizeof v->mode, "%s", cm->id.mode);
    v->training = cm->id.training;
    snprintf(v->training_what, sizeof v->training_what, "%s", cm->id.training_what);
    kn_status st = kn_capture_make_symbols(cm, gc, v);
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
