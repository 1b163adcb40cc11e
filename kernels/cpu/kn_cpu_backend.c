/* kn_cpu_backend: the CPU reference backend's vtable and registration. Memory is host memory,
 * 64-byte aligned (a cache line, and what AVX-512 loads like), zeroed as
 * kn_tensor_new promises; `run` sends each call to the kernel family of its
 * op kind (see kn_cpu.h). The CPU runs everything synchronously.
 */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "kn_cpu.h"
#include "kn_cpu_backend.h"
#include "kn_cpu_jit.h"
#include "kn_cpu_render.h"
#include "kn_kir.h"

#define KN_CPU_ALIGN 64

static kn_status cpu_alloc(kn_device_ctx *d, int64_t nbytes, void **p)
{
    (void)d;
    *p = NULL;
    if (nbytes < 0 || nbytes > KN_MAX_BYTES)
        return kn_error(KN_ERR_OOM, "cpu: cannot allocate %lld bytes", (long long)nbytes);
    /* aligned_alloc wants a multiple of the alignment; a zero-byte tensor
     * still gets a unique pointer. */
    size_t n = (size_t)((nbytes + KN_CPU_ALIGN - 1) / KN_CPU_ALIGN * KN_CPU_ALIGN);
    if (n == 0) n = KN_CPU_ALIGN;
    void *m = aligned_alloc(KN_CPU_ALIGN, n);
    if (!m) return kn_error(KN_ERR_OOM, "cpu: out of host memory for %lld bytes", (long long)nbytes);
    memset(m, 0, n);
    *p = m;
    return KN_OK;
}

static void cpu_free(kn_device_ctx *d, void *p)
{
    (void)d;
    free(p);
}

static kn_status cpu_copy(kn_device_ctx *d, void *dst, const void *src, int64_t nbytes)
{
    (void)d;
    if (nbytes > 0) memmove(dst, src, (size_t)nbytes);
    return KN_OK;
}

/* Every op but the views has a CPU kernel for every call kn_op_infer
 * accepts: each family (kn_cpu.h) reads and writes elements of all seven
 * dtypes (through kn_load_f64 / kn_store_f64 or a loop per dtype) and
 * takes every attribute infer lets through, so the op alone decides.
 * Views are metadata, run in core by kn_op_eager: cpu_run has no kernel
 * for them. */
static bool cpu_supports_op(kn_device_ctx *d, const kn_opcall *c)
{
    (void)d;
    return c && (unsigned)c->op < KN_OP_COUNT && kn_op_kind_of(c->op) != KN_K_VIEW;
}

/* matmul (kn_cpu_matmul) and attention (kn_cpu_attention) write any output
 * strides; the other ops write contiguous outputs only. */
static bool cpu_strided_out(kn_device_ctx *d, const kn_opcall *c)
{
    (void)d;
    return c && (c->op == KN_OP_MATMUL || c->op == KN_OP_ATTENTION) && c->n_out == 1 && c->out[0] &&
           kn_dtype_is_float(c->out[0]->dtype);
}

static kn_status cpu_run(kn_device_ctx *d, const kn_opcall *c)
{
    (void)d;
    if (!c || (unsigned)c->op >= KN_OP_COUNT)
        return kn_error(KN_ERR_ARG, "cpu: unknown op %d", c ? (int)c->op : -1);
    if (c->variant > 0) /* one algorithm per op here: the autotuner's list ends at 0 */
        return kn_error(KN_ERR_RANGE, "%s: the cpu backend has no variant %d", kn_op_name(c->op), c->variant);
    switch (kn_op_kind_of(c->op)) {
    case KN_K_UNARY:
    case KN_K_BINARY:
    case KN_K_COMPARE:
    case KN_K_TERNARY:
    case KN_K_MASKED:
    case KN_K_COPY: return kn_cpu_elementwise(c);
    case KN_K_REDUCE:
    case KN_K_ARGREDUCE:
    case KN_K_SOFTMAX: return kn_cpu_reduce(c);
    case KN_K_NORM: return kn_cpu_norm(c);
    case KN_K_MATMUL:
        /* a test hook (t/matmul_permuted.lua): decline strided outputs as a
         * GPU library may, so the plan's fallback copy runs on the CPU too */
        if (c->n_out == 1 && !kn_tensor_is_contiguous(c->out[0]) && getenv("KILN_CPU_DECLINE_STRIDED_OUT"))
            return kn_error(KN_ERR_UNSUPPORTED, "matmul: strided outputs declined (KILN_CPU_DECLINE_STRIDED_OUT)");
        return kn_cpu_matmul(c);
    case KN_K_CONV: return kn_cpu_conv2d(c);
    case KN_K_ATTENTION: return kn_cpu_attention(c);
    case KN_K_POOL: return kn_cpu_pool2d(c);
    case KN_K_CAT:
    case KN_K_INDEX:
    case KN_K_TRI: return kn_cpu_index(c);
    case KN_K_CREATE: return kn_cpu_create(c);
    case KN_K_VIEW: break; /* views are metadata: kn_op_eager runs them in core */
    }
    return kn_error(KN_ERR_UNSUPPORTED, "%s: no cpu kernel", kn_op_name(c->op));
}

static kn_status cpu_sync(kn_device_ctx *d)
{
    (void)d;
    return KN_OK;
}

/* Generated kernels: the program's C source, compiled by the system C
 * compiler through the persistent cache (kn_cpu_jit). */
static kn_status cpu_compile_program(kn_device_ctx *d, const struct kn_kprogram *p, const char *cache_dir, void **lib,
                                     void **fns, bool *cached)
{
    (void)d;
    *lib = NULL;
    if (cached) *cached = false;
    if (!kn_jit_available())
        return kn_error(KN_ERR_UNSUPPORTED, "no C compiler found (set $CC, or install cc) to build generated kernels");
    char *src = NULL;
    KN_TRY(kn_kprogram_render(p, &kn_cpu_render_target, &src));
    kn_jit_lib *l = NULL;
    kn_status st = kn_jit_compile_ex(src, cache_dir, &l, cached);
    free(src);
    KN_TRY(st);
    for (int k = 0; k < p->n_kernels; k++) {
        const kn_kernel *kn = &p->kernels[k];
        if (kn->kind != KN_KERNEL_POINTWISE && kn->kind != KN_KERNEL_ROW) continue;
        fns[k] = kn_jit_symbol(l, kn->name);
        if (!fns[k]) {
            kn_jit_release(l);
            return kn_error(KN_ERR_UNSUPPORTED, "generated kernel %s is missing from its compiled object", kn->name);
        }
    }
    *lib = l;
    return KN_OK;
}

static void cpu_release_program(kn_device_ctx *d, void *lib)
{
    (void)d;
    kn_jit_release(lib);
}

/* The reference for a library epilogue: the matmul, then each step
 * rounded to the output dtype as the separate kernels would (so a folded
 * plan gives the same bits). Plans fold on the CPU only when
 * KILN_CPU_FOLD_EPILOGUES is set: it lets CI test the folding without a
 * GPU, while cm:kernels() and the CPU timings keep one kernel per step. */
static kn_status cpu_library_fused(kn_device_ctx *d, const kn_opcall *c, const kn_tensor *bias, int act, const kn_tensor *res)
{
    (void)d;
    if (c->variant > 0) return kn_error(KN_ERR_RANGE, "%s: the cpu backend has no variant %d", kn_op_name(c->op), c->variant);
    if (!kn_tensor_is_contiguous(c->out[0]))
        return kn_error(KN_ERR_UNSUPPORTED, "%s: a library epilogue writes contiguous outputs only", kn_op_name(c->op));
    KN_TRY(c->op == KN_OP_CONV2D ? kn_cpu_conv2d(c) : kn_cpu_matmul(c));
    kn_tensor *o = c->out[0];
    int64_t n = kn_tensor_numel(o), cols = o->ndim ? o->shape[o->ndim - 1] : 1;
    size_t es = kn_dtype_size(o->dtype);
    char *op = kn_tensor_data(o);
    const char *bp = bias ? kn_tensor_data(bias) : NULL, *rp = res ? kn_tensor_data(res) : NULL;
    for (int64_t i = 0; i < n; i++) {
        char *y = op + i * (int64_t)es;
        double v = kn_load_f64(y, o->dtype);
        if (bp) {
            int64_t j = cols ? i % cols : 0;
            kn_store_f64(y, o->dtype, v + kn_load_f64(bp + j * bias->strides[0] * (int64_t)kn_dtype_size(bias->dtype), bias->dtype));
            v = kn_load_f64(y, o->dtype);
        }
        if (rp) {
            kn_store_f64(y, o->dtype, v + kn_load_f64(rp + i * (int64_t)kn_dtype_size(res->dtype), res->dtype));
            v = kn_load_f64(y, o->dtype);
        }
        if (act == KN_EPI_RELU && v < 0) kn_store_f64(y, o->dtype, 0.0); /* NaN stays */
        if (act == KN_EPI_HARDSWISH) kn_store_f64(y, o->dtype, v * fmin(fmax(v / 6.0 + 0.5, 0.0), 1.0));
        if (act == KN_EPI_GELU_TANH) /* as kn_ops.def's gelu_tanh */
            kn_store_f64(y, o->dtype, 0.5 * v * (1 + tanh(0.79788456080286535588 * (v + 0.044715 * (v * v * v)))));
    }
    return KN_OK;
}

typedef void (*kn_cpu_kernel_fn)(char **bufs, const int64_t *sizes);

static kn_status cpu_launch(kn_device_ctx *d, const struct kn_kernel *k, void *fn, char **bufs, const int64_t *sizes)
{
    (void)d;
    (void)k;
    kn_cpu_kernel_fn f;
    memcpy(&f, &fn, sizeof f); /* dlsym gives an object pointer; POSIX allows this */
    f(bufs, sizes);
    return KN_OK;
}

/* Events: the CPU's work is done when the call that queued it returns, so
 * an event is a clock reading taken when it is recorded. */
static kn_status cpu_event_create(kn_device_ctx *d, void **ev)
{
    (void)d;
    *ev = calloc(1, sizeof(struct timespec));
    return *ev ? KN_OK : kn_error(KN_ERR_OOM, "cpu: out of host memory for an event");
}

static void cpu_event_destroy(kn_device_ctx *d, void *ev)
{
    (void)d;
    free(ev);
}

static kn_status cpu_event_record(kn_device_ctx *d, void *ev)
{
    (void)d;
    clock_gettime(CLOCK_MONOTONIC, (struct timespec *)ev);
    return KN_OK;
}

static kn_status cpu_event_elapsed_ms(kn_device_ctx *d, void *a, void *b, double *ms)
{
    (void)d;
    const struct timespec *x = a, *y = b;
    *ms = (double)(y->tv_sec - x->tv_sec) * 1e3 + (double)(y->tv_nsec - x->tv_nsec) * 1e-6;
    return KN_OK;
}

/* Autotuning: evict the caches by writing a buffer larger than a core's
 * share of the last-level cache (timing runs of a CPU kernel otherwise
 * read inputs the previous run left in cache). */
#define CPU_FLUSH_BYTES ((size_t)8 << 20)

static kn_status cpu_flush_cache(kn_device_ctx *d)
{
    (void)d;
    /* one buffer for every cpu device: they share the host's caches */
    static unsigned char *buf;
    static unsigned char round;
    if (!buf && !(buf = malloc(CPU_FLUSH_BYTES))) return KN_OK; /* timing without a flush is still timing */
    memset(buf, ++round, CPU_FLUSH_BYTES);
    __asm__ volatile("" : : "r"(buf) : "memory"); /* keep the stores */
    return KN_OK;
}

/* The C compiler and the CPU model: a choice measured with another
 * compiler or on another machine kind is not reused. */
static void cpu_identity(kn_device_ctx *d, char *buf, size_t size)
{
    (void)d;
    char model[256] = "unknown cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    snprintf(buf, size, "cpu %s, %s", model, kn_jit_compiler_id());
}

const kn_backend kn_cpu_backend = {
    .name = "cpu",
    .kind = KN_DEVICE_CPU,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .copy = cpu_copy,
    .supports_op = cpu_supports_op,
    .run = cpu_run,
    .strided_out = cpu_strided_out,
    .sync = cpu_sync,
    .compile_program = cpu_compile_program,
    .release_program = cpu_release_program,
    .render_target = &kn_cpu_render_target,
    .launch = cpu_launch,
    .library_fused = cpu_library_fused,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .flush_cache = cpu_flush_cache,
    .identity = cpu_identity,
};

/* cpu:0 is the host; other indices exist only when added (kn_cpu_add_device). */
static kn_status cpu_open(kn_device_ctx *d)
{
    if (d->index != 0) return kn_error(KN_ERR_DEVICE, "device %s is not available", kn_device_name(d->device));
    return KN_OK;
}

void kn_cpu_register(void)
{
    kn_backend_register_kind(&kn_cpu_backend, cpu_open);
}

kn_status kn_cpu_add_device(int index)
{
    return kn_backend_add_device(&kn_cpu_backend, index, NULL);
}
