/* kn_pass_channels_last: the layout pass of the pass list (kn_passes.h):
 * convolution chains run NHWC where the flags ask for it (KN_PASSES_NHWC_*),
 * entered and left through permute views. kn_pass_channels_last.c
 * describes the rewrite; what it converts or leaves alone, and why, goes
 * to x->notes. */
#ifndef KN_PASS_CHANNELS_LAST_H
#define KN_PASS_CHANNELS_LAST_H

#include "kn_pass_ctx.h"

kn_status kn_pass_channels_last(kn_pass_ctx *x);

#endif
