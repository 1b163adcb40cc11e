/* kn_cpu_index: the CPU reference for cat, index_select, gather, index_add,
 * tril and triu, and the fused gather_scatter (message passing).
 *
 * Indices are 1-based (kiln follows Lua and Torch7) and are checked here, at
 * run time, since only the data says whether they are in range; a bad one is
 * a KN_ERR_ARG naming its value and position, and nothing is written before
 * all of them are checked. Data moves as bytes, so every dtype is exact.
 */
#include <stdint.h>
#include <string.h>

#include "kn_cpu.h"
#include "kn_view.h"

/* Copy (with a dtype conversion when they differ) the view `in` into the
 * view `out` of the same shape, through the elementwise kernels. */
static kn_status copy_into(kn_tensor *in, kn_tensor *out)
{
    kn_opcall cc;
    kn_opcall_init(&cc, in->dtype == out->dtype ? KN_OP_CONTIGUOUS : KN_OP_CAST);
    cc.a.dtype = out->dtype;
    cc.n_in = 1;
    cc.in[0] = in;
    cc.n_out = 1;
    cc.out[0] = out;
    return kn_cpu_elementwise(&cc);
}

/* Element i of a contiguous i32 / i64 index tensor. */
static int64_t index_at(const kn_tensor *idx, int64_t i)
{
    const char *p = kn_tensor_data(idx);
    if (idx->dtype == KN_I32) {
        int32_t v;
        memcpy(&v, p + i * 4, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, p + i * 8, 8);
    return v;
}

/* Check that every index of a 1-D index tensor lies in 1..size. */
static kn_status check_indices(const kn_opcall *c, const kn_tensor *idx, int64_t size)
{
    int64_t n = kn_tensor_numel(idx);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = index_at(idx, i);
        if (v < 1 || v > size)
            return kn_error(KN_ERR_ARG, "%s: index %lld at position %lld is out of range 1..%lld",
                            kn_op_name(c->op), (long long)v, (long long)(i + 1), (long long)size);
    }
    return KN_OK;
}

/* x seen as (outer, x->shape[dim], inner) in elements. */
static void split_dim(const kn_tensor *x, int dim, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int d = 0; d < dim; d++) *outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) *inner *= x->shape[d];
}

/* ---- cat: each input is copied into a view of the output ---- */

static kn_status run_cat(const kn_opcall *c)
{
    kn_tensor *out = c->out[0];
    int dim = c->a.dim;
    int64_t pos = 0;
    for (int i = 0; i < c->n_in; i++) {
        kn_tensor *x = c->in[i];
        if (kn_tensor_numel(x) > 0) {
            kn_tensor *v;
            KN_TRY(kn_tensor_view_of(out, out->ndim, x->shape, out->strides,
                                     out->offset + pos * out->strides[dim], &v));
            kn_status st = copy_into(x, v);
            kn_tensor_release(v);
            KN_TRY(st);
        }
        pos += x->shape[dim];
    }
    return KN_OK;
}

/* ---- index_select: whole (inner) blocks along dim ---- */

static kn_status run_index_select(const kn_opcall *c, const kn_tensor *x, const kn_tensor *idx)
{
    int dim = c->a.dim;
    int64_t size = x->shape[dim], k = kn_tensor_numel(idx), outer, inner;
    KN_TRY(check_indices(c, idx, size));
    split_dim(x, dim, &outer, &inner);
    size_t block = (size_t)inner * kn_dtype_size(x->dtype);
    const char *xd = kn_tensor_data(x);
    char *od = kn_tensor_data(c->out[0]);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < k; i++) {
            int64_t j = index_at(idx, i) - 1;
            memcpy(od + (size_t)(o * k + i) * block, xd + (size_t)(o * size + j) * block, block);
        }
    return KN_OK;
}

/* ---- gather: out[p] = x[p with p[dim] replaced by idx[p]] ---- */

static kn_status run_gather(const kn_opcall *c, const kn_tensor *x, const kn_tensor *idx)
{
    int dim = c->a.dim, nd = x->ndim;
    int64_t n = kn_tensor_numel(idx), size = x->shape[dim];
    int64_t pos[KN_MAX_DIMS] = {0}, xoff = 0;
    int64_t es = (int64_t)kn_dtype_size(x->dtype);
    /* Validate first so that an error leaves nothing half-written. */
    for (int64_t i = 0; i < n; i++) {
        int64_t v = index_at(idx, i);
        if (v < 1 || v > size) {
            char where[KN_MAX_DIMS * 24];
            int64_t p1[KN_MAX_DIMS], rem = i;
            for (int d = nd - 1; d >= 0; d--) {
                p1[d] = rem % idx->shape[d] + 1;
                rem /= idx->shape[d];
            }
            return kn_error(KN_ERR_ARG, "gather: index %lld at position %s is out of range 1..%lld",
                            (long long)v, kn_shape_str(nd, p1, where, (int)sizeof where),
                            (long long)size);
        }
    }
    const char *xd = kn_tensor_data(x);
    char *od = kn_tensor_data(c->out[0]);
    for (int64_t i = 0; i < n; i++) {
        int64_t j = index_at(idx, i) - 1;
        memcpy(od + i * es, xd + (xoff + j * x->strides[dim]) * es, (size_t)es);
        /* Odometer over idx's shape; xoff tracks every dim but `dim`. */
        for (int d = nd - 1; d >= 0; d--) {
            if (++pos[d] < idx->shape[d]) {
                if (d != dim) xoff += x->strides[d];
                break;
            }
            if (d != dim) xoff -= x->strides[d] * (idx->shape[d] - 1);
            pos[d] = 0;
        }
    }
    return KN_OK;
}

/* ---- index_add: out = x; out[.., idx[i], ..] += src[.., i, ..] ---- */

static void add_elem(char *dst, const char *src, kn_dtype dt)
{
    switch (dt) {
    case KN_I32: {
        int32_t a, b;
        memcpy(&a, dst, 4);
        memcpy(&b, src, 4);
        a = (int32_t)((uint32_t)a + (uint32_t)b); /* wraps, no signed overflow */
        memcpy(dst, &a, 4);
        break;
    }
    case KN_I64: {
        int64_t a, b;
        memcpy(&a, dst, 8);
        memcpy(&b, src, 8);
        a = (int64_t)((uint64_t)a + (uint64_t)b);
        memcpy(dst, &a, 8);
        break;
    }
    case KN_BOOL: *(uint8_t *)dst = *(uint8_t *)dst || *(const uint8_t *)src; break;
    default: kn_store_f64(dst, dt, kn_load_f64(dst, dt) + kn_load_f64(src, dt)); break;
    }
}

static kn_status run_index_add(const kn_opcall *c, const kn_tensor *idx, const kn_tensor *src)
{
    kn_tensor *out = c->out[0];
    int dim = c->a.dim;
    int64_t size = out->shape[dim], k = kn_tensor_numel(idx), outer, inner;
    KN_TRY(check_indices(c, idx, size));
    KN_TRY(copy_into(c->in[0], out));
    split_dim(out, dim, &outer, &inner);
    int64_t es = (int64_t)kn_dtype_size(out->dtype);
    char *od = kn_tensor_data(out);
    const char *sd = kn_tensor_data(src);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < k; i++) {
            int64_t j = index_at(idx, i) - 1;
            char *dst = od + (o * size + j) * inner * es;
            const char *s = sd + (o * k + i) * inner * es;
            for (int64_t e = 0; e < inner; e++) add_elem(dst + e * es, s + e * es, out->dtype);
        }
    return KN_OK;
}

/* ---- gather_scatter: out = base or 0; out[dst[e]] += h[src[e]] * w[e] ----
 * The eager chain's rounding, in its order: the message h * w is rounded
 * to the dtype (as the eager mul stores it), then each edge's add is
 * rounded (as index_add), edges in their order; then each epilogue op
 * (attrs epilogue: relu ... log_softmax) runs on the stored sums through
 * the eager op's own kernel. So the fused op on the CPU gives the unfused
 * chain's bits. */

static kn_status check_edge_indices(const kn_tensor *idx, int64_t size, const char *which)
{
    int64_t n = kn_tensor_numel(idx);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = index_at(idx, i);
        if (v < 1 || v > size)
            return kn_error(KN_ERR_ARG, "gather_scatter: %s index %lld at position %lld is out of range 1..%lld", which,
                            (long long)v, (long long)(i + 1), (long long)size);
    }
    return KN_OK;
}

static kn_status run_gather_scatter(const kn_opcall *c, const kn_tensor *h, const kn_tensor *src, const kn_tensor *dst,
                                    const kn_tensor *w)
{
    kn_tensor *out = c->out[0];
    kn_dtype dt = out->dtype;
    int64_t rows = out->shape[0], edges = kn_tensor_numel(src);
    int64_t row = h->shape[0] > 0 ? kn_tensor_numel(h) / h->shape[0] : kn_tensor_numel(out) / (rows > 0 ? rows : 1);
    KN_TRY(check_edge_indices(src, h->shape[0], "src"));
    KN_TRY(check_edge_indices(dst, rows, "dst"));
    bool has_base = c->a.nshape == 0;
    if (has_base) KN_TRY(copy_into(c->in[c->n_in - 1], out));
    else memset(kn_tensor_data(out), 0, (size_t)kn_tensor_numel(out) * kn_dtype_size(dt));
    size_t es = kn_dtype_size(dt);
    char *od = kn_tensor_data(out);
    const char *hd = kn_tensor_data(h);
    for (int64_t e = 0; e < edges; e++) {
        int64_t s = index_at(src, e) - 1, d = index_at(dst, e) - 1;
        double wv = w ? kn_load_f64((const char *)kn_tensor_data(w) + (size_t)e * es, dt) : 1;
        const char *hr = hd + (size_t)(s * row) * es;
        char *orow = od + (size_t)(d * row) * es;
        for (int64_t f = 0; f < row; f++) {
            double m = kn_load_f64(hr + (size_t)f * es, dt);
            if (w) { /* rounded as the eager mul stores it */
                char tmp[8];
                kn_store_f64(tmp, dt, m * wv);
                m = kn_load_f64(tmp, dt);
            }
            kn_store_f64(orow + (size_t)f * es, dt, kn_load_f64(orow + (size_t)f * es, dt) + m);
        }
    }
    return KN_OK;
}

/* out = op(out) for each epilogue op in turn, through the eager kernels
 * (each result rounded to the dtype as the eager op stores it); a scratch
 * tensor between steps, as the kernels do not promise to work in place. */
static kn_status run_epilogue(const kn_opcall *c)
{
    kn_tensor *out = c->out[0];
    if (c->a.n_epilogue == 0 || kn_tensor_numel(out) == 0) return KN_OK;
    kn_tensor *tmp;
    KN_TRY(kn_tensor_new(out->dtype, out->ndim, out->shape, KN_CPU, &tmp));
    kn_status st = KN_OK;
    for (int i = 0; i < c->a.n_epilogue && st == KN_OK; i++) {
        kn_opcall oc;
        kn_opcall_init(&oc, (kn_op)c->a.epilogue[i]);
        oc.a.dim = out->ndim - 1; /* softmax, log_softmax: over the last dim */
        oc.n_in = 1;
        oc.in[0] = out;
        oc.n_out = 1;
        oc.out[0] = tmp;
        st = kn_op_kind_of(oc.op) == KN_K_SOFTMAX ? kn_cpu_reduce(&oc) : kn_cpu_elementwise(&oc);
        if (st == KN_OK)
            memcpy(kn_tensor_data(out), kn_tensor_data(tmp), (size_t)kn_tensor_numel(out) * kn_dtype_size(out->dtype));
    }
    kn_tensor_release(tmp);
    return st;
}

static kn_status gather_scatter(const kn_opcall *c)
{
    bool has_base = c->a.nshape == 0;
    bool has_w = c->n_in - 3 - (has_base ? 1 : 0) == 1;
    kn_tensor *h = NULL, *src = NULL, *dst = NULL, *w = NULL;
    kn_status st = kn_tensor_contiguous(c->in[0], &h);
    if (st == KN_OK) st = kn_tensor_contiguous(c->in[1], &src);
    if (st == KN_OK) st = kn_tensor_contiguous(c->in[2], &dst);
    if (st == KN_OK && has_w) st = kn_tensor_contiguous(c->in[3], &w);
    if (st == KN_OK) st = run_gather_scatter(c, h, src, dst, w);
    if (st == KN_OK) st = run_epilogue(c);
    kn_tensor_release(h);
    kn_tensor_release(src);
    kn_tensor_release(dst);
    kn_tensor_release(w);
    return st;
}

/* ---- tril / triu: copy, then zero the other triangle of each matrix ---- */

static kn_status run_tri(const kn_opcall *c)
{
    kn_tensor *out = c->out[0];
    KN_TRY(copy_into(c->in[0], out));
    int64_t rows = out->shape[out->ndim - 2], cols = out->shape[out->ndim - 1];
    int64_t mats = rows > 0 && cols > 0 ? kn_tensor_numel(out) / (rows * cols) : 0;
    int64_t es = (int64_t)kn_dtype_size(out->dtype);
    /* Clamp so that r + diag cannot overflow; beyond these it changes nothing. */
    int64_t diag = c->a.diagonal;
    if (diag < -rows - 1) diag = -rows - 1;
    if (diag > cols + 1) diag = cols + 1;
    char *od = kn_tensor_data(out);
    for (int64_t m = 0; m < mats; m++)
        for (int64_t r = 0; r < rows; r++) {
            int64_t lo, hi; /* columns to zero: [lo, hi) */
            if (c->op == KN_OP_TRIL) {
                lo = r + diag + 1; /* tril keeps col - r <= diag */
                hi = cols;
            } else {
                lo = 0; /* triu keeps col - r >= diag */
                hi = r + diag;
            }
            if (lo < 0) lo = 0;
            if (hi > cols) hi = cols;
            if (lo < hi)
                memset(od + ((m * rows + r) * cols + lo) * es, 0, (size_t)((hi - lo) * es));
        }
    return KN_OK;
}

kn_status kn_cpu_index(const kn_opcall *c)
{
    kn_op_kind kind = kn_op_kind_of(c->op);
    if (c->n_in < 1 || c->n_out < 1 || !c->out[0] ||
        (kind != KN_K_CAT && kind != KN_K_INDEX && kind != KN_K_TRI))
        return kn_error(KN_ERR_ARG, "%s: bad call", kn_op_name(c->op));
    if (kind == KN_K_CAT) return run_cat(c);
    if (kind == KN_K_TRI) return run_tri(c);
    if (c->op == KN_OP_GATHER_SCATTER) return gather_scatter(c);
    /* index_add must check its indices even when nothing is added, and the
     * others too when their output is empty but the index is not. */
    kn_tensor *a = NULL, *idx = NULL;
    kn_status st = kn_tensor_contiguous(c->in[1], &idx);
    if (st == KN_OK) {
        if (c->op == KN_OP_INDEX_ADD) {
            st = kn_tensor_contiguous(c->in[2], &a);
            if (st == KN_OK) st = run_index_add(c, idx, a);
        } else {
            st = kn_tensor_contiguous(c->in[0], &a);
            if (st == KN_OK)
                st = c->op == KN_OP_GATHER ? run_gather(c, a, idx) : run_index_select(c, a, idx);
        }
    }
    kn_tensor_release(a);
    kn_tensor_release(idx);
    return st;
}
