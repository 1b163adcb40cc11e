/* kn_cpu_attention: scaled_dot_product_attention on the CPU, and the
 * reference the fused GPU kernel is checked against.
 *
 * Per batch-head, k and v are loaded once into double rows; each query row
 * then computes its scores q.k^T * scale in double, applies the causal
 * limit and the mask, takes the softmax exactly as the eager softmax does
 * (kn_cpu_reduce.c: max, exp, sum, divide; a row whose every key is masked
 * is -inf throughout and gives NaN, as torch) and sums probs * v in double;
 * only the result is rounded, to the output dtype. Every input and the
 * output may be any strided view (transposed heads, expanded masks).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kn_cpu.h"

/* Element offset of a multi-index over the leading (batch) dims. */
static int64_t batch_offset(const kn_tensor *t, const int64_t *idx, int nbatch)
{
    int64_t off = t->offset;
    for (int i = 0; i < nbatch; i++) off += idx[i] * t->strides[i];
    return off;
}

/* The mask's strides seen as a tensor of the scores' shape [..., Tq, Tk]:
 * its dims align on the right, a missing or size-1 dim repeats (stride 0). */
static void mask_strides(const kn_tensor *m, int nd, const int64_t *scores_shape, int64_t *st)
{
    for (int i = 0; i < nd; i++) {
        int im = m->ndim - nd + i;
        st[i] = (im >= 0 && m->shape[im] == scores_shape[i]) ? m->strides[im] : 0;
        if (im >= 0 && m->shape[im] == 1) st[i] = 0;
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

    int64_t scores_shape[KN_MAX_DIMS], ms[KN_MAX_DIMS] = {0};
    for (int i = 0; i < nd - 1; i++) scores_shape[i] = q->shape[i];
    scores_shape[nd - 1] = tk;
    if (m) mask_strides(m, nd, scores_shape, ms);

    size_t nk = (size_t)(tk * d), nv = (size_t)(tk * dv);
    double *kr = malloc(sizeof(double) * (nk + nv + (size_t)tk + (size_t)d + (size_t)dv + 1));
    if (!kr)
        return kn_error(KN_ERR_OOM, "scaled_dot_product_attention: out of host memory for %lld keys",
                        (long long)tk);
    double *vr = kr + nk, *p = vr + nv, *qr = p + tk, *acc = qr + d;

    /* element offsets below include each view's offset: address from the storage */
    const char *qd = (const char *)q->storage->data;
    const char *kd = (const char *)k->storage->data, *vd = (const char *)v->storage->data;
    const char *md = m ? (const char *)m->storage->data : NULL;
    char *od = (char *)o->storage->data;
    size_t qs = kn_dtype_size(q->dtype), ks = kn_dtype_size(k->dtype), vs = kn_dtype_size(v->dtype);
    size_t os = kn_dtype_size(o->dtype), mes = m ? kn_dtype_size(m->dtype) : 0;
    const int64_t *qst = q->strides, *kst = k->strides, *vst = v->strides, *ost = o->strides;

    int64_t idx[KN_MAX_DIMS] = {0};
    for (int64_t b = 0; b < nbatch; b++) {
        int64_t qo = batch_offset(q, idx, nb), ko = batch_offset(k, idx, nb), vo = batch_offset(v, idx, nb);
        int64_t oo = batch_offset(o, idx, nb), mo = 0;
        if (m) {
            mo = m->offset;
            for (int i = 0; i < nb; i++) mo += idx[i] * ms[i];
        }
        for (int64_t j = 0; j < tk; j++) {
            for (int64_t e = 0; e < d; e++)
                kr[j * d + e] = kn_load_f64(kd + (ko + j * kst[nd - 2] + e * kst[nd - 1]) * (int64_t)ks, k->dtype);
            for (int64_t e = 0; e < dv; e++)
                vr[j * dv + e] = kn_load_f64(vd + (vo + j * vst[nd - 2] + e * vst[nd - 1]) * (int64_t)vs, v->dtype);
        }
        for (int64_t i = 0; i < tq; i++) {
            for (int64_t e = 0; e < d; e++)
                qr[e] = kn_load_f64(qd + (qo + i * qst[nd - 2] + e * qst[nd - 1]) * (int64_t)qs, q->dtype);
            double mx = -INFINITY;
            for (int64_t j = 0; j < tk; j++) {
                double s = 0;
                for (int64_t e = 0; e < d; e++) s += qr[e] * kr[j * d + e];
                s *= c->a.scale;
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
            double sum = 0;
            for (int64_t j = 0; j < tk; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
            }
            for (int64_t e = 0; e < dv; e++) acc[e] = 0;
            for (int64_t j = 0; j < tk; j++) {
                double pj = p[j] / sum;
                for (int64_t e = 0; e < dv; e++) acc[e] += pj * vr[j * dv + e];
            }
            for (int64_t e = 0; e < dv; e++)
                kn_store_f64(od + (oo + i * ost[nd - 2] + e * ost[nd - 1]) * (int64_t)os, o->dtype, acc[e]);
        }
        for (int i = nb - 1; i >= 0; i--) { /* next batch multi-index */
            if (++idx[i] < q->shape[i]) break;
            idx[i] = 0;
        }
    }
    free(kr);
    return KN_OK;
}
