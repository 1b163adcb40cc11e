/* t/ops_index.c: the CPU reference for cat, index_select, gather, index_add,
 * tril and triu, against references computed here with naive loops, on fresh
 * random inputs (seed printed) in every layout, with zero-size dims and every
 * dtype; 1-based indices, checked at run time (value and position in the
 * message); then the error messages of shape inference.
 */
#include "ops_testlib.h"

static const kn_dtype all_dtypes[] = {KN_F32, KN_F64, KN_BF16, KN_F16, KN_I32, KN_I64, KN_BOOL};

static kn_dtype rand_dtype(void)
{
    return all_dtypes[tl_int(0, 6)];
}

static int run_ok(kn_opcall *c, const char *name)
{
    kn_status st = tl_run(c);
    if (st != KN_OK) {
        ok(0, "%s", name);
        printf("#   failed: %s\n", kn_last_error());
    }
    return st == KN_OK;
}

static void unflat(int nd, const int64_t *shape, int64_t flat, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
}

static int64_t flat_of(int nd, const int64_t *shape, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < nd; d++) f = f * shape[d] + idx[d];
    return f;
}

/* A random 1-based index tensor of n entries in 1..size (or any value when
 * bad), i32 or i64, contiguous or strided. */
static kn_tensor *rand_index(int nd, const int64_t *shape, int64_t size)
{
    kn_dtype dt = tl_int(0, 1) ? KN_I32 : KN_I64;
    kn_tensor *t = tl_new_layout(dt, nd, shape, tl_int(0, 1) ? TL_CONTIG : TL_STRIDED);
    int64_t n = tl_numel(nd, shape);
    for (int64_t i = 0; i < n; i++) tl_set_i64(t, i, tl_int(1, size));
    return t;
}

/* ---- cat ---- */

static void test_cat(void)
{
    for (int trial = 0; trial < 40; trial++) {
        int nin = trial == 0 ? KN_MAX_INPUTS : (int)tl_int(1, 4);
        int nd = (int)tl_int(1, 4), dim = (int)tl_int(0, nd - 1);
        int64_t base[KN_MAX_DIMS], os[KN_MAX_DIMS], shapes[KN_MAX_INPUTS][KN_MAX_DIMS];
        for (int d = 0; d < nd; d++) base[d] = tl_int(trial % 7 == 6 ? 0 : 1, 4);
        memcpy(os, base, sizeof os);
        os[dim] = 0;
        kn_tensor *in[KN_MAX_INPUTS];
        kn_dtype odt = KN_BOOL;
        bool first = true;
        for (int i = 0; i < nin; i++) {
            memcpy(shapes[i], base, sizeof base);
            shapes[i][dim] = tl_int(0, 3);
            os[dim] += shapes[i][dim];
            kn_dtype dt = trial % 3 == 0 ? KN_F32 : rand_dtype();
            odt = first ? dt : tl_promote(odt, dt);
            first = false;
            in[i] = tl_rand(dt, nd, shapes[i], -1, -20, 20, 1);
        }
        int64_t n = tl_numel(nd, os);
        double *want = malloc(sizeof(double) * ((size_t)n + 1));
        for (int64_t f = 0; f < n; f++) {
            int64_t idx[KN_MAX_DIMS];
            unflat(nd, os, f, idx);
            int k = 0;
            while (idx[dim] >= shapes[k][dim]) idx[dim] -= shapes[k++][dim];
            want[f] = tl_get(in[k], flat_of(nd, shapes[k], idx));
        }
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_CAT);
        c.n_in = nin;
        for (int i = 0; i < nin; i++) c.in[i] = in[i];
        c.a.dim = dim;
        char name[160];
        snprintf(name, sizeof name, "cat of %d %s inputs along dim %d into %s", nin,
                 kn_dtype_name(odt), dim + 1, tl_shape_str(nd, os));
        if (run_ok(&c, name)) {
            if (!tl_meta_is(c.out[0], odt, nd, os)) ok(0, "%s (meta)", name);
            else tl_check(c.out[0], want, "%s", name);
            tl_release_outputs(&c);
        }
        free(want);
        for (int i = 0; i < nin; i++) kn_tensor_release(in[i]);
    }
}

/* ---- index_select and gather ---- */

static void test_index_select(void)
{
    for (int trial = 0; trial < 30; trial++) {
        kn_dtype dt = rand_dtype();
        int64_t shape[KN_MAX_DIMS], os[KN_MAX_DIMS];
        int nd = (int)tl_int(1, 4), dim = (int)tl_int(0, nd - 1);
        for (int d = 0; d < nd; d++) shape[d] = tl_int(d == dim ? 1 : (trial % 9 == 8 ? 0 : 1), 5);
        int64_t k = tl_int(0, 6);
        kn_tensor *x = tl_rand(dt, nd, shape, -1, -50, 50, 1);
        kn_tensor *idx = rand_index(1, &k, shape[dim]);
        memcpy(os, shape, sizeof os);
        os[dim] = k;
        int64_t n = tl_numel(nd, os);
        double *want = malloc(sizeof(double) * ((size_t)n + 1));
        for (int64_t f = 0; f < n; f++) {
            int64_t ix[KN_MAX_DIMS];
            unflat(nd, os, f, ix);
            ix[dim] = tl_get_i64(idx, ix[dim]) - 1;
            want[f] = tl_get(x, flat_of(nd, shape, ix));
        }
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_INDEX_SELECT);
        c.n_in = 2;
        c.in[0] = x;
        c.in[1] = idx;
        c.a.dim = dim;
        char name[160];
        snprintf(name, sizeof name, "index_select %s %s dim %d with %lld %s indices", kn_dtype_name(dt),
                 tl_shape_str(nd, shape), dim + 1, (long long)k, kn_dtype_name(idx->dtype));
        if (run_ok(&c, name)) {
            if (!tl_meta_is(c.out[0], dt, nd, os)) ok(0, "%s (meta)", name);
            else tl_check(c.out[0], want, "%s", name);
            tl_release_outputs(&c);
        }
        /* The same call with one index out of range is refused at run time. */
        if (k > 0) {
            int64_t pos = tl_int(0, k - 1), bad = tl_int(0, 1) ? 0 : shape[dim] + 1;
            tl_set_i64(idx, pos, bad);
            char msg[128];
            snprintf(msg, sizeof msg, "index_select: index %lld at position %lld is out of range 1..%lld",
                     (long long)bad, (long long)pos + 1, (long long)shape[dim]);
            kn_status st = tl_run(&c);
            if (!ok(st == KN_ERR_ARG && c.out[0] == NULL && strstr(kn_last_error(), msg),
                    "index_select refuses index %lld", (long long)bad))
                printf("#   got %d '%s'\n#   want '%s'\n", (int)st, kn_last_error(), msg);
            tl_release_outputs(&c);
        }
        free(want);
        kn_tensor_release(x);
        kn_tensor_release(idx);
    }
}

static void test_gather(void)
{
    for (int trial = 0; trial < 30; trial++) {
        kn_dtype dt = rand_dtype();
        int64_t xs[KN_MAX_DIMS], is[KN_MAX_DIMS];
        int nd = (int)tl_int(1, 4), dim = (int)tl_int(0, nd - 1);
        for (int d = 0; d < nd; d++) {
            xs[d] = tl_int(1, 5);
            is[d] = d == dim ? tl_int(0, 6) : tl_int(trial % 9 == 8 ? 0 : 1, xs[d]);
        }
        kn_tensor *x = tl_rand(dt, nd, xs, -1, -50, 50, 1);
        kn_tensor *idx = rand_index(nd, is, xs[dim]);
        int64_t n = tl_numel(nd, is);
        double *want = malloc(sizeof(double) * ((size_t)n + 1));
        for (int64_t f = 0; f < n; f++) {
            int64_t ix[KN_MAX_DIMS];
            unflat(nd, is, f, ix);
            ix[dim] = tl_get_i64(idx, f) - 1;
            want[f] = tl_get(x, flat_of(nd, xs, ix));
        }
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_GATHER);
        c.n_in = 2;
        c.in[0] = x;
        c.in[1] = idx;
        c.a.dim = dim;
        char name[160];
        snprintf(name, sizeof name, "gather %s %s dim %d with %s index %s", kn_dtype_name(dt),
                 tl_shape_str(nd, xs), dim + 1, kn_dtype_name(idx->dtype), tl_shape_str(nd, is));
        if (run_ok(&c, name)) {
            if (!tl_meta_is(c.out[0], dt, nd, is)) ok(0, "%s (meta)", name);
            else tl_check(c.out[0], want, "%s", name);
            tl_release_outputs(&c);
        }
        if (n > 0) {
            int64_t pos = tl_int(0, n - 1), p1[KN_MAX_DIMS];
            unflat(nd, is, pos, p1);
            for (int d = 0; d < nd; d++) p1[d]++;
            tl_set_i64(idx, pos, -7);
            char msg[160];
            snprintf(msg, sizeof msg, "gather: index -7 at position %s is out of range 1..%lld",
                     tl_shape_str(nd, p1), (long long)xs[dim]);
            kn_status st = tl_run(&c);
            if (!ok(st == KN_ERR_ARG && strstr(kn_last_error(), msg), "gather refuses index -7"))
                printf("#   got %d '%s'\n#   want '%s'\n", (int)st, kn_last_error(), msg);
            tl_release_outputs(&c);
        }
        free(want);
        kn_tensor_release(x);
        kn_tensor_release(idx);
    }
}

/* ---- index_add ---- */

/* v rounded to dt the way a store and a load do it (kn_dtype's conversions,
 * tested in t/dtype.c), so the reference rounds after each add as the
 * kernel's per-add stores do. */
static double round_to(kn_dtype dt, double v)
{
    char buf[8];
    kn_store_f64(buf, dt, v);
    return kn_load_f64(buf, dt);
}

static void test_index_add(void)
{
    for (int trial = 0; trial < 30; trial++) {
        kn_dtype dt = rand_dtype();
        int64_t xs[KN_MAX_DIMS], ss[KN_MAX_DIMS];
        int nd = (int)tl_int(1, 4), dim = (int)tl_int(0, nd - 1);
        for (int d = 0; d < nd; d++) xs[d] = tl_int(d == dim ? 1 : (trial % 9 == 8 ? 0 : 1), 4);
        int64_t k = tl_int(0, 6);
        memcpy(ss, xs, sizeof ss);
        ss[dim] = k;
        kn_tensor *x = tl_rand(dt, nd, xs, -1, -9, 9, 0);
        kn_tensor *src = tl_rand(dt, nd, ss, -1, -9, 9, 0);
        kn_tensor *idx = rand_index(1, &k, xs[dim]); /* duplicates likely: they accumulate */
        int64_t n = tl_numel(nd, xs), ns = tl_numel(nd, ss);
        double *want = tl_values(x);
        for (int64_t f = 0; f < ns; f++) { /* src in row-major order, as the kernel adds */
            int64_t ix[KN_MAX_DIMS];
            unflat(nd, ss, f, ix);
            double s = tl_get(src, f);
            ix[dim] = tl_get_i64(idx, ix[dim]) - 1;
            int64_t o = flat_of(nd, xs, ix);
            want[o] = dt == KN_BOOL ? (want[o] != 0 || s != 0) : round_to(dt, want[o] + s);
        }
        (void)n;
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_INDEX_ADD);
        c.n_in = 3;
        c.in[0] = x;
        c.in[1] = idx;
        c.in[2] = src;
        c.a.dim = dim;
        char name[160];
        snprintf(name, sizeof name, "index_add %s %s dim %d with %lld indices", kn_dtype_name(dt),
                 tl_shape_str(nd, xs), dim + 1, (long long)k);
        if (run_ok(&c, name)) {
            if (!tl_meta_is(c.out[0], dt, nd, xs)) ok(0, "%s (meta)", name);
            else tl_check(c.out[0], want, "%s", name);
            tl_release_outputs(&c);
        }
        if (k > 0) {
            tl_set_i64(idx, k - 1, xs[dim] + 3);
            char msg[128];
            snprintf(msg, sizeof msg, "index_add: index %lld at position %lld is out of range 1..%lld",
                     (long long)xs[dim] + 3, (long long)k, (long long)xs[dim]);
            kn_status st = tl_run(&c);
            ok(st == KN_ERR_ARG && strstr(kn_last_error(), msg), "index_add refuses index %lld",
               (long long)xs[dim] + 3);
            tl_release_outputs(&c);
        }
        free(want);
        kn_tensor_release(x);
        kn_tensor_release(src);
        kn_tensor_release(idx);
    }
}

/* ---- tril / triu ---- */

static void test_tri(void)
{
    for (int trial = 0; trial < 40; trial++) {
        kn_op op = trial % 2 ? KN_OP_TRIU : KN_OP_TRIL;
        kn_dtype dt = rand_dtype();
        int64_t shape[KN_MAX_DIMS];
        int nd = (int)tl_int(2, 4);
        for (int d = 0; d < nd; d++) shape[d] = tl_int(trial % 11 == 10 ? 0 : 1, 6);
        int64_t diag = trial < 4 ? (trial < 2 ? INT64_MAX : INT64_MIN) : tl_int(-7, 7);
        kn_tensor *x = tl_rand(dt, nd, shape, -1, -9, 9, 1);
        int64_t n = tl_numel(nd, shape);
        double *want = tl_values(x);
        for (int64_t f = 0; f < n; f++) {
            int64_t ix[KN_MAX_DIMS];
            unflat(nd, shape, f, ix);
            /* In double, so that the extreme diagonals cannot overflow. */
            double dj = (double)ix[nd - 1] - (double)ix[nd - 2];
            bool keep = op == KN_OP_TRIL ? dj <= (double)diag : dj >= (double)diag;
            if (!keep) want[f] = 0;
        }
        kn_opcall c;
        kn_opcall_init(&c, op);
        c.n_in = 1;
        c.in[0] = x;
        c.a.diagonal = diag;
        char name[160];
        snprintf(name, sizeof name, "%s %s %s diagonal %lld", kn_op_name(op), kn_dtype_name(dt),
                 tl_shape_str(nd, shape), (long long)diag);
        if (run_ok(&c, name)) {
            if (!tl_meta_is(c.out[0], dt, nd, shape)) ok(0, "%s (meta)", name);
            else tl_check(c.out[0], want, "%s", name);
            tl_release_outputs(&c);
        }
        free(want);
        kn_tensor_release(x);
    }
}

/* ---- errors ---- */

static void test_errors(void)
{
    int64_t s23[2] = {2, 3}, s24[2] = {2, 4}, s3[1] = {3}, s22[2] = {2, 2}, s5[1] = {5};
    kn_tensor *a = tl_new(KN_F32, 2, s23), *b = tl_new(KN_F32, 2, s24), *v = tl_new(KN_F32, 1, s3);
    kn_tensor *sc = tl_new(KN_F32, 0, NULL), *i2 = tl_new(KN_I64, 2, s22), *i1 = tl_new(KN_I32, 1, s3);
    kn_tensor *f1 = tl_new(KN_F32, 1, s3), *i5 = tl_new(KN_I64, 1, s5), *ai = tl_new(KN_I32, 2, s23);
    kn_opcall c;

    kn_opcall_init(&c, KN_OP_CAT);
    tl_rejects(&c, KN_ERR_ARG, "cat: expects 1 to 8 inputs (tensors), got 0");
    c.n_in = 2;
    c.in[0] = a;
    c.in[1] = b;
    tl_rejects(&c, KN_ERR_SHAPE, "cat: input 2 has size 4 at dim 2 but input 1 has 3 (only dim 1 may differ)");
    c.a.dim = 1;
    kn_meta m[KN_MAX_OUTPUTS];
    int nout = 0;
    ok(kn_op_infer(&c, m, &nout) == KN_OK && m[0].shape[1] == 7, "cat {2,3} and {2,4} along dim 2");
    c.a.dim = 2;
    tl_rejects(&c, KN_ERR_ARG, "cat: dim 3 out of range for a tensor with 2 dims");
    c.a.dim = 0;
    c.in[1] = v;
    tl_rejects(&c, KN_ERR_SHAPE, "cat: input 2 has 1 dims but input 1 has 2");
    c.in[0] = sc;
    c.in[1] = sc;
    tl_rejects(&c, KN_ERR_SHAPE, "cat: cannot concatenate 0-dim tensors");

    kn_opcall_init(&c, KN_OP_INDEX_SELECT);
    c.n_in = 2;
    c.in[0] = a;
    c.in[1] = f1;
    tl_rejects(&c, KN_ERR_DTYPE, "index_select: index must be i32 or i64, got f32");
    c.in[1] = i2;
    tl_rejects(&c, KN_ERR_SHAPE, "index_select: index must be 1-D, got shape {2,2}");
    c.in[0] = sc;
    c.in[1] = i1;
    tl_rejects(&c, KN_ERR_SHAPE, "index_select: x needs at least 1 dim, got 0");
    c.in[0] = a;
    c.a.dim = 2;
    tl_rejects(&c, KN_ERR_ARG, "index_select: dim 3 out of range for a tensor with 2 dims");

    kn_opcall_init(&c, KN_OP_GATHER);
    c.n_in = 2;
    c.in[0] = a;
    c.in[1] = i1;
    tl_rejects(&c, KN_ERR_SHAPE, "gather: index must have as many dims as x (2), got shape {3}");
    int64_t s33[2] = {3, 3};
    kn_tensor *i33 = tl_new(KN_I64, 2, s33);
    c.in[1] = i33;
    c.a.dim = 1;
    tl_rejects(&c, KN_ERR_SHAPE, "gather: index of shape {3,3} is larger than x of shape {2,3} at dim 1");
    kn_tensor_release(i33);

    kn_opcall_init(&c, KN_OP_INDEX_ADD);
    c.n_in = 3;
    c.in[0] = a;
    c.in[1] = i5;
    c.in[2] = a;
    tl_rejects(&c, KN_ERR_SHAPE, "index_add: source must have x's shape {2,3} with 5 at dim 1 (the index length), got {2,3}");
    c.in[2] = ai;
    tl_rejects(&c, KN_ERR_DTYPE, "index_add: source must have x's dtype f32, got i32");
    c.n_in = 2;
    tl_rejects(&c, KN_ERR_ARG, "index_add: expects 3 inputs (x, index, source), got 2");

    kn_opcall_init(&c, KN_OP_TRIL);
    c.n_in = 1;
    c.in[0] = v;
    tl_rejects(&c, KN_ERR_SHAPE, "tril: the input needs at least 2 dims, got 1");
    c.op = KN_OP_TRIU;
    c.in[0] = sc;
    tl_rejects(&c, KN_ERR_SHAPE, "triu: the input needs at least 2 dims, got 0");

    kn_tensor_release(a);
    kn_tensor_release(b);
    kn_tensor_release(v);
    kn_tensor_release(sc);
    kn_tensor_release(i2);
    kn_tensor_release(i1);
    kn_tensor_release(f1);
    kn_tensor_release(i5);
    kn_tensor_release(ai);
}

int main(void)
{
    tl_seed();
    test_cat();
    test_index_select();
    test_gather();
    test_index_add();
    test_tri();
    test_errors();
    return done_testing();
}
