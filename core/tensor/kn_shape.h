/* kn_shape: shape inference helpers shared by kn_op_infer (core/tensor/kn_shape.c)
 * and the linear-algebra rules (core/tensor/kn_shape_linalg.c).
 *
 * kn_op_infer (declared in kn_op.h) is the guard against bad user input: it
 * checks input counts, NULL inputs, dtypes, dims and shapes, and fills the
 * output metadata. Each rule below has the same contract: on success it fills
 * out[0] (and out[1] for two-output ops) and returns KN_OK; on failure it
 * returns a status with a message that starts with the op's name and says
 * what was expected and what came. Dims in messages are 1-based (Lua's).
 */
#ifndef KN_SHAPE_H
#define KN_SHAPE_H

#include "kn_op.h"

/* Rules for the matmul / conv / pool kinds, defined in core/tensor/kn_shape_linalg.c.
 * `out` points at KN_MAX_OUTPUTS metas; these kinds have one output. The
 * caller (kn_op_infer) has already checked c->op < KN_OP_COUNT, nothing else. */
kn_status kn_infer_matmul(const kn_opcall *c, kn_meta *out);
kn_status kn_infer_conv2d(const kn_opcall *c, kn_meta *out);
kn_status kn_infer_pool2d(const kn_opcall *c, kn_meta *out);

/* NumPy broadcasting of two shapes (trailing dims aligned; a dim of size 1
 * stretches). On failure: KN_ERR_SHAPE, "<what>: shapes {2,3} and {4,3}
 * cannot be broadcast". `out` may alias neither input. */
kn_status kn_shape_broadcast(const char *what, int na, const int64_t *a, int nb,
                             const int64_t *b, int *nout, int64_t *out);

/* Check that c has `n` inputs (n >= 0) and that none is NULL; the message
 * names the op ("add: expects 2 inputs, got 3"). */
kn_status kn_shape_check_inputs(const kn_opcall *c, int n);

#endif
