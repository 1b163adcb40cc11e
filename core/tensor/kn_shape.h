/* kn_shape: shape inference helpers of kn_op_infer (core/tensor/kn_shape.c).
 *
 * kn_op_infer (declared in kn_op.h) is the guard against bad user input: it
 * checks input counts, NULL inputs, dtypes, dims and shapes, and fills the
 * output metadata. On failure a message starts with the op's name and says
 * what was expected and what came. Dims in messages are 1-based (Lua's).
 */
#ifndef KN_SHAPE_H
#define KN_SHAPE_H

#include "kn_op.h"

/* NumPy broadcasting of two shapes (trailing dims aligned; a dim of size 1
 * stretches). On failure: KN_ERR_SHAPE, "<what>: shapes {2,3} and {4,3}
 * cannot be broadcast". `out` may alias neither input. */
kn_status kn_shape_broadcast(const char *what, int na, const int64_t *a, int nb,
                             const int64_t *b, int *nout, int64_t *out);

/* Check that c has `n` inputs (n >= 0) and that none is NULL; the message
 * names the op ("add: expects 2 inputs, got 3"). */
kn_status kn_shape_check_inputs(const kn_opcall *c, int n);

/* A reduction over dims red[0..ndim) that takes the leading dims and keeps
 * the rest (a column reduction: a bias's gradient over the rows, BatchNorm's
 * statistics of a channels-last value): how many leading dims, 1 to
 * ndim - 1; 0 when it is not one. */
int kn_shape_leading_reduced(int ndim, const bool *red);

#endif
