/* kn_lua_replay_tape: the autograd history a direct replay attaches to its
 * results (see kn_lua_replay_tape.h): the traced call's tape kept as a
 * template, built again from each replay's values. */
#include "kn_lua_replay_tape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_lazy.h"
#include "kn_lua_compiled_ud.h"

/* What a node saved: a value the graph computes (index into the wanted
 * values), an input of the graph (its index), or a tensor from outside
 * the graph (a parameter, held). */
typedef enum { REF_NONE, REF_VALUE, REF_INPUT, REF_TENSOR } ref_kind;
typedef struct {
    ref_kind kind;
    int index;
    kn_tensor *t;
} tape_ref;

/* Where a node's input gradient goes: an output of an earlier node of the
 * tape, the call's tensor argument `index` (whatever tensor the replay is
 * given), or a meta from outside the call (a parameter's, held). */
typedef enum { EDGE_NONE, EDGE_NODE, EDGE_ARG, EDGE_META } edge_kind;
typedef struct {
    edge_kind kind;
    int index, out;
    kn_grad_meta *meta;
} tape_edge;

typedef struct {
    kn_opcall call; /* op and attributes, as the traced node kept them */
    int n_in, n_out;
    kn_meta in_meta[KN_GRAD_MAX_IN];
    kn_meta out_meta[KN_GRAD_MAX_OUT];
    tape_edge edge[KN_GRAD_MAX_IN];
    tape_ref saved_in[KN_GRAD_MAX_IN];
    tape_ref saved_out[KN_GRAD_MAX_OUT];
    kn_device device;
    char where[KN_GRAD_WHERE_MAX];
} tape_node;

struct kn_replay_tape {
    tape_node *nodes; /* in recording order: a node's inputs come before it */
    int n_nodes;
    kn_plan_value *want;
    int n_want;
    int n_results;
    /* per result: its wanted value (-1: a constant), and the node and
     * output whose meta it carries (res_node -1: no history) */
    int res_value[KN_REPLAY_MAX], res_node[KN_REPLAY_MAX], res_out[KN_REPLAY_MAX];
};

void kn_replay_tape_free(kn_replay_tape *tp)
{
    if (!tp) return;
    for (int j = 0; j < tp->n_nodes; j++) {
        tape_node *tn = &tp->nodes[j];
        for (int i = 0; i < KN_GRAD_MAX_IN; i++) {
            kn_grad_meta_release(tn->edge[i].meta);
            kn_tensor_release(tn->saved_in[i].t);
        }
        for (int k = 0; k < KN_GRAD_MAX_OUT; k++) kn_tensor_release(tn->saved_out[k].t);
    }
    free(tp->nodes);
    free(tp->want);
    free(tp);
}

const kn_plan_value *kn_replay_tape_want(const kn_replay_tape *tp, int *n_want)
{
    *n_want = tp->n_want;
    return tp->want;
}

int kn_replay_tape_result_value(const kn_replay_tape *tp, int i)
{
    return tp->res_value[i];
}

/* ---- recording ----------------------------------------------------------- */

static int want_index(const kn_replay_tape *tp, int node, int out)
{
    for (int i = 0; i < tp->n_want; i++)
        if (tp->want[i].node == node && tp->want[i].out == out) return i;
    return -1;
}

/* The nodes of the call's tape, found from the results' through edges. */
typedef struct {
    kn_grad_node **items;
    int n, cap;
} node_set;

static int set_find(const node_set *s, const kn_grad_node *n)
{
    for (int i = 0; i < s->n; i++)
        if (s->items[i] == n) return i;
    return -1;
}

static bool set_add(node_set *s, kn_grad_node *n)
{
    if (set_find(s, n) >= 0) return true;
    if (s->n == s->cap) {
        int ncap = s->cap ? s->cap * 2 : 32;
        kn_grad_node **ni = realloc(s->items, sizeof *ni * (size_t)ncap);
        if (!ni) return false;
        s->items = ni;
        s->cap = ncap;
    }
    s->items[s->n++] = n;
    return true;
}

static int by_seq(const void *a, const void *b)
{
    uint64_t x = (*(kn_grad_node *const *)a)->seq, y = (*(kn_grad_node *const *)b)->seq;
    return x < y ? -1 : x > y;
}

static int arg_of(const kn_grad_meta *m, kn_tensor *const *args, int nargs)
{
    for (int i = 0; i < nargs; i++)
        if (args[i] && args[i]->ag == m) return i;
    return -1;
}

/* Every node of this call (numbered seq0 or later) the results reach,
 * sorted into recording order. */
static bool collect(node_set *s, uint64_t seq0, kn_tensor *const *results, int n_results, kn_tensor *const *args,
                    int nargs)
{
    for (int i = 0; i < n_results; i++)
        if (results[i] && results[i]->ag && results[i]->ag->fn && results[i]->ag->fn->seq >= seq0 &&
            !set_add(s, results[i]->ag->fn))
            return false;
    for (int j = 0; j < s->n; j++) /* the set grows while it is walked */
        for (int i = 0; i < s->items[j]->n_in; i++) {
            const kn_grad_meta *m = s->items[j]->edge[i];
            if (m && m->fn && m->fn->seq >= seq0 && arg_of(m, args, nargs) < 0 && !set_add(s, m->fn)) return false;
        }
    qsort(s->items, (size_t)s->n, sizeof *s->items, by_seq);
    return true;
}

/* What saved tensor t is to a replay; false when it cannot get it again. */
static bool ref_of(const kn_replay_tape *tp, const kn_version *v, kn_tensor *t, tape_ref *r)
{
    r->kind = REF_NONE;
    if (!t) return true;
    if (!t->lazy) {
        if (!t->storage) return false;
        r->kind = REF_TENSOR;
        r->t = t;
        kn_tensor_retain(t);
        return true;
    }
    const kn_lazy *lz = t->lazy;
    if (lz->segment != 0 || lz->node < 0 || lz->node >= v->g.n_nodes) return false;
    const kn_node *nd = &v->g.nodes[lz->node];
    if (nd->op == KN_NODE_INPUT) {
        r->kind = REF_INPUT;
        r->index = nd->input;
        return true;
    }
    r->index = want_index(tp, lz->node, lz->out);
    if (r->index < 0) return false;
    r->kind = REF_VALUE;
    return true;
}

/* Node n of the trace as a template; false when a saved value cannot be
 * found again. */
static bool template_of(kn_replay_tape *tp, const kn_version *v, const node_set *s, const kn_grad_node *n,
                        kn_tensor *const *args, int nargs, tape_node *tn)
{
    tn->call = *n->call;
    tn->n_in = n->n_in;
    tn->n_out = n->n_out;
    memcpy(tn->in_meta, n->in_meta, sizeof tn->in_meta);
    memcpy(tn->out_meta, n->out_meta, sizeof tn->out_meta);
    tn->device = n->device;
    memcpy(tn->where, n->where, sizeof tn->where);
    bool ok = true;
    for (int i = 0; i < n->n_in; i++) {
        kn_grad_meta *m = n->edge[i];
        tape_edge *e = &tn->edge[i];
        int arg = m ? arg_of(m, args, nargs) : -1;
        if (!m) e->kind = EDGE_NONE;
        else if (arg >= 0) {
            e->kind = EDGE_ARG;
            e->index = arg;
        } else if (m->fn && set_find(s, m->fn) >= 0) {
            e->kind = EDGE_NODE;
            e->index = set_find(s, m->fn);
            e->out = m->out_index;
        } else {
            e->kind = EDGE_META;
            e->meta = m;
            kn_grad_meta_retain(m);
        }
        ok = ok && ref_of(tp, v, n->saved_in[i], &tn->saved_in[i]);
    }
    for (int k = 0; k < n->n_out; k++) ok = ok && ref_of(tp, v, n->saved_out[k], &tn->saved_out[k]);
    return ok;
}

kn_replay_tape *kn_replay_tape_record(const kn_capture *cap, const kn_version *v, uint64_t seq0,
                                      kn_tensor *const *results, int n_results, kn_tensor *const *args, int nargs,
                                      char *why, size_t why_size)
{
    kn_replay_tape *tp = calloc(1, sizeof *tp);
    node_set s = {0};
    if (!tp || n_results > KN_REPLAY_MAX || !cap->n_last_want) goto fail;
    tp->want = malloc(sizeof *tp->want * (size_t)cap->n_last_want);
    if (!tp->want) goto fail;
    memcpy(tp->want, cap->last_want, sizeof *tp->want * (size_t)cap->n_last_want);
    tp->n_want = cap->n_last_want;
    if (!collect(&s, seq0, results, n_results, args, nargs)) goto fail;
    tp->nodes = calloc((size_t)(s.n ? s.n : 1), sizeof *tp->nodes);
    if (!tp->nodes) goto fail;
    for (int j = 0; j < s.n; j++) {
        tp->n_nodes = j + 1; /* freed with what it holds so far */
        if (!template_of(tp, v, &s, s.items[j], args, nargs, &tp->nodes[j])) goto fail;
    }
    tp->n_results = n_results;
    for (int i = 0; i < n_results; i++) {
        const kn_tensor *t = results[i];
        tp->res_value[i] = tp->res_node[i] = -1;
        if (!t) continue;
        tp->res_value[i] = t->lazy ? want_index(tp, t->lazy->node, t->lazy->out) : -1;
        if (tp->res_value[i] < 0) goto fail;
        if (t->ag && t->ag->fn) {
            tp->res_node[i] = set_find(&s, t->ag->fn);
            tp->res_out[i] = t->ag->out_index;
            if (tp->res_node[i] < 0) goto fail; /* history from before the call: an argument returned */
        }
    }
    free(s.items);
    return tp;
fail:
    snprintf(why, why_size, "it returns a tensor with autograd history whose tape a replay cannot rebuild (a value "
                            "backward needs is not one its graph computes); for inference use m:eval() or "
                            "kiln.no_grad");
    free(s.items);
    kn_replay_tape_free(tp);
    return NULL;
}

/* ---- a replay's history -------------------------------------------------- */

/* A new reference to what r saved, in this replay, and its storage's version. */
static kn_status saved_of(const tape_ref *r, kn_tensor *const *outs, kn_tensor *const *bound, kn_tensor **out,
                          uint64_t *version)
{
    kn_tensor *src = r->kind == REF_VALUE ? outs[r->index] : r->kind == REF_INPUT ? bound[r->index] : r->t;
    *out = NULL;
    if (r->kind == REF_NONE) return KN_OK;
    if (!src) return kn_error(KN_ERR_ARG, "replay: a value the tape saved is missing (a kiln bug)");
    *version = src->storage ? src->storage->version : 0;
    return kn_tensor_alias(src, out);
}

/* Node j of the tape for this replay: its outputs' metas into metas[j]
 * (one reference each, the caller's). */
static kn_status build_node(const tape_node *tn, kn_autograd *ag, kn_tensor *const *outs, kn_tensor *const *bound,
                            kn_tensor *const *args, kn_grad_meta *(*metas)[KN_GRAD_MAX_OUT], int j)
{
    kn_grad_node *n = kn_grad_node_new();
    kn_opcall *call = n ? malloc(sizeof *call) : NULL;
    if (!call) {
        free(n);
        return kn_error(KN_ERR_OOM, "%s: out of host memory for its autograd record", kn_op_name(tn->call.op));
    }
    *call = tn->call;
    n->call = call;
    n->seq = ag->seq++;
    n->n_in = tn->n_in;
    n->n_out = tn->n_out;
    memcpy(n->in_meta, tn->in_meta, sizeof n->in_meta);
    memcpy(n->out_meta, tn->out_meta, sizeof n->out_meta);
    n->device = tn->device;
    memcpy(n->where, tn->where, sizeof n->where);
    kn_status st = KN_OK;
    for (int i = 0; i < tn->n_in && st == KN_OK; i++) {
        const tape_edge *e = &tn->edge[i];
        kn_grad_meta *m = e->kind == EDGE_NODE  ? metas[e->index][e->out]
                          : e->kind == EDGE_META ? e->meta
                          : e->kind == EDGE_ARG && kn_autograd_requires_grad(args[e->index]) ? args[e->index]->ag
                                                                                             : NULL;
        n->edge[i] = m;
        kn_grad_meta_retain(m);
        st = saved_of(&tn->saved_in[i], outs, bound, &n->saved_in[i], &n->in_version[i]);
    }
    for (int k = 0; k < tn->n_out && st == KN_OK; k++)
        st = saved_of(&tn->saved_out[k], outs, bound, &n->saved_out[k], &n->out_version[k]);
    for (int k = 0; k < tn->n_out && st == KN_OK; k++) {
        if (!kn_dtype_is_float(tn->out_meta[k].dtype)) continue; /* max's indices: no gradient flows */
        kn_grad_meta *m = kn_grad_meta_new();
        if (!m) {
            st = kn_error(KN_ERR_OOM, "%s: out of host memory for its autograd record", kn_op_name(tn->call.op));
            break;
        }
        m->requires_grad = true;
        m->fn = n;
        m->out_index = k;
        n->refcount++;
        metas[j][k] = m;
    }
    kn_grad_node_release(n); /* the outputs' metas hold it now */
    return st;
}

kn_status kn_replay_tape_attach(const kn_replay_tape *tp, kn_autograd *ag, kn_tensor *const *outs,
                                kn_tensor *const *bound, kn_tensor *const *args, kn_tensor **results)
{
    kn_grad_meta *(*metas)[KN_GRAD_MAX_OUT] = calloc((size_t)(tp->n_nodes ? tp->n_nodes : 1), sizeof *metas);
    if (!metas) return kn_error(KN_ERR_OOM, "out of host memory for a replay's autograd record");
    kn_status st = KN_OK;
    for (int j = 0; j < tp->n_nodes && st == KN_OK; j++)
        st = build_node(&tp->nodes[j], ag, outs, bound, args, metas, j);
    for (int i = 0; i < tp->n_results; i++) {
        results[i] = NULL;
        int w = tp->res_value[i];
        if (st != KN_OK || w < 0) continue;
        if (tp->res_node[i] < 0) { /* no history: the value itself */
            results[i] = outs[w];
            kn_tensor_retain(results[i]);
            continue;
        }
        /* a header of its own: a value may be a result and saved, or two results */
        st = kn_tensor_alias(outs[w], &results[i]);
        if (st != KN_OK) break;
        results[i]->ag = metas[tp->res_node[i]][tp->res_out[i]];
        kn_grad_meta_retain(results[i]->ag);
    }
    if (st != KN_OK)
        for (int i = 0; i < tp->n_results; i++) {
            kn_tensor_release(results[i]);
            results[i] = NULL;
        }
    for (int j = 0; j < tp->n_nodes; j++)
        for (int k = 0; k < KN_GRAD_MAX_OUT; k++) kn_grad_meta_release(metas[j][k]);
    free(metas);
    return st;
}
