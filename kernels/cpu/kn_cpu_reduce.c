/* kn_cpu_reduce: the CPU reference for reductions (sum, mean, amax, amin,
 * var), max with 1-based indices, and softmax / log_softmax.
 *
 * Floats accumulate in double; integer and bool sums, maxima and minima
 * accumulate in int64 so that i64 values beyond 2^53 stay exact. A
 * non-contiguous input is first copied to a contiguous one (the CONTIGUOUS
 * op), so the kernels here only deal with contiguous strides.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cpu.h"
#include "kn_view.h"

#define CHUNK 512

/* n elements of x's dtype at element offset off, stride st, into dst. */
static void load_row(double *dst, const char *base, kn_dtype dt, int64_t off, int64_t st,
                     int64_t n)
{
    switch (dt) {
    case KN_F32: {
        const float *p = (const float *)(const void *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i * st];
        break;
    }
    case KN_F64: {
        const double *p = (const double *)(const void *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i * st];
        break;
    }
    default: {
        int64_t es = (int64_t)kn_dtype_size(dt);
        for (int64_t i = 0; i < n; i++) dst[i] = kn_load_f64(base + (off + i * st) * es, dt);
        break;
    }
    }
}

static void store_row(char *base, kn_dtype dt, int64_t off, int64_t st, const double *src,
                      int64_t n)
{
    if (dt == KN_F32) {
        float *p = (float *)(void *)base + off;
        for (int64_t i = 0; i < n; i++) p[i * st] = (float)src[i];
        return;
    }
    int64_t es = (int64_t)kn_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) kn_store_f64(base + (off + i * st) * es, dt, src[i]);
}

/* Exact integer access for i32, i64 and bool. */
static int64_t load_i64(const char *p, kn_dtype dt)
{
    switch (dt) {
    case KN_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case KN_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    default: return *(const uint8_t *)p != 0;
    }
}

static void store_i64(char *p, kn_dtype dt, int64_t v)
{
    switch (dt) {
    case KN_I32: { int32_t w = (int32_t)v; memcpy(p, &w, 4); break; } /* v came from an i32 */
    case KN_I64: memcpy(p, &v, 8); break;
    default: *(uint8_t *)p = v != 0; break;
    }
}

/* ---- sum / mean / amax / amin / var ---- */

/* The dims an output element reduces over, with the input's strides,
 * merged where contiguous so the innermost run is long. */
typedef struct red_set {
    int n;
    int64_t size[KN_MAX_DIMS], st[KN_MAX_DIMS];
    int64_t count; /* elements per output */
} red_set;

typedef struct red_acc {
    double sum, ext, mean, ss; /* ext: the running max or min */
    int64_t isum, iext;
} red_acc;

static void acc_chunk(kn_op op, int pass, const double *v, int64_t n, red_acc *a)
{
    switch (op) {
    case KN_OP_AMAX:
        for (int64_t i = 0; i < n; i++)
            if (v[i] > a->ext || v[i] != v[i]) a->ext = v[i]; /* NaN is sticky: nothing beats it */
        break;
    case KN_OP_AMIN:
        for (int64_t i = 0; i < n; i++)
            if (v[i] < a->ext || v[i] != v[i]) a->ext = v[i];
        break;
    default: /* sum, mean, and var's first pass sum; var's second sums squared deviations */
        if (op == KN_OP_VAR && pass == 1)
            for (int64_t i = 0; i < n; i++) a->ss += (v[i] - a->mean) * (v[i] - a->mean);
        else
            for (int64_t i = 0; i < n; i++) a->sum += v[i];
        break;
    }
}

/* Visit every element that reduces into the output whose first input element
 * is at `base`: floats in chunks of doubles, integers one by one in int64. */
static void walk_set(const kn_tensor *x, int64_t base, const red_set *rs, kn_op op, int pass,
                     bool as_int, red_acc *a)
{
    const char *data = kn_tensor_data(x);
    int64_t es = (int64_t)kn_dtype_size(x->dtype);
    int64_t idx[KN_MAX_DIMS] = {0}, off = base;
    int64_t inner = rs->size[rs->n - 1], st = rs->st[rs->n - 1];
    int64_t rows = rs->count / (inner ? inner : 1);
    if (rs->count == 0) return;
    double buf[CHUNK];
    for (int64_t r = 0; r < rows; r++) {
        if (as_int) {
            for (int64_t j = 0; j < inner; j++) {
                int64_t v = load_i64(data + (off + j * st) * es, x->dtype);
                if (op == KN_OP_AMAX) a->iext = v > a->iext ? v : a->iext;
                else if (op == KN_OP_AMIN) a->iext = v < a->iext ? v : a->iext;
                else a->isum = (int64_t)((uint64_t)a->isum + (uint64_t)v); /* wraps like torch */
            }
        } else {
            for (int64_t j = 0; j < inner; j += CHUNK) {
                int64_t m = inner - j < CHUNK ? inner - j : CHUNK;
                load_row(buf, data, x->dtype, off + j * st, st, m);
                acc_chunk(op, pass, buf, m, a);
            }
        }
        for (int d = rs->n - 2; d >= 0; d--) {
            if (++idx[d] < rs->size[d]) {
                off += rs->st[d];
                break;
            }
            idx[d] = 0;
            off -= rs->st[d] * (rs->size[d] - 1);
        }
    }
}

static void reduce_finish(const kn_opcall *c, const red_set *rs, red_acc *a, bool as_int,
                          char *dst)
{
    kn_dtype dt = c->out[0]->dtype;
    if (as_int) {
        store_i64(dst, dt, c->op == KN_OP_SUM ? a->isum : a->iext);
        return;
    }
    double n = (double)rs->count, v;
    switch (c->op) {
    case KN_OP_SUM: v = a->sum; break;
    case KN_OP_MEAN: v = a->sum / n; break; /* 0/0 = NaN for an empty set, as torch */
    case KN_OP_VAR: {
        double denom = n - c->a.correction;
        v = a->ss / (denom > 0 ? denom : 0.0); /* inf or NaN when N - correction <= 0 */
        break;
    }
    default: v = a->ext; break;
    }
    kn_store_f64(dst, dt, v);
}

static kn_status run_reduce(const kn_opcall *c, const kn_tensor *x)
{
    bool red[KN_MAX_DIMS] = {false};
    for (int i = 0; i < c->a.ndims; i++)
        if (x->ndim > 0) red[c->a.dims[i]] = true;
    if (c->a.ndims == 0)
        for (int d = 0; d < x->ndim; d++) red[d] = true;

    /* Kept dims (the output's order) and the reduced set, with x's strides. */
    int nk = 0;
    int64_t ksize[KN_MAX_DIMS], kst[KN_MAX_DIMS];
    red_set rs = {.n = 0, .count = 1};
    for (int d = 0; d < x->ndim; d++) {
        if (red[d]) {
            if (rs.n > 0 && rs.st[rs.n - 1] == x->strides[d] * x->shape[d]) {
                rs.size[rs.n - 1] *= x->shape[d]; /* merge with the previous reduced dim */
                rs.st[rs.n - 1] = x->strides[d];
            } else {
                rs.size[rs.n] = x->shape[d];
                rs.st[rs.n++] = x->strides[d];
            }
            rs.count *= x->shape[d];
        } else {
            ksize[nk] = x->shape[d];
            kst[nk++] = x->strides[d];
        }
    }
    if (rs.n == 0) {
        rs.size[0] = 1;
        rs.st[0] = 0;
        rs.n = 1;
    }

    kn_tensor *out = c->out[0];
    int64_t nout = kn_tensor_numel(out), oes = (int64_t)kn_dtype_size(out->dtype);
    char *od = kn_tensor_data(out);
    bool as_int = !kn_dtype_is_float(x->dtype); /* mean and var reject these in infer */
    int64_t kidx[KN_MAX_DIMS] = {0}, base = 0;
    for (int64_t o = 0; o < nout; o++) {
        red_acc a = {0};
        a.ext = c->op == KN_OP_AMAX ? -INFINITY : INFINITY;
        a.iext = c->op == KN_OP_AMAX ? INT64_MIN : INT64_MAX;
        walk_set(x, base, &rs, c->op, 0, as_int, &a);
        if (c->op == KN_OP_VAR) {
            a.mean = a.sum / (double)rs.count;
            walk_set(x, base, &rs, c->op, 1, false, &a);
        }
        reduce_finish(c, &rs, &a, as_int, od + o * oes);
        for (int d = nk - 1; d >= 0; d--) {
            if (++kidx[d] < ksize[d]) {
                base += kst[d];
                break;
            }
            kidx[d] = 0;
            base -= kst[d] * (ksize[d] - 1);
        }
    }
    return KN_OK;
}

/* ---- max along a dim, and softmax: x seen as (outer, L, inner) ---- */

static void split_dim(const kn_tensor *x, int dim, int64_t *outer, int64_t *len, int64_t *inner)
{
    *outer = *inner = *len = 1;
    if (x->ndim == 0) return;
    for (int d = 0; d < dim; d++) *outer *= x->shape[d];
    *len = x->shape[dim];
    for (int d = dim + 1; d < x->ndim; d++) *inner *= x->shape[d];
}

static kn_status run_max(const kn_opcall *c, const kn_tensor *x)
{
    int64_t outer, len, inner;
    split_dim(x, c->a.dim, &outer, &len, &inner);
    const char *xd = kn_tensor_data(x);
    char *vd = kn_tensor_data(c->out[0]);
    int64_t *id = kn_tensor_data(c->out[1]);
    int64_t es = (int64_t)kn_dtype_size(x->dtype);
    bool is_float = kn_dtype_is_float(x->dtype);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i, best = 0;
            if (is_float) {
                double bv = kn_load_f64(xd + base * es, x->dtype);
                for (int64_t j = 1; j < len && bv == bv; j++) { /* stop at the first NaN */
                    double v = kn_load_f64(xd + (base + j * inner) * es, x->dtype);
                    if (v > bv || v != v) {
                        bv = v;
                        best = j;
                    }
                }
            } else {
                int64_t bv = load_i64(xd + base * es, x->dtype);
                for (int64_t j = 1; j < len; j++) {
                    int64_t v = load_i64(xd + (base + j * inner) * es, x->dtype);
                    if (v > bv) {
                        bv = v;
                        best = j;
                    }
                }
            }
            int64_t oi = o * inner + i;
            memcpy(vd + oi * es, xd + (base + best * inner) * es, (size_t)es);
            id[oi] = best + 1; /* 1-based, as Lua and Torch7 */
        }
    return KN_OK;
}

static kn_status run_softmax(const kn_opcall *c, const kn_tensor *x)
{
    int64_t outer, len, inner;
    split_dim(x, c->a.dim, &outer, &len, &inner);
    if (len == 0 || outer == 0 || inner == 0) return KN_OK;
    double *row = malloc(sizeof(double) * (size_t)len);
    if (!row) return kn_error(KN_ERR_OOM, "%s: out of memory for a row of %lld", kn_op_name(c->op),
                              (long long)len);
    const char *xd = kn_tensor_data(x);
    char *od = kn_tensor_data(c->out[0]);
    bool logsm = c->op == KN_OP_LOG_SOFTMAX;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i;
            load_row(row, xd, x->dtype, base, inner, len);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < len; j++)
                if (row[j] > mx || row[j] != row[j]) mx = row[j];
            /* A row of -inf has mx = -inf and -inf - -inf = NaN: NaN out, as torch. */
            if (logsm) {
                for (int64_t j = 0; j < len; j++) sum += exp(row[j] - mx);
                double ls = log(sum);
                for (int64_t j = 0; j < len; j++) row[j] = row[j] - mx - ls;
            } else { /* keep the exponentials: one exp per element */
                for (int64_t j = 0; j < len; j++) {
                    row[j] = exp(row[j] - mx);
                    sum += row[j];
                }
                for (int64_t j = 0; j < len; j++) row[j] /= sum;
            }
            store_row(od, c->out[0]->dtype, base, inner, row, len);
        }
    free(row);
    return KN_OK;
}

kn_status kn_cpu_reduce(const kn_opcall *c)
{
    if (c->n_in < 1 || !c->in[0] || c->n_out < 1)
        return kn_error(KN_ERR_ARG, "%s: bad call", kn_op_name(c->op));
    kn_op_kind kind = kn_op_kind_of(c->op);
    if (kind != KN_K_REDUCE && kind != KN_K_ARGREDUCE && kind != KN_K_SOFTMAX)
        return kn_error(KN_ERR_UNSUPPORTED, "%s: not a reduction", kn_op_name(c->op));
    if (kn_tensor_numel(c->out[0]) == 0) return KN_OK;
    kn_tensor *x;
    KN_TRY(kn_tensor_contiguous(c->in[0], &x));
    kn_status st;
    if (kind == KN_K_REDUCE) st = run_reduce(c, x);
    else if (kind == KN_K_ARGREDUCE) st = run_max(c, x);
    else st = run_softmax(c, x);
    kn_tensor_release(x);
    return st;
}
