/* kn_pass_reductions: reductions over several dims, split so that the
 * generated row kernels take them (kn_passes.c runs it where the plan's
 * device records: KN_PASSES_SPLIT_REDUCTIONS).
 *
 * A sum, mean or var over several dims has no generated kernel (a row
 * kernel reduces its last dim) and ran in the backend's generic reduction:
 * BatchNorm's statistics over N, H and W and their gradients' sums took
 * 30-100 us each in a convnet's training step on the H200, 5-18% of the
 * memory roof. The last dims reduced (with others, or several of them)
 * are rewritten: the input viewed with those dims as one, reduced by a row
 * kernel, then the rest of the dims on what is left (a few elements a
 * channel); var becomes the mean of the squared deviations from the mean,
 * each split the same way. A sum over the leading dims with the rest kept
 * (a bias's gradient, summed over the rows) is left to the backend, whose
 * column kernel reads the input once (on the GPU: kn_reduce_cols; it was
 * a cast to f64 and a GEMV of ones here, which read and wrote the input's
 * f64 copy: 105 us of a bf16 transformer training step on the H200).
 * A reduction of the layout pass's NCHW view of an NHWC value over N, H
 * and W (BatchNorm's statistics and their gradients' sums in a channels-
 * last training step) becomes one over the NHWC value's leading dims,
 * the backend's column reduction: the view's rows would run a channel
 * row apart in memory. Where that value is a widening cast of a half
 * value (autocast's f32 statistics), the column reduction reads the half
 * value and writes the wider result (attr widen), and the cast's copy is
 * not made.
 * The split sums in f64, from the input cast as it is read, and rounds
 * once to the reduction's dtype, as the generic kernel does: a training step's
 * compiled sums then equal its eager ones to the last bit nearly always.
 * Rounded at each stage, the f32 sums differed from eager's in their last
 * bits, and Adam, which divides a gradient by its own size, turned that
 * into parameters 0.01 apart after 20 steps of a conv net, where
 * BatchNorm leaves a conv's bias a gradient of rounding noise.
 */
#ifndef KN_PASS_REDUCTIONS_H
#define KN_PASS_REDUCTIONS_H

#include "kn_pass_ctx.h"

kn_status kn_pass_split_reductions(kn_pass_ctx *x);

#endif
