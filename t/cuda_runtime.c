/* t/cuda_runtime.c: the CUDA backend's runtime core on a GPU: the caching
 * allocator (reuse, size classes, zero bytes, bad sizes, out of memory and
 * staying usable after it, recording mode), copies both ways, the module
 * cache (memory hits, disk hits in a second process, a corrupted entry
 * reported and rebuilt), CUDA graph recording through the vtable, and eager
 * ops through the kernel IR compared with the CPU reference on random
 * inputs in several layouts and dtypes (seed printed; KILN_SEED repeats).
 * Without a CUDA device it skips.
 */
#ifndef KILN_HAVE_CUDA
#include "tap.h"

int main(void)
{
    skip_all("no CUDA device (built without the CUDA toolkit)");
}
#else
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_context.h"
#include "cuda/kn_cuda_eager.h"
#include "cuda/kn_cuda_module.h"
#include "kn_view.h"
#include "ops_testlib.h"

static kn_device_ctx *dc;

/* ---- tensors on the GPU ---- */

/* t's storage copied to the GPU, viewed with t's shape, strides and offset. */
static kn_tensor *gpu_like(const kn_tensor *t)
{
    size_t es = kn_dtype_size(t->dtype);
    int64_t n = t->storage->nbytes / (int64_t)es;
    kn_tensor *base = NULL, *v = NULL;
    if (kn_tensor_new(t->dtype, 1, &n, KN_CUDA, &base) != KN_OK ||
        dc->be->from_host(dc, base->storage->data, t->storage->data, t->storage->nbytes) != KN_OK ||
        kn_tensor_view_of(base, t->ndim, t->shape, t->strides, t->offset, &v) != KN_OK) {
        printf("Bail out! copying a tensor to the GPU: %s\n", kn_last_error());
        exit(2);
    }
    kn_tensor_release(base);
    return v;
}

static kn_tensor *to_cpu(kn_tensor *t)
{
    kn_tensor *h = NULL;
    if (kn_tensor_to_device(t, KN_CPU, NULL, &h) != KN_OK) {
        printf("#   copying back: %s\n", kn_last_error());
        return NULL;
    }
    return h;
}

static void tol_of(kn_dtype dt, double *rel, double *abs_)
{
    switch (dt) {
    case KN_F64: *rel = 1e-12; *abs_ = 1e-12; break;
    case KN_F32: *rel = 1e-5; *abs_ = 1e-5; break;
    case KN_BF16: *rel = 2e-2; *abs_ = 3e-2; break;
    case KN_F16: *rel = 3e-3; *abs_ = 4e-3; break;
    default: *rel = 0; *abs_ = 0; break;
    }
}

/* A GPU result against the CPU one: same meta, every element within the
 * dtype's tolerance, NaN only where the reference has NaN. */
static bool same_values(kn_tensor *gpu, const kn_tensor *ref, const char *name)
{
    kn_tensor *got = to_cpu(gpu);
    bool same = got && got->dtype == ref->dtype && got->ndim == ref->ndim &&
                memcmp(got->shape, ref->shape, sizeof(int64_t) * (size_t)ref->ndim) == 0;
    int64_t n = same ? tl_numel(ref->ndim, ref->shape) : 0, bad = -1;
    double rel, abs_, g = 0, w = 0;
    tol_of(ref->dtype, &rel, &abs_);
    for (int64_t i = 0; i < n && bad < 0; i++) {
        g = tl_get(got, i);
        w = tl_get(ref, i);
        bool good = isnan(w) ? isnan(g) : isnan(g) ? false : (isinf(w) || isinf(g)) ? g == w
                                                                                    : fabs(g - w) <= abs_ + rel * fabs(w);
        if (!good) bad = i;
    }
    ok(same && bad < 0, "%s", name);
    if (!same && got)
        printf("#   got %s%s, want %s%s\n", kn_dtype_name(got->dtype), tl_shape_str(got->ndim, got->shape),
               kn_dtype_name(ref->dtype), tl_shape_str(ref->ndim, ref->shape));
    if (bad >= 0)
        printf("#   element %lld of %lld (%s): got %.17g, want %.17g\n", (long long)bad, (long long)n,
               kn_dtype_name(ref->dtype), g, w);
    kn_tensor_release(got);
    return same && bad < 0;
}

/* ---- eager ops: GPU against CPU ---- */

static int n_ir, n_not_ir;

/* Run c (CPU inputs) on the CPU and, on copies of its inputs in the same
 * layouts, on the GPU through kn_op_eager; compare. want_ir: also check
 * the call is one the kernel IR path covers (a repeat is a cache hit that
 * compiles nothing). */
static void check_call(const kn_opcall *c, bool want_ir, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check_call(const kn_opcall *c, bool want_ir, const char *fmt, ...)
{
    char name[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    kn_opcall cr = *c;
    if (kn_op_eager(&cr, KN_CPU) != KN_OK) {
        printf("# %s: not accepted on the cpu either (%s)\n", name, kn_last_error());
        return;
    }
    kn_opcall cg = *c;
    for (int i = 0; i < c->n_in; i++) cg.in[i] = gpu_like(c->in[i]);
    kn_status st = kn_op_eager(&cg, KN_CUDA);
    if (ok(st == KN_OK, "%s: runs on the GPU", name)) {
        for (int o = 0; o < cr.n_out; o++) {
            char what[340];
            snprintf(what, sizeof what, "%s: output %d matches the cpu", name, o + 1);
            same_values(cg.out[o], cr.out[o], what);
        }
        kn_cuda_module_stats m0, m1;
        kn_cuda_module_stats_get(&m0);
        st = kn_cuda_eager_ir(&cg); /* the signature is known now: a lookup and a launch, or a quick no */
        kn_cuda_module_stats_get(&m1);
        if (st == KN_OK) n_ir++;
        else n_not_ir++;
        if (want_ir) {
            ok(st == KN_OK && m1.compiles == m0.compiles && m1.memory_hits == m0.memory_hits,
               "%s: through the kernel IR, and a repeat compiles nothing", name);
            if (st == KN_OK) same_values(cg.out[0], cr.out[0], "  ... and the repeat's result matches too");
        } else if (st == KN_OK) {
            printf("# %s: the kernel IR covers it too\n", name);
        }
    } else {
        printf("#   %s\n", kn_last_error());
    }
    for (int i = 0; i < c->n_in; i++) kn_tensor_release(cg.in[i]);
    for (int o = 0; o < cg.n_out; o++) kn_tensor_release(cg.out[o]);
    tl_release_outputs(&cr);
}

static const kn_dtype floats[] = {KN_F32, KN_F64, KN_BF16, KN_F16};
#define N_FLOATS 4

static void test_unary(void)
{
    static const kn_op ops[] = {KN_OP_NEG,  KN_OP_RELU, KN_OP_GELU, KN_OP_GELU_TANH, KN_OP_SILU, KN_OP_TANH, KN_OP_SIGMOID,
                                KN_OP_EXP,  KN_OP_LOG,  KN_OP_SQRT, KN_OP_RSQRT, KN_OP_ABS, KN_OP_ERF,
                                KN_OP_FLOOR, KN_OP_CEIL, KN_OP_ROUND, KN_OP_SIN, KN_OP_COS, KN_OP_LOGICAL_NOT};
    int64_t shape[2] = {5, 37};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (int d = 0; d < N_FLOATS; d++) {
            kn_opcall c;
            kn_opcall_init(&c, ops[i]);
            c.n_in = 1;
            c.in[0] = tl_rand(floats[d], 2, shape, -1, -4, 4, 1);
            check_call(&c, true, "%s %s", kn_op_name(ops[i]), kn_dtype_name(floats[d]));
            kn_tensor_release(c.in[0]);
        }
    static const kn_op iops[] = {KN_OP_NEG, KN_OP_ABS, KN_OP_RELU, KN_OP_LOGICAL_NOT};
    static const kn_dtype ints[] = {KN_I32, KN_I64, KN_BOOL};
    for (size_t i = 0; i < sizeof iops / sizeof iops[0]; i++)
        for (int d = 0; d < 3; d++) {
            kn_opcall c;
            kn_opcall_init(&c, iops[i]);
            c.n_in = 1;
            c.in[0] = tl_rand(ints[d], 2, shape, -1, -50, 50, 0);
            check_call(&c, true, "%s %s", kn_op_name(iops[i]), kn_dtype_name(ints[d]));
            kn_tensor_release(c.in[0]);
        }
}

static void test_cast(void)
{
    static const kn_dtype all[] = {KN_F32, KN_F64, KN_BF16, KN_F16, KN_I32, KN_I64, KN_BOOL};
    int64_t shape[3] = {3, 4, 9};
    for (int a = 0; a < 7; a++)
        for (int b = 0; b < 7; b++) {
            if (a == b) continue;
            kn_opcall c;
            kn_opcall_init(&c, KN_OP_CAST);
            c.n_in = 1;
            c.a.dtype = all[b];
            c.in[0] = tl_rand(all[a], 3, shape, -1, -300, 300, 0);
            check_call(&c, true, "cast %s -> %s", kn_dtype_name(all[a]), kn_dtype_name(all[b]));
            kn_tensor_release(c.in[0]);
        }
    for (int a = 0; a < 7; a++) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_CONTIGUOUS);
        c.n_in = 1;
        c.in[0] = tl_rand(all[a], 3, shape, TL_TRANSPOSED, -9, 9, 0);
        check_call(&c, true, "contiguous of a transposed %s", kn_dtype_name(all[a]));
        kn_tensor_release(c.in[0]);
    }
}

static void test_binary(void)
{
    static const kn_op ops[] = {KN_OP_ADD, KN_OP_SUB, KN_OP_MUL, KN_OP_DIV, KN_OP_POW, KN_OP_MAXIMUM, KN_OP_MINIMUM};
    static const kn_dtype dts[] = {KN_F32, KN_F64, KN_BF16, KN_F16, KN_I32, KN_I64};
    int64_t sa[3] = {3, 4, 17}, sb[2] = {4, 1};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (int d = 0; d < 6; d++) {
            bool isint = dts[d] == KN_I32 || dts[d] == KN_I64;
            kn_opcall c;
            kn_opcall_init(&c, ops[i]);
            c.n_in = 2;
            c.in[0] = tl_rand(dts[d], 3, sa, -1, isint ? -20 : -3, isint ? 20 : 3, !isint);
            c.in[1] = tl_rand(dts[d], 2, sb, -1, ops[i] == KN_OP_POW && isint ? 0 : -3, 3, !isint);
            check_call(&c, true, "%s %s, broadcast {3,4,17} with {4,1}", kn_op_name(ops[i]), kn_dtype_name(dts[d]));
            kn_tensor_release(c.in[0]);
            kn_tensor_release(c.in[1]);
        }
    /* mixed dtypes promote; a scalar operand; an empty tensor */
    static const kn_dtype mix[][2] = {{KN_F32, KN_BF16}, {KN_I32, KN_F32}, {KN_I64, KN_F16}, {KN_BF16, KN_F16}, {KN_BOOL, KN_I32}};
    for (int m = 0; m < 5; m++) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_MUL);
        c.n_in = 2;
        c.in[0] = tl_rand(mix[m][0], 3, sa, -1, -5, 5, 0);
        c.in[1] = tl_rand(mix[m][1], 0, NULL, -1, -5, 5, 0);
        check_call(&c, true, "mul %s by a %s scalar", kn_dtype_name(mix[m][0]), kn_dtype_name(mix[m][1]));
        kn_tensor_release(c.in[0]);
        kn_tensor_release(c.in[1]);
    }
    int64_t se[2] = {0, 5};
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ADD);
    c.n_in = 2;
    c.in[0] = tl_rand(KN_F32, 2, se, TL_CONTIG, -1, 1, 0);
    c.in[1] = tl_rand(KN_F32, 1, se + 1, TL_CONTIG, -1, 1, 0);
    check_call(&c, true, "add on an empty {0,5} tensor");
    kn_tensor_release(c.in[0]);
    kn_tensor_release(c.in[1]);
}

static void test_compare_select(void)
{
    static const kn_op ops[] = {KN_OP_GT, KN_OP_LT, KN_OP_GE, KN_OP_LE, KN_OP_EQ, KN_OP_NE};
    static const kn_dtype dts[] = {KN_F32, KN_BF16, KN_I64, KN_BOOL};
    int64_t sa[2] = {6, 11}, sb[1] = {11};
    for (size_t i = 0; i < 6; i++)
        for (int d = 0; d < 4; d++) {
            kn_opcall c;
            kn_opcall_init(&c, ops[i]);
            c.n_in = 2;
            c.in[0] = tl_rand(dts[d], 2, sa, -1, -3, 3, dts[d] == KN_F32);
            c.in[1] = tl_rand(d == 0 ? KN_I32 : dts[d], 1, sb, -1, -3, 3, 0);
            check_call(&c, true, "%s %s", kn_op_name(ops[i]), kn_dtype_name(dts[d]));
            kn_tensor_release(c.in[0]);
            kn_tensor_release(c.in[1]);
        }
    int64_t s3[3] = {3, 1, 5}, sx[2] = {4, 5}, sy[3] = {3, 4, 1};
    for (int d = 0; d < N_FLOATS; d++) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_WHERE);
        c.n_in = 3;
        c.in[0] = tl_rand(KN_BOOL, 3, s3, -1, 0, 1, 0);
        c.in[1] = tl_rand(floats[d], 2, sx, -1, -3, 3, 1);
        c.in[2] = tl_rand(floats[d], 3, sy, -1, -3, 3, 1);
        check_call(&c, true, "where %s with broadcasting", kn_dtype_name(floats[d]));
        for (int i = 0; i < 3; i++) kn_tensor_release(c.in[i]);
    }
    static const kn_dtype mdt[] = {KN_F32, KN_BF16, KN_I64};
    int64_t sm[3] = {3, 4, 5}, mk[2] = {4, 1};
    for (int d = 0; d < 3; d++) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_MASKED_FILL);
        c.n_in = 2;
        c.a.value = mdt[d] == KN_I64 ? -7 : -1e4;
        c.in[0] = tl_rand(mdt[d], 3, sm, -1, -3, 3, 0);
        c.in[1] = tl_rand(KN_BOOL, 2, mk, -1, 0, 1, 0);
        check_call(&c, true, "masked_fill %s", kn_dtype_name(mdt[d]));
        kn_tensor_release(c.in[0]);
        kn_tensor_release(c.in[1]);
    }
}

static void test_rows(void)
{
    static const kn_op red[] = {KN_OP_SUM, KN_OP_MEAN, KN_OP_AMAX, KN_OP_AMIN, KN_OP_VAR};
    static const kn_dtype dts[] = {KN_F32, KN_F64, KN_BF16, KN_I32, KN_I64};
    int64_t s[3] = {6, 33, 5};
    for (size_t i = 0; i < 5; i++)
        for (int d = 0; d < 5; d++)
            for (int dim = 0; dim < 3; dim++) {
                bool isint = dts[d] == KN_I32 || dts[d] == KN_I64;
                kn_opcall c;
                kn_opcall_init(&c, red[i]);
                c.n_in = 1;
                c.a.ndims = 1;
                c.a.dims[0] = dim;
                c.a.keepdim = dim == 1;
                c.in[0] = tl_rand(dts[d], 3, s, -1, isint ? -100 : -3, isint ? 100 : 3, 0);
                check_call(&c, true, "%s %s over dim %d%s", kn_op_name(red[i]), kn_dtype_name(dts[d]), dim + 1,
                           c.a.keepdim ? " (keepdim)" : "");
                kn_tensor_release(c.in[0]);
            }
    int64_t s1[1] = {1000};
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_SUM);
    c.n_in = 1;
    c.in[0] = tl_rand(KN_F32, 1, s1, TL_CONTIG, -1, 1, 0);
    check_call(&c, true, "sum of a 1-D f32 tensor (all dims)");
    kn_tensor_release(c.in[0]);

    static const kn_op sm[] = {KN_OP_SOFTMAX, KN_OP_LOG_SOFTMAX};
    int64_t s2[3] = {2, 3, 300};
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < N_FLOATS; d++)
            for (int dim = 0; dim < 3; dim += 2) {
                kn_opcall cc;
                kn_opcall_init(&cc, sm[i]);
                cc.n_in = 1;
                cc.a.dim = dim;
                cc.in[0] = tl_rand(floats[d], 3, s2, -1, -5, 5, 0);
                check_call(&cc, true, "%s %s over dim %d", kn_op_name(sm[i]), kn_dtype_name(floats[d]), dim + 1);
                kn_tensor_release(cc.in[0]);
            }
    int64_t sx[3] = {4, 6, 40}, sw[1] = {40};
    for (int d = 0; d < N_FLOATS; d++)
        for (int nin = 1; nin <= 3; nin += 2) {
            kn_opcall cc;
            kn_opcall_init(&cc, KN_OP_LAYER_NORM);
            cc.n_in = nin;
            cc.a.nshape = 1;
            cc.a.shape[0] = 40;
            cc.in[0] = tl_rand(floats[d], 3, sx, -1, -3, 3, 0);
            for (int k = 1; k < nin; k++) cc.in[k] = tl_rand(floats[d], 1, sw, -1, -2, 2, 0);
            check_call(&cc, true, "layer_norm %s%s", kn_dtype_name(floats[d]), nin == 3 ? " with weight and bias" : "");
            for (int k = 0; k < nin; k++) kn_tensor_release(cc.in[k]);
        }
    int64_t l2x[4] = {3, 2, 5, 8}, l2w[2] = {5, 8};
    for (int lay = 0; lay < TL_NLAYOUTS; lay++) {
        kn_opcall cc;
        kn_opcall_init(&cc, KN_OP_LAYER_NORM);
        cc.n_in = 3;
        cc.a.nshape = 2;
        cc.a.shape[0] = 5;
        cc.a.shape[1] = 8;
        cc.in[0] = tl_rand(KN_F32, 4, l2x, lay, -3, 3, 0);
        cc.in[1] = tl_rand(KN_F32, 2, l2w, lay, -2, 2, 0);
        cc.in[2] = tl_rand(KN_F32, 2, l2w, -1, -2, 2, 0);
        check_call(&cc, true, "layer_norm over the last 2 dims, %s input", tl_layout_name[lay]);
        for (int k = 0; k < 3; k++) kn_tensor_release(cc.in[k]);
    }
    for (int i = 0; i < 2; i++) {
        kn_opcall cc;
        kn_opcall_init(&cc, sm[i]);
        cc.n_in = 1;
        cc.in[0] = tl_rand(KN_F32, 0, NULL, -1, -3, 3, 0);
        check_call(&cc, true, "%s of a scalar", kn_op_name(sm[i]));
        kn_tensor_release(cc.in[0]);
    }
}

static void test_misc(void)
{
    int64_t sx[4] = {2, 3, 4, 5}, sp[1] = {3};
    for (int d = 0; d < N_FLOATS; d++) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_BATCH_NORM);
        c.n_in = 5;
        c.in[0] = tl_rand(floats[d], 4, sx, -1, -3, 3, 0);
        c.in[1] = tl_rand(floats[d], 1, sp, -1, -1, 1, 0);
        c.in[2] = tl_rand(floats[d], 1, sp, -1, 0.5, 2, 0);
        c.in[3] = tl_rand(floats[d], 1, sp, -1, -2, 2, 0);
        c.in[4] = tl_rand(floats[d], 1, sp, -1, -2, 2, 0);
        check_call(&c, true, "batch_norm (inference) %s", kn_dtype_name(floats[d]));
        for (int i = 0; i < 5; i++) kn_tensor_release(c.in[i]);
    }
    static const kn_dtype tdt[] = {KN_F32, KN_I64, KN_BOOL};
    int64_t st[3] = {2, 5, 7};
    for (int d = 0; d < 3; d++)
        for (int diag = -1; diag <= 2; diag += 3)
            for (int op = 0; op < 2; op++) {
                kn_opcall c;
                kn_opcall_init(&c, op ? KN_OP_TRIU : KN_OP_TRIL);
                c.n_in = 1;
                c.a.diagonal = diag;
                c.in[0] = tl_rand(tdt[d], 3, st, -1, -9, 9, 0);
                check_call(&c, true, "%s %s diagonal %d", op ? "triu" : "tril", kn_dtype_name(tdt[d]), diag);
                kn_tensor_release(c.in[0]);
            }
    static const kn_dtype cdt[] = {KN_F32, KN_F64, KN_BF16, KN_I32, KN_I64, KN_BOOL};
    for (int d = 0; d < 6; d++) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_FULL);
        c.a.dtype = cdt[d];
        c.a.nshape = 2;
        c.a.shape[0] = 3;
        c.a.shape[1] = 70;
        c.a.value = cdt[d] == KN_BOOL ? 1 : 3;
        check_call(&c, true, "full %s", kn_dtype_name(cdt[d]));
        kn_opcall_init(&c, KN_OP_ARANGE);
        c.a.dtype = cdt[d];
        c.a.nshape = 1;
        c.a.shape[0] = cdt[d] == KN_BOOL ? 1 : 100;
        c.a.value = cdt[d] == KN_BOOL ? 0 : 2;
        c.a.value2 = kn_dtype_is_float(cdt[d]) ? 0.25 : 3;
        check_call(&c, true, "arange %s", kn_dtype_name(cdt[d]));
    }
    /* not the IR's: the templates (or nothing yet) run these */
    int64_t s2[2] = {5, 6};
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_SUM);
    c.n_in = 1;
    c.in[0] = tl_rand(KN_F32, 2, s2, -1, -1, 1, 0);
    kn_tensor *g = gpu_like(c.in[0]);
    kn_opcall cg = c;
    cg.in[0] = g;
    kn_meta m[KN_MAX_OUTPUTS];
    int n = 0;
    kn_status s = kn_op_infer(&cg, m, &n);
    if (s == KN_OK) s = kn_tensor_new_meta(&m[0], KN_CUDA, &cg.out[0]);
    cg.n_out = 1;
    ok(s == KN_OK && kn_cuda_eager_ir(&cg) == KN_ERR_UNSUPPORTED,
       "a sum over all dims of a 2-D tensor is not one generated kernel: the IR path declines it");
    kn_tensor_release(cg.out[0]);
    kn_tensor_release(g);
    kn_tensor_release(c.in[0]);
}

/* ---- the allocator ---- */

static void test_alloc(void)
{
    kn_cuda_alloc_stats s0, s1;
    kn_cuda_empty_cache();
    kn_cuda_alloc_stats_get(&s0);
    void *a = NULL, *b = NULL, *z1 = NULL, *z2 = NULL;
    ok(kn_cuda_malloc(1000, &a) == KN_OK && a && ((uintptr_t)a & 255) == 0, "malloc 1000 bytes, 256-aligned");
    kn_cuda_alloc_stats_get(&s1);
    is_int(s1.allocated - s0.allocated, 1024, "1000 bytes take a 1024-byte block (512-byte classes)");
    kn_cuda_free(a);
    ok(kn_cuda_malloc(900, &b) == KN_OK && b == a, "a freed block serves the next request of its class");
    kn_cuda_alloc_stats_get(&s1);
    is_int(s1.n_malloc - s0.n_malloc, 1, "... without another cudaMalloc");
    is_int(s1.n_reuse - s0.n_reuse, 1, "... counted as a reuse");
    kn_cuda_free(b);
    ok(kn_cuda_malloc(0, &z1) == KN_OK && kn_cuda_malloc(0, &z2) == KN_OK && z1 && z2 && z1 != z2,
       "zero bytes give unique valid pointers");
    kn_cuda_free(z1);
    kn_cuda_free(z2);
    void *p = (void *)1;
    ok(kn_cuda_malloc(-1, &p) != KN_OK && p == NULL, "a negative size is an error");
    ok(kn_cuda_malloc(KN_MAX_BYTES + 1, &p) != KN_OK && p == NULL, "a size over KN_MAX_BYTES is an error");

    void *l1 = NULL, *l2 = NULL, *sm = NULL;
    kn_cuda_alloc_stats_get(&s0);
    ok(kn_cuda_malloc(3 << 20, &l1) == KN_OK, "malloc 3 MiB");
    kn_cuda_alloc_stats_get(&s1);
    is_int(s1.reserved - s0.reserved, 4 << 20, "3 MiB take a 4 MiB block (2 MiB classes)");
    kn_cuda_free(l1);
    ok(kn_cuda_malloc(512, &sm) == KN_OK && sm != l1, "a small request does not take a cached large block");
    ok(kn_cuda_malloc((7 << 19), &l2) == KN_OK && l2 == l1, "a 3.5 MiB request reuses the cached 4 MiB block");
    kn_cuda_alloc_reset_peak();
    kn_cuda_alloc_stats_get(&s0);
    is_int(s0.peak_allocated, s0.allocated, "reset_peak sets the peak to what is allocated now");
    kn_cuda_free(l2);
    kn_cuda_free(sm);
    kn_cuda_empty_cache();
    kn_cuda_alloc_stats_get(&s1);
    is_int(s1.reserved, s1.allocated, "empty_cache gives back every cached block");

    /* out of memory, then still usable */
    void *huge = NULL;
    kn_status st = kn_cuda_malloc((int64_t)1 << 39, &huge);
    is_int(st, KN_ERR_OOM, "512 GiB: KN_ERR_OOM");
    like(kn_last_error(), "out of memory", "the message says out of memory");
    like(kn_last_error(), "tried to allocate", "... and how much was asked");
    printf("#   %s\n", kn_last_error());
    int64_t big[1] = {(int64_t)1 << 37};
    kn_tensor *t = NULL;
    st = kn_tensor_new(KN_F32, 1, big, KN_CUDA, &t);
    is_int(st, KN_ERR_OOM, "a 512 GiB tensor: KN_ERR_OOM");
    ok(kn_cuda_malloc(4096, &a) == KN_OK, "a small allocation works after the OOM");
    kn_cuda_free(a);
}

static void test_alloc_recording(void)
{
    kn_cuda_empty_cache();
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL, *x = NULL, *y = NULL;
    const int64_t sz = 77 * 1024;
    ok(kn_cuda_alloc_capture_begin() == KN_OK, "allocator: recording begins");
    ok(kn_cuda_alloc_capture_begin() != KN_OK, "allocator: recordings do not nest");
    kn_cuda_malloc(sz, &a);
    kn_cuda_free(a);
    kn_cuda_malloc(sz, &b);
    ok(b == a, "a block freed while recording is reused by the same recording");
    kn_cuda_malloc(sz, &x); /* still in use when the recording ends */
    kn_cuda_free(b);
    void *held = NULL;
    kn_cuda_alloc_capture_end(&held);
    ok(held != NULL, "the recording holds its blocks");
    kn_cuda_malloc(sz, &c);
    ok(c != a && c != x, "the recording's free blocks are not handed out after it ends");
    kn_cuda_free(x);
    kn_cuda_malloc(sz, &d);
    ok(d != x && d != a, "a recording's block freed after it ends stays reserved");
    kn_cuda_alloc_release_held(held);
    /* the cache may also hold blocks of segments carved by these misses:
     * take what it has and look for the recording's two */
    void *got[16] = {NULL};
    bool seen_a = false, seen_x = false;
    for (int i = 0; i < 16; i++) {
        kn_cuda_malloc(sz, &got[i]);
        seen_a |= got[i] == a;
        seen_x |= got[i] == x;
    }
    y = got[0];
    ok(seen_a && seen_x, "destroying the recording returns its blocks to the cache");
    for (int i = 0; i < 16; i++) kn_cuda_free(got[i]);
    kn_cuda_free(c);
    kn_cuda_free(d);
    (void)y;
    kn_cuda_empty_cache();
}

/* A size asked for again and again, nothing freed in between (results a
 * loop of compiled calls leaves to Lua's collector): after the first few
 * misses, one cudaMalloc serves several blocks. */
static void test_alloc_segments(void)
{
    kn_cuda_empty_cache();
    kn_cuda_alloc_stats s0, s1;
    kn_cuda_alloc_stats_get(&s0);
    enum { N = 100 };
    const int64_t sz = 200 * 1024; /* 204800: a 512-byte multiple */
    void *p[N] = {NULL};
    bool all = true;
    for (int i = 0; i < N; i++) all &= kn_cuda_malloc(sz, &p[i]) == KN_OK && p[i] && ((uintptr_t)p[i] & 255) == 0;
    ok(all, "100 blocks of 200 KiB, each 256-aligned");
    kn_cuda_alloc_stats_get(&s1);
    int64_t mallocs = s1.n_malloc - s0.n_malloc;
    ok(mallocs <= 12, "... from at most 12 cudaMallocs (%lld)", (long long)mallocs);
    is_int(s1.allocated - s0.allocated, N * sz, "... each counted once as allocated");
    ok(s1.reserved - s0.reserved < 2 * N * sz, "... reserving less than twice that (%lld bytes)",
       (long long)(s1.reserved - s0.reserved));
    bool apart = true; /* no two blocks overlap */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            if (i != j && (char *)p[i] < (char *)p[j] + sz && (char *)p[j] < (char *)p[i] + sz) apart = false;
    ok(apart, "no two blocks overlap");
    /* every block is memory of its own: each filled with its index, read back */
    bool filled = true;
    for (int i = 0; i < N; i++) filled &= cudaMemset(p[i], i, (size_t)sz) == cudaSuccess;
    unsigned char first[N], last[N];
    for (int i = 0; i < N; i++) {
        filled &= cudaMemcpy(&first[i], p[i], 1, cudaMemcpyDeviceToHost) == cudaSuccess;
        filled &= cudaMemcpy(&last[i], (char *)p[i] + sz - 1, 1, cudaMemcpyDeviceToHost) == cudaSuccess;
        filled &= first[i] == (unsigned char)i && last[i] == (unsigned char)i;
    }
    ok(filled, "each block holds what was written to it, first byte to last");
    /* half freed: emptying the cache keeps the segments still in use */
    for (int i = 0; i < N; i += 2) kn_cuda_free(p[i]);
    kn_cuda_empty_cache();
    kn_cuda_alloc_stats_get(&s1);
    ok(s1.reserved - s0.reserved >= N / 2 * sz, "emptying the cache keeps segments with blocks in use");
    bool usable = true;
    for (int i = 1; i < N; i += 2) usable &= cudaMemset(p[i], 7, (size_t)sz) == cudaSuccess;
    ok(usable && cudaDeviceSynchronize() == cudaSuccess, "... and their blocks stay usable");
    for (int i = 1; i < N; i += 2) kn_cuda_free(p[i]);
    kn_cuda_empty_cache();
    kn_cuda_alloc_stats_get(&s1);
    is_int(s1.reserved, s1.allocated, "with every block free, emptying the cache gives every segment back");
    is_int(s1.allocated, s0.allocated, "... and nothing is left allocated");
}

/* ---- copies ---- */

static void test_copies(void)
{
    static const kn_dtype all[] = {KN_F32, KN_F64, KN_BF16, KN_F16, KN_I32, KN_I64, KN_BOOL};
    int64_t s[2] = {37, 19};
    for (int d = 0; d < 7; d++) {
        kn_tensor *h = tl_rand(all[d], 2, s, TL_CONTIG, -100, 100, 1), *g = NULL, *back = NULL;
        bool okk = kn_tensor_to_device(h, KN_CUDA, NULL, &g) == KN_OK && kn_tensor_to_device(g, KN_CPU, NULL, &back) == KN_OK &&
                   memcmp(h->storage->data, back->storage->data, (size_t)h->storage->nbytes) == 0;
        ok(okk, "host -> GPU -> host keeps every byte (%s)", kn_dtype_name(all[d]));
        kn_tensor_release(back);
        /* a transposed view on the GPU goes back through a GPU copy */
        kn_tensor *tv = NULL, *tb = NULL;
        int64_t ts[2] = {19, 37}, tst[2] = {1, 19};
        okk = g && kn_tensor_view_of(g, 2, ts, tst, 0, &tv) == KN_OK && kn_tensor_to_device(tv, KN_CPU, NULL, &tb) == KN_OK;
        bool same = okk;
        for (int64_t i = 0; same && i < 19 * 37; i++)
            same = memcmp(tl_ptr(tb, i), tl_ptr(h, (i % 37) * 19 + i / 37), kn_dtype_size(all[d])) == 0;
        ok(same, "a transposed GPU view comes back transposed (%s)", kn_dtype_name(all[d]));
        kn_tensor_release(tb);
        kn_tensor_release(tv);
        kn_tensor_release(g);
        kn_tensor_release(h);
    }
    int64_t e[1] = {0};
    kn_tensor *h = tl_new(KN_F32, 1, e), *g = NULL, *back = NULL;
    ok(kn_tensor_to_device(h, KN_CUDA, NULL, &g) == KN_OK && kn_tensor_to_device(g, KN_CPU, NULL, &back) == KN_OK &&
           back->shape[0] == 0,
       "an empty tensor goes to the GPU and back");
    kn_tensor_release(back);
    kn_tensor_release(g);
    kn_tensor_release(h);
}

/* ---- modules ---- */

typedef struct fill_args {
    float *p;
    long long n;
    float v;
} fill_args;

static void fill_src(char *buf, size_t size, const char *marker)
{
    snprintf(buf, size,
             "/* kiln test module %s */\n"
             "typedef struct { float *p; long long n; float v; } fill_args;\n"
             "extern \"C\" __global__ void kn_test_fill(fill_args a)\n"
             "{\n"
             "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
             "    if (i < a.n) a.p[i] = a.v;\n"
             "}\n",
             marker);
}

/* Fill n floats on the GPU with v through m's kernel; whether they read back right. */
static bool fill_works(kn_cuda_module *m, long long n, float v)
{
    const void *fn = NULL;
    if (kn_cuda_module_kernel(m, "kn_test_fill", &fn) != KN_OK) return false;
    void *d = NULL;
    if (kn_cuda_malloc(n * 4, &d) != KN_OK) return false;
    fill_args a = {d, n, v};
    float *h = calloc((size_t)n, 4);
    bool good = kn_cuda_launch(fn, (n + 127) / 128, 128, &a, 0) == KN_OK && dc->be->to_host(dc, h, d, n * 4) == KN_OK;
    for (long long i = 0; good && i < n; i++) good = h[i] == v;
    free(h);
    kn_cuda_free(d);
    return good;
}

/* The child process of the disk-cache tests: one get, its counters on stdout. */
static int module_child(const char *dir, const char *marker)
{
    char src[1024];
    fill_src(src, sizeof src, marker);
    dc = kn_backend_get(KN_CUDA);
    kn_cuda_module *m = NULL;
    if (!dc || kn_cuda_module_get(src, dir, &m) != KN_OK) {
        printf("error %s\n", kn_last_error());
        return 1;
    }
    kn_cuda_module_stats s;
    kn_cuda_module_stats_get(&s);
    printf("compiles=%lld disk_hits=%lld works=%d\n", (long long)s.compiles, (long long)s.disk_hits,
           fill_works(m, 1000, 2.5f) ? 1 : 0);
    return 0;
}

static const char *self_path;

/* Run the child; its counters and stderr. */
static bool run_child(const char *dir, const char *marker, long long *compiles, long long *disk_hits, int *works,
                      char *err, size_t errsize)
{
    char errpath[600], cmd[2000];
    snprintf(errpath, sizeof errpath, "%s/child.err", dir);
    snprintf(cmd, sizeof cmd, "'%s' --module-child '%s' '%s' 2>'%s'", self_path, dir, marker, errpath);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    char line[512] = "";
    bool got = fgets(line, sizeof line, p) != NULL;
    int rc = pclose(p);
    got = got && rc == 0 && sscanf(line, "compiles=%lld disk_hits=%lld works=%d", compiles, disk_hits, works) == 3;
    if (!got) printf("#   child said: %s", line);
    err[0] = 0;
    FILE *f = fopen(errpath, "r");
    if (f) {
        size_t n = fread(err, 1, errsize - 1, f);
        err[n] = 0;
        fclose(f);
    }
    unlink(errpath);
    return got;
}

static bool find_entry(const char *dir, char *path, size_t size)
{
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));)
        if (strncmp(e->d_name, "cuda-", 5) == 0 && strstr(e->d_name, ".cubin")) {
            snprintf(path, size, "%s/%s", dir, e->d_name);
            found = true;
        }
    closedir(d);
    return found;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    char p[1200];
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void test_modules(void)
{
    char dir[512], marker[64], src[1024];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/kiln-cuda-rt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        ok(0, "a temporary cache dir");
        return;
    }
    char sub[600];
    snprintf(sub, sizeof sub, "%s/cache", dir); /* made by the module cache itself */
    snprintf(marker, sizeof marker, "%d-%lld", (int)getpid(), (long long)time(NULL));
    fill_src(src, sizeof src, marker);
    kn_cuda_module_stats s0, s1;
    kn_cuda_module_stats_get(&s0);
    kn_cuda_module *m1 = NULL, *m2 = NULL;
    ok(kn_cuda_module_get(src, sub, &m1) == KN_OK && m1, "a new module compiles and loads");
    kn_cuda_module_stats_get(&s1);
    is_int(s1.compiles - s0.compiles, 1, "... with one NVRTC compile");
    ok(kn_cuda_module_get(src, sub, &m2) == KN_OK && m2 == m1, "the second get is the same module");
    kn_cuda_module_stats_get(&s0);
    is_int(s0.memory_hits - s1.memory_hits, 1, "... from memory");
    is_int(s0.compiles - s1.compiles, 0, "... compiling nothing");
    ok(fill_works(m1, 1000, 1.5f), "its kernel runs (kn_cuda_launch) and writes what it should");
    const void *fn = NULL;
    ok(kn_cuda_module_kernel(m1, "no_such_kernel", &fn) == KN_ERR_UNSUPPORTED && !fn,
       "a missing kernel name is an error");
    fill_args none = {NULL, 0, 0};
    ok(kn_cuda_module_kernel(m1, "kn_test_fill", &fn) == KN_OK && kn_cuda_launch(fn, 0, 128, &none, 0) == KN_OK,
       "a launch with grid 0 does nothing");
    char entry[1200];
    ok(find_entry(sub, entry, sizeof entry), "the CUBIN is in the cache dir (made on demand)");

    long long compiles = -1, hits = -1;
    int works = 0;
    char err[4096];
    bool ran = run_child(sub, marker, &compiles, &hits, &works, err, sizeof err);
    ok(ran && compiles == 0 && hits == 1 && works == 1, "another process loads it from disk and runs it");
    /* flip one byte of the CUBIN */
    long size = 0;
    FILE *f = fopen(entry, "r+b");
    if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 10) {
        fseek(f, size - 10, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, size - 10, SEEK_SET);
        fputc(ch ^ 0x5a, f);
    }
    if (f) fclose(f);
    ran = run_child(sub, marker, &compiles, &hits, &works, err, sizeof err);
    ok(ran && compiles == 1 && hits == 0 && works == 1, "a corrupted entry is rebuilt, not loaded");
    like(err, "ignoring corrupt CUDA cache entry", "... and reported");
    like(err, "checksum mismatch", "... saying why");
    ran = run_child(sub, marker, &compiles, &hits, &works, err, sizeof err);
    ok(ran && compiles == 0 && hits == 1 && works == 1, "the rebuilt entry is good again");
    if (truncate(entry, 40) != 0) printf("#   truncate: %s\n", strerror(errno));
    ran = run_child(sub, marker, &compiles, &hits, &works, err, sizeof err);
    ok(ran && compiles == 1 && works == 1 && strstr(err, "truncated header"), "a truncated entry too");
    remove_dir(sub);
    remove_dir(dir);
}

/* ---- recordings through the vtable ---- */

static void test_graphs(void)
{
    int64_t s[2] = {64, 33};
    kn_tensor *hx = tl_rand(KN_F32, 2, s, TL_CONTIG, -3, 3, 0), *hy = tl_rand(KN_F32, 2, s, TL_CONTIG, -3, 3, 0);
    kn_tensor *x = gpu_like(hx), *y = gpu_like(hy);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ADD);
    c.n_in = 2;
    c.in[0] = x;
    c.in[1] = y;
    kn_opcall warm = c;
    ok(kn_op_eager(&warm, KN_CUDA) == KN_OK, "warm-up: the kernel is loaded before recording");
    kn_tensor_release(warm.out[0]);

    ok(dc->be->capture_begin(dc) == KN_OK, "recording begins");
    kn_opcall rc = c;
    kn_status st = kn_op_eager(&rc, KN_CUDA);
    void *exec = NULL;
    kn_status end = dc->be->capture_end(dc, &exec);
    ok(st == KN_OK && end == KN_OK && exec, "an eager add is recorded");
    if (end != KN_OK) printf("#   %s\n", kn_last_error());
    kn_opcall ref = c;
    ref.in[0] = hx;
    ref.in[1] = hy;
    kn_op_eager(&ref, KN_CPU);
    if (exec && st == KN_OK) {
        ok(dc->be->graph_launch(dc, exec) == KN_OK, "the recording replays");
        same_values(rc.out[0], ref.out[0], "the replay computed x + y");
        /* new input values in place: the next replay reads them */
        for (int64_t i = 0; i < 64 * 33; i++) tl_set(hx, i, tl_get(hx, i) * -2);
        dc->be->from_host(dc, x->storage->data, hx->storage->data, hx->storage->nbytes);
        tl_release_outputs(&ref);
        ref.in[0] = hx;
        kn_op_eager(&ref, KN_CPU);
        ok(dc->be->graph_launch(dc, exec) == KN_OK, "a second replay");
        same_values(rc.out[0], ref.out[0], "... reads the new input values");
        kn_tensor_release(rc.out[0]);
        dc->be->graph_destroy(dc, exec);
    }
    tl_release_outputs(&ref);

    /* a recording that cannot be: a copy to the host waits, which capture forbids */
    ok(dc->be->capture_begin(dc) == KN_OK, "a second recording begins");
    float tmp[4];
    kn_status cp = dc->be->to_host(dc, tmp, x->storage->data, sizeof tmp);
    exec = NULL;
    end = dc->be->capture_end(dc, &exec);
    ok(cp != KN_OK && end != KN_OK && exec == NULL, "waiting for the GPU while recording fails the recording");
    like(kn_last_error(), "cannot be recorded", "... with a message that says so");
    if (exec) dc->be->graph_destroy(dc, exec);
    kn_opcall after = c;
    ok(kn_op_eager(&after, KN_CUDA) == KN_OK && dc->be->sync(dc) == KN_OK, "the GPU works after a failed recording");
    kn_tensor_release(after.out[0]);

    /* a recorded copy pointed at other tensors (reduce-overhead's copies
     * in and out of a replay: kn_plan_record.c) */
    /* values apart: the recorded source hz, the new source hy, both destinations hx */
    kn_tensor *hz = tl_rand(KN_F32, 2, s, TL_CONTIG, 5, 9, 0);
    kn_tensor *src1 = gpu_like(hz), *src2 = gpu_like(hy), *dst1 = gpu_like(hx), *dst2 = gpu_like(hx);
    int64_t nbytes = hx->storage->nbytes;
    ok(dc->be->capture_begin(dc) == KN_OK, "a recording of a copy begins");
    kn_status cst = dc->be->copy(dc, dst1->storage->data, src1->storage->data, nbytes);
    exec = NULL;
    end = dc->be->capture_end(dc, &exec);
    ok(cst == KN_OK && end == KN_OK && exec, "a copy is recorded");
    int copy = -1, other = -1;
    ok(exec && dc->be->graph_find_copy(dc, exec, dst1->storage->data, src1->storage->data, &copy) == KN_OK &&
           copy >= 0,
       "the recorded copy is found by its addresses");
    ok(exec && dc->be->graph_find_copy(dc, exec, dst2->storage->data, src1->storage->data, &other) != KN_OK,
       "no recorded copy is found at addresses it does not have");
    like(kn_last_error(), "0 recorded copies", "... and the error says so");
    if (exec && copy >= 0) {
        ok(dc->be->graph_set_copy(dc, exec, copy, dst2->storage->data, src2->storage->data, nbytes) == KN_OK,
           "the copy is pointed at other tensors");
        ok(dc->be->graph_launch(dc, exec) == KN_OK, "... and replayed");
        same_values(dst2, hy, "the replay copied the new source into the new destination");
        same_values(dst1, hx, "... and left the recorded destination alone (the recorded source holds other values)");
        ok(dc->be->graph_set_copy(dc, exec, copy + 1, dst2->storage->data, src2->storage->data, nbytes) != KN_OK,
           "a copy the recording has not found is refused");
    }
    if (exec) dc->be->graph_destroy(dc, exec);
    kn_tensor_release(hz);
    kn_tensor_release(src1);
    kn_tensor_release(src2);
    kn_tensor_release(dst1);
    kn_tensor_release(dst2);
    kn_tensor_release(x);
    kn_tensor_release(y);
    kn_tensor_release(hx);
    kn_tensor_release(hy);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--module-child") == 0) return module_child(argv[2], argv[3]);
    if (!kn_cuda_available()) {
        printf("# %s\n", kn_cuda_unavailable_reason());
        skip_all("no CUDA device");
    }
    self_path = argv[0];
    dc = kn_backend_get(KN_CUDA);
    if (!dc || kn_cuda_init() != KN_OK) {
        printf("Bail out! CUDA is available but does not start: %s\n", kn_last_error());
        return 2;
    }
    tl_seed();
    test_alloc();
    test_alloc_recording();
    test_alloc_segments();
    test_copies();
    test_modules();
    test_graphs();
    test_unary();
    test_cast();
    test_binary();
    test_compare_select();
    test_rows();
    test_misc();
    printf("# eager calls through the kernel IR: %d, not: %d\n", n_ir, n_not_ir);
    kn_cuda_alloc_stats s;
    kn_cuda_alloc_stats_get(&s);
    printf("# allocator: %lld cudaMalloc, %lld reuses, peak %lld bytes\n", (long long)s.n_malloc,
           (long long)s.n_reuse, (long long)s.peak_allocated);
    return done_testing();
}
#endif
