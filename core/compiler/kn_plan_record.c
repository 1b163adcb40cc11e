/* kn_plan_record: reduce-overhead. A plan's run recorded once (a CUDA
 * graph, through the backend's capture) and replayed: the inputs from
 * outside copied into the recording's static buffers, the outputs copied
 * out into each call's new results, both by copies the recording holds
 * and each replay points at its call's tensors; under max-autotune kept
 * only when replaying is measured faster. */
#include "kn_plan.h"
#include "kn_plan_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_profile.h"
#include "kn_clock.h"

static kn_status rec_never(kn_plan *p, const char *fmt, const char *arg)
{
    p->rec.state = KN_REC_NEVER;
    snprintf(p->rec.why, sizeof p->rec.why, fmt, arg);
    return KN_OK;
}

/* A view from outside (a slice of a longer sequence, a transposed batch) is
 * recorded through a static buffer of its own layout: the elements from
 * its first to its last, copied whole each replay. A view that spans more
 * than REC_SPAN_MAX times its elements (a column of a large matrix) is not
 * worth that copy; a negative stride has no such span. */
#define REC_SPAN_MAX 4

/* Elements from a view's first to its last; -1 when a stride is negative. */
static int64_t view_span(const kn_tensor *t)
{
    int64_t span = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0) return 0;
        if (t->strides[d] < 0) return -1;
        span += (t->shape[d] - 1) * t->strides[d];
    }
    return span;
}

/* A contiguous value's size in bytes (what a copy of it moves). */
static int64_t value_bytes(const kn_tensor *t)
{
    return kn_tensor_numel(t) * (int64_t)kn_dtype_size(t->dtype);
}

static bool same_strides(const kn_tensor *a, const kn_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d])) return false;
    return true;
}

/* Whether p can be recorded at all; sets rec.why when not. */
static void rec_check(kn_plan *p, kn_tensor *const *inputs)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (!dc || !dc->be->capture_begin || !dc->be->copy) {
        rec_never(p, "the %s backend has no graph recording", kn_device_name(p->device));
        return;
    }
    for (int i = 0; i < p->g.n_nodes; i++) {
        int op = p->g.nodes[i].op;
        if (p->code.fusion.disp[i] == KN_D_ROOT && (op == KN_OP_RANDN || op == KN_OP_RAND || op == KN_OP_RANDINT)) {
            /* a replay would repeat the recorded numbers */
            rec_never(p, "the graph makes random numbers (%s)", kn_op_name((kn_op)op));
            return;
        }
    }
    for (int i = 0; i < p->n_orig_inputs; i++) {
        if (!inputs[i] || !inputs[i]->storage) {
            rec_never(p, "input '%s' has no data", p->g.inputs[i].name);
            return;
        }
        if (kn_tensor_device(inputs[i]) != p->device) {
            rec_never(p, "input '%s' is on another device", p->g.inputs[i].name);
            return;
        }
        kn_input_kind k = p->g.inputs[i].kind;
        if (k != KN_IN_PARAM && k != KN_IN_TENSOR && !kn_tensor_is_contiguous(inputs[i])) {
            int64_t span = view_span(inputs[i]);
            if (span < 0 || span > REC_SPAN_MAX * kn_tensor_numel(inputs[i])) {
                rec_never(p, "input '%s' is a view a static buffer cannot hold cheaply (a negative stride, or "
                          "more than 4 times its elements from its first to its last)",
                          p->g.inputs[i].name);
                return;
            }
        }
    }
}

/* Inputs from outside are copied into the recording's static buffers;
 * parameters and identity-guarded tensors are read in place. */
static bool rec_in_place(const kn_plan *p, int i)
{
    kn_input_kind k = p->g.inputs[i].kind;
    return k == KN_IN_PARAM || k == KN_IN_TENSOR;
}

/* Input i's copy into its static buffer: its destination and source and
 * its size in bytes (0: none; a view's whole span, as the static buffer
 * has its layout: rec_record). */
static int64_t input_copy(const kn_plan *p, kn_tensor *const *inputs, int i, void **dst, const void **src)
{
    const kn_tensor *s = p->rec.in[i];
    if (!s) return 0;
    *dst = kn_tensor_data(s);
    *src = kn_tensor_data(inputs[i]);
    int64_t n = kn_tensor_is_contiguous(s) ? kn_tensor_numel(s) : view_span(s);
    return *dst == *src ? 0 : n * (int64_t)kn_dtype_size(s->dtype);
}

/* The input copies the recording does not hold, queued before its launch. */
static kn_status rec_copy_inputs(kn_plan *p, kn_tensor *const *inputs)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    for (int i = 0; i < p->n_orig_inputs; i++) {
        if (p->rec.in_copy && p->rec.in_copy[i] >= 0) continue;
        void *dst;
        const void *src;
        int64_t nbytes = input_copy(p, inputs, i, &dst, &src);
        if (nbytes > 0) KN_TRY(dc->be->copy(dc, dst, src, nbytes));
    }
    return KN_OK;
}

/* The input copies the recording holds, pointed at this call's tensors
 * (where they moved since the last replay). */
static kn_status rec_point_inputs(kn_plan *p, kn_tensor *const *inputs)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    for (int i = 0; p->rec.in_copy && i < p->n_orig_inputs; i++) {
        if (p->rec.in_copy[i] < 0) continue;
        void *dst;
        const void *src;
        int64_t nbytes = input_copy(p, inputs, i, &dst, &src);
        if (src == p->rec.in_src[i]) continue;
        KN_TRY(dc->be->graph_set_copy(dc, p->rec.exec, p->rec.in_copy[i], dst, src, nbytes));
        p->rec.in_src[i] = src;
    }
    return KN_OK;
}

/* This call's results of the outputs the recording copies out itself:
 * new tensors, the copies pointed at them; results[o] of the others stays
 * NULL. (Never a block handed out while recording: one freed inside the
 * plan's run and handed out again would be written by every replay.) */
static kn_status rec_point_outputs(kn_plan *p, kn_tensor **results)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    for (int o = 0; o < p->n_outputs; o++) results[o] = NULL;
    kn_status st = KN_OK;
    for (int o = 0; p->rec.out_copy && o < p->n_outputs && st == KN_OK; o++) {
        if (p->rec.out_copy[o] < 0) continue;
        const kn_tensor *t = p->rec.out[o];
        kn_meta m = kn_tensor_meta(t);
        double a0 = kn_clock_s();
        st = kn_tensor_new_meta(&m, p->device, &results[o]);
        p->rec.out_alloc_s += kn_clock_s() - a0;
        if (st != KN_OK) break;
        void *dst = kn_tensor_data(results[o]);
        if (dst == p->rec.out_dst[o]) continue;
        st = dc->be->graph_set_copy(dc, p->rec.exec, p->rec.out_copy[o], dst, kn_tensor_data(t),
                                    value_bytes(t));
        if (st == KN_OK) p->rec.out_dst[o] = dst;
    }
    if (st != KN_OK)
        for (int o = 0; o < p->n_outputs; o++) {
            kn_tensor_release(results[o]);
            results[o] = NULL;
        }
    return st;
}

/* The caller's copy of a recording output: a new tensor, so the next
 * replay cannot change it. */
static kn_status rec_clone(kn_plan *p, kn_tensor *t, kn_tensor **out)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (kn_tensor_is_contiguous(t)) {
        kn_meta m = kn_tensor_meta(t);
        KN_TRY(kn_tensor_new_meta(&m, p->device, out));
        kn_status st = dc->be->copy(dc, kn_tensor_data(*out), kn_tensor_data(t),
                                value_bytes(t));
        if (st != KN_OK) {
            kn_tensor_release(*out);
            *out = NULL;
        }
        return st;
    }
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CONTIGUOUS);
    c.settings = p->settings;
    c.n_in = 1;
    c.in[0] = t;
    KN_TRY(kn_op_eager(&c, p->device));
    *out = c.out[0];
    return KN_OK;
}

/* A replay: the recording's copies pointed at this call's tensors (or
 * the copies queued around it), one launch, the results. When the backend
 * refuses to point a recorded copy (it could not have been recorded as
 * one, say), the recording is dropped, the next is made without recorded
 * copies, and this call runs the plan as is. */
static kn_status rec_replay(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    /* dropped by an earlier replay of max-autotune's timing (below) */
    if (p->rec.state != KN_REC_READY || !p->rec.exec) return kn_plan_run(p, inputs, results);
    double t0 = kn_clock_s();
    KN_TRY(rec_copy_inputs(p, inputs));
    kn_status st = rec_point_inputs(p, inputs);
    double t1 = kn_clock_s();
    if (st == KN_OK) st = rec_point_outputs(p, results);
    if (st != KN_OK && p->rec.in_copy) {
        kn_plan_drop_recording(p);
        p->rec.no_graph_copies = true;
        return kn_plan_run(p, inputs, results);
    }
    KN_TRY(st);
    double t2 = kn_clock_s();
    st = dc->be->graph_launch(dc, p->rec.exec);
    double t3 = kn_clock_s();
    p->rec.copy_in_s += t1 - t0;
    p->rec.launch_s += t3 - t2;
    if (st == KN_OK) p->rec.replays++;
    for (int o = 0; o < p->n_outputs && st == KN_OK; o++) {
        if (results[o]) continue; /* copied out by the recording */
        if (p->rec.wb && p->rec.wb[o]) { /* the recording wrote it into the input: its value is there now */
            results[o] = inputs[p->rec.into[o]];
            kn_tensor_retain(results[o]);
            kn_storage_written(results[o]->storage);
        } else {
            st = rec_clone(p, p->rec.out[o], &results[o]);
        }
    }
    if (st != KN_OK) {
        for (int o = 0; o < p->n_outputs; o++) {
            kn_tensor_release(results[o]);
            results[o] = NULL;
        }
        return st;
    }
    p->rec.copy_out_s += (t2 - t1) + (kn_clock_s() - t3);
    return KN_OK;
}

void kn_plan_drop_recording(kn_plan *p)
{
    kn_plan_free_recording(p);
    if (p->rec.state != KN_REC_NEVER) p->rec.state = KN_REC_WARMUP;
}

/* A switch that is on unless the environment sets it to 0, read once a
 * process (*cached: -1 until then). */
static bool switch_on(const char *name, int *cached)
{
    if (*cached < 0) {
        const char *v = getenv(name);
        *cached = !(v && strcmp(v, "0") == 0);
    }
    return *cached == 1;
}

/* Recordings copy the values asked for inputs into them
 * (kn_plan_run_recorded_into). On by default: on the H200 it took a bf16
 * transformer training step from 1.54 to 1.30 ms (host work 684 -> 128 us),
 * two host launches fewer per updated value. KILN_RECORD_WRITES=0 turns it
 * off, to measure against or to rule it out. */
static bool record_writes_on(void)
{
    static int on = -1;
    return switch_on("KILN_RECORD_WRITES", &on);
}

/* Whether the recording may copy output o into inputs[i] as its last step
 * (rec.out holds the outputs as recorded; see kn_plan_run_recorded_into). */
static bool rec_write_back_ok(const kn_plan *p, kn_tensor *const *inputs, const int *into, int o)
{
    int i = into[o];
    if (i < 0 || i >= p->n_orig_inputs || !rec_in_place(p, i) || p->tune.enabled) return false;
    const kn_tensor *in = inputs[i], *out = p->rec.out[o];
    if (!in || !out || !in->storage || !out->storage || in->dtype != out->dtype ||
        kn_tensor_numel(in) != kn_tensor_numel(out) || !kn_tensor_is_contiguous(in) ||
        !kn_tensor_is_contiguous(out) || out->storage == in->storage)
        return false;
    for (int o2 = 0; o2 < p->n_outputs; o2++) {
        if (o2 == o) continue;
        /* a value in the input's storage would be cloned after the write
         * changed it; two writes into one input would race */
        if ((p->rec.out[o2] && p->rec.out[o2]->storage == in->storage) || into[o2] == i) return false;
    }
    return true;
}

/* The copies in and out as steps of the recording (rec.in_copy). On by
 * default: a copy queued around the launch cost the H200's host 7-37 us;
 * pointing a recorded copy at a call's tensor queues no work, and an input
 * that is the last call's tensor needs nothing. On ViT-B/16, BERT and
 * GPT-2 f32 the copies in went from 7-34 us a call to 0-2; the copies out
 * (a new result, the copy pointed at it) stayed at 6-36 (session 21).
 * KILN_GRAPH_COPIES=0 turns it off, to measure against or to rule it out. */
static bool graph_copies_on(void)
{
    static int on = -1;
    return switch_on("KILN_GRAPH_COPIES", &on);
}

/* The recording's own copies found in it (rec.in_copy, rec.out_copy),
 * after capture_end (out_to: the outputs' destinations while recording);
 * false when the backend cannot find one. */
static bool rec_find_copies(kn_plan *p, kn_tensor *const *inputs, kn_tensor *const *out_to)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    for (int i = 0; i < p->n_orig_inputs; i++) {
        if (p->rec.in_copy[i] < 0) continue;
        void *dst;
        const void *src;
        (void)input_copy(p, inputs, i, &dst, &src);
        if (dc->be->graph_find_copy(dc, p->rec.exec, dst, src, &p->rec.in_copy[i]) != KN_OK) return false;
        p->rec.in_src[i] = src;
    }
    for (int o = 0; o < p->n_outputs; o++) {
        if (p->rec.out_copy[o] < 0) continue;
        void *dst = kn_tensor_data(out_to[o]);
        if (dc->be->graph_find_copy(dc, p->rec.exec, dst, kn_tensor_data(p->rec.out[o]), &p->rec.out_copy[o]) != KN_OK)
            return false;
        p->rec.out_dst[o] = dst;
    }
    return true;
}

/* Output o copied out by the recording itself: a contiguous value of its
 * own that the recording does not write into an input. */
static bool rec_copies_out(const kn_plan *p, int o)
{
    const kn_tensor *t = p->rec.out[o];
    return t && t->storage && !(p->rec.wb && p->rec.wb[o]) && kn_tensor_is_contiguous(t) && kn_tensor_numel(t) > 0;
}

/* Releases n tensors and frees their list (NULL: nothing). */
static void release_all(kn_tensor **t, int n)
{
    for (int i = 0; t && i < n; i++) kn_tensor_release(t[i]);
    free(t);
}

static kn_status rec_record(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, const int *into)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    int n_in = p->n_orig_inputs;
    bool in_graph = graph_copies_on() && !p->rec.no_graph_copies && dc->be->graph_find_copy && dc->be->graph_set_copy;
    if (in_graph) {
        p->rec.in_copy = malloc(sizeof *p->rec.in_copy * ((size_t)n_in + 1));
        p->rec.in_src = calloc((size_t)n_in + 1, sizeof *p->rec.in_src);
        p->rec.out_copy = malloc(sizeof *p->rec.out_copy * ((size_t)p->n_outputs + 1));
        p->rec.out_dst = calloc((size_t)p->n_outputs + 1, sizeof *p->rec.out_dst);
        if (!p->rec.in_copy || !p->rec.in_src || !p->rec.out_copy || !p->rec.out_dst)
            return kn_error(KN_ERR_OOM, "out of host memory recording a graph");
        for (int i = 0; i < n_in; i++) p->rec.in_copy[i] = -1;
        for (int o = 0; o < p->n_outputs; o++) p->rec.out_copy[o] = -1;
    }
    p->rec.in = calloc((size_t)n_in + 1, sizeof *p->rec.in);
    p->rec.ptr = calloc((size_t)n_in + 1, sizeof *p->rec.ptr);
    p->rec.out = calloc((size_t)p->n_outputs + 1, sizeof *p->rec.out);
    p->rec.into = malloc(sizeof *p->rec.into * ((size_t)p->n_outputs + 1));
    p->rec.wb = calloc((size_t)p->n_outputs + 1, sizeof *p->rec.wb);
    kn_tensor **bound = calloc((size_t)n_in + 1, sizeof *bound);
    /* the outputs' destinations while recording: blocks the recording keeps
     * (one output's size each), never a caller's result (rec_point_outputs) */
    kn_tensor **out_to = calloc((size_t)p->n_outputs + 1, sizeof *out_to);
    if (!p->rec.in || !p->rec.ptr || !p->rec.out || !p->rec.into || !p->rec.wb || !bound || !out_to) {
        free(bound);
        free(out_to);
        return kn_error(KN_ERR_OOM, "out of host memory recording a graph");
    }
    for (int o = 0; o < p->n_outputs; o++) p->rec.into[o] = into ? into[o] : -1;
    kn_status st = KN_OK;
    for (int i = 0; i < n_in && st == KN_OK; i++) {
        if (rec_in_place(p, i)) {
            bound[i] = inputs[i];
            p->rec.ptr[i] = kn_tensor_data(inputs[i]);
            continue;
        }
        if (kn_tensor_is_contiguous(inputs[i])) {
            kn_meta m = kn_tensor_meta(inputs[i]);
            st = kn_tensor_new_meta(&m, p->device, &p->rec.in[i]);
        } else { /* the input's layout over a buffer of its span (rec_check) */
            int64_t span = view_span(inputs[i]);
            kn_tensor *buf = NULL;
            st = kn_tensor_new(inputs[i]->dtype, 1, &span, p->device, &buf);
            if (st == KN_OK)
                st = kn_tensor_view_of(buf, inputs[i]->ndim, inputs[i]->shape, inputs[i]->strides, 0,
                                       &p->rec.in[i]);
            kn_tensor_release(buf);
        }
        bound[i] = p->rec.in[i];
    }
    if (st == KN_OK && !in_graph) st = rec_copy_inputs(p, inputs);
    if (st == KN_OK) st = dc->be->capture_begin(dc);
    if (st == KN_OK) {
        kn_status run = KN_OK;
        /* the copies in, recorded as the graph's first steps */
        for (int i = 0; i < n_in && in_graph && run == KN_OK; i++) {
            void *dst;
            const void *src;
            int64_t nbytes = input_copy(p, inputs, i, &dst, &src);
            if (nbytes <= 0) continue;
            run = dc->be->copy(dc, dst, src, nbytes);
            p->rec.in_copy[i] = 0; /* found after the capture */
        }
        if (run == KN_OK) run = kn_plan_run(p, bound, p->rec.out);
        /* the write-backs, recorded as the graph's last steps: every kernel
         * that reads the inputs ran before them */
        for (int o = 0; o < p->n_outputs && run == KN_OK && into && record_writes_on(); o++) {
            if (!rec_write_back_ok(p, inputs, p->rec.into, o)) continue;
            run = dc->be->copy(dc, kn_tensor_data(inputs[into[o]]), kn_tensor_data(p->rec.out[o]),
                               value_bytes(p->rec.out[o]));
            p->rec.wb[o] = run == KN_OK;
        }
        /* the copies out, as the last steps; each replay points them at
         * that call's results */
        for (int o = 0; o < p->n_outputs && in_graph && run == KN_OK; o++) {
            if (!rec_copies_out(p, o)) continue;
            kn_meta m = kn_tensor_meta(p->rec.out[o]);
            run = kn_tensor_new_meta(&m, p->device, &out_to[o]);
            if (run == KN_OK)
                run = dc->be->copy(dc, kn_tensor_data(out_to[o]), kn_tensor_data(p->rec.out[o]),
                                   value_bytes(p->rec.out[o]));
            p->rec.out_copy[o] = 0; /* found after the capture */
        }
        char why[200];
        snprintf(why, sizeof why, "%s", run != KN_OK ? kn_last_error() : "");
        void *exec = NULL;
        kn_status end = dc->be->capture_end(dc, &exec); /* always end the capture, even after a failed run */
        if (run != KN_OK || end != KN_OK) {
            if (run == KN_OK) snprintf(why, sizeof why, "%s", kn_last_error());
            if (exec) dc->be->graph_destroy(dc, exec);
            for (int o = 0; o < p->n_outputs; o++) {
                kn_tensor_release(p->rec.out[o]);
                p->rec.out[o] = NULL;
            }
            rec_never(p, "recording failed: %s", why);
            release_all(out_to, p->n_outputs);
            free(bound);
            return KN_OK; /* the caller runs it without */
        }
        p->rec.exec = exec;
        p->rec.state = KN_REC_READY;
        bool found = !in_graph || rec_find_copies(p, inputs, out_to);
        release_all(out_to, p->n_outputs);
        out_to = NULL;
        if (!found) {
            /* record again, copying around the launch */
            kn_plan_free_recording(p);
            p->rec.no_graph_copies = true;
            free(bound);
            return rec_record(p, inputs, results, into);
        }
    }
    release_all(out_to, p->n_outputs);
    free(bound);
    KN_TRY(st);
    /* the capture ran nothing: the first replay computes this call */
    return rec_replay(p, inputs, results);
}

/* Wall time of n calls (synchronized) in us per call: replays or plain runs. */
static kn_status time_calls(kn_plan *p, kn_tensor *const *inputs, bool replay, int n, double *us)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    /* a training step's plan has an output a parameter, a gradient and an
     * optimizer state: more than a fixed array held (64 refused them all) */
    kn_tensor **res = calloc((size_t)p->n_outputs + 1, sizeof *res);
    if (!res) return kn_error(KN_ERR_OOM, "out of host memory timing a plan");
    kn_status st = dc->be->sync(dc);
    double t0 = kn_clock_s();
    for (int i = 0; i < n && st == KN_OK; i++) {
        st = replay ? rec_replay(p, inputs, res) : kn_plan_run(p, inputs, res);
        for (int o = 0; o < p->n_outputs && st == KN_OK; o++) kn_tensor_release(res[o]);
    }
    if (st == KN_OK) st = dc->be->sync(dc);
    *us = (kn_clock_s() - t0) / n * 1e6;
    free(res);
    return st;
}

/* max-autotune: a recording is kept only when replaying it is measured
 * faster than running the plan (it usually is; a plan of a few large
 * library calls may not be: the input and output copies around a replay
 * cost more than the launches they save). The calls are timed here, in C;
 * a caller's call also does host work outside the plan (the Lua call, its
 * guards, the results), which a replay overlaps with the device but which
 * adds to a plain run bound by its launches. So the plain run must win by
 * more than that work: on the H100 host, gcn f32's plain run measured 44.5
 * us here against 47.1 replaying, and then took 72.9 us a call back to
 * back from Lua against 50.9 replaying. */
#define REC_TIMED_CALLS 20
#define REC_OUTER_HOST_US 20.0
static kn_status rec_choose(kn_plan *p, kn_tensor *const *inputs)
{
    double rep = 1e30, plain = 1e30;
    for (int round = 0; round < 3; round++) { /* interleaved, best of three */
        double r, q;
        KN_TRY(time_calls(p, inputs, true, REC_TIMED_CALLS, &r));
        KN_TRY(time_calls(p, inputs, false, REC_TIMED_CALLS, &q));
        if (r < rep) rep = r;
        if (q < plain) plain = q;
    }
    p->rec.replay_us = rep;
    p->rec.plain_us = plain;
    if (plain + REC_OUTER_HOST_US < rep * 0.97) {
        char why[200];
        snprintf(why, sizeof why,
                 "max-autotune measured the plain run faster (%.1f us against %.1f us replaying, more than a "
                 "call's %.0f us of host work outside the plan)",
                 plain, rep, REC_OUTER_HOST_US);
        kn_plan_drop_recording(p);
        p->rec.by_choice = true;
        return rec_never(p, "%s", why);
    }
    return KN_OK;
}

kn_status kn_plan_run_recorded(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, bool *replayed)
{
    return kn_plan_run_recorded_into(p, inputs, results, NULL, replayed);
}

/* Whether into asks what the recording was made with. */
static bool same_into(const kn_plan *p, const int *into)
{
    for (int o = 0; o < p->n_outputs; o++)
        if ((into ? into[o] : -1) != p->rec.into[o]) return false;
    return true;
}

kn_status kn_plan_run_recorded_into(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, const int *into,
                                    bool *replayed)
{
    *replayed = false;
    /* profiling times each kernel with events, which a capture cannot hold:
     * a profiled call runs the plan as is */
    if (kn_profile_on) return kn_plan_run(p, inputs, results);
    if (p->rec.state == KN_REC_WARMUP) {
        rec_check(p, inputs);
        if (p->rec.state == KN_REC_WARMUP) p->rec.state = KN_REC_RECORD;
        return kn_plan_run(p, inputs, results);
    }
    if (p->rec.state == KN_REC_NEVER) return kn_plan_run(p, inputs, results);
    /* other write-backs asked (only when recordings make them: a trace
     * asks none and its replays some, which would record twice) */
    bool again = p->rec.state == KN_REC_READY && record_writes_on() && !same_into(p, into);
    for (int i = 0; i < p->n_orig_inputs && p->rec.state == KN_REC_READY && !again; i++)
        again = rec_in_place(p, i) && kn_tensor_data(inputs[i]) != p->rec.ptr[i]; /* a parameter's storage moved */
    if (again) { /* record again */
        kn_plan_free_recording(p);
        p->rec.state = KN_REC_RECORD;
    }
    /* a static buffer holds the layout it was recorded with: an input of
     * another layout (the guards let strides of size-1 dims and
     * contiguous-or-not through) runs this call without the recording */
    for (int i = 0; p->rec.state == KN_REC_READY && i < p->n_orig_inputs; i++)
        if (p->rec.in[i] && !same_strides(p->rec.in[i], inputs[i])) return kn_plan_run(p, inputs, results);
    if (p->rec.state == KN_REC_RECORD) {
        KN_TRY(rec_record(p, inputs, results, into));
        if (p->rec.state == KN_REC_NEVER) return kn_plan_run(p, inputs, results);
        if (p->tune.enabled && p->rec.state == KN_REC_READY && !p->rec.by_choice && p->rec.plain_us == 0) {
            kn_status st = rec_choose(p, inputs);
            if (st != KN_OK) {
                for (int o = 0; o < p->n_outputs; o++) kn_tensor_release(results[o]);
                return st;
            }
        }
        *replayed = p->rec.state == KN_REC_READY;
        return KN_OK;
    }
    *replayed = true;
    return rec_replay(p, inputs, results);
}
