/* kn_ceilings: measuring a device's copy bandwidth and matmul rates. */
#include "kn_ceilings.h"

#include <string.h>

#include "kn_backend.h"
#include "kn_op.h"
#include "kn_profile.h"

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

kn_status kn_ceilings_measure(kn_device dev, kn_ceilings *out)
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
    double tf32 = 0, tbf16 = 0;
    if (dc->be->library_matmul_rate && dc->be->library_matmul_rate(dc, KN_F32, &tf32) == KN_OK && tf32 > 0) {
        out->f32_gflops = tf32 * 1e3;
        if (dc->be->library_matmul_rate(dc, KN_BF16, &tbf16) == KN_OK) out->bf16_gflops = tbf16 * 1e3;
        return KN_OK;
    }
    /* big enough to reach the library's peak, small enough to take well
     * under a second on a CPU core */
    int64_t n = kn_device_kind_of(dev) == KN_DEVICE_CPU ? 384 : 4096;
    KN_TRY(matmul_rate(dev, KN_F32, n, &out->f32_gflops));
    if (matmul_rate(dev, KN_BF16, kn_device_kind_of(dev) == KN_DEVICE_CPU ? n / 2 : n, &out->bf16_gflops) != KN_OK)
        out->bf16_gflops = 0; /* no bf16 matmul on this device: only the f32 ceiling */
    return KN_OK;
}
