/* kn_cuda_backend: the CUDA backend's vtable, its registration and device
 * objects (one per GPU: cuda:0, cuda:1, ...), streams, copies, errors,
 * events and recordings (CUDA graphs by stream capture).
 *
 * Everything kiln queues on one GPU goes to that GPU's non-blocking
 * stream, so the order of calls is the order of work and the caching
 * allocator can reuse a freed block at once. The host waits only where it must: copies to the
 * host, copies from host memory the caller may free on return, `sync`, and
 * event timing.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_internal.h"
#include "kn_cuda_ops.h"
#include "kn_kir.h"
#include "kn_cuda_render.h"

#ifdef KILN_HAVE_CUDNN
#include <cudnn_graph.h>
#endif

/* ---- availability and initialization ---- */

/* Whether CUDA works at all is a property of the process (driver, runtime,
 * KILN_DEVICE), so it is probed once for every GPU. */
static pthread_once_t avail_once = PTHREAD_ONCE_INIT;
static bool avail;
static int avail_count; /* GPUs the driver reports */
static char avail_why[512] = "the CUDA backend was not probed";

/* CUDA 13 compiles for sm_75 and newer only. */
#define KN_CUDA_MIN_ARCH 75

static void probe(void)
{
    const char *dev = getenv("KILN_DEVICE");
    if (dev && strcmp(dev, "cpu") == 0) {
        snprintf(avail_why, sizeof avail_why, "KILN_DEVICE=cpu turns the CUDA backend off");
        return;
    }
    int n = 0, driver = 0, runtime = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (e == cudaErrorInsufficientDriver && driver == 0) {
        snprintf(avail_why, sizeof avail_why, "no CUDA driver is installed (cudaGetDeviceCount: %s)",
                 cudaGetErrorString(e));
    } else if (e == cudaErrorInsufficientDriver || (driver > 0 && driver / 1000 < runtime / 1000)) {
        snprintf(avail_why, sizeof avail_why,
                 "CUDA driver too old: it supports CUDA %d.%d, kiln's CUDA runtime is %d.%d (update the driver)",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    } else if (e != cudaSuccess) {
        snprintf(avail_why, sizeof avail_why, "no CUDA device: %s", cudaGetErrorString(e));
    } else if (n == 0) {
        snprintf(avail_why, sizeof avail_why, "no CUDA device: the driver reports none");
    } else {
        int major = 0, minor = 0;
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
        if (e != cudaSuccess)
            snprintf(avail_why, sizeof avail_why, "CUDA device 0 cannot be queried: %s", cudaGetErrorString(e));
        else if (major * 10 + minor < KN_CUDA_MIN_ARCH)
            snprintf(avail_why, sizeof avail_why,
                     "CUDA device 0 has compute capability %d.%d; kiln's CUDA %d.%d needs 7.5 or newer", major,
                     minor, runtime / 1000, runtime % 1000 / 10);
        else {
            avail = true;
            avail_count = n;
            avail_why[0] = 0;
        }
    }
    (void)cudaGetLastError();
}

bool kn_cuda_available(void)
{
    pthread_once(&avail_once, probe);
    return avail;
}

const char *kn_cuda_unavailable_reason(void)
{
    pthread_once(&avail_once, probe);
    return avail ? "" : avail_why;
}

/* ---- devices ---- */

/* The state of each GPU, made on first use and kept for the process (a
 * device object lives as long as the registry). */
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static kn_cuda_dev *devices[KN_DEVICE_MAX_INDEX];
/* The calling thread's GPU, as CUDA's current device is per thread. */
static _Thread_local kn_cuda_dev *current;
/* The settings of the op this thread is running (cuda_run and the other
 * slots that take them), for the helpers deep inside it that load
 * kernels (their cache dir), pick TF32 or log: one call's, like `current`,
 * never kept past it. NULL between calls: the defaults. */
static _Thread_local const kn_settings *call_settings;

const kn_settings *kn_cuda_call_settings(void)
{
    return kn_settings_or_defaults(call_settings);
}

static kn_cuda_dev *device_state(int index)
{
    if (index < 0 || index >= KN_DEVICE_MAX_INDEX) return NULL;
    pthread_mutex_lock(&devices_lock);
    kn_cuda_dev *g = devices[index];
    if (!g && (g = calloc(1, sizeof *g)) != NULL) {
        g->pool = kn_cuda_pool_new();
        if (!g->pool) {
            free(g);
            g = NULL;
        } else {
            g->index = index;
            g->device = kn_device_make(KN_DEVICE_CUDA, index);
            pthread_mutex_init(&g->init_lock, NULL);
            devices[index] = g;
        }
    }
    pthread_mutex_unlock(&devices_lock);
    return g;
}

kn_cuda_dev *kn_cuda_current(void)
{
    if (!current) current = device_state(0);
    return current;
}

static void init_locked(kn_cuda_dev *g)
{
    if (!kn_cuda_available()) {
        snprintf(g->init_why, sizeof g->init_why, "CUDA is not available: %s", kn_cuda_unavailable_reason());
        g->init_state = 2;
        return;
    }
    int major = 0, minor = 0, was = 0;
    /* the stream belongs to the device current when it is made; then the
     * thread's device goes back to what kn_cuda_enter last set */
    bool restore = cudaGetDevice(&was) == cudaSuccess && was != g->index;
    cudaError_t e = cudaSetDevice(g->index);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, g->index);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, g->index);
    if (restore) (void)cudaSetDevice(was);
    if (e != cudaSuccess) {
        snprintf(g->init_why, sizeof g->init_why, "cannot start CUDA on device %d: %s", g->index,
                 cudaGetErrorString(e));
        (void)cudaGetLastError();
        g->init_state = 2;
        return;
    }
    g->arch = major * 10 + minor;
    __atomic_store_n(&g->init_state, 1, __ATOMIC_RELEASE);
}

static kn_status init_device(kn_cuda_dev *g)
{
    if (!g) return kn_error(KN_ERR_OOM, "out of host memory for a CUDA device's state");
    if (__atomic_load_n(&g->init_state, __ATOMIC_ACQUIRE) == 1) return KN_OK;
    pthread_mutex_lock(&g->init_lock);
    if (g->init_state == 0) init_locked(g);
    int s = g->init_state;
    pthread_mutex_unlock(&g->init_lock);
    if (s != 1) return kn_error(KN_ERR_DEVICE, "%s", g->init_why);
    return KN_OK;
}

kn_status kn_cuda_init(void)
{
    return init_device(kn_cuda_current());
}

/* The multi-GPU hook: every vtable slot starts here, so the CUDA calls
 * that follow (and the kernels/cuda files' state) are those of d's GPU. */
kn_status kn_cuda_enter(kn_device_ctx *d)
{
    kn_cuda_dev *g = d->state;
    KN_TRY(init_device(g));
    if (current != g) {
        KN_CUDA_TRY(cudaSetDevice(g->index), "making a GPU current");
        current = g;
    }
    return KN_OK;
}

cudaStream_t kn_cuda_stream(void)
{
    (void)kn_cuda_init(); /* callers have checked it: this only makes the order safe */
    return kn_cuda_current()->stream;
}

int kn_cuda_arch(void)
{
    (void)kn_cuda_init();
    return kn_cuda_current()->arch;
}

/* ---- errors ---- */

/* Errors after which the context is lost: every later call fails too. */
static bool is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout: return true;
    default: return false;
    }
}

static double mib(int64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

kn_status kn_cuda_oom(int64_t nbytes, const char *what)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
    kn_cuda_alloc_stats s;
    kn_cuda_alloc_stats_get(&s);
    char req[96] = "";
    if (nbytes >= 0) snprintf(req, sizeof req, ": tried to allocate %.2f MiB", mib(nbytes));
    return kn_error(KN_ERR_OOM,
                    "%s%sCUDA out of memory%s; %.2f MiB free of %.2f MiB total, %.2f MiB cached by kiln "
                    "(%.2f MiB in use by kiln's tensors)",
                    what ? what : "", what ? ": " : "", req, mib((int64_t)free_b), mib((int64_t)total_b),
                    mib(s.reserved - s.allocated), mib(s.allocated));
}

kn_status kn_cuda_fail(cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* a non-sticky error must not show up again at the next call */
    if (e == cudaErrorMemoryAllocation) return kn_cuda_oom(-1, what);
    return kn_error(KN_ERR_DEVICE, "%s: %s%s", what, cudaGetErrorString(e),
                    is_sticky(e) ? " (the GPU context is lost after this error: restart kiln)" : "");
}

/* Errors a wait reports belong to earlier work, not to the wait. */
static kn_status wait_stream(const char *what)
{
    cudaError_t e = cudaStreamSynchronize(kn_cuda_stream());
    if (e == cudaSuccess) return KN_OK;
    char ctx[256];
    snprintf(ctx, sizeof ctx,
             "%s: a CUDA kernel queued earlier failed (CUDA reports it only when waiting; "
             "CUDA_LAUNCH_BLOCKING=1 names the kernel)", what);
    return kn_cuda_fail(e, ctx);
}

/* ---- memory ---- */

static kn_status cuda_alloc(kn_device_ctx *d, int64_t nbytes, void **p)
{
    *p = NULL;
    KN_TRY(kn_cuda_enter(d));
    return kn_cuda_malloc(nbytes, p);
}

static void cuda_free(kn_device_ctx *d, void *p)
{
    if (p && kn_cuda_enter(d) == KN_OK) kn_cuda_free(p);
}

static kn_status cuda_to_host(kn_device_ctx *d, void *dst, const void *src, int64_t nbytes)
{
    if (nbytes <= 0) return KN_OK;
    KN_TRY(kn_cuda_enter(d));
    KN_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)nbytes, cudaMemcpyDeviceToHost, kn_cuda_stream()),
                "copying from the GPU to the host");
    return wait_stream("copying from the GPU to the host");
}

static kn_status cuda_from_host(kn_device_ctx *d, void *dst, const void *src, int64_t nbytes)
{
    if (nbytes <= 0) return KN_OK;
    KN_TRY(kn_cuda_enter(d));
    KN_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)nbytes, cudaMemcpyHostToDevice, kn_cuda_stream()),
                "copying from the host to the GPU");
    /* the caller may free or reuse src as soon as this returns */
    return wait_stream("copying from the host to the GPU");
}

static kn_status cuda_copy(kn_device_ctx *d, void *dst, const void *src, int64_t nbytes)
{
    if (nbytes <= 0 || dst == src) return KN_OK;
    KN_TRY(kn_cuda_enter(d));
    KN_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)nbytes, cudaMemcpyDeviceToDevice, kn_cuda_stream()),
                "copying on the GPU");
    return KN_OK;
}

/* ---- ops ---- */

/* kn_op_infer has rejected bad dtypes and attrs already; what no CUDA
 * kernel covers is named by `run`, which knows which family declined. */
static bool cuda_supports_op(kn_device_ctx *d, const kn_opcall *c)
{
    (void)d;
    /* attention included: what the fused kernel declines runs unfused
     * inside kn_cuda_attention_op */
    return c && (unsigned)c->op < KN_OP_COUNT;
}

static kn_status no_kernel(const kn_opcall *c)
{
    char dts[160] = "";
    size_t n = 0;
    for (int i = 0; i < c->n_in && n < sizeof dts; i++)
        n += (size_t)snprintf(dts + n, sizeof dts - n, "%s%s", i ? ", " : "", kn_dtype_name(c->in[i]->dtype));
    if (c->n_out > 0 && c->out[0] && n < sizeof dts)
        snprintf(dts + n, sizeof dts - n, "%s-> %s", n ? " " : "", kn_dtype_name(c->out[0]->dtype));
    return kn_error(KN_ERR_UNSUPPORTED, "%s: no CUDA kernel for this call (dtypes %s)", kn_op_name(c->op), dts);
}

static kn_status run_op(kn_device_ctx *d, const kn_opcall *c)
{
    if (!c || (unsigned)c->op >= KN_OP_COUNT)
        return kn_error(KN_ERR_ARG, "cuda: unknown op %d", c ? (int)c->op : -1);
    KN_TRY(kn_cuda_enter(d));
    switch (kn_op_kind_of(c->op)) {
    case KN_K_MATMUL: return kn_cuda_matmul(c);
    case KN_K_CONV: return kn_cuda_conv2d(c);
    case KN_K_ATTENTION: return kn_cuda_attention_op(c);
    case KN_K_VIEW: return kn_error(KN_ERR_ARG, "%s: views are metadata: kn_op_eager runs them", kn_op_name(c->op));
    default: break;
    }
    /* a library kernel of its own: no generated-kernel lookup first */
    if (c->op == KN_OP_GATHER_SCATTER) return kn_cuda_gather_scatter(c);
    kn_status st = kn_cuda_eager_ir(c);
    if (st != KN_ERR_UNSUPPORTED) return st;
    st = kn_cuda_ops_run(c);
    if (st != KN_ERR_UNSUPPORTED) return st;
    return no_kernel(c);
}

/* run_op with c's settings as the call's. An op without settings of its
 * own that runs inside another (a copy, the unfused attention's chain)
 * runs with the settings of the call it serves. */
static kn_status cuda_run(kn_device_ctx *d, const kn_opcall *c)
{
    const kn_settings *outer = call_settings;
    if (c && c->settings) call_settings = c->settings;
    kn_status st = run_op(d, c);
    call_settings = outer;
    return st;
}

/* Strided outputs: matmul through cuBLASLt's D layout (kn_cuda_blas.c);
 * attention always (the fused kernel takes batch, head and row strides,
 * and its unfused fallback copies into any layout), which is what makes
 * the head merge after it free. */
static bool cuda_strided_out(kn_device_ctx *d, const kn_opcall *c)
{
    (void)d;
    if (c && c->op == KN_OP_ATTENTION) return c->n_out == 1 && c->out[0] && kn_dtype_is_float(c->out[0]->dtype);
    return c && c->op == KN_OP_MATMUL && kn_cuda_matmul_strided_ok(c);
}

static bool cuda_conv_channels_last(kn_device_ctx *d, kn_dtype dt)
{
    return kn_cuda_enter(d) == KN_OK && kn_cuda_conv_prefers_nhwc(dt);
}

static kn_status cuda_sync(kn_device_ctx *d)
{
    KN_TRY(kn_cuda_enter(d));
    return wait_stream("waiting for the GPU");
}

/* ---- generated kernels ---- */

static kn_status cuda_compile_program(kn_device_ctx *d, const struct kn_kprogram *p, const char *cache_dir, void **lib,
                                     void **fns, bool *cached)
{
    *lib = NULL;
    if (cached) *cached = false;
    KN_TRY(kn_cuda_enter(d));
    char *src = NULL;
    KN_TRY(kn_kprogram_render(p, &kn_cuda_render_target, &src));
    kn_cuda_module *m = NULL;
    kn_status st = kn_cuda_module_get_ex(src, cache_dir, &m, cached);
    free(src);
    KN_TRY(st);
    for (int k = 0; k < p->n_kernels; k++) {
        const kn_kernel *kn = &p->kernels[k];
        if (kn->kind != KN_KERNEL_POINTWISE && kn->kind != KN_KERNEL_ROW) continue;
        const void *fn = NULL;
        KN_TRY(kn_cuda_module_kernel(m, kn->name, &fn));
        fns[k] = (void *)(uintptr_t)fn;
    }
    *lib = m; /* modules live for the process: release has nothing to do */
    return KN_OK;
}

static void cuda_release_program(kn_device_ctx *d, void *lib)
{
    (void)d;
    (void)lib;
}

static kn_status cuda_launch(kn_device_ctx *d, const struct kn_kernel *k, void *fn, char **bufs, const int64_t *sizes)
{
    if (!sizes) sizes = k->shape;
    KN_TRY(kn_cuda_enter(d));
    kn_kargs ka;
    memset(&ka, 0, sizeof ka);
    for (int a = 0; a < k->n_args && a < KN_KIR_MAX_ARGS; a++) ka.bufs[a] = bufs[a];
    for (int i = 0; i < k->ndim && i < KN_MAX_DIMS; i++) ka.sizes[i] = sizes[i];
    int64_t grid;
    int block;
    kn_kernel_launch_dims(k, sizes, &grid, &block);
    return kn_cuda_launch(fn, grid, block, &ka, 0);
}

/* ---- events ---- */

static kn_status cuda_event_create(kn_device_ctx *d, void **ev)
{
    *ev = NULL;
    KN_TRY(kn_cuda_enter(d));
    cudaEvent_t e;
    KN_CUDA_TRY(cudaEventCreate(&e), "creating a CUDA event");
    *ev = e;
    return KN_OK;
}

static void cuda_event_destroy(kn_device_ctx *d, void *ev)
{
    if (ev && kn_cuda_enter(d) == KN_OK) cudaEventDestroy((cudaEvent_t)ev);
}

static kn_status cuda_event_record(kn_device_ctx *d, void *ev)
{
    KN_TRY(kn_cuda_enter(d));
    KN_CUDA_TRY(cudaEventRecord((cudaEvent_t)ev, kn_cuda_stream()), "recording a CUDA event");
    return KN_OK;
}

/* One thread spinning on the global nanosecond timer: a wait in the queue
 * that costs the host one launch (see hold_queue in kn_backend.h). */
static const char hold_src[] =
    "extern \"C\" __global__ void kn_hold_queue(unsigned long long ns)\n"
    "{\n"
    "    unsigned long long t0, t;\n"
    "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
    "    do {\n"
    "        __nanosleep(1000);\n"
    "        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
    "    } while (t - t0 < ns);\n"
    "}\n";

static kn_status cuda_hold_queue(kn_device_ctx *d, const kn_settings *settings, double us)
{
    static kn_cuda_module *mod; /* modules are context-independent: one serves every GPU */
    static const void *fn;
    KN_TRY(kn_cuda_enter(d));
    if (!fn) {
        const char *dir = kn_settings_cache_dir(settings);
        if (!mod) KN_TRY(kn_cuda_module_get(hold_src, dir[0] ? dir : NULL, &mod));
        KN_TRY(kn_cuda_module_kernel(mod, "kn_hold_queue", &fn));
    }
    struct { unsigned long long ns; } arg = {(unsigned long long)(us * 1000.0)};
    return kn_cuda_launch(fn, 1, 1, &arg, 0);
}

static kn_status cuda_event_elapsed_ms(kn_device_ctx *d, void *a, void *b, double *ms)
{
    *ms = 0;
    KN_TRY(kn_cuda_enter(d));
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)b);
    if (e != cudaSuccess)
        return kn_cuda_fail(e, "timing: the work before the end event failed (CUDA reports it when waiting)");
    float f = 0;
    KN_CUDA_TRY(cudaEventElapsedTime(&f, (cudaEvent_t)a, (cudaEvent_t)b), "reading a CUDA event timer");
    *ms = f;
    return KN_OK;
}

/* ---- recordings ---- */

typedef struct cuda_graph {
    cudaGraphExec_t exec;
    void *held; /* the allocator's blocks this recording reads and writes */
} cuda_graph;

static kn_status cuda_capture_begin(kn_device_ctx *d)
{
    KN_TRY(kn_cuda_enter(d));
    KN_TRY(kn_cuda_alloc_capture_begin());
    /* relaxed: the allocator may still call cudaMalloc while recording */
    cudaError_t e = cudaStreamBeginCapture(kn_cuda_stream(), cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        void *held = NULL;
        kn_cuda_alloc_capture_end(&held);
        kn_cuda_alloc_release_held(held);
        return kn_cuda_fail(e, "this graph cannot be recorded: starting the capture");
    }
    return KN_OK;
}

static kn_status cuda_capture_end(kn_device_ctx *d, void **exec)
{
    *exec = NULL;
    KN_TRY(kn_cuda_enter(d));
    cudaGraph_t g = NULL;
    void *held = NULL;
    cudaError_t e = cudaStreamEndCapture(kn_cuda_stream(), &g);
    kn_cuda_alloc_capture_end(&held);
    if (e != cudaSuccess || !g) {
        if (g) cudaGraphDestroy(g);
        /* nothing recorded ran, so nothing can still be using the blocks */
        kn_cuda_alloc_release_held(held);
        return kn_cuda_fail(e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated,
                            "this graph cannot be recorded");
    }
    cudaGraphExec_t ge = NULL;
    e = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    if (e == cudaSuccess) e = cudaGraphUpload(ge, kn_cuda_stream());
    cuda_graph *cg = e == cudaSuccess ? calloc(1, sizeof *cg) : NULL;
    if (!cg) {
        if (ge) cudaGraphExecDestroy(ge);
        kn_cuda_alloc_release_held(held);
        if (e == cudaSuccess) return kn_error(KN_ERR_OOM, "out of host memory for a recording");
        return kn_cuda_fail(e, "this graph cannot be recorded: instantiating it");
    }
    cg->exec = ge;
    cg->held = held;
    *exec = cg;
    return KN_OK;
}

static kn_status cuda_graph_launch(kn_device_ctx *d, void *exec)
{
    cuda_graph *cg = exec;
    if (!cg) return kn_error(KN_ERR_ARG, "cuda: replay of a missing recording");
    KN_TRY(kn_cuda_enter(d));
    KN_CUDA_TRY(cudaGraphLaunch(cg->exec, kn_cuda_stream()), "replaying a CUDA graph");
    return KN_OK;
}

static void cuda_graph_destroy(kn_device_ctx *d, void *exec)
{
    cuda_graph *cg = exec;
    if (!cg || kn_cuda_enter(d) != KN_OK) return;
    /* a replay still in flight writes to the held blocks */
    if (cudaStreamSynchronize(kn_cuda_stream()) != cudaSuccess) (void)cudaGetLastError();
    cudaGraphExecDestroy(cg->exec);
    kn_cuda_alloc_release_held(cg->held);
    free(cg);
}

static kn_status library_fused(kn_device_ctx *d, const kn_opcall *c, const kn_tensor *bias, int act, const kn_tensor *residual)
{
    KN_TRY(kn_cuda_enter(d));
    if (c->op == KN_OP_CONV2D) {
        if (bias || residual) return kn_error(KN_ERR_ARG, "conv2d: its epilogue takes an activation only");
        return kn_cuda_conv2d_fused(c, act);
    }
    return kn_cuda_matmul_fused(c, bias, act, residual);
}

/* library_fused with c's settings as the call's (see cuda_run). */
static kn_status cuda_library_fused(kn_device_ctx *d, const kn_opcall *c, const kn_tensor *bias, int act,
                                    const kn_tensor *residual)
{
    const kn_settings *outer = call_settings;
    if (c->settings) call_settings = c->settings;
    kn_status st = library_fused(d, c, bias, act, residual);
    call_settings = outer;
    return st;
}

/* ---- autotuning ---- */

void kn_cuda_variant_label(const char *fmt, ...)
{
    kn_cuda_dev *gpu = kn_cuda_current();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gpu->variant_label, sizeof gpu->variant_label, fmt, ap);
    va_end(ap);
}

static void cuda_library_variant_label(kn_device_ctx *d, char *buf, size_t size)
{
    const kn_cuda_dev *gpu = d->state;
    snprintf(buf, size, "%s", gpu->variant_label[0] ? gpu->variant_label : "library call");
}

/* cuBLASLt's GEMM peak on this GPU (the roofline's matmul ceiling), its
 * matmuls run with settings (see cuda_run). */
static kn_status cuda_library_matmul_rate(kn_device_ctx *d, const kn_settings *settings, kn_dtype dt,
                                          double *tflops)
{
    KN_TRY(kn_cuda_enter(d));
    const kn_settings *outer = call_settings;
    if (settings) call_settings = settings;
    kn_status st = kn_cuda_matmul_rate(dt, tflops);
    call_settings = outer;
    return st;
}

/* Write a buffer twice the L2's size: what a timed kernel reads next comes
 * from memory, as it does inside a model whose other kernels evicted it. */
static kn_status cuda_flush_cache(kn_device_ctx *d)
{
    KN_TRY(kn_cuda_enter(d));
    kn_cuda_dev *gpu = d->state;
    if (!gpu->flush_buf) {
        int l2 = 0;
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, gpu->index);
        size_t size = (size_t)(l2 > 0 ? l2 : 50 << 20) * 2;
        if (kn_cuda_malloc((int64_t)size, &gpu->flush_buf) != KN_OK) {
            gpu->flush_buf = NULL;
            return KN_OK; /* timing without a flush is still timing */
        }
        gpu->flush_size = size;
    }
    KN_CUDA_TRY(cudaMemsetAsync(gpu->flush_buf, 0, gpu->flush_size, kn_cuda_stream()), "flushing the L2 cache");
    return KN_OK;
}

static void cuda_identity(kn_device_ctx *d, char *buf, size_t size)
{
    const kn_cuda_dev *gpu = d->state;
    (void)kn_cuda_enter(d); /* cuBLASLt's version below opens it on this GPU */
    int dev = gpu->index, driver = 0, runtime = 0;
    struct cudaDeviceProp prop;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) snprintf(prop.name, sizeof prop.name, "cuda device");
    size_t dnn = 0;
#ifdef KILN_HAVE_CUDNN
    dnn = cudnnGetVersion();
#endif
    snprintf(buf, size, "%s, sm %d.%d, driver %d, runtime %d, cudnn %zu, cublaslt %zu, nvrtc", prop.name,
             prop.major, prop.minor, driver, runtime, dnn, kn_cuda_blas_version());
}

static const kn_backend kn_cuda_backend = {
    .name = "cuda",
    .kind = KN_DEVICE_CUDA,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .to_host = cuda_to_host,
    .from_host = cuda_from_host,
    .copy = cuda_copy,
    .supports_op = cuda_supports_op,
    .run = cuda_run,
    .strided_out = cuda_strided_out,
    .conv_channels_last = cuda_conv_channels_last,
    .sync = cuda_sync,
    .compile_program = cuda_compile_program,
    .release_program = cuda_release_program,
    .render_target = &kn_cuda_render_target,
    .launch = cuda_launch,
    .library_fused = cuda_library_fused,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .hold_queue = cuda_hold_queue,
    .trace_begin = kn_cuda_trace_begin,
    .trace_push = kn_cuda_trace_push,
    .trace_pop = kn_cuda_trace_pop,
    .trace_end = kn_cuda_trace_end,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .flush_cache = cuda_flush_cache,
    .identity = cuda_identity,
    .library_variant_label = cuda_library_variant_label,
    .library_matmul_rate = cuda_library_matmul_rate,
};

/* cuda:N exists when CUDA works and the driver reports more than N GPUs. */
static kn_status cuda_open(kn_device_ctx *d)
{
    if (!kn_cuda_available() || d->index >= avail_count)
        return kn_error(KN_ERR_DEVICE, "device %s is not available", kn_device_name(d->device));
    d->state = device_state(d->index);
    if (!d->state) return kn_error(KN_ERR_OOM, "out of host memory for a CUDA device's state");
    return KN_OK;
}

void kn_cuda_register(void)
{
    kn_backend_register_kind(&kn_cuda_backend, cuda_open);
}
