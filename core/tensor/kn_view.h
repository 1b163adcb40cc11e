/* kn_view: the views of kn_view_meta, plus the ones that may copy and the
 * copies themselves.
 *
 * reshape copies only when the strides cannot express the new shape (then
 * it returns a contiguous copy, as PyTorch's reshape; kn_view_view refuses
 * instead). Copies run as eager ops (kn_op_eager), so they are profiled and
 * checked like any other op.
 */
#ifndef KN_VIEW_H
#define KN_VIEW_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_op.h"
#include "kn_tensor.h"
#include "kn_view_meta.h"

/* shape may contain one -1 (inferred); a copy runs with the default
 * settings. */
kn_status kn_view_reshape(kn_tensor *t, int ndim, const int64_t *shape, kn_tensor **out);
/* Flatten dims [d0, d1] into one. */
kn_status kn_view_flatten(kn_tensor *t, int64_t d0, int64_t d1, kn_tensor **out);

/* t itself (retained) when it is contiguous, else a contiguous copy (with
 * the default settings: for host data, as the CPU kernels use it); the
 * caller releases *out either way. */
kn_status kn_tensor_contiguous(kn_tensor *t, kn_tensor **out);
/* A view op call (KN_K_VIEW) run on a real tensor, copying first (with
 * c->settings) when a reshape needs it. Used by graph execution. */
kn_status kn_view_run(const kn_opcall *c, kn_tensor **out);

/* A contiguous copy (a new tensor even if t is contiguous), an eager op
 * run with settings (NULL: the defaults). */
kn_status kn_tensor_contiguous_copy(kn_tensor *t, const struct kn_settings *settings, kn_tensor **out);
/* t on device dev (a new reference to t if it is already there); a
 * non-contiguous t is first copied contiguous on its device, with
 * settings. */
kn_status kn_tensor_to_device(kn_tensor *t, kn_device dev, const struct kn_settings *settings, kn_tensor **out);
/* t converted to dtype (a new reference to t if it already has it). */
kn_status kn_tensor_cast(kn_tensor *t, kn_dtype dt, kn_tensor **out);
/* Compare a computed value with a reference: same dtype and shape, each
 * element within rtol * max(1, |reference|), infinities equal, NaN only
 * where the reference has NaN. On a mismatch, what differs goes to why.
 * A device value is read back through kn_tensor_to_device with settings. */
bool kn_tensor_close(const kn_tensor *got, const kn_tensor *want, double rtol, const struct kn_settings *settings,
                     char *why, size_t size);
/* Copy the elements of any CPU view into a contiguous host buffer. */
void kn_tensor_gather_host(const kn_tensor *t, void *dst);

/* A 4-D channels-last tensor {N, H, W, C} (KN_LAYOUT_NHWC) seen as
 * {N, C, H, W} through its strides: a header over t's storage, returned by
 * value, never retained or released (it is valid while t is). The backends'
 * channels-last convolutions hand it to their NCHW code. */
kn_tensor kn_view_nhwc_as_nchw(const kn_tensor *t);
/* The inverse: {N, C, H, W} seen as {N, H, W, C} (an NCHW tensor of one
 * pixel is then the channels-last one, the same bytes). */
kn_tensor kn_view_nchw_as_nhwc(const kn_tensor *t);

#endif
