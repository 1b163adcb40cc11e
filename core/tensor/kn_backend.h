/* kn_backend: the vtable every executor implements (kernels/cpu, kernels/cuda).
 *
 * core/ dispatches through it and never calls a kernel directly; the CPU
 * backend is the reference every other backend is tested against.
 */
#ifndef KN_BACKEND_H
#define KN_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_device.h"
#include "kn_dtype.h"
#include "kn_status.h"

/* Pointers only: kn_tensor.c frees storage through this header, so it must
 * not pull in the op table (which needs the tensor type). */
typedef struct kn_opcall kn_opcall;
typedef struct kn_tensor kn_tensor;
struct kn_kprogram;
struct kn_kernel;
struct kn_render_target;

typedef struct kn_backend {
    const char *name;
    kn_device device;
    /* nbytes may be 0 (then *p may be NULL or a unique pointer). */
    kn_status (*alloc)(int64_t nbytes, void **p);
    void (*free)(void *p);
    /* Copy between host memory and this device's memory. */
    kn_status (*to_host)(void *dst, const void *src, int64_t nbytes);
    kn_status (*from_host)(void *dst, const void *src, int64_t nbytes);
    /* Copy within this device's memory, queued in order with the kernels. */
    kn_status (*copy)(void *dst, const void *src, int64_t nbytes);
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
    /* What compile_program's source is written for (kn_kir.h): the
     * renderer reads it, so core never maps a device to a language. NULL
     * where the backend has no generated code. */
    const struct kn_render_target *render_target;
    /* Run one generated kernel: bufs[i] is argument i's first element. */
    kn_status (*launch)(const struct kn_kernel *k, void *fn, char **bufs, const int64_t *sizes);
    /* A library op (c->out[0] preallocated) with its epilogue in the
     * library call. Matmul: out = act(a·b + bias) (act 0 none, 1 relu;
     * bias 1-D over the last dim) or a·b + bias + residual (residual
     * contiguous, the output's shape). conv2d: act(conv + its own bias
     * input), bias and residual NULL. NULL where the backend fuses none;
     * plans then run the pointwise kernel after the library call. */
    kn_status (*library_fused)(const kn_opcall *c, const kn_tensor *bias, int act, const kn_tensor *residual);
    /* Timing (NULL on a backend without): an event marks a point in the
     * device's queue; event_elapsed_ms waits for b and gives the time from a to b.
     * The CPU backend's events are clock readings (its work is synchronous). */
    kn_status (*event_create)(void **ev);
    void (*event_destroy)(void *ev);
    kn_status (*event_record)(void *ev);
    kn_status (*event_elapsed_ms)(void *a, void *b, double *ms);
    /* Recording (CUDA graphs; NULL where the backend has none): work queued
     * between capture_begin and capture_end is recorded, not run, and
     * *exec replays it. Memory allocated while recording stays reserved
     * for the recording until graph_destroy (a replay writes to it). */
    kn_status (*capture_begin)(void);
    kn_status (*capture_end)(void **exec);
    kn_status (*graph_launch)(void *exec);
    void (*graph_destroy)(void *exec);
    /* Autotuning (core/compiler/kn_autotune); each may be NULL. */
    /* Evict the device's caches (L2 on a GPU), so a timed run reads from
     * memory as it does inside a whole model. Queued like a kernel. */
    kn_status (*flush_cache)(void);
    /* What a tuned choice is only valid for: device name, driver and
     * library versions ("NVIDIA H100 80GB HBM3, sm 9.0, driver 12080, ..."). */
    void (*identity)(char *buf, size_t size);
    /* Library ops: the label of variant c->variant of this call ("cublaslt
     * algo 23 tile 128x128 stages 4 splitk 2"), found by running it: after
     * run / library_fused with c->variant = v, the label of what ran. A
     * variant past the last one the library offers fails the run with
     * KN_ERR_RANGE; variants are numbered densely from 0 (the default). */
    void (*library_variant_label)(char *buf, size_t size);
    /* The roofline's matmul ceiling as the library reaches it (NULL where
     * the backend has no library GEMM; kn_ceilings then times square
     * matmuls): TFLOP/s of a large matmul of the float dtype dt. */
    kn_status (*library_matmul_rate)(kn_dtype dt, double *tflops);
} kn_backend;

/* Options the Lua side sets from kiln.config (read by backends). */
void kn_set_allow_tf32(bool allow);
bool kn_allow_tf32(void);

/* The backend for a device, or NULL when it is not built or has no device. */
const kn_backend *kn_backend_get(kn_device dev);

/* Provided by kernels/cpu. */
extern const kn_backend kn_cpu_backend;
#ifdef KILN_HAVE_CUDA
/* Provided by kernels/cuda; kn_backend_get(KN_CUDA) gives it only when
 * kn_cuda_available() says a usable device is present. */
extern const kn_backend kn_cuda_backend;
#endif

#endif
