/* kn_kernels: the one place that names every backend kiln is built with.
 *
 * core/ knows backends only through the registry (kn_backend.h); whatever
 * starts kiln (the Lua module's entry in scripting/, the C tests through t/lib) calls
 * kn_kernels_register once before the first tensor is made. */
#ifndef KN_KERNELS_H
#define KN_KERNELS_H

#include "cpu/kn_cpu_render.h"
#include "cuda/kn_cuda_render.h"

/* Register the cpu backend and, when built, the cuda one (whose devices are
 * probed on first use). Calling it again does nothing. */
void kn_kernels_register(void);

/* The backends' render targets, by name, for code that renders without a
 * device at hand (cm:source, tests). The CUDA target is plain C and is
 * built even without the CUDA toolkit, so CUDA source can be written and
 * read anywhere. */
#define KN_TARGET_C (&kn_cpu_render_target)
#define KN_TARGET_CUDA (&kn_cuda_render_target)

#endif
