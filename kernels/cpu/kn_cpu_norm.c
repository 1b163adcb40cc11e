/* kn_cpu_norm: the CPU reference for layer_norm and batch_norm (inference
 * form), computed in double with a two-pass mean / variance so that rows with
 * a large mean keep their precision. Non-contiguous inputs are copied to
 * contiguous ones first (the CONTIGUOUS op).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kn_cpu.h"
#include "kn_view.h"

/* All of t (any view) as a new array of doubles; NULL input gives `fill`
 * repeated n times (a missing weight is 1, a missing bias 0). */
static kn_status doubles_of(kn_tensor *t, int64_t n, double fill, double **out)
{
    *out = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!*out) return kn_error(KN_ERR_OOM, "norm: out of memory for %lld parameters", (long long)n);
    if (!t) {
        for (int64_t i = 0; i < n; i++) (*out)[i] = fill;
        return KN_OK;
    }
    kn_tensor *ct;
    kn_status st = kn_tensor_contiguous(t, &ct);
    if (st != KN_OK) {
        free(*out);
        *out = NULL;
        return st;
    }
    const char *d = kn_tensor_data(ct);
    int64_t es = (int64_t)kn_dtype_size(ct->dtype);
    for (int64_t i = 0; i < n; i++) (*out)[i] = kn_load_f64(d + i * es, ct->dtype);
    kn_tensor_release(ct);
    return KN_OK;
}

static void load_row(double *dst, const char *base, kn_dtype dt, int64_t off, int64_t n)
{
    if (dt == KN_F32) {
        const float *p = (const float *)(const void *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i];
        return;
    }
    int64_t es = (int64_t)kn_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) dst[i] = kn_load_f64(base + (off + i) * es, dt);
}

static void store_row(char *base, kn_dtype dt, int64_t off, const double *src, int64_t n)
{
    if (dt == KN_F32) {
        float *p = (float *)(void *)base + off;
        for (int64_t i = 0; i < n; i++) p[i] = (float)src[i];
        return;
    }
    int64_t es = (int64_t)kn_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) kn_store_f64(base + (off + i) * es, dt, src[i]);
}

/* y = (x - mean) / sqrt(var + eps) * w + b over the last nshape dims. */
static kn_status run_layer_norm(const kn_opcall *c, const kn_tensor *x)
{
    int64_t n = 1;
    for (int i = 0; i < c->a.nshape; i++) n *= c->a.shape[i];
    int64_t rows = n ? kn_tensor_numel(x) / n : 0;
    double *w = NULL, *b = NULL, *row = NULL;
    kn_status st = doubles_of(c->n_in > 1 ? c->in[1] : NULL, n, 1.0, &w);
    if (st == KN_OK) st = doubles_of(c->n_in > 2 ? c->in[2] : NULL, n, 0.0, &b);
    if (st == KN_OK && !(row = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1))))
        st = kn_error(KN_ERR_OOM, "layer_norm: out of memory for a row of %lld", (long long)n);
    if (st == KN_OK) {
        const char *xd = kn_tensor_data(x);
        char *od = kn_tensor_data(c->out[0]);
        for (int64_t r = 0; r < rows; r++) {
            load_row(row, xd, x->dtype, r * n, n);
            double mean = 0, var = 0;
            for (int64_t j = 0; j < n; j++) mean += row[j];
            mean /= (double)n;
            for (int64_t j = 0; j < n; j++) var += (row[j] - mean) * (row[j] - mean);
            var /= (double)n; /* biased, as torch's layer_norm */
            double inv = 1.0 / sqrt(var + c->a.eps);
            for (int64_t j = 0; j < n; j++) row[j] = (row[j] - mean) * inv * w[j] + b[j];
            store_row(od, c->out[0]->dtype, r * n, row, n);
        }
    }
    free(w);
    free(b);
    free(row);
    return st;
}

/* y = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c], channel dim 1, or
 * the last dim for the layout pass's channels-last form (in_layout NHWC). */
static kn_status run_batch_norm(const kn_opcall *c, const kn_tensor *x)
{
    bool last = c->a.in_layout == KN_LAYOUT_NHWC; /* channels-last: {N, ..., C} */
    int64_t nb = x->shape[0], nc = last ? x->shape[x->ndim - 1] : x->shape[1], inner = 1;
    for (int d = last ? 1 : 2; d < (last ? x->ndim - 1 : x->ndim); d++) inner *= x->shape[d];
    double *p[4] = {NULL, NULL, NULL, NULL}; /* mean, var (then 1/sqrt(var + eps)), weight, bias */
    static const double fills[4] = {0.0, 1.0, 1.0, 0.0};
    double *row = NULL;
    kn_status st = KN_OK;
    for (int i = 0; i < 4 && st == KN_OK; i++)
        st = doubles_of(i + 1 < c->n_in ? c->in[i + 1] : NULL, nc, fills[i], &p[i]);
    for (int64_t ch = 0; st == KN_OK && ch < nc; ch++) p[1][ch] = 1.0 / sqrt(p[1][ch] + c->a.eps); /* var -> 1/std */
    int64_t row_len = last ? nc : inner;
    if (st == KN_OK && !(row = malloc(sizeof(double) * (size_t)(row_len > 0 ? row_len : 1))))
        st = kn_error(KN_ERR_OOM, "batch_norm: out of memory for a row of %lld", (long long)row_len);
    if (st == KN_OK) {
        const char *xd = kn_tensor_data(x);
        char *od = kn_tensor_data(c->out[0]);
        for (int64_t n = 0; n < nb && last; n++) /* a row of the C channels per pixel */
            for (int64_t px = 0; px < inner; px++) {
                int64_t off = (n * inner + px) * nc;
                load_row(row, xd, x->dtype, off, nc);
                for (int64_t ch = 0; ch < nc; ch++) row[ch] = (row[ch] - p[0][ch]) * p[1][ch] * p[2][ch] + p[3][ch];
                store_row(od, c->out[0]->dtype, off, row, nc);
            }
        for (int64_t n = 0; n < nb && !last; n++)
            for (int64_t ch = 0; ch < nc; ch++) {
                int64_t off = (n * nc + ch) * inner;
                double inv = p[1][ch], m = p[0][ch];
                double w = p[2][ch], b = p[3][ch];
                load_row(row, xd, x->dtype, off, inner);
                for (int64_t j = 0; j < inner; j++) row[j] = (row[j] - m) * inv * w + b;
                store_row(od, c->out[0]->dtype, off, row, inner);
            }
    }
    for (int i = 0; i < 4; i++) free(p[i]);
    free(row);
    return st;
}

kn_status kn_cpu_norm(const kn_opcall *c)
{
    if (c->n_in < 1 || !c->in[0] || c->n_out < 1 || kn_op_kind_of(c->op) != KN_K_NORM)
        return kn_error(KN_ERR_ARG, "%s: bad call", kn_op_name(c->op));
    if (kn_tensor_numel(c->out[0]) == 0) return KN_OK;
    kn_tensor *x;
    KN_TRY(kn_tensor_contiguous(c->in[0], &x));
    kn_status st = c->op == KN_OP_LAYER_NORM ? run_layer_norm(c, x) : run_batch_norm(c, x);
    kn_tensor_release(x);
    return st;
}
