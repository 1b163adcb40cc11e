/* split_testlib.h: what the split-precision kernel tests
 * (t/cuda_split_gemm.c, t/cuda_split_conv.c) share: the inputs they draw,
 * the error measure of the precision ledger, and reading a GPU tensor
 * back as float64. Include after ops_testlib.h (its random source). */
#ifndef SPLIT_TESTLIB_H
#define SPLIT_TESTLIB_H

#include <math.h>

#include "kn_tensor.h"
#include "kn_view.h"
#include "ops_testlib.h"

#define FLOOR 4.0e-7 /* the precision ledger's slack for exact true-f32 results */

/* An input value: 0 uniform(-1, 1); 1 spread over 1e-6 .. 1e6; 2
 * denormal, 1e-39 .. 1e-38, to pair with 3, 1e20 .. 1e30, so that the
 * products themselves are normal f32. Random signs. */
static float st_draw(int values)
{
    double mag = values == 1   ? pow(10.0, -6 + 12 * tl_unit())
                 : values == 2 ? 1e-39 * (1 + 9 * tl_unit())
                 : values == 3 ? pow(10.0, 20 + 10 * tl_unit())
                               : tl_unit();
    return (float)((tl_unit() < 0.5 ? -1 : 1) * mag);
}

/* max |got - ref| / max |ref| (kn_plan_ledger.c's measure); a NaN in got
 * is an infinite error */
static double st_rel_err(const double *got, const double *ref, int64_t n)
{
    double scale = 0, mx = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    for (int64_t i = 0; i < n; i++) {
        double e = isnan(got[i]) ? INFINITY : fabs(got[i] - ref[i]) / (scale ? scale : 1);
        if (e > mx) mx = e;
    }
    return mx;
}

/* t's values in float64 on the host, in its logical order (free them) */
static double *st_host_of(kn_tensor *t)
{
    kn_tensor *c = NULL, *f = NULL;
    kn_tensor_to_device(t, KN_CPU, NULL, &c);
    kn_tensor_cast(c, KN_F64, &f);
    double *v = malloc(sizeof(double) * (size_t)kn_tensor_numel(f));
    kn_tensor_gather_host(f, v);
    kn_tensor_release(c);
    kn_tensor_release(f);
    return v;
}

#endif
