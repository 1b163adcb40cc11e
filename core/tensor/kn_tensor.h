/* kn_tensor: strided views over refcounted storage.
 *
 * A tensor is (storage, offset, shape, strides, dtype). Views (reshape of a
 * contiguous tensor, transpose, permute, slice, expand) share the storage and
 * only change the metadata. Strides and offsets are in elements, not bytes.
 * Both storages and tensors are refcounted: kn_tensor_retain / _release.
 * Shapes may hold zero-sized dims; a 0-dim tensor is a scalar.
 */
#ifndef KN_TENSOR_H
#define KN_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "kn_device.h"
#include "kn_dtype.h"
#include "kn_status.h"

#define KN_MAX_DIMS 8
/* No tensor may hold more bytes than this: it bounds every size computation,
 * so a huge size from Lua gives an error instead of an overflow. */
#define KN_MAX_BYTES ((int64_t)1 << 40)

typedef struct kn_storage {
    int refcount;
    kn_device device;
    int64_t nbytes;
    void *data;    /* owned (freed through the device's backend) unless borrowed */
    bool borrowed; /* data belongs to someone else (a plan's arena): never freed here */
    /* the write version: a new storage takes a number no storage had, and
     * every in-place write (kn_storage_written) takes a new one, so a
     * compiled plan that baked these values (a folded batch norm) knows,
     * from (storage, version), whether they are still the same */
    uint64_t version;
} kn_storage;

struct kn_lazy; /* kn_lazy.h */

typedef struct kn_tensor {
    int refcount;
    uint64_t id; /* unique per tensor header: identity for guards */
    kn_dtype dtype;
    int ndim;
    int64_t shape[KN_MAX_DIMS];
    int64_t strides[KN_MAX_DIMS]; /* in elements */
    int64_t offset;               /* in elements */
    kn_storage *storage;   /* NULL for a traced placeholder */
    struct kn_lazy *lazy;  /* set on a traced placeholder: the graph value it stands for */
} kn_tensor;


/* Shape-only description of a tensor (what shape inference produces). */
typedef struct kn_meta {
    kn_dtype dtype;
    int ndim;
    int64_t shape[KN_MAX_DIMS];
} kn_meta;

/* A placeholder: shape and dtype only, standing for a value of a graph being
 * captured (see kn_capture.h). Takes over one reference of lazy. */
kn_status kn_tensor_new_placeholder(const kn_meta *m, struct kn_lazy *lazy, kn_tensor **out);

/* The id the next tensor header will get: ids only grow, so a tensor with
 * an id at least this was made after this call. */
uint64_t kn_tensor_next_id(void);

/* Number of elements of a shape (1 for ndim 0). */
int64_t kn_numel_of(int ndim, const int64_t *shape);
int64_t kn_tensor_numel(const kn_tensor *t);

/* Check a shape from the user: 0 <= ndim <= KN_MAX_DIMS, no negative dim,
 * total bytes within KN_MAX_BYTES. `what` names the op in the message. */
kn_status kn_shape_check(const char *what, int ndim, const int64_t *shape, kn_dtype dt);

/* New contiguous tensor with uninitialized (CPU: zeroed) storage on `dev`.
 * Returns a tensor with refcount 1 in *out, owned by the caller. */
kn_status kn_tensor_new(kn_dtype dt, int ndim, const int64_t *shape, kn_device dev,
                        kn_tensor **out);
kn_status kn_tensor_new_meta(const kn_meta *m, kn_device dev, kn_tensor **out);

/* A contiguous tensor over memory the caller owns and keeps alive longer
 * than the tensor (a compiled plan's arena); releasing it never frees data. */
kn_status kn_tensor_new_borrowed(const kn_meta *m, void *data, kn_device dev, kn_tensor **out);

/* New tensor header sharing t's storage (refcount of the storage is bumped);
 * shape and strides as given. Used by every view op. */
kn_status kn_tensor_view_of(const kn_tensor *t, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset, kn_tensor **out);

/* Every in-place write to a storage's bytes (copy_, a load into an
 * existing tensor) calls this after writing: values baked from it are stale. */
void kn_storage_written(kn_storage *s);

void kn_tensor_retain(kn_tensor *t);
void kn_tensor_release(kn_tensor *t); /* NULL is fine */

bool kn_tensor_is_contiguous(const kn_tensor *t);
kn_device kn_tensor_device(const kn_tensor *t);
/* Pointer to element 0 of the view (CPU tensors only). */
void *kn_tensor_data(const kn_tensor *t);
kn_meta kn_tensor_meta(const kn_tensor *t);

/* Contiguous strides of a shape. */
void kn_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

/* "{2,3}" into buf; returns buf. */
const char *kn_shape_str(int ndim, const int64_t *shape, char *buf, int bufsize);

/* Normalize a 0-based dim that may be negative (counting from the end) against
 * ndim; KN_ERR_ARG naming `what` if out of range. */
kn_status kn_norm_dim(const char *what, int64_t dim, int ndim, int *out);

#endif
