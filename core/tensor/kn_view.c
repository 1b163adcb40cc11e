/* kn_view: reshape and flatten (views, or copies when the strides cannot
 * express the shape), and copies between layouts, devices and dtypes. */
#include "kn_view.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_settings.h"

kn_status kn_view_reshape(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out)
{
    KN_TRY(kn_view_reshape_nocopy(t, ndim, shape, out));
    if (*out) return KN_OK;
    kn_tensor *c;
    KN_TRY(kn_tensor_contiguous_copy(t, NULL, &c));
    kn_status st = kn_view_reshape_nocopy(c, ndim, shape, out);
    kn_tensor_release(c);
    return st;
}

kn_status kn_view_flatten(kn_tensor *t, int64_t d0, int64_t d1, kn_tensor **out)
{
    int a, b;
    *out = NULL;
    if (t->ndim == 0) {
        int64_t one = 1;
        return kn_view_reshape(t, 1, &one, out);
    }
    KN_TRY(kn_norm_dim("flatten", d0, t->ndim, &a));
    KN_TRY(kn_norm_dim("flatten", d1, t->ndim, &b));
    if (a > b) return kn_error(KN_ERR_ARG, "flatten: start dim %d is after end dim %d", a + 1, b + 1);
    int64_t shape[KN_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i > a && i <= b) {
            shape[n - 1] *= t->shape[i];
            continue;
        }
        shape[n++] = t->shape[i];
    }
    return kn_view_reshape(t, n, shape, out);
}

kn_status kn_tensor_contiguous_copy(kn_tensor *t, const kn_settings *settings, kn_tensor **out)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CONTIGUOUS);
    c.n_in = 1;
    c.in[0] = t;
    c.settings = settings;
    *out = NULL;
    KN_TRY(kn_op_eager(&c, kn_tensor_device(t)));
    *out = c.out[0];
    return KN_OK;
}

kn_status kn_tensor_contiguous(kn_tensor *t, kn_tensor **out)
{
    if (kn_tensor_is_contiguous(t)) {
        kn_tensor_retain(t);
        *out = t;
        return KN_OK;
    }
    return kn_tensor_contiguous_copy(t, NULL, out);
}

kn_status kn_tensor_cast(kn_tensor *t, kn_dtype dt, kn_tensor **out)
{
    *out = NULL;
    if (t->dtype == dt) {
        kn_tensor_retain(t);
        *out = t;
        return KN_OK;
    }
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CAST);
    c.n_in = 1;
    c.in[0] = t;
    c.a.dtype = dt;
    KN_TRY(kn_op_eager(&c, kn_tensor_device(t)));
    *out = c.out[0];
    return KN_OK;
}

void kn_tensor_gather_host(const kn_tensor *t, void *dst)
{
    size_t es = kn_dtype_size(t->dtype);
    int64_t n = kn_tensor_numel(t);
    if (n == 0) return;
    if (kn_tensor_is_contiguous(t)) {
        memcpy(dst, kn_tensor_data(t), (size_t)n * es);
        return;
    }
    int64_t idx[KN_MAX_DIMS] = {0};
    const char *base = kn_tensor_data(t);
    char *o = dst;
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int i = 0; i < t->ndim; i++) off += idx[i] * t->strides[i];
        memcpy(o + (size_t)k * es, base + off * (int64_t)es, es);
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (++idx[i] < t->shape[i]) break;
            idx[i] = 0;
        }
    }
}

/* Between two devices that are not host memory (cuda:0 -> cuda:1): through
 * a host buffer, which is slow but needs nothing of either backend. */
static kn_status copy_through_host(kn_device_ctx *src, kn_device_ctx *dst, void *to, const void *from,
                                   int64_t nbytes)
{
    if (nbytes <= 0) return KN_OK;
    void *staging = malloc((size_t)nbytes);
    if (!staging) return kn_error(KN_ERR_OOM, "to: out of host memory for a %lld-byte copy", (long long)nbytes);
    kn_status st = src->be->to_host(src, staging, from, nbytes);
    if (st == KN_OK) st = dst->be->from_host(dst, to, staging, nbytes);
    free(staging);
    return st;
}

kn_status kn_tensor_to_device(kn_tensor *t, kn_device dev, const kn_settings *settings, kn_tensor **out)
{
    *out = NULL;
    kn_device from = kn_tensor_device(t);
    if (from == dev) {
        kn_tensor_retain(t);
        *out = t;
        return KN_OK;
    }
    kn_device_ctx *src = kn_backend_get(from), *dst = kn_backend_get(dev);
    if (!dst) return kn_backend_missing(dev, "to");
    if (!src) return kn_backend_missing(from, "to");
    /* Make the source contiguous on its own device, then copy the bytes. */
    kn_tensor *c = t;
    if (!kn_tensor_is_contiguous(t)) KN_TRY(kn_tensor_contiguous_copy(t, settings, &c));
    else kn_tensor_retain(c);
    kn_tensor *r;
    kn_status st = kn_tensor_new(t->dtype, t->ndim, t->shape, dev, &r);
    if (st == KN_OK) {
        int64_t nbytes = kn_tensor_numel(t) * (int64_t)kn_dtype_size(t->dtype);
        bool from_host = kn_device_kind_of(from) == KN_DEVICE_CPU, to_host = kn_device_kind_of(dev) == KN_DEVICE_CPU;
        if (from_host) st = dst->be->from_host(dst, r->storage->data, kn_tensor_data(c), nbytes);
        else if (to_host) st = src->be->to_host(src, r->storage->data, kn_tensor_data(c), nbytes);
        else st = copy_through_host(src, dst, r->storage->data, kn_tensor_data(c), nbytes);
        if (st != KN_OK) kn_tensor_release(r);
        else *out = r;
    }
    kn_tensor_release(c);
    return st;
}

kn_status kn_view_run(const kn_opcall *c, kn_tensor **out)
{
    KN_TRY(kn_view_run_nocopy(c, out));
    if (*out) return KN_OK;
    kn_tensor *copy;
    KN_TRY(kn_tensor_contiguous_copy(c->in[0], c->settings, &copy));
    kn_opcall on_copy = *c;
    on_copy.in[0] = copy;
    kn_status st = kn_view_run_nocopy(&on_copy, out);
    kn_tensor_release(copy);
    return st;
}

bool kn_tensor_close(const kn_tensor *got, const kn_tensor *want, double rtol, const kn_settings *settings,
                     char *why, size_t size)
{
    char s1[128], s2[128];
    if (!got || !want) {
        snprintf(why, size, "missing value (%s)", got ? "reference" : "result");
        return false;
    }
    if (got->dtype != want->dtype || got->ndim != want->ndim ||
        memcmp(got->shape, want->shape, sizeof(int64_t) * (size_t)got->ndim) != 0) {
        snprintf(why, size, "%s%s vs the reference %s%s", kn_dtype_name(got->dtype),
                 kn_shape_str(got->ndim, got->shape, s1, sizeof s1), kn_dtype_name(want->dtype),
                 kn_shape_str(want->ndim, want->shape, s2, sizeof s2));
        return false;
    }
    kn_tensor *a = NULL, *b = NULL;
    bool same = kn_tensor_to_device((kn_tensor *)got, KN_CPU, settings, &a) == KN_OK &&
                kn_tensor_to_device((kn_tensor *)want, KN_CPU, settings, &b) == KN_OK;
    int64_t n = kn_tensor_numel(got);
    size_t es = kn_dtype_size(got->dtype);
    unsigned char *pa = malloc((size_t)(n ? n : 1) * es), *pb = malloc((size_t)(n ? n : 1) * es);
    if (!same || !pa || !pb) {
        snprintf(why, size, "could not read the values back");
        same = false;
    } else {
        kn_tensor_gather_host(a, pa);
        kn_tensor_gather_host(b, pb);
        for (int64_t i = 0; i < n && same; i++) {
            double x = kn_load_f64(pa + (size_t)i * es, got->dtype);
            double y = kn_load_f64(pb + (size_t)i * es, got->dtype);
            if (isnan(y) ? isnan(x) : isinf(y) ? x == y : fabs(x - y) <= rtol * fmax(1.0, fabs(y)))
                continue;
            snprintf(why, size, "element %lld: %.9g vs the reference %.9g", (long long)i, x, y);
            same = false;
        }
    }
    free(pa);
    free(pb);
    kn_tensor_release(a);
    kn_tensor_release(b);
    return same;
}

/* t's header with dims taken in the order `from` (the same bytes) */
static kn_tensor permuted_header(const kn_tensor *t, const int from[4])
{
    kn_tensor v = *t;
    for (int d = 0; d < 4; d++) {
        v.shape[d] = t->shape[from[d]];
        v.strides[d] = t->strides[from[d]];
    }
    return v;
}

kn_tensor kn_view_nhwc_as_nchw(const kn_tensor *t)
{
    static const int from[4] = {0, 3, 1, 2};
    return permuted_header(t, from);
}

kn_tensor kn_view_nchw_as_nhwc(const kn_tensor *t)
{
    static const int from[4] = {0, 2, 3, 1};
    return permuted_header(t, from);
}
