/* kn_pass_gather_scatter: the message-passing pass of the pass list
 * (kn_passes.h): index_add(base, 1, dst, index_select(h, 1, src) [* w])
 * becomes one gather_scatter node, a zero base folded in.
 * kn_pass_gather_scatter.c describes what matches; an index_add that does
 * not says why in x->notes. */
#ifndef KN_PASS_GATHER_SCATTER_H
#define KN_PASS_GATHER_SCATTER_H

#include "kn_pass_ctx.h"

kn_status kn_pass_gather_scatter(kn_pass_ctx *x);

#endif
