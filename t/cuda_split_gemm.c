/* t/cuda_split_gemm.c: kiln's split-precision f32 GEMM (kn_la_gemm_x3.cu,
 * kernels/cuda/kn_cuda_gemm_x3.c) and its place in matmul
 * (kn_cuda_blas.c), against float64 on fresh random inputs (seed printed;
 * KILN_SEED repeats).
 *
 * - The kernel itself: every tile shape and operand layout, on sizes that
 *   are not tile multiples (leading dims padded to 4, as it requires),
 *   with batches, bias, ReLU/GELU and a residual. Its error (max |got -
 *   ref| / max |ref|) is held to the "ieee" contract: at most twice a
 *   true-f32 computation's on the same inputs (f32 FMA in the k order, on
 *   the host), plus the precision ledger's floor.
 * - Inputs spread over 1e-6 .. 1e6 in one row, and a's all denormal
 *   (times b's of 1e20 .. 1e30, so the products are normal): the kernel
 *   keeps the contract, or the case is reported and the autotuner must
 *   reject it (t/split_gemm_contract.lua).
 * - kiln's matmul: the default is the kernel's wgmma form on Hopper at a
 *   large_linear-like shape (cuBLASLt's strict GEMM elsewhere), within the
 *   contract against the strict variant (KN_VARIANT_STRICT, cuBLASLt); the
 *   variants (max-autotune's candidates) include every tile shape of the
 *   kernel, split-K where it has few tiles, each within the contract, and
 *   end with cuBLASLt's first algorithm where the default is the kernel.
 * - Refusals: an operand whose leading dim is not a multiple of 4.
 *
 * Without a CUDA device it skips.
 */
#ifndef KILN_HAVE_CUDA
#include "tap.h"

int main(void)
{
    skip_all("no CUDA device (built without the CUDA toolkit)");
}
#else
#include <math.h>
#include <string.h>

#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_blas.h"
#include "cuda/kn_cuda_context.h"
#include "cuda/kn_cuda_gemm_x3.h"
#include "kn_tensor.h"
#include "kn_view.h"
#include "ops_testlib.h"
#include "split_testlib.h"

typedef struct gcase {
    int64_t m, n, k, count;
    bool a_kmajor, b_kmajor;
    int bias, act, residual, values; /* values: 0 uniform(-1, 1), 1 spread 1e-6 .. 1e6, 2 denormal */
} gcase;

/* kiln's work runs on its own stream (kn_cuda_stream), which does not
 * wait for the legacy default stream: every copy and fill here goes on it */
static void *to_gpu(const float *host, int64_t n)
{
    void *p = NULL;
    if (kn_cuda_malloc(n * 4 + 16, &p) != KN_OK ||
        cudaMemcpyAsync(p, host, (size_t)n * 4, cudaMemcpyHostToDevice, kn_cuda_stream()) != cudaSuccess ||
        cudaStreamSynchronize(kn_cuda_stream()) != cudaSuccess) {
        printf("Bail out! copying %lld floats to the GPU: %s\n", (long long)n, kn_last_error());
        exit(2);
    }
    return p;
}

static double act_of(int act, double v)
{
    if (act == 1) return v > 0 ? v : 0;
    if (act == 2) return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    return v;
}

/* one case through the kernel in tile shape `tile`: *err and the true-f32
 * *err32; false when the kernel failed (reported) */
static bool run_case(const gcase *c, int tile, double *err, double *err32)
{
    int64_t lda = c->a_kmajor ? (c->k + 3) / 4 * 4 : (c->m + 3) / 4 * 4;
    int64_t ldb = c->b_kmajor ? (c->k + 3) / 4 * 4 : (c->n + 3) / 4 * 4;
    int64_t sa = lda * (c->a_kmajor ? c->m : c->k), sb = ldb * (c->b_kmajor ? c->n : c->k), sy = c->m * c->n;
    int64_t na = sa * c->count, nb = sb * c->count, ny = sy * c->count;
    float *ha = calloc((size_t)na, 4), *hb = calloc((size_t)nb, 4), *hr = calloc((size_t)ny, 4),
          *hbias = calloc((size_t)c->n, 4), *hy = calloc((size_t)ny, 4);
    double *ref = calloc((size_t)ny, 8), *r32 = calloc((size_t)ny, 8), *got = calloc((size_t)ny, 8);
    for (int64_t i = 0; i < na; i++) ha[i] = st_draw(c->values);
    for (int64_t i = 0; i < nb; i++) hb[i] = st_draw(c->values == 2 ? 3 : c->values);
    for (int64_t i = 0; i < ny; i++) hr[i] = c->residual ? st_draw(0) : 0;
    for (int64_t i = 0; i < c->n; i++) hbias[i] = c->bias ? st_draw(0) : 0;
    for (int64_t z = 0; z < c->count; z++)
        for (int64_t i = 0; i < c->m; i++)
            for (int64_t j = 0; j < c->n; j++) {
                double acc = 0;
                float acc32 = 0;
                for (int64_t x = 0; x < c->k; x++) {
                    float av = ha[z * sa + (c->a_kmajor ? i * lda + x : x * lda + i)];
                    float bv = hb[z * sb + (c->b_kmajor ? j * ldb + x : x * ldb + j)];
                    acc += (double)av * bv;
                    acc32 = fmaf(av, bv, acc32);
                }
                int64_t o = z * sy + i * c->n + j;
                ref[o] = act_of(c->act, acc + hbias[j] + hr[o]);
                r32[o] = act_of(c->act, (double)((acc32 + hbias[j]) + hr[o]));
            }
    kn_cuda_x3_call call;
    memset(&call, 0, sizeof call);
    void *da = to_gpu(ha, na), *db = to_gpu(hb, nb), *dr = to_gpu(hr, ny), *dbias = to_gpu(hbias, c->n), *dy = NULL;
    kn_cuda_malloc(ny * 4 + 16, &dy);
    cudaMemsetAsync(dy, 0xff, (size_t)ny * 4, kn_cuda_stream()); /* NaN: a missed store fails */
    call.p.a = da, call.p.b = db, call.p.y = dy;
    call.p.bias = c->bias ? dbias : NULL;
    call.p.res = c->residual ? dr : NULL;
    call.p.act = c->act;
    call.p.m = c->m, call.p.n = c->n, call.p.k = c->k;
    call.p.lda = lda, call.p.ldb = ldb, call.p.ldy = c->n;
    call.p.sa = sa, call.p.sb = sb, call.p.sy = sy;
    call.p.vec2 = c->n % 2 == 0;
    call.a_kmajor = c->a_kmajor, call.b_kmajor = c->b_kmajor, call.count = c->count;
    kn_status st = kn_cuda_gemm_x3(&call, tile);
    if (st == KN_OK && (cudaMemcpyAsync(hy, dy, (size_t)ny * 4, cudaMemcpyDeviceToHost, kn_cuda_stream()) != cudaSuccess ||
                        cudaStreamSynchronize(kn_cuda_stream()) != cudaSuccess))
        st = kn_error(KN_ERR_DEVICE, "copying the result back");
    if (st != KN_OK) printf("# kernel failed: %s\n", kn_last_error());
    for (int64_t i = 0; i < ny; i++) got[i] = hy[i];
    *err = st_rel_err(got, ref, ny);
    *err32 = st_rel_err(r32, ref, ny);
    void *dev[] = {da, db, dr, dbias, dy};
    for (int i = 0; i < 5; i++) kn_cuda_free(dev[i]);
    free(ha), free(hb), free(hr), free(hbias), free(hy), free(ref), free(r32), free(got);
    return st == KN_OK;
}

static const char *layout_name(const gcase *c)
{
    static const char *const names[4] = {"a[m,k] b[n,k]", "a[m,k] b[k,n]", "a[k,m] b[n,k]", "a[k,m] b[k,n]"};
    return names[(c->a_kmajor ? 0 : 2) + (c->b_kmajor ? 0 : 1)];
}

static void check_case(const gcase *c, int tile, const char *what)
{
    double err, err32;
    bool ran = run_case(c, tile, &err, &err32);
    ok(ran && err <= 2 * err32 + FLOOR,
       "%s: %lldx%lldx%lld batch %lld %s tile %s%s%s%s: error %.3g, true f32 %.3g", what, (long long)c->m,
       (long long)c->n, (long long)c->k, (long long)c->count, layout_name(c), kn_cuda_gemm_x3_tile_name(tile),
       c->bias ? " +bias" : "", c->act == 1 ? " relu" : c->act == 2 ? " gelu" : "", c->residual ? " +residual" : "",
       err, err32);
}

/* ---- kiln's matmul: the default and the variants ---- */

static kn_tensor *gpu_tensor(int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    kn_tensor *h = NULL, *d = NULL;
    kn_tensor_new(KN_F32, 2, shape, KN_CPU, &h);
    float *p = kn_tensor_data(h);
    for (int64_t i = 0; i < rows * cols; i++) p[i] = st_draw(0);
    kn_tensor_to_device(h, kn_cuda_current()->device, NULL, &d);
    kn_tensor_release(h);
    return d;
}

static void matmul_paths(void)
{
    /* x [64, 4096] . w^T, w [2048, 4096]: large_linear's kind of layer, where the default takes the kernel */
    const int64_t m = 64, n = 2048, k = 4096;
    kn_tensor *x = gpu_tensor(m, k), *w = gpu_tensor(n, k), *wt = NULL, *x64 = NULL, *w64 = NULL;
    int64_t tshape[2] = {k, n}, tstr[2] = {1, k};
    kn_tensor_view_of(w, 2, tshape, tstr, w->offset, &wt);
    kn_tensor_cast(x, KN_F64, &x64);
    kn_tensor *wt64 = NULL, *w64c = NULL;
    kn_tensor_cast(w, KN_F64, &w64c);
    kn_tensor_view_of(w64c, 2, tshape, tstr, w64c->offset, &wt64);
    (void)w64;
    int64_t oshape[2] = {m, n};
    kn_tensor *o = NULL, *o64 = NULL;
    kn_tensor_new(KN_F32, 2, oshape, kn_cuda_current()->device, &o);
    kn_tensor_new(KN_F64, 2, oshape, kn_cuda_current()->device, &o64);
    kn_opcall c, c64;
    kn_opcall_init(&c, KN_OP_MATMUL);
    c.n_in = 2, c.in[0] = x, c.in[1] = wt, c.n_out = 1, c.out[0] = o;
    c64 = c;
    c64.in[0] = x64, c64.in[1] = wt64, c64.out[0] = o64;
    ok(kn_cuda_matmul(&c64) == KN_OK, "f64 reference matmul");
    double *ref = st_host_of(o64);
    /* the contract's measure: cuBLASLt's strict f32 engine */
    c.variant = KN_VARIANT_STRICT;
    ok(kn_cuda_matmul(&c) == KN_OK && strstr(kn_cuda_current()->variant_label, "cublaslt"),
       "the strict variant is cuBLASLt (%s)", kn_cuda_current()->variant_label);
    double *strict = st_host_of(o), err_strict = st_rel_err(strict, ref, m * n);
    free(strict);
    /* the variants: until the library says there are no more */
    int n_x3 = 0, n_x3_within = 0, v;
    char last_label[160] = "";
    for (v = 0; v < 64; v++) {
        c.variant = v;
        kn_status st = kn_cuda_matmul(&c);
        if (st == KN_ERR_RANGE) break;
        if (st != KN_OK) {
            printf("# variant %d: %s\n", v, kn_last_error());
            continue;
        }
        const char *label = kn_cuda_current()->variant_label;
        double *got = st_host_of(o);
        double e = st_rel_err(got, ref, m * n);
        free(got);
        bool x3 = strstr(label, "split-f32") != NULL;
        printf("# variant %d: %s: error %.3g\n", v, label, e);
        snprintf(last_label, sizeof last_label, "%s", label);
        if (v == 0) {
            ok(e <= 2 * err_strict + FLOOR, "the default keeps the contract: error %.3g, strict f32 %.3g", e, err_strict);
            /* on Hopper, kiln's wgmma form at this shape (x3_default_tile) */
            if (kn_cuda_arch() == 90)
                ok(x3 && strstr(label, "wg"), "the default is the split kernel's wgmma form (%s)", label);
            else
                ok(!x3 && strstr(label, "cublaslt"), "the default is cuBLASLt's strict GEMM (%s)", label);
        } else if (x3) {
            n_x3++;
            n_x3_within += e <= 2 * err_strict + FLOOR;
        }
    }
    ok(v < 64, "the variants end (%d)", v);
    is_int(n_x3, KN_CUDA_X3_TILES, "every tile shape is a variant");
    ok(kn_cuda_arch() != 90 || (last_label[0] && strstr(last_label, "cublaslt")),
       "where the default is the split kernel, cuBLASLt's first algorithm is the last variant (%s)", last_label);
    ok(n_x3_within == n_x3, "each keeps the contract against strict f32's error %.3g (%d of %d)", err_strict, n_x3_within, n_x3);
    free(ref);
    kn_tensor *all[] = {x, w, wt, x64, w64c, wt64, o, o64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_release(all[i]);
}

int main(void)
{
    if (!kn_cuda_available()) skip_all(kn_cuda_unavailable_reason());
    if (kn_cuda_init() != KN_OK) skip_all(kn_last_error());
    tl_seed();
    /* every tile and layout on ragged sizes, with the epilogue */
    for (int tile = 0; tile < KN_CUDA_X3_TILES; tile++)
        for (int layout = 0; layout < 4; layout++) {
            gcase c = {tl_int(1, 300), tl_int(1, 300), tl_int(256, 700), 1 + (layout == 3), layout < 2, layout % 2 == 0,
                       (int)tl_int(0, 1), (int)tl_int(0, 2), layout == 0, 0};
            if (kn_cuda_gemm_x3_tile_runs_here(tile) && !kn_cuda_gemm_x3_tile_takes(tile, c.a_kmajor, c.b_kmajor)) {
                /* the 192-column tile's stages with both operands m- or n-contiguous;
                 * the swapped tiles, but for both operands k-contiguous */
                double e, e32;
                ok(!run_case(&c, tile, &e, &e32) &&
                       (strstr(kn_last_error(), "shared memory") || strstr(kn_last_error(), "k-contiguous")),
                   "ragged: %s tile %s: refused (%s)", layout_name(&c), kn_cuda_gemm_x3_tile_name(tile), kn_last_error());
                continue;
            }
            check_case(&c, tile, "ragged");
        }
    /* short sums, where TF32 partials are weakest: reported against the contract */
    for (int k = 4; k <= 256; k *= 4) {
        gcase c = {200, 136, k, 1, true, true, 0, 0, 0, 0};
        double err, err32;
        bool ran = run_case(&c, 2, &err, &err32);
        ok(ran && err < 1e-5, "k = %d: error %.3g (true f32 %.3g, %s the contract)", k, err, err32,
           err <= 2 * err32 + FLOOR ? "within" : "outside");
    }
    /* a few larger problems, K long */
    gcase big1 = {1024, 768, 3072, 1, true, true, 1, 0, 0, 0};
    check_case(&big1, 0, "bert ffn2");
    gcase big2 = {64, 1024, 4096, 1, true, true, 1, 1, 0, 0};
    check_case(&big2, 3, "large_linear rows");
    gcase big3 = {512, 256, 2048, 1, false, false, 0, 0, 0, 0};
    check_case(&big3, 1, "weight gradient");
    /* the wgmma tiles (5-8) on the same long sums and the backward layouts */
    check_case(&big1, KN_CUDA_X3_TILE_WG128, "bert ffn2");
    check_case(&big1, KN_CUDA_X3_TILE_WG128X192, "bert ffn2");
    gcase qkv = {1024, 2304, 768, 1, true, true, 1, 0, 0, 0};
    check_case(&qkv, KN_CUDA_X3_TILE_WG128X192, "bert qkv");
    check_case(&big2, 6, "large_linear rows");
    check_case(&big2, KN_CUDA_X3_TILE_WGS64X128, "large_linear rows");
    check_case(&big2, KN_CUDA_X3_TILE_WGS64X64, "large_linear rows");
    check_case(&big3, KN_CUDA_X3_TILE_WG128, "weight gradient");
    gcase dx = {300, 520, 1000, 2, true, false, 1, 2, 0, 0};
    check_case(&dx, KN_CUDA_X3_TILE_WG64, "input gradient, batched");
    /* values over twelve decades, and denormals */
    gcase wide = {256, 192, 768, 1, true, true, 0, 0, 0, 1};
    check_case(&wide, 2, "values 1e-6 .. 1e6");
    check_case(&wide, KN_CUDA_X3_TILE_WG128, "values 1e-6 .. 1e6");
    check_case(&wide, KN_CUDA_X3_TILE_WGS64X128, "values 1e-6 .. 1e6");
    gcase tiny = {128, 64, 512, 1, true, true, 0, 0, 0, 2};
    double err, err32;
    bool ran = run_case(&tiny, 2, &err, &err32);
    ok(ran && !isnan(err), "denormal inputs run: error %.3g, true f32 %.3g (%s the contract)", err, err32,
       err <= 2 * err32 + FLOOR ? "within" : "outside");
    /* refusals */
    kn_cuda_x3_call bad;
    memset(&bad, 0, sizeof bad);
    bad.p.m = bad.p.n = 64, bad.p.k = 30, bad.p.lda = 30, bad.p.ldb = 32, bad.p.ldy = 64, bad.count = 1;
    bad.a_kmajor = bad.b_kmajor = true;
    ok(!kn_cuda_gemm_x3_shape_fits(&bad), "a leading dim of 30 is refused");
    ok(kn_cuda_gemm_x3(&bad, 0) == KN_ERR_UNSUPPORTED, "and the launcher says so: %s", kn_last_error());
    matmul_paths();
    done_testing();
}
#endif
