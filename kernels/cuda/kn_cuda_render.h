/* kn_cuda_render: the CUDA backend's render target (kn_cuda_render_target) and its prelude. */
#ifndef KN_CUDA_RENDER_H
#define KN_CUDA_RENDER_H

#include "kn_kir.h"

/* Built even without the CUDA toolkit (cm:source "cuda" anywhere). */
extern const kn_render_target kn_cuda_render_target;

/* The CUDA target's prelude (types, bf16/f16 bit code, helpers; no
 * includes), for the hand-written templates that share it; rendered once,
 * static storage; NULL on OOM. */
const char *kn_cuda_render_prelude(void);

#endif
