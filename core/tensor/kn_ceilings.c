/* kn_ceilings: measuring a device's copy bandwidth and matmul rates. */
#include "kn_ceilings.h"

#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_op.h"
#include "kn_profile.h"
#include "kn_settings.h"

/* Best time (ms) of `reps` runs of fn after one warm-up, each timed as
 * kiln.time times a kernel (a kn_profile session: the backend's exact
 * device time where it traces, else events after a hold), so that a
 * ceiling and the kernels held against it are measured with one clock. */
typedef kn_status (*timed_fn)(void *ctx);
/* `prepare` (or NULL) runs before each timed run, untimed; settings:
 * the measurement's (kn_ceilings_measure). */
static kn_status best_ms(kn_device_ctx *dc, const kn_settings *settings, timed_fn fn, timed_fn prepare, void *ctx,
                         int reps, double *best)
{
    *best = -1;
    if (prepare) KN_TRY(prepare(ctx));
    KN_TRY(fn(ctx));
    KN_TRY(kn_profile_begin(dc->device));
    kn_status st = KN_OK;
    for (int i = 0; i < reps && st == KN_OK; i++) {
        if (prepare) st = prepare(ctx);
        if (st != KN_OK) break;
        int slot = kn_profile_kernel_begin(dc->device, settings);
        st = fn(ctx);
        kn_profile_record what = {.name = "ceiling", .kind = "ceiling", .index = -1, .parent = -1};
        kn_profile_kernel_end(slot, &what);
    }
    if (st != KN_OK) {
        kn_profile_cancel();
        return st;
    }
    kn_profile_record *r = NULL;
    int n = 0;
    KN_TRY(kn_profile_end(&r, &n));
    for (int i = 0; i < n; i++)
        if (r[i].ms > 0 && (*best < 0 || r[i].ms < *best)) *best = r[i].ms;
    free(r);
    return KN_OK;
}

/* best_ms of fn as the last run left its buffers and, where `fresh` is
 * given, with its input written just before each run (as a kernel finds
 * what its producer just wrote): the faster counts. */
static kn_status best_ms_either(kn_device_ctx *dc, const kn_settings *settings, timed_fn fn, timed_fn fresh, void *ctx,
                                int reps, double *best)
{
    KN_TRY(best_ms(dc, settings, fn, NULL, ctx, reps, best));
    if (!fresh) return KN_OK;
    double fresh_ms = 0;
    KN_TRY(best_ms(dc, settings, fn, fresh, ctx, reps, &fresh_ms));
    if (fresh_ms > 0 && (*best <= 0 || fresh_ms < *best)) *best = fresh_ms;
    return KN_OK;
}

typedef struct {
    kn_device_ctx *dc;
    const kn_settings *settings; /* the measurement's, for the ops it runs */
    void *dst, *src;
    int64_t bytes;     /* the copy's */
    int64_t add_bytes; /* each of the add's buffers */
    kn_tensor *x, *y;  /* the add's inputs / matmul operands */
    kn_tensor *out;   /* the add's preallocated output */
} ceil_ctx;

static kn_status backend_copy(void *vctx)
{
    ceil_ctx *c = vctx;
    return c->dc->be->copy(c->dc, c->dst, c->src, c->bytes);
}

/* out = x + y through the backend's own elementwise kernel, into a buffer
 * made once (kn_op_eager would allocate, and time the page faults). */
static kn_status backend_add(void *vctx)
{
    ceil_ctx *c = vctx;
    kn_opcall call;
    kn_opcall_init(&call, KN_OP_ADD);
    call.n_in = 2;
    call.in[0] = c->x;
    call.in[1] = c->y;
    call.n_out = 1;
    call.out[0] = c->out;
    call.settings = c->settings;
    return c->dc->be->run(c->dc, &call);
}

/* The add's first input written just before it, as a kernel finds what
 * its producer wrote: where the buffers outgrow the cache, that input is
 * still (partly) in it, and the add runs faster than with all three
 * buffers streamed again (a 51 MB ReLU after a convolution read 111% of
 * that ceiling on the H100). */
static kn_status produce_input(void *vctx)
{
    ceil_ctx *c = vctx;
    return c->dc->be->copy(c->dc, kn_tensor_data(c->x), kn_tensor_data(c->y), c->add_bytes);
}

/* The copy's source written just before it (from its destination), as
 * the add's first input is: a copy-shaped kernel reads what its producer
 * just wrote (a ReLU after a convolution read 109% of the copy's 50 MB
 * figure on the H100 when only stale buffers were copied). */
static kn_status produce_copy_source(void *vctx)
{
    ceil_ctx *c = vctx;
    return c->dc->be->copy(c->dc, c->src, c->dst, c->bytes);
}

/* The best bytes per second of one pass that moves 3 x `bytes`: an add of
 * two buffers of `bytes` (read + read + write, counted as kn_cost counts a
 * kernel's bytes) or a copy of 1.5 x `bytes` (read + write), as GB/s;
 * *moved: those bytes. Both kinds move the same bytes, so each point of
 * the curve is one working set (a copy of `bytes` moves only 2/3 of it,
 * and used to be placed at the add's working set). The add is timed as
 * the last run left its buffers and with its first input just written
 * (produce_input); the faster counts. *copy_gbps: the copy's alone (0
 * without one), the ceiling of a kernel that writes as much as it reads:
 * an add's two reads a write move more bytes a second than a copy of
 * the same bytes where the buffers fill much of the L2 (on the H100 the
 * copy reached 86% of the add's rate at 12.6 and at 50 MB, all of it up
 * to 6.3 MB), so a copy-shaped kernel (a layer norm, a ReLU) held against
 * the add could not reach its ceiling even as a plain copy. */
static kn_status stream_gbps(kn_device_ctx *dc, const kn_settings *settings, int64_t bytes, double *gbps,
                             double *copy_gbps, double *moved)
{
    ceil_ctx c = {dc, settings, NULL, NULL, bytes / 2 * 3, bytes, NULL, NULL, NULL};
    /* one pass a timed run, as a kernel is timed; the best of more runs
     * where they are short */
    int reps = bytes >= ((int64_t)64 << 20) ? 5 : 16;
    double ms = 0, best = 0;
    kn_status st = KN_OK;
    *gbps = *copy_gbps = 0;
    *moved = 3.0 * (double)bytes;
    if (dc->be->copy) {
        st = dc->be->alloc(dc, c.bytes, &c.src);
        if (st == KN_OK) st = dc->be->alloc(dc, c.bytes, &c.dst);
        if (st == KN_OK) st = best_ms_either(dc, settings, backend_copy, produce_copy_source, &c, reps, &ms);
        if (c.src) dc->be->free(dc, c.src);
        if (c.dst) dc->be->free(dc, c.dst);
        KN_TRY(st);
        if (ms > 0) best = 2.0 * (double)c.bytes / (ms * 1e-3) / 1e9;
    }
    *copy_gbps = best;
    int64_t shape[1] = {bytes / 4};
    st = kn_tensor_new(KN_F32, 1, shape, dc->device, &c.x);
    if (st == KN_OK) st = kn_tensor_new(KN_F32, 1, shape, dc->device, &c.y);
    if (st == KN_OK) st = kn_tensor_new(KN_F32, 1, shape, dc->device, &c.out);
    if (st == KN_OK)
        st = best_ms_either(dc, settings, backend_add, dc->be->copy ? produce_input : NULL, &c, reps, &ms);
    kn_tensor_release(c.x);
    kn_tensor_release(c.y);
    kn_tensor_release(c.out);
    KN_TRY(st);
    if (ms > 0 && 3.0 * (double)bytes / (ms * 1e-3) / 1e9 > best)
        best = 3.0 * (double)bytes / (ms * 1e-3) / 1e9;
    *gbps = best;
    return KN_OK;
}

static kn_status op_run(kn_op op, ceil_ctx *c)
{
    kn_opcall call;
    kn_opcall_init(&call, op);
    call.n_in = op == KN_OP_MATMUL ? 2 : 1;
    call.in[0] = c->x;
    call.in[1] = c->y;
    call.settings = c->settings;
    KN_TRY(kn_op_eager(&call, kn_tensor_device(c->x)));
    for (int i = 0; i < call.n_out; i++) kn_tensor_release(call.out[i]);
    return KN_OK;
}

static kn_status matmul_run(void *vctx)
{
    return op_run(KN_OP_MATMUL, vctx);
}

static kn_status matmul_rate(kn_device dev, const kn_settings *settings, kn_dtype dt, int64_t n, double *gflops)
{
    kn_device_ctx *dc = kn_backend_get(dev);
    ceil_ctx c = {dc, settings, NULL, NULL, 0, 0, NULL, NULL, NULL};
    int64_t shape[2] = {n, n};
    *gflops = 0;
    kn_status st = kn_tensor_new(dt, 2, shape, dev, &c.x);
    if (st == KN_OK) st = kn_tensor_new(dt, 2, shape, dev, &c.y);
    double ms = 0;
    if (st == KN_OK) st = best_ms(dc, settings, matmul_run, NULL, &c, 5, &ms);
    kn_tensor_release(c.x);
    kn_tensor_release(c.y);
    if (st == KN_OK && ms > 0) *gflops = 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) / 1e9;
    return st;
}

kn_status kn_ceilings_measure(kn_device dev, const kn_settings *settings, kn_ceilings *out)
{
    memset(out, 0, sizeof *out);
    kn_device_ctx *dc = kn_backend_get(dev);
    if (!dc) return kn_error(KN_ERR_DEVICE, "device %s is not available", kn_device_name(dev));
    if (!dc->be->event_create || !dc->be->event_record || !dc->be->event_elapsed_ms)
        return kn_error(KN_ERR_UNSUPPORTED, "the %s backend has no timing events", dc->be->name);
    if (kn_profile_on) return kn_error(KN_ERR_ARG, "cannot measure the ceilings while profiling");
    /* buffers from small ones, whose one pass is mostly a kernel's start
     * (the small kernels of a model are held against them), to well
     * beyond the last-level cache (the last point streams from memory:
     * the DRAM figure) */
    bool cpu = kn_device_kind_of(dev) == KN_DEVICE_CPU;
    int64_t smallest = cpu ? (int64_t)64 << 10 : (int64_t)128 << 10;
    int64_t largest = cpu ? (int64_t)64 << 20 : (int64_t)256 << 20;
    /* kiln.time interpolates between the points: steps of 2 on a GPU,
     * where the L2 ends between them (a 103 MB kernel was held against 50
     * MB of L2-resident copies with steps of 4); 4 on the CPU, whose
     * caches are smaller and whose runs are slower */
    int64_t step = cpu ? 4 : 2;
    for (int64_t b = smallest; b <= largest && out->n_bw < KN_CEIL_BW_POINTS; b *= step) {
        double gbps = 0, copy = 0, moved = 0;
        KN_TRY(stream_gbps(dc, settings, b, &gbps, &copy, &moved));
        out->bw[out->n_bw].bytes = moved;
        out->bw[out->n_bw].gbps = gbps;
        out->bw[out->n_bw].copy_gbps = copy;
        out->n_bw++;
    }
    /* Each point stands as measured. A small working set reaches less
     * than a larger one because its one pass also pays the start and the
     * ramp of a kernel, as every kernel of that size does; raising it to a
     * larger set's figure (this loop did, taking a dip for noise) held an
     * 8 MB layer norm on the H100 against 6342 GB/s measured at 25 MB,
     * where adds of 6 and 12 MB, timed the same way, reach about 3450 and
     * 5040. Noise is what the best of several runs removes. */
    out->copy_gbps = out->n_bw ? out->bw[out->n_bw - 1].gbps : 0;
    double tf32 = 0, tbf16 = 0;
    if (dc->be->library_matmul_rate && dc->be->library_matmul_rate(dc, settings, KN_F32, &tf32) == KN_OK &&
        tf32 > 0) {
        out->f32_gflops = tf32 * 1e3;
        if (dc->be->library_matmul_rate(dc, settings, KN_BF16, &tbf16) == KN_OK) out->bf16_gflops = tbf16 * 1e3;
        return KN_OK;
    }
    /* big enough to reach the library's peak, small enough to take well
     * under a second on a CPU core */
    int64_t n = kn_device_kind_of(dev) == KN_DEVICE_CPU ? 512 : 4096;
    KN_TRY(matmul_rate(dev, settings, KN_F32, n, &out->f32_gflops));
    if (matmul_rate(dev, settings, KN_BF16, kn_device_kind_of(dev) == KN_DEVICE_CPU ? n / 2 : n,
                    &out->bf16_gflops) != KN_OK)
        out->bf16_gflops = 0; /* no bf16 matmul on this device: only the f32 ceiling */
    return KN_OK;
}
