/* kn_ceilings: measuring a device's copy bandwidth and matmul rates. */
#include "kn_ceilings.h"

#include <string.h>

#include "kn_backend.h"
#include "kn_op.h"
#include "kn_profile.h"

/* Best time (ms) of `reps` runs of fn after one warm-up, timed with the
 * backend's events. */
typedef kn_status (*timed_fn)(void *ctx);
static kn_status best_ms(const kn_backend *be, timed_fn fn, void *ctx, int reps, double *best)
{
    void *a = NULL, *b = NULL;
    KN_TRY(be->event_create(&a));
    kn_status st = be->event_create(&b);
    *best = -1;
    if (st == KN_OK) st = fn(ctx);
    for (int i = 0; i < reps && st == KN_OK; i++) {
        double ms = 0;
        st = be->event_record(a);
        if (st == KN_OK) st = fn(ctx);
        if (st == KN_OK) st = be->event_record(b);
        if (st == KN_OK) st = be->event_elapsed_ms(a, b, &ms);
        if (st == KN_OK && (*best < 0 || ms < *best)) *best = ms;
    }
    be->event_destroy(a);
    if (b) be->event_destroy(b);
    return st;
}

typedef struct {
    const kn_backend *be;
    void *dst, *src;
    int64_t bytes;
    kn_tensor *x, *y; /* copy through an op / matmul operands */
} ceil_ctx;

static kn_status backend_copy(void *vctx)
{
    ceil_ctx *c = vctx;
    return c->be->copy(c->dst, c->src, c->bytes);
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
    const kn_backend *be = kn_backend_get(dev);
    ceil_ctx c = {be, NULL, NULL, 0, NULL, NULL};
    int64_t shape[2] = {n, n};
    *gflops = 0;
    kn_status st = kn_tensor_new(dt, 2, shape, dev, &c.x);
    if (st == KN_OK) st = kn_tensor_new(dt, 2, shape, dev, &c.y);
    double ms = 0;
    if (st == KN_OK) st = best_ms(be, matmul_run, &c, 3, &ms);
    kn_tensor_release(c.x);
    kn_tensor_release(c.y);
    if (st == KN_OK && ms > 0) *gflops = 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) / 1e9;
    return st;
}

kn_status kn_ceilings_measure(kn_device dev, kn_ceilings *out)
{
    memset(out, 0, sizeof *out);
    const kn_backend *be = kn_backend_get(dev);
    if (!be) return kn_error(KN_ERR_DEVICE, "device %s is not available", kn_device_name(dev));
    if (!be->event_create || !be->event_record || !be->event_elapsed_ms)
        return kn_error(KN_ERR_UNSUPPORTED, "the %s backend has no timing events", be->name);
    if (kn_profile_on) return kn_error(KN_ERR_ARG, "cannot measure the ceilings while profiling");
    /* beyond the last-level cache, so that the copy streams from memory */
    int64_t bytes = dev == KN_CPU ? (int64_t)64 << 20 : (int64_t)256 << 20;
    ceil_ctx c = {be, NULL, NULL, bytes, NULL, NULL};
    double ms = 0;
    kn_status st;
    if (be->copy) { /* memmove on the CPU, a device-to-device memcpy on a GPU */
        st = be->alloc(bytes, &c.src);
        if (st == KN_OK) st = be->alloc(bytes, &c.dst);
        if (st == KN_OK) st = best_ms(be, backend_copy, &c, 5, &ms);
        if (c.src) be->free(c.src);
        if (c.dst) be->free(c.dst);
    } else {
        int64_t shape[1] = {bytes / 4};
        st = kn_tensor_new(KN_F32, 1, shape, dev, &c.x);
        if (st == KN_OK) st = best_ms(be, device_copy, &c, 5, &ms);
        kn_tensor_release(c.x);
    }
    KN_TRY(st);
    if (ms > 0) out->copy_gbps = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
    double tf32 = 0, tbf16 = 0;
    if (be->library_matmul_rate && be->library_matmul_rate(KN_F32, &tf32) == KN_OK && tf32 > 0) {
        out->f32_gflops = tf32 * 1e3;
        if (be->library_matmul_rate(KN_BF16, &tbf16) == KN_OK) out->bf16_gflops = tbf16 * 1e3;
        return KN_OK;
    }
    /* big enough to reach the library's peak, small enough to take well
     * under a second on a CPU core */
    int64_t n = dev == KN_CPU ? 384 : 4096;
    KN_TRY(matmul_rate(dev, KN_F32, n, &out->f32_gflops));
    if (matmul_rate(dev, KN_BF16, dev == KN_CPU ? n / 2 : n, &out->bf16_gflops) != KN_OK)
        out->bf16_gflops = 0; /* no bf16 matmul on this device: only the f32 ceiling */
    return KN_OK;
}
