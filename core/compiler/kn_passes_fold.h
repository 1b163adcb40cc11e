/* kn_passes_fold: the folding passes of the pass list (kn_passes.h says
 * what each guarantees): fold_constants, fold_batch_norm and fold_once. */
#ifndef KN_PASSES_FOLD_H
#define KN_PASSES_FOLD_H

#include "kn_pass_ctx.h"

kn_status kn_pass_fold_constants(kn_pass_ctx *x);
kn_status kn_pass_fold_batch_norm(kn_pass_ctx *x);
kn_status kn_pass_fold_once(kn_pass_ctx *x);

#endif
