/* kn_grad_build: what gradient rules are written with. Private to
 * core/autograd.
 *
 * A rule computes its inputs' gradients from its outputs' gradients with
 * kiln's own ops, each made through the builder (kn_gb), which runs it
 * through the backward's executor: eagerly, or into the graph a compiled
 * training step captures. Every helper returns a tensor the builder owns
 * (released when the rule is done) and, once any op has failed, NULL
 * without running anything: the first error stays in b->st. So a rule is
 * a chain of calls with no error checks, and a NULL operand is fine.
 *
 * Dims are 0-based, as in kn_opcall attributes.
 */
#ifndef KN_GRAD_BUILD_H
#define KN_GRAD_BUILD_H

#include "kn_autograd_types.h"

/* How the builder runs each op: kn_autograd_run, handed in by the backward
 * pass (the builder sits below the recording entry it calls). */
typedef kn_status (*kn_gb_runner)(kn_autograd *ag, kn_exec *ex, kn_opcall *c, kn_device dev);

typedef struct kn_gb {
    kn_gb_runner run;
    kn_autograd *ag;
    kn_exec *ex;
    kn_device dev;   /* where the node's op ran */
    kn_status st;    /* the first failure, KN_OK until then */
    kn_tensor **tmp; /* every tensor a helper made (owned) */
    int n_tmp, cap_tmp;
} kn_gb;

/* A gradient rule: given the node and its outputs' gradients (gout[k] is
 * never NULL for a float output), set gin[i] for every input i with
 * n->edge[i] != NULL (the builder's tensors; the engine retains them). A
 * gradient may have the input's shape only after broadcasting was undone
 * (kn_gb_sum_to) and any float dtype (the engine casts it). */
typedef void (*kn_grad_rule)(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin);

/* What a rule reads, besides the call and the shapes: KN_SAVE_IN(i) for
 * input i, KN_SAVE_OUT(k) for output k. */
#define KN_SAVE_IN(i) (1u << (i))
#define KN_SAVE_INS 0xffu
#define KN_SAVE_OUT(k) (1u << (8 + (k)))

/* The op's call as recorded (attributes in n->call->a). */
#define KN_NEED(n, i) ((n)->edge[i] != NULL)

void kn_gb_init(kn_gb *b, kn_gb_runner run, kn_autograd *ag, kn_exec *ex, kn_device dev);
/* Release every tensor the builder still owns. */
void kn_gb_done(kn_gb *b);
/* Fail the rule with a message (the first failure wins); returns NULL. */
kn_tensor *kn_gb_fail(kn_gb *b, kn_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Run a prepared call (inputs may be NULL after a failure); its first
 * output, owned by the builder (its second in *second when asked). */
kn_tensor *kn_gb_call(kn_gb *b, kn_opcall *c, kn_tensor **second);

kn_tensor *kn_gb_unary(kn_gb *b, kn_op op, kn_tensor *x);
kn_tensor *kn_gb_binary(kn_gb *b, kn_op op, kn_tensor *x, kn_tensor *y);
kn_tensor *kn_gb_add(kn_gb *b, kn_tensor *x, kn_tensor *y);
kn_tensor *kn_gb_sub(kn_gb *b, kn_tensor *x, kn_tensor *y);
kn_tensor *kn_gb_mul(kn_gb *b, kn_tensor *x, kn_tensor *y);
kn_tensor *kn_gb_div(kn_gb *b, kn_tensor *x, kn_tensor *y);
/* x * v, x + v for a number v (a 0-dim tensor of x's dtype) */
kn_tensor *kn_gb_muls(kn_gb *b, kn_tensor *x, double v);
kn_tensor *kn_gb_adds(kn_gb *b, kn_tensor *x, double v);
/* A 0-dim tensor holding v, of dtype dt, on the node's device. */
kn_tensor *kn_gb_scalar(kn_gb *b, double v, kn_dtype dt);
kn_tensor *kn_gb_full(kn_gb *b, int ndim, const int64_t *shape, double v, kn_dtype dt);
kn_tensor *kn_gb_zeros_like(kn_gb *b, const kn_meta *m);
/* start, start + step, ... (n values), i64 */
kn_tensor *kn_gb_arange(kn_gb *b, int64_t n, double start, double step);
/* A constant of host values (row-major doubles) moved to the device. */
kn_tensor *kn_gb_host(kn_gb *b, kn_dtype dt, int ndim, const int64_t *shape, const double *values);
kn_tensor *kn_gb_cast(kn_gb *b, kn_tensor *x, kn_dtype dt);
kn_tensor *kn_gb_where(kn_gb *b, kn_tensor *cond, kn_tensor *x, kn_tensor *y);
/* x with zeros where mask is true */
kn_tensor *kn_gb_zero_where(kn_gb *b, kn_tensor *x, kn_tensor *mask);
/* sum (or op: mean, amax) over dims (0-based; ndims 0: all) */
kn_tensor *kn_gb_reduce(kn_gb *b, kn_op op, kn_tensor *x, int ndims, const int *dims, bool keepdim);
kn_tensor *kn_gb_sum(kn_gb *b, kn_tensor *x, int ndims, const int *dims, bool keepdim);
kn_tensor *kn_gb_softmax(kn_gb *b, kn_op op, kn_tensor *x, int dim);
kn_tensor *kn_gb_reshape(kn_gb *b, kn_tensor *x, int ndim, const int64_t *shape);
kn_tensor *kn_gb_reshape_meta(kn_gb *b, kn_tensor *x, const kn_meta *m);
kn_tensor *kn_gb_permute(kn_gb *b, kn_tensor *x, const int *order);
/* swap the last two dims */
kn_tensor *kn_gb_mT(kn_gb *b, kn_tensor *x);
kn_tensor *kn_gb_expand(kn_gb *b, kn_tensor *x, int ndim, const int64_t *shape);
kn_tensor *kn_gb_slice(kn_gb *b, kn_tensor *x, int dim, int64_t start, int64_t stop, int64_t step);
kn_tensor *kn_gb_matmul(kn_gb *b, kn_tensor *x, kn_tensor *y);
kn_tensor *kn_gb_cat(kn_gb *b, int n, kn_tensor *const *xs, int dim);
kn_tensor *kn_gb_index_select(kn_gb *b, kn_tensor *x, int dim, kn_tensor *idx);
kn_tensor *kn_gb_index_add(kn_gb *b, kn_tensor *x, int dim, kn_tensor *idx, kn_tensor *src);
kn_tensor *kn_gb_contiguous(kn_gb *b, kn_tensor *x);

/* Sum a broadcast gradient back to shape m: leading dims summed away,
 * dims of size 1 in m summed with keepdim. */
kn_tensor *kn_gb_sum_to(kn_gb *b, kn_tensor *g, const kn_meta *m);
/* g, a reduction's gradient of shape `reduced` (dims removed unless
 * keepdim), reshaped with those dims kept and expanded to `full`. */
kn_tensor *kn_gb_unreduce(kn_gb *b, kn_tensor *g, const kn_meta *full, int ndims, const int *dims, bool keepdim);
/* Place x along dim at positions start, start + step, ... of a tensor of
 * size `size` there (zeros elsewhere): the gradient of a strided slice. */
kn_tensor *kn_gb_unslice(kn_gb *b, kn_tensor *x, int dim, int64_t size, int64_t start, int64_t step);

#endif
