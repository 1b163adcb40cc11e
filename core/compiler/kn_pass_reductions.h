/* kn_pass_reductions: reductions over several dims, split so that the
 * generated row kernels take them (kn_passes.c runs it where the plan's
 * device records: KN_PASSES_SPLIT_REDUCTIONS).
 *
 * A sum, mean or var over several dims has no generated kernel (a row
 * kernel reduces its last dim) and ran in the backend's generic reduction:
 * BatchNorm's statistics over N, H and W and their gradients' sums took
 * 30-100 us each in a convnet's training step on the H200, 5-18% of the
 * memory roof. Two forms are rewritten:
 *  - the last dims reduced (with others, or several of them): the input
 *    viewed with those dims as one, reduced by a row kernel, then the
 *    rest of the dims on what is left (a few elements a channel); var
 *    becomes the mean of the squared deviations from the mean, each split
 *    the same way;
 *  - the leading dims reduced and the rest kept (a bias's gradient, summed
 *    over the rows): a GEMV of ones with the input as {rows, cols}.
 * Both sum in f64, from the input cast as it is read, and round once to
 * the reduction's dtype, as the generic kernel does: a training step's
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
