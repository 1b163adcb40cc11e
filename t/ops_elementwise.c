/* t/ops_elementwise.c: the CPU reference for unary, binary, compare, where,
 * masked_fill, cast and contiguous, against float64 references computed here
 * with naive loops, on fresh random inputs (seed printed) in every layout
 * (contiguous, transposed, strided with an offset, stride-0 broadcast), with
 * broadcasting, zero-size dims, 0-dim scalars, NaN / inf / -0, and every
 * dtype an op accepts. Then shape inference's error messages.
 */
#include "ops_testlib.h"
#include "kn_clock.h"

static const kn_dtype all_dtypes[] = {KN_F32, KN_F64, KN_BF16, KN_F16, KN_I32, KN_I64, KN_BOOL};
#define N_DTYPES 7

/* ---- references ---- */

static double ref_unary(kn_op op, double a)
{
    switch (op) {
    case KN_OP_NEG: return -a;
    case KN_OP_RELU: return isnan(a) ? a : a > 0 ? a : 0.0;
    case KN_OP_GELU: return a * 0.5 * erfc(-a / sqrt(2.0)); /* x * Phi(x) */
    case KN_OP_GELU_TANH: return 0.5 * a * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (a + 0.044715 * a * a * a)));
    case KN_OP_SILU: return a * (1.0 / (1.0 + exp(-a)));
    case KN_OP_TANH: return tanh(a);
    case KN_OP_SIGMOID: return 1.0 / (1.0 + exp(-a));
    case KN_OP_EXP: return exp(a);
    case KN_OP_LOG: return log(a);
    case KN_OP_SQRT: return sqrt(a);
    case KN_OP_RSQRT: return 1.0 / sqrt(a);
    case KN_OP_ABS: return fabs(a);
    case KN_OP_ERF: return erf(a);
    case KN_OP_FLOOR: return floor(a);
    case KN_OP_CEIL: return ceil(a);
    case KN_OP_ROUND: return a - floor(a) == 0.5 ? 2.0 * floor(a / 2.0 + 0.5) : floor(a + 0.5); /* half to even */
    case KN_OP_SIN: return sin(a);
    case KN_OP_COS: return cos(a);
    case KN_OP_LOGICAL_NOT: return a == 0.0;
    default: return a; /* cast */
    }
}

static double ref_binary(kn_op op, double a, double b)
{
    switch (op) {
    case KN_OP_ADD: return a + b;
    case KN_OP_SUB: return a - b;
    case KN_OP_MUL: return a * b;
    case KN_OP_DIV: return a / b;
    case KN_OP_POW: return pow(a, b);
    case KN_OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case KN_OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    case KN_OP_GT: return a > b;
    case KN_OP_LT: return a < b;
    case KN_OP_GE: return a >= b;
    case KN_OP_LE: return a <= b;
    case KN_OP_EQ: return a == b;
    case KN_OP_NE: return a != b;
    default: return NAN;
    }
}

/* The output dtype of a unary op, as the design says. */
static kn_dtype unary_dtype(kn_op op, kn_dtype in, kn_dtype cast_to)
{
    if (op == KN_OP_NEG || op == KN_OP_ABS || op == KN_OP_RELU) return in;
    if (op == KN_OP_LOGICAL_NOT) return KN_BOOL;
    if (op == KN_OP_CAST) return cast_to;
    return tl_is_float(in) ? in : KN_F32;
}

/* Run c, check the output's meta, then its values against want (the
 * reference of every output element). One TAP line. */
static void run_check(kn_opcall *c, kn_dtype dt, int ndim, const int64_t *shape,
                      const double *want, const char *name)
{
    kn_status st = tl_run(c);
    if (st != KN_OK) {
        ok(0, "%s", name);
        printf("#   failed: %s\n", kn_last_error());
        return;
    }
    if (!tl_meta_is(c->out[0], dt, ndim, shape)) ok(0, "%s (meta)", name);
    else tl_check(c->out[0], want, "%s", name);
    tl_release_outputs(c);
}

/* ---- unary ---- */

static void test_unary(void)
{
    for (int op = KN_OP_NEG; op <= KN_OP_CAST; op++) {
        for (int di = 0; di < N_DTYPES; di++) {
            kn_dtype dt = all_dtypes[di];
            if (dt == KN_BOOL && op == KN_OP_NEG) continue; /* rejected, see errors */
            for (int trial = 0; trial < 2; trial++) {
                int64_t shape[KN_MAX_DIMS];
                int nd = tl_shape(shape, 4, 6, 8);
                bool domain_pos = op == KN_OP_LOG || op == KN_OP_SQRT || op == KN_OP_RSQRT;
                kn_tensor *x = tl_rand(dt, nd, shape, -1, domain_pos ? -0.5 : -4,
                                       domain_pos ? 6 : 4, 1);
                kn_dtype cast_to = all_dtypes[tl_int(0, N_DTYPES - 1)];
                kn_dtype odt = unary_dtype((kn_op)op, dt, cast_to);
                int64_t n = tl_numel(nd, shape);
                double *xv = tl_values(x), *want = malloc(sizeof(double) * (size_t)(n + 1));
                for (int64_t i = 0; i < n; i++) want[i] = ref_unary((kn_op)op, xv[i]);
                kn_opcall c;
                kn_opcall_init(&c, (kn_op)op);
                c.a.dtype = cast_to;
                c.n_in = 1;
                c.in[0] = x;
                char name[160];
                snprintf(name, sizeof name, "%s %s %s %s%s%s", kn_op_name((kn_op)op),
                         kn_dtype_name(dt), tl_shape_str(nd, shape),
                         kn_tensor_is_contiguous(x) ? "contiguous" : "view",
                         op == KN_OP_CAST ? " -> " : "",
                         op == KN_OP_CAST ? kn_dtype_name(cast_to) : "");
                run_check(&c, odt, nd, shape, want, name);
                free(xv);
                free(want);
                kn_tensor_release(x);
            }
        }
    }
}

/* ---- binary and compare, with broadcasting ---- */

static const kn_dtype pairs[][2] = {
    {KN_F32, KN_F32}, {KN_F64, KN_F32}, {KN_BF16, KN_BF16}, {KN_F16, KN_F16},
    {KN_BF16, KN_F16}, {KN_I32, KN_I32}, {KN_I32, KN_I64},  {KN_I64, KN_F32},
    {KN_BOOL, KN_I32}, {KN_F16, KN_BOOL}, {KN_BOOL, KN_BOOL},
};
#define N_PAIRS (int)(sizeof pairs / sizeof pairs[0])

static void fill_operand(kn_tensor *t, kn_op op, int which)
{
    int64_t n = tl_numel(t->ndim, t->shape);
    bool fl = tl_is_float(t->dtype);
    for (int64_t i = 0; i < n; i++) {
        double v;
        if (op == KN_OP_POW && which == 0) v = tl_value(t->dtype, fl ? -0.5 : -5, fl ? 3 : 5, 1);
        else if (op == KN_OP_POW) v = tl_value(t->dtype, fl ? -2 : 0, fl ? 2 : 4, 1);
        else if (!fl) v = tl_value(t->dtype, -20, 20, 0);
        else if (tl_int(0, 3) == 0) v = (double)tl_int(-3, 3); /* ties for comparisons */
        else v = tl_value(t->dtype, -4, 4, 1);
        tl_set(t, i, v);
    }
}

static void test_binary(void)
{
    for (int op = KN_OP_ADD; op <= KN_OP_NE; op++) {
        for (int p = 0; p < N_PAIRS; p++) {
            kn_dtype da = pairs[p][0], db = pairs[p][1];
            kn_dtype pd = tl_promote(da, db);
            if (op == KN_OP_SUB && pd == KN_BOOL) continue; /* rejected, see errors */
            for (int trial = 0; trial < 2; trial++) {
                int64_t so[KN_MAX_DIMS], sa[KN_MAX_DIMS], sb[KN_MAX_DIMS], sr[KN_MAX_DIMS];
                int no = tl_shape(so, 4, 5, 10), na, nb, nr;
                na = tl_bcast_from(no, so, sa);
                nb = tl_bcast_from(no, so, sb);
                if (trial == 1 && tl_int(0, 1)) { /* swap which side is the bigger one */
                    na = no;
                    memcpy(sa, so, sizeof so);
                }
                tl_bcast(na, sa, nb, sb, &nr, sr);
                kn_tensor *a = tl_new_layout(da, na, sa, (int)tl_int(0, TL_NLAYOUTS - 1));
                kn_tensor *b = tl_new_layout(db, nb, sb, (int)tl_int(0, TL_NLAYOUTS - 1));
                fill_operand(a, (kn_op)op, 0);
                fill_operand(b, (kn_op)op, 1);
                double *av = tl_values(a), *bv = tl_values(b);
                int64_t n = tl_numel(nr, sr);
                double *want = malloc(sizeof(double) * (size_t)(n + 1));
                for (int64_t i = 0; i < n; i++)
                    want[i] = ref_binary((kn_op)op, av[tl_bcast_index(nr, sr, i, na, sa)],
                                         bv[tl_bcast_index(nr, sr, i, nb, sb)]);
                kn_dtype odt = op >= KN_OP_GT                           ? KN_BOOL
                               : op == KN_OP_DIV && !tl_is_float(pd) ? KN_F32
                                                                       : pd;
                kn_opcall c;
                kn_opcall_init(&c, (kn_op)op);
                c.n_in = 2;
                c.in[0] = a;
                c.in[1] = b;
                char name[200];
                snprintf(name, sizeof name, "%s %s%s %s%s", kn_op_name((kn_op)op),
                         kn_dtype_name(da), tl_shape_str(na, sa), kn_dtype_name(db),
                         tl_shape_str(nb, sb));
                run_check(&c, odt, nr, sr, want, name);
                free(av);
                free(bv);
                free(want);
                kn_tensor_release(a);
                kn_tensor_release(b);
            }
        }
    }
}

/* ---- where and masked_fill ---- */

static void test_where(void)
{
    static const kn_dtype wp[][2] = {{KN_F32, KN_F32}, {KN_F32, KN_F64}, {KN_BF16, KN_F16},
                                     {KN_I32, KN_I64}, {KN_I64, KN_F32}, {KN_BOOL, KN_BOOL},
                                     {KN_F16, KN_F16}};
    for (int p = 0; p < (int)(sizeof wp / sizeof wp[0]); p++)
        for (int trial = 0; trial < 3; trial++) {
            int64_t so[KN_MAX_DIMS], s[3][KN_MAX_DIMS], s01[KN_MAX_DIMS], sr[KN_MAX_DIMS];
            int no = tl_shape(so, 4, 5, 10), nd[3], n01, nr;
            for (int k = 0; k < 3; k++) nd[k] = tl_bcast_from(no, so, s[k]);
            tl_bcast(nd[0], s[0], nd[1], s[1], &n01, s01);
            tl_bcast(n01, s01, nd[2], s[2], &nr, sr);
            kn_tensor *cond = tl_rand(KN_BOOL, nd[0], s[0], -1, 0, 1, 0);
            kn_tensor *x = tl_rand(wp[p][0], nd[1], s[1], -1, -9, 9, 1);
            kn_tensor *y = tl_rand(wp[p][1], nd[2], s[2], -1, -9, 9, 1);
            double *cv = tl_values(cond), *xv = tl_values(x), *yv = tl_values(y);
            int64_t n = tl_numel(nr, sr);
            double *want = malloc(sizeof(double) * (size_t)(n + 1));
            for (int64_t i = 0; i < n; i++)
                want[i] = cv[tl_bcast_index(nr, sr, i, nd[0], s[0])] != 0
                              ? xv[tl_bcast_index(nr, sr, i, nd[1], s[1])]
                              : yv[tl_bcast_index(nr, sr, i, nd[2], s[2])];
            kn_opcall c;
            kn_opcall_init(&c, KN_OP_WHERE);
            c.n_in = 3;
            c.in[0] = cond;
            c.in[1] = x;
            c.in[2] = y;
            char name[200];
            snprintf(name, sizeof name, "where bool%s %s%s %s%s", tl_shape_str(nd[0], s[0]),
                     kn_dtype_name(x->dtype), tl_shape_str(nd[1], s[1]), kn_dtype_name(y->dtype),
                     tl_shape_str(nd[2], s[2]));
            run_check(&c, tl_promote(wp[p][0], wp[p][1]), nr, sr, want, name);
            free(cv);
            free(xv);
            free(yv);
            free(want);
            kn_tensor_release(cond);
            kn_tensor_release(x);
            kn_tensor_release(y);
        }
}

static void test_masked_fill(void)
{
    for (int di = 0; di < N_DTYPES; di++)
        for (int trial = 0; trial < 3; trial++) {
            kn_dtype dt = all_dtypes[di];
            int64_t sx[KN_MAX_DIMS], sm[KN_MAX_DIMS];
            int nx = tl_shape(sx, 4, 5, 10), nm = tl_bcast_from(nx, sx, sm);
            kn_tensor *x = tl_rand(dt, nx, sx, -1, -9, 9, 1);
            kn_tensor *m = tl_rand(KN_BOOL, nm, sm, -1, 0, 1, 0);
            double value = tl_is_float(dt) ? (trial == 2 ? -INFINITY : tl_value(dt, -5, 5, 0))
                                           : (double)tl_int(dt == KN_BOOL ? 0 : -5, dt == KN_BOOL ? 1 : 5);
            double *xv = tl_values(x), *mv = tl_values(m);
            int64_t n = tl_numel(nx, sx);
            double *want = malloc(sizeof(double) * (size_t)(n + 1));
            for (int64_t i = 0; i < n; i++)
                want[i] = mv[tl_bcast_index(nx, sx, i, nm, sm)] != 0 ? value : xv[i];
            kn_opcall c;
            kn_opcall_init(&c, KN_OP_MASKED_FILL);
            c.n_in = 2;
            c.in[0] = x;
            c.in[1] = m;
            c.a.value = value;
            char name[200];
            snprintf(name, sizeof name, "masked_fill %s%s mask%s value %g", kn_dtype_name(dt),
                     tl_shape_str(nx, sx), tl_shape_str(nm, sm), value);
            run_check(&c, dt, nx, sx, want, name);
            free(xv);
            free(mv);
            free(want);
            kn_tensor_release(x);
            kn_tensor_release(m);
        }
}

/* ---- contiguous and cast: byte-exact copies, conversions ---- */

static void test_copy(void)
{
    for (int di = 0; di < N_DTYPES; di++)
        for (int layout = 0; layout < TL_NLAYOUTS; layout++) {
            kn_dtype dt = all_dtypes[di];
            int64_t shape[KN_MAX_DIMS];
            int nd = tl_shape(shape, 5, 5, 12);
            kn_tensor *x = tl_new_layout(dt, nd, shape, layout);
            int64_t n = tl_numel(nd, shape);
            /* i64 values beyond 2^53 catch a copy that goes through double. */
            for (int64_t i = 0; i < n; i++) {
                if (dt == KN_I64) tl_set_i64(x, i, (int64_t)(tl_u64() >> 1) * (tl_int(0, 1) ? 1 : -1));
                else tl_set(x, i, tl_value(dt, -100, 100, 1));
            }
            kn_opcall c;
            kn_opcall_init(&c, KN_OP_CONTIGUOUS);
            c.n_in = 1;
            c.in[0] = x;
            kn_status st = tl_run(&c);
            /* (kn_tensor_is_contiguous says no for some zero-size shapes.) */
            int good = st == KN_OK && tl_meta_is(c.out[0], dt, nd, shape) &&
                       (n == 0 || kn_tensor_is_contiguous(c.out[0]));
            size_t es = kn_dtype_size(dt);
            for (int64_t i = 0; good && i < n; i++)
                good = memcmp(tl_ptr(c.out[0], i), tl_ptr(x, i), es) == 0;
            ok(good, "contiguous %s %s from a %s view is byte-exact", kn_dtype_name(dt),
               tl_shape_str(nd, shape), tl_layout_name[layout]);
            if (st != KN_OK) printf("#   %s\n", kn_last_error());
            tl_release_outputs(&c);
            kn_tensor_release(x);
        }
}

static void test_cast(void)
{
    for (int di = 0; di < N_DTYPES; di++)
        for (int dj = 0; dj < N_DTYPES; dj++) {
            kn_dtype from = all_dtypes[di], to = all_dtypes[dj];
            int64_t shape[KN_MAX_DIMS];
            int nd = tl_shape(shape, 3, 7, 0);
            kn_tensor *x = tl_rand(from, nd, shape, -1, -300, 300, 1);
            int64_t n = tl_numel(nd, shape);
            double *want = tl_values(x);
            kn_opcall c;
            kn_opcall_init(&c, KN_OP_CAST);
            c.a.dtype = to;
            c.n_in = 1;
            c.in[0] = x;
            char name[100];
            snprintf(name, sizeof name, "cast %s -> %s %s", kn_dtype_name(from), kn_dtype_name(to),
                     tl_shape_str(nd, shape));
            (void)n;
            run_check(&c, to, nd, shape, want, name);
            free(want);
            kn_tensor_release(x);
        }
    /* Exact i64 -> i64 beyond 2^53, and saturation / NaN into integers. */
    int64_t one = 3;
    kn_tensor *big = tl_new(KN_I64, 1, &one);
    tl_set_i64(big, 0, INT64_MAX);
    tl_set_i64(big, 1, (INT64_C(1) << 53) + 1);
    tl_set_i64(big, 2, INT64_MIN);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CAST);
    c.a.dtype = KN_I64;
    c.n_in = 1;
    c.in[0] = big;
    ok(tl_run(&c) == KN_OK && tl_get_i64(c.out[0], 0) == INT64_MAX &&
           tl_get_i64(c.out[0], 1) == (INT64_C(1) << 53) + 1 && tl_get_i64(c.out[0], 2) == INT64_MIN,
       "cast i64 -> i64 is exact beyond 2^53");
    tl_release_outputs(&c);
    kn_tensor_release(big);

    kn_tensor *f = tl_new(KN_F32, 1, &one);
    tl_set(f, 0, NAN);
    tl_set(f, 1, INFINITY);
    tl_set(f, 2, -1e20);
    kn_opcall_init(&c, KN_OP_CAST);
    c.a.dtype = KN_I32;
    c.n_in = 1;
    c.in[0] = f;
    ok(tl_run(&c) == KN_OK && tl_get_i64(c.out[0], 0) == 0 &&
           tl_get_i64(c.out[0], 1) == INT32_MAX && tl_get_i64(c.out[0], 2) == INT32_MIN,
       "cast f32 -> i32: NaN is 0, out of range saturates");
    tl_release_outputs(&c);
    kn_tensor_release(f);
}

/* ---- a mid-size f32 pass over the fast paths, with timings as comments ---- */

static void test_fast_paths(void)
{
    int64_t s2[2] = {512, 1024}, row[1] = {1024}, col[2] = {512, 1};
    kn_tensor *a = tl_rand(KN_F32, 2, s2, TL_CONTIG, -2, 2, 0);
    kn_tensor *b = tl_rand(KN_F32, 2, s2, TL_CONTIG, -2, 2, 0);
    kn_tensor *r = tl_rand(KN_F32, 1, row, TL_CONTIG, -2, 2, 0);
    kn_tensor *k = tl_rand(KN_F32, 2, col, TL_CONTIG, -2, 2, 0);
    kn_tensor *s = tl_rand(KN_F32, 0, NULL, TL_CONTIG, -2, 2, 0);
    kn_tensor *bt = tl_rand(KN_F32, 2, s2, TL_TRANSPOSED, -2, 2, 0);
    kn_tensor *rhs[] = {b, r, k, s, bt};
    const char *what[] = {"same shape", "row broadcast", "column broadcast", "scalar",
                          "transposed"};
    double *av = tl_values(a);
    int64_t n = 512 * 1024;
    double *want = malloc(sizeof(double) * (size_t)n);
    for (int j = 0; j < 5; j++) {
        double *bv = tl_values(rhs[j]);
        for (int64_t i = 0; i < n; i++)
            want[i] = av[i] * bv[tl_bcast_index(2, s2, i, rhs[j]->ndim, rhs[j]->shape)];
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_MUL);
        c.n_in = 2;
        c.in[0] = a;
        c.in[1] = rhs[j];
        double t0 = kn_clock_s();
        kn_status st = tl_run(&c);
        double t1 = kn_clock_s();
        printf("# mul f32 {512,1024} %s: %.2f ms\n", what[j], (t1 - t0) * 1e3);
        if (st != KN_OK) ok(0, "mul f32 %s: %s", what[j], kn_last_error());
        else tl_check(c.out[0], want, "mul f32 {512,1024} %s", what[j]);
        tl_release_outputs(&c);
        free(bv);
    }
    for (int64_t i = 0; i < n; i++) want[i] = ref_unary(KN_OP_GELU, av[i]);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_GELU);
    c.n_in = 1;
    c.in[0] = a;
    double t0 = kn_clock_s();
    kn_status st = tl_run(&c);
    printf("# gelu f32 {512,1024}: %.2f ms\n", (kn_clock_s() - t0) * 1e3);
    if (st != KN_OK) ok(0, "gelu f32: %s", kn_last_error());
    else tl_check(c.out[0], want, "gelu f32 {512,1024}");
    tl_release_outputs(&c);
    free(want);
    free(av);
    for (int j = 0; j < 5; j++) kn_tensor_release(rhs[j]);
    kn_tensor_release(a);
}

/* ---- errors ---- */

static void test_errors(void)
{
    int64_t s23[2] = {2, 3}, s43[2] = {4, 3}, s4[1] = {4}, s34[2] = {3, 4};
    kn_tensor *a = tl_new(KN_F32, 2, s23), *b = tl_new(KN_F32, 2, s43);
    kn_tensor *bo = tl_new(KN_BOOL, 2, s23), *i32 = tl_new(KN_I32, 1, s4);
    kn_tensor *m34 = tl_new(KN_BOOL, 2, s34);
    kn_opcall c;

    kn_opcall_init(&c, KN_OP_ADD);
    c.n_in = 2;
    c.in[0] = a;
    c.in[1] = b;
    tl_rejects(&c, KN_ERR_SHAPE, "add: shapes {2,3} and {4,3} cannot be broadcast");
    ok(tl_run(&c) == KN_ERR_SHAPE && c.n_out == 0 && c.out[0] == NULL,
       "eager add of bad shapes fails and leaves no output");
    c.op = KN_OP_GT;
    tl_rejects(&c, KN_ERR_SHAPE, "gt: shapes {2,3} and {4,3} cannot be broadcast");
    c.n_in = 1;
    c.op = KN_OP_ADD;
    tl_rejects(&c, KN_ERR_ARG, "add: expects 2 inputs (two tensors), got 1");
    c.n_in = 2;
    c.in[1] = NULL;
    tl_rejects(&c, KN_ERR_ARG, "add: input 2 is missing");
    c.n_in = 9;
    tl_rejects(&c, KN_ERR_ARG, "add: 9 inputs given, at most 8");
    c.n_in = -1;
    tl_rejects(&c, KN_ERR_ARG, "add: -1 inputs given");

    kn_opcall_init(&c, KN_OP_SUB);
    c.n_in = 2;
    c.in[0] = bo;
    c.in[1] = bo;
    tl_rejects(&c, KN_ERR_DTYPE, "sub: not defined for two bool tensors");
    kn_opcall_init(&c, KN_OP_NEG);
    c.n_in = 1;
    c.in[0] = bo;
    tl_rejects(&c, KN_ERR_DTYPE, "neg: not defined for a bool tensor");
    kn_opcall_init(&c, KN_OP_EXP);
    tl_rejects(&c, KN_ERR_ARG, "exp: expects 1 input (a tensor), got 0");
    kn_opcall_init(&c, KN_OP_CAST);
    c.n_in = 1;
    c.in[0] = a;
    c.a.dtype = KN_DTYPE_COUNT;
    tl_rejects(&c, KN_ERR_DTYPE, "cast: invalid target dtype");

    kn_opcall_init(&c, KN_OP_WHERE);
    c.n_in = 3;
    c.in[0] = a;
    c.in[1] = a;
    c.in[2] = a;
    tl_rejects(&c, KN_ERR_DTYPE, "where: condition must be bool, got f32");
    c.in[0] = bo;
    c.in[2] = b;
    tl_rejects(&c, KN_ERR_SHAPE, "where: shapes {2,3} and {4,3} cannot be broadcast");
    c.n_in = 2;
    tl_rejects(&c, KN_ERR_ARG, "where: expects 3 inputs");

    kn_opcall_init(&c, KN_OP_MASKED_FILL);
    c.n_in = 2;
    c.in[0] = a;
    c.in[1] = a;
    tl_rejects(&c, KN_ERR_DTYPE, "masked_fill: mask must be bool, got f32");
    c.in[0] = i32;
    c.in[1] = m34;
    tl_rejects(&c, KN_ERR_SHAPE, "masked_fill: mask of shape {3,4} cannot be broadcast to x's shape {4}");
    c.in[0] = m34;
    c.in[1] = m34;
    c.a.value = NAN; /* into bool: true, fine */
    kn_meta meta[KN_MAX_OUTPUTS];
    int nout = 0;
    ok(kn_op_infer(&c, meta, &nout) == KN_OK && nout == 1 && meta[0].dtype == KN_BOOL,
       "masked_fill of a bool tensor with NaN is accepted");
    kn_tensor *iv = tl_new(KN_I32, 2, s34);
    c.in[0] = iv;
    tl_rejects(&c, KN_ERR_ARG, "masked_fill: value nan cannot be stored in an i32 tensor");
    kn_tensor_release(iv);

    kn_opcall_init(&c, KN_OP_ADD);
    c.op = KN_OP_COUNT;
    tl_rejects(&c, KN_ERR_ARG, "unknown op");
    c.op = (kn_op)-3;
    tl_rejects(&c, KN_ERR_ARG, "unknown op");
    kn_meta mm[KN_MAX_OUTPUTS];
    ok(kn_op_infer(NULL, mm, &nout) == KN_ERR_ARG, "a NULL call is rejected");

    /* Broadcasting two stride-0 views to 2^50 elements is refused, not allocated. */
    kn_tensor *one = tl_new(KN_F32, 0, NULL), *v1, *v2;
    int64_t sh1[2] = {INT64_C(1) << 20, 1}, sh2[2] = {1, INT64_C(1) << 30}, z[2] = {0, 0};
    kn_tensor_view_of(one, 2, sh1, z, 0, &v1);
    kn_tensor_view_of(one, 2, sh2, z, 0, &v2);
    kn_opcall_init(&c, KN_OP_MUL);
    c.n_in = 2;
    c.in[0] = v1;
    c.in[1] = v2;
    tl_rejects(&c, KN_ERR_OOM, "mul: a tensor of that shape would exceed");
    kn_tensor_release(v1);
    kn_tensor_release(v2);
    kn_tensor_release(one);

    /* A corrupt tensor header is reported, not indexed. */
    kn_tensor *bad = tl_new(KN_F32, 1, s4);
    bad->ndim = 99;
    kn_opcall_init(&c, KN_OP_RELU);
    c.n_in = 1;
    c.in[0] = bad;
    tl_rejects(&c, KN_ERR_SHAPE, "relu: input 1 has 99 dims");
    bad->ndim = 1;
    bad->dtype = (kn_dtype)77;
    tl_rejects(&c, KN_ERR_DTYPE, "relu: input 1 has an invalid dtype");
    bad->dtype = KN_F32;
    kn_tensor_release(bad);

    kn_tensor_release(a);
    kn_tensor_release(b);
    kn_tensor_release(bo);
    kn_tensor_release(i32);
    kn_tensor_release(m34);
}

int main(void)
{
    tl_seed();
    test_unary();
    test_binary();
    test_where();
    test_masked_fill();
    test_copy();
    test_cast();
    test_fast_paths();
    test_errors();
    return done_testing();
}
