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
 *    over the rows): a GEMV of ones with the input as {rows, cols}; not
 *    under TF32 for f32, and a bf16/f16 mean only over a power of two of
 *    rows (the 1/rows in the ones must be exact).
 */
#ifndef KN_PASS_REDUCTIONS_H
#define KN_PASS_REDUCTIONS_H

#include "kn_pass_ctx.h"

kn_status kn_pass_split_reductions(kn_pass_ctx *x);

#endif
