/* kn_view_meta: the views that never copy: they only change a tensor's
 * metadata and share its storage.
 *
 * All dims are 0-based and may be negative (counted from the end); each
 * function validates its arguments and returns a new view in *out (owned by
 * the caller) sharing t's storage. Kept apart from kn_view (reshape that may
 * copy, device and dtype copies) because those run ops eagerly, and eager
 * dispatch and shape inference need the views without the copies.
 */
#ifndef KN_VIEW_META_H
#define KN_VIEW_META_H

#include "kn_op.h"
#include "kn_tensor.h"

kn_status kn_view_view(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out);
/* reshape's rules (shape may contain one -1) when t's strides can express
 * the result: *out is NULL (and KN_OK) when only a copy can. */
kn_status kn_view_reshape_nocopy(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out);
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

/* The view ops of the op table (KN_K_VIEW: reshape, permute, slice,
 * expand) as calls. run_nocopy: *out NULL (and KN_OK) for a reshape that
 * needs a copy (kn_view_run makes it). infer: shape inference from
 * metadata alone, with exactly the eager views' rules and messages. */
kn_status kn_view_run_nocopy(const kn_opcall *c, kn_tensor **out);
kn_status kn_view_infer(const kn_opcall *c, kn_meta *out);

#endif
