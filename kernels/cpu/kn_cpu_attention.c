/* kn_cpu_attention: scaled_dot_product_attention on the CPU, and the
 * reference the fused GPU kernel is checked against.
 *
 * Per batch-head and block of query rows: the scores q.k^T come from the
 * gemm engine in f64 (kn_cpu_gemm reads q and k through their strides, any
 * float dtype); each row is scaled, limited by the causal rule and the mask
 * and put through the softmax exactly as the eager softmax does
 * (kn_cpu_reduce.c: max, exp, sum, divide; a row whose every key is masked
 * is -inf throughout and gives NaN, as torch); the probabilities times v
 * come from the gemm engine in f64 again; only the result is rounded, to
 * the output dtype, and written through the output's strides. Every input
 * and the output may be any strided view (transposed heads, expanded masks).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "cpu/kn_cpu_gemm.h"
#include "kn_cpu.h"

enum { ATTN_ROWS = 128 }; /* query rows per block: the f64 scores of a block stay small */

/* Element offset of a multi-index over the leading (batch) dims. */
static int64_t batch_offset(const kn_tensor *t, const int64_t *idx, int nbatch)
{
    int64_t off = t->offset;
    for (int i = 0; i < nbatch; i++) off += idx[i] * t->strides[i];
    return off;
}

/* The mask's strides seen as a tensor of the scores' shape [..., Tq, Tk]:
 * its dims align on the right, a missing or size-1 dim repeats (stride 0). */
static void mask_strides(const kn_tensor *m, int nd, int64_t *st)
{
    for (int i = 0; i < nd; i++) {
        int im = m->ndim - nd + i;
        st[i] = im >= 0 && m->shape[im] != 1 ? m->strides[im] : 0;
    }
}

kn_status kn_cpu_attention(const kn_opcall *c)
{
    if (c->n_in < 3 || c->n_in > 4 || !c->in[0] || !c->in[1] || !c->in[2] || c->n_out < 1 || !c->out[0])
        return kn_error(KN_ERR_ARG, "scaled_dot_product_attention: bad call");
    const kn_tensor *q = c->in[0], *k = c->in[1], *v = c->in[2], *m = c->n_in == 4 ? c->in[3] : NULL;
    kn_tensor *o = c->out[0];
    int nd = q->ndim, nb = nd - 2;
    int64_t tq = q->shape[nd - 2], d = q->shape[nd - 1], tk = k->shape[nd - 2], dv = v->shape[nd - 1];
    if (kn_tensor_numel(o) == 0) return KN_OK;
    int64_t nbatch = 1;
    for (int i = 0; i < nb; i++) nbatch *= q->shape[i];
    int64_t ms[KN_MAX_DIMS] = {0};
    if (m) mask_strides(m, nd, ms);

    int64_t rows = tq < ATTN_ROWS ? tq : ATTN_ROWS;
    double *sc = malloc(sizeof(double) * (size_t)(rows * (tk > 0 ? tk : 1) + rows * dv));
    if (!sc)
        return kn_error(KN_ERR_OOM, "scaled_dot_product_attention: out of host memory for %lld x %lld scores",
                        (long long)rows, (long long)tk);
    double *acc = sc + rows * tk;
    kn_gemm_ws ws = {0};
    kn_status st = KN_OK;

    /* element offsets below include each view's offset: address from the storage */
    const char *qd = (const char *)q->storage->data, *kd = (const char *)k->storage->data;
    const char *vd = (const char *)v->storage->data, *md = m ? (const char *)m->storage->data : NULL;
    char *od = (char *)o->storage->data;
    size_t qs = kn_dtype_size(q->dtype), ks = kn_dtype_size(k->dtype), vs = kn_dtype_size(v->dtype);
    size_t os = kn_dtype_size(o->dtype), mes = m ? kn_dtype_size(m->dtype) : 0;
    const int64_t *qst = q->strides, *kst = k->strides, *vst = v->strides, *ost = o->strides;

    int64_t idx[KN_MAX_DIMS] = {0};
    for (int64_t b = 0; b < nbatch && st == KN_OK; b++) {
        int64_t qo = batch_offset(q, idx, nb), ko = batch_offset(k, idx, nb), vo = batch_offset(v, idx, nb);
        int64_t oo = batch_offset(o, idx, nb), mo = 0;
        if (m) {
            mo = m->offset;
            for (int i = 0; i < nb; i++) mo += idx[i] * ms[i];
        }
        /* k^T as a d x Tk matrix: element (e, j) is k[j, e] */
        kn_gemm_mat kt = {kd + ko * (int64_t)ks, k->dtype, kst[nd - 1], kst[nd - 2], NULL, 0};
        kn_gemm_mat vm = {vd + vo * (int64_t)vs, v->dtype, vst[nd - 2], vst[nd - 1], NULL, 0};
        for (int64_t i0 = 0; i0 < tq && st == KN_OK; i0 += rows) {
            int64_t nr = tq - i0 < rows ? tq - i0 : rows;
            kn_gemm_mat qm = {qd + (qo + i0 * qst[nd - 2]) * (int64_t)qs, q->dtype, qst[nd - 2], qst[nd - 1], NULL, 0};
            st = kn_cpu_gemm(&ws, KN_F64, nr, tk, d, &qm, &kt, sc, tk);
            if (st != KN_OK) break;
            for (int64_t r = 0; r < nr; r++) {
                int64_t i = i0 + r;
                double *p = sc + r * tk, mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < tk; j++) {
                    double s = p[j] * c->a.scale;
                    if (c->a.causal && j > i) s = -INFINITY;
                    if (m) {
                        double mv = kn_load_f64(md + (mo + i * ms[nd - 2] + j * ms[nd - 1]) * (int64_t)mes, m->dtype);
                        if (m->dtype == KN_BOOL) {
                            if (mv == 0) s = -INFINITY;
                        } else {
                            s += mv;
                        }
                    }
                    p[j] = s;
                    if (s > mx || s != s) mx = s;
                }
                /* all keys masked: mx = -inf and -inf - -inf = NaN, as the eager softmax */
                for (int64_t j = 0; j < tk; j++) {
                    p[j] = exp(p[j] - mx);
                    sum += p[j];
                }
                for (int64_t j = 0; j < tk; j++) p[j] /= sum;
            }
            kn_gemm_mat pm = {sc, KN_F64, tk, 1, NULL, 0};
            st = kn_cpu_gemm(&ws, KN_F64, nr, dv, tk, &pm, &vm, acc, dv);
            if (st != KN_OK) break;
            for (int64_t r = 0; r < nr; r++)
                for (int64_t e = 0; e < dv; e++) {
                    double val = acc[r * dv + e];
                    if (c->a.zero_nan && val != val) val = 0; /* the exporter's NaN fill, folded in */
                    kn_store_f64(od + (oo + (i0 + r) * ost[nd - 2] + e * ost[nd - 1]) * (int64_t)os, o->dtype, val);
                }
        }
        for (int i = nb - 1; i >= 0; i--) { /* next batch multi-index */
            if (++idx[i] < q->shape[i]) break;
            idx[i] = 0;
        }
    }
    kn_gemm_ws_free(&ws);
    free(sc);
    return st;
}
