/* kn_view: reshape, transpose, permute, slice, expand and friends as views,
 * plus copies between devices and dtypes. */
#include "kn_view.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"

static kn_status infer_reshape(const char *what, const kn_tensor *t, int ndim,
                               const int64_t *shape, int64_t *resolved)
{
    char a[128], b[128];
    if (ndim < 0 || ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_SHAPE, "%s: a tensor has at most %d dims, got %d", what,
                        KN_MAX_DIMS, ndim);
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0)
                return kn_error(KN_ERR_SHAPE, "%s: only one dim can be -1, got %s", what,
                                kn_shape_str(ndim, shape, a, sizeof a));
            infer = i;
        } else if (shape[i] < 0) {
            return kn_error(KN_ERR_SHAPE, "%s: size %lld at dim %d is negative", what,
                            (long long)shape[i], i + 1);
        } else {
            if (shape[i] > 0 && known > KN_MAX_BYTES / shape[i])
                return kn_error(KN_ERR_SHAPE, "%s: shape %s is too large", what,
                                kn_shape_str(ndim, shape, a, sizeof a));
            known *= shape[i];
        }
        resolved[i] = shape[i];
    }
    int64_t n = kn_tensor_numel(t);
    if (infer >= 0) {
        if (known == 0 || n % known != 0)
            return kn_error(KN_ERR_SHAPE, "%s: shape %s is invalid for a tensor of %lld elements %s",
                            what, kn_shape_str(ndim, shape, a, sizeof a), (long long)n,
                            kn_shape_str(t->ndim, t->shape, b, sizeof b));
        resolved[infer] = n / known;
    } else if (known != n) {
        return kn_error(KN_ERR_SHAPE, "%s: shape %s is invalid for a tensor of %lld elements %s",
                        what, kn_shape_str(ndim, shape, a, sizeof a), (long long)n,
                        kn_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    return KN_OK;
}

/* Strides for viewing t as `shape` without a copy, if t's strides allow it
 * (the algorithm of PyTorch's computeStride: match groups of old dims that
 * are contiguous among themselves to groups of new dims). */
static int view_strides(const kn_tensor *t, int ndim, const int64_t *shape, int64_t *strides)
{
    if (kn_tensor_numel(t) == 0 || kn_tensor_is_contiguous(t)) {
        kn_contiguous_strides(ndim, shape, strides);
        return 1;
    }
    int view_d = ndim - 1;
    int64_t chunk_base_stride = t->strides[t->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= t->shape[d];
        if (d == 0 ||
            (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return 0;
            if (d > 0) {
                chunk_base_stride = t->strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

kn_status kn_view_view(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out)
{
    int64_t resolved[KN_MAX_DIMS], strides[KN_MAX_DIMS];
    *out = NULL;
    KN_TRY(infer_reshape("view", t, ndim, shape, resolved));
    if (!view_strides(t, ndim, resolved, strides)) {
        char a[128];
        return kn_error(KN_ERR_SHAPE,
                        "view: the strides of this %s tensor cannot express shape %s; "
                        "use reshape or call contiguous() first",
                        kn_shape_str(t->ndim, t->shape, a, sizeof a),
                        kn_shape_str(ndim, resolved, a + 64, 64));
    }
    return kn_tensor_view_of(t, ndim, resolved, strides, t->offset, out);
}

kn_status kn_view_reshape(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out)
{
    int64_t resolved[KN_MAX_DIMS], strides[KN_MAX_DIMS];
    *out = NULL;
    KN_TRY(infer_reshape("reshape", t, ndim, shape, resolved));
    if (view_strides(t, ndim, resolved, strides))
        return kn_tensor_view_of(t, ndim, resolved, strides, t->offset, out);
    kn_tensor *c;
    KN_TRY(kn_tensor_contiguous_copy(t, &c));
    kn_contiguous_strides(ndim, resolved, strides);
    kn_status st = kn_tensor_view_of(c, ndim, resolved, strides, 0, out);
    kn_tensor_release(c);
    return st;
}

kn_status kn_view_transpose(kn_tensor *t, int64_t d0, int64_t d1, kn_tensor **out)
{
    int a, b;
    *out = NULL;
    KN_TRY(kn_norm_dim("transpose", d0, t->ndim, &a));
    KN_TRY(kn_norm_dim("transpose", d1, t->ndim, &b));
    int64_t shape[KN_MAX_DIMS], strides[KN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    if (t->ndim > 0) {
        shape[a] = t->shape[b];
        shape[b] = t->shape[a];
        strides[a] = t->strides[b];
        strides[b] = t->strides[a];
    }
    return kn_tensor_view_of(t, t->ndim, shape, strides, t->offset, out);
}

kn_status kn_view_permute(kn_tensor *t, int ndim, const int64_t *order, kn_tensor **out)
{
    *out = NULL;
    if (ndim != t->ndim)
        return kn_error(KN_ERR_ARG, "permute: got %d dims for a tensor with %d dims", ndim,
                        t->ndim);
    int seen[KN_MAX_DIMS] = {0};
    int64_t shape[KN_MAX_DIMS], strides[KN_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        int d;
        KN_TRY(kn_norm_dim("permute", order[i], t->ndim, &d));
        if (seen[d]) return kn_error(KN_ERR_ARG, "permute: dim %d appears twice", d + 1);
        seen[d] = 1;
        shape[i] = t->shape[d];
        strides[i] = t->strides[d];
    }
    return kn_tensor_view_of(t, ndim, shape, strides, t->offset, out);
}

kn_status kn_view_slice(kn_tensor *t, int64_t dim, int64_t start, int64_t stop, int64_t step,
                        kn_tensor **out)
{
    int d;
    *out = NULL;
    if (t->ndim == 0) return kn_error(KN_ERR_ARG, "slice: cannot slice a 0-dim tensor");
    KN_TRY(kn_norm_dim("slice", dim, t->ndim, &d));
    if (step < 1) return kn_error(KN_ERR_ARG, "slice: step must be positive, got %lld", (long long)step);
    int64_t n = t->shape[d];
    if (start < 0) start += n;
    if (stop < 0) stop += n;
    if (start < 0) start = 0;
    if (stop > n) stop = n;
    if (start > n) start = n;
    if (stop < start) stop = start;
    int64_t shape[KN_MAX_DIMS], strides[KN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    shape[d] = (stop - start + step - 1) / step;
    strides[d] = t->strides[d] * step;
    return kn_tensor_view_of(t, t->ndim, shape, strides, t->offset + start * t->strides[d], out);
}

kn_status kn_view_expand(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out)
{
    char a[128], b[128];
    *out = NULL;
    if (ndim < t->ndim || ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_SHAPE, "expand: cannot expand %s to %d dims",
                        kn_shape_str(t->ndim, t->shape, a, sizeof a), ndim);
    int64_t nshape[KN_MAX_DIMS], strides[KN_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - lead;
        int64_t have = j >= 0 ? t->shape[j] : 1;
        int64_t want = shape[i] == -1 && j >= 0 ? have : shape[i];
        if (want < 0 || (have != want && have != 1))
            return kn_error(KN_ERR_SHAPE, "expand: cannot expand %s to %s",
                            kn_shape_str(t->ndim, t->shape, a, sizeof a),
                            kn_shape_str(ndim, shape, b, sizeof b));
        nshape[i] = want;
        strides[i] = (j >= 0 && have == want) ? t->strides[j] : 0;
    }
    KN_TRY(kn_shape_check("expand", ndim, nshape, t->dtype));
    return kn_tensor_view_of(t, ndim, nshape, strides, t->offset, out);
}

kn_status kn_view_unsqueeze(kn_tensor *t, int64_t dim, kn_tensor **out)
{
    int d;
    *out = NULL;
    if (t->ndim >= KN_MAX_DIMS)
        return kn_error(KN_ERR_SHAPE, "unsqueeze: a tensor has at most %d dims", KN_MAX_DIMS);
    KN_TRY(kn_norm_dim("unsqueeze", dim, t->ndim + 1, &d));
    int64_t shape[KN_MAX_DIMS], strides[KN_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == d) {
            shape[i] = 1;
            strides[i] = (j < t->ndim) ? t->strides[j] * t->shape[j] : 1;
        } else {
            shape[i] = t->shape[j];
            strides[i] = t->strides[j];
            j++;
        }
    }
    return kn_tensor_view_of(t, t->ndim + 1, shape, strides, t->offset, out);
}

kn_status kn_view_squeeze(kn_tensor *t, int64_t dim, int all, kn_tensor **out)
{
    int d = -1;
    *out = NULL;
    if (!all) KN_TRY(kn_norm_dim("squeeze", dim, t->ndim, &d));
    int64_t shape[KN_MAX_DIMS], strides[KN_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1 && (all || i == d)) continue;
        shape[n] = t->shape[i];
        strides[n] = t->strides[i];
        n++;
    }
    return kn_tensor_view_of(t, n, shape, strides, t->offset, out);
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

kn_status kn_tensor_contiguous_copy(kn_tensor *t, kn_tensor **out)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CONTIGUOUS);
    c.n_in = 1;
    c.in[0] = t;
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
    return kn_tensor_contiguous_copy(t, out);
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

kn_status kn_tensor_to_device(kn_tensor *t, kn_device dev, kn_tensor **out)
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
    if (!kn_tensor_is_contiguous(t)) KN_TRY(kn_tensor_contiguous_copy(t, &c));
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
    kn_tensor *t = c->in[0];
    const kn_attrs *a = &c->a;
    switch (c->op) {
    case KN_OP_RESHAPE: return kn_view_reshape(t, a->nshape, a->shape, out);
    case KN_OP_EXPAND: return kn_view_expand(t, a->nshape, a->shape, out);
    case KN_OP_SLICE: return kn_view_slice(t, a->dim, a->start, a->stop, a->step, out);
    case KN_OP_PERMUTE: {
        int64_t order[KN_MAX_DIMS];
        for (int i = 0; i < a->ndims; i++) order[i] = a->dims[i];
        return kn_view_permute(t, a->ndims, order, out);
    }
    default: return kn_error(KN_ERR_ARG, "%s: not a view op", kn_op_name(c->op));
    }
}

/* Shape inference for a view: run the view on a header with the input's
 * metadata over a storage that holds nothing, so the rules (and messages)
 * are exactly those of the eager views. */
kn_status kn_view_infer(const kn_opcall *c, kn_meta *out)
{
    static kn_storage nothing = {1 << 30, KN_CPU, 0, NULL, true}; /* never freed */
    const kn_tensor *in = c->in[0];
    kn_tensor probe = {0};
    probe.refcount = 1 << 30;
    probe.dtype = in->dtype;
    probe.ndim = in->ndim;
    memcpy(probe.shape, in->shape, sizeof probe.shape);
    kn_contiguous_strides(in->ndim, in->shape, probe.strides);
    probe.storage = &nothing;
    kn_opcall call = *c;
    call.in[0] = &probe;
    kn_tensor *v = NULL;
    KN_TRY(kn_view_run(&call, &v));
    *out = kn_tensor_meta(v);
    kn_tensor_release(v);
    return KN_OK;
}

bool kn_tensor_close(const kn_tensor *got, const kn_tensor *want, double rtol, char *why, size_t size)
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
    bool same = kn_tensor_to_device((kn_tensor *)got, KN_CPU, &a) == KN_OK &&
                kn_tensor_to_device((kn_tensor *)want, KN_CPU, &b) == KN_OK;
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
