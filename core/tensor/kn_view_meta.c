/* kn_view_meta: the views that never copy (the rules of view, transpose,
 * permute, slice, expand, squeeze and of reshape when the strides allow),
 * and shape inference for the view ops. */
#include "kn_view_meta.h"

#include <string.h>

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

kn_status kn_view_reshape_nocopy(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out)
{
    int64_t resolved[KN_MAX_DIMS], strides[KN_MAX_DIMS];
    *out = NULL;
    KN_TRY(infer_reshape("reshape", t, ndim, shape, resolved));
    if (!view_strides(t, ndim, resolved, strides)) return KN_OK;
    return kn_tensor_view_of(t, ndim, resolved, strides, t->offset, out);
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
    /* a step past the end takes one element either way; clamped, the size
     * and stride arithmetic below cannot overflow (a step near 2^62 did) */
    if (step > n) step = n > 0 ? n : 1;
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

kn_status kn_view_run_nocopy(const kn_opcall *c, kn_tensor **out)
{
    kn_tensor *t = c->in[0];
    const kn_attrs *a = &c->a;
    switch (c->op) {
    case KN_OP_RESHAPE: return kn_view_reshape_nocopy(t, a->nshape, a->shape, out);
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
    static kn_storage nothing = {1 << 30, KN_CPU, 0, NULL, true, 0}; /* never freed */
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
    KN_TRY(kn_view_run_nocopy(&call, &v));
    if (!v) /* the probe is contiguous: every reshape of it is a view */
        return kn_error(KN_ERR_SHAPE, "%s: no view of a contiguous tensor", kn_op_name(c->op));
    *out = kn_tensor_meta(v);
    kn_tensor_release(v);
    return KN_OK;
}
