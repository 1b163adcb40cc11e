/* kn_pass_recompute: the partitioner's trade of memory for time in a
 * training step's joint graph (kn_passes.h's list): with
 * kiln.config.activation_memory_budget below 1, cheap pointwise forward
 * values the backward reads are computed again in the backward from the
 * values it keeps anyway, instead of being kept from the forward to the
 * backward. */
#ifndef KN_PASS_RECOMPUTE_H
#define KN_PASS_RECOMPUTE_H

#include "kn_pass_ctx.h"

kn_status kn_pass_recompute(kn_pass_ctx *x);

#endif
