/* kn_capture_trace: capturing one call: its start, the inputs and ops
 * appended to the open graph as placeholders, and the end of each graph
 * (a break, or the call's end): looked up in the version cache
 * (kn_capture_guards.c), run (kn_compiled_run), and every placeholder
 * still referenced given its value. */
#include "kn_capture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_capture_internal.h"
#include "kn_clock.h"

/* Messages here are built into fixed buffers on purpose (they are kept in
 * arrays of records); a name long enough to overflow one is cut, not lost. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

/* ---- inputs and ops ------------------------------------------------------ */

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

/* Whether b is another header over a's data (same storage, place,
 * shape, strides and dtype): the alias of a parameter a tape node saved,
 * which a backward traced in the same graph reads. It is that input, not
 * a new one: a new header every call would be an input a replay cannot
 * find again. */
static bool same_view(const kn_tensor *a, const kn_tensor *b)
{
    if (!a || !b || a == b || !a->storage || a->storage != b->storage || a->offset != b->offset ||
        a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->strides[d] != b->strides[d]) return false;
    return true;
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
        /* a placeholder an earlier call made (an optimizer's state, made
         * in a training step's first call and kept in its table) is any
         * other tensor to this call; its value is the input */
        bool this_call = t->lazy->cap == cap && t->id >= cap->first_tensor_id;
        if (this_call && t->lazy->is_input) {
            /* an input of an earlier graph (an argument, a parameter) keeps its name */
            kind = t->lazy->input_kind;
            name = t->lazy->input_name;
        } else if (this_call) {
            snprintf(gname, sizeof gname, "graph %d output %d", t->lazy->segment,
                     t->lazy->output_index);
            kind = KN_IN_GRAPH_OUTPUT;
            name = gname;
        }
    } else if (kind == KN_IN_TENSOR && t->id >= cap->first_tensor_id && !t->kept) {
        kind = KN_IN_VALUE; /* made during this call: a new object every call */
    }
    kn_tensor *written;
    KN_TRY(kn_capture_written_value(cap, real, &written));
    if (written) { /* written in place earlier in this graph: its new value */
        *out = written;
        return KN_OK;
    }
    int node = -1;
    for (int i = 0; i < cap->g.n_nodes && node < 0; i++) {
        const kn_node *n = &cap->g.nodes[i];
        if (n->op == KN_NODE_INPUT &&
            (cap->g.inputs[n->input].tensor_id == real->id || same_view(cap->g.inputs[n->input].tensor, real)))
            node = i;
    }
    if (node < 0) {
        char uname[KN_NAME_MAX];
        name = unique_input_name(&cap->g, name, uname, sizeof uname);
        KN_TRY(kn_graph_add_input(&cap->g, kind, name, real, where, &node));
        /* whether its gradient is traced: a guard (a placeholder of an
         * earlier call carries its autograd state itself, not its value) */
        cap->g.inputs[cap->g.nodes[node].input].requires_grad =
            (t->ag && t->ag->requires_grad) || (real->ag && real->ag->requires_grad);
    }
    return kn_capture_placeholder(cap, node, 0, out);
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
    n.part = (unsigned char)cap->part;
    n.n_in = c->n_in;
    n.a = c->a;
    n.n_out = n_out;
    snprintf(n.where, sizeof n.where, "%s", where ? where : "?");
    int idx;
    KN_TRY(kn_graph_add_node(&cap->g, &n, &idx));
    c->n_out = 0;
    for (int k = 0; k < n_out; k++) {
        kn_status st = kn_capture_placeholder(cap, idx, k, &c->out[k]);
        if (st != KN_OK) {
            for (int j = 0; j < k; j++) kn_tensor_release(c->out[j]);
            return st;
        }
    }
    c->n_out = n_out;
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
    cap->call_writes = cap->call_backwards = 0;
    kn_capture_forget_grad_sets(cap);
    cap->n_last_writes = 0;
    cap->part = KN_PART_FORWARD;
    cap->in_backward = false;
    cap->n_kept = 0;
    cap->first_tensor_id = kn_tensor_next_id();
    cm->stats.calls++;
    kn_phase_totals(cap->phase_at_start);
    cap->call_t0 = kn_clock_s();
    kn_phase_begin(KN_PHASE_CAPTURE);
    return KN_OK;
}


/* Note that lz, an output of its graph, is a value a tape node saved: kept
 * for a backward in a later graph or after the call (best effort: out of
 * memory leaves the ledger short, nothing else). */
static void note_kept(kn_capture *cap, const kn_lazy *lz)
{
    for (int i = 0; i < cap->n_kept; i++)
        if (cap->kept[i].graph == cap->segment && cap->kept[i].node == lz->node && cap->kept[i].out == lz->out) return;
    if (cap->n_kept == cap->cap_kept) {
        int ncap = cap->cap_kept ? cap->cap_kept * 2 : 32;
        struct kn_kept_value *nk = realloc(cap->kept, sizeof *nk * (size_t)ncap);
        if (!nk) return;
        cap->kept = nk;
        cap->cap_kept = ncap;
    }
    cap->kept[cap->n_kept++] = (struct kn_kept_value){cap->segment, lz->node, lz->out};
}

/* Whether the graph must compute lz: a placeholder other than the
 * capture's own reference holds it (autograd's saved ones only when the
 * capture keeps values for backward). */
static bool wanted(const kn_capture *cap, const kn_lazy *lz)
{
    return lz->refcount - (cap->keep_saved ? 0 : lz->saved_refs) >= 2;
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
            st = kn_capture_lookup_or_compile(cm, cap->segment, g, &version);
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
            if (!wanted(cap, lz)) continue; /* nothing refers to it any more */
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
                if (!wanted(cap, lz)) {
                    lz->dropped = true;
                    continue;
                }
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
                if (nd->op < KN_OP_COUNT && lz->saved_refs > 0) note_kept(cap, lz);
            }
            if (ops > 0) {
                if (cap->n_graphs < (int)(sizeof cap->ops_per_graph / sizeof cap->ops_per_graph[0])) {
                    cap->ops_per_graph[cap->n_graphs] = ops;
                    cap->graph_version[cap->n_graphs] = version;
                }
                cap->n_graphs++;
                cm->stats.graphs_run++;
                free(cap->last_want); /* kept for a replay (kn_capture.last_want) */
                cap->last_want = want;
                cap->n_last_want = n_want;
                want = NULL;
            }
        }
        kn_status wst = kn_capture_apply_writes(cap, st == KN_OK);
        if (st == KN_OK) st = wst;
        if (values) {
            for (int i = 0; i < n_want; i++) kn_tensor_release(values[i]);
            free(values);
        }
        free(want);
        cap->t_start = kn_clock_s();
    }
    /* Placeholders of this graph keep their lazies; lazies are retired from
     * the "current graph" by the segment number moving on. */
    kn_capture_drop_lazies(cap, false);
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
    kn_capture_close(cap);
    return st;
}

/* ---- messages ------------------------------------------------------------ */

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
