/* kn_backend: the vtable every executor implements (cpu now, cuda later).
 *
 * core/ dispatches through it and never calls a kernel directly; the CPU
 * backend is the reference every other backend is tested against.
 */
#ifndef KN_BACKEND_H
#define KN_BACKEND_H

#include <stdbool.h>

#include "kn_op.h"

struct kn_kprogram;
struct kn_kernel;

typedef struct kn_backend {
    const char *name;
    kn_device device;
    /* nbytes may be 0 (then *p may be NULL or a unique pointer). */
    kn_status (*alloc)(int64_t nbytes, void **p);
    void (*free)(void *p);
    /* Copy between host memory and this device's memory. */
    kn_status (*to_host)(void *dst, const void *src, int64_t nbytes);
    kn_status (*from_host)(void *dst, const void *src, int64_t nbytes);
    /* Whether `run` can execute this call (op, dtypes, attrs). */
    bool (*supports_op)(const kn_opcall *c);
    /* Compute c->out from c->in; outputs are preallocated, contiguous, with
     * the shapes kn_op_infer gave. Inputs may be any strided view. */
    kn_status (*run)(const kn_opcall *c);
    /* Wait for queued work (no-op on CPU). */
    kn_status (*sync)(void);
    /* Generated code (NULL where the backend has none): compile the
     * POINTWISE and ROW kernels of p (using the persistent cache in
     * cache_dir); fns[i] gets kernel i's entry point (NULL for library and
     * fallback kernels), *lib keeps the code loaded until release_program. */
    kn_status (*compile_program)(const struct kn_kprogram *p, const char *cache_dir, void **lib,
                                 void **fns);
    void (*release_program)(void *lib);
    /* Run one generated kernel: bufs[i] is argument i's first element. */
    kn_status (*launch)(const struct kn_kernel *k, void *fn, char **bufs, const int64_t *sizes);
} kn_backend;

/* The backend for a device, or NULL when it is not built or has no device. */
const kn_backend *kn_backend_get(kn_device dev);

/* Provided by kernels/cpu. */
extern const kn_backend kn_cpu_backend;

#endif
