/* kn_grad_build: the ops gradient rules are written with (see
 * kn_grad_build.h). Each helper fills a kn_opcall and runs it through the
 * backward's executor, so rules never compute anything themselves. */
#include "kn_grad_build.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_view.h"

void kn_gb_init(kn_gb *b, kn_gb_runner run, kn_autograd *ag, kn_exec *ex, kn_device dev)
{
    memset(b, 0, sizeof *b);
    b->run = run;
    b->ag = ag;
    b->ex = ex;
    b->dev = dev;
}

void kn_gb_done(kn_gb *b)
{
    for (int i = 0; i < b->n_tmp; i++) kn_tensor_release(b->tmp[i]);
    free(b->tmp);
    b->tmp = NULL;
    b->n_tmp = b->cap_tmp = 0;
}

kn_tensor *kn_gb_fail(kn_gb *b, kn_status st, const char *fmt, ...)
{
    if (b->st != KN_OK) return NULL;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    b->st = kn_error(st, "%s", msg);
    return NULL;
}

/* Keep t for release when the rule is done; NULL (and a failure) when the
 * list cannot grow. */
static kn_tensor *own(kn_gb *b, kn_tensor *t)
{
    if (b->n_tmp == b->cap_tmp) {
        int cap = b->cap_tmp ? b->cap_tmp * 2 : 32;
        kn_tensor **tmp = realloc(b->tmp, sizeof *tmp * (size_t)cap);
        if (!tmp) {
            kn_tensor_release(t);
            return kn_gb_fail(b, KN_ERR_OOM, "backward: out of host memory");
        }
        b->tmp = tmp;
        b->cap_tmp = cap;
    }
    b->tmp[b->n_tmp++] = t;
    return t;
}

kn_tensor *kn_gb_call(kn_gb *b, kn_opcall *c, kn_tensor **second)
{
    if (second) *second = NULL;
    if (b->st != KN_OK) return NULL;
    for (int i = 0; i < c->n_in; i++)
        if (!c->in[i]) return kn_gb_fail(b, KN_ERR_ARG, "backward: %s got no input %d", kn_op_name(c->op), i + 1);
    kn_status st = b->run(b->ag, b->ex, c, b->dev);
    if (st != KN_OK) {
        b->st = st;
        return NULL;
    }
    kn_tensor *first = own(b, c->out[0]);
    for (int k = 1; k < c->n_out; k++) {
        kn_tensor *t = own(b, c->out[k]);
        if (k == 1 && second) *second = t;
    }
    return first;
}

static kn_tensor *call1(kn_gb *b, kn_op op, kn_tensor *x, const kn_attrs *a)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    if (a) c.a = *a;
    c.n_in = 1;
    c.in[0] = x;
    return kn_gb_call(b, &c, NULL);
}

static kn_tensor *call2(kn_gb *b, kn_op op, kn_tensor *x, kn_tensor *y, const kn_attrs *a)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    if (a) c.a = *a;
    c.n_in = 2;
    c.in[0] = x;
    c.in[1] = y;
    return kn_gb_call(b, &c, NULL);
}

kn_tensor *kn_gb_unary(kn_gb *b, kn_op op, kn_tensor *x)
{
    return call1(b, op, x, NULL);
}

kn_tensor *kn_gb_binary(kn_gb *b, kn_op op, kn_tensor *x, kn_tensor *y)
{
    return call2(b, op, x, y, NULL);
}

kn_tensor *kn_gb_add(kn_gb *b, kn_tensor *x, kn_tensor *y) { return call2(b, KN_OP_ADD, x, y, NULL); }
kn_tensor *kn_gb_sub(kn_gb *b, kn_tensor *x, kn_tensor *y) { return call2(b, KN_OP_SUB, x, y, NULL); }
kn_tensor *kn_gb_mul(kn_gb *b, kn_tensor *x, kn_tensor *y) { return call2(b, KN_OP_MUL, x, y, NULL); }
kn_tensor *kn_gb_div(kn_gb *b, kn_tensor *x, kn_tensor *y) { return call2(b, KN_OP_DIV, x, y, NULL); }

kn_tensor *kn_gb_muls(kn_gb *b, kn_tensor *x, double v)
{
    return x ? kn_gb_mul(b, x, kn_gb_scalar(b, v, x->dtype)) : NULL;
}

kn_tensor *kn_gb_adds(kn_gb *b, kn_tensor *x, double v)
{
    return x ? kn_gb_add(b, x, kn_gb_scalar(b, v, x->dtype)) : NULL;
}

kn_tensor *kn_gb_full(kn_gb *b, int ndim, const int64_t *shape, double v, kn_dtype dt)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_FULL);
    c.a.nshape = ndim;
    if (ndim > 0) memcpy(c.a.shape, shape, sizeof(int64_t) * (size_t)ndim);
    c.a.value = v;
    c.a.dtype = dt;
    return kn_gb_call(b, &c, NULL);
}

kn_tensor *kn_gb_scalar(kn_gb *b, double v, kn_dtype dt)
{
    return kn_gb_full(b, 0, NULL, v, dt);
}

kn_tensor *kn_gb_zeros_like(kn_gb *b, const kn_meta *m)
{
    return kn_gb_full(b, m->ndim, m->shape, 0, m->dtype);
}

kn_tensor *kn_gb_arange(kn_gb *b, int64_t n, double start, double step)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ARANGE);
    c.a.nshape = 1;
    c.a.shape[0] = n;
    c.a.value = start;
    c.a.value2 = step;
    c.a.dtype = KN_I64;
    return kn_gb_call(b, &c, NULL);
}

kn_tensor *kn_gb_host(kn_gb *b, kn_dtype dt, int ndim, const int64_t *shape, const double *values)
{
    if (b->st != KN_OK) return NULL;
    kn_tensor *h;
    kn_status st = kn_tensor_new(dt, ndim, shape, KN_CPU, &h);
    if (st != KN_OK) {
        b->st = st;
        return NULL;
    }
    int64_t n = kn_numel_of(ndim, shape);
    for (int64_t i = 0; i < n; i++)
        kn_store_f64((char *)h->storage->data + i * (int64_t)kn_dtype_size(dt), dt, values[i]);
    if (b->dev == KN_CPU) return own(b, h);
    kn_tensor *d;
    st = kn_tensor_to_device(h, b->dev, NULL, &d);
    kn_tensor_release(h);
    if (st != KN_OK) {
        b->st = st;
        return NULL;
    }
    return own(b, d);
}

kn_tensor *kn_gb_cast(kn_gb *b, kn_tensor *x, kn_dtype dt)
{
    if (!x || x->dtype == dt) return x;
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    return call1(b, KN_OP_CAST, x, &a);
}

kn_tensor *kn_gb_where(kn_gb *b, kn_tensor *cond, kn_tensor *x, kn_tensor *y)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_WHERE);
    c.n_in = 3;
    c.in[0] = cond;
    c.in[1] = x;
    c.in[2] = y;
    return kn_gb_call(b, &c, NULL);
}

kn_tensor *kn_gb_zero_where(kn_gb *b, kn_tensor *x, kn_tensor *mask)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_WHERE);
    c.n_in = 3;
    c.in[0] = mask;
    c.in[1] = x ? kn_gb_scalar(b, 0, x->dtype) : NULL;
    c.in[2] = x;
    return kn_gb_call(b, &c, NULL);
}

kn_tensor *kn_gb_reduce(kn_gb *b, kn_op op, kn_tensor *x, int ndims, const int *dims, bool keepdim)
{
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.ndims = ndims;
    for (int i = 0; i < ndims; i++) a.dims[i] = dims[i];
    a.keepdim = keepdim;
    a.correction = 1;
    return call1(b, op, x, &a);
}

kn_tensor *kn_gb_sum(kn_gb *b, kn_tensor *x, int ndims, const int *dims, bool keepdim)
{
    return kn_gb_reduce(b, KN_OP_SUM, x, ndims, dims, keepdim);
}

kn_tensor *kn_gb_softmax(kn_gb *b, kn_op op, kn_tensor *x, int dim)
{
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.dim = dim;
    return call1(b, op, x, &a);
}

kn_tensor *kn_gb_reshape(kn_gb *b, kn_tensor *x, int ndim, const int64_t *shape)
{
    if (!x) return NULL;
    if (x->ndim == ndim && (ndim == 0 || memcmp(x->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0)) return x;
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.nshape = ndim;
    if (ndim > 0) memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
    return call1(b, KN_OP_RESHAPE, x, &a);
}

kn_tensor *kn_gb_reshape_meta(kn_gb *b, kn_tensor *x, const kn_meta *m)
{
    return kn_gb_reshape(b, x, m->ndim, m->shape);
}

kn_tensor *kn_gb_permute(kn_gb *b, kn_tensor *x, const int *order)
{
    if (!x) return NULL;
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.ndims = x->ndim;
    for (int i = 0; i < x->ndim; i++) a.dims[i] = order[i];
    return call1(b, KN_OP_PERMUTE, x, &a);
}

kn_tensor *kn_gb_mT(kn_gb *b, kn_tensor *x)
{
    if (!x) return NULL;
    int order[KN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) order[i] = i;
    order[x->ndim - 1] = x->ndim - 2;
    order[x->ndim - 2] = x->ndim - 1;
    return kn_gb_permute(b, x, order);
}

kn_tensor *kn_gb_expand(kn_gb *b, kn_tensor *x, int ndim, const int64_t *shape)
{
    if (!x) return NULL;
    if (x->ndim == ndim && (ndim == 0 || memcmp(x->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0)) return x;
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.nshape = ndim;
    if (ndim > 0) memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
    return call1(b, KN_OP_EXPAND, x, &a);
}

kn_tensor *kn_gb_slice(kn_gb *b, kn_tensor *x, int dim, int64_t start, int64_t stop, int64_t step)
{
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.dim = dim;
    a.start = start;
    a.stop = stop;
    a.step = step;
    return call1(b, KN_OP_SLICE, x, &a);
}

kn_tensor *kn_gb_matmul(kn_gb *b, kn_tensor *x, kn_tensor *y)
{
    return call2(b, KN_OP_MATMUL, x, y, NULL);
}

kn_tensor *kn_gb_cat(kn_gb *b, int n, kn_tensor *const *xs, int dim)
{
    if (n == 1) return xs[0];
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CAT);
    c.n_in = n;
    for (int i = 0; i < n; i++) c.in[i] = xs[i];
    c.a.dim = dim;
    return kn_gb_call(b, &c, NULL);
}

kn_tensor *kn_gb_index_select(kn_gb *b, kn_tensor *x, int dim, kn_tensor *idx)
{
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.dim = dim;
    return call2(b, KN_OP_INDEX_SELECT, x, idx, &a);
}

kn_tensor *kn_gb_index_add(kn_gb *b, kn_tensor *x, int dim, kn_tensor *idx, kn_tensor *src)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_INDEX_ADD);
    c.n_in = 3;
    c.in[0] = x;
    c.in[1] = idx;
    c.in[2] = src;
    c.a.dim = dim;
    return kn_gb_call(b, &c, NULL);
}

kn_tensor *kn_gb_contiguous(kn_gb *b, kn_tensor *x)
{
    return call1(b, KN_OP_CONTIGUOUS, x, NULL);
}

kn_tensor *kn_gb_sum_to(kn_gb *b, kn_tensor *g, const kn_meta *m)
{
    if (!g) return NULL;
    int lead = g->ndim - m->ndim, dims[KN_MAX_DIMS], n = 0;
    if (lead < 0) return kn_gb_fail(b, KN_ERR_SHAPE, "backward: a gradient of %d dims for an input of %d", g->ndim, m->ndim);
    for (int d = 0; d < lead; d++) dims[n++] = d;
    if (n > 0) g = kn_gb_sum(b, g, n, dims, false);
    if (!g) return NULL;
    n = 0;
    for (int d = 0; d < m->ndim; d++)
        if (m->shape[d] == 1 && g->shape[d] != 1) dims[n++] = d;
    if (n > 0) g = kn_gb_sum(b, g, n, dims, true);
    return g;
}

kn_tensor *kn_gb_unreduce(kn_gb *b, kn_tensor *g, const kn_meta *full, int ndims, const int *dims, bool keepdim)
{
    if (!g) return NULL;
    if (!keepdim) {
        bool red[KN_MAX_DIMS] = {false};
        for (int i = 0; i < ndims; i++) red[dims[i]] = true;
        int64_t kept[KN_MAX_DIMS];
        for (int d = 0; d < full->ndim; d++) kept[d] = ndims == 0 || red[d] ? 1 : full->shape[d];
        g = kn_gb_reshape(b, g, full->ndim, kept);
    }
    return kn_gb_expand(b, g, full->ndim, full->shape);
}

kn_tensor *kn_gb_unslice(kn_gb *b, kn_tensor *x, int dim, int64_t size, int64_t start, int64_t step)
{
    if (!x) return NULL;
    int64_t n = x->shape[dim];
    if (start == 0 && step == 1 && n == size) return x;
    kn_meta m = kn_tensor_meta(x);
    if (n == 0 || step > KN_MAX_INPUTS || x->ndim >= KN_MAX_DIMS || start + (n - 1) * step >= size) {
        /* the general form: a scatter into zeros (index_add's indices are
         * 1-based, as every index of kiln's) */
        m.shape[dim] = size;
        kn_tensor *zeros = kn_gb_zeros_like(b, &m);
        kn_tensor *idx = kn_gb_arange(b, n, (double)(start + 1), (double)step);
        return kn_gb_index_add(b, zeros, dim, idx, x);
    }
    /* Copies instead of a scatter (index_add adds atomically, a pass over
     * zeros first): step - 1 zeros after each element (x and zeros
     * interleaved along a new dim after dim, which a reshape merges, the
     * trailing zeros dropped), then zeros before and after. Each is a cat
     * whose inputs fill whole rows of its output, the device's fast copy. */
    if (step > 1 && n > 1) {
        int64_t u[KN_MAX_DIMS + 1], merged[KN_MAX_DIMS];
        int nd = x->ndim;
        for (int d = 0, k = 0; d < nd; d++) {
            u[k++] = x->shape[d];
            if (d == dim) u[k++] = 1;
            merged[d] = d == dim ? n * step : x->shape[d];
        }
        kn_tensor *xu = kn_gb_reshape(b, x, nd + 1, u);
        kn_tensor *z = kn_gb_full(b, nd + 1, u, 0, x->dtype);
        kn_tensor *parts[KN_MAX_INPUTS] = {xu};
        for (int k = 1; k < step; k++) parts[k] = z;
        kn_tensor *spread = kn_gb_reshape(b, kn_gb_cat(b, (int)step, parts, dim + 1), nd, merged);
        x = kn_gb_slice(b, spread, dim, 0, (n - 1) * step + 1, 1);
        if (!x) return NULL;
        n = (n - 1) * step + 1;
    }
    kn_tensor *parts[3];
    int np = 0;
    int64_t before = start, after = size - start - n;
    if (before > 0) {
        m.shape[dim] = before;
        parts[np++] = kn_gb_full(b, m.ndim, m.shape, 0, x->dtype);
    }
    parts[np++] = x;
    if (after > 0) {
        m.shape[dim] = after;
        parts[np++] = kn_gb_full(b, m.ndim, m.shape, 0, x->dtype);
    }
    return np == 1 ? x : kn_gb_cat(b, np, parts, dim);
}
