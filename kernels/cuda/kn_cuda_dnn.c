/* kn_cuda_dnn: conv2d and its gradients on the GPU through cuDNN's graph
 * (backend) API, and what the other cuDNN callers share (the handle, the
 * engine choice, plans kept across processes). Which engine runs a
 * conv2d, cuDNN's or one of kiln's, is kn_cuda_conv.c's choice.
 *
 * One call: X [N,C,H,W] and W [K,C/groups,R,S] in the output's dtype,
 * contiguous and 16-byte aligned (a copy is made when they are not and the
 * runtime can), Y [N,K,P,Q] contiguous. With a bias the graph is conv ->
 * virtual f32 tensor -> pointwise ADD of bias [1,K,1,1] -> Y, so the bias
 * is added before the one rounding, as on the CPU; when cuDNN refuses that
 * graph, the conv alone runs and kiln's kernel adds the bias.
 *
 * Engines: heuristics mode A, then FALLBACK, in rank order. Strict f32
 * (allow_tf32 off) skips engines with the TENSOR_CORE or
 * DOWN_CONVERT_INPUTS notes (measured on the H100: strict 9e-7 error, TF32
 * 3e-4); every dtype skips REDUCED_PRECISION_REDUCTION (kiln sums in f32).
 * Runtime-compiled engines are tried only when no precompiled one works:
 * finalizing their plans took 0.5-1.8 s each.
 *
 * The plan and its descriptors are kept per call signature (shapes,
 * strides, dtypes, conv params, tf32, alignments) for the life of the
 * process; every plan runs in the GPU's one cuDNN workspace, which only
 * grows and keeps the buffers it grew out of, so CUDA graph recordings
 * stay valid. A refusal is remembered too: that signature goes straight
 * to the fallback kernel afterwards.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_dnn.h"

#include "kn_cuda_context.h"
#include "kn_cuda_libplans.h"
#include "kn_cuda_linalg.h"
#include "kn_cuda_module.h"
#include "kn_fs.h"
#include "kn_hash.h"
#include "kn_phase.h"
#include "kn_view.h"

#ifdef KILN_HAVE_CUDNN
#include <cudnn_graph.h>
#endif

/* ---- cuDNN ------------------------------------------------------------------ */

#ifdef KILN_HAVE_CUDNN

enum { UID_X = 1, UID_W, UID_Y, UID_B, UID_T /* virtual conv output */, UID_T2 /* virtual biased, before ReLU */ };
enum { MAX_KEEP = 16 }; /* conv + bias + ReLU: 13 descriptors and the chosen config */
enum { DNN_GRAD_X = 1, DNN_GRAD_W = 2 }; /* dnn_key.grad */
/* A workspace above this is not worth it: the next engine is tried. */
#define DNN_MAX_WORKSPACE ((int64_t)512 << 20)

typedef struct dnn_key {
    int32_t dt, tf32, bias_dt, fused;
    int32_t act; /* 1: ReLU after the bias add (only with fused) */
    int32_t variant; /* max-autotune: the variant-th allowed precompiled engine config (0: the first) */
    int32_t nhwc; /* channels-last: x, w and y strides are NHWC (xs and ws say so; y's follow) */
    int32_t grad; /* 0 the forward conv; DNN_GRAD_X the input's gradient (x is written), DNN_GRAD_W the weight's */
    int32_t stride[2], pad[2], dil[2];
    int64_t xd[4], xs[4], wd[4], ws[4], yd[4];
    int64_t align_x, align_w, align_y, align_b;
} dnn_key;

typedef struct dnn_entry {
    dnn_key key;
    uint64_t hash;
    bool refused;
    bool past_end; /* variant > 0 beyond the configs cuDNN offers */
    bool from_cache; /* the plan came from cache_dir (plan_load) */
    char label[128]; /* "cudnn eng 7 knobs(3=2,10=1)" */
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t keep[MAX_KEEP]; /* what the plan was built from */
    int nkeep;
    int64_t ws_size; /* the workspace its engine needs (the GPU's shared one: dnn_workspace) */
    kn_cuda_dnn_pack pack; /* the last execution's variant pack */
} dnn_entry;

/* One GPU's cuDNN (kn_cuda_dev.dnn): its handle and the plans built with it. */
struct kn_cuda_dnn {
    cudnnHandle_t h;
    int state; /* 0 not tried, 1 ready, -1 unavailable */
    size_t version;
    kn_cuda_libplans *plans; /* dnn_key -> dnn_entry */
    /* One workspace for every plan of this GPU (conv and attention): they
     * all run on its one stream, one after another, so none needs its own.
     * Each plan holding its own, sized for its engine, kept up to 512 MB
     * each alive for the process. It only grows; a grown-out buffer is
     * kept, not freed: a recorded CUDA graph may still point at it. */
    void *ws;
    int64_t ws_size;
    void **retired;
    int n_retired;
};

static kn_status dnn_fail(cudnnStatus_t s, const char *what)
{
    char last[512] = "";
    cudnnGetLastErrorString(last, sizeof last);
    return kn_error(KN_ERR_DEVICE, "conv2d: cuDNN %s failed: %s (%d)%s%s", what, cudnnGetErrorString(s),
                    (int)s, last[0] ? ": " : "", last);
}

static void dnn_entry_release(dnn_entry *e);

static void dnn_plan_destroy(void *plan)
{
    dnn_entry *e = plan;
    dnn_entry_release(e);
    free(e);
}

/* The shared workspace, at least need bytes (NULL for none); NULL with
 * *failed set when memory for it runs out. Grown to twice its size at
 * least, so the buffers kept for old recordings add up to less than the
 * current one. */
static void *dnn_workspace(kn_cuda_dnn *dn, int64_t need, bool *failed)
{
    *failed = false;
    if (need <= 0) return NULL;
    if (need <= dn->ws_size) return dn->ws;
    int64_t size = dn->ws_size * 2 > need ? dn->ws_size * 2 : need;
    size = (size + ((int64_t)1 << 20) - 1) & ~(((int64_t)1 << 20) - 1);
    void *ws = NULL, **r = NULL;
    if (dn->ws && !(r = realloc(dn->retired, sizeof *r * (size_t)(dn->n_retired + 1)))) {
        *failed = true;
        return NULL;
    }
    if (r) dn->retired = r;
    if (kn_cuda_malloc(size, &ws) != KN_OK) {
        *failed = true;
        return NULL;
    }
    if (dn->ws) dn->retired[dn->n_retired++] = dn->ws;
    dn->ws = ws;
    dn->ws_size = size;
    return ws;
}

/* The current GPU's cuDNN; NULL when it cannot start (kiln's kernel then
 * does every conv2d). */
static kn_cuda_dnn *dnn_ready(void)
{
    kn_cuda_dev *gpu = kn_cuda_current();
    if (!gpu->dnn && !(gpu->dnn = calloc(1, sizeof *gpu->dnn))) return NULL;
    kn_cuda_dnn *dn = gpu->dnn;
    if (dn->state) return dn->state > 0 ? dn : NULL;
    dn->state = -1;
    dn->version = cudnnGetVersion();
    kn_phase_begin(KN_PHASE_STARTUP);
    cudnnStatus_t s = cudnnCreate(&dn->h);
    kn_phase_end(KN_PHASE_STARTUP);
    if (s != CUDNN_STATUS_SUCCESS) {
        if (kn_cuda_lib_log_on())
            fprintf(stderr, "kiln: cuDNN %zu cannot start (%s): conv2d and attention use kiln's kernels\n", dn->version,
                    cudnnGetErrorString(s));
        return NULL;
    }
    if (!(dn->plans = kn_cuda_libplans_new(sizeof(dnn_key), dnn_plan_destroy))) return NULL;
    dn->state = 1;
    return dn;
}

void *kn_cuda_dnn_handle(size_t *version)
{
    kn_cuda_dnn *dn = dnn_ready();
    if (!dn) return NULL;
    *version = dn->version;
    return dn->h;
}

static bool is_not_supported(cudnnStatus_t s)
{
    return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED;
}

static cudnnDataType_t dnn_type(kn_dtype dt)
{
    switch (dt) {
    case KN_F64: return CUDNN_DATA_DOUBLE;
    case KN_BF16: return CUDNN_DATA_BFLOAT16;
    case KN_F16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
    }
}

/* Descriptors built for an entry are recorded in it, so that one cleanup
 * frees them whichever step fails. */
static cudnnStatus_t dnn_create(dnn_entry *e, cudnnBackendDescriptorType_t t,
                                cudnnBackendDescriptor_t *d)
{
    *d = NULL;
    if (e->nkeep == MAX_KEEP) return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(t, d);
    if (s == CUDNN_STATUS_SUCCESS) e->keep[e->nkeep++] = *d;
    return s;
}

static void dnn_entry_release(dnn_entry *e)
{
    kn_cuda_dnn_pack_release(&e->pack);
    if (e->plan) cudnnBackendDestroyDescriptor(e->plan);
    for (int i = e->nkeep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(e->keep[i]);
    e->plan = NULL;
    e->nkeep = 0;
}

static cudnnStatus_t dnn_tensor(dnn_entry *e, int64_t uid, cudnnDataType_t dt, const int64_t *dims,
                                const int64_t *strides, int64_t align, bool virt,
                                cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t d;
    cudnnStatus_t s = dnn_create(e, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (s == CUDNN_STATUS_SUCCESS && virt)
        s = cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(d);
    *out = d;
    return s;
}

/* Whether the engine behind cfg may run this graph; *rtc says it compiles
 * at plan time. */
static bool engine_allowed(cudnnBackendDescriptor_t cfg, bool strict_f32, bool *rtc)
{
    cudnnBackendDescriptor_t eng = NULL;
    int64_t n = 0;
    *rtc = false;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS)
        return false;
    bool ok = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                       &n, &eng) == CUDNN_STATUS_SUCCESS && n == 1;
    cudnnBackendNumericalNote_t num[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (ok && cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, num) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
            if (num[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) ok = false;
            if (strict_f32 && (num[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE ||
                               num[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
                ok = false;
        }
    cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    if (ok && cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                       CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, beh) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < n && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
            if (beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) *rtc = true;
    cudnnBackendDestroyDescriptor(eng);
    return ok;
}

/* "cudnn eng 7 knobs(3=2,10=1)": the engine's global index and its knob choices. */
static void engine_label(cudnnBackendDescriptor_t cfg, char *buf, size_t size)
{
    cudnnBackendDescriptor_t eng = NULL, knobs[16] = {NULL};
    int64_t n = 0, idx = -1, nk = 0;
    snprintf(buf, size, "cudnn engine");
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &idx) ==
            CUDNN_STATUS_SUCCESS)
        snprintf(buf, size, "cudnn eng %lld", (long long)idx);
    cudnnBackendDestroyDescriptor(eng);
    int made = 0;
    for (; made < 16; made++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[made]) != CUDNN_STATUS_SUCCESS)
            break;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &nk,
                                 knobs) == CUDNN_STATUS_SUCCESS && nk > 0) {
        size_t at = strlen(buf);
        at += (size_t)snprintf(buf + at, at < size ? size - at : 0, " knobs(");
        for (int64_t i = 0; i < nk && i < made && at < size; i++) {
            cudnnBackendKnobType_t type;
            int64_t v = 0, got = 0;
            if (cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got,
                                         &type) != CUDNN_STATUS_SUCCESS ||
                cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got,
                                         &v) != CUDNN_STATUS_SUCCESS)
                continue;
            at += (size_t)snprintf(buf + at, size - at, "%s%d=%lld", i ? "," : "", (int)type, (long long)v);
        }
        if (at < size) snprintf(buf + at, size - at, ")");
    }
    for (int i = 0; i < made; i++) cudnnBackendDestroyDescriptor(knobs[i]);
}

/* The engine configs heuristics `mode` ranks for graph, best first:
 * *cfgs (malloc'd) holds *got descriptors the caller destroys. */
static cudnnStatus_t dnn_heuristics(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                                    cudnnBackendDescriptor_t **cfgs_out, int64_t *got)
{
    cudnnBackendDescriptor_t heur = NULL, *cfgs = NULL;
    int64_t n = 0;
    *cfgs_out = NULL;
    *got = 0;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &graph);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(heur);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
    if (s == CUDNN_STATUS_SUCCESS && n > 0) {
        cfgs = calloc((size_t)n, sizeof *cfgs);
        if (!cfgs) s = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        for (int64_t i = 0; i < n && s == CUDNN_STATUS_SUCCESS; i++)
            s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, got,
                                         cfgs);
    }
    if (heur) cudnnBackendDestroyDescriptor(heur);
    if (s != CUDNN_STATUS_SUCCESS) {
        for (int64_t i = 0; cfgs && i < n; i++)
            if (cfgs[i]) cudnnBackendDestroyDescriptor(cfgs[i]);
        free(cfgs);
        *got = 0;
        return s;
    }
    for (int64_t i = *got; i < n; i++) cudnnBackendDestroyDescriptor(cfgs[i]);
    *cfgs_out = cfgs;
    return s;
}

/* The execution plan of engine config cfg, finalized (runtime-compiled
 * engines compile here), and its workspace size. */
static cudnnStatus_t dnn_plan_of(kn_cuda_dnn *dn, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t *plan_out,
                                 int64_t *ws)
{
    cudnnBackendDescriptor_t plan = NULL;
    int64_t cnt = 0;
    *ws = 0;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfg);
    /* the attribute is deprecated since 9.8, hence the number; but without
     * it 9.14 on the H100 saw no device (its log: GPU=NULL, smVersion 0,
     * every engine ARCH_MISMATCH, and a SIGFPE inside the heuristics for a
     * 1-channel conv) */
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(plan, (cudnnBackendAttributeName_t)400, CUDNN_TYPE_HANDLE, 1, &dn->h);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(plan);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, ws);
    if (s != CUDNN_STATUS_SUCCESS && plan) {
        cudnnBackendDestroyDescriptor(plan);
        plan = NULL;
    }
    *plan_out = plan;
    return s;
}

/* Which engine configs a choice takes, and in what order. */
typedef struct plan_rules {
    bool conv_engines;   /* engine_allowed decides (strict_f32 below), and precompiled engines
                            are tried before runtime-compiled ones; else any engine, in rank order */
    bool strict_f32;
    bool precompiled_only; /* with conv_engines: no runtime-compiled engine at all */
    int skip;            /* allowed configs passed over first (max-autotune's variant) */
    int64_t max_ws;      /* the largest workspace taken */
} plan_rules;

/* The first config heuristics A (then FALLBACK) ranks for graph that the
 * rules allow and whose plan finalizes within max_ws, after passing over
 * r->skip such configs: *plan, the config it was built from (*cfg, to
 * keep as long as the plan), *ws and its label. Returns cuDNN's status of
 * the last failure when none does (SUCCESS when none was even offered). */
static cudnnStatus_t choose_plan(kn_cuda_dnn *dn, cudnnBackendDescriptor_t graph, const plan_rules *r,
                                 cudnnBackendDescriptor_t *plan, cudnnBackendDescriptor_t *cfg, int64_t *ws,
                                 char *label, size_t label_size)
{
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
    int seen = 0;
    *plan = *cfg = NULL;
    int passes = r->conv_engines && !r->precompiled_only ? 2 : 1; /* pass 1: runtime-compiled engines */
    for (int pass = 0; pass < passes && !*plan; pass++)
        for (int mi = 0; mi < 2 && !*plan; mi++) {
            cudnnBackendDescriptor_t *cfgs = NULL;
            int64_t got = 0, chosen = -1;
            cudnnStatus_t s = dnn_heuristics(graph, modes[mi], &cfgs, &got);
            if (s != CUDNN_STATUS_SUCCESS) last = s;
            for (int64_t i = 0; i < got && chosen < 0; i++) {
                bool rtc;
                if (r->conv_engines && (!engine_allowed(cfgs[i], r->strict_f32, &rtc) || rtc != (pass == 1)))
                    continue;
                cudnnBackendDescriptor_t p = NULL;
                int64_t w = 0;
                cudnnStatus_t ps = dnn_plan_of(dn, cfgs[i], &p, &w);
                bool fits = w <= r->max_ws;
                if (ps == CUDNN_STATUS_SUCCESS && fits && seen++ < r->skip) {
                    cudnnBackendDestroyDescriptor(p); /* an earlier variant's */
                    continue;
                }
                if (ps == CUDNN_STATUS_SUCCESS && fits) {
                    engine_label(cfgs[i], label, label_size);
                    *plan = p;
                    *cfg = cfgs[i];
                    *ws = w;
                    chosen = i;
                } else {
                    if (p) cudnnBackendDestroyDescriptor(p);
                    if (ps != CUDNN_STATUS_SUCCESS) last = ps;
                }
            }
            for (int64_t i = 0; i < got; i++)
                if (i != chosen) cudnnBackendDestroyDescriptor(cfgs[i]);
            free(cfgs);
        }
    return *plan ? CUDNN_STATUS_SUCCESS : last;
}

/* A finalized plan for the op graph: heuristics A then FALLBACK, ranked;
 * precompiled engines first (pass 0), runtime-compiled ones after (pass 1).
 * NOT_SUPPORTED when no engine takes the graph. The chosen config goes to
 * e->keep (the plan was built from it). Variant v > 0 (max-autotune) takes
 * the v-th allowed precompiled config after the first instead (the same
 * config listed by both heuristics counts once per listing), with a
 * smaller workspace cap; none: e->past_end. */
#define DNN_VARIANT_MAX 8
#define DNN_VARIANT_WORKSPACE ((int64_t)64 << 20)
static cudnnStatus_t dnn_pick_plan(kn_cuda_dnn *dn, dnn_entry *e, cudnnBackendDescriptor_t graph, bool strict_f32)
{
    int want = e->key.variant;
    if (want >= DNN_VARIANT_MAX || e->nkeep >= MAX_KEEP) {
        e->past_end = want > 0;
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    plan_rules r = {.conv_engines = true, .strict_f32 = strict_f32, .precompiled_only = want > 0, .skip = want,
                    .max_ws = want ? DNN_VARIANT_WORKSPACE : DNN_MAX_WORKSPACE};
    cudnnBackendDescriptor_t cfg = NULL;
    cudnnStatus_t last = choose_plan(dn, graph, &r, &e->plan, &cfg, &e->ws_size, e->label, sizeof e->label);
    if (e->plan) {
        e->keep[e->nkeep++] = cfg;
        return CUDNN_STATUS_SUCCESS;
    }
    if (want) e->past_end = true;
    return is_not_supported(last) || last == CUDNN_STATUS_SUCCESS ? CUDNN_STATUS_NOT_SUPPORTED : last;
}

int kn_cuda_dnn_first_plan(void *graph, int64_t max_ws, void **plan, void **cfg, int64_t *ws, char *label,
                           size_t label_size)
{
    kn_cuda_dnn *dn = dnn_ready();
    *plan = *cfg = NULL;
    if (!dn) return CUDNN_STATUS_NOT_INITIALIZED;
    plan_rules r = {.conv_engines = false, .max_ws = max_ws};
    cudnnStatus_t s = choose_plan(dn, (cudnnBackendDescriptor_t)graph, &r, (cudnnBackendDescriptor_t *)plan,
                                  (cudnnBackendDescriptor_t *)cfg, ws, label, label_size);
    return s == CUDNN_STATUS_SUCCESS && !*plan ? CUDNN_STATUS_NOT_SUPPORTED : s;
}

/* ---- plans across processes ------------------------------------------
 * Choosing a plan (the heuristics, then finalizing candidates until one
 * takes the graph) is most of a conv's cold compile, and every attention
 * engine compiles at plan time (0.4-2 s). The chosen plan's JSON
 * (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION) is kept in
 * cache_dir/cudnn-plans/HASH.plan, HASH over the kind ("conv",
 * "attention"), the key, cuDNN's version and the GPU's compute
 * capability; the file's first line is the plan's label. A later process
 * builds the plan from it (no heuristics, no candidates). Anything wrong
 * with a file (unreadable, another cuDNN's) only means the plan is chosen
 * again and the file rewritten. */
static bool plan_cache_path(kn_cuda_dnn *dn, const char *kind, const void *key, size_t key_size, char *buf,
                            size_t size)
{
    const char *dir = kn_cuda_cache_dir();
    if (!dir || !dir[0] || getenv("KILN_NO_PLAN_CACHE")) return false;
    struct {
        uint64_t key, version;
        int32_t arch, pad_;
    } id;
    memset(&id, 0, sizeof id);
    id.key = kn_hash_bytes(kn_hash_bytes(KN_HASH_SEED, kind, strlen(kind)), key, key_size);
    id.version = (uint64_t)dn->version;
    id.arch = kn_cuda_current()->arch;
    int n = snprintf(buf, size, "%s/cudnn-plans/%016llx.plan", dir,
                     (unsigned long long)kn_hash_bytes(KN_HASH_SEED, &id, sizeof id));
    return n > 0 && (size_t)n < size;
}

static bool plan_load(kn_cuda_dnn *dn, const char *kind, const void *key, size_t key_size, int64_t max_ws,
                      cudnnBackendDescriptor_t *plan_out, int64_t *ws_out, char *label, size_t label_size)
{
    char path[KN_CACHE_PATH_MAX];
    if (!plan_cache_path(dn, kind, key, key_size, path, sizeof path)) return false;
    long size = 0;
    char *text = kn_read_file(path, 4L << 20, &size);
    if (!text) return false;
    char *nl = memchr(text, '\n', (size_t)size);
    cudnnBackendDescriptor_t plan = NULL;
    int64_t ws = 0, cnt = 0;
    cudnnStatus_t s = nl ? cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)
                         : CUDNN_STATUS_BAD_PARAM;
    if (s == CUDNN_STATUS_SUCCESS) /* deprecated, still needed: see dnn_pick_plan */
        s = cudnnBackendSetAttribute(plan, (cudnnBackendAttributeName_t)400, CUDNN_TYPE_HANDLE, 1, &dn->h);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                     (int64_t)(size - (nl + 1 - text)), nl + 1);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(plan);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws);
    if (s != CUDNN_STATUS_SUCCESS || ws > max_ws) {
        if (plan) cudnnBackendDestroyDescriptor(plan);
        free(text);
        return false;
    }
    *nl = 0;
    snprintf(label, label_size, "%s", text);
    *plan_out = plan;
    *ws_out = ws;
    free(text);
    return true;
}

static void plan_save(kn_cuda_dnn *dn, const char *kind, const void *key, size_t key_size,
                      cudnnBackendDescriptor_t plan, const char *label)
{
    char path[KN_CACHE_PATH_MAX], dir[KN_CACHE_PATH_MAX];
    if (!plan_cache_path(dn, kind, key, key_size, path, sizeof path)) return;
    int64_t n = 0;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n,
                                 NULL) != CUDNN_STATUS_SUCCESS || n <= 0 || n > (4 << 20))
        return;
    char *json = malloc((size_t)n + 1);
    if (!json) return;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &n,
                                 json) != CUDNN_STATUS_SUCCESS) {
        free(json);
        return;
    }
    while (n > 0 && json[n - 1] == 0) n--; /* the count may include the NUL */
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    char *tmp = NULL;
    FILE *f = NULL;
    /* best effort: a plan not kept is chosen again by the next process */
    if (kn_make_dirs(dir) && kn_fs_open_temp(path, &tmp, &f) == KN_OK) {
        bool ok = fprintf(f, "%s\n", label) > 0 && fwrite(json, 1, (size_t)n, f) == (size_t)n;
        (void)kn_fs_commit_temp(f, tmp, path, ok ? KN_OK : KN_ERR_IO);
    }
    free(tmp);
    free(json);
}

bool kn_cuda_dnn_plan_load(const char *kind, const void *key, size_t key_size, int64_t max_ws, void **plan,
                           int64_t *ws, char *label, size_t label_size)
{
    kn_cuda_dnn *dn = dnn_ready();
    return dn && plan_load(dn, kind, key, key_size, max_ws, (cudnnBackendDescriptor_t *)plan, ws, label, label_size);
}

void kn_cuda_dnn_plan_save(const char *kind, const void *key, size_t key_size, void *plan, const char *label)
{
    kn_cuda_dnn *dn = dnn_ready();
    if (dn) plan_save(dn, kind, key, key_size, (cudnnBackendDescriptor_t)plan, label);
}

/* The convolution descriptor of e's key: 2-D cross-correlation computed
 * in comp, its paddings, dilations and strides. */
static cudnnStatus_t dnn_conv_desc(dnn_entry *e, cudnnDataType_t comp, cudnnBackendDescriptor_t *out)
{
    const dnn_key *k = &e->key;
    cudnnBackendDescriptor_t conv;
    int64_t sd = 2, pre[2] = {k->pad[0], k->pad[1]}, dil[2] = {k->dil[0], k->dil[1]};
    int64_t str[2] = {k->stride[0], k->stride[1]};
    cudnnConvolutionMode_t cm = CUDNN_CROSS_CORRELATION;
    cudnnStatus_t s = dnn_create(e, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &cm);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pre);
    /* PyTorch pads symmetrically; the floor in the output size drops any
     * excess on the far side */
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pre);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(conv);
    *out = conv;
    return s;
}

/* A convolution op's alpha 1 and beta 0 (the result written, not added
 * to), in the scale type of the key's dtype (double for f64). */
static cudnnStatus_t dnn_alpha_beta(const dnn_entry *e, cudnnBackendDescriptor_t op,
                                    cudnnBackendAttributeName_t alpha, cudnnBackendAttributeName_t beta)
{
    float af = 1.0f, bf = 0.0f;
    double ad = 1.0, bd = 0.0;
    bool dbl = (kn_dtype)e->key.dt == KN_F64;
    cudnnBackendAttributeType_t t = dbl ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
    cudnnStatus_t s = cudnnBackendSetAttribute(op, alpha, t, 1, dbl ? (const void *)&ad : (const void *)&af);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(op, beta, t, 1, dbl ? (const void *)&bd : (const void *)&bf);
    return s;
}

/* The forward convolution op: x (tx) and w (tw) into conv_y through conv,
 * alpha 1 and beta 0 in the scale type of the key's dtype. */
static cudnnStatus_t dnn_conv_op(dnn_entry *e, cudnnBackendDescriptor_t tx, cudnnBackendDescriptor_t tw,
                                 cudnnBackendDescriptor_t conv_y, cudnnBackendDescriptor_t conv,
                                 cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t op_conv;
    /* the conv op; groups follow from X's C over W's C/groups */
    cudnnStatus_t s = dnn_create(e, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op_conv);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op_conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op_conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op_conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_y);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op_conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    if (s == CUDNN_STATUS_SUCCESS)
        s = dnn_alpha_beta(e, op_conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(op_conv);
    *out = op_conv;
    return s;
}

/* conv2d's gradient op of key e (grad DNN_GRAD_X: dx from dy and w;
 * DNN_GRAD_W: dw from x and dy), alpha 1 and beta 0: the result is
 * written, not added to. */
static cudnnStatus_t dnn_conv_grad_op(dnn_entry *e, cudnnBackendDescriptor_t tx, cudnnBackendDescriptor_t tw,
                                      cudnnBackendDescriptor_t ty, cudnnBackendDescriptor_t conv,
                                      cudnnBackendDescriptor_t *out)
{
    /* the two ops' descriptor and attribute names, data then filter */
    typedef struct {
        cudnnBackendDescriptorType_t type;
        cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
    } grad_names;
    static const grad_names names[2] = {
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
    };
    const grad_names *nm = &names[e->key.grad == DNN_GRAD_X ? 0 : 1];
    cudnnBackendDescriptor_t op;
    cudnnStatus_t s = dnn_create(e, nm->type, &op);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(op, nm->x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(op, nm->w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(op, nm->y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(op, nm->conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    if (s == CUDNN_STATUS_SUCCESS) s = dnn_alpha_beta(e, op, nm->alpha, nm->beta);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(op);
    *out = op;
    return s;
}

/* A pointwise op (mode, computed in comp) of x, and b when not NULL, into
 * y: the conv graph's bias add and ReLU. */
static cudnnStatus_t dnn_pointwise(dnn_entry *e, cudnnPointwiseMode_t mode, cudnnDataType_t comp,
                                   cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                   cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t pw, op_pw = NULL;
    cudnnStatus_t s = dnn_create(e, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(pw);
    if (s == CUDNN_STATUS_SUCCESS)
        s = dnn_create(e, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op_pw);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op_pw, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op_pw, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (s == CUDNN_STATUS_SUCCESS && b)
        s = cudnnBackendSetAttribute(op_pw, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op_pw, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(op_pw);
    *out = op_pw;
    return s;
}

/* The op graph of key k (conv, or conv + bias add when k->fused) and its
 * plan. NOT_SUPPORTED (any of its sub-codes) means cuDNN refuses. */
static cudnnStatus_t dnn_build(kn_cuda_dnn *dn, dnn_entry *e)
{
    if (plan_load(dn, "conv", &e->key, sizeof e->key, DNN_MAX_WORKSPACE, &e->plan, &e->ws_size, e->label,
                  sizeof e->label)) {
        e->from_cache = true;
        return CUDNN_STATUS_SUCCESS;
    }
    const dnn_key *k = &e->key;
    kn_dtype kdt = (kn_dtype)k->dt;
    cudnnDataType_t dt = dnn_type(kdt);
    cudnnDataType_t comp = kdt == KN_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t tx, tw, ty, tb = NULL, tt = NULL, tt2 = NULL, conv, op_conv, op_pw = NULL, op_rl = NULL,
                             graph;
    int64_t ys[4] = {k->yd[1] * k->yd[2] * k->yd[3], k->yd[2] * k->yd[3], k->yd[3], 1};
    if (k->nhwc) { /* {N, K, P, Q} laid out N, P, Q, K */
        ys[1] = 1;
        ys[2] = k->yd[3] * k->yd[1];
        ys[3] = k->yd[1];
    }
    cudnnStatus_t s = dnn_tensor(e, UID_X, dt, k->xd, k->xs, k->align_x, false, &tx);
    if (s == CUDNN_STATUS_SUCCESS) s = dnn_tensor(e, UID_W, dt, k->wd, k->ws, k->align_w, false, &tw);
    if (s == CUDNN_STATUS_SUCCESS) s = dnn_tensor(e, UID_Y, dt, k->yd, ys, k->align_y, false, &ty);
    if (s == CUDNN_STATUS_SUCCESS && k->fused) {
        int64_t bd[4] = {1, k->yd[1], 1, 1}, bs[4] = {k->yd[1], 1, 1, 1};
        s = dnn_tensor(e, UID_B, dnn_type((kn_dtype)k->bias_dt), bd, bs, k->align_b, false, &tb);
        if (s == CUDNN_STATUS_SUCCESS) s = dnn_tensor(e, UID_T, comp, k->yd, ys, 16, true, &tt);
        if (s == CUDNN_STATUS_SUCCESS && k->act) s = dnn_tensor(e, UID_T2, comp, k->yd, ys, 16, true, &tt2);
    }
    if (s == CUDNN_STATUS_SUCCESS) s = dnn_conv_desc(e, comp, &conv);
    cudnnBackendDescriptor_t conv_y = k->fused ? tt : ty;
    if (s == CUDNN_STATUS_SUCCESS)
        s = k->grad ? dnn_conv_grad_op(e, tx, tw, ty, conv, &op_conv) : dnn_conv_op(e, tx, tw, conv_y, conv, &op_conv);
    /* the bias add */
    cudnnBackendDescriptor_t add_y = k->act ? tt2 : ty;
    if (s == CUDNN_STATUS_SUCCESS && k->fused) s = dnn_pointwise(e, CUDNN_POINTWISE_ADD, comp, tt, tb, add_y, &op_pw);
    /* the ReLU after it (a compiled plan folds the graph's ReLU here) */
    if (s == CUDNN_STATUS_SUCCESS && k->fused && k->act)
        s = dnn_pointwise(e, CUDNN_POINTWISE_RELU_FWD, comp, tt2, NULL, ty, &op_rl);
    /* the graph */
    cudnnBackendDescriptor_t ops[3] = {op_conv, op_pw, op_rl};
    if (s == CUDNN_STATUS_SUCCESS) s = dnn_create(e, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     k->fused ? (k->act ? 3 : 2) : 1, ops);
    /* deprecated since 9.8 but still needed (see dnn_pick_plan) */
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(graph, (cudnnBackendAttributeName_t)800, CUDNN_TYPE_HANDLE, 1, &dn->h);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(graph);
    if (s == CUDNN_STATUS_SUCCESS) s = dnn_pick_plan(dn, e, graph, kdt == KN_F32 && !k->tf32);
    if (s == CUDNN_STATUS_SUCCESS) plan_save(dn, "conv", &e->key, sizeof e->key, e->plan, e->label);
    return s;
}

/* The cached entry for k, built on first use; a refusal is an entry too. */
static kn_status dnn_entry_get(kn_cuda_dnn *dn, const dnn_key *k, dnn_entry **out)
{
    uint64_t h = kn_hash_bytes(KN_HASH_SEED, k, sizeof *k);
    dnn_entry *e = kn_cuda_libplans_find(dn->plans, k, h);
    if (e) {
        *out = e;
        return KN_OK;
    }
    e = calloc(1, sizeof *e);
    if (!e) return kn_error(KN_ERR_OOM, "conv2d: out of memory for a cuDNN plan");
    e->key = *k;
    e->hash = h;
    kn_phase_begin(KN_PHASE_LIBRARY_PLANS);
    cudnnStatus_t s = dnn_build(dn, e);
    kn_phase_end(KN_PHASE_LIBRARY_PLANS);
    kn_status st = KN_OK;
    if (kn_cuda_lib_log_on()) {
        char last[256] = "";
        if (s != CUDNN_STATUS_SUCCESS) cudnnGetLastErrorString(last, sizeof last);
        fprintf(stderr,
                "kiln: conv2d %s x{%lld,%lld,%lld,%lld} w{%lld,%lld,%lld,%lld} s{%d,%d} p{%d,%d} d{%d,%d} "
                "%s%s tf32=%d align=%lld,%lld,%lld: %s%s%s\n",
                kn_dtype_name((kn_dtype)k->dt), (long long)k->xd[0], (long long)k->xd[1],
                (long long)k->xd[2], (long long)k->xd[3], (long long)k->wd[0], (long long)k->wd[1],
                (long long)k->wd[2], (long long)k->wd[3], k->stride[0], k->stride[1], k->pad[0],
                k->pad[1], k->dil[0], k->dil[1], k->fused ? "fused bias" : "conv", k->nhwc ? " nhwc" : "", k->tf32,
                (long long)k->align_x, (long long)k->align_y, (long long)k->align_b,
                s != CUDNN_STATUS_SUCCESS ? "cuDNN refused: " : e->from_cache ? "cuDNN plan (from the cache)" : "cuDNN plan",
                s == CUDNN_STATUS_SUCCESS ? "" : cudnnGetErrorString(s), last[0] ? last : "");
    }
    if (s != CUDNN_STATUS_SUCCESS) {
        /* bad-param codes also come from shapes or layouts cuDNN cannot
         * take: only allocation and internal failures are errors */
        if (CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_INTERNAL_ERROR ||
            CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_EXECUTION_FAILED)
            st = dnn_fail(s, "plan build");
        dnn_entry_release(e);
        e->refused = true;
    }
    if (st != KN_OK) {
        free(e);
        return st;
    }
    if ((st = kn_cuda_libplans_insert(dn->plans, &e->key, e->hash, e)) != KN_OK) {
        dnn_entry_release(e);
        free(e);
        return st;
    }
    *out = e;
    return KN_OK;
}

void kn_cuda_dnn_pack_release(kn_cuda_dnn_pack *pack)
{
    if (pack->vp) cudnnBackendDestroyDescriptor((cudnnBackendDescriptor_t)pack->vp);
    memset(pack, 0, sizeof *pack);
}

int kn_cuda_dnn_execute(void *plan, int64_t ws_size, const int64_t *uids, void *const *ptrs, int n,
                        kn_cuda_dnn_pack *pack)
{
    kn_cuda_dnn *dn = dnn_ready();
    if (!dn || n > KN_CUDA_DNN_PACK_MAX) return CUDNN_STATUS_BAD_PARAM;
    bool failed;
    void *ws = dnn_workspace(dn, ws_size, &failed);
    if (failed) return CUDNN_STATUS_ALLOC_FAILED;
    cudnnStatus_t s = cudnnSetStream(dn->h, kn_cuda_stream());
    /* the pack holds the data pointers and the workspace (which moves when it grows) */
    if (pack->vp && (pack->n != n || pack->ws != ws || memcmp(pack->ptrs, ptrs, sizeof(void *) * (size_t)n) != 0))
        kn_cuda_dnn_pack_release(pack);
    if (s == CUDNN_STATUS_SUCCESS && !pack->vp) {
        cudnnBackendDescriptor_t vp = NULL;
        s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
        if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(vp);
        if (s == CUDNN_STATUS_SUCCESS) {
            pack->vp = vp;
            pack->n = n;
            pack->ws = ws;
            memcpy(pack->ptrs, ptrs, sizeof(void *) * (size_t)n);
        } else if (vp) {
            cudnnBackendDestroyDescriptor(vp);
        }
    }
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendExecute(dn->h, (cudnnBackendDescriptor_t)plan, (cudnnBackendDescriptor_t)pack->vp);
    return (int)s;
}

static kn_status dnn_execute(dnn_entry *e, void *x, void *w, void *y, void *b)
{
    static const int64_t uids[4] = {UID_X, UID_W, UID_Y, UID_B};
    void *ptrs[4] = {x, w, y, b};
    cudnnStatus_t s = (cudnnStatus_t)kn_cuda_dnn_execute(e->plan, e->ws_size, uids, ptrs, e->key.fused ? 4 : 3, &e->pack);
    if (s == CUDNN_STATUS_SUCCESS) return KN_OK;
    if (is_not_supported(s)) return KN_ERR_UNSUPPORTED; /* the caller falls back */
    return dnn_fail(s, "execute");
}

/* Strides that cuDNN reads as a plain NCHW tensor. */
static void packed(const int64_t *d, int64_t *s)
{
    s[3] = 1;
    s[2] = d[3];
    s[1] = d[2] * d[3];
    s[0] = d[1] * d[2] * d[3];
}

/* Strides of an NHWC tensor of NCHW dims d, in NCHW order. */
static void packed_nhwc(const int64_t *d, int64_t *s)
{
    s[1] = 1;
    s[3] = d[1];
    s[2] = d[3] * d[1];
    s[0] = d[2] * d[3] * d[1];
}

/* x and w (in[0], in[1]) as cuDNN takes them for output dtype dt: that
 * dtype, packed (NCHW, or NHWC with the channels the weight reads for a
 * channels-last call), 16-byte aligned; copies where the views are not
 * (in tmp, the caller releases them). *ready stays false when a needed
 * copy is not available (kiln's kernel then runs). */
static kn_status dnn_operands(const kn_attrs *at, kn_dtype dt, kn_tensor *tmp[4], const kn_tensor *in[2], bool *ready)
{
    const kn_tensor *x0 = in[0], *w0 = in[1];
    bool nhwc = at->out_layout == KN_LAYOUT_NHWC, x_nhwc = at->in_layout == KN_LAYOUT_NHWC;
    kn_status st = KN_OK;
    int64_t cx = nhwc ? w0->shape[3] * at->groups : 0; /* the channels cuDNN reads */
    if (nhwc && x0->dtype != dt) { /* the transpose below moves bytes: convert first */
        if (kn_cuda_copy_as(x0, dt, &tmp[3]) != KN_OK) return st;
        in[0] = tmp[3];
    }
    /* x and w: the output's dtype, packed (NCHW, or NHWC for a
     * channels-last call), 16-byte aligned */
    for (int i = 0; i < 2; i++) {
        const kn_tensor *t = in[i];
        bool aligned = kn_cuda_align_of(kn_cuda_tensor_ptr(t), NULL, 0, 16) == 16;
        if (nhwc && i == 0) {
            if (x_nhwc && t->shape[3] == cx && kn_tensor_is_contiguous(t) && aligned) continue;
            kn_tensor v = x_nhwc ? kn_view_nhwc_as_nchw(t) : *t;
            if ((st = kn_cuda_linalg_to_nhwc(&v, cx, &tmp[0])) != KN_OK) return st;
            in[0] = tmp[0];
            continue;
        }
        if (t->dtype == dt && kn_tensor_is_contiguous(t) && aligned) continue;
        if (kn_cuda_copy_as(t, dt, &tmp[i]) != KN_OK) {
            if (kn_cuda_lib_log_on())
                fprintf(stderr, "kiln: conv2d: no copy of %s for cuDNN (%s): kiln's kernel runs\n",
                        i ? "the weight" : "x", kn_last_error());
            return st;
        }
        in[i] = tmp[i];
    }
    *ready = true;
    return st;
}

/* The dims and packed strides of x, w and y into k, in NCHW order: a
 * channels-last call's tensors are {N, H, W, C}, their strides NHWC. */
static void dnn_key_dims(dnn_key *k, const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, bool nhwc)
{
    if (nhwc) { /* NCHW dims, NHWC strides */
        int64_t xd[4] = {x->shape[0], x->shape[3], x->shape[1], x->shape[2]};
        int64_t wd[4] = {w->shape[0], w->shape[3], w->shape[1], w->shape[2]};
        int64_t yd[4] = {y->shape[0], y->shape[3], y->shape[1], y->shape[2]};
        memcpy(k->xd, xd, sizeof xd);
        memcpy(k->wd, wd, sizeof wd);
        memcpy(k->yd, yd, sizeof yd);
        packed_nhwc(k->xd, k->xs);
        packed_nhwc(k->wd, k->ws);
    } else {
        int xo = x->ndim - 3, yo = y->ndim - 3;
        k->xd[0] = xo ? x->shape[0] : 1;
        for (int i = 0; i < 3; i++) k->xd[i + 1] = x->shape[xo + i];
        for (int i = 0; i < 4; i++) k->wd[i] = w->shape[i];
        k->yd[0] = k->xd[0];
        for (int i = 0; i < 3; i++) k->yd[i + 1] = y->shape[yo + i];
        packed(k->xd, k->xs);
        packed(k->wd, k->ws);
    }
}

/* The cuDNN path; *done stays false when cuDNN refuses or a needed copy is
 * not available (the caller then runs kiln's kernel). Channels-last calls
 * (at->out_layout NHWC) give cuDNN x {N, H, W, Cw*groups} (made so, and
 * padded, when x is NCHW or narrower), w {K, kh, kw, Cw} and y
 * {N, P, Q, K}, all contiguous. */
kn_status kn_cuda_dnn_conv(const kn_tensor *x0, const kn_tensor *w0, const kn_tensor *bias, kn_tensor *y,
                           const kn_attrs *at, int act, int variant, bool *done)
{
    *done = false;
    kn_cuda_dnn *dn = dnn_ready();
    if (!dn) return KN_OK;
    kn_dtype dt = y->dtype;
    bool nhwc = at->out_layout == KN_LAYOUT_NHWC, x_nhwc = at->in_layout == KN_LAYOUT_NHWC;
    if (x_nhwc && !nhwc) return KN_OK; /* not a form the layout pass makes: kiln's kernel */
    kn_tensor *tmp[4] = {NULL, NULL, NULL, NULL};
    const kn_tensor *in[2] = {x0, w0};
    bool ready = false;
    kn_status st = dnn_operands(at, dt, tmp, in, &ready);
    if (!ready) goto out;
    const kn_tensor *x = in[0], *w = in[1];
    dnn_key k;
    memset(&k, 0, sizeof k);
    k.dt = (int32_t)dt;
    k.tf32 = dt == KN_F32 && kn_cuda_allow_tf32();
    k.variant = variant;
    k.nhwc = nhwc;
    bool past_end = false;
    for (int i = 0; i < 2; i++) {
        k.stride[i] = at->stride[i];
        k.pad[i] = at->padding[i];
        k.dil[i] = at->dilation[i];
    }
    dnn_key_dims(&k, x, w, y, nhwc);
    char *px = kn_cuda_tensor_ptr(x), *pw = kn_cuda_tensor_ptr(w), *py = kn_cuda_tensor_ptr(y);
    k.align_x = k.align_w = 16;
    k.align_y = kn_cuda_align_of(py, NULL, 0, 16);
    /* the bias for the fused graph: output dtype, one stride */
    const kn_tensor *fb = NULL;
    if (bias) {
        fb = bias;
        if (bias->dtype != dt || (bias->shape[0] > 1 && bias->strides[0] != 1))
            fb = kn_cuda_copy_as(bias, dt, &tmp[2]) == KN_OK ? tmp[2] : NULL;
    }
    for (int fused = fb ? 1 : 0; fused >= 0 && !*done; fused--) {
        k.fused = fused;
        k.act = fused ? act : 0;
        k.bias_dt = fused ? (int32_t)fb->dtype : 0;
        k.align_b = fused ? kn_cuda_align_of(kn_cuda_tensor_ptr(fb), NULL, 0, 16) : 0;
        dnn_entry *e = NULL;
        if ((st = dnn_entry_get(dn, &k, &e)) != KN_OK) goto out;
        past_end = past_end || e->past_end;
        if (e->refused) continue;
        st = dnn_execute(e, px, pw, py, fused ? kn_cuda_tensor_ptr(fb) : NULL);
        if (st == KN_ERR_UNSUPPORTED) { /* refused at run time: remember it */
            st = KN_OK;
            e->refused = true;
            if (kn_cuda_lib_log_on()) fprintf(stderr, "kiln: conv2d: cuDNN refused to execute its plan\n");
            continue;
        }
        if (st != KN_OK) goto out;
        *done = true;
        kn_cuda_variant_label("%s%s%s", e->label, nhwc ? " nhwc" : "", fused ? (act ? " +bias+relu" : " +bias") : "");
        /* the channel of element i: (i / inner) % K, inner P*Q for NCHW, 1 for NHWC */
        if (!fused && (bias || act)) st = kn_cuda_bias_act(y, bias, nhwc ? 1 : k.yd[2] * k.yd[3], k.yd[1], act);
    }
    /* a variant is that engine or nothing: kiln's kernel is no variant */
    if (!*done && variant && st == KN_OK)
        st = past_end ? kn_error(KN_ERR_RANGE, "conv2d: cuDNN has no variant %d for this call", variant)
                      : kn_error(KN_ERR_UNSUPPORTED, "conv2d: cuDNN variant %d refused this call", variant);
out:
    for (int i = 0; i < 4; i++) kn_tensor_release(tmp[i]);
    return st;
}

/* conv2d's gradients through cuDNN's backward-data and backward-filter
 * ops (NCHW, or NHWC for the layout pass's channels-last form; packed, the
 * output's dtype): the gradient of an input the
 * forward read with a stride, padding or dilation comes from one call,
 * where autograd's rule otherwise spreads the output's gradient with
 * zeros, pads it, and convolves it (or stacks the input's patches for a
 * GEMM: im2col). */
kn_status kn_cuda_dnn_conv_grad(const kn_opcall *c)
{
    kn_cuda_dnn *dn = dnn_ready();
    if (!dn) return kn_error(KN_ERR_UNSUPPORTED, "%s: needs cuDNN, which is not available", kn_op_name(c->op));
    bool dx = c->op == KN_OP_CONV2D_INPUT_GRAD;
    kn_tensor *out = c->out[0];
    kn_dtype dt = out->dtype;
    kn_tensor *tmp[2] = {NULL, NULL};
    const kn_tensor *in[2] = {c->in[0], c->in[1]};
    kn_status st = KN_OK;
    for (int i = 0; i < 2 && st == KN_OK; i++) {
        const kn_tensor *t = in[i];
        if (t->dtype == dt && kn_tensor_is_contiguous(t) && kn_cuda_align_of(kn_cuda_tensor_ptr(t), NULL, 0, 16) == 16)
            continue;
        if ((st = kn_cuda_copy_as(t, dt, &tmp[i])) == KN_OK) in[i] = tmp[i];
    }
    if (st != KN_OK) goto out;
    /* x, w and dy in the forward's roles */
    const kn_tensor *dy = dx ? in[0] : in[1];
    dnn_key k;
    memset(&k, 0, sizeof k);
    k.dt = (int32_t)dt;
    k.tf32 = dt == KN_F32 && kn_cuda_allow_tf32();
    k.grad = dx ? DNN_GRAD_X : DNN_GRAD_W;
    k.nhwc = c->a.out_layout == KN_LAYOUT_NHWC; /* every operand {N, H, W, C}: NCHW dims, NHWC strides */
    for (int i = 0; i < 2; i++) {
        k.stride[i] = c->a.stride[i];
        k.pad[i] = c->a.padding[i];
        k.dil[i] = c->a.dilation[i];
    }
    dnn_key_dims(&k, dx ? out : in[0], dx ? in[1] : out, dy, k.nhwc);
    void *px = dx ? kn_cuda_tensor_ptr(out) : kn_cuda_tensor_ptr(in[0]);
    void *pw = dx ? kn_cuda_tensor_ptr(in[1]) : kn_cuda_tensor_ptr(out);
    k.align_x = kn_cuda_align_of(px, NULL, 0, 16);
    k.align_w = kn_cuda_align_of(pw, NULL, 0, 16);
    k.align_y = 16;
    dnn_entry *e = NULL;
    if ((st = dnn_entry_get(dn, &k, &e)) != KN_OK) goto out;
    if (e->refused) {
        st = kn_error(KN_ERR_UNSUPPORTED, "%s: cuDNN has no engine for this call", kn_op_name(c->op));
        goto out;
    }
    st = dnn_execute(e, px, pw, kn_cuda_tensor_ptr(dy), NULL);
    if (st == KN_ERR_UNSUPPORTED) {
        e->refused = true;
        st = kn_error(KN_ERR_UNSUPPORTED, "%s: cuDNN refused to execute its plan", kn_op_name(c->op));
    }
    if (st == KN_OK) kn_cuda_variant_label("%s%s", e->label, k.nhwc ? " nhwc" : "");
out:
    for (int i = 0; i < 2; i++) kn_tensor_release(tmp[i]);
    return st;
}

#endif /* KILN_HAVE_CUDNN */

/* Whether conv2d's gradient ops run here: float tensors in NCHW, or NHWC
 * in and out (the layout pass's), through cuDNN (a call it refuses, or a
 * machine without it, is an error naming the op; kiln needs cuDNN for
 * training convolutions on a GPU). */
bool kn_cuda_conv2d_grad_supports(const kn_opcall *c)
{
    if (!c || (c->op != KN_OP_CONV2D_INPUT_GRAD && c->op != KN_OP_CONV2D_WEIGHT_GRAD)) return false;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i] && !kn_dtype_is_float(c->in[i]->dtype)) return false;
    if (c->n_in > 0 && c->a.nshape != 4) return false; /* the other operand's shape (kn_infer_conv2d_grad) */
    return c->a.in_layout == c->a.out_layout &&
           (c->a.in_layout == KN_LAYOUT_NCHW || c->a.in_layout == KN_LAYOUT_NHWC);
}

#ifndef KILN_HAVE_CUDNN
int kn_cuda_dnn_first_plan(void *graph, int64_t max_ws, void **plan, void **cfg, int64_t *ws, char *label,
                           size_t label_size)
{
    (void)graph, (void)max_ws, (void)ws, (void)label, (void)label_size;
    *plan = *cfg = NULL;
    return -1;
}

void kn_cuda_dnn_pack_release(kn_cuda_dnn_pack *pack)
{
    (void)pack;
}

int kn_cuda_dnn_execute(void *plan, int64_t ws_size, const int64_t *uids, void *const *ptrs, int n,
                        kn_cuda_dnn_pack *pack)
{
    (void)plan, (void)ws_size, (void)uids, (void)ptrs, (void)n, (void)pack;
    return -1;
}

void *kn_cuda_dnn_handle(size_t *version)
{
    *version = 0;
    return NULL;
}

bool kn_cuda_dnn_plan_load(const char *kind, const void *key, size_t key_size, int64_t max_ws, void **plan,
                           int64_t *ws, char *label, size_t label_size)
{
    (void)kind, (void)key, (void)key_size, (void)max_ws, (void)plan, (void)ws, (void)label, (void)label_size;
    return false;
}

void kn_cuda_dnn_plan_save(const char *kind, const void *key, size_t key_size, void *plan, const char *label)
{
    (void)kind, (void)key, (void)key_size, (void)plan, (void)label;
}

kn_status kn_cuda_dnn_conv(const kn_tensor *x0, const kn_tensor *w0, const kn_tensor *bias, kn_tensor *y,
                           const kn_attrs *at, int act, int variant, bool *done)
{
    (void)x0, (void)w0, (void)bias, (void)y, (void)at, (void)act;
    *done = false;
    return variant ? kn_error(KN_ERR_RANGE, "conv2d: no cuDNN in this build: no variant %d", variant) : KN_OK;
}

kn_status kn_cuda_dnn_conv_grad(const kn_opcall *c)
{
    return kn_error(KN_ERR_UNSUPPORTED, "%s: needs cuDNN (this build has none)", kn_op_name(c->op));
}
#endif
