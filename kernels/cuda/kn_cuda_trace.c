/* kn_cuda_trace: exact device times of profiled kernels through CUPTI's
 * activity records (kn_backend.h's trace_* slots).
 *
 * CUDA events around one kernel measure more than the kernel: the device
 * takes about 3 us to start a kernel that was queued behind an event, so a
 * 2.2 us copy of 4 MiB timed 5.1 us that way on the H100, and every small
 * kernel's roofline share in :time came out low. CUPTI reports each
 * kernel's own start and end on the device.
 *
 * The library is loaded with dlopen when a session first asks for it, so
 * kiln runs (with event timing) where it is missing. Work is attributed
 * with CUPTI's external correlation ids: kn_profile pushes its record's
 * slot before a kernel's launches and pops it after; CUPTI then links each
 * API call made meanwhile (runtime or driver: cuBLASLt and cuDNN launch
 * through the driver) to that id, and each kernel, copy or fill to its API
 * call by correlation id. Activity collection is on only between
 * trace_begin and trace_end, and trace_end detaches CUPTI: outside a
 * session it costs nothing.
 */
#include "kn_cuda_trace.h"

#include "kn_cuda_context.h"

#if KILN_HAVE_CUPTI
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti_activity.h>

/* what CUPTI hands back, kept until trace_end reads it */
typedef struct {
    uint8_t *data;
    size_t valid;
} trace_buffer;

static struct {
    bool tried, loaded;
    char why[200];
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*disable)(CUpti_ActivityKind);
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*push_id)(CUpti_ExternalCorrelationKind, uint64_t);
    CUptiResult (*pop_id)(CUpti_ExternalCorrelationKind, uint64_t *);
    CUptiResult (*dropped)(CUcontext, uint32_t, size_t *);
    CUptiResult (*finalize)(void);
    bool registered, on;
    pthread_mutex_t lock; /* CUPTI may complete buffers on its own thread */
    trace_buffer *done;
    int n_done, cap_done;
    bool lost; /* a record or a buffer was dropped */
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* the activity kinds a session collects */
static const CUpti_ActivityKind trace_kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,  CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER,  CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
};
#define N_TRACE_KINDS (int)(sizeof trace_kinds / sizeof trace_kinds[0])

#define TRACE_BUFFER_BYTES ((size_t)1 << 20)

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    /* CUPTI wants 8-byte alignment; malloc gives 16 */
    *buffer = malloc(TRACE_BUFFER_BYTES);
    *size = *buffer ? TRACE_BUFFER_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)size;
    size_t dropped = 0;
    if (ctx && T.dropped && T.dropped(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped) T.lost = true;
    if (!buffer) return;
    pthread_mutex_lock(&T.lock);
    if (T.n_done == T.cap_done) {
        int cap = T.cap_done ? 2 * T.cap_done : 8;
        trace_buffer *d = realloc(T.done, sizeof *d * (size_t)cap);
        if (d) {
            T.done = d;
            T.cap_done = cap;
        }
    }
    if (T.n_done < T.cap_done) {
        T.done[T.n_done].data = buffer;
        T.done[T.n_done].valid = valid;
        T.n_done++;
        buffer = NULL;
    } else {
        T.lost = true;
    }
    pthread_mutex_unlock(&T.lock);
    free(buffer);
}

static void drop_buffers(void)
{
    pthread_mutex_lock(&T.lock);
    for (int i = 0; i < T.n_done; i++) free(T.done[i].data);
    T.n_done = 0;
    pthread_mutex_unlock(&T.lock);
}

/* Load libcupti once; false (with T.why) when it is not there. */
static bool trace_load(void)
{
    if (T.tried) return T.loaded;
    T.tried = true;
    if (getenv("KILN_NO_CUPTI")) {
        snprintf(T.why, sizeof T.why, "KILN_NO_CUPTI is set");
        return false;
    }
    static const char *const names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(T.why, sizeof T.why, "CUPTI (libcupti.so) could not be loaded");
        return false;
    }
#define LOAD(field, sym)                                                                                               \
    do {                                                                                                               \
        *(void **)&T.field = dlsym(lib, sym);                                                                          \
        if (!T.field) {                                                                                                \
            snprintf(T.why, sizeof T.why, "CUPTI lacks %s", sym);                                                      \
            return false;                                                                                              \
        }                                                                                                              \
    } while (0)
    LOAD(enable, "cuptiActivityEnable");
    LOAD(disable, "cuptiActivityDisable");
    LOAD(register_callbacks, "cuptiActivityRegisterCallbacks");
    LOAD(flush_all, "cuptiActivityFlushAll");
    LOAD(next_record, "cuptiActivityGetNextRecord");
    LOAD(push_id, "cuptiActivityPushExternalCorrelationId");
    LOAD(pop_id, "cuptiActivityPopExternalCorrelationId");
    LOAD(dropped, "cuptiActivityGetNumDroppedRecords");
    LOAD(finalize, "cuptiFinalize");
#undef LOAD
    T.loaded = true;
    return true;
}

static void trace_off(void)
{
    for (int i = 0; i < N_TRACE_KINDS; i++) T.disable(trace_kinds[i]);
    T.on = false;
}

kn_status kn_cuda_trace_begin(kn_device_ctx *d)
{
    KN_TRY(kn_cuda_enter(d));
    if (!trace_load()) return kn_error(KN_ERR_UNSUPPORTED, "%s", T.why);
    if (!T.registered) {
        if (T.register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
            T.loaded = false;
            snprintf(T.why, sizeof T.why, "CUPTI refused its buffer callbacks");
            return kn_error(KN_ERR_UNSUPPORTED, "%s", T.why);
        }
        T.registered = true;
    }
    drop_buffers();
    T.lost = false;
    for (int i = 0; i < N_TRACE_KINDS; i++)
        if (T.enable(trace_kinds[i]) != CUPTI_SUCCESS) {
            /* another tool (Nsight) holds CUPTI, or a kind is unsupported */
            trace_off();
            return kn_error(KN_ERR_UNSUPPORTED, "CUPTI activity kind %d could not be enabled", (int)trace_kinds[i]);
        }
    T.on = true;
    return KN_OK;
}

kn_status kn_cuda_trace_push(kn_device_ctx *d, uint64_t id)
{
    (void)d;
    if (!T.on) return kn_error(KN_ERR_ARG, "no trace is on");
    if (T.push_id(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id) != CUPTI_SUCCESS)
        return kn_error(KN_ERR_UNSUPPORTED, "CUPTI refused an external correlation id");
    return KN_OK;
}

kn_status kn_cuda_trace_pop(kn_device_ctx *d)
{
    (void)d;
    uint64_t last = 0;
    if (!T.on) return kn_error(KN_ERR_ARG, "no trace is on");
    if (T.pop_id(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last) != CUPTI_SUCCESS)
        return kn_error(KN_ERR_UNSUPPORTED, "CUPTI refused to pop an external correlation id");
    return KN_OK;
}

/* correlation id -> external id, and the timed activities, gathered from
 * every buffer before they are joined (their records come in any order) */
typedef struct {
    uint32_t corr;
    uint64_t ext;
} corr_link;
typedef struct {
    uint32_t corr;
    double ms;
} timed_activity;

static int by_corr_link(const void *a, const void *b)
{
    uint32_t x = ((const corr_link *)a)->corr, y = ((const corr_link *)b)->corr;
    return x < y ? -1 : x > y;
}

static kn_status grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return KN_OK;
    int c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *q = realloc(*p, elem * (size_t)c);
    if (!q) return kn_error(KN_ERR_OOM, "out of host memory for trace records");
    *p = q;
    *cap = c;
    return KN_OK;
}

kn_status kn_cuda_trace_end(kn_device_ctx *d, void (*each)(void *ctx, uint64_t id, double ms), void *ctx)
{
    if (!T.on) return kn_error(KN_ERR_ARG, "no trace is on");
    kn_status st = kn_cuda_enter(d);
    if (st == KN_OK && cudaStreamSynchronize(kn_cuda_stream()) != cudaSuccess)
        st = kn_error(KN_ERR_DEVICE, "waiting for the GPU before reading the trace failed");
    trace_off();
    if (T.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != CUPTI_SUCCESS && st == KN_OK)
        st = kn_error(KN_ERR_UNSUPPORTED, "CUPTI could not flush its records");
    corr_link *links = NULL;
    timed_activity *acts = NULL;
    int n_links = 0, cap_links = 0, n_acts = 0, cap_acts = 0;
    pthread_mutex_lock(&T.lock);
    for (int b = 0; b < T.n_done && st == KN_OK; b++) {
        CUpti_Activity *rec = NULL;
        while (st == KN_OK && T.next_record(T.done[b].data, T.done[b].valid, &rec) == CUPTI_SUCCESS) {
            uint32_t corr = 0;
            uint64_t start = 0, end = 0;
            switch (rec->kind) {
            case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
                const CUpti_ActivityExternalCorrelation *x = (const void *)rec;
                if (x->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) continue;
                st = grow((void **)&links, &cap_links, n_links + 1, sizeof *links);
                if (st == KN_OK) links[n_links++] = (corr_link){x->correlationId, x->externalId};
                continue;
            }
            case CUPTI_ACTIVITY_KIND_KERNEL:
            case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
                const CUpti_ActivityKernel10 *k = (const void *)rec;
                corr = k->correlationId, start = k->start, end = k->end;
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMCPY: {
                const CUpti_ActivityMemcpy6 *m = (const void *)rec;
                corr = m->correlationId, start = m->start, end = m->end;
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMSET: {
                const CUpti_ActivityMemset4 *m = (const void *)rec;
                corr = m->correlationId, start = m->start, end = m->end;
                break;
            }
            default:
                continue; /* API records: only their correlation ids matter */
            }
            st = grow((void **)&acts, &cap_acts, n_acts + 1, sizeof *acts);
            if (st == KN_OK) acts[n_acts++] = (timed_activity){corr, end > start ? (double)(end - start) * 1e-6 : 0};
        }
    }
    bool lost = T.lost;
    pthread_mutex_unlock(&T.lock);
    drop_buffers();
    if (st == KN_OK && lost) st = kn_error(KN_ERR_UNSUPPORTED, "CUPTI dropped records: the trace is incomplete");
    if (st == KN_OK) {
        if (n_links) qsort(links, (size_t)n_links, sizeof *links, by_corr_link);
        for (int i = 0; i < n_acts; i++) {
            corr_link key = {acts[i].corr, 0};
            const corr_link *l = n_links ? bsearch(&key, links, (size_t)n_links, sizeof *links, by_corr_link) : NULL;
            if (l) each(ctx, l->ext, acts[i].ms);
        }
    }
    free(links);
    free(acts);
    /* detach: CUPTI left subscribed keeps hooks in the CUDA API calls of
     * everything that runs after the session; the next one attaches again
     * (ten profiled calls of the transformer took 0.17 s this way) */
    T.finalize();
    T.registered = false;
    return st;
}

#else /* built without CUPTI's headers: event timing only */

kn_status kn_cuda_trace_begin(kn_device_ctx *d)
{
    (void)d;
    return kn_error(KN_ERR_UNSUPPORTED, "kiln was built without CUPTI's headers");
}

kn_status kn_cuda_trace_push(kn_device_ctx *d, uint64_t id)
{
    (void)d, (void)id;
    return kn_error(KN_ERR_ARG, "no trace is on");
}

kn_status kn_cuda_trace_pop(kn_device_ctx *d)
{
    (void)d;
    return kn_error(KN_ERR_ARG, "no trace is on");
}

kn_status kn_cuda_trace_end(kn_device_ctx *d, void (*each)(void *ctx, uint64_t id, double ms), void *ctx)
{
    (void)d, (void)each, (void)ctx;
    return kn_error(KN_ERR_ARG, "no trace is on");
}
#endif
