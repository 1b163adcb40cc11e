/* ops_testlib.h: what the op tests (t/ops_*.c) share: a seeded random
 * source, tensors in any layout (contiguous, transposed, strided with an
 * offset, broadcast with stride 0), element access that walks a view with its
 * own index arithmetic (independent of the kernels' iterators), and value
 * comparisons that never let a NaN pass unless NaN is what was expected.
 *
 * The reference results the tests compare against are computed by the tests
 * themselves with naive float64 loops over values read back from the inputs.
 */
#ifndef OPS_TESTLIB_H
#define OPS_TESTLIB_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kn_backend.h"
#include "kn_op.h"
#include "tap.h"

/* ---- random numbers: splitmix64, seeded from the clock unless KILN_SEED ---- */

static uint64_t tl_state;

static inline uint64_t tl_u64(void)
{
    uint64_t z = (tl_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double tl_unit(void)
{
    return (double)(tl_u64() >> 11) * 0x1p-53;
}

/* Uniform integer in [lo, hi]. */
static inline int64_t tl_int(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(tl_u64() % (uint64_t)(hi - lo + 1));
}

static inline void tl_seed(void)
{
    const char *env = getenv("KILN_SEED");
    uint64_t s = env ? strtoull(env, NULL, 10)
                     : ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20)) % 1000000007ull;
    printf("# seed %llu (rerun with KILN_SEED=%llu)\n", (unsigned long long)s,
           (unsigned long long)s);
    tl_state = s;
}

/* ---- element access through a view, by its own arithmetic ---- */

static inline int64_t tl_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* Element offset of the flat row-major index `flat` of view t. */
static inline int64_t tl_offset(const kn_tensor *t, int64_t flat)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (flat % t->shape[d]) * t->strides[d];
        flat /= t->shape[d];
    }
    return off;
}

static inline char *tl_ptr(const kn_tensor *t, int64_t flat)
{
    return (char *)t->storage->data + tl_offset(t, flat) * (int64_t)kn_dtype_size(t->dtype);
}

static inline double tl_get(const kn_tensor *t, int64_t flat)
{
    return kn_load_f64(tl_ptr(t, flat), t->dtype);
}

static inline int64_t tl_get_i64(const kn_tensor *t, int64_t flat)
{
    const char *p = tl_ptr(t, flat);
    if (t->dtype == KN_I64) {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    if (t->dtype == KN_I32) {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    return (int64_t)kn_load_f64(p, t->dtype);
}

static inline void tl_set(kn_tensor *t, int64_t flat, double v)
{
    kn_store_f64(tl_ptr(t, flat), t->dtype, v);
}

static inline void tl_set_i64(kn_tensor *t, int64_t flat, int64_t v)
{
    char *p = tl_ptr(t, flat);
    if (t->dtype == KN_I64) memcpy(p, &v, 8);
    else if (t->dtype == KN_I32) {
        int32_t w = (int32_t)v;
        memcpy(p, &w, 4);
    } else kn_store_f64(p, t->dtype, (double)v);
}

/* All elements of a view as doubles, row-major. The caller frees. */
static inline double *tl_values(const kn_tensor *t)
{
    int64_t n = tl_numel(t->ndim, t->shape);
    double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = tl_get(t, i);
    return v;
}

/* ---- tensors in several layouts ---- */

enum { TL_CONTIG, TL_TRANSPOSED, TL_STRIDED, TL_EXPANDED, TL_NLAYOUTS };
static const char *const tl_layout_name[] = {"contiguous", "transposed", "strided+offset",
                                             "expanded"};

static inline kn_tensor *tl_new(kn_dtype dt, int ndim, const int64_t *shape)
{
    kn_tensor *t = NULL;
    static const int64_t none[1] = {0};
    if (!shape) shape = none; /* kn_tensor_new memcpy's it even for 0 dims */
    if (kn_tensor_new(dt, ndim, shape, KN_CPU, &t) != KN_OK) {
        printf("Bail out! kn_tensor_new: %s\n", kn_last_error());
        exit(2);
    }
    return t;
}

/* A tensor of the given logical shape whose elements live in the given
 * layout (uninitialized values; fill with tl_set). An expanded layout makes a
 * random subset of dims stride 0, so those dims repeat one element. */
static inline kn_tensor *tl_new_layout(kn_dtype dt, int ndim, const int64_t *shape, int layout)
{
    int64_t ss[KN_MAX_DIMS], st[KN_MAX_DIMS], off = 0;
    kn_tensor *base, *v = NULL;
    if (layout == TL_TRANSPOSED && ndim >= 2) {
        for (int d = 0; d < ndim; d++) ss[d] = shape[ndim - 1 - d];
        base = tl_new(dt, ndim, ss);
        for (int d = 0; d < ndim; d++) st[d] = base->strides[ndim - 1 - d];
    } else if (layout == TL_STRIDED && ndim >= 1) {
        for (int d = 0; d < ndim; d++) ss[d] = 2 * shape[d] + 1;
        base = tl_new(dt, ndim, ss);
        for (int d = 0; d < ndim; d++) {
            st[d] = 2 * base->strides[d];
            off += base->strides[d];
        }
    } else if (layout == TL_EXPANDED && ndim >= 1) {
        for (int d = 0; d < ndim; d++) ss[d] = tl_int(0, 2) == 0 ? 1 : shape[d];
        base = tl_new(dt, ndim, ss);
        for (int d = 0; d < ndim; d++) st[d] = ss[d] == 1 ? 0 : base->strides[d];
    } else {
        return tl_new(dt, ndim, shape);
    }
    if (kn_tensor_view_of(base, ndim, shape, st, off, &v) != KN_OK) {
        printf("Bail out! view: %s\n", kn_last_error());
        exit(2);
    }
    kn_tensor_release(base);
    return v;
}

/* A random value for dtype dt: floats in [lo, hi] with an occasional NaN,
 * inf or signed zero when `specials`, integers in [lo, hi], bools 0/1. */
static inline double tl_value(kn_dtype dt, double lo, double hi, int specials)
{
    if (dt == KN_BOOL) return (double)tl_int(0, 1);
    if (dt == KN_I32 || dt == KN_I64) return (double)tl_int((int64_t)lo, (int64_t)hi);
    if (specials && tl_int(0, 24) == 0) {
        static const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0};
        return sp[tl_int(0, 4)];
    }
    return lo + (hi - lo) * tl_unit();
}

/* A random tensor in a random layout (or `layout` if >= 0). */
static inline kn_tensor *tl_rand(kn_dtype dt, int ndim, const int64_t *shape, int layout, double lo,
                          double hi, int specials)
{
    if (layout < 0) layout = (int)tl_int(0, TL_NLAYOUTS - 1);
    kn_tensor *t = tl_new_layout(dt, ndim, shape, layout);
    int64_t n = tl_numel(ndim, shape);
    for (int64_t i = 0; i < n; i++) tl_set(t, i, tl_value(dt, lo, hi, specials));
    return t;
}

/* A random shape with ndim in [0, maxdim], sizes in [0, maxsize]; zero sizes
 * only one time in `zero_odds`. */
static inline int tl_shape(int64_t *shape, int maxdim, int64_t maxsize, int zero_odds)
{
    int nd = (int)tl_int(0, maxdim);
    for (int d = 0; d < nd; d++) {
        shape[d] = tl_int(1, maxsize);
        if (zero_odds && tl_int(1, zero_odds) == 1) shape[d] = 0;
    }
    return nd;
}

static inline const char *tl_shape_str(int ndim, const int64_t *shape)
{
    static char buf[4][128];
    static int k;
    char *b = buf[k++ & 3];
    return kn_shape_str(ndim, shape, b, 128);
}

/* ---- broadcasting, restated for the references ---- */

/* NumPy's rule; returns 0 when the shapes do not broadcast. */
static inline int tl_bcast(int na, const int64_t *a, int nb, const int64_t *b, int *n,
                           int64_t *out)
{
    *n = na > nb ? na : nb;
    for (int i = 0; i < *n; i++) {
        int64_t da = i - (*n - na) >= 0 ? a[i - (*n - na)] : 1;
        int64_t db = i - (*n - nb) >= 0 ? b[i - (*n - nb)] : 1;
        if (da != db && da != 1 && db != 1) return 0;
        out[i] = da == 1 ? db : da;
    }
    return 1;
}

/* The flat index into an input of shape (ni, ishape) that the output's
 * element `flat` (shape (no, oshape)) reads under broadcasting. */
static inline int64_t tl_bcast_index(int no, const int64_t *oshape, int64_t flat, int ni,
                                     const int64_t *ishape)
{
    int64_t idx[KN_MAX_DIMS], r = 0;
    for (int d = no - 1; d >= 0; d--) {
        idx[d] = flat % oshape[d];
        flat /= oshape[d];
    }
    for (int j = 0; j < ni; j++) {
        int d = j + no - ni;
        r = r * ishape[j] + (ishape[j] == 1 ? 0 : idx[d]);
    }
    return r;
}

/* A shape that broadcasts to (n, shape): some leading dims dropped, some
 * dims set to 1. */
static inline int tl_bcast_from(int n, const int64_t *shape, int64_t *out)
{
    int m = n - (int)tl_int(0, n > 0 && tl_int(0, 2) == 0 ? n : 0);
    for (int j = 0; j < m; j++) out[j] = tl_int(0, 2) == 0 ? 1 : shape[j + n - m];
    return m;
}

/* Output meta check; prints what differs. */
static inline int tl_meta_is(const kn_tensor *t, kn_dtype dt, int ndim, const int64_t *shape)
{
    int same = t && t->dtype == dt && t->ndim == ndim &&
               (ndim == 0 || memcmp(t->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0);
    if (!same && t)
        printf("#   output is %s %s, expected %s %s\n", kn_dtype_name(t->dtype),
               tl_shape_str(t->ndim, t->shape), kn_dtype_name(dt), tl_shape_str(ndim, shape));
    return same;
}

/* ---- comparisons ---- */

/* Tolerances for results rounded once into dt from a float64 result that may
 * differ from the reference's in the last few bits. */
static inline void tl_tol(kn_dtype dt, double *rel, double *abs_)
{
    switch (dt) {
    case KN_F64: *rel = 1e-12; *abs_ = 1e-12; break;
    case KN_F32: *rel = 4e-7; *abs_ = 1e-12; break;
    case KN_BF16: *rel = 0x1p-7; *abs_ = 1e-30; break;
    case KN_F16: *rel = 0x1p-10; *abs_ = 1e-7; break;
    default: *rel = 0; *abs_ = 0; break;
    }
}

/* What storing v into dt gives, by the library's documented rules (integers
 * truncate and saturate, NaN is 0; bools are v != 0; floats overflow to inf),
 * so a reference can be compared exactly for integer outputs. */
static inline double tl_expect(kn_dtype dt, double v)
{
    switch (dt) {
    case KN_BOOL: return v != 0;
    case KN_I32:
        if (isnan(v)) return 0;
        return v <= -2147483648.0 ? -2147483648.0 : v >= 2147483647.0 ? 2147483647.0 : trunc(v);
    case KN_I64:
        if (isnan(v)) return 0;
        return v <= -0x1p63 ? -0x1p63 : v >= 0x1p63 ? 0x1p63 - 1024 : trunc(v);
    case KN_F32:
    case KN_BF16:
        return fabs(v) > 3.4028235677973366e38 && !isinf(v) ? copysign(INFINITY, v) : v;
    case KN_F16: return fabs(v) >= 65520.0 ? copysign(INFINITY, v) : v;
    default: return v;
    }
}

static inline int tl_close(double got, double want, double rel, double abs_)
{
    if (isnan(want)) return isnan(got);
    if (isnan(got)) return 0;
    if (isinf(want) || isinf(got)) return got == want;
    return fabs(got - want) <= abs_ + rel * fabs(want);
}

/* One TAP line: every element of `got` against want[] (row-major). */
static inline int tl_check(const kn_tensor *got, const double *want, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int tl_check(const kn_tensor *got, const double *want, const char *fmt, ...)
{
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    double rel, abs_;
    tl_tol(got->dtype, &rel, &abs_);
    int64_t n = tl_numel(got->ndim, got->shape), bad = -1;
    double g = 0, w = 0;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        g = tl_get(got, i);
        w = tl_expect(got->dtype, want[i]);
        if (!tl_close(g, w, rel, abs_)) bad = i;
    }
    if (!ok(bad < 0, "%s", name))
        printf("#   element %lld of %lld (dtype %s): got %.17g, expected %.17g\n", (long long)bad,
               (long long)n, kn_dtype_name(got->dtype), g, w);
    return bad < 0;
}

/* ---- running ops ---- */

/* Run c eagerly on the CPU; returns the status (outputs in c->out). */
static inline kn_status tl_run(kn_opcall *c)
{
    return kn_op_eager(c, KN_CPU);
}

static inline void tl_release_outputs(kn_opcall *c)
{
    for (int i = 0; i < c->n_out; i++) {
        kn_tensor_release(c->out[i]);
        c->out[i] = NULL;
    }
    c->n_out = 0;
}

/* Expect kn_op_infer to reject c with a message containing `msg`. */
static inline void tl_rejects(const kn_opcall *c, kn_status want, const char *msg)
{
    kn_meta m[KN_MAX_OUTPUTS];
    int n = -1;
    kn_status st = kn_op_infer(c, m, &n);
    char name[256];
    snprintf(name, sizeof name, "rejects: %s", msg);
    if (!ok(st == want && n == 0 && strstr(kn_last_error(), msg) != NULL, "%s", name))
        printf("#   status %d (want %d), n_out %d, message '%s'\n", (int)st, (int)want, n,
               kn_last_error());
}

/* The promotion rule, restated independently of kn_dtype_promote. */
static inline kn_dtype tl_promote(kn_dtype a, kn_dtype b)
{
    static const int rank[KN_DTYPE_COUNT] = {
        [KN_BOOL] = 0, [KN_I32] = 1, [KN_I64] = 2, [KN_BF16] = 3, [KN_F16] = 3, [KN_F32] = 4,
        [KN_F64] = 5};
    if (a == b) return a;
    if (rank[a] == 3 && rank[b] == 3) return KN_F32; /* bf16 with f16 */
    return rank[a] >= rank[b] ? a : b;
}

static inline int tl_is_float(kn_dtype dt)
{
    return dt == KN_F32 || dt == KN_F64 || dt == KN_BF16 || dt == KN_F16;
}

#endif
