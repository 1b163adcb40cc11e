/* kn_view: ops that only change a tensor's metadata (no data is copied).
 *
 * All dims are 0-based and may be negative (counted from the end); each
 * function validates its arguments and returns a new view in *out (owned by
 * the caller) sharing t's storage. reshape copies only when the strides
 * cannot express the new shape (then it returns a contiguous copy, as
 * PyTorch's reshape; kn_view_view refuses instead).
 */
#ifndef KN_VIEW_H
#define KN_VIEW_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_op.h"
#include "kn_tensor.h"

/* shape may contain one -1 (inferred). */
kn_status kn_view_reshape(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out);
kn_status kn_view_view(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out);
kn_status kn_view_transpose(kn_tensor *t, int64_t d0, int64_t d1, kn_tensor **out);
kn_status kn_view_permute(kn_tensor *t, int ndim, const int64_t *order, kn_tensor **out);
/* Elements start, start+step, ... < stop along dim (0-based, half-open,
 * already clamped by the caller's convention; negative start/stop count
 * from the end); step >= 1. */
kn_status kn_view_slice(kn_tensor *t, int64_t dim, int64_t start, int64_t stop, int64_t step,
                        kn_tensor **out);
/* Broadcast to shape (size-1 dims get stride 0; new leading dims allowed;
 * -1 keeps a size). */
kn_status kn_view_expand(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out);
kn_status kn_view_unsqueeze(kn_tensor *t, int64_t dim, kn_tensor **out);
/* dim < -ndim-1 or all: squeeze every size-1 dim when all != 0. */
kn_status kn_view_squeeze(kn_tensor *t, int64_t dim, int all, kn_tensor **out);
/* Flatten dims [d0, d1] into one. */
kn_status kn_view_flatten(kn_tensor *t, int64_t d0, int64_t d1, kn_tensor **out);

/* t itself (retained) when it is contiguous, else a contiguous copy; the
 * caller releases *out either way. */
kn_status kn_tensor_contiguous(kn_tensor *t, kn_tensor **out);
/* The view ops of the op table (KN_K_VIEW: reshape, permute, slice,
 * expand) as calls: shape inference from metadata alone, and running one on
 * a real tensor. Used by eager dispatch and by graph execution. */
kn_status kn_view_infer(const kn_opcall *c, kn_meta *out);
kn_status kn_view_run(const kn_opcall *c, kn_tensor **out);

/* A contiguous copy (a new tensor even if t is contiguous). */
kn_status kn_tensor_contiguous_copy(kn_tensor *t, kn_tensor **out);
/* t on device dev (a new reference to t if it is already there). */
kn_status kn_tensor_to_device(kn_tensor *t, kn_device dev, kn_tensor **out);
/* t converted to dtype (a new reference to t if it already has it). */
kn_status kn_tensor_cast(kn_tensor *t, kn_dtype dt, kn_tensor **out);
/* Compare a computed value with a reference: same dtype and shape, each
 * element within rtol * max(1, |reference|), infinities equal, NaN only
 * where the reference has NaN. On a mismatch, what differs goes to why. */
bool kn_tensor_close(const kn_tensor *got, const kn_tensor *want, double rtol, char *why, size_t size);
/* Copy the elements of any CPU view into a contiguous host buffer. */
void kn_tensor_gather_host(const kn_tensor *t, void *dst);

#endif
