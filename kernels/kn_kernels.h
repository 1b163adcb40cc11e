/* kn_kernels: the one place that names every backend kiln is built with.
 *
 * core/ knows backends only through the registry (kn_backend.h); whatever
 * starts kiln (luaopen_kiln, the C tests through t/lib) calls
 * kn_kernels_register once before the first tensor is made. */
#ifndef KN_KERNELS_H
#define KN_KERNELS_H

/* Register the cpu backend and, when built, the cuda one (whose devices are
 * probed on first use). Calling it again does nothing. */
void kn_kernels_register(void);

#endif
