/* t/cuda_attention.c: kiln's fused attention kernel (kn_cuda_attention,
 * kernels/cuda/kn_attention.cu) against a float64 host reference of
 * softmax(q k^T * scale (+ mask)) v on fresh random inputs (seed printed;
 * KILN_SEED repeats): T = 1, 7, 255, 256, 1000 and Tq != Tk, head dims 32,
 * 64, 80, 128 (and 20, 40, 256, d != dv), bf16 / f16 / f32, causal and
 * not, bool and additive masks (broadcast over heads; full [B,1,T,T] and
 * padding [B,1,1,T]), head-split strided
 * q/k/v with a head-merged output, rows whose stride defeats 16-byte loads
 * (the SIMT path for bf16/f16), every autotuner variant, a fully masked row
 * (NaN), and bad problems refused with the right status.
 *
 * f32 calls that run the split-f32 kernel (f32 on the TF32 tensor cores)
 * are also held to the "ieee" precision contract: their error against
 * float64 at most twice that of the strict f32 kernel
 * (KN_ATTENTION_STRICT) on the same inputs, plus the contract's floor of
 * 4e-7 of the largest output, with inputs of uniform values, v spanning
 * 1e-6 to 1e6 in one row (q and k 1e-6 to 3), and denormals among them.
 *
 * The reference takes the inputs as rounded to the dtype; the error is
 * max |got - ref| / max |ref| over the output, within 1e-4 for f32, 2e-2
 * for bf16 and 5e-3 for f16 (bf16/f16 round P to the input precision for
 * the PV product, as FlashAttention does, and round the output). NaN fails
 * unless the reference is NaN there. Timings (CUDA events) are printed as
 * TAP comments, not asserted. Without a CUDA device it skips.
 */
#ifndef KILN_HAVE_CUDA
#include "tap.h"

int main(void)
{
    skip_all("no CUDA device (built without the CUDA toolkit)");
}
#else
#include <math.h>

#include "cuda/kn_cuda_attention.h"
#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_context.h"
#include "kn_plan_impl.h"
#include "ops_testlib.h"

enum { MASK_NONE, MASK_BOOL, MASK_ADD, MASK_ADD_F32 };
enum { LAYOUT_CONTIG, LAYOUT_HEADS, LAYOUT_PADDED };
static const char *const mask_names[] = {"no mask", "bool mask", "additive mask", "additive f32 mask"};
static const char *const layout_names[] = {"[B,H,T,D]", "head-split in, head-merged out", "rows padded by 1"};

typedef struct acase {
    kn_dtype dt;
    int64_t b, h, tq, tk, d, dv;
    int causal, mask, layout, variant;
    int mask_row0_off; /* a bool mask whose row 0 is all false: that row must be NaN */
    int pad_mask;      /* the mask is [b, 1, 1, tk], a padding mask broadcast over heads and query rows */
    int values;        /* VALUES_*: how q, k and v are drawn */
} acase;

enum { VALUES_UNIFORM, VALUES_WIDE, VALUES_DENORMAL };
static const char *const values_names[] = {"", ", v 1e-6..1e6", ", denormals among the values"};

/* ---- host buffers in a dtype ---- */

static double round_to(kn_dtype dt, double v)
{
    switch (dt) {
    case KN_BF16: return kn_bf16_to_f32(kn_f32_to_bf16((float)v));
    case KN_F16: return kn_f16_to_f32(kn_f32_to_f16((float)v));
    case KN_F32: return (float)v;
    default: return v;
    }
}

static void put(kn_dtype dt, void *buf, int64_t i, double v)
{
    switch (dt) {
    case KN_BF16: ((uint16_t *)buf)[i] = kn_f32_to_bf16((float)v); break;
    case KN_F16: ((uint16_t *)buf)[i] = kn_f32_to_f16((float)v); break;
    case KN_F32: ((float *)buf)[i] = (float)v; break;
    case KN_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
    default: break;
    }
}

static double get(kn_dtype dt, const void *buf, int64_t i)
{
    switch (dt) {
    case KN_BF16: return kn_bf16_to_f32(((const uint16_t *)buf)[i]);
    case KN_F16: return kn_f16_to_f32(((const uint16_t *)buf)[i]);
    case KN_F32: return ((const float *)buf)[i];
    case KN_BOOL: return ((const uint8_t *)buf)[i];
    default: return NAN;
    }
}

/* A device copy of n elements of dtype dt. */
static void *to_gpu(kn_dtype dt, const void *host, int64_t n)
{
    void *p = NULL;
    int64_t bytes = n * (int64_t)kn_dtype_size(dt);
    if (kn_cuda_malloc(bytes, &p) != KN_OK ||
        cudaMemcpyAsync(p, host, (size_t)bytes, cudaMemcpyHostToDevice, kn_cuda_stream()) != cudaSuccess) {
        printf("Bail out! copying %lld bytes to the GPU: %s\n", (long long)bytes, kn_last_error());
        exit(2);
    }
    return p;
}

/* Strides (batch, head, row) and the element count of a [b, h, t, w]
 * operand in a layout. */
static int64_t layout_of(int layout, int64_t b, int64_t h, int64_t t, int64_t w, int64_t s[3])
{
    switch (layout) {
    case LAYOUT_HEADS: /* a [b, t, h, w] buffer viewed as [b, h, t, w] */
        s[0] = t * h * w, s[1] = w, s[2] = h * w;
        return b * t * h * w;
    case LAYOUT_PADDED: /* rows of w + 1: no 16-byte loads */
        s[0] = h * t * (w + 1), s[1] = t * (w + 1), s[2] = w + 1;
        return b * h * t * (w + 1);
    default:
        s[0] = h * t * w, s[1] = t * w, s[2] = w;
        return b * h * t * w;
    }
}

/* ---- the reference ---- */

/* o[b,h,i,:] in float64 from the rounded inputs; NaN rows where every key
 * is dropped. */
static void reference(const acase *c, const double *q, const double *k, const double *v, const double *mask,
                      const int64_t qs[3], const int64_t ks[3], const int64_t vs[3], const int64_t ms[4],
                      double scale, double *ref)
{
    double *s = malloc(sizeof(double) * (size_t)c->tk);
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t h = 0; h < c->h; h++)
            for (int64_t i = 0; i < c->tq; i++) {
                double mx = -INFINITY;
                for (int64_t j = 0; j < c->tk; j++) {
                    double acc = 0;
                    for (int64_t x = 0; x < c->d; x++)
                        acc += q[b * qs[0] + h * qs[1] + i * qs[2] + x] * k[b * ks[0] + h * ks[1] + j * ks[2] + x];
                    acc *= scale;
                    if (c->causal && j > i) acc = -INFINITY;
                    if (c->mask) {
                        double m = mask[b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]];
                        if (c->mask == MASK_BOOL) {
                            if (m == 0) acc = -INFINITY;
                        } else {
                            acc += m;
                        }
                    }
                    s[j] = acc;
                    if (acc > mx) mx = acc;
                }
                double *out = ref + ((b * c->h + h) * c->tq + i) * c->dv;
                if (mx == -INFINITY) {
                    for (int64_t x = 0; x < c->dv; x++) out[x] = NAN;
                    continue;
                }
                double sum = 0;
                for (int64_t j = 0; j < c->tk; j++) sum += (s[j] = exp(s[j] - mx));
                for (int64_t x = 0; x < c->dv; x++) {
                    double acc = 0;
                    for (int64_t j = 0; j < c->tk; j++) acc += s[j] * v[b * vs[0] + h * vs[1] + j * vs[2] + x];
                    out[x] = acc / sum;
                }
            }
    free(s);
}

static double tolerance(kn_dtype dt)
{
    return dt == KN_F32 ? 1e-4 : dt == KN_BF16 ? 2e-2 : 5e-3;
}

static void fill(kn_dtype dt, void *buf, double *vals, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) {
        vals[i] = round_to(dt, lo + (hi - lo) * tl_unit());
        put(dt, buf, i, vals[i]);
    }
}

/* q, k or v values of a kind: uniform in [-1, 1]; magnitudes 10^u for u
 * uniform in [lo_exp, hi_exp] with random signs; or uniform with every
 * fourth value a denormal (f32's are below 1.2e-38) */
static void fill_values(kn_dtype dt, int kind, void *buf, double *vals, int64_t n, double lo_exp, double hi_exp)
{
    fill(dt, buf, vals, n, -1, 1);
    if (kind == VALUES_UNIFORM) return;
    for (int64_t i = 0; i < n; i++) {
        double sign = tl_unit() < 0.5 ? -1 : 1, v = vals[i];
        if (kind == VALUES_WIDE) v = sign * pow(10, lo_exp + (hi_exp - lo_exp) * tl_unit());
        else if (i % 4 == 0) v = sign * 1e-39 * (0.01 + tl_unit());
        vals[i] = round_to(dt, v);
        put(dt, buf, i, vals[i]);
    }
}

/* max |got - ref| / max |ref| over the output (NaN where the reference is
 * not NaN counts as infinite; NaN where it is counts as right) */
static double rel_max_error(const acase *c, const void *hout, const int64_t os[3], const double *ref)
{
    double maxref = 0, maxerr = 0;
    int64_t n = c->b * c->h * c->tq * c->dv;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(ref[i]) && fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t h = 0; h < c->h; h++)
            for (int64_t i = 0; i < c->tq; i++)
                for (int64_t x = 0; x < c->dv; x++) {
                    double w = ref[((b * c->h + h) * c->tq + i) * c->dv + x];
                    double g = get(c->dt, hout, b * os[0] + h * os[1] + i * os[2] + x);
                    if (isnan(w)) continue;
                    double err = isnan(g) ? INFINITY : fabs(g - w);
                    if (err > maxerr) maxerr = err;
                }
    return maxref > 0 ? maxerr / maxref : maxerr;
}

/* ---- the precision contract ---- */

/* The split-f32 result (its error rel) against the strict f32
 * kernel's on the same inputs, by the contract's rule
 * (kn_plan_within_contract: twice strict's error, plus a floor of a few
 * f32 roundings of the largest output for results strict f32 gets
 * exactly). The ratio is printed: the contract is met by the floor alone
 * where it is above 2. */
static void check_contract(const acase *c, const kn_attention_problem *p, int64_t no,
                           const int64_t os[3], const double *ref, double rel, const char *name)
{
    kn_attention_problem sp = *p;
    size_t bytes = (size_t)no * sizeof(float);
    float *hs = malloc(bytes);
    sp.variant = KN_ATTENTION_STRICT;
    kn_status st = kn_cuda_malloc((int64_t)bytes, &sp.o);
    if (st == KN_OK) st = kn_cuda_attention(&sp);
    cudaError_t e = st == KN_OK ? cudaMemcpyAsync(hs, sp.o, bytes, cudaMemcpyDeviceToHost, kn_cuda_stream()) : cudaSuccess;
    if (e == cudaSuccess && st == KN_OK) e = cudaStreamSynchronize(kn_cuda_stream());
    if (st != KN_OK || e != cudaSuccess) {
        ok(0, "%s: the strict f32 kernel ran", name);
        printf("#   %s\n", st != KN_OK ? kn_last_error() : cudaGetErrorString(e));
    } else {
        double strict = rel_max_error(c, hs, os, ref);
        ok(kn_plan_within_contract(rel, strict) && !isnan(rel),
           "%s: split-f32 error %.2e, strict f32's %.2e (%.2fx): within the ieee contract", name, rel, strict,
           strict > 0 ? rel / strict : 0.0);
    }
    if (sp.o) kn_cuda_free(sp.o);
    free(hs);
}

/* ---- one case ---- */

static void run_case(const acase *c)
{
    kn_dtype dt = c->dt;
    size_t es = kn_dtype_size(dt);
    int64_t qs[3], ks[3], vs[3], os[3], ms[4] = {0, 0, 0, 0};
    int64_t nq = layout_of(c->layout, c->b, c->h, c->tq, c->d, qs);
    int64_t nk = layout_of(c->layout, c->b, c->h, c->tk, c->d, ks);
    int64_t nv = layout_of(c->layout, c->b, c->h, c->tk, c->dv, vs);
    /* the output: head-merged [b, tq, h, dv] for the head-split layout */
    int64_t no = layout_of(c->layout == LAYOUT_HEADS ? LAYOUT_HEADS : LAYOUT_CONTIG, c->b, c->h, c->tq, c->dv, os);
    double *q = malloc(sizeof(double) * (size_t)nq), *k = malloc(sizeof(double) * (size_t)nk),
           *v = malloc(sizeof(double) * (size_t)nv);
    void *hq = malloc((size_t)nq * es), *hk = malloc((size_t)nk * es), *hv = malloc((size_t)nv * es);
    /* wide values: v spans 1e-6..1e6; q and k 1e-6..3, since softmax
     * turns a score's absolute error into P's relative error, and f32
     * scores of 1e6 carry errors of 0.1 whatever the kernel */
    fill_values(dt, c->values, hq, q, nq, -6, 0.5);
    fill_values(dt, c->values, hk, k, nk, -6, 0.5);
    fill_values(dt, c->values, hv, v, nv, -6, 6);
    /* masks are [b, 1, tq, tk]: broadcast over heads (stride 0) */
    kn_dtype mdt = c->mask == MASK_BOOL ? KN_BOOL : c->mask == MASK_ADD_F32 ? KN_F32 : dt;
    int64_t nm = !c->mask ? 1 : c->pad_mask ? c->b * c->tk : c->b * c->tq * c->tk;
    double *mask = malloc(sizeof(double) * (size_t)nm);
    void *hm = malloc((size_t)nm * kn_dtype_size(mdt));
    if (c->mask) {
        ms[0] = c->pad_mask ? c->tk : c->tq * c->tk, ms[1] = 0, ms[2] = c->pad_mask ? 0 : c->tk, ms[3] = 1;
        for (int64_t i = 0; i < nm; i++) {
            double u = tl_unit();
            if (c->mask == MASK_BOOL) mask[i] = (u < 0.8) && !(c->mask_row0_off && (i / c->tk) % c->tq == 0);
            else mask[i] = u < 0.1 ? -INFINITY : round_to(mdt, -2 + 4 * tl_unit());
            put(mdt, hm, i, mask[i]);
        }
    }
    double scale = 1.0 / sqrt((double)c->d);
    double *ref = malloc(sizeof(double) * (size_t)(c->b * c->h * c->tq * c->dv));
    reference(c, q, k, v, mask, qs, ks, vs, ms, scale, ref);

    void *dq = to_gpu(dt, hq, nq), *dk = to_gpu(dt, hk, nk), *dv_ = to_gpu(dt, hv, nv);
    void *dm = c->mask ? to_gpu(mdt, hm, nm) : NULL, *dout = NULL;
    /* the output starts as NaN everywhere: an element the kernel misses fails */
    void *hout = malloc((size_t)no * es);
    for (int64_t i = 0; i < no; i++) put(dt, hout, i, NAN);
    dout = to_gpu(dt, hout, no);

    kn_attention_problem p = {
        .dtype = dt, .batch = c->b, .heads = c->h, .tq = c->tq, .tk = c->tk, .d = c->d, .dv = c->dv,
        .q = dq, .k = dk, .v = dv_, .o = dout, .mask = dm, .mask_dtype = mdt, .causal = c->causal,
        .scale = scale, .variant = c->variant};
    for (int i = 0; i < 3; i++) {
        p.q_stride[i] = qs[i];
        p.k_stride[i] = ks[i];
        p.v_stride[i] = vs[i];
        p.o_stride[i] = os[i];
    }
    for (int i = 0; i < 4; i++) p.mask_stride[i] = ms[i];
    const char *labels[KN_ATTENTION_MAX_VARIANTS] = {0};
    int nvar = kn_cuda_attention_variants(&p, labels);
    const char *label = nvar > 0 ? labels[c->variant ? c->variant - 1 : 0] : "?";

    char name[256];
    snprintf(name, sizeof name, "%s B%lld H%lld tq %lld tk %lld d %lld dv %lld%s, %s%s, %s%s%s [%s]",
             kn_dtype_name(dt), (long long)c->b, (long long)c->h, (long long)c->tq, (long long)c->tk,
             (long long)c->d, (long long)c->dv, c->causal ? " causal" : "", mask_names[c->mask],
             c->pad_mask ? " [B,1,1,T]" : "", layout_names[c->layout], c->mask_row0_off ? ", row 0 fully masked" : "",
             values_names[c->values], label);
    kn_status st = kn_cuda_attention(&p);
    cudaError_t e = st == KN_OK ? cudaMemcpyAsync(hout, dout, (size_t)no * es, cudaMemcpyDeviceToHost, kn_cuda_stream())
                                : cudaSuccess;
    if (e == cudaSuccess && st == KN_OK) e = cudaStreamSynchronize(kn_cuda_stream());
    if (st != KN_OK || e != cudaSuccess) {
        ok(0, "%s", name);
        printf("#   %s\n", st != KN_OK ? kn_last_error() : cudaGetErrorString(e));
    } else {
        double maxref = 0, maxerr = 0;
        int64_t bad_nan = 0, nan_rows_ok = 0, first_bad = -1;
        for (int64_t i = 0; i < c->b * c->h * c->tq * c->dv; i++)
            if (!isnan(ref[i]) && fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
        for (int64_t b = 0; b < c->b; b++)
            for (int64_t h = 0; h < c->h; h++)
                for (int64_t i = 0; i < c->tq; i++)
                    for (int64_t x = 0; x < c->dv; x++) {
                        int64_t ri = ((b * c->h + h) * c->tq + i) * c->dv + x;
                        double g = get(dt, hout, b * os[0] + h * os[1] + i * os[2] + x), w = ref[ri];
                        if (isnan(w)) {
                            if (isnan(g)) nan_rows_ok++;
                            else if (first_bad < 0) first_bad = ri, bad_nan++;
                            else bad_nan++;
                            continue;
                        }
                        if (isnan(g)) {
                            if (first_bad < 0) first_bad = ri;
                            bad_nan++;
                            continue;
                        }
                        double err = fabs(g - w);
                        if (err > maxerr) maxerr = err;
                    }
        double rel = maxref > 0 ? maxerr / maxref : maxerr;
        bool good = bad_nan == 0 && rel <= tolerance(dt);
        if (c->mask_row0_off) good = good && nan_rows_ok >= c->b * c->h * c->dv;
        ok(good, "%s: max error %.3g of max |ref| %.3g (rel %.2e, tol %.0e)", name, maxerr, maxref, rel,
           tolerance(dt));
        if (bad_nan) printf("#   %lld NaN mismatches (first at flat %lld)\n", (long long)bad_nan, (long long)first_bad);
        if (strncmp(label, "split-f32", 9) == 0) check_contract(c, &p, no, os, ref, rel, name);
    }
    kn_cuda_free(dq);
    kn_cuda_free(dk);
    kn_cuda_free(dv_);
    kn_cuda_free(dout);
    if (dm) kn_cuda_free(dm);
    free(q), free(k), free(v), free(hq), free(hk), free(hv), free(mask), free(hm), free(ref), free(hout);
}

/* ---- bad problems ---- */

static void test_refusals(void)
{
    void *buf = NULL;
    if (kn_cuda_malloc(1 << 20, &buf) != KN_OK) {
        printf("Bail out! no GPU memory: %s\n", kn_last_error());
        exit(2);
    }
    kn_attention_problem base = {.dtype = KN_BF16, .batch = 1, .heads = 1, .tq = 8, .tk = 8, .d = 64, .dv = 64,
                                 .q = buf, .k = buf, .v = buf, .o = buf, .scale = 0.125,
                                 .q_stride = {512, 512, 64}, .k_stride = {512, 512, 64},
                                 .v_stride = {512, 512, 64}, .o_stride = {512, 512, 64}};
    kn_attention_problem p = base;
    p.d = 300;
    ok(kn_cuda_attention(&p) == KN_ERR_UNSUPPORTED && strstr(kn_last_error(), "head dim"),
       "d = 300 is unsupported, naming the head dim (%s)", kn_last_error());
    p = base;
    p.dtype = KN_F64;
    ok(kn_cuda_attention(&p) == KN_ERR_UNSUPPORTED && strstr(kn_last_error(), "f64"),
       "f64 is unsupported, naming the dtype (%s)", kn_last_error());
    p = base;
    p.tq = 0;
    ok(kn_cuda_attention(&p) == KN_ERR_ARG, "tq = 0 is a bad argument (%s)", kn_last_error());
    p = base;
    p.mask = buf;
    p.mask_dtype = KN_I32;
    ok(kn_cuda_attention(&p) == KN_ERR_UNSUPPORTED && strstr(kn_last_error(), "mask"),
       "an i32 mask is unsupported (%s)", kn_last_error());
    p = base;
    p.q = (char *)buf + 1;
    ok(kn_cuda_attention(&p) == KN_ERR_UNSUPPORTED && strstr(kn_last_error(), "aligned"),
       "a q misaligned for its elements is unsupported (%s)", kn_last_error());
    p = base;
    p.variant = 99;
    ok(kn_cuda_attention(&p) == KN_ERR_RANGE, "variant 99 does not exist (%s)", kn_last_error());
    p = base;
    const char *labels[KN_ATTENTION_MAX_VARIANTS];
    int n = kn_cuda_attention_variants(&p, labels);
    ok(n >= 2 && strncmp(labels[0], "tc", 2) == 0 && strncmp(labels[n - 1], "simt", 4) == 0,
       "bf16 d=64 has tensor-core variants and the SIMT one (%d)", n);
    p.dtype = KN_F32;
    n = kn_cuda_attention_variants(&p, labels);
    ok(n == 6 && strcmp(labels[0], "split-f32 bm32 bn32 ks2") == 0 && strcmp(labels[1], "split-f32 bm32 bn32") == 0 &&
           strcmp(labels[2], "split-f32 bm64 bn32") == 0 && strncmp(labels[3], "f32 tiled bm32", 14) == 0 &&
           strncmp(labels[4], "f32 tiled bm64", 14) == 0 && strncmp(labels[5], "simt", 4) == 0,
       "f32 on one small block: the split-f32 variants (key groups first), then the tiled ones, then the SIMT one (%d)",
       n);
    p.variant = -2;
    ok(kn_cuda_attention(&p) == KN_ERR_RANGE, "variant -2 does not exist (%s)", kn_last_error());
    p.variant = 0;
    p.d = p.dv = 80;
    p.q_stride[2] = p.k_stride[2] = p.v_stride[2] = p.o_stride[2] = 80;
    n = kn_cuda_attention_variants(&p, labels);
    ok(n == 3 && strncmp(labels[0], "f32 tiled", 9) == 0,
       "f32 with 80-wide heads: no split-f32 variant (it takes heads up to 64) (%d: %s)", n, n ? labels[0] : "-");
    p.d = p.dv = 64;
    p.q_stride[2] = p.k_stride[2] = p.v_stride[2] = p.o_stride[2] = 64;
    p.q_stride[2] = 66; /* rows 16-byte copies cannot take: the SIMT kernel only */
    n = kn_cuda_attention_variants(&p, labels);
    ok(n == 1 && strncmp(labels[0], "simt", 4) == 0, "f32 with rows of 66 elements: the SIMT variant only (%d)", n);
    (void)cudaStreamSynchronize(kn_cuda_stream());
    kn_cuda_free(buf);
}

/* ---- timing (comments only) ---- */

static void time_case(kn_dtype dt, int64_t b, int64_t h, int64_t t, int64_t d, int causal)
{
    size_t es = kn_dtype_size(dt);
    int64_t n = b * h * t * d;
    void *buf[4];
    for (int i = 0; i < 4; i++) {
        if (kn_cuda_malloc(n * (int64_t)es, &buf[i]) != KN_OK) {
            printf("# timing: no GPU memory\n");
            return;
        }
        (void)cudaMemsetAsync(buf[i], 0, (size_t)n * es, kn_cuda_stream()); /* zeros: finite, timing only */
    }
    kn_attention_problem p = {.dtype = dt, .batch = b, .heads = h, .tq = t, .tk = t, .d = d, .dv = d,
                              .q = buf[0], .k = buf[1], .v = buf[2], .o = buf[3], .causal = causal,
                              .scale = 1.0 / sqrt((double)d)};
    int64_t s[3] = {h * t * d, t * d, d};
    memcpy(p.q_stride, s, sizeof s);
    memcpy(p.k_stride, s, sizeof s);
    memcpy(p.v_stride, s, sizeof s);
    memcpy(p.o_stride, s, sizeof s);
    const char *labels[KN_ATTENTION_MAX_VARIANTS];
    int nvar = kn_cuda_attention_variants(&p, labels);
    /* 2 matmuls of 2*t*t*d flops each per (b, h); causal does about half */
    double flops = 4.0 * (double)(b * h) * (double)t * (double)t * (double)d * (causal ? 0.5 : 1.0);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int var = 1; var <= nvar; var++) {
        p.variant = var;
        const int reps = 50;
        kn_status st = KN_OK;
        for (int i = 0; i < 3 && st == KN_OK; i++) st = kn_cuda_attention(&p);
        cudaEventRecord(e0, kn_cuda_stream());
        for (int i = 0; i < reps && st == KN_OK; i++) st = kn_cuda_attention(&p);
        cudaEventRecord(e1, kn_cuda_stream());
        float ms = 0;
        if (st == KN_OK && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess)
            printf("# time %s B=%lld H=%lld T=%lld d=%lld%s [%s]: %.2f us, %.1f TFLOP/s\n", kn_dtype_name(dt),
                   (long long)b, (long long)h, (long long)t, (long long)d, causal ? " causal" : "", labels[var - 1],
                   1e3 * ms / reps, flops / (1e-3 * ms / reps) / 1e12);
        else
            printf("# time %s [%s]: failed: %s\n", kn_dtype_name(dt), labels[var - 1], kn_last_error());
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    for (int i = 0; i < 4; i++) kn_cuda_free(buf[i]);
}

int main(void)
{
    if (!kn_cuda_available()) {
        printf("# %s\n", kn_cuda_unavailable_reason());
        skip_all("no CUDA device");
    }
    if (!kn_backend_get(KN_CUDA) || kn_cuda_init() != KN_OK) {
        printf("Bail out! CUDA is available but does not start: %s\n", kn_last_error());
        return 2;
    }
    tl_seed();
    static const kn_dtype dts[] = {KN_BF16, KN_F16, KN_F32};
    static const int64_t lens[][2] = {{1, 1}, {7, 7}, {255, 255}, {256, 256}, {1000, 1000}, {7, 255}, {255, 7}};
    static const int64_t dims[] = {32, 64, 80, 128};
    for (int di = 0; di < 3; di++) {
        kn_dtype dt = dts[di];
        /* the grid: lengths x head dims x causal */
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (size_t hi = 0; hi < sizeof dims / sizeof dims[0]; hi++)
                for (int causal = 0; causal < 2; causal++) {
                    int64_t t = lens[li][0] > lens[li][1] ? lens[li][0] : lens[li][1];
                    acase c = {.dt = dt, .b = t >= 1000 ? 1 : 2, .h = 2, .tq = lens[li][0], .tk = lens[li][1],
                               .d = dims[hi], .dv = dims[hi], .causal = causal};
                    run_case(&c);
                }
        /* masks, broadcast over heads, with and without causal */
        for (int mask = MASK_BOOL; mask <= MASK_ADD_F32; mask++)
            for (int causal = 0; causal < 2; causal++) {
                acase c = {.dt = dt, .b = 2, .h = 3, .tq = 255, .tk = 255, .d = 64, .dv = 64, .causal = causal,
                           .mask = mask};
                run_case(&c);
                c.tq = 7;
                c.d = c.dv = 80;
                run_case(&c);
                /* an even tk that ends inside a tile: the 16-bit masks' keys
                 * load in pairs, the last pair standing in for keys past tk */
                c.tq = c.tk = 100;
                c.d = c.dv = 64;
                run_case(&c);
                c.pad_mask = 1;
                run_case(&c);
            }
        /* a bool mask whose query row 0 keeps nothing: NaN there */
        acase nanrow = {.dt = dt, .b = 1, .h = 2, .tq = 70, .tk = 100, .d = 64, .dv = 64, .mask = MASK_BOOL,
                        .mask_row0_off = 1};
        run_case(&nanrow);
        /* head-split q/k/v, head-merged o; rows the 16-byte loads cannot take */
        for (int layout = LAYOUT_HEADS; layout <= LAYOUT_PADDED; layout++)
            for (int causal = 0; causal < 2; causal++) {
                acase c = {.dt = dt, .b = 2, .h = 4, .tq = 256, .tk = 256, .d = 64, .dv = 64, .causal = causal,
                           .layout = layout};
                run_case(&c);
                c.tq = c.tk = 255;
                c.d = c.dv = 80;
                run_case(&c);
            }
        /* other head dims: padded on the tensor cores (40), SIMT (20, 256), d != dv */
        static const int64_t odd[][2] = {{40, 40}, {20, 20}, {256, 256}, {128, 64}, {64, 200}};
        for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
            acase c = {.dt = dt, .b = 1, .h = 2, .tq = 130, .tk = 130, .d = odd[i][0], .dv = odd[i][1], .causal = 1};
            run_case(&c);
        }
        /* every configuration the autotuner may pick */
        for (int64_t d = 32; d <= 128; d *= 2) {
            acase c = {.dt = dt, .b = 2, .h = 2, .tq = 300, .tk = 300, .d = d, .dv = d, .causal = 1};
            kn_attention_problem p = {.dtype = dt, .batch = 1, .heads = 1, .tq = 300, .tk = 300, .d = d, .dv = d,
                                      .q = (void *)(uintptr_t)256, .k = (void *)(uintptr_t)256,
                                      .v = (void *)(uintptr_t)256, .o = (void *)(uintptr_t)256,
                                      .q_stride = {8, 8, 8}, .k_stride = {8, 8, 8}, .v_stride = {8, 8, 8},
                                      .o_stride = {8, 8, 8}};
            int nvar = kn_cuda_attention_variants(&p, NULL);
            for (c.variant = 1; c.variant <= nvar; c.variant++) run_case(&c);
            /* every variant with each kind of mask, on short sequences (where
             * the key-split configurations are the default) and ragged ones;
             * row 0 fully masked must give NaN in every variant */
            p.tq = p.tk = 128;
            nvar = kn_cuda_attention_variants(&p, NULL);
            for (int variant = 1; variant <= nvar; variant++)
                for (int mask = MASK_BOOL; mask <= MASK_ADD_F32; mask++) {
                    acase m = {.dt = dt, .b = 2, .h = 3, .tq = 128, .tk = 128, .d = d, .dv = d, .mask = mask,
                               .variant = variant, .causal = mask == MASK_ADD};
                    run_case(&m);
                    m.pad_mask = 1;
                    m.tq = m.tk = 197;
                    m.causal = 0;
                    run_case(&m);
                }
            for (int variant = 1; variant <= nvar; variant++) {
                acase z = {.dt = dt, .b = 1, .h = 2, .tq = 70, .tk = 100, .d = d, .dv = d, .mask = MASK_BOOL,
                           .mask_row0_off = 1, .variant = variant};
                run_case(&z);
            }
        }
        /* the default pick on short sequences, with a padding mask (BERT's) */
        for (int mask = MASK_NONE; mask <= MASK_ADD; mask++) {
            acase c = {.dt = dt, .b = 8, .h = 12, .tq = 128, .tk = 128, .d = 64, .dv = 64, .mask = mask,
                       .pad_mask = mask != MASK_NONE};
            run_case(&c);
        }
        if (dt != KN_F32) continue;
        /* the split-f32 kernel (the f32 default up to 64-wide heads) at
         * ViT's and the transformer_block sample's shapes, at ragged
         * lengths and head dims, d != dv, on wide-ranged and denormal values */
        static const int64_t shapes[][6] = {
            {8, 12, 197, 197, 64, 64}, {4, 8, 256, 256, 64, 64}, {2, 3, 100, 61, 32, 32},
            {1, 4, 33, 70, 20, 20},    {2, 2, 129, 129, 40, 40}, {2, 2, 90, 90, 64, 24}, {2, 2, 65, 65, 28, 64}};
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int values = VALUES_UNIFORM; values <= VALUES_DENORMAL; values++) {
                acase c = {.dt = dt, .b = shapes[i][0], .h = shapes[i][1], .tq = shapes[i][2], .tk = shapes[i][3],
                           .d = shapes[i][4], .dv = shapes[i][5], .causal = (int)(i % 2), .values = values,
                           .mask = i == 2 ? MASK_ADD_F32 : i == 3 ? MASK_BOOL : MASK_NONE};
                run_case(&c);
            }
    }
    test_refusals();
    time_case(KN_BF16, 16, 8, 256, 64, 1);
    time_case(KN_F16, 16, 8, 256, 64, 1);
    time_case(KN_F32, 16, 8, 256, 64, 1);
    time_case(KN_BF16, 4, 8, 1000, 64, 0);
    time_case(KN_BF16, 4, 8, 1024, 128, 1);
    return done_testing();
}
#endif
