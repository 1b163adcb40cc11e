/* kn_pass_attention: the attention pass of the pass list (kn_passes.h):
 * matmul(q, k^T) [-> scale] [-> mask] -> softmax(last dim) -> matmul(., v)
 * becomes one scaled_dot_product_attention node. kn_pass_attention.c
 * describes what matches; a chain that does not says why in x->notes. */
#ifndef KN_PASS_ATTENTION_H
#define KN_PASS_ATTENTION_H

#include "kn_pass_ctx.h"

kn_status kn_pass_attention(kn_pass_ctx *x);
/* after fold_once: an attention node whose mask is now a fixed value
 * holding the causal pattern takes the causal attribute instead */
kn_status kn_pass_attention_causal_masks(kn_pass_ctx *x);

#endif
