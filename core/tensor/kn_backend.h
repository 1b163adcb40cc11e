/* kn_backend: the vtable every executor implements (kernels/cpu,
 * kernels/cuda), the device objects it runs on, and the registry that maps
 * a kn_device to its device object.
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
struct kn_settings;

typedef struct kn_device_ctx kn_device_ctx;

/* A device's memory as its allocator sees it, in bytes: handed out now,
 * held from the device (handed out and cached, CUDA-graph pools and
 * library workspaces included), and the most of each since the last
 * reset. */
typedef struct kn_memory_stats {
    int64_t allocated, reserved, peak_allocated, peak_reserved;
} kn_memory_stats;

/* The activation of a library epilogue (library_fused's act). */
typedef enum {
    KN_EPI_NONE = 0,
    KN_EPI_RELU = 1,
    KN_EPI_GELU_TANH = 2, /* cuBLASLt's GELU epilogue */
    KN_EPI_HARDSWISH = 3, /* x * min(max(x / 6 + 1/2, 0), 1); conv2d only */
} kn_epilogue_act;

typedef struct kn_backend {
    const char *name; /* the kind's name: "cpu", "cuda" */
    kn_device_kind kind;
    /* nbytes may be 0 (then *p may be NULL or a unique pointer). */
    kn_status (*alloc)(kn_device_ctx *d, int64_t nbytes, void **p);
    void (*free)(kn_device_ctx *d, void *p);
    /* Whether free keeps the memory for the next alloc of its size (a
     * caching pool, where both cost well under a microsecond): a plan then
     * gives its arena back after each run, so a plan that is not running
     * holds none. False (host memory: each large alloc maps fresh pages):
     * a plan keeps its arena from run to run. */
    bool caches_freed;
    /* Copy between host memory and this device's memory. */
    kn_status (*to_host)(kn_device_ctx *d, void *dst, const void *src, int64_t nbytes);
    kn_status (*from_host)(kn_device_ctx *d, void *dst, const void *src, int64_t nbytes);
    /* Copy within this device's memory, queued in order with the kernels. */
    kn_status (*copy)(kn_device_ctx *d, void *dst, const void *src, int64_t nbytes);
    /* Whether `run` has a kernel for this call (its op, the inputs'
     * dtypes, attrs where they matter): yes exactly where run would find
     * one, no where run would end in "no kernel". Asked before the outputs
     * exist (c->out empty: they follow from inputs and attrs), with inputs
     * that may be headers without storage (a plan asks at build time), or
     * with none (n_in 0: a probe of the op alone, yes when some dtype
     * runs). What a library refuses at run time (a plan it will not make,
     * memory) stays run's error. Callers go through kn_backend_check_op. */
    bool (*supports_op)(kn_device_ctx *d, const kn_opcall *c);
    /* Compute c->out from c->in; outputs are preallocated, contiguous, with
     * the shapes kn_op_infer gave. Inputs may be any strided view. The one
     * exception: where strided_out said yes, a plan passes c->out[0] with
     * those strides; run then writes through them, or returns
     * KN_ERR_UNSUPPORTED having written nothing (the plan then copies). */
    kn_status (*run)(kn_device_ctx *d, const kn_opcall *c);
    /* Whether run can write c->out[0] with its (non-contiguous) strides:
     * a library op whose value a plan lays out permuted, so that a
     * transpose and reshape after it copy nothing (kn_fuse_ex). c->out[0]
     * may be a header without storage. NULL: never. */
    bool (*strided_out)(kn_device_ctx *d, const kn_opcall *c);
    /* Whether this device runs conv2d of dtype dt faster channels-last
     * (KN_LAYOUT_NHWC, its channels padded to 16 bytes) than NCHW: the
     * layout pass's question under kiln.config.channels_last = "auto".
     * NULL: never. */
    bool (*conv_channels_last)(kn_device_ctx *d, kn_dtype dt);
    /* Whether this device runs the conv2d call c (its inputs and output
     * headers without storage, c->a its attrs; settings NULL: the defaults) in a
     * kernel whose epilogue adds the bias, a ReLU and a residual at no
     * cost: plans then fold them into the call (kn_plan_epilogue.c), where
     * a library's fused engines would be slower than the separate kernels.
     * NULL: never. */
    bool (*conv_epilogue_free)(kn_device_ctx *d, const struct kn_settings *settings, const kn_opcall *c);
    /* Whether this device's matmul of an [m, k] by [k, n] product of dtype
     * dt, run with settings (NULL: the defaults), is faster with b
     * k-contiguous (the transpose of an [n, k] tensor) than n-contiguous:
     * plans then lay fixed [k, n] weights out so, once
     * (core/compiler/kn_pass_k_major.c). NULL: no preference. */
    bool (*matmul_b_k_major)(kn_device_ctx *d, const struct kn_settings *settings, kn_dtype dt, int64_t m,
                             int64_t n, int64_t k);
    /* Wait for queued work (no-op on CPU). */
    kn_status (*sync)(kn_device_ctx *d);
    /* Generated code (NULL where the backend has none): compile the
     * POINTWISE and ROW kernels of p (using the persistent cache in
     * cache_dir); fns[i] gets kernel i's entry point (NULL for library and
     * fallback kernels), *lib keeps the code loaded until release_program.
     * *cached (when not NULL) says whether the code came from a cache (the
     * persistent one or the process's own) with no compiler run, so that
     * compile times can say why they are short. */
    kn_status (*compile_program)(kn_device_ctx *d, const struct kn_kprogram *p, const char *cache_dir, void **lib,
                                 void **fns, bool *cached);
    void (*release_program)(kn_device_ctx *d, void *lib);
    /* What compile_program's source is written for (kn_kir.h): the
     * renderer reads it, so core never maps a device to a language. NULL
     * where the backend has no generated code. */
    const struct kn_render_target *render_target;
    /* Run one generated kernel: bufs[i] is argument i's first element. */
    kn_status (*launch)(kn_device_ctx *d, const struct kn_kernel *k, void *fn, char **bufs, const int64_t *sizes);
    /* A library op (c->out[0] preallocated) with its epilogue in the
     * library call. Matmul: out = act(a·b + bias + residual) (act a
     * kn_epilogue_act; bias 1-D over the last dim; residual contiguous, the
     * output's shape; each may be NULL). conv2d: act(conv + its own bias
     * input + residual), bias NULL. NULL where the backend fuses none;
     * plans then run the pointwise kernel after the library call. */
    kn_status (*library_fused)(kn_device_ctx *d, const kn_opcall *c, const kn_tensor *bias, int act, const kn_tensor *residual);
    /* Timing (NULL on a backend without): an event marks a point in the
     * device's queue; event_elapsed_ms waits for b and gives the time from a to b.
     * The CPU backend's events are clock readings (its work is synchronous). */
    kn_status (*event_create)(kn_device_ctx *d, void **ev);
    void (*event_destroy)(kn_device_ctx *d, void *ev);
    kn_status (*event_record)(kn_device_ctx *d, void *ev);
    kn_status (*event_elapsed_ms)(kn_device_ctx *d, void *a, void *b, double *ms);
    /* Keep the device's queue busy for about `us` microseconds (NULL where
     * work is synchronous). Profiling queues it before a kernel's start
     * event: the host then queues the event and the kernel while the
     * device waits, so the event is stamped when the kernel can start, not
     * when the host gets round to launching it, and the time between the
     * events is the kernel's alone. settings: those of the work profiled
     * (the cache dir of the kernel that holds the queue; NULL: defaults). */
    kn_status (*hold_queue)(kn_device_ctx *d, const struct kn_settings *settings, double us);
    /* Exact device times (CUDA: CUPTI's activity records, the durations
     * Nsight Systems and torch.profiler show; NULL or KN_ERR_UNSUPPORTED
     * where there are none, and profiling then times with events alone,
     * which also count the device's ~3 us start of each kernel).
     * trace_begin starts collecting; work queued between trace_push(id)
     * and its trace_pop is tagged id (nested pushes: the innermost id);
     * trace_end waits for the device, stops collecting and calls
     * each(ctx, id, ms) once per tagged kernel, copy or fill with its
     * duration. It fails (nothing reported) when records were lost. */
    kn_status (*trace_begin)(kn_device_ctx *d);
    kn_status (*trace_push)(kn_device_ctx *d, uint64_t id);
    kn_status (*trace_pop)(kn_device_ctx *d);
    kn_status (*trace_end)(kn_device_ctx *d, void (*each)(void *ctx, uint64_t id, double ms), void *ctx);
    /* Recording (CUDA graphs; NULL where the backend has none): work queued
     * between capture_begin and capture_end is recorded, not run, and
     * *exec replays it. Memory allocated while recording stays reserved
     * for the recording until graph_destroy (a replay writes to it). */
    kn_status (*capture_begin)(kn_device_ctx *d);
    kn_status (*capture_end)(kn_device_ctx *d, void **exec);
    kn_status (*graph_launch)(kn_device_ctx *d, void *exec);
    void (*graph_destroy)(kn_device_ctx *d, void *exec);
    /* A copy the recording holds (a `copy` queued while recording), found
     * by its destination and source: *copy is its handle for
     * graph_set_copy. Fails when no recorded copy, or more than one, has
     * those addresses. graph_set_copy points it at other addresses of the
     * same size for the replays after. Both NULL where a recording's
     * copies cannot be changed; a replay then copies around the launch. */
    kn_status (*graph_find_copy)(kn_device_ctx *d, void *exec, void *dst, const void *src, int *copy);
    kn_status (*graph_set_copy)(kn_device_ctx *d, void *exec, int copy, void *dst, const void *src, int64_t nbytes);
    /* The allocator's figures, and a reset of their peaks (NULL where the
     * backend keeps none: host memory). */
    void (*memory)(kn_device_ctx *d, kn_memory_stats *out);
    void (*memory_reset_peak)(kn_device_ctx *d);
    /* Autotuning (core/compiler/kn_autotune); each may be NULL. */
    /* Evict the device's caches (L2 on a GPU), so a timed run reads from
     * memory as it does inside a whole model. Queued like a kernel. */
    kn_status (*flush_cache)(kn_device_ctx *d);
    /* What a tuned choice is only valid for: device name, driver and
     * library versions ("NVIDIA H100 80GB HBM3, sm 9.0, driver 12080, ..."). */
    void (*identity)(kn_device_ctx *d, char *buf, size_t size);
    /* Library ops: the label of variant c->variant of this call ("cublaslt
     * algo 23 tile 128x128 stages 4 splitk 2"), found by running it: after
     * run / library_fused with c->variant = v, the label of what ran. A
     * variant past the last one the library offers fails the run with
     * KN_ERR_RANGE; variants are numbered densely from 0 (the default). */
    void (*library_variant_label)(kn_device_ctx *d, char *buf, size_t size);
    /* The roofline's matmul ceiling as the library reaches it (NULL where
     * the backend has no library GEMM; kn_ceilings then times square
     * matmuls): TFLOP/s of a large matmul of the float dtype dt, run
     * with settings (TF32 for f32; NULL: the defaults). */
    kn_status (*library_matmul_rate)(kn_device_ctx *d, const struct kn_settings *settings, kn_dtype dt,
                                     double *tflops);
} kn_backend;


/* A device object: one device of a backend. Every vtable slot takes it
 * first; the backend keeps what belongs to that device (a GPU's stream,
 * allocator, library handles) in `state`, so cuda:0 and cuda:1 share no
 * state but the code. */
struct kn_device_ctx {
    const kn_backend *be;
    kn_device device; /* kind and index */
    int index;
    void *state; /* the backend's own, NULL where it keeps none */
};

/* ---- the registry (kn_backend.c): core names no backend; each registers
 * itself (kernels/kn_kernels.c calls them all at start-up). ---- */

/* The device object of dev, or NULL when no backend provides that device
 * (not built, no such GPU, turned off). O(1): a small table. */
kn_device_ctx *kn_backend_get(kn_device dev);

/* Devices of be->kind are found on first use: open(d) is asked once per
 * index, may fill d->state, and says whether the device exists (KN_OK) or
 * not (any error). A GPU backend probes its driver only when kiln first
 * asks for one of its devices, not at start-up. */
typedef kn_status (*kn_backend_open_fn)(kn_device_ctx *d);
void kn_backend_register_kind(const kn_backend *be, kn_backend_open_fn open);
/* Add one device now, with its state (tests fake a second CPU device this
 * way). KN_ERR_ARG if the index is out of range or already present. */
kn_status kn_backend_add_device(const kn_backend *be, int index, void *state);
/* The error for an absent device: "<what>: device cuda:1 is not available"
 * (what may be NULL). */
kn_status kn_backend_missing(kn_device dev, const char *what);

#endif
