/* kn_autograd: the op entry that records the tape (kn_autograd_run), and
 * what a tensor's autograd state answers: requires_grad, its grad, its
 * grad_fn, whether it may be written in place. The backward pass is
 * kn_backward.c; the rules kn_rules_*.c. */
#include "kn_autograd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_grad_table.h"
#include "kn_lazy.h"

void kn_autograd_init(kn_autograd *ag)
{
    memset(ag, 0, sizeof *ag);
    ag->enabled = true;
    ag->seq = 1;
}

bool kn_autograd_requires_grad(const kn_tensor *t)
{
    return t && t->ag && t->ag->requires_grad;
}

/* A meta for out, which has none yet (ops make new headers; an output that
 * is an input's own header was replaced by an alias before this). */
static kn_grad_meta *meta_for(kn_tensor *out)
{
    if (out->ag) kn_grad_meta_release(out->ag);
    out->ag = kn_grad_meta_new();
    return out->ag;
}

/* Outputs without history, marked with why (best effort: out of memory
 * leaves them unmarked, which only makes a later message vaguer). */
static void mark_outputs(kn_opcall *c, kn_grad_origin origin, int op)
{
    for (int k = 0; k < c->n_out; k++) {
        kn_grad_meta *m = meta_for(c->out[k]);
        if (!m) continue;
        m->origin = origin;
        m->nondiff_op = op;
        m->nondiff_dtype = (int)c->out[k]->dtype;
    }
}

/* A view op may hand back its input's own header (a reshape to the same
 * shape): the output gets a header of its own, so that its meta is not the
 * input's. */
static kn_status own_outputs(kn_opcall *c)
{
    for (int k = 0; k < c->n_out; k++)
        for (int i = 0; i < c->n_in; i++)
            if (c->out[k] && c->out[k] == c->in[i]) {
                kn_tensor *a;
                KN_TRY(kn_tensor_alias(c->out[k], &a));
                kn_tensor_release(c->out[k]);
                c->out[k] = a;
            }
    return KN_OK;
}

/* A saved tensor that is a placeholder of a graph being captured: its
 * lazy counts it apart (kn_lazy.saved_refs). */
static void mark_saved(kn_tensor *t)
{
    if (!t || !t->lazy) return;
    t->saved_alias = true;
    t->lazy->saved_refs++;
}

static uint64_t version_of(const kn_tensor *t)
{
    return t && t->storage ? t->storage->version : 0;
}

/* The node of call c: what its rule saves, an edge per input that
 * requires grad, and the outputs' metas pointing at it. orig holds the
 * inputs as the caller gave them: while a capture traces, its executor
 * puts placeholders of the graph in c->in, which carry no autograd state,
 * so the edges come from orig and the saved tensors from c->in (the graph
 * values the backward reads). */
static kn_status record(kn_autograd *ag, kn_exec *ex, kn_opcall *c, kn_tensor *const *orig, const kn_grad_entry *e)
{
    kn_grad_node *n = kn_grad_node_new();
    kn_opcall *call = n ? malloc(sizeof *call) : NULL;
    if (!call) {
        free(n);
        return kn_error(KN_ERR_OOM, "%s: out of host memory for its autograd record", kn_op_name(c->op));
    }
    *call = *c;
    memset(call->in, 0, sizeof call->in);
    memset(call->out, 0, sizeof call->out);
    call->settings = NULL; /* borrowed for the forward call only */
    n->call = call;
    n->seq = ag->seq++;
    n->n_in = c->n_in;
    n->n_out = c->n_out;
    n->device = kn_tensor_device(c->out[0]);
    kn_status st = KN_OK;
    for (int i = 0; i < c->n_in; i++) {
        kn_tensor *x = c->in[i];
        if (!x) continue;
        n->in_meta[i] = kn_tensor_meta(x);
        const kn_tensor *given = orig[i] ? orig[i] : x;
        if (kn_autograd_requires_grad(given)) {
            n->edge[i] = given->ag;
            kn_grad_meta_retain(given->ag);
        }
        if ((e->saves & KN_SAVE_IN(i)) && st == KN_OK) {
            /* a tensor with data from outside the graph (a parameter) is
             * saved itself, not its placeholder: a backward traced later
             * finds the same graph input through it, and its storage
             * version shows an in-place write since (a traced copy_ too) */
            kn_tensor *keep = x->lazy && orig[i] && orig[i]->storage ? orig[i] : x;
            st = kn_tensor_alias(keep, &n->saved_in[i]);
            mark_saved(n->saved_in[i]);
            n->in_version[i] = version_of(keep);
        }
    }
    for (int k = 0; k < c->n_out && st == KN_OK; k++) {
        n->out_meta[k] = kn_tensor_meta(c->out[k]);
        if (e->saves & KN_SAVE_OUT(k)) {
            st = kn_tensor_alias(c->out[k], &n->saved_out[k]);
            mark_saved(n->saved_out[k]);
            n->out_version[k] = version_of(c->out[k]);
        }
    }
    if (st == KN_OK && ex->where) ex->where(ex, n->where, sizeof n->where);
    for (int k = 0; k < c->n_out && st == KN_OK; k++) {
        kn_grad_meta *m = meta_for(c->out[k]);
        if (!m) {
            st = kn_error(KN_ERR_OOM, "%s: out of host memory for its autograd record", kn_op_name(c->op));
            break;
        }
        if (!kn_dtype_is_float(c->out[k]->dtype)) { /* max's indices: no gradient flows through them */
            m->origin = KN_GRAD_ORIGIN_NONDIFF;
            m->nondiff_op = (int)c->op;
            m->nondiff_dtype = (int)c->out[k]->dtype;
            continue;
        }
        m->requires_grad = true;
        m->fn = n;
        m->out_index = k;
        n->refcount++;
    }
    kn_grad_node_release(n); /* the outputs' metas hold it now */
    return st;
}

kn_status kn_autograd_run(kn_autograd *ag, kn_exec *ex, kn_opcall *c, kn_device dev)
{
    bool wants = false;
    const kn_grad_meta *tag = NULL;
    kn_tensor *orig[KN_MAX_INPUTS];
    memcpy(orig, c->in, sizeof orig);
    for (int i = 0; i < c->n_in; i++) {
        const kn_tensor *x = c->in[i];
        if (!x || !x->ag) continue;
        if (x->ag->requires_grad) wants = true;
        else if (x->ag->origin != KN_GRAD_ORIGIN_NONE && !tag) tag = x->ag;
    }
    KN_TRY(ex->run(ex, c, dev));
    if (!wants && !tag) return KN_OK;
    kn_status st = own_outputs(c);
    if (st != KN_OK) {
        for (int k = 0; k < c->n_out; k++) kn_tensor_release(c->out[k]);
        c->n_out = 0;
        return st;
    }
    if (!wants) {
        mark_outputs(c, tag->origin, tag->nondiff_op);
        for (int k = 0; k < c->n_out; k++)
            if (c->out[k]->ag) c->out[k]->ag->nondiff_dtype = tag->nondiff_dtype;
        return KN_OK;
    }
    if (!ag->enabled) {
        mark_outputs(c, KN_GRAD_ORIGIN_NO_GRAD, -1);
        return KN_OK;
    }
    const kn_grad_entry *e = kn_grad_entry_of(c->op);
    bool any_float = false;
    for (int k = 0; k < c->n_out; k++) any_float |= kn_dtype_is_float(c->out[k]->dtype);
    if (!e->rule || !any_float) {
        mark_outputs(c, KN_GRAD_ORIGIN_NONDIFF, (int)c->op);
        return KN_OK;
    }
    st = record(ag, ex, c, orig, e);
    if (st != KN_OK) {
        for (int k = 0; k < c->n_out; k++) kn_tensor_release(c->out[k]);
        c->n_out = 0;
    }
    return st;
}

/* ---- a tensor's autograd state ----------------------------------------- */

kn_status kn_autograd_set_requires_grad(kn_tensor *t, bool on)
{
    if (t->ag && t->ag->fn) {
        if (on) return KN_OK; /* it requires grad already, through its history */
        return kn_error(KN_ERR_ARG,
                        "requires_grad_: only a leaf tensor's flag can be changed; this one was made by %s "
                        "(use x:detach() for a tensor without history)",
                        kn_op_name(t->ag->fn->call->op));
    }
    if (!on) {
        if (t->ag) t->ag->requires_grad = false;
        return KN_OK;
    }
    if (!kn_dtype_is_float(t->dtype))
        return kn_error(KN_ERR_DTYPE, "requires_grad_: only floating-point tensors can require gradients, got %s",
                        kn_dtype_name(t->dtype));
    if (!t->storage)
        return kn_error(KN_ERR_ARG, "requires_grad_: not inside a compiled function: kiln.compile records no "
                                    "gradients yet (set it on the tensor before the call)");
    if (!t->ag && !(t->ag = kn_grad_meta_new())) return kn_error(KN_ERR_OOM, "requires_grad_: out of host memory");
    t->ag->requires_grad = true;
    t->ag->origin = KN_GRAD_ORIGIN_NONE;
    return KN_OK;
}

const char *kn_autograd_fn_name(const kn_tensor *t)
{
    return t && t->ag && t->ag->fn ? kn_op_name(t->ag->fn->call->op) : NULL;
}

kn_tensor *kn_autograd_grad(const kn_tensor *t)
{
    return t && t->ag ? t->ag->grad : NULL;
}

kn_status kn_autograd_set_grad(kn_tensor *t, kn_tensor *g)
{
    if (!g) {
        if (t->ag) {
            kn_tensor_release(t->ag->grad);
            t->ag->grad = NULL;
        }
        return KN_OK;
    }
    char a[96], b[96];
    if (g->ndim != t->ndim || (t->ndim && memcmp(g->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) != 0))
        return kn_error(KN_ERR_SHAPE, "grad: a gradient of shape %s for a tensor of shape %s",
                        kn_shape_str(g->ndim, g->shape, a, sizeof a), kn_shape_str(t->ndim, t->shape, b, sizeof b));
    if (g->dtype != t->dtype)
        return kn_error(KN_ERR_DTYPE, "grad: a gradient of dtype %s for a tensor of dtype %s", kn_dtype_name(g->dtype),
                        kn_dtype_name(t->dtype));
    if (kn_tensor_device(g) != kn_tensor_device(t))
        return kn_error(KN_ERR_DEVICE, "grad: a gradient on %s for a tensor on %s", kn_device_name(kn_tensor_device(g)),
                        kn_device_name(kn_tensor_device(t)));
    if (!g->storage) return kn_error(KN_ERR_ARG, "grad: the gradient is a traced value with no data");
    kn_tensor *keep = g;
    if (g->ag) KN_TRY(kn_tensor_alias(g, &keep)); /* a gradient carries no history */
    else kn_tensor_retain(g);
    if (!t->ag && !(t->ag = kn_grad_meta_new())) {
        kn_tensor_release(keep);
        return kn_error(KN_ERR_OOM, "grad: out of host memory");
    }
    kn_tensor_release(t->ag->grad);
    t->ag->grad = keep;
    return KN_OK;
}

kn_status kn_autograd_check_inplace(const kn_autograd *ag, const kn_tensor *dst, const kn_tensor *src,
                                    const char *what)
{
    if (dst->ag && dst->ag->fn)
        return kn_error(KN_ERR_ARG,
                        "%s: the tensor has autograd history (%s made it) and an in-place write would make its "
                        "gradient wrong; use the new value as a new tensor instead",
                        what, kn_op_name(dst->ag->fn->call->op));
    if (ag->enabled && kn_autograd_requires_grad(dst))
        return kn_error(KN_ERR_ARG,
                        "%s: the tensor requires grad and an in-place write would not be recorded; write it "
                        "inside kiln.no_grad (as an optimizer's step does)",
                        what);
    if (ag->enabled && src && kn_autograd_requires_grad(src))
        return kn_error(KN_ERR_ARG,
                        "%s: the source requires grad but an in-place copy records no gradient; use the source "
                        "tensor itself (or src:clone()), or copy inside kiln.no_grad",
                        what);
    return KN_OK;
}

void kn_autograd_forget(kn_tensor *t, kn_grad_origin origin)
{
    if (!t->ag || !t->ag->fn) return;
    kn_grad_meta_release(t->ag);
    t->ag = kn_grad_meta_new();
    if (t->ag) t->ag->origin = origin;
}

kn_status kn_autograd_mark(kn_tensor *t, kn_grad_origin origin)
{
    if (t->ag && (t->ag->requires_grad || t->ag->fn))
        return kn_error(KN_ERR_ARG, "autograd: a tensor with history cannot be marked as having none");
    if (!t->ag && !(t->ag = kn_grad_meta_new())) return kn_error(KN_ERR_OOM, "autograd: out of host memory");
    t->ag->origin = origin;
    return KN_OK;
}

kn_status kn_autograd_no_history(const kn_tensor *t, const char *what)
{
    const kn_grad_meta *m = t->ag;
    switch (m ? m->origin : KN_GRAD_ORIGIN_NONE) {
    case KN_GRAD_ORIGIN_NONDIFF: {
        const char *why = NULL;
        char buf[64];
        if (kn_autograd_has_rule((kn_op)m->nondiff_op, &why) || !why) {
            snprintf(buf, sizeof buf, "its result is %s", kn_dtype_name((kn_dtype)m->nondiff_dtype));
            why = buf;
        }
        return kn_error(KN_ERR_ARG,
                        "%s: the tensor does not require grad: it comes from %s, which is not differentiable "
                        "(%s), so no gradient flows back through it",
                        what, kn_op_name((kn_op)m->nondiff_op), why);
    }
    case KN_GRAD_ORIGIN_NO_GRAD:
        return kn_error(KN_ERR_ARG,
                        "%s: the tensor does not require grad: it was computed inside kiln.no_grad (or from a "
                        "tensor that was), which records no history",
                        what);
    case KN_GRAD_ORIGIN_COMPILED:
        return kn_error(KN_ERR_ARG,
                        "%s: the tensor does not require grad: it was computed by a compiled function that kept "
                        "no values for a backward outside it (it does for a module in train mode, with grad "
                        "mode on); call backward inside the compiled function (a whole training step), or "
                        "put the module in train mode (m:train())",
                        what);
    case KN_GRAD_ORIGIN_MOVED:
        return kn_error(KN_ERR_ARG,
                        "%s: the tensor does not require grad: it was copied to another device (x:to), which "
                        "autograd does not record yet; move the parameters (m:to(device)) and the inputs before "
                        "computing with them",
                        what);
    case KN_GRAD_ORIGIN_SPENT:
        return kn_error(KN_ERR_ARG,
                        "%s: the tensor does not require grad: a compiled function returned it after its own "
                        "backward went through it (a training step's loss), and that backward freed the graph, "
                        "as any backward without retain_graph does; run a second backward inside the function "
                        "(with {retain_graph = true} on the first) if you need one",
                        what);
    case KN_GRAD_ORIGIN_NONE: break;
    }
    return kn_error(KN_ERR_ARG,
                    "%s: the tensor does not require grad and has no history: nothing it was computed from "
                    "requires grad (give the leaves {requires_grad = true} or call x:requires_grad_(); "
                    "kiln.nn modules' parameters require grad)",
                    what);
}

bool kn_autograd_has_rule(kn_op op, const char **why)
{
    const kn_grad_entry *e = kn_grad_entry_of(op);
    if (why) *why = e->why_not;
    return e->rule != NULL;
}
