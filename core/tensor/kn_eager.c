/* kn_eager: eager execution of one op: check devices, infer shapes, ask
 * the device's backend whether it runs the call (kn_op_check_supported,
 * which a plan's build asks too), allocate the outputs, run on the
 * backend with the call's settings (kn_op_eager). */
#include <stdio.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_op.h"
#include "kn_profile.h"
#include "kn_view_meta.h"

/* A view op: metadata only, no backend involved, except a reshape the
 * strides cannot express, which views a contiguous copy (as kn_view_reshape
 * does; the copy is an eager op of its own, profiled as one). */
static kn_status view_op(kn_opcall *c, kn_device dev)
{
    KN_TRY(kn_view_run_nocopy(c, &c->out[0]));
    if (c->out[0]) return KN_OK;
    kn_opcall copy;
    kn_opcall_init(&copy, KN_OP_CONTIGUOUS);
    copy.n_in = 1;
    copy.in[0] = c->in[0];
    copy.settings = c->settings;
    KN_TRY(kn_op_eager(&copy, dev));
    kn_opcall on_copy = *c;
    on_copy.in[0] = copy.out[0];
    kn_status st = kn_view_run_nocopy(&on_copy, &c->out[0]);
    kn_tensor_release(copy.out[0]);
    return st;
}

/* The dtypes that name call c in a message: its inputs', then the dtype a
 * cast or a creation op makes ("f32, i64"; "f32 -> bf16"; "-> f32"). */
static void call_dtypes(const kn_opcall *c, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < c->n_in && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "",
                              c->in[i] ? kn_dtype_name(c->in[i]->dtype) : "?");
    if ((c->op == KN_OP_CAST || kn_op_kind_of(c->op) == KN_K_CREATE) && n < size)
        snprintf(buf + n, size - n, "%s-> %s", n ? " " : "", kn_dtype_name(c->a.dtype));
}

kn_status kn_op_check_supported(kn_device_ctx *d, const kn_opcall *c)
{
    if (d->be->supports_op(d, c)) return KN_OK;
    char dts[160];
    call_dtypes(c, dts, sizeof dts);
    return kn_error(KN_ERR_UNSUPPORTED, "%s: not supported on %s for these dtypes (%s)", kn_op_name(c->op),
                    kn_device_name(d->device), dts);
}

kn_status kn_op_eager(kn_opcall *c, kn_device dev)
{
    kn_meta metas[KN_MAX_OUTPUTS];
    int n_out = 0;
    c->n_out = 0;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i] && !c->in[i]->storage)
            return kn_error(KN_ERR_ARG,
                            "%s: input %d is a traced value that has no data (it comes from a "
                            "compiled call that did not finish)",
                            kn_op_name(c->op), i + 1);
    if (c->n_in > 0) {
        dev = kn_tensor_device(c->in[0]);
        for (int i = 1; i < c->n_in; i++)
            if (kn_tensor_device(c->in[i]) != dev)
                return kn_error(KN_ERR_DEVICE, "%s: input %d is on %s but input 1 is on %s",
                                kn_op_name(c->op), i + 1,
                                kn_device_name(kn_tensor_device(c->in[i])),
                                kn_device_name(dev));
    }
    KN_TRY(kn_op_infer(c, metas, &n_out));
    if (kn_op_kind_of(c->op) == KN_K_VIEW) { /* metadata only: no backend involved */
        KN_TRY(view_op(c, dev));
        c->n_out = 1;
        return KN_OK;
    }
    kn_device_ctx *d = kn_backend_get(dev);
    if (!d) return kn_backend_missing(dev, NULL);
    KN_TRY(kn_op_check_supported(d, c));
    for (int i = 0; i < n_out; i++) {
        kn_status st = kn_tensor_new_meta(&metas[i], dev, &c->out[i]);
        if (st != KN_OK) {
            for (int j = 0; j < i; j++) kn_tensor_release(c->out[j]);
            return st;
        }
    }
    c->n_out = n_out;
    bool prof = kn_profile_on;
    int slot = prof ? kn_profile_kernel_begin(dev, c->settings) : -1;
    kn_status st = d->be->run(d, c);
    if (prof) kn_profile_op_end(slot, c);
    if (st != KN_OK) {
        for (int i = 0; i < n_out; i++) {
            kn_tensor_release(c->out[i]);
            c->out[i] = NULL;
        }
        c->n_out = 0;
    }
    return st;
}
