/* kn_pass_merge_projections: a pass of the pass list (kn_passes.h): matmuls
 * of one input by fixed weights (BERT's query, key and value projections)
 * become one matmul whose slices replace them; kn_pass_merge_projections.c
 * describes the rewrite. */
#ifndef KN_PASS_MERGE_PROJECTIONS_H
#define KN_PASS_MERGE_PROJECTIONS_H

#include "kn_pass_ctx.h"

kn_status kn_pass_merge_projections(kn_pass_ctx *x);

#endif
