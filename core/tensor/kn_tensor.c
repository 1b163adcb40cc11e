/* kn_tensor: tensor and storage lifetime, shapes and views, and the
 * reference counts of autograd's records (kn_grad_meta, kn_grad_node). */
#include "kn_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_lazy.h"

static uint64_t kn_next_tensor_id = 1;
static uint64_t kn_next_storage_version = 1; /* shared by all storages: (storage, version) is never reused */

/* kn_alloc_pressure_take's count: per thread, no lock (the front end's
 * thread makes almost every tensor; others' are not counted) */
static _Thread_local int64_t alloc_pressure;

int64_t kn_alloc_pressure_take(void)
{
    int64_t b = alloc_pressure;
    alloc_pressure = 0;
    return b;
}

void kn_storage_written(kn_storage *s)
{
    if (s) s->version = kn_next_storage_version++;
}

uint64_t kn_tensor_next_id(void)
{
    return kn_next_tensor_id;
}

int64_t kn_numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

int64_t kn_tensor_numel(const kn_tensor *t)
{
    return kn_numel_of(t->ndim, t->shape);
}

const char *kn_shape_str(int ndim, const int64_t *shape, char *buf, int bufsize)
{
    int n = snprintf(buf, (size_t)bufsize, "{");
    for (int i = 0; i < ndim && n < bufsize; i++)
        n += snprintf(buf + n, (size_t)(bufsize - n), i ? ",%lld" : "%lld", (long long)shape[i]);
    if (n < bufsize) snprintf(buf + n, (size_t)(bufsize - n), "}");
    return buf;
}

kn_status kn_shape_check(const char *what, int ndim, const int64_t *shape, kn_dtype dt)
{
    if (ndim < 0 || ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_SHAPE, "%s: a tensor has at most %d dims, got %d", what,
                        KN_MAX_DIMS, ndim);
    int64_t bytes = (int64_t)kn_dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return kn_error(KN_ERR_SHAPE, "%s: size %lld at dim %d is negative", what,
                            (long long)shape[i], i + 1);
        if (shape[i] > 0 && bytes > KN_MAX_BYTES / shape[i])
            return kn_error(KN_ERR_OOM, "%s: a tensor of that shape would exceed %lld bytes",
                            what, (long long)KN_MAX_BYTES);
        bytes *= shape[i] ? shape[i] : 1;
    }
    return KN_OK;
}

void kn_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

/* A contiguous tensor and its storage over `data` (NULL: allocate it on
 * dev; else borrowed memory the caller keeps alive). */
static kn_status new_tensor(kn_dtype dt, int ndim, const int64_t *shape, kn_device dev, void *data,
                            kn_tensor **out)
{
    *out = NULL;
    KN_TRY(kn_shape_check("tensor", ndim, shape, dt));
    kn_device_ctx *d = kn_backend_get(dev);
    if (!d) return kn_backend_missing(dev, NULL);
    kn_tensor *t = calloc(1, sizeof *t);
    kn_storage *s = calloc(1, sizeof *s);
    if (!t || !s) {
        free(t);
        free(s);
        return kn_error(KN_ERR_OOM, "out of host memory for a tensor header");
    }
    alloc_pressure += (int64_t)(sizeof *t + sizeof *s) + (data ? 0 : kn_numel_of(ndim, shape) * (int64_t)kn_dtype_size(dt));
    s->refcount = 1;
    s->device = dev;
    s->nbytes = kn_numel_of(ndim, shape) * (int64_t)kn_dtype_size(dt);
    s->data = data;
    s->borrowed = data != NULL;
    s->version = kn_next_storage_version++;
    if (!data) {
        kn_status st = d->be->alloc(d, s->nbytes, &s->data);
        if (st != KN_OK) {
            free(t);
            free(s);
            return st;
        }
    }
    t->refcount = 1;
    t->id = kn_next_tensor_id++;
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim > 0) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    kn_contiguous_strides(ndim, shape, t->strides);
    t->storage = s;
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_new(kn_dtype dt, int ndim, const int64_t *shape, kn_device dev,
                        kn_tensor **out)
{
    return new_tensor(dt, ndim, shape, dev, NULL, out);
}

kn_status kn_tensor_new_borrowed(const kn_meta *m, void *data, kn_device dev, kn_tensor **out)
{
    if (!data) return kn_error(KN_ERR_ARG, "tensor: borrowed memory is NULL");
    return new_tensor(m->dtype, m->ndim, m->shape, dev, data, out);
}

kn_status kn_tensor_new_meta(const kn_meta *m, kn_device dev, kn_tensor **out)
{
    return kn_tensor_new(m->dtype, m->ndim, m->shape, dev, out);
}

kn_status kn_tensor_view_of(const kn_tensor *t, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset, kn_tensor **out)
{
    *out = NULL;
    if (ndim < 0 || ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_SHAPE, "view: a tensor has at most %d dims, got %d",
                        KN_MAX_DIMS, ndim);
    if (!t->storage)
        return kn_error(KN_ERR_ARG, "view: this tensor is a traced value with no data yet");
    kn_tensor *v = calloc(1, sizeof *v);
    alloc_pressure += (int64_t)sizeof *v;
    if (!v) return kn_error(KN_ERR_OOM, "out of host memory for a tensor header");
    v->refcount = 1;
    v->id = kn_next_tensor_id++;
    v->dtype = t->dtype;
    v->ndim = ndim;
    if (ndim > 0) { /* a scalar view may come with NULL arrays */
        memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
        memcpy(v->strides, strides, sizeof(int64_t) * (size_t)ndim);
    }
    v->offset = offset;
    v->storage = t->storage;
    v->storage->refcount++;
    *out = v;
    return KN_OK;
}

kn_status kn_tensor_new_placeholder(const kn_meta *m, struct kn_lazy *lazy, kn_tensor **out)
{
    kn_tensor *t = calloc(1, sizeof *t);
    if (!t) return kn_error(KN_ERR_OOM, "out of host memory for a tensor header");
    t->refcount = 1;
    t->id = kn_next_tensor_id++;
    t->dtype = m->dtype;
    t->ndim = m->ndim;
    memcpy(t->shape, m->shape, sizeof t->shape);
    kn_contiguous_strides(m->ndim, m->shape, t->strides);
    t->lazy = lazy;
    *out = t;
    return KN_OK;
}

void kn_tensor_retain(kn_tensor *t)
{
    if (t) t->refcount++;
}

void kn_tensor_release(kn_tensor *t)
{
    if (!t || --t->refcount > 0) return;
    if (t->ag) kn_grad_meta_release(t->ag);
    if (t->lazy && t->saved_alias) t->lazy->saved_refs--;
    if (t->lazy) kn_tensor_release(kn_lazy_release(t->lazy));
    kn_storage *s = t->storage;
    if (s && --s->refcount == 0) {
        kn_device_ctx *d = kn_backend_get(s->device);
        if (d && !s->borrowed) d->be->free(d, s->data);
        free(s);
    }
    free(t);
}

kn_status kn_tensor_alias(const kn_tensor *t, kn_tensor **out)
{
    *out = NULL;
    if (t->storage) return kn_tensor_view_of(t, t->ndim, t->shape, t->strides, t->offset, out);
    if (!t->lazy) return kn_error(KN_ERR_ARG, "alias: the tensor has neither data nor a traced value");
    kn_meta m = kn_tensor_meta(t);
    KN_TRY(kn_tensor_new_placeholder(&m, t->lazy, out));
    t->lazy->refcount++; /* the new placeholder holds its own reference */
    return KN_OK;
}

bool kn_tensor_is_contiguous(const kn_tensor *t)
{
    if (kn_tensor_numel(t) == 0) return true; /* no element to be out of place */
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

kn_device kn_tensor_device(const kn_tensor *t)
{
    if (!t->storage) {
        if (!t->lazy) return KN_CPU;
        return t->lazy->value ? kn_tensor_device(t->lazy->value) : t->lazy->device;
    }
    return t->storage->device;
}

void *kn_tensor_data(const kn_tensor *t)
{
    return (char *)t->storage->data + t->offset * (int64_t)kn_dtype_size(t->dtype);
}

kn_meta kn_tensor_meta(const kn_tensor *t)
{
    kn_meta m;
    m.dtype = t->dtype;
    m.ndim = t->ndim;
    memcpy(m.shape, t->shape, sizeof m.shape);
    return m;
}

kn_status kn_norm_dim(const char *what, int64_t dim, int ndim, int *out)
{
    int n = ndim > 0 ? ndim : 1; /* a scalar accepts dim 0 / -1, as PyTorch */
    if (dim < -n || dim >= n)
        return kn_error(KN_ERR_ARG, "%s: dim %lld out of range for a tensor with %d dims", what,
                        (long long)(dim >= 0 ? dim + 1 : dim), ndim);
    *out = (int)(dim < 0 ? dim + n : dim);
    return KN_OK;
}

/* ---- autograd's records ---- */

kn_grad_meta *kn_grad_meta_new(void)
{
    kn_grad_meta *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->refcount = 1;
    m->nondiff_op = -1;
    m->slot = -1;
    return m;
}

kn_grad_node *kn_grad_node_new(void)
{
    kn_grad_node *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    alloc_pressure += (int64_t)sizeof *n;
    n->refcount = 1;
    n->slot = -1;
    return n;
}

void kn_grad_meta_retain(kn_grad_meta *m)
{
    if (m) m->refcount++;
}

void kn_grad_node_free_saved(kn_grad_node *n)
{
    for (int i = 0; i < KN_GRAD_MAX_IN; i++) {
        n->freed |= n->saved_in[i] != NULL;
        kn_tensor_release(n->saved_in[i]);
        n->saved_in[i] = NULL;
    }
    for (int k = 0; k < KN_GRAD_MAX_OUT; k++) {
        n->freed |= n->saved_out[k] != NULL;
        kn_tensor_release(n->saved_out[k]);
        n->saved_out[k] = NULL;
    }
}

/* The nodes whose last reference went while others were freed. */
typedef struct {
    kn_grad_node **items;
    int n, cap;
} node_list;

static void drop_meta(kn_grad_meta *m, node_list *todo);

static void free_node(kn_grad_node *n, node_list *todo)
{
    kn_grad_node_free_saved(n);
    for (int i = 0; i < KN_GRAD_MAX_IN; i++) drop_meta(n->edge[i], todo);
    free(n->call);
    free(n);
}

/* Where the list cannot grow (out of memory) the node is freed at once,
 * by recursion, which is deep only for a long tape. */
static void drop_node(kn_grad_node *n, node_list *todo)
{
    if (!n || --n->refcount > 0) return;
    if (todo->n == todo->cap) {
        int cap = todo->cap ? todo->cap * 2 : 64;
        kn_grad_node **items = realloc(todo->items, sizeof *items * (size_t)cap);
        if (!items) {
            free_node(n, todo);
            return;
        }
        todo->items = items;
        todo->cap = cap;
    }
    todo->items[todo->n++] = n;
}

static void drop_meta(kn_grad_meta *m, node_list *todo)
{
    if (!m || --m->refcount > 0) return;
    kn_tensor_release(m->grad); /* a gradient carries no meta: no recursion */
    drop_node(m->fn, todo);
    free(m);
}

static void drain(node_list *todo)
{
    while (todo->n > 0) free_node(todo->items[--todo->n], todo);
    free(todo->items);
}

void kn_grad_meta_release(kn_grad_meta *m)
{
    node_list todo = {0};
    drop_meta(m, &todo);
    drain(&todo);
}

void kn_grad_node_release(kn_grad_node *n)
{
    node_list todo = {0};
    drop_node(n, &todo);
    drain(&todo);
}
