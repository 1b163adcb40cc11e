/* kn_ops.cu: what every template family shares (dtype access, index math).
 *
 * A template module is built for one element dtype KN_DT (a kn_dtype value:
 * 0 f32, 1 f64, 2 bf16, 3 f16, 4 i32, 5 i64, 6 bool) from this text: the
 * CUDA prelude of core/compiler/kn_kir.c (bf16/f16 bit code), kn_cuda_targs.h (the
 * argument structs), core/base/kn_rng.h, then this file and the family files
 * (kn_reduce.cu, kn_index.cu, kn_pool.cu, kn_random.cu, kn_copy.cu,
 * kn_gather_scatter.cu). With KN_ONE_KERNEL defined, the family files
 * compile only the kernel KN_KSEL_<name> names (each kernel sits in its
 * own #if): kn_cuda_tsrc.c builds one such module a kernel, so a model's
 * first call compiles only what it launches.
 * NVRTC has no headers, so nothing here includes anything.
 *
 * Loads and stores follow core/base/kn_dtype.c's kn_load_f64 / kn_store_f64 to
 * the bit (bf16/f16 round from f32, integers truncate and saturate, NaN
 * stores 0 into integers and true into bool), because every result is
 * compared with the CPU reference.
 */
#ifndef KN_DT
#error "a template module needs KN_DT (the element dtype)"
#endif

#define KN_DT_F32 0
#define KN_DT_F64 1
#define KN_DT_BF16 2
#define KN_DT_F16 3
#define KN_DT_I32 4
#define KN_DT_I64 5
#define KN_DT_BOOL 6

template <int D> KN_FN constexpr int kn_esize()
{
    return D == KN_DT_F64 || D == KN_DT_I64 ? 8 : D == KN_DT_F32 || D == KN_DT_I32 ? 4 : D == KN_DT_BOOL ? 1 : 2;
}

template <int D> KN_FN constexpr bool kn_isfloat()
{
    return D <= KN_DT_F16;
}

/* The NaN C's NAN gives (0x7fc00000 as a float): the same bits as the CPU. */
KN_FN double kn_qnan()
{
    return __longlong_as_double(0x7ff8000000000000LL);
}

/* kn_load_f64 */
template <int D> KN_FN double kn_ldd(const char *p)
{
    if constexpr (D == KN_DT_F32) return (double)*(const float *)p;
    else if constexpr (D == KN_DT_F64) return *(const double *)p;
    else if constexpr (D == KN_DT_BF16) return (double)kn_ld_bf16(*(const kn_u16 *)p);
    else if constexpr (D == KN_DT_F16) return (double)kn_ld_f16(*(const kn_u16 *)p);
    else if constexpr (D == KN_DT_I32) return (double)*(const int *)p;
    else if constexpr (D == KN_DT_I64) return (double)*(const long long *)p;
    else return *(const unsigned char *)p ? 1.0 : 0.0;
}

KN_FN long long kn_sat(double v, double lo, double hi)
{
    if (v != v) return 0;
    if (v <= lo) return (long long)lo;
    if (v >= hi) return (long long)hi;
    return (long long)v;
}

/* kn_store_f64 */
template <int D> KN_FN void kn_std(char *p, double v)
{
    if constexpr (D == KN_DT_F32) *(float *)p = (float)v;
    else if constexpr (D == KN_DT_F64) *(double *)p = v;
    else if constexpr (D == KN_DT_BF16) *(kn_u16 *)p = kn_st_bf16((float)v);
    else if constexpr (D == KN_DT_F16) *(kn_u16 *)p = kn_st_f16((float)v);
    else if constexpr (D == KN_DT_I32) *(int *)p = (int)kn_sat(v, -2147483648.0, 2147483647.0);
    else if constexpr (D == KN_DT_I64)
        *(long long *)p = kn_sat(v, -9223372036854775808.0, 9223372036854774784.0);
    else *(unsigned char *)p = v != 0.0 ? 1 : 0;
}

/* Exact integer access for i32, i64 and bool (the CPU's load_i64 / store_i64). */
template <int D> KN_FN long long kn_ldi(const char *p)
{
    if constexpr (D == KN_DT_I32) return *(const int *)p;
    else if constexpr (D == KN_DT_I64) return *(const long long *)p;
    else if constexpr (D == KN_DT_BOOL) return *(const unsigned char *)p != 0;
    else return (long long)kn_ldd<D>(p);
}

template <int D> KN_FN void kn_sti(char *p, long long v)
{
    if constexpr (D == KN_DT_I32) *(int *)p = (int)v;
    else if constexpr (D == KN_DT_I64) *(long long *)p = v;
    else if constexpr (D == KN_DT_BOOL) *(unsigned char *)p = v != 0;
    else kn_std<D>(p, (double)v);
}

/* One element's bytes, unchanged. */
template <int D> KN_FN void kn_cpy(char *dst, const char *src)
{
    if constexpr (kn_esize<D>() == 8) *(unsigned long long *)dst = *(const unsigned long long *)src;
    else if constexpr (kn_esize<D>() == 4) *(unsigned int *)dst = *(const unsigned int *)src;
    else if constexpr (kn_esize<D>() == 2) *(kn_u16 *)dst = *(const kn_u16 *)src;
    else *(unsigned char *)dst = *(const unsigned char *)src;
}

/* Element offset of flat (row-major) index e of a strided view. The loop
 * runs over the fixed maximum so the struct arrays are indexed with
 * constants and stay in parameter space. */
KN_FN long long kn_offset(long long e, int nd, const long long *shape, const long long *st)
{
    long long off = 0;
#pragma unroll
    for (int d = KN_T_MAXD - 1; d >= 0; d--) {
        if (d < nd) {
            long long s = shape[d];
            off += (e % s) * st[d];
            e /= s;
        }
    }
    return off;
}

/* The coordinates of flat index e in shape (the dims past nd are zero). */
KN_FN void kn_coords(long long e, int nd, const long long *shape, long long *c)
{
#pragma unroll
    for (int d = KN_T_MAXD - 1; d >= 0; d--) {
        c[d] = 0;
        if (d < nd) {
            c[d] = e % shape[d];
            e /= shape[d];
        }
    }
}

/* e's coordinates in a space of n elements: 32-bit divisions where n is
 * under 2^31 (the common case). A 64-bit division is a long software
 * sequence, and the copies, cats and scatters that work out every
 * element's coordinates this way ran at 12-16% of the copy roofline in a
 * convnet's training step (im2col's cats, a gradient's zero padding). */
KN_FN void kn_coords_n(long long e, long long n, int nd, const long long *shape, long long *c)
{
    if (n > 2147483647LL) {
        kn_coords(e, nd, shape, c);
        return;
    }
    unsigned u = (unsigned)e;
#pragma unroll
    for (int d = KN_T_MAXD - 1; d >= 0; d--) {
        c[d] = 0;
        if (d < nd) {
            const unsigned s = (unsigned)shape[d], q = u / s;
            c[d] = (long long)(u - q * s);
            u = q;
        }
    }
}

/* An element's bytes as an integer, to hold loads in registers before
 * their stores (a run of copies: KN_T_RUN). */
template <int D> KN_FN unsigned long long kn_ldraw(const char *p)
{
    if constexpr (kn_esize<D>() == 8) return *(const unsigned long long *)p;
    else if constexpr (kn_esize<D>() == 4) return *(const unsigned int *)p;
    else if constexpr (kn_esize<D>() == 2) return *(const kn_u16 *)p;
    else return *(const unsigned char *)p;
}

template <int D> KN_FN void kn_straw(char *p, unsigned long long v)
{
    if constexpr (kn_esize<D>() == 8) *(unsigned long long *)p = v;
    else if constexpr (kn_esize<D>() == 4) *(unsigned int *)p = (unsigned int)v;
    else if constexpr (kn_esize<D>() == 2) *(kn_u16 *)p = (kn_u16)v;
    else *(unsigned char *)p = (unsigned char)v;
}

/* Strided copies and cats take KN_T_RUN consecutive elements a thread, along
 * the last dim: their coordinates are worked out once a run, and the run's
 * loads are all issued before its first store. An element a thread kept
 * one load in flight and worked out every coordinate: im2col's cats in a
 * convnet's training step ran at 15-18% of the copy roof (H200).
 * KN_T_RUN is in kn_cuda_targs.h: the host sizes the grid by runs. */

/* c[dim], with constant indices so that c can live in registers. */
KN_FN long long kn_pick(const long long *c, int dim)
{
    long long v = 0;
#pragma unroll
    for (int d = 0; d < KN_T_MAXD; d++)
        if (d == dim) v = c[d];
    return v;
}

/* Offset of coordinates c with c[dim] replaced by j. */
KN_FN long long kn_offset_at(const long long *c, int nd, const long long *st, int dim, long long j)
{
    long long off = 0;
#pragma unroll
    for (int d = 0; d < KN_T_MAXD; d++)
        if (d < nd) off += (d == dim ? j : c[d]) * st[d];
    return off;
}

KN_FN long long kn_tid()
{
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}

KN_FN long long kn_nthreads()
{
    return (long long)gridDim.x * blockDim.x;
}
