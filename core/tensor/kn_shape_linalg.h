/* kn_shape_linalg: the shape rules of the matmul / conv / pool / attention kinds, for
 * kn_op_infer (core/tensor/kn_shape.c).
 *
 * Each rule has kn_op_infer's contract: on success it fills out[0] and
 * returns KN_OK; on failure it returns a status with a message that starts
 * with the op's name and says what was expected and what came. `out` points
 * at KN_MAX_OUTPUTS metas; these kinds have one output. The caller has
 * already checked c->op < KN_OP_COUNT, nothing else.
 */
#ifndef KN_SHAPE_LINALG_H
#define KN_SHAPE_LINALG_H

#include "kn_op.h"

kn_status kn_infer_matmul(const kn_opcall *c, kn_meta *out);
kn_status kn_infer_conv2d(const kn_opcall *c, kn_meta *out);
kn_status kn_infer_conv2d_grad(const kn_opcall *c, kn_meta *out);
kn_status kn_infer_pool2d(const kn_opcall *c, kn_meta *out);
/* scaled_dot_product_attention: q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv]
 * with equal leading dims and one float dtype, an optional bool or float mask
 * broadcastable to [..., Tq, Tk]; out [..., Tq, dv] in q's dtype. */
kn_status kn_infer_attention(const kn_opcall *c, kn_meta *out);

#endif
