/* kn_capture_writes: in-place writes made while a call is captured (an
 * optimizer's p:copy_(new), a .grad accumulated into), the functional form
 * AOTAutograd gives them: the graph computes the new value as one of its
 * outputs, later ops of the same graph read that value wherever they read
 * the written tensor, and the value is copied into the tensor's storage
 * once the graph has run. A call that fails writes nothing, so a failed
 * training step leaves every parameter and state tensor as it was. */
#include "kn_capture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_capture_internal.h"

static bool is_current(const kn_capture *cap, const kn_tensor *t)
{
    return t->lazy && t->lazy->cap == cap && t->lazy->segment == cap->segment && !t->lazy->value;
}

/* The tensor with data that a write into t changes: t itself, or the
 * value of a placeholder whose graph ran (NULL when it has none). */
static kn_tensor *real_target(kn_tensor *t)
{
    if (!t->lazy) return t;
    return t->lazy->value;
}

/* The write of this graph into the tensor with this id (one at most: a
 * later write replaces an earlier one's value), or NULL. */
static struct kn_capture_write *pending(const kn_capture *cap, uint64_t id)
{
    for (int i = cap->n_writes - 1; i >= 0; i--)
        if (cap->writes[i].dst->id == id) return &cap->writes[i];
    return NULL;
}

kn_status kn_capture_write(kn_capture *cap, kn_tensor *dst, kn_tensor *src)
{
    if (!is_current(cap, src))
        return kn_error(KN_ERR_ARG, "copy_: the source is not a value of the graph being captured (a kiln bug)");
    kn_tensor *real = NULL;
    if (is_current(cap, dst)) {
        /* a value of this graph: from now on it stands for the new value.
         * An input of the graph (an argument: its placeholder is current
         * too) also has a tensor outside, which gets the value once the
         * graph ran, as an upvalue written in place does; state made by
         * this call has none. */
        const kn_node *n = &cap->g.nodes[dst->lazy->node];
        if (n->op == KN_NODE_INPUT) real = cap->g.inputs[n->input].tensor;
        /* an argument written twice (AdamW's decay, then its step): its
         * placeholder stands for the first write's value by now */
        for (int i = cap->n_writes - 1; i >= 0 && !real; i--)
            if (cap->writes[i].src->lazy == dst->lazy) real = cap->writes[i].dst;
        kn_lazy *old = dst->lazy;
        dst->lazy = src->lazy;
        src->lazy->refcount++;
        kn_tensor_release(kn_lazy_release(old));
        if (!real) {
            cap->call_writes++;
            return KN_OK;
        }
    } else {
        real = real_target(dst);
    }
    if (!real || !real->storage)
        return kn_error(KN_ERR_ARG, "copy_: the destination is a traced value with no data (its compiled call failed)");
    if (!kn_tensor_is_contiguous(real)) return kn_error(KN_ERR_ARG, "copy_: the destination must be contiguous");
    /* written before in this graph (AdamW's decay, then its step): the
     * newer value replaces the older as what the tensor gets, so the older
     * stays a value inside the graph instead of an output of its own */
    struct kn_capture_write *earlier = pending(cap, real->id);
    if (earlier) {
        kn_tensor *keep;
        KN_TRY(kn_tensor_alias(src, &keep));
        kn_tensor_release(earlier->src);
        earlier->src = keep;
        kn_storage_written(real->storage);
        cap->call_writes++;
        return KN_OK;
    }
    if (cap->n_writes == cap->cap_writes) {
        int ncap = cap->cap_writes ? cap->cap_writes * 2 : 32;
        struct kn_capture_write *nw = realloc(cap->writes, sizeof *nw * (size_t)ncap);
        if (!nw) return kn_error(KN_ERR_OOM, "out of host memory while capturing");
        cap->writes = nw;
        cap->cap_writes = ncap;
    }
    kn_tensor *keep;
    KN_TRY(kn_tensor_alias(src, &keep)); /* the graph must compute it: a live placeholder */
    kn_tensor_retain(real);
    /* written, as far as a tape node that saved it can tell: backward
     * through such a node fails as it would eagerly */
    kn_storage_written(real->storage);
    cap->writes[cap->n_writes++] = (struct kn_capture_write){real, keep};
    cap->call_writes++;
    return KN_OK;
}

bool kn_capture_pending_write(const kn_capture *cap, const kn_tensor *t)
{
    if (!cap || !cap->n_writes) return false;
    const kn_tensor *real = t->lazy ? t->lazy->value : t;
    if (!real) return false;
    for (int i = 0; i < cap->n_writes; i++)
        if (cap->writes[i].dst->storage == real->storage) return true;
    return false;
}

kn_status kn_capture_written_value(kn_capture *cap, const kn_tensor *real, kn_tensor **out)
{
    *out = NULL;
    const struct kn_capture_write *w = pending(cap, real->id);
    if (!w) return KN_OK;
    return kn_capture_placeholder(cap, w->src->lazy->node, w->src->lazy->out, out);
}

/* Copy value v into dst's storage (same shape and dtype; v made contiguous
 * first when it is not): kn_capture.h. */
kn_status kn_capture_copy_value(kn_tensor *dst, kn_tensor *v)
{
    if (v->storage == dst->storage && v->offset == dst->offset) return KN_OK;
    kn_tensor *src = v, *tmp = NULL;
    if (!kn_tensor_is_contiguous(v)) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_CONTIGUOUS);
        c.n_in = 1;
        c.in[0] = v;
        KN_TRY(kn_op_eager(&c, kn_tensor_device(v)));
        src = tmp = c.out[0];
    }
    kn_device dd = kn_tensor_device(dst);
    kn_status st = KN_OK;
    if (kn_tensor_device(src) != dd)
        st = kn_error(KN_ERR_DEVICE, "copy_: a value on %s for a tensor on %s", kn_device_name(kn_tensor_device(src)),
                      kn_device_name(dd));
    kn_device_ctx *dc = st == KN_OK ? kn_backend_get(dd) : NULL;
    if (st == KN_OK && !dc) st = kn_error(KN_ERR_DEVICE, "copy_: device %s is not available", kn_device_name(dd));
    if (st == KN_OK)
        st = dc->be->copy(dc, kn_tensor_data(dst), kn_tensor_data(src),
                          kn_tensor_numel(dst) * (int64_t)kn_dtype_size(dst->dtype));
    if (st == KN_OK) kn_storage_written(dst->storage);
    kn_tensor_release(tmp);
    return st;
}

/* Note a write that ran: its value's node and the graph input the written
 * tensor is (kn_capture.last_writes). */
static void note_applied(kn_capture *cap, const struct kn_capture_write *w)
{
    if (cap->n_last_writes == cap->cap_last_writes) {
        int ncap = cap->cap_last_writes ? cap->cap_last_writes * 2 : 16;
        struct kn_applied_write *nw = realloc(cap->last_writes, sizeof *nw * (size_t)ncap);
        if (!nw) { /* a replay then cannot know this write: none is allowed */
            cap->n_last_writes = -1;
            return;
        }
        cap->last_writes = nw;
        cap->cap_last_writes = ncap;
    }
    int input = -1;
    for (int k = 0; k < cap->g.n_inputs && input < 0; k++)
        if (cap->g.inputs[k].tensor_id == w->dst->id) input = k;
    cap->last_writes[cap->n_last_writes++] =
        (struct kn_applied_write){cap->segment, w->src->lazy->node, w->src->lazy->out, input};
}

kn_status kn_capture_apply_writes(kn_capture *cap, bool ran)
{
    kn_status st = KN_OK;
    for (int i = 0; i < cap->n_writes; i++) {
        struct kn_capture_write *w = &cap->writes[i];
        if (ran && st == KN_OK) {
            kn_tensor *v = w->src->lazy ? w->src->lazy->value : NULL;
            st = v ? kn_capture_copy_value(w->dst, v)
                   : kn_error(KN_ERR_ARG, "copy_: the graph gave no value for an in-place write (a kiln bug)");
            if (st == KN_OK && cap->n_last_writes >= 0) note_applied(cap, w);
        }
        kn_tensor_release(w->dst);
        kn_tensor_release(w->src);
    }
    cap->n_writes = 0;
    return st;
}

/* ---- .grad set by hand during a trace (kn_capture.h) ---- */

void kn_capture_note_grad_set(kn_capture *cap, kn_tensor *t, bool cleared)
{
    if (!cleared) {
        cap->call_grad_assigns++;
        return;
    }
    if (kn_capture_grad_cleared(cap, t->id)) return;
    if (cap->n_grad_cleared == cap->cap_grad_cleared) {
        int n = cap->cap_grad_cleared ? 2 * cap->cap_grad_cleared : 64;
        kn_tensor **list = realloc(cap->grad_cleared, sizeof *list * (size_t)n);
        if (!list) {
            cap->call_grad_assigns++; /* forgotten: the call is traced again, never replayed wrongly */
            return;
        }
        cap->grad_cleared = list;
        cap->cap_grad_cleared = n;
    }
    kn_tensor_retain(t);
    cap->grad_cleared[cap->n_grad_cleared++] = t;
}

bool kn_capture_grad_cleared(const kn_capture *cap, uint64_t tensor_id)
{
    for (int i = 0; i < cap->n_grad_cleared; i++)
        if (cap->grad_cleared[i]->id == tensor_id) return true;
    return false;
}

void kn_capture_forget_grad_sets(kn_capture *cap)
{
    for (int i = 0; i < cap->n_grad_cleared; i++) kn_tensor_release(cap->grad_cleared[i]);
    cap->n_grad_cleared = cap->call_grad_assigns = 0;
}
