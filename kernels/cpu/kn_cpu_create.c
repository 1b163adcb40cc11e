/* kn_cpu_create: the CPU reference for full, arange, randn, rand and randint.
 *
 * Random element i (row-major in the output) comes from the counter-based
 * generator in kn_rng.h at index attr.rng_offset + i, so a CUDA kernel built
 * from the same header produces the same tensor bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kn_cpu.h"
#include "kn_rng.h"

static void fill_full(char *d, kn_dtype dt, int64_t n, double v)
{
    int64_t es = (int64_t)kn_dtype_size(dt);
    if (n == 0) return;
    kn_store_f64(d, dt, v);
    if (v == 0.0 && !signbit(v)) { /* +0 is all-zero bits in every dtype */
        memset(d, 0, (size_t)(n * es));
        return;
    }
    /* Double the filled prefix each step: log2(n) memcpy calls. */
    int64_t done = 1;
    while (done < n) {
        int64_t m = done < n - done ? done : n - done;
        memcpy(d + done * es, d, (size_t)(m * es));
        done += m;
    }
}

kn_status kn_cpu_create(const kn_opcall *c)
{
    if (c->n_out < 1 || !c->out[0] || kn_op_kind_of(c->op) != KN_K_CREATE)
        return kn_error(KN_ERR_ARG, "%s: bad call", kn_op_name(c->op));
    kn_tensor *out = c->out[0];
    kn_dtype dt = out->dtype;
    int64_t n = kn_tensor_numel(out), es = (int64_t)kn_dtype_size(dt);
    char *d = kn_tensor_data(out);
    const kn_attrs *a = &c->a;
    double lo = a->value, hi = a->value2;
    switch (c->op) {
    case KN_OP_FULL: fill_full(d, dt, n, a->value); break;
    case KN_OP_ARANGE:
        if ((dt == KN_I64 || dt == KN_I32) && lo == trunc(lo) && hi == trunc(hi)) {
            /* integral start and step: exact in int64 (a double loses
             * integers past 2^53; shape inference checked the range) */
            int64_t start = (int64_t)lo, step = (int64_t)hi;
            for (int64_t i = 0; i < n; i++) {
                int64_t v = (int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)step);
                if (dt == KN_I64) memcpy(d + i * es, &v, 8);
                else {
                    int32_t w = (int32_t)v;
                    memcpy(d + i * es, &w, 4);
                }
            }
            break;
        }
        for (int64_t i = 0; i < n; i++) kn_store_f64(d + i * es, dt, lo + (double)i * hi);
        break;
    case KN_OP_RANDN:
        for (int64_t i = 0; i < n; i++)
            kn_store_f64(d + i * es, dt, kn_rng_normal(a->seed, a->rng_offset + (uint64_t)i));
        break;
    case KN_OP_RAND:
        for (int64_t i = 0; i < n; i++) {
            double u = kn_rng_uniform(a->seed, a->rng_offset + (uint64_t)i);
            kn_store_f64(d + i * es, dt, hi > lo ? lo + u * (hi - lo) : u);
        }
        break;
    case KN_OP_RANDINT:
        for (int64_t i = 0; i < n; i++) {
            double u = kn_rng_uniform(a->seed, a->rng_offset + (uint64_t)i);
            double v = floor(lo + u * (hi - lo));
            if (v >= hi) v = ceil(hi) - 1; /* rounding of a huge range must not reach high */
            kn_store_f64(d + i * es, dt, v);
        }
        break;
    default: return kn_error(KN_ERR_UNSUPPORTED, "%s: not a creation op", kn_op_name(c->op));
    }
    return KN_OK;
}
