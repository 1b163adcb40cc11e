/* kn_profile: the profiler session, its event pool, and the ceilings. */
#include "kn_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_cost.h"
#include "kn_plan.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/kn_cuda_internal.h" /* kn_cuda_matmul_rate: the library's own GEMM ceiling */
#endif

bool kn_profile_on;

/* The pool outlives sessions: creating CUDA events per kernel per call
 * would cost more than the kernels being timed. Slot i uses events 2i, 2i+1. */
static struct {
    kn_device_ctx *dc;
    void **ev;
    int n_ev, cap_ev;
    kn_profile_record *rec;
    int n_rec, cap_rec;
    int depth;       /* kernels begun and not ended (nesting) */
    kn_status error; /* the first failure of a hook (reported by end) */
    char error_msg[256];
} P;

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
    P.error = KN_OK;
    kn_profile_on = true;
    return KN_OK;
}

void kn_profile_cancel(void)
{
    kn_profile_on = false;
    P.n_rec = 0;
    P.depth = 0;
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
    return KN_OK;
}

int kn_profile_kernel_begin(kn_device dev)
{
    if (!kn_profile_on) return -1;
    if (P.depth++ > 0 || dev != P.dc->device || P.error != KN_OK) return -1;
    int slot = P.n_rec;
    kn_status st = pool_reserve(slot);
    if (st == KN_OK) st = P.dc->be->event_record(P.dc, P.ev[2 * slot]);
    if (st != KN_OK) {
        hook_fail(st);
        return -1;
    }
    P.n_rec++;
    memset(&P.rec[slot], 0, sizeof P.rec[slot]);
    P.rec[slot].index = -1;
    P.rec[slot].ms = -1; /* until the end event is recorded */
    return slot;
}

/* The event after the kernel; false when the record is to be skipped. */
static bool kernel_end(int slot)
{
    if (P.depth > 0) P.depth--;
    if (!kn_profile_on || slot < 0 || slot >= P.n_rec) return false;
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
    if (op == KN_OP_CONV2D) return "cudnn";
    return "cuda";
}

void kn_profile_plan_end(int slot, const kn_plan *p, int kernel)
{
    if (!kernel_end(slot)) return;
    kn_profile_record *r = &P.rec[slot];
    const kn_kernel *k = &p->code.fusion.prog.kernels[kernel];
    int node = p->code.fusion.kernel_at ? p->code.fusion.kernel_at[kernel] : k->lib_node;
    snprintf(r->name, sizeof r->name, "%s", k->name);
    bool gen = k->kind == KN_KERNEL_POINTWISE || k->kind == KN_KERNEL_ROW;
    int op = node >= 0 && node < p->g.n_nodes ? p->g.nodes[node].op : -1;
    snprintf(r->kind, sizeof r->kind, "%s",
             gen ? "generated" : kn_profile_op_kind(p->device, op >= 0 && op < KN_OP_COUNT ? (kn_op)op : KN_OP_COUNT));
    r->owner = p;
    r->index = kernel;
    r->dtype = node >= 0 && node < p->g.n_nodes ? p->g.nodes[node].out[0].dtype : KN_F32;
    kn_cost c = kn_cost_kernel(&p->g, k, node);
    r->bytes = c.bytes;
    r->flops = c.flops;
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
    r->flops = cost.flops;
}

kn_status kn_profile_end(kn_profile_record **records, int *n)
{
    *records = NULL;
    *n = 0;
    if (!kn_profile_on) return kn_error(KN_ERR_ARG, "no profiling session is on");
    kn_profile_on = false;
    if (P.error != KN_OK) {
        P.n_rec = 0;
        return kn_error(P.error, "profiling: %s", P.error_msg);
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

/* ---- ceilings ------------------------------------------------------------- */

/* Best time (ms) of `reps` runs of fn after one warm-up, timed with the
 * backend's events. */
typedef kn_status (*timed_fn)(void *ctx);
static kn_status best_ms(kn_device_ctx *dc, timed_fn fn, void *ctx, int reps, double *best)
{
    void *a = NULL, *b = NULL;
    KN_TRY(dc->be->event_create(dc, &a));
    kn_status st = dc->be->event_create(dc, &b);
    *best = -1;
    if (st == KN_OK) st = fn(ctx);
    for (int i = 0; i < reps && st == KN_OK; i++) {
        double ms = 0;
        st = dc->be->event_record(dc, a);
        if (st == KN_OK) st = fn(ctx);
        if (st == KN_OK) st = dc->be->event_record(dc, b);
        if (st == KN_OK) st = dc->be->event_elapsed_ms(dc, a, b, &ms);
        if (st == KN_OK && (*best < 0 || ms < *best)) *best = ms;
    }
    dc->be->event_destroy(dc, a);
    if (b) dc->be->event_destroy(dc, b);
    return st;
}

typedef struct {
    kn_device_ctx *dc;
    void *dst, *src;
    int64_t bytes;
    kn_tensor *x, *y; /* copy through an op / matmul operands */
} ceil_ctx;

static kn_status backend_copy(void *vctx)
{
    ceil_ctx *c = vctx;
    return c->dc->be->copy(c->dc, c->dst, c->src, c->bytes);
}

static kn_status op_run(kn_op op, ceil_ctx *c)
{
    kn_opcall call;
    kn_opcall_init(&call, op);
    call.n_in = op == KN_OP_MATMUL ? 2 : 1;
    call.in[0] = c->x;
    call.in[1] = c->y;
    KN_TRY(kn_op_eager(&call, kn_tensor_device(c->x)));
    for (int i = 0; i < call.n_out; i++) kn_tensor_release(call.out[i]);
    return KN_OK;
}

static kn_status device_copy(void *vctx)
{
    return op_run(KN_OP_CONTIGUOUS, vctx);
}

static kn_status matmul_run(void *vctx)
{
    return op_run(KN_OP_MATMUL, vctx);
}

static kn_status matmul_rate(kn_device dev, kn_dtype dt, int64_t n, double *gflops)
{
    kn_device_ctx *dc = kn_backend_get(dev);
    ceil_ctx c = {dc, NULL, NULL, 0, NULL, NULL};
    int64_t shape[2] = {n, n};
    *gflops = 0;
    kn_status st = kn_tensor_new(dt, 2, shape, dev, &c.x);
    if (st == KN_OK) st = kn_tensor_new(dt, 2, shape, dev, &c.y);
    double ms = 0;
    if (st == KN_OK) st = best_ms(dc, matmul_run, &c, 3, &ms);
    kn_tensor_release(c.x);
    kn_tensor_release(c.y);
    if (st == KN_OK && ms > 0) *gflops = 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) / 1e9;
    return st;
}

kn_status kn_profile_measure_ceilings(kn_device dev, kn_ceilings *out)
{
    memset(out, 0, sizeof *out);
    kn_device_ctx *dc = kn_backend_get(dev);
    if (!dc) return kn_error(KN_ERR_DEVICE, "device %s is not available", kn_device_name(dev));
    if (!dc->be->event_create || !dc->be->event_record || !dc->be->event_elapsed_ms)
        return kn_error(KN_ERR_UNSUPPORTED, "the %s backend has no timing events", dc->be->name);
    if (kn_profile_on) return kn_error(KN_ERR_ARG, "cannot measure the ceilings while profiling");
    /* beyond the last-level cache, so that the copy streams from memory */
    int64_t bytes = kn_device_kind_of(dev) == KN_DEVICE_CPU ? (int64_t)64 << 20 : (int64_t)256 << 20;
    ceil_ctx c = {dc, NULL, NULL, bytes, NULL, NULL};
    double ms = 0;
    kn_status st;
    if (dc->be->copy) { /* memmove on the CPU, a device-to-device memcpy on a GPU */
        st = dc->be->alloc(dc, bytes, &c.src);
        if (st == KN_OK) st = dc->be->alloc(dc, bytes, &c.dst);
        if (st == KN_OK) st = best_ms(dc, backend_copy, &c, 5, &ms);
        if (c.src) dc->be->free(dc, c.src);
        if (c.dst) dc->be->free(dc, c.dst);
    } else {
        int64_t shape[1] = {bytes / 4};
        st = kn_tensor_new(KN_F32, 1, shape, dev, &c.x);
        if (st == KN_OK) st = best_ms(dc, device_copy, &c, 5, &ms);
        kn_tensor_release(c.x);
    }
    KN_TRY(st);
    if (ms > 0) out->copy_gbps = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
#ifdef KILN_HAVE_CUDA
    double tf32 = 0, tbf16 = 0;
    if (kn_device_kind_of(dev) == KN_DEVICE_CUDA && kn_cuda_matmul_rate(KN_F32, &tf32) == KN_OK && tf32 > 0) {
        out->f32_gflops = tf32 * 1e3;
        if (kn_cuda_matmul_rate(KN_BF16, &tbf16) == KN_OK) out->bf16_gflops = tbf16 * 1e3;
        return KN_OK;
    }
#endif
    /* big enough to reach the library's peak, small enough to take well
     * under a second on a CPU core */
    int64_t n = kn_device_kind_of(dev) == KN_DEVICE_CPU ? 384 : 4096;
    KN_TRY(matmul_rate(dev, KN_F32, n, &out->f32_gflops));
    if (matmul_rate(dev, KN_BF16, kn_device_kind_of(dev) == KN_DEVICE_CPU ? n / 2 : n, &out->bf16_gflops) != KN_OK)
        out->bf16_gflops = 0; /* no bf16 matmul on this device: only the f32 ceiling */
    return KN_OK;
}
