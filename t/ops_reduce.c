/* t/ops_reduce.c: the CPU reference for sum, mean, amax, amin, var, max
 * (values and 1-based indices), softmax, log_softmax, layer_norm and
 * batch_norm, against float64 references computed here with naive loops, on
 * fresh random inputs (seed printed) in every layout, with zero-size dims,
 * 0-dim scalars, NaN and -inf, every dtype an op accepts; then the error
 * messages of shape inference.
 */
#include "ops_testlib.h"

static const kn_dtype all_dtypes[] = {KN_F32, KN_F64, KN_BF16, KN_F16, KN_I32, KN_I64, KN_BOOL};
static const kn_dtype float_dtypes[] = {KN_F32, KN_F64, KN_BF16, KN_F16};

/* Run c; on failure print why. */
static int run_ok(kn_opcall *c, const char *name)
{
    kn_status st = tl_run(c);
    if (st != KN_OK) {
        ok(0, "%s", name);
        printf("#   failed: %s\n", kn_last_error());
    }
    return st == KN_OK;
}

/* ---- sum / mean / amax / amin / var ---- */

/* Output shape of a reduction, and for input element i the output element it
 * folds into. */
static int reduced_shape(int nd, const int64_t *shape, const bool *red, int keepdim, int64_t *out)
{
    int n = 0;
    for (int d = 0; d < nd; d++) {
        if (!red[d]) out[n++] = shape[d];
        else if (keepdim) out[n++] = 1;
    }
    return n;
}

static int64_t reduced_index(int nd, const int64_t *shape, const bool *red, int64_t flat)
{
    int64_t idx[KN_MAX_DIMS], r = 0;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    for (int d = 0; d < nd; d++)
        if (!red[d]) r = r * shape[d] + idx[d];
    return r;
}

static void test_reduce_one(kn_op op, kn_dtype dt)
{
    int64_t shape[KN_MAX_DIMS], os[KN_MAX_DIMS];
    int nd = tl_shape(shape, 4, 5, 10);
    kn_tensor *x = tl_rand(dt, nd, shape, -1, -6, 6, 1);
    bool red[KN_MAX_DIMS] = {false};
    kn_opcall c;
    kn_opcall_init(&c, op);
    c.n_in = 1;
    c.in[0] = x;
    c.a.keepdim = (int)tl_int(0, 1);
    c.a.correction = (int)tl_int(0, 2);
    if (nd == 0 || tl_int(0, 3) == 0) {
        c.a.ndims = 0; /* all dims */
        for (int d = 0; d < nd; d++) red[d] = true;
    } else {
        int order[KN_MAX_DIMS];
        for (int d = 0; d < nd; d++) order[d] = d;
        for (int d = nd - 1; d > 0; d--) { /* a random subset in random order */
            int j = (int)tl_int(0, d), t = order[d];
            order[d] = order[j];
            order[j] = t;
        }
        c.a.ndims = (int)tl_int(1, nd);
        for (int i = 0; i < c.a.ndims; i++) {
            c.a.dims[i] = order[i];
            red[order[i]] = true;
        }
    }
    int on = reduced_shape(nd, shape, red, c.a.keepdim, os);
    char name[200];
    snprintf(name, sizeof name, "%s %s %s over %d dim(s)%s%s", kn_op_name(op), kn_dtype_name(dt),
             tl_shape_str(nd, shape), c.a.ndims, c.a.keepdim ? " keepdim" : "",
             op == KN_OP_VAR ? (c.a.correction ? " corrected" : " population") : "");

    bool empty_reduce = false;
    for (int d = 0; d < nd; d++) empty_reduce |= red[d] && shape[d] == 0;
    if ((op == KN_OP_AMAX || op == KN_OP_AMIN) && empty_reduce) {
        kn_status st = tl_run(&c);
        char want[64];
        snprintf(want, sizeof want, "%s: cannot reduce a zero-size dim", kn_op_name(op));
        ok(st == KN_ERR_SHAPE && strstr(kn_last_error(), want), "%s is refused", name);
        kn_tensor_release(x);
        return;
    }
    int64_t n = tl_numel(nd, shape), no = tl_numel(on, os);
    double *xv = tl_values(x);
    double *sum = calloc((size_t)no + 1, sizeof(double)), *ss = calloc((size_t)no + 1, sizeof(double));
    double *ext = malloc(sizeof(double) * ((size_t)no + 1)), *want = malloc(sizeof(double) * ((size_t)no + 1));
    int64_t *cnt = calloc((size_t)no + 1, sizeof(int64_t));
    for (int64_t o = 0; o < no; o++) ext[o] = op == KN_OP_AMAX ? -INFINITY : INFINITY;
    for (int64_t i = 0; i < n; i++) {
        int64_t o = reduced_index(nd, shape, red, i);
        sum[o] += xv[i];
        cnt[o]++;
        if (isnan(xv[i]) || isnan(ext[o])) ext[o] = NAN;
        else if (op == KN_OP_AMAX ? xv[i] > ext[o] : xv[i] < ext[o]) ext[o] = xv[i];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t o = reduced_index(nd, shape, red, i);
        double m = sum[o] / (double)cnt[o];
        ss[o] += (xv[i] - m) * (xv[i] - m);
    }
    for (int64_t o = 0; o < no; o++) {
        switch (op) {
        case KN_OP_SUM: want[o] = sum[o]; break;
        case KN_OP_MEAN: want[o] = cnt[o] ? sum[o] / (double)cnt[o] : NAN; break;
        case KN_OP_VAR: {
            double dof = (double)cnt[o] - c.a.correction;
            want[o] = dof > 0 ? ss[o] / dof : ss[o] > 0 ? INFINITY : NAN;
            if (cnt[o] == 0) want[o] = NAN;
            break;
        }
        default: want[o] = ext[o]; break;
        }
    }
    kn_dtype odt = op == KN_OP_SUM && !tl_is_float(dt) ? KN_I64 : dt;
    if (run_ok(&c, name)) {
        if (!tl_meta_is(c.out[0], odt, on, os)) ok(0, "%s (meta)", name);
        else tl_check(c.out[0], want, "%s", name);
        tl_release_outputs(&c);
    }
    free(xv);
    free(sum);
    free(ss);
    free(ext);
    free(want);
    free(cnt);
    kn_tensor_release(x);
}

static void test_reduce(void)
{
    static const kn_op ops[] = {KN_OP_SUM, KN_OP_MEAN, KN_OP_AMAX, KN_OP_AMIN, KN_OP_VAR};
    for (int i = 0; i < 5; i++)
        for (int di = 0; di < 7; di++) {
            kn_dtype dt = all_dtypes[di];
            if ((ops[i] == KN_OP_MEAN || ops[i] == KN_OP_VAR) && !tl_is_float(dt)) continue;
            for (int trial = 0; trial < 4; trial++) test_reduce_one(ops[i], dt);
        }

    /* Integers accumulate exactly, beyond 2^53. */
    int64_t two = 2;
    kn_tensor *x = tl_new(KN_I64, 1, &two);
    tl_set_i64(x, 0, (INT64_C(1) << 60) + 1);
    tl_set_i64(x, 1, 2);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_SUM);
    c.n_in = 1;
    c.in[0] = x;
    ok(tl_run(&c) == KN_OK && tl_get_i64(c.out[0], 0) == (INT64_C(1) << 60) + 3,
       "sum of i64 beyond 2^53 is exact");
    tl_release_outputs(&c);
    tl_set_i64(x, 1, (INT64_C(1) << 60));
    c.op = KN_OP_AMAX;
    ok(tl_run(&c) == KN_OK && tl_get_i64(c.out[0], 0) == (INT64_C(1) << 60) + 1,
       "amax of i64 beyond 2^53 is exact");
    tl_release_outputs(&c);
    kn_tensor_release(x);

    /* var with N - correction <= 0: NaN for a zero sum of squares, else inf. */
    kn_tensor *v = tl_new(KN_F32, 1, &two);
    tl_set(v, 0, 1);
    tl_set(v, 1, 2);
    kn_opcall_init(&c, KN_OP_VAR);
    c.n_in = 1;
    c.in[0] = v;
    c.a.correction = 2;
    ok(tl_run(&c) == KN_OK && isinf(tl_get(c.out[0], 0)), "var with N - correction = 0 is inf");
    tl_release_outputs(&c);
    tl_set(v, 1, 1);
    ok(tl_run(&c) == KN_OK && isnan(tl_get(c.out[0], 0)), "var of equal values with N - correction = 0 is NaN");
    tl_release_outputs(&c);
    kn_tensor_release(v);
}

/* ---- max along a dim: values and 1-based indices ---- */

static void test_max(void)
{
    for (int di = 0; di < 7; di++)
        for (int trial = 0; trial < 5; trial++) {
            kn_dtype dt = all_dtypes[di];
            int64_t shape[KN_MAX_DIMS], os[KN_MAX_DIMS];
            int nd = tl_shape(shape, 4, 5, 0);
            int dim = nd ? (int)tl_int(0, nd - 1) : 0;
            kn_tensor *x = tl_new_layout(dt, nd, shape, (int)tl_int(0, TL_NLAYOUTS - 1));
            int64_t n = tl_numel(nd, shape);
            for (int64_t i = 0; i < n; i++) /* few distinct values: ties */
                tl_set(x, i, tl_int(0, 30) == 0 && tl_is_float(dt) ? NAN : (double)tl_int(-3, 3));
            kn_opcall c;
            kn_opcall_init(&c, KN_OP_MAX);
            c.n_in = 1;
            c.in[0] = x;
            c.a.dim = dim;
            c.a.keepdim = (int)tl_int(0, 1);
            bool red[KN_MAX_DIMS] = {false};
            if (nd) red[dim] = true;
            int on = reduced_shape(nd, shape, red, c.a.keepdim, os);
            int64_t no = tl_numel(on, os);
            double *xv = tl_values(x), *wv = malloc(sizeof(double) * ((size_t)no + 1));
            double *wi = malloc(sizeof(double) * ((size_t)no + 1));
            int64_t *pos = calloc((size_t)no + 1, sizeof(int64_t));
            bool *seen = calloc((size_t)no + 1, 1);
            for (int64_t i = 0; i < n; i++) { /* row-major: along dim, first comes first */
                int64_t o = reduced_index(nd, shape, red, i), j = pos[o]++;
                bool take = !seen[o] || (!isnan(wv[o]) && (isnan(xv[i]) || xv[i] > wv[o]));
                if (take) {
                    wv[o] = xv[i];
                    wi[o] = (double)(j + 1);
                }
                seen[o] = true;
            }
            char name[160];
            snprintf(name, sizeof name, "max %s %s dim %d%s", kn_dtype_name(dt),
                     tl_shape_str(nd, shape), dim + 1, c.a.keepdim ? " keepdim" : "");
            if (run_ok(&c, name)) {
                if (c.n_out != 2 || !tl_meta_is(c.out[0], dt, on, os) ||
                    !tl_meta_is(c.out[1], KN_I64, on, os))
                    ok(0, "%s (meta)", name);
                else {
                    tl_check(c.out[0], wv, "%s: values", name);
                    tl_check(c.out[1], wi, "%s: 1-based indices of the first max", name);
                }
                tl_release_outputs(&c);
            }
            free(xv);
            free(wv);
            free(wi);
            free(pos);
            free(seen);
            kn_tensor_release(x);
        }
}

/* ---- softmax / log_softmax ---- */

static void test_softmax(void)
{
    for (int lg = 0; lg < 2; lg++)
        for (int di = 0; di < 4; di++)
            for (int trial = 0; trial < 5; trial++) {
                kn_op op = lg ? KN_OP_LOG_SOFTMAX : KN_OP_SOFTMAX;
                kn_dtype dt = float_dtypes[di];
                int64_t shape[KN_MAX_DIMS];
                int nd = tl_shape(shape, 4, 6, 12);
                int dim = nd ? (int)tl_int(0, nd - 1) : 0;
                kn_tensor *x = tl_new_layout(dt, nd, shape, (int)tl_int(0, TL_NLAYOUTS - 1));
                int64_t n = tl_numel(nd, shape);
                bool all_ninf = trial == 4; /* a whole tensor of -inf: NaN rows */
                for (int64_t i = 0; i < n; i++) {
                    int64_t r = tl_int(0, 40);
                    tl_set(x, i, all_ninf || r == 0 ? -INFINITY : r == 1 ? NAN : tl_value(dt, -8, 8, 0));
                }
                double *xv = tl_values(x), *want = malloc(sizeof(double) * ((size_t)n + 1));
                int64_t len = nd ? shape[dim] : 1, inner = 1;
                for (int d = dim + 1; d < nd; d++) inner *= shape[d];
                for (int64_t i = 0; i < n; i++) {
                    /* The row through element i: same index but along dim. */
                    int64_t j0 = i - ((i / inner) % (len ? len : 1)) * inner;
                    double m = -INFINITY, s = 0;
                    for (int64_t k = 0; k < len; k++) {
                        double v = xv[j0 + k * inner];
                        m = isnan(v) || isnan(m) ? NAN : v > m ? v : m;
                    }
                    for (int64_t k = 0; k < len; k++) s += exp(xv[j0 + k * inner] - m);
                    want[i] = lg ? xv[i] - m - log(s) : exp(xv[i] - m) / s;
                }
                kn_opcall c;
                kn_opcall_init(&c, op);
                c.n_in = 1;
                c.in[0] = x;
                c.a.dim = dim;
                char name[160];
                snprintf(name, sizeof name, "%s %s %s dim %d%s", kn_op_name(op), kn_dtype_name(dt),
                         tl_shape_str(nd, shape), dim + 1, all_ninf ? " all -inf" : "");
                if (run_ok(&c, name)) {
                    if (!tl_meta_is(c.out[0], dt, nd, shape)) ok(0, "%s (meta)", name);
                    else tl_check(c.out[0], want, "%s", name);
                    tl_release_outputs(&c);
                }
                free(xv);
                free(want);
                kn_tensor_release(x);
            }
}

/* ---- layer_norm / batch_norm ---- */

static void test_layer_norm(void)
{
    for (int di = 0; di < 4; di++)
        for (int trial = 0; trial < 6; trial++) {
            kn_dtype dt = float_dtypes[di];
            int64_t shape[KN_MAX_DIMS];
            int nd = (int)tl_int(1, 4);
            for (int d = 0; d < nd; d++) shape[d] = tl_int(trial == 5 && d == 0 ? 0 : 1, 6);
            int k = (int)tl_int(1, nd);
            const int64_t *ns = shape + nd - k;
            kn_tensor *x = tl_rand(dt, nd, shape, -1, -3, 3, 0);
            kn_dtype pdt = float_dtypes[tl_int(0, 3)];
            kn_tensor *w = tl_rand(pdt, k, ns, -1, -2, 2, 0), *b = tl_rand(pdt, k, ns, -1, -2, 2, 0);
            int n_in = (int)tl_int(1, 3);
            int64_t n = tl_numel(nd, shape), m = tl_numel(k, ns);
            double *xv = tl_values(x), *wv = tl_values(w), *bv = tl_values(b);
            double *want = malloc(sizeof(double) * ((size_t)n + 1));
            double eps = tl_int(0, 1) ? 1e-5 : 0.1;
            for (int64_t r = 0; m && r < n / m; r++) {
                double mean = 0, var = 0;
                for (int64_t j = 0; j < m; j++) mean += xv[r * m + j];
                mean /= (double)m;
                for (int64_t j = 0; j < m; j++) var += (xv[r * m + j] - mean) * (xv[r * m + j] - mean);
                var /= (double)m;
                for (int64_t j = 0; j < m; j++)
                    want[r * m + j] = (xv[r * m + j] - mean) / sqrt(var + eps) *
                                          (n_in > 1 ? wv[j] : 1.0) + (n_in > 2 ? bv[j] : 0.0);
            }
            kn_opcall c;
            kn_opcall_init(&c, KN_OP_LAYER_NORM);
            c.n_in = n_in;
            c.in[0] = x;
            c.in[1] = w;
            c.in[2] = b;
            c.a.nshape = k;
            memcpy(c.a.shape, ns, sizeof(int64_t) * (size_t)k);
            c.a.eps = eps;
            char name[160];
            snprintf(name, sizeof name, "layer_norm %s %s over %s with %d input(s), params %s",
                     kn_dtype_name(dt), tl_shape_str(nd, shape), tl_shape_str(k, ns), n_in,
                     kn_dtype_name(pdt));
            if (run_ok(&c, name)) {
                if (!tl_meta_is(c.out[0], dt, nd, shape)) ok(0, "%s (meta)", name);
                else tl_check(c.out[0], want, "%s", name);
                tl_release_outputs(&c);
            }
            free(xv);
            free(wv);
            free(bv);
            free(want);
            kn_tensor_release(x);
            kn_tensor_release(w);
            kn_tensor_release(b);
        }
}

static void test_batch_norm(void)
{
    for (int di = 0; di < 4; di++)
        for (int trial = 0; trial < 5; trial++) {
            kn_dtype dt = float_dtypes[di];
            int64_t shape[KN_MAX_DIMS];
            int nd = (int)tl_int(2, 4);
            for (int d = 0; d < nd; d++) shape[d] = tl_int(trial == 4 && d == 0 ? 0 : 1, 5);
            int64_t ch = shape[1];
            kn_tensor *x = tl_rand(dt, nd, shape, -1, -3, 3, 0);
            kn_tensor *p[4];
            for (int i = 0; i < 4; i++)
                p[i] = tl_rand(float_dtypes[tl_int(0, 3)], 1, &ch, -1, i == 1 ? 0.1 : -2, 2, 0);
            int n_in = (int)tl_int(3, 5);
            int64_t n = tl_numel(nd, shape), inner = n ? n / shape[0] / ch : 1;
            double *xv = tl_values(x), *pv[4], *want = malloc(sizeof(double) * ((size_t)n + 1));
            for (int i = 0; i < 4; i++) pv[i] = tl_values(p[i]);
            for (int64_t i = 0; i < n; i++) {
                int64_t cc = (i / inner) % ch;
                want[i] = (xv[i] - pv[0][cc]) / sqrt(pv[1][cc] + 1e-5) * (n_in > 3 ? pv[2][cc] : 1.0) +
                          (n_in > 4 ? pv[3][cc] : 0.0);
            }
            kn_opcall c;
            kn_opcall_init(&c, KN_OP_BATCH_NORM);
            c.n_in = n_in;
            c.in[0] = x;
            for (int i = 0; i < 4; i++) c.in[i + 1] = p[i];
            char name[160];
            snprintf(name, sizeof name, "batch_norm %s %s with %d inputs", kn_dtype_name(dt),
                     tl_shape_str(nd, shape), n_in);
            if (run_ok(&c, name)) {
                if (!tl_meta_is(c.out[0], dt, nd, shape)) ok(0, "%s (meta)", name);
                else tl_check(c.out[0], want, "%s", name);
                tl_release_outputs(&c);
            }
            free(xv);
            free(want);
            for (int i = 0; i < 4; i++) {
                free(pv[i]);
                kn_tensor_release(p[i]);
            }
            kn_tensor_release(x);
        }
}

/* ---- scalars and zero sizes, exactly ---- */

static void test_edges(void)
{
    kn_tensor *s = tl_new(KN_F32, 0, NULL);
    tl_set(s, 0, 2.5);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_SUM);
    c.n_in = 1;
    c.in[0] = s;
    ok(tl_run(&c) == KN_OK && c.out[0]->ndim == 0 && tl_get(c.out[0], 0) == 2.5, "sum of a scalar");
    tl_release_outputs(&c);
    c.a.ndims = 1; /* dim 1 (0) of a scalar, as torch's dim=-1 */
    c.a.keepdim = 1;
    ok(tl_run(&c) == KN_OK && c.out[0]->ndim == 0 && tl_get(c.out[0], 0) == 2.5,
       "sum of a scalar over dim 1");
    tl_release_outputs(&c);
    kn_opcall_init(&c, KN_OP_MAX);
    c.n_in = 1;
    c.in[0] = s;
    ok(tl_run(&c) == KN_OK && c.n_out == 2 && tl_get(c.out[0], 0) == 2.5 && tl_get_i64(c.out[1], 0) == 1,
       "max of a scalar is itself at index 1");
    tl_release_outputs(&c);
    kn_opcall_init(&c, KN_OP_SOFTMAX);
    c.n_in = 1;
    c.in[0] = s;
    ok(tl_run(&c) == KN_OK && tl_get(c.out[0], 0) == 1.0, "softmax of a scalar is 1");
    tl_release_outputs(&c);
    kn_tensor_release(s);

    int64_t z[2] = {3, 0};
    kn_tensor *e = tl_new(KN_F32, 2, z);
    kn_opcall_init(&c, KN_OP_SUM);
    c.n_in = 1;
    c.in[0] = e;
    c.a.ndims = 1;
    c.a.dims[0] = 1;
    ok(tl_run(&c) == KN_OK && c.out[0]->ndim == 1 && c.out[0]->shape[0] == 3 && tl_get(c.out[0], 2) == 0,
       "sum over a zero-size dim is 0");
    tl_release_outputs(&c);
    c.op = KN_OP_MEAN;
    ok(tl_run(&c) == KN_OK && isnan(tl_get(c.out[0], 0)), "mean over a zero-size dim is NaN");
    tl_release_outputs(&c);
    c.op = KN_OP_AMAX;
    ok(tl_run(&c) == KN_ERR_SHAPE && strstr(kn_last_error(), "amax: cannot reduce a zero-size dim"),
       "amax over a zero-size dim is an error");
    c.a.dims[0] = 0; /* the other dim: an empty result, fine */
    ok(tl_run(&c) == KN_OK && c.out[0]->shape[0] == 0, "amax over a non-empty dim of an empty tensor");
    tl_release_outputs(&c);
    kn_opcall_init(&c, KN_OP_MAX);
    c.n_in = 1;
    c.in[0] = e;
    c.a.dim = 1;
    tl_rejects(&c, KN_ERR_SHAPE, "max: cannot reduce a zero-size dim");
    c.op = KN_OP_SOFTMAX;
    ok(tl_run(&c) == KN_OK && c.out[0]->shape[1] == 0, "softmax of an empty tensor");
    tl_release_outputs(&c);
    kn_tensor_release(e);
}

/* ---- errors ---- */

static void test_errors(void)
{
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s3[1] = {3}, s233[3] = {2, 3, 3};
    kn_tensor *f = tl_new(KN_F32, 2, s23), *i = tl_new(KN_I32, 2, s23), *l = tl_new(KN_I64, 2, s23);
    kn_tensor *w4 = tl_new(KN_F32, 1, s4), *w3 = tl_new(KN_F32, 1, s3), *wi = tl_new(KN_I32, 1, s3);
    kn_tensor *x3 = tl_new(KN_F32, 3, s233);
    kn_opcall c;

    kn_opcall_init(&c, KN_OP_MEAN);
    c.n_in = 1;
    c.in[0] = i;
    tl_rejects(&c, KN_ERR_DTYPE, "mean: needs a float tensor, got i32");
    c.op = KN_OP_VAR;
    tl_rejects(&c, KN_ERR_DTYPE, "var: needs a float tensor, got i32");
    kn_opcall_init(&c, KN_OP_SUM);
    c.n_in = 1;
    c.in[0] = f;
    c.a.ndims = 2;
    c.a.dims[0] = 0;
    c.a.dims[1] = 0;
    tl_rejects(&c, KN_ERR_ARG, "sum: dim 1 appears twice");
    c.a.dims[1] = 2;
    tl_rejects(&c, KN_ERR_ARG, "sum: dim 3 out of range for a tensor with 2 dims");
    c.a.ndims = 9;
    tl_rejects(&c, KN_ERR_ARG, "sum: 9 dims given");
    c.a.ndims = 0;
    c.n_in = 2;
    c.in[1] = f;
    tl_rejects(&c, KN_ERR_ARG, "sum: expects 1 input");

    kn_opcall_init(&c, KN_OP_SOFTMAX);
    c.n_in = 1;
    c.in[0] = f;
    c.a.dim = 2;
    tl_rejects(&c, KN_ERR_ARG, "softmax: dim 3 out of range for a tensor with 2 dims");
    c.a.dim = 0;
    c.in[0] = l;
    tl_rejects(&c, KN_ERR_DTYPE, "softmax: needs a float tensor, got i64");
    c.op = KN_OP_LOG_SOFTMAX;
    c.in[0] = NULL;
    tl_rejects(&c, KN_ERR_ARG, "log_softmax: input 1 is missing");
    kn_opcall_init(&c, KN_OP_MAX);
    c.n_in = 1;
    c.in[0] = f;
    c.a.dim = -1; /* not normalized: still refused, not indexed */
    tl_rejects(&c, KN_ERR_ARG, "max: dim -1 out of range");

    kn_opcall_init(&c, KN_OP_LAYER_NORM);
    c.n_in = 1;
    c.in[0] = f;
    c.a.nshape = 1;
    c.a.shape[0] = 4;
    tl_rejects(&c, KN_ERR_SHAPE, "layer_norm: normalized shape {4} does not match the last dims of the input's shape {2,3}");
    c.a.shape[0] = 3;
    c.n_in = 2;
    c.in[1] = w4;
    tl_rejects(&c, KN_ERR_SHAPE, "layer_norm: weight must have the normalized shape {3}, got {4}");
    c.in[1] = wi;
    tl_rejects(&c, KN_ERR_DTYPE, "layer_norm: needs a float weight, got i32");
    c.n_in = 4;
    c.in[2] = w3;
    c.in[3] = w3;
    tl_rejects(&c, KN_ERR_ARG, "layer_norm: expects 1 to 3 inputs (x [, weight [, bias]]), got 4");
    c.n_in = 1;
    c.a.nshape = 3;
    tl_rejects(&c, KN_ERR_SHAPE, "layer_norm: normalized shape must have 1 to 2 dims");
    c.a.nshape = 1;
    c.a.eps = NAN;
    tl_rejects(&c, KN_ERR_ARG, "layer_norm: eps must be a finite number >= 0, got nan");
    c.a.eps = 1e-5;
    c.in[0] = i;
    tl_rejects(&c, KN_ERR_DTYPE, "layer_norm: needs a float input, got i32");

    kn_opcall_init(&c, KN_OP_BATCH_NORM);
    c.n_in = 3;
    c.in[0] = x3;
    c.in[1] = w4;
    c.in[2] = w3;
    tl_rejects(&c, KN_ERR_SHAPE, "batch_norm: running mean must have shape {3} (the channels of input {2,3,3}), got {4}");
    c.in[1] = w3;
    c.in[2] = wi;
    tl_rejects(&c, KN_ERR_DTYPE, "batch_norm: needs a float running var, got i32");
    c.in[0] = w3;
    tl_rejects(&c, KN_ERR_SHAPE, "batch_norm: input must have at least 2 dims (N, C, ...), got shape {3}");
    c.n_in = 2;
    tl_rejects(&c, KN_ERR_ARG, "batch_norm: expects 3 to 5 inputs");

    kn_tensor_release(f);
    kn_tensor_release(i);
    kn_tensor_release(l);
    kn_tensor_release(w4);
    kn_tensor_release(w3);
    kn_tensor_release(wi);
    kn_tensor_release(x3);
}

int main(void)
{
    tl_seed();
    test_reduce();
    test_max();
    test_softmax();
    test_layer_norm();
    test_batch_norm();
    test_edges();
    test_errors();
    return done_testing();
}
