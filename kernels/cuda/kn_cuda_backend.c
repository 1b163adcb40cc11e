/* kn_cuda_backend: the CUDA backend's vtable and its registration, the top
 * of kernels/cuda and the one file that names every op family. Each slot
 * makes its device object's GPU current (kn_cuda_enter, kn_cuda_context.c)
 * and hands the call on: copies, ops (by family), generated kernels,
 * events, recordings (CUDA graphs by stream capture), profiling traces.
 *
 * Everything kiln queues on one GPU goes to that GPU's non-blocking
 * stream, so the order of calls is the order of work and the caching
 * allocator can reuse a freed block at once. The host waits only where it must: copies to the
 * host, copies from host memory the caller may free on return, `sync`, and
 * event timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_cuda.h"
#include "kn_cuda_context.h"
#include "kn_cuda_module.h"
#include "kn_cuda_render.h"
#include "kn_cuda_trace.h"
#include "kn_kir.h"
#include "kn_settings.h"
/* the op families, each behind one call */
#include "kn_cuda_attention_op.h"
#include "kn_cuda_blas.h"
#include "kn_cuda_conv.h"
#include "kn_cuda_eager.h"
#include "kn_cuda_gather_scatter.h"
#include "kn_cuda_ops.h"

#ifdef KILN_HAVE_CUDNN
#include <cudnn_graph.h>
#endif

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

/* The families' own answers, asked as cuda_run dispatches: a library op
 * by its library, gather_scatter by its kernels, any other op by the
 * kernel IR or else the templates. Views have no kernel (kn_op_eager runs
 * them in core). */
bool kn_cuda_supports_op(const kn_opcall *c)
{
    if (!c || (unsigned)c->op >= KN_OP_COUNT) return false;
    switch (kn_op_kind_of(c->op)) {
    case KN_K_MATMUL: return kn_cuda_matmul_supports(c);
    case KN_K_CONV: return kn_cuda_conv2d_supports(c);
    case KN_K_ATTENTION: return kn_cuda_attention_op_supports(c);
    case KN_K_VIEW: return false;
    default: break;
    }
    if (c->op == KN_OP_GATHER_SCATTER) return kn_cuda_gather_scatter_supports(c);
    return kn_cuda_eager_supports(c) || kn_cuda_ops_supports(c);
}

static bool cuda_supports_op(kn_device_ctx *d, const kn_opcall *c)
{
    (void)d;
    return kn_cuda_supports_op(c);
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

/* Each call to the family kn_cuda_supports_op asked; a call it says no
 * to ends in no_kernel before any family sees it. */
static kn_status run_op(kn_device_ctx *d, const kn_opcall *c)
{
    if (!c || (unsigned)c->op >= KN_OP_COUNT)
        return kn_error(KN_ERR_ARG, "cuda: unknown op %d", c ? (int)c->op : -1);
    if (kn_op_kind_of(c->op) == KN_K_VIEW)
        return kn_error(KN_ERR_ARG, "%s: views are metadata: kn_op_eager runs them", kn_op_name(c->op));
    if (!kn_cuda_supports_op(c)) return no_kernel(c);
    KN_TRY(kn_cuda_enter(d));
    switch (kn_op_kind_of(c->op)) {
    case KN_K_MATMUL: return kn_cuda_matmul(c);
    case KN_K_CONV: return kn_cuda_conv2d(c);
    case KN_K_ATTENTION: return kn_cuda_attention_op(c);
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

/* run_op with c's settings as the call's (kn_cuda_call_settings_enter). */
static kn_status cuda_run(kn_device_ctx *d, const kn_opcall *c)
{
    const kn_settings *outer = kn_cuda_call_settings_enter(c ? c->settings : NULL);
    kn_status st = run_op(d, c);
    kn_cuda_call_settings_leave(outer);
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

static bool cuda_conv_epilogue_free(kn_device_ctx *d, const kn_settings *settings, const kn_opcall *c)
{
    if (kn_cuda_enter(d) != KN_OK) return false;
    const kn_settings *outer = kn_cuda_call_settings_enter(settings);
    bool free_epilogue = kn_cuda_conv_epilogue_free(c);
    kn_cuda_call_settings_leave(outer);
    return free_epilogue;
}

static bool cuda_matmul_b_k_major(kn_device_ctx *d, const kn_settings *settings, kn_dtype dt, int64_t m,
                                  int64_t n, int64_t k)
{
    bool tf32 = settings && kn_settings_allow_tf32(settings);
    return kn_cuda_enter(d) == KN_OK && kn_cuda_matmul_wants_k_major_b(dt, tf32, m, n, k);
}

static kn_status cuda_sync(kn_device_ctx *d)
{
    KN_TRY(kn_cuda_enter(d));
    return wait_stream("waiting for the GPU");
}

/* ---- generated kernels ---- */

/* Programs of this many generated kernels or more are compiled in parts,
 * in parallel: NVRTC takes about 60 ms a kernel on one core (ViT-B/16's
 * 200 kernels took 13 s as one program). Fewer stay one program (one
 * NVRTC start, one cache file). */
enum { PART_MIN_KERNELS = 4, MAX_PARTS = 8 };

static int program_parts(int generated)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int parts = generated / PART_MIN_KERNELS;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    if (cpus > 0 && parts > cpus) parts = (int)cpus;
    return parts > 1 ? parts : 1;
}

static kn_status cuda_compile_program(kn_device_ctx *d, const struct kn_kprogram *p, const char *cache_dir, void **lib,
                                     void **fns, bool *cached)
{
    *lib = NULL;
    if (cached) *cached = false;
    KN_TRY(kn_cuda_enter(d));
    int generated = 0;
    for (int k = 0; k < p->n_kernels; k++) generated += kn_kernel_has_source(&p->kernels[k]);
    int parts = program_parts(generated);
    /* part i: the kernels from first[i] on, an equal share of the generated ones */
    int first[MAX_PARTS + 1], part_of_kernel = 0, seen = 0;
    first[0] = 0;
    for (int k = 0, i = 1; k < p->n_kernels && i < parts; k++) {
        seen += kn_kernel_has_source(&p->kernels[k]);
        if (seen >= (int)((int64_t)generated * i / parts)) first[i++] = k + 1;
    }
    first[parts] = p->n_kernels;
    char *srcs[MAX_PARTS] = {0};
    kn_cuda_module *mods[MAX_PARTS] = {0};
    kn_status st = KN_OK;
    for (int i = 0; i < parts && st == KN_OK; i++) {
        kn_kprogram part = {first[i + 1] - first[i], p->kernels + first[i]};
        st = kn_kprogram_render(&part, &kn_cuda_render_target, &srcs[i]);
    }
    if (st == KN_OK) st = kn_cuda_modules_get((const char *const *)srcs, parts, cache_dir, mods, cached);
    for (int i = 0; i < parts; i++) free(srcs[i]);
    KN_TRY(st);
    for (int k = 0; k < p->n_kernels; k++) {
        while (k >= first[part_of_kernel + 1]) part_of_kernel++;
        const kn_kernel *kn = &p->kernels[k];
        if (kn->kind != KN_KERNEL_POINTWISE && kn->kind != KN_KERNEL_ROW) continue;
        const void *fn = NULL;
        KN_TRY(kn_cuda_module_kernel(mods[part_of_kernel], kn->name, &fn));
        fns[k] = (void *)(uintptr_t)fn;
    }
    *lib = mods[0]; /* modules live for the process: release has nothing to do */
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
    /* the graph exec was made from: its nodes name the copies that
     * cudaGraphExecMemcpyNodeSetParams1D changes (graph_set_copy) */
    cudaGraph_t graph;
    cudaGraphNode_t *copies; /* the copies found (graph_find_copy), by handle */
    int n_copies;
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
    if (e == cudaSuccess) e = cudaGraphUpload(ge, kn_cuda_stream());
    cuda_graph *cg = e == cudaSuccess ? calloc(1, sizeof *cg) : NULL;
    if (!cg) {
        if (ge) cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
        kn_cuda_alloc_release_held(held);
        if (e == cudaSuccess) return kn_error(KN_ERR_OOM, "out of host memory for a recording");
        return kn_cuda_fail(e, "this graph cannot be recorded: instantiating it");
    }
    cg->exec = ge;
    cg->graph = g;
    cg->held = held;
    *exec = cg;
    return KN_OK;
}

static kn_status cuda_graph_find_copy(kn_device_ctx *d, void *exec, void *dst, const void *src, int *copy)
{
    cuda_graph *cg = exec;
    if (!cg) return kn_error(KN_ERR_ARG, "cuda: a copy in a missing recording");
    KN_TRY(kn_cuda_enter(d));
    size_t n = 0;
    KN_CUDA_TRY(cudaGraphGetNodes(cg->graph, NULL, &n), "listing a recording's nodes");
    cudaGraphNode_t *nodes = malloc(sizeof *nodes * (n ? n : 1));
    cudaGraphNode_t *more = realloc(cg->copies, sizeof *more * (size_t)(cg->n_copies + 1));
    if (more) cg->copies = more;
    if (!nodes || !more) {
        free(nodes);
        return kn_error(KN_ERR_OOM, "out of host memory listing a recording's nodes");
    }
    cudaError_t e = cudaGraphGetNodes(cg->graph, nodes, &n);
    int found = 0;
    for (size_t i = 0; i < n && e == cudaSuccess; i++) {
        enum cudaGraphNodeType type;
        struct cudaMemcpy3DParms prm;
        if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess || type != cudaGraphNodeTypeMemcpy) continue;
        if (cudaGraphMemcpyNodeGetParams(nodes[i], &prm) != cudaSuccess) continue;
        if (prm.dstPtr.ptr == dst && prm.srcPtr.ptr == src && !prm.srcArray && !prm.dstArray) {
            cg->copies[cg->n_copies] = nodes[i];
            found++;
        }
    }
    free(nodes);
    (void)cudaGetLastError(); /* a node that was not a plain copy: not an error of the next call */
    if (e != cudaSuccess) return kn_cuda_fail(e, "listing a recording's nodes");
    if (found != 1)
        return kn_error(KN_ERR_UNSUPPORTED, "cuda: %d recorded copies from %p to %p, not one", found, src, dst);
    *copy = cg->n_copies++;
    return KN_OK;
}

static kn_status cuda_graph_set_copy(kn_device_ctx *d, void *exec, int copy, void *dst, const void *src,
                                     int64_t nbytes)
{
    cuda_graph *cg = exec;
    if (!cg || copy < 0 || copy >= cg->n_copies) return kn_error(KN_ERR_ARG, "cuda: no such recorded copy");
    KN_TRY(kn_cuda_enter(d));
    KN_CUDA_TRY(cudaGraphExecMemcpyNodeSetParams1D(cg->exec, cg->copies[copy], dst, src, (size_t)nbytes,
                                                   cudaMemcpyDeviceToDevice),
                "pointing a recorded copy at a call's tensors");
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
    cudaGraphDestroy(cg->graph);
    kn_cuda_alloc_release_held(cg->held);
    free(cg->copies);
    free(cg);
}

static kn_status library_fused(kn_device_ctx *d, const kn_opcall *c, const kn_tensor *bias, int act, const kn_tensor *residual)
{
    KN_TRY(kn_cuda_enter(d));
    if (c->op == KN_OP_CONV2D) {
        if (bias) return kn_error(KN_ERR_ARG, "conv2d: its epilogue takes an activation and a residual only");
        return residual ? kn_cuda_conv2d_fused_residual(c, act, residual) : kn_cuda_conv2d_fused(c, act);
    }
    return kn_cuda_matmul_fused(c, bias, act, residual);
}

/* library_fused with c's settings as the call's (see cuda_run). */
static kn_status cuda_library_fused(kn_device_ctx *d, const kn_opcall *c, const kn_tensor *bias, int act,
                                    const kn_tensor *residual)
{
    const kn_settings *outer = kn_cuda_call_settings_enter(c->settings);
    kn_status st = library_fused(d, c, bias, act, residual);
    kn_cuda_call_settings_leave(outer);
    return st;
}

/* ---- autotuning ---- */

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
    const kn_settings *outer = kn_cuda_call_settings_enter(settings);
    kn_status st = kn_cuda_matmul_rate(dt, tflops);
    kn_cuda_call_settings_leave(outer);
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

static void cuda_memory(kn_device_ctx *d, kn_memory_stats *out)
{
    memset(out, 0, sizeof *out);
    if (kn_cuda_enter(d) != KN_OK) return;
    kn_cuda_alloc_stats s;
    kn_cuda_alloc_stats_get(&s);
    *out = (kn_memory_stats){s.allocated, s.reserved, s.peak_allocated, s.peak_reserved};
}

static void cuda_memory_reset_peak(kn_device_ctx *d)
{
    if (kn_cuda_enter(d) == KN_OK) kn_cuda_alloc_reset_peak();
}

/* The variant lists' edition: max-autotune's cache names a library op's
 * choice by its number ("variant=9"), so a kiln that adds, removes or
 * reorders variants (kiln's split-f32 tiles among matmul's, say) must not
 * read an older kiln's choices. Bump it with any such change; it is part
 * of the identity the cache is keyed on. */
#define KN_CUDA_VARIANT_LISTS 2

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
    snprintf(buf, size, "%s, sm %d.%d, driver %d, runtime %d, cudnn %zu, cublaslt %zu, nvrtc, variant lists %d",
             prop.name, prop.major, prop.minor, driver, runtime, dnn, kn_cuda_blas_version(), KN_CUDA_VARIANT_LISTS);
}

static const kn_backend kn_cuda_backend = {
    .name = "cuda",
    .kind = KN_DEVICE_CUDA,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .caches_freed = true,
    .to_host = cuda_to_host,
    .from_host = cuda_from_host,
    .copy = cuda_copy,
    .supports_op = cuda_supports_op,
    .run = cuda_run,
    .strided_out = cuda_strided_out,
    .conv_channels_last = cuda_conv_channels_last,
    .conv_epilogue_free = cuda_conv_epilogue_free,
    .matmul_b_k_major = cuda_matmul_b_k_major,
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
    .graph_find_copy = cuda_graph_find_copy,
    .graph_set_copy = cuda_graph_set_copy,
    .graph_destroy = cuda_graph_destroy,
    .flush_cache = cuda_flush_cache,
    .memory = cuda_memory,
    .memory_reset_peak = cuda_memory_reset_peak,
    .identity = cuda_identity,
    .library_variant_label = cuda_library_variant_label,
    .library_matmul_rate = cuda_library_matmul_rate,
};

void kn_cuda_register(void)
{
    kn_backend_register_kind(&kn_cuda_backend, kn_cuda_open);
}
