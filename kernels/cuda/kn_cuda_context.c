/* kn_cuda_context: whether CUDA works, each GPU's state (one per GPU:
 * cuda:0, cuda:1, ...), the GPU the calling thread works on, its stream,
 * its memory and CUDA errors as kiln statuses (see kn_cuda_context.h).
 *
 * The bottom of kernels/cuda: everything here is a GPU's, not an op's, so
 * every other file may call it and it calls none of them, but the pool
 * of kn_cuda_alloc.c, which it works for the current GPU.
 */
#include "kn_cuda_context.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda.h"
#include "kn_phase.h"

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
/* The settings of the op this thread is running (the vtable slots that
 * take them set them for the call), for the helpers deep inside it that
 * load kernels (their cache dir), pick TF32 or log: one call's, like
 * `current`, never kept past it. NULL between calls: the defaults. */
static _Thread_local const kn_settings *call_settings;

const kn_settings *kn_cuda_call_settings(void)
{
    return kn_settings_or_defaults(call_settings);
}

const kn_settings *kn_cuda_call_settings_enter(const kn_settings *s)
{
    const kn_settings *outer = call_settings;
    if (s) call_settings = s;
    return outer;
}

void kn_cuda_call_settings_leave(const kn_settings *outer)
{
    call_settings = outer;
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
    int major = 0, minor = 0, sms = 0, was = 0;
    /* the stream belongs to the device current when it is made; then the
     * thread's device goes back to what kn_cuda_enter last set */
    bool restore = cudaGetDevice(&was) == cudaSuccess && was != g->index;
    cudaError_t e = cudaSetDevice(g->index);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, g->index);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, g->index);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g->index);
    if (restore) (void)cudaSetDevice(was);
    if (e != cudaSuccess) {
        snprintf(g->init_why, sizeof g->init_why, "cannot start CUDA on device %d: %s", g->index,
                 cudaGetErrorString(e));
        (void)cudaGetLastError();
        g->init_state = 2;
        return;
    }
    g->arch = major * 10 + minor;
    g->sm_count = sms > 0 ? sms : 1;
    __atomic_store_n(&g->init_state, 1, __ATOMIC_RELEASE);
}

static kn_status init_device(kn_cuda_dev *g)
{
    if (!g) return kn_error(KN_ERR_OOM, "out of host memory for a CUDA device's state");
    if (__atomic_load_n(&g->init_state, __ATOMIC_ACQUIRE) == 1) return KN_OK;
    pthread_mutex_lock(&g->init_lock);
    if (g->init_state == 0) {
        kn_phase_begin(KN_PHASE_STARTUP);
        init_locked(g);
        kn_phase_end(KN_PHASE_STARTUP);
    }
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
    return kn_cuda_enter_gpu(d->state);
}

kn_status kn_cuda_enter_gpu(kn_cuda_dev *g)
{
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

/* cuda:N exists when CUDA works and the driver reports more than N GPUs. */
kn_status kn_cuda_open(kn_device_ctx *d)
{
    if (!kn_cuda_available() || d->index >= avail_count)
        return kn_error(KN_ERR_DEVICE, "device %s is not available", kn_device_name(d->device));
    d->state = device_state(d->index);
    if (!d->state) return kn_error(KN_ERR_OOM, "out of host memory for a CUDA device's state");
    return KN_OK;
}

char *kn_cuda_tensor_ptr(const kn_tensor *t)
{
    return (char *)t->storage->data + t->offset * (int64_t)kn_dtype_size(t->dtype);
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

/* ---- autotuning ---- */

void kn_cuda_variant_label(const char *fmt, ...)
{
    kn_cuda_dev *gpu = kn_cuda_current();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gpu->variant_label, sizeof gpu->variant_label, fmt, ap);
    va_end(ap);
}

/* ---- memory: the current GPU's pool ---- */

kn_status kn_cuda_malloc(int64_t nbytes, void **p)
{
    kn_cuda_pool *pool = kn_cuda_current()->pool;
    *p = NULL;
    if (nbytes < 0 || nbytes > KN_MAX_BYTES)
        return kn_error(KN_ERR_OOM, "cuda: cannot allocate %lld bytes", (long long)nbytes);
    KN_TRY(kn_cuda_init());
    cudaError_t e;
    kn_status st = kn_cuda_pool_malloc(pool, nbytes, p, &e);
    if (e == cudaErrorMemoryAllocation) return kn_cuda_oom(nbytes, NULL);
    if (e != cudaSuccess) return kn_cuda_fail(e, "cudaMalloc");
    return st;
}

void kn_cuda_free(void *p)
{
    kn_cuda_pool_free(kn_cuda_current()->pool, p);
}

void kn_cuda_empty_cache(void)
{
    kn_cuda_pool_empty(kn_cuda_current()->pool);
}

void kn_cuda_alloc_stats_get(kn_cuda_alloc_stats *s)
{
    kn_cuda_pool_stats(kn_cuda_current()->pool, s);
}

void kn_cuda_alloc_reset_peak(void)
{
    kn_cuda_pool_reset_peak(kn_cuda_current()->pool);
}

kn_status kn_cuda_alloc_capture_begin(void)
{
    return kn_cuda_pool_capture_begin(kn_cuda_current()->pool);
}

void kn_cuda_alloc_capture_end(void **held)
{
    kn_cuda_pool_capture_end(kn_cuda_current()->pool, held);
}

void kn_cuda_alloc_release_held(void *held)
{
    kn_cuda_pool_release_held(kn_cuda_current()->pool, held);
}
