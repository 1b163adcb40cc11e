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

/* A convolution's output size along one dim */
static inline int st_out_dim(int in, int win, int stride, int pad, int dil)
{
    return (in + 2 * pad - dil * (win - 1) - 1) / stride + 1;
}

#ifdef KN_CUDA_CONTEXT_H
/* A GPU f32 tensor of shape (ndim dims) holding host floats v */
static inline kn_tensor *st_gpu_of(const float *v, int ndim, const int64_t *shape)
{
    kn_tensor *h = NULL, *d = NULL;
    if (kn_tensor_new(KN_F32, ndim, shape, KN_CPU, &h) != KN_OK) return NULL;
    memcpy(kn_tensor_data(h), v, sizeof(float) * (size_t)kn_tensor_numel(h));
    kn_tensor_to_device(h, kn_cuda_current()->device, NULL, &d);
    kn_tensor_release(h);
    return d;
}
#endif

#endif
