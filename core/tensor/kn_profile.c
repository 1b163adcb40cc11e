/* kn_profile: the profiler session and its event pool. */
#include "kn_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_cost.h"

bool kn_profile_on;

/* Longer than the host takes from a kernel's start event to its launch (a
 * library call with its plan lookups included): see hold_queue. */
#define KN_PROFILE_HOLD_US 50.0

/* kernel_begin's answer for an op that is its kernel's own call */
#define KN_PROFILE_TRANSPARENT (-2)

/* The pool outlives sessions: creating CUDA events per kernel per call
 * would cost more than the kernels being timed. Slot i uses events 2i, 2i+1. */
static struct {
    kn_device_ctx *dc;
    void **ev;
    int n_ev, cap_ev;
    kn_profile_record *rec;
    int n_rec, cap_rec;
    int depth;       /* kernels begun and not ended (nesting) */
    int outer;       /* the recorded kernel at depth 0 that is open, or -1 */
    bool next_is_kernel; /* kn_profile_next_is_kernel */
    int transparent;     /* open ops that were their kernel's own call */
    kn_status error; /* the first failure of a hook (reported by end) */
    char error_msg[256];
    const void *within_owner; /* kn_profile_within */
    int within_kernel;
    /* exact device times (the backend's trace slots), when it has them:
     * slot i's work is tagged i + 1; traced_ms[i] sums what ran under it */
    bool tracing;  /* a trace is on: trace_end must end it */
    bool trace_ok; /* every recorded kernel's work was tagged */
    bool *traced; /* slot i pushed its tag (and pops it at its end) */
    double *traced_ms;
    int cap_traced;
} P = {.within_kernel = -1, .outer = -1};

/* What the last session on each kind of device timed kernels with
 * (kn_profile_timing); NULL before the first. */
static const char *timing_of[KN_DEVICE_KINDS];

static void each_traced(void *ctx, uint64_t id, double ms)
{
    (void)ctx;
    if (id >= 1 && id <= (uint64_t)P.n_rec) P.traced_ms[id - 1] += ms;
}

/* Stop tracing mid-session (a push or pop failed): events time the rest.
 * The tags pushed so far are popped as their kernels end. */
static void trace_give_up(void)
{
    P.trace_ok = false;
}

static void pool_drop(void)
{
    for (int i = 0; i < P.n_ev; i++)
        if (P.dc && P.dc->be->event_destroy) P.dc->be->event_destroy(P.dc, P.ev[i]);
    free(P.ev);
    P.ev = NULL;
    P.n_ev = P.cap_ev = 0;
}

static void hook_fail(kn_status st)
{
    if (P.error != KN_OK) return;
    P.error = st;
    snprintf(P.error_msg, sizeof P.error_msg, "%s", kn_last_error());
}

kn_status kn_profile_begin(kn_device dev)
{
    if (kn_profile_on) return kn_error(KN_ERR_ARG, "a profiling session is already on");
    kn_device_ctx *dc = kn_backend_get(dev);
    if (!dc) return kn_error(KN_ERR_DEVICE, "device %s is not available", kn_device_name(dev));
    if (!dc->be->event_create || !dc->be->event_record || !dc->be->event_elapsed_ms)
        return kn_error(KN_ERR_UNSUPPORTED, "the %s backend has no timing events", dc->be->name);
    if (P.dc != dc) {
        pool_drop();
        P.dc = dc;
    }
    P.n_rec = 0;
    P.depth = 0;
    P.outer = -1;
    P.next_is_kernel = false;
    P.transparent = 0;
    P.error = KN_OK;
    kn_profile_within(NULL, -1);
    P.tracing = dc->be->trace_begin && dc->be->trace_begin(dc) == KN_OK;
    P.trace_ok = P.tracing;
    /* without a trace (no CUPTI, or another tool holds it), events time the session */
    timing_of[kn_device_kind_of(dev)] = P.tracing ? "trace" : "events";
    kn_profile_on = true;
    return KN_OK;
}

const char *kn_profile_timing(kn_device dev)
{
    const char *t = timing_of[kn_device_kind_of(dev)];
    if (t || kn_profile_on) return t ? t : "events";
    kn_profile_record *r = NULL;
    int n = 0;
    if (kn_profile_begin(dev) != KN_OK) return "events";
    kn_profile_end(&r, &n);
    free(r);
    return timing_of[kn_device_kind_of(dev)] ? timing_of[kn_device_kind_of(dev)] : "events";
}

void kn_profile_cancel(void)
{
    if (P.tracing) P.dc->be->trace_end(P.dc, each_traced, NULL); /* its times are dropped with the records */
    P.tracing = false;
    kn_profile_on = false;
    P.n_rec = 0;
    P.depth = 0;
    P.outer = -1;
    P.next_is_kernel = false;
    P.transparent = 0;
}

/* Events 2*slot and 2*slot+1 exist (created once, then reused). */
static kn_status pool_reserve(int slot)
{
    int need = 2 * slot + 2;
    if (need > P.cap_ev) {
        int cap = P.cap_ev ? P.cap_ev * 2 : 64;
        while (cap < need) cap *= 2;
        void **ev = realloc(P.ev, sizeof *ev * (size_t)cap);
        if (!ev) return kn_error(KN_ERR_OOM, "out of host memory for profiling events");
        P.ev = ev;
        P.cap_ev = cap;
    }
    while (P.n_ev < need) {
        KN_TRY(P.dc->be->event_create(P.dc, &P.ev[P.n_ev]));
        P.n_ev++;
    }
    if (slot >= P.cap_rec) {
        int cap = P.cap_rec ? P.cap_rec * 2 : 32;
        while (cap <= slot) cap *= 2;
        kn_profile_record *r = realloc(P.rec, sizeof *r * (size_t)cap);
        if (!r) return kn_error(KN_ERR_OOM, "out of host memory for profiling records");
        P.rec = r;
        P.cap_rec = cap;
    }
    if (slot >= P.cap_traced) {
        int cap = P.cap_rec;
        bool *t = realloc(P.traced, sizeof *t * (size_t)cap);
        if (t) P.traced = t;
        double *ms = t ? realloc(P.traced_ms, sizeof *ms * (size_t)cap) : NULL;
        if (ms) P.traced_ms = ms;
        if (!t || !ms) return kn_error(KN_ERR_OOM, "out of host memory for profiling records");
        P.cap_traced = cap;
    }
    return KN_OK;
}

int kn_profile_kernel_begin(kn_device dev, const struct kn_settings *settings)
{
    if (!kn_profile_on) return -1;
    int depth = P.depth++ - P.transparent;
    if (P.next_is_kernel && depth == 1) {
        P.next_is_kernel = false;
        P.transparent++;
        return KN_PROFILE_TRANSPARENT;
    }
    /* depth 1: inside a recorded kernel, work its call does (a copy) */
    if (depth > 1 || (depth == 1 && P.outer < 0) || dev != P.dc->device || P.error != KN_OK) return -1;
    int slot = P.n_rec;
    kn_status st = pool_reserve(slot);
    /* not inside a recorded kernel: the hold would count as its time */
    if (st == KN_OK && depth == 0 && P.dc->be->hold_queue) st = P.dc->be->hold_queue(P.dc, settings, KN_PROFILE_HOLD_US);
    if (st == KN_OK) st = P.dc->be->event_record(P.dc, P.ev[2 * slot]);
    if (st != KN_OK) {
        hook_fail(st);
        return -1;
    }
    P.n_rec++;
    P.traced[slot] = false;
    P.traced_ms[slot] = 0;
    if (P.trace_ok) {
        if (P.dc->be->trace_push(P.dc, (uint64_t)slot + 1) == KN_OK) P.traced[slot] = true;
        else trace_give_up();
    }
    memset(&P.rec[slot], 0, sizeof P.rec[slot]);
    P.rec[slot].index = -1;
    P.rec[slot].parent = -1;
    P.rec[slot].inside = depth == 1 ? P.outer : -1;
    P.rec[slot].ms = -1; /* until the end event is recorded */
    if (depth == 0) P.outer = slot;
    return slot;
}

/* The event after the kernel; false when the record is to be skipped. */
static bool kernel_end(int slot)
{
    if (P.depth > 0) P.depth--;
    if (slot == KN_PROFILE_TRANSPARENT && P.transparent > 0) P.transparent--;
    if (P.depth == 0) P.outer = -1;
    if (!kn_profile_on || slot < 0 || slot >= P.n_rec) return false;
    if (P.traced[slot] && P.dc->be->trace_pop(P.dc) != KN_OK) trace_give_up();
    P.traced[slot] = false;
    kn_status st = P.dc->be->event_record(P.dc, P.ev[2 * slot + 1]);
    if (st != KN_OK) {
        hook_fail(st);
        return false;
    }
    P.rec[slot].ms = 0;
    return true;
}

const char *kn_profile_op_kind(kn_device dev, kn_op op)
{
    if (kn_device_kind_of(dev) == KN_DEVICE_CPU) return "cpu";
    if (op == KN_OP_MATMUL) return "cublaslt";
    if (op == KN_OP_CONV2D || op == KN_OP_CONV2D_INPUT_GRAD || op == KN_OP_CONV2D_WEIGHT_GRAD) return "cudnn";
    return "cuda";
}

void kn_profile_kernel_end(int slot, const kn_profile_record *what)
{
    if (!kernel_end(slot)) return;
    kn_profile_record *r = &P.rec[slot];
    double ms = r->ms;
    int inside = r->inside;
    *r = *what;
    r->start_ms = 0;
    r->ms = ms;
    r->inside = inside;
}

void kn_profile_op_end(int slot, const kn_opcall *c)
{
    if (!kernel_end(slot)) return;
    kn_profile_record *r = &P.rec[slot];
    /* op_dtype_sizes: the output's sizes, and K after them for a matmul
     * (M x N x K), so equal calls group together in the tables */
    const kn_tensor *o = c->n_out > 0 ? c->out[0] : NULL;
    const kn_tensor *first = c->n_in > 0 && c->in[0] ? c->in[0] : o;
    size_t n = (size_t)snprintf(r->name, sizeof r->name, "%s_%s", kn_op_name(c->op),
                                first ? kn_dtype_name(first->dtype) : "none");
    for (int d = 0; o && d < o->ndim && n < sizeof r->name; d++)
        n += (size_t)snprintf(r->name + n, sizeof r->name - n, d ? "x%lld" : "_%lld", (long long)o->shape[d]);
    if (o && o->ndim == 0 && n < sizeof r->name) n += (size_t)snprintf(r->name + n, sizeof r->name - n, "_scalar");
    if (c->op == KN_OP_MATMUL && c->in[0] && c->in[0]->ndim > 0 && n < sizeof r->name)
        snprintf(r->name + n, sizeof r->name - n, "x%lld", (long long)c->in[0]->shape[c->in[0]->ndim - 1]);
    snprintf(r->kind, sizeof r->kind, "%s", kn_profile_op_kind(P.dc->device, c->op));
    r->dtype = o ? o->dtype : KN_F32;
    kn_cost cost = kn_cost_opcall(c);
    r->bytes = cost.bytes;
    r->write_bytes = cost.write_bytes;
    r->flops = cost.flops;
    r->index = -1;
    r->owner = P.within_owner;
    r->parent = P.within_owner ? P.within_kernel : -1;
    /* inside a kernel only copies are shown apart: any other op there is
     * the kernel's own work (kn_profile_end drops it) */
    if (r->inside >= 0 && c->op != KN_OP_CONTIGUOUS && c->op != KN_OP_CAST) r->ms = -1;
}

void kn_profile_next_is_kernel(bool on)
{
    P.next_is_kernel = on;
}

void kn_profile_within(const void *owner, int kernel)
{
    P.within_owner = owner;
    P.within_kernel = owner ? kernel : -1;
}

kn_status kn_profile_end(kn_profile_record **records, int *n)
{
    *records = NULL;
    *n = 0;
    if (!kn_profile_on) return kn_error(KN_ERR_ARG, "no profiling session is on");
    kn_profile_on = false;
    /* the trace ends first (it waits for the device): each recorded
     * kernel's own device time, and a kernel's time includes the work of
     * the recorded ops inside its call, as its events' span does */
    bool use_trace = false;
    if (P.tracing) {
        P.tracing = false;
        kn_status ts = P.dc->be->trace_end(P.dc, each_traced, NULL);
        use_trace = ts == KN_OK && P.trace_ok;
        for (int i = P.n_rec - 1; use_trace && i >= 0; i--)
            if (P.rec[i].inside >= 0) P.traced_ms[P.rec[i].inside] += P.traced_ms[i];
    }
    if (P.error != KN_OK) {
        P.n_rec = 0;
        return kn_error(P.error, "profiling: %s", P.error_msg);
    }
    /* work inside a plan's kernel belongs to that kernel; inside an eager
     * op it is not shown apart (the op's row holds its time) */
    for (int i = 0; i < P.n_rec; i++) {
        kn_profile_record *r = &P.rec[i];
        if (r->inside < 0 || r->ms < 0) continue;
        const kn_profile_record *in = &P.rec[r->inside];
        if (in->owner && in->index >= 0) {
            r->owner = in->owner;
            r->parent = in->index;
            r->index = -1;
            r->inner = true;
        } else {
            r->ms = -1; /* dropped below */
        }
    }
    int m = 0;
    for (int i = 0; i < P.n_rec; i++) m += P.rec[i].ms >= 0;
    if (m == 0) {
        P.n_rec = 0;
        return P.dc->be->sync ? P.dc->be->sync(P.dc) : KN_OK;
    }
    kn_profile_record *out = malloc(sizeof *out * (size_t)m);
    if (!out) return kn_error(KN_ERR_OOM, "out of host memory for profiling records");
    int first = -1, k = 0;
    kn_status st = KN_OK;
    for (int i = 0; i < P.n_rec && st == KN_OK; i++) {
        if (P.rec[i].ms < 0) continue; /* begun, never ended: its kernel failed */
        if (first < 0) first = i;
        out[k] = P.rec[i];
        st = P.dc->be->event_elapsed_ms(P.dc, P.ev[2 * i], P.ev[2 * i + 1], &out[k].ms);
        if (use_trace) out[k].ms = P.traced_ms[i];
        if (st == KN_OK) st = P.dc->be->event_elapsed_ms(P.dc, P.ev[2 * first], P.ev[2 * i], &out[k].start_ms);
        k++;
    }
    P.n_rec = 0;
    if (st != KN_OK) {
        free(out);
        return st;
    }
    *records = out;
    *n = k;
    return KN_OK;
}
