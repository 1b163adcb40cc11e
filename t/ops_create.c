/* t/ops_create.c: the CPU reference for full, arange, randn, rand and
 * randint: values, dtypes, shapes (scalars and zero sizes), the contract that
 * random element i is the generator's element rng_offset + i (so any slice can
 * be generated alone), reproducibility, ranges and moments; then the error
 * messages of shape inference for creation.
 */
#include "kn_rng.h"
#include "ops_testlib.h"

static const kn_dtype all_dtypes[] = {KN_F32, KN_F64, KN_BF16, KN_F16, KN_I32, KN_I64, KN_BOOL};
static const kn_dtype float_dtypes[] = {KN_F32, KN_F64, KN_BF16, KN_F16};

/* Run a creation op with the given attrs; NULL (and a failed test) if it fails. */
static kn_tensor *create(kn_op op, kn_dtype dt, int nd, const int64_t *shape, double v, double v2,
                         uint64_t seed, uint64_t offset)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    c.a.dtype = dt;
    c.a.nshape = nd;
    if (nd > 0) memcpy(c.a.shape, shape, sizeof(int64_t) * (size_t)nd);
    c.a.value = v;
    c.a.value2 = v2;
    c.a.seed = seed;
    c.a.rng_offset = offset;
    if (tl_run(&c) != KN_OK) {
        ok(0, "%s %s %s", kn_op_name(op), kn_dtype_name(dt), tl_shape_str(nd, shape));
        printf("#   failed: %s\n", kn_last_error());
        return NULL;
    }
    if (!tl_meta_is(c.out[0], dt, nd, shape)) ok(0, "%s meta", kn_op_name(op));
    return c.out[0];
}

static void test_full_arange(void)
{
    for (int di = 0; di < 7; di++)
        for (int trial = 0; trial < 3; trial++) {
            kn_dtype dt = all_dtypes[di];
            int64_t shape[KN_MAX_DIMS];
            int nd = tl_shape(shape, 4, 6, 8);
            double v = tl_is_float(dt) ? (trial == 2 ? -0.0 : tl_value(dt, -100, 100, 1))
                                       : (double)tl_int(-100, 100);
            kn_tensor *t = create(KN_OP_FULL, dt, nd, shape, v, 0, 0, 0);
            if (!t) continue;
            int64_t n = tl_numel(nd, shape);
            double *want = malloc(sizeof(double) * ((size_t)n + 1));
            for (int64_t i = 0; i < n; i++) want[i] = v;
            tl_check(t, want, "full %s %s value %g", kn_dtype_name(dt), tl_shape_str(nd, shape), v);
            if (trial == 2 && tl_is_float(dt) && n > 0)
                ok(signbit(tl_get(t, n - 1)), "full %s with -0 keeps the sign", kn_dtype_name(dt));
            free(want);
            kn_tensor_release(t);
        }
    static const kn_dtype ad[] = {KN_F32, KN_F64, KN_I32, KN_I64, KN_BF16};
    for (int di = 0; di < 5; di++)
        for (int trial = 0; trial < 3; trial++) {
            kn_dtype dt = ad[di];
            int64_t len = tl_int(0, 40);
            bool fl = tl_is_float(dt);
            double start = fl ? tl_value(dt, -5, 5, 0) : (double)tl_int(-10, 10);
            double step = fl ? tl_value(dt, -2, 2, 0) : (double)tl_int(-3, 3);
            kn_tensor *t = create(KN_OP_ARANGE, dt, 1, &len, start, step, 0, 0);
            if (!t) continue;
            double *want = malloc(sizeof(double) * ((size_t)len + 1));
            for (int64_t i = 0; i < len; i++) want[i] = start + (double)i * step;
            tl_check(t, want, "arange %s start %g step %g length %lld", kn_dtype_name(dt), start,
                     step, (long long)len);
            free(want);
            kn_tensor_release(t);
        }
}

static void test_random(void)
{
    uint64_t seed = tl_u64();
    for (int di = 0; di < 4; di++) {
        kn_dtype dt = float_dtypes[di];
        int64_t shape[3] = {3, 4, 5};
        uint64_t off = tl_u64() >> 8;
        kn_tensor *t = create(KN_OP_RANDN, dt, 3, shape, 0, 0, seed, off);
        kn_tensor *u = create(KN_OP_RAND, dt, 3, shape, 0, 0, seed, off);
        if (!t || !u) continue;
        double wn[60], wu[60];
        for (int i = 0; i < 60; i++) {
            wn[i] = kn_rng_normal(seed, off + (uint64_t)i);
            wu[i] = kn_rng_uniform(seed, off + (uint64_t)i);
        }
        tl_check(t, wn, "randn %s element i is kn_rng_normal(seed, offset + i)", kn_dtype_name(dt));
        tl_check(u, wu, "rand %s element i is kn_rng_uniform(seed, offset + i)", kn_dtype_name(dt));
        /* A slice made alone (offset + 20) equals the same slice of the whole. */
        int64_t tail = 40;
        kn_tensor *s = create(KN_OP_RANDN, dt, 1, &tail, 0, 0, seed, off + 20);
        int same = s != NULL;
        for (int i = 0; same && i < 40; i++) same = tl_get(s, i) == tl_get(t, 20 + i);
        ok(same, "randn %s at offset + 20 equals elements 21.. of the whole", kn_dtype_name(dt));
        kn_tensor *again = create(KN_OP_RANDN, dt, 3, shape, 0, 0, seed, off);
        int rep = again != NULL;
        for (int i = 0; rep && i < 60; i++) rep = tl_get(again, i) == tl_get(t, i);
        ok(rep, "randn %s is reproducible", kn_dtype_name(dt));
        kn_tensor *other = create(KN_OP_RANDN, dt, 3, shape, 0, 0, seed + 1, off);
        int diff = 0;
        for (int i = 0; other && i < 60; i++) diff += tl_get(other, i) != tl_get(t, i);
        ok(diff > 50, "randn %s with another seed differs (%d of 60)", kn_dtype_name(dt), diff);
        kn_tensor_release(t);
        kn_tensor_release(u);
        kn_tensor_release(s);
        kn_tensor_release(again);
        kn_tensor_release(other);
    }

    /* Moments over 1e5 samples: mean within 5 sigma of 0, var of 1. */
    int64_t n = 100000;
    kn_tensor *t = create(KN_OP_RANDN, KN_F64, 1, &n, 0, 0, seed, 0);
    if (t) {
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = tl_get(t, i);
            s += v;
            s2 += v * v;
        }
        double mean = s / (double)n, var = s2 / (double)n - mean * mean;
        ok(fabs(mean) < 5 / sqrt((double)n), "randn mean %.5f is about 0", mean);
        ok(fabs(var - 1) < 5 * sqrt(2.0 / (double)n), "randn variance %.5f is about 1", var);
        kn_tensor_release(t);
    }

    /* rand: in (0, 1), or [lo, hi) when hi > lo. */
    for (int di = 0; di < 4; di++) {
        kn_dtype dt = float_dtypes[di];
        int64_t m = 20000;
        kn_tensor *u = create(KN_OP_RAND, dt, 1, &m, 0, 0, seed, 7);
        kn_tensor *r = create(KN_OP_RAND, dt, 1, &m, -2, 3, seed, 7);
        if (!u || !r) continue;
        bool half = dt == KN_BF16 || dt == KN_F16; /* rounding may reach an end */
        int inside = 1, inr = 1;
        double s = 0;
        for (int64_t i = 0; i < m; i++) {
            double a = tl_get(u, i), b = tl_get(r, i);
            inside &= half ? (a >= 0 && a <= 1) : (a > 0 && a < 1);
            inr &= b >= -2 && (half ? b <= 3 : b < 3);
            s += a;
        }
        ok(inside, "rand %s lies in (0, 1)", kn_dtype_name(dt));
        ok(inr, "rand %s with bounds -2, 3 lies in [-2, 3)", kn_dtype_name(dt));
        ok(fabs(s / (double)m - 0.5) < 0.01, "rand %s mean %.4f is about 0.5", kn_dtype_name(dt),
           s / (double)m);
        kn_tensor_release(u);
        kn_tensor_release(r);
    }

    /* randint: integers in [lo, hi), every value hit. */
    static const kn_dtype rd[] = {KN_I64, KN_I32, KN_F32};
    for (int di = 0; di < 3; di++) {
        int64_t m = 5000;
        kn_tensor *r = create(KN_OP_RANDINT, rd[di], 1, &m, -3, 4, seed, 0);
        if (!r) continue;
        int hits[7] = {0}, good = 1;
        for (int64_t i = 0; i < m; i++) {
            double v = tl_get(r, i);
            if (v != floor(v) || v < -3 || v >= 4) good = 0;
            else hits[(int)v + 3]++;
        }
        for (int k = 0; k < 7; k++) good &= hits[k] > 0;
        ok(good, "randint %s in [-3, 4): integers, each value drawn", kn_dtype_name(rd[di]));
        kn_tensor_release(r);
    }
    int64_t zero = 0;
    kn_tensor *e = create(KN_OP_RANDN, KN_F32, 1, &zero, 0, 0, seed, 0);
    ok(e && e->shape[0] == 0, "randn of a zero-size shape");
    kn_tensor_release(e);
    kn_tensor *sc = create(KN_OP_RAND, KN_F32, 0, NULL, 0, 0, seed, 0);
    ok(sc && sc->ndim == 0 && tl_get(sc, 0) == (double)(float)kn_rng_uniform(seed, 0), "rand scalar");
    kn_tensor_release(sc);
}

static void test_errors(void)
{
    kn_opcall c;
    int64_t one = 1;
    kn_tensor *x = tl_new(KN_F32, 1, &one);
    kn_opcall_init(&c, KN_OP_FULL);
    c.n_in = 1;
    c.in[0] = x;
    tl_rejects(&c, KN_ERR_ARG, "full: takes no input tensors, got 1");
    c.n_in = 0;
    c.a.nshape = 2;
    c.a.shape[0] = 2;
    c.a.shape[1] = -3;
    tl_rejects(&c, KN_ERR_SHAPE, "full: size -3 at dim 2 is negative");
    c.a.shape[1] = INT64_C(1) << 40;
    tl_rejects(&c, KN_ERR_OOM, "full: a tensor of that shape would exceed");
    c.a.shape[1] = 3;
    c.a.nshape = 9;
    tl_rejects(&c, KN_ERR_SHAPE, "full: a tensor has at most 8 dims, got 9");
    c.a.nshape = 1;
    c.a.dtype = KN_I32;
    c.a.value = NAN;
    tl_rejects(&c, KN_ERR_ARG, "full: value nan cannot be stored in an i32 tensor");
    c.a.dtype = (kn_dtype)42;
    tl_rejects(&c, KN_ERR_DTYPE, "full: invalid dtype");

    kn_opcall_init(&c, KN_OP_RANDN);
    c.a.dtype = KN_I64;
    tl_rejects(&c, KN_ERR_DTYPE, "randn: needs a float dtype, got i64");
    kn_opcall_init(&c, KN_OP_RAND);
    c.a.value2 = INFINITY;
    tl_rejects(&c, KN_ERR_ARG, "rand: bounds must be finite");
    kn_opcall_init(&c, KN_OP_RANDINT);
    c.a.value = 5;
    c.a.value2 = 3;
    tl_rejects(&c, KN_ERR_ARG, "randint: high (3) must be greater than low (5)");
    c.a.value2 = NAN;
    tl_rejects(&c, KN_ERR_ARG, "randint: high (nan) must be greater than low (5)");
    kn_opcall_init(&c, KN_OP_ARANGE);
    c.a.nshape = 2;
    tl_rejects(&c, KN_ERR_SHAPE, "arange: makes a 1-D tensor, got 2 dims");
    c.a.nshape = 1;
    c.a.value2 = NAN;
    tl_rejects(&c, KN_ERR_ARG, "arange: start and step must be finite");
    kn_tensor_release(x);
}

int main(void)
{
    tl_seed();
    test_full_arange();
    test_random();
    test_errors();
    return done_testing();
}
