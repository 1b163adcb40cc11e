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
struct kn_grad_meta; /* below */

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
    struct kn_grad_meta *ag; /* autograd: requires_grad, history, .grad (owned); NULL for most tensors */
    bool saved_alias;        /* a placeholder a tape node saved: counted in its lazy's saved_refs */
    bool kept;               /* its maker hands out this same tensor, unchanged, at every call (an
                                ONNX model's index constants, cached in the model): a capture takes
                                it as a tensor guarded by identity, whose values a plan may fold,
                                even in the call that made it (kiln._keep) */
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

/* A new header over t's data with t's shape and strides but no autograd
 * meta (x:detach(), and the tensors a gradient rule saves): same storage,
 * or, for a placeholder, the same graph value. */
kn_status kn_tensor_alias(const kn_tensor *t, kn_tensor **out);

/* ---- autograd's records ----------------------------------------------
 *
 * core/autograd records the tape and runs backward; these structs live
 * here, with the tensor, for the reason kn_lazy lives below capture: a
 * tensor must drop its history when it is released, and the tensor layer
 * calls no higher one. They are plain data and reference counts.
 *
 * A tensor that takes part in autograd points at one kn_grad_meta (most
 * have none). A leaf that requires grad has a meta without a node; its
 * gradient accumulates in meta->grad. A tensor an op made from inputs that
 * require grad has a meta naming that op's node (fn) and which output it
 * is. A node keeps what its gradient rule reads: the call (op and
 * attributes), its inputs' and outputs' shapes, the tensors the rule saves
 * (aliases without history, so no cycle) with the storage versions they
 * had, and an edge per input: that input's meta, or NULL where the input
 * needs no gradient. */

#define KN_GRAD_MAX_IN 8  /* KN_MAX_INPUTS of kn_op.h (core/autograd checks they agree) */
#define KN_GRAD_MAX_OUT 2 /* KN_MAX_OUTPUTS */
#define KN_GRAD_WHERE_MAX 96

/* Why a tensor that does not require grad has a meta at all: so that
 * backward from it can say why it has no history. */
typedef enum kn_grad_origin {
    KN_GRAD_ORIGIN_NONE = 0,
    KN_GRAD_ORIGIN_NONDIFF, /* an op without a derivative (nondiff_op) made it from tensors that require grad */
    KN_GRAD_ORIGIN_NO_GRAD, /* made inside kiln.no_grad from tensors that require grad */
    KN_GRAD_ORIGIN_COMPILED, /* made by a compiled call that kept no values for a backward outside it */
    KN_GRAD_ORIGIN_MOVED,    /* copied to another device (x:to), which records no gradient yet */
    KN_GRAD_ORIGIN_SPENT     /* returned by a compiled call whose own backward went through it */
} kn_grad_origin;

struct kn_grad_node;
struct kn_opcall;

typedef struct kn_grad_meta {
    int refcount;
    bool requires_grad;
    struct kn_grad_node *fn; /* the node that made this tensor; NULL for a leaf (owned reference) */
    int out_index;           /* which output of fn */
    kn_tensor *grad;         /* a leaf's accumulated gradient (owned), or NULL */
    kn_grad_origin origin;   /* without requires_grad: why there is no history */
    int nondiff_op;          /* KN_GRAD_ORIGIN_NONDIFF: the op (a kn_op) */
    int nondiff_dtype;       /* and the dtype of its output (a kn_dtype) */
    uint64_t visit;          /* the backward pass that saw it last, and its slot there */
    int slot;
} kn_grad_meta;

typedef struct kn_grad_node {
    int refcount;
    uint64_t seq;             /* recording order: every input's node has a smaller one */
    struct kn_opcall *call;   /* op and attributes (owned, plain data; its in[] are not used) */
    int n_in, n_out;
    kn_meta in_meta[KN_GRAD_MAX_IN];
    kn_meta out_meta[KN_GRAD_MAX_OUT];
    kn_grad_meta *edge[KN_GRAD_MAX_IN]; /* owned references; NULL: the input needs no gradient */
    kn_tensor *saved_in[KN_GRAD_MAX_IN];   /* what the rule reads (aliases, owned) or NULL */
    kn_tensor *saved_out[KN_GRAD_MAX_OUT];
    uint64_t in_version[KN_GRAD_MAX_IN], out_version[KN_GRAD_MAX_OUT];
    kn_device device;         /* where the op ran: its gradients are made there */
    bool freed;               /* a backward without retain_graph released saved tensors (a node
                                 that saved none can run again) */
    char where[KN_GRAD_WHERE_MAX]; /* the user's line that ran the op ("" unknown) */
    uint64_t visit;
    int slot;
} kn_grad_node;

/* New zeroed records with refcount 1 (a meta's nondiff_op is -1, its slot
 * -1); NULL when out of memory. */
kn_grad_meta *kn_grad_meta_new(void);
kn_grad_node *kn_grad_node_new(void);

/* Bytes this thread allocated for tensors (headers, storage on any
 * device) and autograd nodes since the last call, which returns them and
 * starts again at 0. A garbage-collected front end (scripting/) paces its
 * collector with it: it sees a tensor as a few bytes of handle, not the
 * memory behind it, nor the autograd history a result keeps alive. */
int64_t kn_alloc_pressure_take(void);
void kn_grad_meta_retain(kn_grad_meta *m);
/* Drop one reference (NULL is fine). The last one releases the gradient,
 * the node and every node only it kept, in a loop rather than by
 * recursion: a tape of a million ops must not nest a million calls. */
void kn_grad_meta_release(kn_grad_meta *m);
void kn_grad_node_release(kn_grad_node *n);
/* Release a node's saved tensors (a backward without retain_graph),
 * marking it freed if it had any; its edges stay, so the graph can still
 * be walked. */
void kn_grad_node_free_saved(kn_grad_node *n);

#endif
