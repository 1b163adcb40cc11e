/* t/kir.c: the kernel IR's C renderer and the JIT, end to end. Hand-built
 * POINTWISE and ROW kernels (broadcasting row + column + scalar in 2-D and
 * 3-D over f32, bf16, f16 and f64; a transposed input; i64 / i32 / bool with
 * comparisons and where; masked_fill; casts with saturation and bf16
 * rounding; softmax, log_softmax, layer_norm, per-row sum, amax with NaN,
 * a tril mask from KX_INDEX) are rendered to C, compiled at run time, run on
 * fresh random buffers (seed printed) and compared with the CPU reference
 * (kn_op_eager of the equivalent ops), with tolerances per dtype. Also the
 * dump text, the expression-overflow error and a two-kernel program.
 */
#include <dirent.h>

#include "cpu/kn_cpu_jit.h"
#include "kn_kernels.h"
#include "kn_kir.h"
#ifdef KIR_CUDA
#include <cuda_runtime.h>

#include "cuda/kn_cuda_nvrtc.h"

static dim3 dim3_of(int64_t n)
{
    dim3 d = {(unsigned)n, 1, 1};
    return d;
}
#endif
#include "kn_view.h"
#include "ops_testlib.h"

static char cache_dir[256];

/* ---- building kernels ---- */

static kn_kernel *kernel_new(const char *name, kn_kernel_kind kind, int ndim, const int64_t *shape)
{
    kn_kernel *k = calloc(1, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    k->kind = kind;
    k->ndim = ndim;
    for (int d = 0; d < ndim; d++) k->shape[d] = shape[d];
    return k;
}

static int add(kn_kernel *k, kn_kexpr e)
{
    int i = -1;
    if (kn_kernel_add_expr(k, &e, &i) != KN_OK) printf("Bail out! %s\n", kn_last_error());
    return i;
}

static int ld(kn_kernel *k, int buf)
{
    return add(k, (kn_kexpr){.kind = KN_KX_LOAD, .buf = buf, .a = -1, .b = -1, .c = -1,
                             .dtype = k->args[buf].dtype});
}

static int cst(kn_kernel *k, double v, kn_dtype dt)
{
    return add(k, (kn_kexpr){.kind = KN_KX_CONST, .value = v, .a = -1, .b = -1, .c = -1, .dtype = dt});
}

static int op3(kn_kernel *k, kn_op op, int a, int b, int c, kn_dtype dt)
{
    return add(k, (kn_kexpr){.kind = KN_KX_OP, .op = op, .a = a, .b = b, .c = c, .dtype = dt});
}
#define op1(k, op, a, dt) op3(k, op, a, -1, -1, dt)
#define op2(k, op, a, b, dt) op3(k, op, a, b, -1, dt)

static int acc(kn_kernel *k, int s, kn_dtype dt)
{
    return add(k, (kn_kexpr){.kind = KN_KX_ACC, .acc = s, .a = -1, .b = -1, .c = -1, .dtype = dt});
}

static int idx(kn_kernel *k, int dim)
{
    return add(k, (kn_kexpr){.kind = KN_KX_INDEX, .dim = dim, .a = -1, .b = -1, .c = -1, .dtype = KN_I64});
}

/* An argument bound to t, broadcast to the kernel's space (trailing dims
 * aligned; missing or size-1 dims get stride 0). drop_row: a per-row
 * output whose tensor lacks the row dim. */
static int arg_of(kn_kernel *k, const kn_tensor *t, bool out, bool drop_row)
{
    kn_karg a = {.dtype = t->dtype, .is_output = out};
    int nd = drop_row ? k->ndim - 1 : k->ndim;
    int lead = nd - t->ndim;
    for (int d = 0; d < nd; d++) {
        int id = d - lead;
        a.strides[d] = (id < 0 || t->shape[id] == 1) ? 0 : t->strides[id];
    }
    int i = -1;
    if (kn_kernel_add_arg(k, &a, &i) != KN_OK) printf("Bail out! %s\n", kn_last_error());
    return i;
}

static void stage(kn_kernel *k, kn_op op, int expr)
{
    k->stages[k->n_stages++] = (kn_kstage){.op = op, .expr = expr};
}

static void store(kn_kernel *k, int arg, int expr, bool per_row)
{
    k->stores[k->n_stores++] = (kn_kstore){.arg = arg, .expr = expr, .per_row = per_row};
}

/* ---- running ---- */

typedef void (*kfn)(char **bufs, const int64_t *sizes);

#ifndef KIR_CUDA
/* Render k to C, compile, run on ts (one per arg, in order). True when it
 * ran (compare now); a failure is one TAP line. */
static bool run(const kn_kernel *k, kn_tensor **ts, const char *name)
{
    char *src = NULL;
    kn_jit_lib *lib = NULL;
    kn_status st = kn_kernel_render(k, KN_TARGET_C, &src);
    if (st == KN_OK) st = kn_jit_compile(src, cache_dir, &lib);
    if (getenv("KIR_SHOW") && src) printf("%s\n", src);
    free(src);
    if (st != KN_OK) {
        ok(0, "%s: renders and compiles", name);
        printf("#   %s\n", kn_last_error());
        return false;
    }
    kfn f = (kfn)kn_jit_symbol(lib, k->name);
    if (!f) {
        ok(0, "%s: symbol %s found", name, k->name);
        kn_jit_release(lib);
        return false;
    }
    char *bufs[KN_KIR_MAX_ARGS];
    for (int j = 0; j < k->n_args; j++) bufs[j] = kn_tensor_data(ts[j]);
    f(bufs, k->shape);
    kn_jit_release(lib);
    return true;
}
#else
static int have_gpu;

/* Render k to CUDA and compile it with NVRTC for sm_90 (one TAP line).
 * With a GPU, also run it there on copies of ts and copy the outputs back:
 * true means compare now. */
static bool run(const kn_kernel *k, kn_tensor **ts, const char *name)
{
    char *src = NULL, *img = NULL, *log = NULL;
    size_t size = 0;
    kn_status st = kn_kernel_render(k, KN_TARGET_CUDA, &src);
    if (st == KN_OK) st = kn_nvrtc_compile(src, "sm_90", &img, &size, &log);
    if (getenv("KIR_SHOW") && src) printf("%s\n", src);
    free(src);
    if (!ok(st == KN_OK && size > 0, "%s: CUDA source compiles with NVRTC for sm_90", name)) {
        printf("#   %s\n", kn_last_error());
        free(log);
        return false;
    }
    if (log && strstr(log, "warning")) {
        ok(false, "%s: no NVRTC warnings", name);
        printf("#   %s\n", log);
    }
    free(log);
    if (!have_gpu) {
        free(img);
        return false;
    }
    cudaLibrary_t lib = NULL;
    cudaKernel_t kern = NULL;
    void *dev[KN_KIR_MAX_ARGS] = {NULL};
    kn_kargs ka;
    memset(&ka, 0, sizeof ka);
    cudaError_t ce = cudaLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0);
    if (ce == cudaSuccess) ce = cudaLibraryGetKernel(&kern, lib, k->name);
    for (int j = 0; j < k->n_args && ce == cudaSuccess; j++) {
        kn_storage *sg = ts[j]->storage;
        ce = cudaMalloc(&dev[j], (size_t)sg->nbytes + 1);
        if (ce == cudaSuccess) ce = cudaMemcpy(dev[j], sg->data, (size_t)sg->nbytes, cudaMemcpyHostToDevice);
        ka.bufs[j] = (char *)dev[j] + ts[j]->offset * (int64_t)kn_dtype_size(ts[j]->dtype);
    }
    for (int d = 0; d < k->ndim; d++) ka.sizes[d] = k->shape[d];
    int64_t grid;
    int block;
    kn_kernel_launch_dims(k, NULL, &grid, &block);
    void *params[1] = {&ka};
    if (ce == cudaSuccess && grid > 0)
        ce = cudaLaunchKernel((const void *)kern, dim3_of(grid), dim3_of(block), params, 0, 0);
    if (ce == cudaSuccess) ce = cudaDeviceSynchronize();
    for (int j = 0; j < k->n_args && ce == cudaSuccess; j++)
        if (k->args[j].is_output)
            ce = cudaMemcpy(ts[j]->storage->data, dev[j], (size_t)ts[j]->storage->nbytes, cudaMemcpyDeviceToHost);
    for (int j = 0; j < k->n_args; j++) cudaFree(dev[j]);
    if (lib) cudaLibraryUnload(lib);
    free(img);
    if (!ok(ce == cudaSuccess, "%s: runs on the GPU (grid %lld, block %d)", name, (long long)grid, block)) {
        printf("#   CUDA: %s\n", cudaGetErrorString(ce));
        return false;
    }
    return true;
}
#endif

/* Eager reference: op on up to three inputs; attrs set by the caller through c. */
static kn_tensor *ref_call(kn_opcall *c)
{
    kn_status st = kn_op_eager(c, KN_CPU);
    if (st != KN_OK) {
        printf("Bail out! reference %s: %s\n", kn_op_name(c->op), kn_last_error());
        exit(2);
    }
    return c->out[0];
}

static kn_tensor *ref(kn_op op, kn_tensor *a, kn_tensor *b, kn_tensor *c3)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    kn_tensor *in[3] = {a, b, c3};
    for (int i = 0; i < 3 && in[i]; i++) c.in[c.n_in++] = in[i];
    return ref_call(&c);
}

static kn_tensor *scalar(kn_dtype dt, double v)
{
    kn_tensor *t = tl_new(dt, 0, NULL);
    tl_set(t, 0, v);
    return t;
}

/* Tolerances against the eager reference, which rounds to the storage type
 * after every op while a fused kernel rounds once at the store. */
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

/* One TAP line: got against want, element by element; NaN only where
 * nan_ok and the reference is NaN too. abs_floor widens the absolute
 * tolerance where the kernel's rounding legitimately grows with its size
 * (a long f32 row summed in another order than the f64 reference). */
static void check_within(const kn_tensor *got, const kn_tensor *want, bool nan_ok, double abs_floor,
                         const char *name)
{
    double rel, abs_;
    tol_of(got->dtype, &rel, &abs_);
    if (abs_ < abs_floor) abs_ = abs_floor;
    int64_t n = tl_numel(got->ndim, got->shape), bad = -1;
    double g = 0, w = 0;
    bool same = got->dtype == want->dtype && tl_numel(want->ndim, want->shape) == n;
    for (int64_t i = 0; i < n && same && bad < 0; i++) {
        g = tl_get(got, i);
        w = tl_get(want, i);
        bool good = isnan(g) || isnan(w) ? nan_ok && isnan(g) && isnan(w)
                  : isinf(g) || isinf(w) ? g == w
                  : fabs(g - w) <= abs_ + rel * fabs(w);
        if (!good) bad = i;
    }
    if (!ok(same && bad < 0, "%s", name)) {
        if (!same) printf("#   got %s x%lld, want %s x%lld\n", kn_dtype_name(got->dtype), (long long)n,
                          kn_dtype_name(want->dtype), (long long)tl_numel(want->ndim, want->shape));
        else printf("#   element %lld of %lld: got %.9g, want %.9g\n", (long long)bad, (long long)n, g, w);
    }
}

static void check(const kn_tensor *got, const kn_tensor *want, bool nan_ok, const char *name)
{
    check_within(got, want, nan_ok, 0, name);
}

static void release(int n, kn_tensor **ts)
{
    for (int i = 0; i < n; i++) kn_tensor_release(ts[i]);
}

/* ---- pointwise ---- */

/* out = gelu(x * row + col) - s, in 2-D or 3-D, every tensor of dtype dt. */
static void test_broadcast(kn_dtype dt, int ndim)
{
    int64_t shape[3] = {3, 37, 129};
    int64_t *sh = ndim == 3 ? shape : shape + 1;
    int64_t rs[1] = {sh[ndim - 1]}, cs[2] = {sh[ndim - 2], 1};
    kn_tensor *x = tl_rand(dt, ndim, sh, TL_CONTIG, -2, 2, 0);
    kn_tensor *row = tl_rand(dt, 1, rs, TL_CONTIG, -2, 2, 0);
    kn_tensor *col = tl_rand(dt, 2, cs, TL_CONTIG, -2, 2, 0);
    kn_tensor *s = scalar(dt, tl_value(dt, -1, 1, 0));
    kn_tensor *out = tl_new(dt, ndim, sh);
    kn_kernel *k = kernel_new("k0_gelu_bcast", KN_KERNEL_POINTWISE, ndim, sh);
    int ax = arg_of(k, x, false, false), ar = arg_of(k, row, false, false);
    int ac = arg_of(k, col, false, false), as = arg_of(k, s, false, false);
    int ao = arg_of(k, out, true, false);
    int e = op2(k, KN_OP_MUL, ld(k, ax), ld(k, ar), dt);
    e = op2(k, KN_OP_ADD, e, ld(k, ac), dt);
    e = op1(k, KN_OP_GELU, e, dt);
    e = op2(k, KN_OP_SUB, e, ld(k, as), dt);
    store(k, ao, e, false);
    kn_tensor *ts[] = {x, row, col, s, out};
    char name[128];
    snprintf(name, sizeof name, "gelu(x * row + col) - scalar, %s, %d-D %s", kn_dtype_name(dt), ndim,
             tl_shape_str(ndim, sh));
    if (run(k, ts, name)) {
        kn_tensor *r1 = ref(KN_OP_MUL, x, row, NULL), *r2 = ref(KN_OP_ADD, r1, col, NULL);
        kn_tensor *r3 = ref(KN_OP_GELU, r2, NULL, NULL), *r4 = ref(KN_OP_SUB, r3, s, NULL);
        check(out, r4, false, name);
        kn_tensor *rs_[] = {r1, r2, r3, r4};
        release(4, rs_);
    }
    release(5, ts);
    free(k);
}

/* out = exp(x^T) + y with x^T a transposed view (strides {1, 37}). */
static void test_transposed(void)
{
    int64_t base_shape[2] = {129, 37}, sh[2] = {37, 129};
    kn_tensor *base = tl_rand(KN_F32, 2, base_shape, TL_CONTIG, -3, 3, 0), *xt = NULL;
    kn_view_transpose(base, 0, 1, &xt);
    kn_tensor *y = tl_rand(KN_F32, 2, sh, TL_CONTIG, -1, 1, 0), *out = tl_new(KN_F32, 2, sh);
    kn_kernel *k = kernel_new("k1_exp_add_t", KN_KERNEL_POINTWISE, 2, sh);
    int ax = arg_of(k, xt, false, false), ay = arg_of(k, y, false, false), ao = arg_of(k, out, true, false);
    int e = op2(k, KN_OP_ADD, op1(k, KN_OP_EXP, ld(k, ax), KN_F32), ld(k, ay), KN_F32);
    store(k, ao, e, false);
    kn_tensor *ts[] = {xt, y, out};
    ok(k->args[0].strides[0] == 1 && k->args[0].strides[1] == 37, "transposed arg has strides {1,37}");
    if (run(k, ts, "exp(x^T) + y")) {
        kn_tensor *r1 = ref(KN_OP_EXP, xt, NULL, NULL), *r2 = ref(KN_OP_ADD, r1, y, NULL);
        check(out, r2, false, "exp(x^T) + y over a transposed view, f32");
        kn_tensor_release(r1);
        kn_tensor_release(r2);
    }
    kn_tensor_release(base);
    release(3, ts);
    free(k);
}

/* c = a > b (i64 vs i32); out = where(c, a, b * 2) (i64); nc = !c (bool). */
static void test_int_bool(void)
{
    int64_t sh[2] = {19, 23}, bs[1] = {23};
    kn_tensor *a = tl_rand(KN_I64, 2, sh, TL_CONTIG, -50, 50, 0);
    kn_tensor *b = tl_rand(KN_I32, 1, bs, TL_CONTIG, -50, 50, 0);
    kn_tensor *two = scalar(KN_I32, 2);
    kn_tensor *out = tl_new(KN_I64, 2, sh), *nc = tl_new(KN_BOOL, 2, sh);
    kn_kernel *k = kernel_new("k2_where_i64", KN_KERNEL_POINTWISE, 2, sh);
    int aa = arg_of(k, a, false, false), ab = arg_of(k, b, false, false);
    int ao = arg_of(k, out, true, false), an = arg_of(k, nc, true, false);
    int la = ld(k, aa), lb = ld(k, ab);
    int c = op2(k, KN_OP_GT, la, lb, KN_BOOL);
    int b2 = op2(k, KN_OP_MUL, lb, cst(k, 2, KN_I32), KN_I32);
    store(k, ao, op3(k, KN_OP_WHERE, c, la, b2, KN_I64), false);
    store(k, an, op1(k, KN_OP_LOGICAL_NOT, c, KN_BOOL), false);
    kn_tensor *ts[] = {a, b, out, nc};
    if (run(k, ts, "i64/i32 where")) {
        kn_tensor *rc = ref(KN_OP_GT, a, b, NULL), *rb2 = ref(KN_OP_MUL, b, two, NULL);
        kn_tensor *rw = ref(KN_OP_WHERE, rc, a, rb2), *rn = ref(KN_OP_LOGICAL_NOT, rc, NULL, NULL);
        check(out, rw, false, "where(a > b, a, b * 2) over i64 and i32, exact");
        check(nc, rn, false, "logical_not(a > b) stored as bool, exact");
        kn_tensor *rs[] = {rc, rb2, rw, rn};
        release(4, rs);
    }
    release(4, ts);
    kn_tensor_release(two);
    free(k);
}

/* masked_fill(x, mask, -1e9) with the mask broadcast along rows. */
static void test_masked_fill(void)
{
    int64_t sh[2] = {11, 70}, ms[1] = {70};
    kn_tensor *x = tl_rand(KN_F32, 2, sh, TL_CONTIG, -1, 1, 0);
    kn_tensor *m = tl_rand(KN_BOOL, 1, ms, TL_CONTIG, 0, 1, 0), *out = tl_new(KN_F32, 2, sh);
    kn_kernel *k = kernel_new("k3_masked_fill", KN_KERNEL_POINTWISE, 2, sh);
    int ax = arg_of(k, x, false, false), am = arg_of(k, m, false, false), ao = arg_of(k, out, true, false);
    kn_kexpr e = {.kind = KN_KX_OP, .op = KN_OP_MASKED_FILL, .a = ld(k, ax), .b = ld(k, am), .c = -1,
                  .value = -1e9, .dtype = KN_F32};
    store(k, ao, add(k, e), false);
    kn_tensor *ts[] = {x, m, out};
    if (run(k, ts, "masked_fill")) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_MASKED_FILL);
        c.in[0] = x;
        c.in[1] = m;
        c.n_in = 2;
        c.a.value = -1e9;
        kn_tensor *r = ref_call(&c);
        check(out, r, false, "masked_fill(x, row mask, -1e9), f32");
        kn_tensor_release(r);
    }
    release(3, ts);
    free(k);
}

/* i = cast(x, i32) (saturating, truncating); y = cast(cast(x, bf16), f32) * 3. */
static void test_cast(void)
{
    int64_t sh[1] = {501};
    kn_tensor *x = tl_rand(KN_F32, 1, sh, TL_CONTIG, -3e9, 3e9, 0);
    for (int i = 0; i < 100; i++) tl_set(x, i, tl_value(KN_F32, -100, 100, 0)); /* small ones too */
    tl_set(x, 100, NAN);
    kn_tensor *oi = tl_new(KN_I32, 1, sh), *of = tl_new(KN_F32, 1, sh), *three = scalar(KN_F32, 3);
    kn_kernel *k = kernel_new("k4_casts", KN_KERNEL_POINTWISE, 1, sh);
    int ax = arg_of(k, x, false, false), ai = arg_of(k, oi, true, false), af = arg_of(k, of, true, false);
    int lx = ld(k, ax);
    store(k, ai, op1(k, KN_OP_CAST, lx, KN_I32), false);
    int hb = op1(k, KN_OP_CAST, lx, KN_BF16);
    int back = op1(k, KN_OP_CAST, hb, KN_F32);
    store(k, af, op2(k, KN_OP_MUL, back, cst(k, 3, KN_F32), KN_F32), false);
    kn_tensor *ts[] = {x, oi, of};
    if (run(k, ts, "casts")) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_CAST);
        c.in[c.n_in++] = x;
        c.a.dtype = KN_I32;
        kn_tensor *ri = ref_call(&c);
        kn_opcall_init(&c, KN_OP_CAST);
        c.in[c.n_in++] = x;
        c.a.dtype = KN_BF16;
        kn_tensor *rb = ref_call(&c);
        kn_tensor *rm = ref(KN_OP_MUL, rb, three, NULL);
        check(oi, ri, false, "cast f32 -> i32 truncates, saturates, NaN -> 0 (exact)");
        kn_tensor *rm32 = NULL;
        kn_opcall_init(&c, KN_OP_CAST);
        c.in[c.n_in++] = rm;
        c.a.dtype = KN_F32;
        rm32 = ref_call(&c);
        /* exact: bf16 * 3 is exact in f32, so rounding at the cast is visible */
        int64_t bad = -1;
        for (int64_t i = 0; i < sh[0] && bad < 0; i++)
            if (i != 100 && tl_get(of, i) != tl_get(rm32, i)) bad = i;
        if (!ok(bad < 0 && isnan(tl_get(of, 100)), "cast to bf16 rounds at the cast: cast(x, bf16) * 3 exact"))
            printf("#   element %lld: got %.9g want %.9g\n", (long long)bad, tl_get(of, bad), tl_get(rm32, bad));
        kn_tensor *rs[] = {ri, rb, rm, rm32};
        release(4, rs);
    }
    release(3, ts);
    kn_tensor_release(three);
    free(k);
}

/* Every fused op's result is its dtype's value (docs/dtypes.md), checked op
 * by op against eager: i32 a + a wraps before the cast to i64, bool b + b is
 * 1 (not 2) when cast to i32, f16 x * x overflows to inf before / 300, a bf16
 * product is rounded before - 1. */
static void test_dtype_chain(void)
{
    int64_t sh[1] = {257};
    kn_tensor *a = tl_rand(KN_I32, 1, sh, TL_CONTIG, -50000, 50000, 0);
    tl_set(a, 0, 2147483647.0);
    tl_set(a, 1, -2147483648.0);
    tl_set(a, 2, 1073741824.0);
    kn_tensor *b = tl_rand(KN_BOOL, 1, sh, TL_CONTIG, 0, 1, 0);
    kn_tensor *x = tl_rand(KN_F16, 1, sh, TL_CONTIG, -400, 400, 0);
    kn_tensor *oi = tl_new(KN_I64, 1, sh), *ob = tl_new(KN_I32, 1, sh);
    kn_tensor *oh = tl_new(KN_F32, 1, sh), *obf = tl_new(KN_F32, 1, sh);
    kn_tensor *c300 = scalar(KN_F16, 300), *one = scalar(KN_BF16, 1);
    kn_kernel *k = kernel_new("k5_dtype_chain", KN_KERNEL_POINTWISE, 1, sh);
    int aa = arg_of(k, a, false, false), ab = arg_of(k, b, false, false), ax = arg_of(k, x, false, false);
    int aoi = arg_of(k, oi, true, false), aob = arg_of(k, ob, true, false);
    int aoh = arg_of(k, oh, true, false), aobf = arg_of(k, obf, true, false);
    int la = ld(k, aa), lb = ld(k, ab), lx = ld(k, ax);
    store(k, aoi, op1(k, KN_OP_CAST, op2(k, KN_OP_ADD, la, la, KN_I32), KN_I64), false);
    store(k, aob, op1(k, KN_OP_CAST, op2(k, KN_OP_ADD, lb, lb, KN_BOOL), KN_I32), false);
    int h = op2(k, KN_OP_DIV, op2(k, KN_OP_MUL, lx, lx, KN_F16), cst(k, 300, KN_F16), KN_F16);
    store(k, aoh, op1(k, KN_OP_CAST, h, KN_F32), false);
    int hb = op1(k, KN_OP_CAST, lx, KN_BF16);
    int bq = op2(k, KN_OP_SUB, op2(k, KN_OP_MUL, hb, hb, KN_BF16), cst(k, 1, KN_BF16), KN_BF16);
    store(k, aobf, op1(k, KN_OP_CAST, bq, KN_F32), false);
    kn_tensor *ts[] = {a, b, x, oi, ob, oh, obf};
    if (run(k, ts, "dtype chain")) {
        kn_opcall c;
        kn_tensor *r_aa = ref(KN_OP_ADD, a, a, NULL), *r_bb = ref(KN_OP_ADD, b, b, NULL);
        kn_tensor *r_xx = ref(KN_OP_MUL, x, x, NULL);
        kn_tensor *r_h = ref(KN_OP_DIV, r_xx, c300, NULL);
        kn_opcall_init(&c, KN_OP_CAST);
        c.in[c.n_in++] = x;
        c.a.dtype = KN_BF16;
        kn_tensor *r_xb = ref_call(&c);
        kn_tensor *r_bm = ref(KN_OP_MUL, r_xb, r_xb, NULL);
        kn_tensor *r_bq = ref(KN_OP_SUB, r_bm, one, NULL);
        kn_tensor *want[4] = {r_aa, r_bb, r_h, r_bq};
        kn_dtype to[4] = {KN_I64, KN_I32, KN_F32, KN_F32};
        kn_tensor *got[4] = {oi, ob, oh, obf};
        const char *what[4] = {"i32 a + a wraps to 32 bits before the cast to i64 (exact)",
                               "bool b + b is 0 or 1 before the cast to i32 (exact)",
                               "f16 x * x rounds (inf past 65504) before / 300",
                               "bf16 x * x rounds before - 1"};
        for (int i = 0; i < 4; i++) {
            kn_opcall_init(&c, KN_OP_CAST);
            c.in[c.n_in++] = want[i];
            c.a.dtype = to[i];
            kn_tensor *w = ref_call(&c);
            check(got[i], w, false, what[i]);
            kn_tensor_release(w);
        }
        kn_tensor *rs[] = {r_aa, r_bb, r_xx, r_h, r_xb, r_bm, r_bq};
        release(7, rs);
    }
    release(7, ts);
    kn_tensor_release(c300);
    kn_tensor_release(one);
    free(k);
}

/* ---- row kernels ---- */

/* softmax (log = false) or log_softmax over the last dim of x [rows, n]. */
static void test_softmax(kn_dtype dt, bool log_form)
{
    int64_t sh[2] = {13, 300};
    kn_tensor *x = tl_rand(dt, 2, sh, TL_CONTIG, -8, 8, 0), *out = tl_new(dt, 2, sh);
    kn_kernel *k = kernel_new(log_form ? "k5_log_softmax" : "k5_softmax", KN_KERNEL_ROW, 2, sh);
    int ax = arg_of(k, x, false, false), ao = arg_of(k, out, true, false);
    int lx = ld(k, ax);
    stage(k, KN_OP_AMAX, lx);
    int sh0 = op2(k, KN_OP_SUB, lx, acc(k, 0, dt), dt);
    stage(k, KN_OP_SUM, op1(k, KN_OP_EXP, sh0, dt));
    int y = log_form ? op2(k, KN_OP_SUB, sh0, op1(k, KN_OP_LOG, acc(k, 1, dt), dt), dt)
                     : op2(k, KN_OP_DIV, op1(k, KN_OP_EXP, sh0, dt), acc(k, 1, dt), dt);
    store(k, ao, y, false);
    kn_tensor *ts[] = {x, out};
    char name[96];
    snprintf(name, sizeof name, "%s over rows, %s %s", log_form ? "log_softmax" : "softmax",
             kn_dtype_name(dt), tl_shape_str(2, sh));
    if (run(k, ts, name)) {
        kn_opcall c;
        kn_opcall_init(&c, log_form ? KN_OP_LOG_SOFTMAX : KN_OP_SOFTMAX);
        c.in[c.n_in++] = x;
        c.a.dim = 1;
        kn_tensor *r = ref_call(&c);
        check(out, r, false, name);
        kn_tensor_release(r);
    }
    release(2, ts);
    free(k);
}

/* layer_norm over the last dim with weight and bias (row-broadcast args). */
static void test_layer_norm(kn_dtype dt)
{
    int64_t sh[2] = {9, 200}, ws[1] = {200};
    double n = (double)sh[1], eps = 1e-5;
    kn_tensor *x = tl_rand(dt, 2, sh, TL_CONTIG, 3, 7, 0); /* a large mean: needs two passes */
    kn_tensor *w = tl_rand(dt, 1, ws, TL_CONTIG, 0.5, 1.5, 0), *b = tl_rand(dt, 1, ws, TL_CONTIG, -1, 1, 0);
    kn_tensor *out = tl_new(dt, 2, sh);
    kn_kernel *k = kernel_new("k6_layer_norm", KN_KERNEL_ROW, 2, sh);
    int ax = arg_of(k, x, false, false), aw = arg_of(k, w, false, false), ab = arg_of(k, b, false, false);
    int ao = arg_of(k, out, true, false);
    int lx = ld(k, ax);
    stage(k, KN_OP_SUM, lx);
    int mean = op2(k, KN_OP_MUL, acc(k, 0, dt), cst(k, 1 / n, dt), dt);
    int d = op2(k, KN_OP_SUB, lx, mean, dt);
    stage(k, KN_OP_SUM, op2(k, KN_OP_MUL, d, d, dt));
    int var = op2(k, KN_OP_MUL, acc(k, 1, dt), cst(k, 1 / n, dt), dt);
    int inv = op1(k, KN_OP_RSQRT, op2(k, KN_OP_ADD, var, cst(k, eps, dt), dt), dt);
    int y = op2(k, KN_OP_ADD, op2(k, KN_OP_MUL, op2(k, KN_OP_MUL, d, inv, dt), ld(k, aw), dt), ld(k, ab), dt);
    store(k, ao, y, false);
    ok(k->args[aw].strides[0] == 0 && k->args[aw].strides[1] == 1, "weight is loaded with strides {0,1}");
    kn_tensor *ts[] = {x, w, b, out};
    char name[96];
    snprintf(name, sizeof name, "layer_norm with weight and bias, %s %s", kn_dtype_name(dt), tl_shape_str(2, sh));
    if (run(k, ts, name)) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_LAYER_NORM);
        c.in[0] = x;
        c.in[1] = w;
        c.in[2] = b;
        c.n_in = 3;
        c.a.nshape = 1;
        c.a.shape[0] = sh[1];
        c.a.eps = eps;
        kn_tensor *r = ref_call(&c);
        check(out, r, false, name);
        kn_tensor_release(r);
    }
    release(4, ts);
    free(k);
}

/* Gathered arguments (an embedding table read through its index, as
 * index_select along dim 0 then a reshape into B x T rows): a pointwise
 * out[b, t, :] = W[I[b*T + t]] + pos[t, :], and a row kernel storing
 * (row - its mean) and the row's sum per row. The index holds 1 and V,
 * and one position holds 0 and one V + 5: those read rows 1 and V (a
 * gathered load clamps, never reading past the table). Reference: the
 * same arithmetic in f64 from the table, rounded once to dt. */
static void test_gathered(kn_dtype dt, int64_t D, bool row, bool from_end)
{
    const int64_t B = 2, T = 5, V = 37, N = B * T;
    int64_t wsh[2] = {V, D}, ish[1] = {N}, psh[2] = {T, D}, sp[3] = {B, T, D}, rsh[2] = {B, T};
    kn_tensor *w = tl_rand(dt, 2, wsh, TL_CONTIG, -2, 2, 0), *pos = tl_rand(dt, 2, psh, TL_CONTIG, -1, 1, 0);
    kn_tensor *ix = tl_new(KN_I64, 1, ish), *out = tl_new(dt, 3, sp), *sums = tl_new(KN_F32, 2, rsh);
    int64_t ids[10] = {1, V, 4, 0, 17, V + 5, 2, 2, 30, 9}, want_row[10];
    /* from the end (ONNX's Gather): 0-based, -1 the last row, -V the
     * first; -V - 3 and V + 2 clamp to the first and the last */
    int64_t signed_ids[10] = {0, -1, V - 1, -V, 17, V + 2, -V - 3, 2, -30, 9};
    for (int64_t n = 0; n < N; n++) {
        int64_t i = from_end ? signed_ids[n] : ids[n];
        tl_set_i64(ix, n, i);
        if (from_end) i = (i < 0 ? i + V : i) + 1;
        want_row[n] = i < 1 ? 0 : i > V ? V - 1 : i - 1;
    }
    char name[160];
    snprintf(name, sizeof name, "gathered rows of a %lldx%lld %s table%s, %s", (long long)V, (long long)D,
             kn_dtype_name(dt), from_end ? " by 0-based ids counting from the end" : "",
             row ? "a row kernel (sum, x - mean)" : "pointwise (+ pos)");
    kn_kernel *k = kernel_new(row ? "k9_gathered_rows" : "k9_gathered", row ? KN_KERNEL_ROW : KN_KERNEL_POINTWISE, 3, sp);
    kn_karg ia = {.dtype = KN_I64, .strides = {T, 1, 0}};
    int ai = -1, aw = -1;
    kn_kernel_add_arg(k, &ia, &ai);
    kn_karg wa = {.dtype = dt, .strides = {0, 0, 1}, .gather_by = ai + 1, .gather_stride = D, .gather_size = V,
                  .gather_from_end = from_end};
    kn_kernel_add_arg(k, &wa, &aw);
    int ap = row ? -1 : arg_of(k, pos, false, false), ao = arg_of(k, out, true, false);
    int as = row ? arg_of(k, sums, true, true) : -1;
    int lw = ld(k, aw);
    if (row) {
        stage(k, KN_OP_SUM, lw);
        int mean = op2(k, KN_OP_MUL, acc(k, 0, KN_F32), cst(k, 1.0 / (double)D, KN_F32), KN_F32);
        store(k, ao, op1(k, KN_OP_CAST, op2(k, KN_OP_SUB, op1(k, KN_OP_CAST, lw, KN_F32), mean, KN_F32), dt), false);
        store(k, as, acc(k, 0, KN_F32), true);
    } else {
        store(k, ao, op2(k, KN_OP_ADD, lw, ld(k, ap), dt), false);
    }
    kn_tensor *ts[] = {ix, w, row ? out : pos, row ? sums : out}; /* in the order of the arguments */
    if (run(k, ts, name)) {
        kn_tensor *want = tl_new(dt, 3, sp), *want_sums = tl_new(KN_F32, 2, rsh);
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t d = 0; d < D; d++) s += tl_get(w, want_row[n] * D + d);
            tl_set(want_sums, n, s);
            for (int64_t d = 0; d < D; d++) {
                double v = tl_get(w, want_row[n] * D + d);
                tl_set(want, n * D + d, row ? v - s / (double)D : v + tl_get(pos, (n % T) * D + d));
            }
        }
        check(out, want, false, name);
        if (row) check_within(sums, want_sums, false, 1e-4, "its per-row sums");
        kn_tensor_release(want);
        kn_tensor_release(want_sums);
    }
    release(4, ts);
    kn_tensor_release(row ? pos : sums);
    free(k);
}

/* The body both row tests below share: out = h - mean(h) over the row,
 * h an expression of dtype dt; and its reference, from want_h (h rounded
 * to dt) for rows of D. */
static void store_row_minus_mean(kn_kernel *k, int h, int ao, int64_t D, kn_dtype dt)
{
    int hf = op1(k, KN_OP_CAST, h, KN_F32);
    stage(k, KN_OP_SUM, hf);
    int mean = op2(k, KN_OP_MUL, acc(k, 0, KN_F32), cst(k, 1.0 / (double)D, KN_F32), KN_F32);
    store(k, ao, op1(k, KN_OP_CAST, op2(k, KN_OP_SUB, hf, mean, KN_F32), dt), false);
}

static void want_row_minus_mean(const kn_tensor *want_h, kn_tensor *want, int64_t rows, int64_t D)
{
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t d = 0; d < D; d++) s += tl_get(want_h, r * D + d);
        for (int64_t d = 0; d < D; d++) tl_set(want, r * D + d, tl_get(want_h, r * D + d) - s / (double)D);
    }
}

/* A row kernel that also stores a value it computes on the way (the
 * residual sum before a layer norm, kn_fusion.stored): h = x + a, stored
 * element by element, and out = h - mean(h) per row. The sum of two rows
 * of one dtype is what a row in registers keeps in place of its inputs
 * (kn_kir_row.c: row_fold), so the store of h reads those registers. */
static void test_stored_row(kn_dtype dt, int64_t D)
{
    int64_t sh[3] = {3, 7, D};
    kn_tensor *x = tl_rand(dt, 3, sh, TL_CONTIG, -2, 2, 0), *a = tl_rand(dt, 3, sh, TL_CONTIG, -2, 2, 0);
    kn_tensor *h = tl_new(dt, 3, sh), *out = tl_new(dt, 3, sh);
    char name[96];
    snprintf(name, sizeof name, "a row kernel storing its row's sum x + a too, %s %s", kn_dtype_name(dt),
             tl_shape_str(3, sh));
    kn_kernel *k = kernel_new("k9_stored_row", KN_KERNEL_ROW, 3, sh);
    int ax = arg_of(k, x, false, false), aa = arg_of(k, a, false, false);
    int ah = arg_of(k, h, true, false), ao = arg_of(k, out, true, false);
    int hs = op2(k, KN_OP_ADD, ld(k, ax), ld(k, aa), dt);
    store_row_minus_mean(k, hs, ao, D, dt);
    store(k, ah, hs, false);
    kn_tensor *ts[] = {x, a, h, out};
    if (run(k, ts, name)) {
        kn_tensor *want_h = tl_new(dt, 3, sh), *want = tl_new(dt, 3, sh);
        int64_t rows = sh[0] * sh[1];
        for (int64_t i = 0; i < rows * D; i++) tl_set(want_h, i, tl_get(x, i) + tl_get(a, i)); /* rounded to dt */
        want_row_minus_mean(want_h, want, rows, D);
        check(h, want_h, false, name);
        check(out, want, false, "and its row minus the mean");
        kn_tensor_release(want_h);
        kn_tensor_release(want);
    }
    release(4, ts);
    free(k);
}

/* A row kernel whose row is a chain of elementwise ops, as a layer norm
 * after a bias and a residual add: h = (x first b) second r, or
 * r second (x first b) (the chain as the second operand), with b one row
 * broadcast over all, and out = h - mean(h) per row. A row held in registers folds the whole
 * chain into x's registers (kn_kir_row.c: row_fold) and reads them in each
 * loop; in bf16 and f16 it runs on packed pairs (kn_pairw_*). Each op is
 * rounded to dt, as eager rounds each op. */
static void test_folded_chain(kn_dtype dt, int64_t D, kn_op first, kn_op second, bool chain_second)
{
    int64_t sh[3] = {3, 5, D}, bsh[1] = {D};
    kn_tensor *x = tl_rand(dt, 3, sh, TL_CONTIG, -2, 2, 0), *r = tl_rand(dt, 3, sh, TL_CONTIG, -2, 2, 0);
    kn_tensor *b = tl_rand(dt, 1, bsh, TL_CONTIG, -1, 1, 0), *out = tl_new(dt, 3, sh);
    char name[128];
    if (chain_second)
        snprintf(name, sizeof name, "a row of r %s (x %s b) folded, minus its mean, %s %s", kn_op_name(second),
                 kn_op_name(first), kn_dtype_name(dt), tl_shape_str(3, sh));
    else
        snprintf(name, sizeof name, "a row of (x %s b) %s r folded, minus its mean, %s %s", kn_op_name(first),
                 kn_op_name(second), kn_dtype_name(dt), tl_shape_str(3, sh));
    kn_kernel *k = kernel_new("k9_folded_chain", KN_KERNEL_ROW, 3, sh);
    int ax = arg_of(k, x, false, false), ab = arg_of(k, b, false, false), ar = arg_of(k, r, false, false);
    int ao = arg_of(k, out, true, false);
    int h1 = op2(k, first, ld(k, ax), ld(k, ab), dt);
    int lr = ld(k, ar);
    int h = chain_second ? op2(k, second, lr, h1, dt) : op2(k, second, h1, lr, dt);
    store_row_minus_mean(k, h, ao, D, dt);
    kn_tensor *ts[] = {x, b, r, out};
    if (run(k, ts, name)) {
        kn_tensor *want_h = tl_new(dt, 3, sh), *want = tl_new(dt, 3, sh);
        int64_t rows = sh[0] * sh[1];
        for (int64_t i = 0; i < rows * D; i++) {
            double xv = tl_get(x, i), bv = tl_get(b, i % D), rv = tl_get(r, i);
            tl_set(want_h, i, first == KN_OP_MUL ? xv * bv : xv + bv); /* rounded to dt */
            double hv = tl_get(want_h, i);
            tl_set(want_h, i, second == KN_OP_SUB ? (chain_second ? rv - hv : hv - rv) : hv + rv);
        }
        want_row_minus_mean(want_h, want, rows, D);
        check(out, want, false, name);
        kn_tensor_release(want_h);
        kn_tensor_release(want);
    }
    release(4, ts);
    free(k);
}

/* out[r] = sum of x[r, :] and mx[r] = amax of x[r, :] (per-row stores), one
 * row holding a NaN (amax keeps it). */
static void test_row_reduce(void)
{
    int64_t sh[3] = {4, 17, 333}, os[2] = {4, 17};
    kn_tensor *x = tl_rand(KN_F32, 3, sh, TL_CONTIG, -5, 5, 0);
    tl_set(x, 5 * 333 + 100, NAN); /* row 5 */
    kn_tensor *sum = tl_new(KN_F32, 2, os), *mx = tl_new(KN_F32, 2, os), *mn = tl_new(KN_F32, 2, os);
    kn_kernel *k = kernel_new("k7_sum_amax_amin", KN_KERNEL_ROW, 3, sh);
    int ax = arg_of(k, x, false, false);
    int as = arg_of(k, sum, true, true), am = arg_of(k, mx, true, true), an = arg_of(k, mn, true, true);
    int lx = ld(k, ax);
    stage(k, KN_OP_SUM, lx);
    stage(k, KN_OP_AMAX, lx);
    stage(k, KN_OP_AMIN, lx);
    store(k, as, acc(k, 0, KN_F32), true);
    store(k, am, acc(k, 1, KN_F32), true);
    store(k, an, acc(k, 2, KN_F32), true);
    kn_tensor *ts[] = {x, sum, mx, mn};
    if (run(k, ts, "row sum / amax / amin")) {
        kn_tensor *r[3];
        kn_op ops[3] = {KN_OP_SUM, KN_OP_AMAX, KN_OP_AMIN};
        for (int i = 0; i < 3; i++) {
            kn_opcall c;
            kn_opcall_init(&c, ops[i]);
            c.in[c.n_in++] = x;
            c.a.ndims = 1;
            c.a.dims[0] = 2;
            r[i] = ref_call(&c);
        }
        check(sum, r[0], true, "per-row sum of a 3-D tensor (NaN row stays NaN)");
        check(mx, r[1], true, "per-row amax (NaN propagates)");
        check(mn, r[2], true, "per-row amin (NaN propagates)");
        ok(isnan(tl_get(mx, 5)) && isnan(tl_get(mn, 5)) && !isnan(tl_get(mx, 4)) && !isnan(tl_get(mx, 6)),
           "only the row with the NaN is NaN");
        release(3, r);
    }
    release(4, ts);
    free(k);
}

/* Per-row sums over more rows than one grid takes: 600,000 rows of 3, a
 * warp a row, are 75,000 blocks of eight rows, past KN_KIR_MAX_GRID, so
 * the CUDA kernel loops over rows; by default 8 lanes share a row and a
 * block takes 32 rows: 18,750 blocks, a warp for every 4 rows, no loop.
 * 4,096 rows of 512 take a warp each and no loop. */
static void test_many_rows(void)
{
    int64_t sh[2] = {600000, 3}, os[1] = {600000};
    kn_tensor *x = tl_rand(KN_F32, 2, sh, TL_CONTIG, -5, 5, 0), *sum = tl_new(KN_F32, 1, os);
    kn_kernel *k = kernel_new("k9_many_rows", KN_KERNEL_ROW, 2, sh);
    int ax = arg_of(k, x, false, false), as = arg_of(k, sum, true, true);
    stage(k, KN_OP_SUM, ld(k, ax));
    store(k, as, acc(k, 0, KN_F32), true);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_SUM);
    c.in[c.n_in++] = x;
    c.a.ndims = 1;
    c.a.dims[0] = 1;
    kn_tensor *want = ref_call(&c);
    for (int lanes = 32; lanes >= 0; lanes -= 32) {
        k->cfg.lanes = lanes;
        char *src = NULL;
        bool rendered = kn_kernel_render(k, KN_TARGET_CUDA, &src) == KN_OK && src;
        if (lanes == 32)
            ok(rendered && strstr(src, "threadIdx.x & 31u") && strstr(src, "row += (kn_i64)gridDim.x * rpb"),
               "600000 rows, 32 lanes a row: the CUDA kernel loops over rows (its grid is capped)");
        else
            ok(rendered && kn_kernel_row_lanes(k) == 8 && strstr(src, "threadIdx.x & 7u") &&
                   strstr(src, "if (row >= rows) return;") && !strstr(src, "row += "),
               "600000 rows of 3 by default: 8 lanes a row, no loop");
        free(src);
        char name[96];
        snprintf(name, sizeof name, "row sum of 600000 rows, lanes=%d", lanes);
        memset(kn_tensor_data(sum), 0, (size_t)sum->storage->nbytes);
        if (run(k, (kn_tensor *[]){x, sum}, name)) check(sum, want, true, name);
    }
    kn_tensor_release(want);
    release(2, (kn_tensor *[]){x, sum});
    free(k);

    int64_t fits[2] = {4096, 512}, fits_out[1] = {4096};
    kn_tensor *xf = tl_rand(KN_F32, 2, fits, TL_CONTIG, -1, 1, 0), *sf = tl_new(KN_F32, 1, fits_out);
    kn_kernel *kf = kernel_new("k9_fits", KN_KERNEL_ROW, 2, fits);
    int fx = arg_of(kf, xf, false, false), fs = arg_of(kf, sf, true, true);
    stage(kf, KN_OP_SUM, ld(kf, fx));
    store(kf, fs, acc(kf, 0, KN_F32), true);
    char *src = NULL;
    ok(kn_kernel_render(kf, KN_TARGET_CUDA, &src) == KN_OK && src && strstr(src, "threadIdx.x & 31u") &&
           strstr(src, "if (row >= rows) return;") && !strstr(src, "row += "),
       "4096 rows of 512: a warp a row, no loop");
    free(src);
    release(2, (kn_tensor *[]){xf, sf});
    free(kf);
}

/* tril(x, diagonal) as where(index(col) - index(row) <= diagonal, x, 0). */
static void test_tril(int64_t diagonal)
{
    int64_t sh[2] = {7, 9};
    kn_tensor *x = tl_rand(KN_F32, 2, sh, TL_CONTIG, -1, 1, 0), *out = tl_new(KN_F32, 2, sh);
    kn_kernel *k = kernel_new("k8_tril", KN_KERNEL_POINTWISE, 2, sh);
    int ax = arg_of(k, x, false, false), ao = arg_of(k, out, true, false);
    int diff = op2(k, KN_OP_SUB, idx(k, 1), idx(k, 0), KN_I64);
    int keep = op2(k, KN_OP_LE, diff, cst(k, (double)diagonal, KN_I64), KN_BOOL);
    store(k, ao, op3(k, KN_OP_WHERE, keep, ld(k, ax), cst(k, 0, KN_F32), KN_F32), false);
    kn_tensor *ts[] = {x, out};
    char name[64];
    snprintf(name, sizeof name, "tril(x, %lld) from KX_INDEX", (long long)diagonal);
    if (run(k, ts, name)) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_TRIL);
        c.in[c.n_in++] = x;
        c.a.diagonal = diagonal;
        kn_tensor *r = ref_call(&c);
        check(out, r, false, name);
        kn_tensor_release(r);
    }
    release(2, ts);
    free(k);
}

/* ---- program, dump, errors ---- */

static void test_program_and_dump(void)
{
    int64_t sh[1] = {10};
    kn_kprogram p = {.n_kernels = 3, .kernels = calloc(3, sizeof(kn_kernel))};
    const char *names[2] = {"k0_first", "k2_second"};
    kn_tensor *x = tl_rand(KN_F32, 1, sh, TL_CONTIG, -1, 1, 0), *o[2] = {tl_new(KN_F32, 1, sh), tl_new(KN_F32, 1, sh)};
    for (int i = 0; i < 2; i++) {
        kn_kernel *k = &p.kernels[i * 2];
        snprintf(k->name, sizeof k->name, "%s", names[i]);
        k->kind = KN_KERNEL_POINTWISE;
        k->ndim = 1;
        k->shape[0] = sh[0];
        int ax = arg_of(k, x, false, false), ao = arg_of(k, o[i], true, false);
        int lx = ld(k, ax);
        store(k, ao, op2(k, KN_OP_MUL, lx, cst(k, i + 2, KN_F32), KN_F32), false);
    }
    snprintf(p.kernels[1].name, sizeof p.kernels[1].name, "k1_matmul");
    p.kernels[1].kind = KN_KERNEL_LIBRARY; /* no epilogue: no source */
    char *src = NULL;
    kn_status st;
#ifndef KIR_CUDA
    kn_jit_lib *lib = NULL;
    st = kn_kprogram_render(&p, KN_TARGET_C, &src);
    if (st == KN_OK) st = kn_jit_compile(src, cache_dir, &lib);
    ok(st == KN_OK, "a program of two generated kernels and a library kernel renders and compiles");
    if (st != KN_OK) printf("#   %s\n", kn_last_error());
    if (lib) {
        for (int i = 0; i < 2; i++) {
            kfn f = (kfn)kn_jit_symbol(lib, names[i]);
            char *bufs[2] = {kn_tensor_data(x), kn_tensor_data(o[i])};
            if (f) f(bufs, sh);
            bool good = f != NULL;
            for (int j = 0; j < 10 && good; j++) good = tl_get(o[i], j) == (float)(tl_get(x, j) * (i + 2));
            ok(good, "program kernel %s computes x * %d", names[i], i + 2);
        }
        ok(kn_jit_symbol(lib, "k1_matmul") == NULL, "library kernels are not rendered");
    }
    kn_jit_release(lib);
#else
    char *img = NULL;
    size_t size = 0;
    st = kn_kprogram_render(&p, KN_TARGET_CUDA, &src);
    if (st == KN_OK) st = kn_nvrtc_compile(src, "sm_90", &img, &size, NULL);
    ok(st == KN_OK && size > 0, "a CUDA program of two kernels compiles as one NVRTC unit");
    if (st != KN_OK) printf("#   %s\n", kn_last_error());
    const char *first = src ? strstr(src, "typedef struct kn_kargs") : NULL;
    ok(first && !strstr(first + 1, "typedef struct kn_kargs"), "one prelude per program");
    ok(src && strstr(src, "void __launch_bounds__(256) k0_first(kn_kargs ka)") &&
           strstr(src, "k2_second(kn_kargs ka)") && !strstr(src, "k1_matmul"),
       "both kernels, extern \"C\", and no library kernel");
    free(img);
    st = kn_nvrtc_compile("extern \"C\" __global__ void f(int *p) { p[0] = undefined_name; }", "sm_90",
                          &img, &size, NULL);
    ok(st == KN_ERR_UNSUPPORTED && img == NULL, "an NVRTC compile error is KN_ERR_UNSUPPORTED");
    like(kn_last_error(), "undefined_name", "with the program log");
    st = kn_nvrtc_compile("extern \"C\" __global__ void g(int *p) { p[0] = 1; }", "compute_90", &img, &size, NULL);
    ok(st == KN_OK && img && strstr(img, ".entry g") != NULL, "compute_90 gives PTX");
    free(img);
#endif
    free(src);

    char *text = NULL;
    kn_kernel *k = &p.kernels[0];
    ok(kn_kernel_dump(k, &text) == KN_OK, "dump succeeds");
    like(text, "kernel k0_first: pointwise, shape {10}", "dump names the kernel, kind and shape");
    like(text, "e2 = mul(e0, e1) : f32", "dump shows expressions");
    like(text, "store arg1 = e2", "dump shows stores");
    free(text);

    /* expression overflow */
    kn_kernel *big = kernel_new("k3_big", KN_KERNEL_POINTWISE, 1, sh);
    kn_kexpr e = {.kind = KN_KX_CONST, .value = 1, .a = -1, .b = -1, .c = -1, .dtype = KN_F32};
    int at = -1;
    for (int i = 0; i < KN_KIR_MAX_EXPRS; i++) kn_kernel_add_expr(big, &e, &at);
    st = kn_kernel_add_expr(big, &e, &at);
    ok(st == KN_ERR_ARG && at == KN_KIR_MAX_EXPRS - 1, "the 257th expression is refused");
    is_str(kn_last_error(), "kernel k3_big: more than 256 expressions", "overflow message");
    kn_karg a = {.dtype = KN_F32};
    for (int i = 0; i < KN_KIR_MAX_ARGS; i++) kn_kernel_add_arg(big, &a, &at);
    ok(kn_kernel_add_arg(big, &a, &at) == KN_ERR_ARG, "the 17th argument is refused");
    is_str(kn_last_error(), "kernel k3_big: more than 16 arguments", "argument overflow message");

    /* a bad operand reference is an error, not bad code */
    kn_kernel *bad = kernel_new("k4_bad", KN_KERNEL_POINTWISE, 1, sh);
    arg_of(bad, x, true, false);
    int c0 = cst(bad, 1, KN_F32);
    store(bad, 0, op2(bad, KN_OP_ADD, c0, 7, KN_F32), false);
    src = NULL;
    ok(kn_kernel_render(bad, KN_TARGET_C, &src) == KN_ERR_ARG && src == NULL, "an operand after its use is refused");
    like(kn_last_error(), "kernel k4_bad: e1 (add) operand 1 is e7", "its message");
    kn_kprogram_free(&p);
    ok(p.kernels == NULL && p.n_kernels == 0, "kprogram_free clears");
    free(big);
    free(bad);
    kn_tensor_release(x);
    release(2, o);
}

static void rm_cache(void)
{
    DIR *d = opendir(cache_dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.' && (!de->d_name[1] || de->d_name[1] == '.')) continue;
            char p[600];
            snprintf(p, sizeof p, "%s/%s", cache_dir, de->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(cache_dir);
}

/* ---- autotuner configurations ---- */

/* Every configuration the autotuner would measure computes what the
 * default does: a transposed pointwise kernel (tiles on C, elements per
 * thread and blocks on CUDA), softmax over short rows and a sum over long
 * ones (one warp or one block per row, each block size). */
static void test_configs(void)
{
#ifdef KIR_CUDA
    const kn_render_target *tgt = KN_TARGET_CUDA;
#else
    const kn_render_target *tgt = KN_TARGET_C;
#endif
    int64_t bsh[2] = {129, 37}, sh[2] = {37, 129};
    kn_tensor *base = tl_rand(KN_F32, 2, bsh, TL_CONTIG, -3, 3, 0), *xt = NULL;
    kn_view_transpose(base, 0, 1, &xt);
    kn_tensor *y = tl_rand(KN_F32, 2, sh, TL_CONTIG, -1, 1, 0), *out = tl_new(KN_F32, 2, sh);
    kn_kernel *k = kernel_new("k7_cfg_pointwise", KN_KERNEL_POINTWISE, 2, sh);
    int ax = arg_of(k, xt, false, false), ay = arg_of(k, y, false, false), ao = arg_of(k, out, true, false);
    store(k, ao, op2(k, KN_OP_MUL, op1(k, KN_OP_EXP, ld(k, ax), KN_F32), ld(k, ay), KN_F32), false);
    kn_tensor *r1 = ref(KN_OP_EXP, xt, NULL, NULL), *want = ref(KN_OP_MUL, r1, y, NULL);
    kn_kconfig cfgs[16];
    int n = kn_kconfig_candidates(k, tgt, cfgs, 16);
    ok(n > 4, "a pointwise kernel has %d configurations to measure", n);
    for (int i = 0; i < n; i++) {
        char text[64], name[160];
        kn_kconfig_text(&cfgs[i], text, sizeof text);
        kn_kconfig back;
        ok(kn_kconfig_parse(text, &back) == KN_OK && memcmp(&back, &cfgs[i], sizeof back) == 0,
           "configuration '%s' reads back from its text", text);
        k->cfg = cfgs[i];
        memset(kn_tensor_data(out), 0, (size_t)out->storage->nbytes);
        snprintf(name, sizeof name, "exp(x^T) * y with %s", text);
        if (run(k, (kn_tensor *[]){xt, y, out}, name)) check(out, want, false, name);
    }
    kn_tensor_release(r1);
    kn_tensor_release(want);
    kn_tensor_release(base);
    release(3, (kn_tensor *[]){xt, y, out});
    free(k);

    /* flat and contiguous (vector loads on CUDA): out = a * b + c, a read at
     * an offset of 0 or 1 element (a misaligned view takes the scalar loop) */
    const kn_dtype fdt[2] = {KN_F32, KN_BF16};
    for (int di = 0; di < 2; di++)
        for (int off = 0; off < 2; off++) {
            int64_t n1[1] = {1000}, nb[1] = {1001};
            kn_tensor *base1 = tl_rand(fdt[di], 1, nb, TL_CONTIG, -2, 2, 0), *a1 = NULL;
            kn_view_slice(base1, 0, off, off + 1000, 1, &a1);
            kn_tensor *b1 = tl_rand(fdt[di], 1, n1, TL_CONTIG, -2, 2, 0);
            kn_tensor *c1 = scalar(fdt[di], 0.5), *o1 = tl_new(fdt[di], 1, n1);
            kn_kernel *kf = kernel_new("k9_cfg_flat", KN_KERNEL_POINTWISE, 1, n1);
            int xa = arg_of(kf, a1, false, false), xb = arg_of(kf, b1, false, false);
            int xc = arg_of(kf, c1, false, false), xo = arg_of(kf, o1, true, false);
            store(kf, xo, op2(kf, KN_OP_ADD, op2(kf, KN_OP_MUL, ld(kf, xa), ld(kf, xb), fdt[di]), ld(kf, xc), fdt[di]),
                  false);
            kn_tensor *m1 = ref(KN_OP_MUL, a1, b1, NULL), *w1 = ref(KN_OP_ADD, m1, c1, NULL);
            n = kn_kconfig_candidates(kf, tgt, cfgs, 16);
            int vecs = 0;
            for (int i = 0; i < n; i++) {
                char text[64], name[160];
                kn_kconfig_text(&cfgs[i], text, sizeof text);
                vecs += cfgs[i].vec > 0;
                kf->cfg = cfgs[i];
                memset(kn_tensor_data(o1), 0, (size_t)o1->storage->nbytes);
                snprintf(name, sizeof name, "a * b + c, %s, flat 1000, a at offset %d, with %s", kn_dtype_name(fdt[di]),
                         off, text);
                if (run(kf, (kn_tensor *[]){a1, b1, c1, o1}, name)) check(o1, w1, false, name);
            }
            ok(vecs >= 2, "a flat contiguous %s kernel has %d vector-width candidates", kn_dtype_name(fdt[di]), vecs);
            release(2, (kn_tensor *[]){m1, w1});
            release(5, (kn_tensor *[]){base1, a1, b1, c1, o1});
            free(kf);
        }

    /* 2-D with a row-broadcast bias (vector loads of x and the bias's row,
     * per row): out = gelu(x + bias), bf16, rows of 96 */
    {
        int64_t sh2[2] = {7, 96}, bs2[1] = {96};
        kn_tensor *x2 = tl_rand(KN_BF16, 2, sh2, TL_CONTIG, -2, 2, 0), *b2 = tl_rand(KN_BF16, 1, bs2, TL_CONTIG, -1, 1, 0);
        kn_tensor *o2 = tl_new(KN_BF16, 2, sh2);
        kn_kernel *kb = kernel_new("k10_cfg_bias_gelu", KN_KERNEL_POINTWISE, 2, sh2);
        int xa = arg_of(kb, x2, false, false), xb = arg_of(kb, b2, false, false), xo = arg_of(kb, o2, true, false);
        store(kb, xo, op1(kb, KN_OP_GELU, op2(kb, KN_OP_ADD, ld(kb, xa), ld(kb, xb), KN_BF16), KN_BF16), false);
        kn_tensor *r2a = ref(KN_OP_ADD, x2, b2, NULL), *r2 = ref(KN_OP_GELU, r2a, NULL, NULL);
        n = kn_kconfig_candidates(kb, tgt, cfgs, 16);
        int vecs = 0;
        for (int i = 0; i < n; i++) {
            char text[64], name[160];
            kn_kconfig_text(&cfgs[i], text, sizeof text);
            vecs += cfgs[i].vec > 0;
            kb->cfg = cfgs[i];
            memset(kn_tensor_data(o2), 0, (size_t)o2->storage->nbytes);
            snprintf(name, sizeof name, "gelu(x + bias) bf16 7x96 with %s", text);
            if (run(kb, (kn_tensor *[]){x2, b2, o2}, name)) check(o2, r2, false, name);
        }
        ok(vecs >= 2, "a row-broadcast kernel has %d vector-width candidates", vecs);
        release(5, (kn_tensor *[]){x2, b2, o2, r2a, r2});
        free(kb);
    }

    /* rows: softmax over 300 (short rows) and a sum over 5000 (long rows) */
    const int64_t lens[2] = {300, 5000};
    for (int li = 0; li < 2; li++) {
        int64_t rsh[2] = {11, lens[li]}, osh[1] = {11};
        kn_tensor *x = tl_rand(KN_F32, 2, rsh, TL_CONTIG, -4, 4, 0);
        kn_tensor *o = li ? tl_new(KN_F32, 1, osh) : tl_new(KN_F32, 2, rsh);
        kn_kernel *kr = kernel_new(li ? "k8_cfg_rowsum" : "k8_cfg_softmax", KN_KERNEL_ROW, 2, rsh);
        int a = arg_of(kr, x, false, false), b = arg_of(kr, o, true, li == 1);
        int lx = ld(kr, a);
        kn_tensor *r;
        kn_opcall c;
        if (li == 0) {
            stage(kr, KN_OP_AMAX, lx);
            int d = op2(kr, KN_OP_SUB, lx, acc(kr, 0, KN_F32), KN_F32);
            stage(kr, KN_OP_SUM, op1(kr, KN_OP_EXP, d, KN_F32));
            store(kr, b, op2(kr, KN_OP_DIV, op1(kr, KN_OP_EXP, d, KN_F32), acc(kr, 1, KN_F32), KN_F32), false);
            kn_opcall_init(&c, KN_OP_SOFTMAX);
            c.a.dim = 1;
        } else {
            stage(kr, KN_OP_SUM, lx);
            store(kr, b, acc(kr, 0, KN_F32), true);
            kn_opcall_init(&c, KN_OP_SUM);
            c.a.dims[0] = 1;
            c.a.ndims = 1;
        }
        c.in[c.n_in++] = x;
        r = ref_call(&c);
        n = kn_kconfig_candidates(kr, tgt, cfgs, 16);
        ok(n > 2, "%s has %d configurations to measure", kr->name, n);
        for (int i = 0; i < n; i++) {
            char text[64], name[160];
            kn_kconfig_text(&cfgs[i], text, sizeof text);
            kr->cfg = cfgs[i];
            memset(kn_tensor_data(o), 0, (size_t)o->storage->nbytes);
            snprintf(name, sizeof name, "%s over rows of %lld with %s", li ? "sum" : "softmax", (long long)lens[li],
                     text);
            /* a sum of 5000 values in [-4, 4] (|x| summing to ~1e4) in f32 on
             * the GPU, in block order: its rounding error is ~1e-5 to 1e-4,
             * above the default f32 tolerance when the row sum cancels to
             * ~1 (seed 7335906: off by 3.2e-5); 1e-3 still catches a lost
             * or doubled element */
            if (run(kr, (kn_tensor *[]){x, o}, name)) check_within(o, r, false, li ? 1e-3 : 0, name);
        }
        kn_tensor_release(r);
        release(2, (kn_tensor *[]){x, o});
        free(kr);
    }
    kn_kconfig bad;
    ok(kn_kconfig_parse("block=100", &bad) == KN_ERR_ARG && strstr(kn_last_error(), "power of two"),
       "a block size that is no power of two is refused: %s", kn_last_error());
    ok(kn_kconfig_parse("warp=2", &bad) == KN_ERR_ARG && strstr(kn_last_error(), "'warp'"),
       "an unknown knob is refused by name: %s", kn_last_error());
}

/* The vector and register layouts (the CUDA defaults) on awkward sizes and
 * views, in the default configuration and the scalar one (vec=1), against
 * the reference: pointwise x * y + bias (bias broadcast over the rows) in
 * every numeric dtype and not(x) in bool, with the inner dim a multiple of
 * every vector width (48) or of none (23) and x a view at an element
 * offset of 0 or 1 (1: misaligned, the scalar loop at run time); softmax
 * and layer_norm over rows of 1, 7, 256, 1000 (a warp per row, the row in
 * registers), 4096 (a block per row, the row in registers) and 100000
 * elements (a block per row reading memory), f32 and bf16, the 256 case
 * also at a misaligned row start; and a residual layer_norm(x + y) (the
 * register path keeps x + y in x's registers) over the same rows. */
static kn_tensor *offset_view(kn_dtype dt, int ndim, const int64_t *sh, int off, double lo, double hi,
                              kn_tensor **base)
{
    int64_t n = tl_numel(ndim, sh), nb[1] = {n + 1};
    *base = tl_rand(dt, 1, nb, TL_CONTIG, lo, hi, 0);
    kn_tensor *flat = NULL, *v = NULL;
    kn_view_slice(*base, 0, off, off + n, 1, &flat);
    kn_view_reshape(flat, ndim, sh, &v);
    kn_tensor_release(flat);
    return v;
}

static void test_vector_layouts(void)
{
    static const char *const cfgs[] = {"default", "vec=1"};
    const kn_dtype dts[] = {KN_F32, KN_BF16, KN_F16, KN_F64, KN_I64, KN_I32, KN_BOOL};
    for (size_t di = 0; di < sizeof dts / sizeof *dts; di++)
        for (int inner = 48; inner >= 23; inner -= 25)
            for (int off = 0; off < 2; off++) {
                kn_dtype dt = dts[di];
                int64_t sh[2] = {5, inner}, bs[1] = {inner};
                kn_tensor *base = NULL, *x = offset_view(dt, 2, sh, off, -3, 3, &base);
                kn_tensor *y = tl_rand(dt, 2, sh, TL_CONTIG, -3, 3, 0), *b = tl_rand(dt, 1, bs, TL_CONTIG, -3, 3, 0);
                kn_tensor *out = tl_new(dt, 2, sh), *want = NULL;
                kn_kernel *k = kernel_new("k11_vec_layout", KN_KERNEL_POINTWISE, 2, sh);
                int ax = arg_of(k, x, false, false);
                if (dt == KN_BOOL) {
                    int ao = arg_of(k, out, true, false);
                    store(k, ao, op1(k, KN_OP_LOGICAL_NOT, ld(k, ax), KN_BOOL), false);
                    want = ref(KN_OP_LOGICAL_NOT, x, NULL, NULL);
                } else {
                    int ay = arg_of(k, y, false, false), ab = arg_of(k, b, false, false);
                    int ao = arg_of(k, out, true, false);
                    store(k, ao, op2(k, KN_OP_ADD, op2(k, KN_OP_MUL, ld(k, ax), ld(k, ay), dt), ld(k, ab), dt), false);
                    kn_tensor *m = ref(KN_OP_MUL, x, y, NULL);
                    want = ref(KN_OP_ADD, m, b, NULL);
                    kn_tensor_release(m);
                }
                for (int c = 0; c < 2; c++) {
                    kn_kconfig_parse(cfgs[c], &k->cfg);
                    char name[160];
                    snprintf(name, sizeof name, "%s %s 5x%d, x at offset %d, %s",
                             dt == KN_BOOL ? "not(x)" : "x * y + bias", kn_dtype_name(dt), inner, off, cfgs[c]);
                    memset(kn_tensor_data(out), 0, (size_t)out->storage->nbytes);
                    kn_tensor *ts[4] = {x, y, b, out};
                    if (dt == KN_BOOL) ts[1] = out;
                    if (run(k, ts, name)) check(out, want, false, name);
                }
                release(6, (kn_tensor *[]){base, x, y, b, out, want});
                free(k);
            }

    const int64_t lens[] = {1, 7, 256, 1000, 4096, 100000};
    const kn_dtype rdts[] = {KN_F32, KN_BF16};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int di = 0; di < 2; di++)
            for (int off = 0; off < (lens[li] == 256 ? 2 : 1); off++)
                for (int which = 0; which < 3; which++) { /* softmax, layer_norm, layer_norm(x + y) */
                    kn_dtype dt = rdts[di];
                    int64_t n = lens[li], sh[2] = {n > 1000 ? 3 : 9, n}, ws[1] = {n};
                    kn_tensor *base = NULL, *x = offset_view(dt, 2, sh, off, which ? 3 : -8, which ? 7 : 8, &base);
                    kn_tensor *w = tl_rand(dt, 1, ws, TL_CONTIG, 0.5, 1.5, 0), *bb = tl_rand(dt, 1, ws, TL_CONTIG, -1, 1, 0);
                    kn_tensor *out = tl_new(dt, 2, sh), *y = which == 2 ? tl_rand(dt, 2, sh, TL_CONTIG, -2, 2, 0) : NULL;
                    kn_tensor *xy = which == 2 ? ref(KN_OP_ADD, x, y, NULL) : NULL;
                    kn_kernel *k = kernel_new(which == 2 ? "k12_add_layer_norm_layout"
                                              : which ? "k12_layer_norm_layout" : "k12_softmax_layout",
                                              KN_KERNEL_ROW, 2, sh);
                    int ax = arg_of(k, x, false, false), ay = which == 2 ? arg_of(k, y, false, false) : -1, aw = -1,
                        ab = -1;
                    if (which) {
                        aw = arg_of(k, w, false, false);
                        ab = arg_of(k, bb, false, false);
                    }
                    int ao = arg_of(k, out, true, false);
                    int lx = which == 2 ? op2(k, KN_OP_ADD, ld(k, ax), ld(k, ay), dt) : ld(k, ax);
                    kn_opcall c;
                    if (which == 0) {
                        stage(k, KN_OP_AMAX, lx);
                        int d = op2(k, KN_OP_SUB, lx, acc(k, 0, dt), dt);
                        stage(k, KN_OP_SUM, op1(k, KN_OP_EXP, d, dt));
                        store(k, ao, op2(k, KN_OP_DIV, op1(k, KN_OP_EXP, d, dt), acc(k, 1, dt), dt), false);
                        kn_opcall_init(&c, KN_OP_SOFTMAX);
                        c.in[c.n_in++] = x;
                        c.a.dim = 1;
                    } else {
                        /* the statistics in f32 for bf16, as fusion decomposes a half
                         * layer norm: steps rounded to bf16 each would leave a row of
                         * nearly equal values (a few bf16 steps apart) far from the
                         * reference, and the check flaky */
                        double eps = 1e-5;
                        kn_dtype st = dt == KN_BF16 ? KN_F32 : dt;
                        if (st != dt) lx = op1(k, KN_OP_CAST, lx, st);
                        stage(k, KN_OP_SUM, lx);
                        int mean = op2(k, KN_OP_MUL, acc(k, 0, st), cst(k, 1.0 / (double)n, st), st);
                        int d = op2(k, KN_OP_SUB, lx, mean, st);
                        stage(k, KN_OP_SUM, op2(k, KN_OP_MUL, d, d, st));
                        int var = op2(k, KN_OP_MUL, acc(k, 1, st), cst(k, 1.0 / (double)n, st), st);
                        int inv = op1(k, KN_OP_RSQRT, op2(k, KN_OP_ADD, var, cst(k, eps, st), st), st);
                        int r = op2(k, KN_OP_ADD, op2(k, KN_OP_MUL, op2(k, KN_OP_MUL, d, inv, st), ld(k, aw), st),
                                    ld(k, ab), st);
                        store(k, ao, st != dt ? op1(k, KN_OP_CAST, r, dt) : r, false);
                        kn_opcall_init(&c, KN_OP_LAYER_NORM);
                        c.in[0] = which == 2 ? xy : x;
                        c.in[1] = w;
                        c.in[2] = bb;
                        c.n_in = 3;
                        c.a.nshape = 1;
                        c.a.shape[0] = n;
                        c.a.eps = eps;
                    }
                    kn_tensor *want = ref_call(&c);
                    for (int ci = 0; ci < 2; ci++) {
                        kn_kconfig_parse(cfgs[ci], &k->cfg);
                        char name[160];
                        snprintf(name, sizeof name, "%s %s rows of %lld, row start offset %d, %s",
                                 which == 2 ? "layer_norm(x + y)" : which ? "layer_norm" : "softmax", kn_dtype_name(dt), (long long)n, off, cfgs[ci]);
                        memset(kn_tensor_data(out), 0, (size_t)out->storage->nbytes);
                        /* a row of 1e5 f32 values summed in another order than the reference */
                        kn_tensor *ts[5] = {x, w, bb, out, out};
                        if (!which) ts[1] = out;
                        if (which == 2) {
                            ts[1] = y;
                            ts[2] = w;
                            ts[3] = bb;
                        }
                        if (run(k, ts, name))
                            check_within(out, want, false, n > 1000 && dt == KN_F32 ? 1e-4 : 0, name);
                    }
                    release(6, (kn_tensor *[]){base, x, w, bb, out, want});
                    if (y) release(2, (kn_tensor *[]){y, xy});
                    free(k);
                }
}

int main(void)
{
#ifdef KIR_CUDA
    int ndev = 0;
    have_gpu = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0;
    printf("# NVRTC %s; %s\n", kn_nvrtc_version(), have_gpu ? "running on the GPU too" : "no GPU: compile only");
#else
    if (!kn_jit_available()) skip_all("no C compiler for the JIT");
#endif
    tl_seed();
    snprintf(cache_dir, sizeof cache_dir, "%s/kiln-kir-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(cache_dir)) skip_all("cannot make a temporary directory");
    const kn_dtype fl[] = {KN_F32, KN_BF16, KN_F16, KN_F64};
    for (int i = 0; i < 4; i++) {
        test_broadcast(fl[i], 2);
        test_broadcast(fl[i], 3);
    }
    test_transposed();
    test_int_bool();
    test_masked_fill();
    test_cast();
    test_dtype_chain();
    test_softmax(KN_F32, false);
    test_softmax(KN_BF16, false);
    test_softmax(KN_F64, false);
    test_softmax(KN_F32, true);
    test_layer_norm(KN_F32);
    test_layer_norm(KN_F16);
    test_row_reduce();
    test_gathered(KN_F32, 40, false, false);
    test_gathered(KN_BF16, 40, false, false);
    test_gathered(KN_F32, 7, false, false);
    test_gathered(KN_BF16, 64, true, false);
    test_gathered(KN_F32, 33, true, false);
    test_gathered(KN_BF16, 40, false, true);
    test_gathered(KN_F32, 64, true, true);
    test_stored_row(KN_BF16, 64);
    test_stored_row(KN_F32, 96);
    test_stored_row(KN_BF16, 768);
    test_folded_chain(KN_BF16, 768, KN_OP_ADD, KN_OP_ADD, false);
    test_folded_chain(KN_F16, 64, KN_OP_ADD, KN_OP_SUB, true);
    test_folded_chain(KN_BF16, 64, KN_OP_MUL, KN_OP_SUB, false);
    test_folded_chain(KN_F32, 96, KN_OP_ADD, KN_OP_ADD, false);
    test_many_rows();
    test_tril(0);
    test_tril(2);
    test_tril(-1);
    test_program_and_dump();
    test_configs();
    test_vector_layouts();
    rm_cache();
    return done_testing();
}
