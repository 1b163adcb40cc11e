// kn_la_common.cu: what every module of kiln's own linear-algebra kernels
// shares (kn_linalg.cu, kn_la_aux.cu, kn_la_stem.cu, kn_la_stem_tc.cu):
// bf16 / f16 loads and stores as raw 16-bit words, loads and stores of any
// float dtype by its code, and the packing of two halves into one word.
//
// No CUDA headers: the programs are compiled without include paths.
// kn_cuda_linalg.c puts this file after the argument structs
// (kn_cuda_la_args.h) and before the module's own file.
__device__ __forceinline__ float kn_la_bf16_ld(unsigned short h)
{
    return __uint_as_float((unsigned)h << 16);
}

// round to nearest even; a NaN stays a (quiet) NaN
__device__ __forceinline__ unsigned short kn_la_bf16_st(float f)
{
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

__device__ __forceinline__ float kn_la_f16_ld(unsigned short h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short kn_la_f16_st(float f)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float kn_la_tanh(float x)
{
    return tanhf(x);
}

__device__ __forceinline__ double kn_la_tanh(double x)
{
    return tanh(x);
}

// A matmul's or conv's epilogue activation, for the kernels that take one
// as a code: 0 none, 1 relu (a NaN passes, as relu on the CPU), 2 GELU in
// its tanh form (cuBLASLt's epilogue), 3 hardswish (as kn_la_dw_act)
template <typename Acc>
__device__ __forceinline__ Acc kn_la_act(Acc v, int act)
{
    if (act == 1) return v > (Acc)0 ? v : (v == v ? (Acc)0 : v);
    if (act == 2) {
        Acc u = (Acc)0.7978845608028654 * (v + (Acc)0.044715 * v * v * v);
        return (Acc)0.5 * v * ((Acc)1 + kn_la_tanh(u));
    }
    if (act == 3) {
        Acc t = v * ((Acc)1 / (Acc)6) + (Acc)0.5;
        t = t > (Acc)0 ? t : (Acc)0;
        return v * (t < (Acc)1 ? t : (Acc)1);
    }
    return v;
}

template <typename Acc>
__device__ __forceinline__ Acc kn_la_ld(const char *p, int dt, long long i)
{
    switch (dt) {
    case KN_LA_F64: return (Acc)((const double *)p)[i];
    case KN_LA_BF16: return (Acc)kn_la_bf16_ld(((const unsigned short *)p)[i]);
    case KN_LA_F16: return (Acc)kn_la_f16_ld(((const unsigned short *)p)[i]);
    default: return (Acc)((const float *)p)[i];
    }
}

template <typename Acc>
__device__ __forceinline__ void kn_la_st(char *p, int dt, long long i, Acc v)
{
    switch (dt) {
    case KN_LA_F64: ((double *)p)[i] = (double)v; break;
    case KN_LA_BF16: ((unsigned short *)p)[i] = kn_la_bf16_st((float)v); break;
    case KN_LA_F16: ((unsigned short *)p)[i] = kn_la_f16_st((float)v); break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

__device__ __forceinline__ unsigned kn_la_pack2(int dt, float a, float b)
{
    unsigned short lo = dt == KN_LA_BF16 ? kn_la_bf16_st(a) : kn_la_f16_st(a);
    unsigned short hi = dt == KN_LA_BF16 ? kn_la_bf16_st(b) : kn_la_f16_st(b);
    return (unsigned)lo | ((unsigned)hi << 16);
}

template <int DT>
__device__ __forceinline__ float kn_la_ld_t(const char *p, int i)
{
    if (DT == KN_LA_BF16) return kn_la_bf16_ld(((const unsigned short *)p)[i]);
    if (DT == KN_LA_F16) return kn_la_f16_ld(((const unsigned short *)p)[i]);
    return ((const float *)p)[i];
}

// Row r of a GEMM's y as the row of memory it lands in: r itself, or the
// pixel of the scattered grid (kn_la_row_scatter, kn_cuda_la_args.h)
__device__ __forceinline__ long long kn_la_scatter_row(const kn_la_row_scatter &ys, long long r)
{
    if (ys.pc <= 0) return r;
    const long long pq = (long long)ys.pc * ys.qc, n = r / pq, rem = r - n * pq;
    const int i = (int)(rem / ys.qc), j = (int)(rem - (long long)i * ys.qc);
    return (n * ys.h + (long long)i * ys.sh + ys.oh) * ys.w + (long long)j * ys.sw + ys.ow;
}
