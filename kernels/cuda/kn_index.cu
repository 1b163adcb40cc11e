/* kn_index.cu: index_select, gather and index_add with kiln's 1-based
 * indices (kernels/cpu/kn_cpu_index.c is the reference).
 *
 * Only the data says whether an index is in range, and a device cannot
 * raise an error: kn_index_check records the first bad position for the
 * host to report, and the copying kernels clamp every index into range so
 * that a bad one never reads or writes outside its tensor.
 */

KN_FN long long kn_index_at(const char *idx, int idx64, long long off)
{
    return idx64 ? ((const long long *)idx)[off] : (long long)((const int *)idx)[off];
}

/* idx[off] - 1 clamped into 0..size-1 */
KN_FN long long kn_index_clamped(const char *idx, int idx64, long long off, long long size)
{
    long long j = kn_index_at(idx, idx64, off) - 1;
    return j < 0 ? 0 : j >= size ? size - 1 : j;
}

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_index_check)
extern "C" __global__ void kn_index_check(kn_icheck_args a)
{
    for (long long p = kn_tid(); p < a.n; p += kn_nthreads()) {
        long long v = kn_index_at(a.idx, a.idx64, kn_offset(p, a.ndim, a.shape, a.st));
        if (v < 1 || v > a.size) atomicMin(a.flag, (unsigned long long)p);
    }
}
#endif

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_index_select)
extern "C" __global__ void kn_index_select(kn_index_args a)
{
    const int es = kn_esize<KN_DT>();
    long long c[KN_T_MAXD];
    for (long long e = kn_tid(); e < a.n; e += kn_nthreads()) {
        kn_coords_n(e, a.n, a.ndim, a.shape, c);
        long long j = kn_index_clamped(a.idx, a.idx64, kn_pick(c, a.dim) * a.ist[0], a.size);
        kn_cpy<KN_DT>(a.dst + e * es, a.x + kn_offset_at(c, a.ndim, a.xst, a.dim, j) * es);
    }
}
#endif

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_index_rows)
/* index_select of whole rows: dim 0 of an x whose rows (every dim after
 * the first) are contiguous, into a contiguous out; out row r is x row
 * idx[r]. a.shape[1] is the row's length in elements and a.dim the
 * vector width in elements (16 bytes' worth where the rows and pointers
 * allow, else 1). One division an element or vector, where
 * kn_index_select works out every coordinate: the embedding lookups of
 * the language models (GPT-2's 1024 tokens x 768 took 15.8 us that way). */
extern "C" __global__ void kn_index_rows(kn_index_args a)
{
    const int es = kn_esize<KN_DT>();
    const long long row = a.shape[1], vec = a.dim, rowv = row / vec, nv = a.n / vec;
    if (nv <= 2147483647LL) { /* 32-bit division: 64-bit is a long software sequence */
        const unsigned rowv32 = (unsigned)rowv;
        for (unsigned e = (unsigned)kn_tid(); e < (unsigned)nv; e += (unsigned)kn_nthreads()) {
            const unsigned r = e / rowv32, c = (e - r * rowv32) * (unsigned)vec;
            const long long j = kn_index_clamped(a.idx, a.idx64, (long long)r * a.ist[0], a.size);
            const char *src = a.x + (j * a.xst[0] + c) * es;
            char *dst = a.dst + ((long long)r * row + c) * es;
            if (vec > 1) *(uint4 *)dst = *(const uint4 *)src;
            else kn_cpy<KN_DT>(dst, src);
        }
        return;
    }
    for (long long e = kn_tid(); e < nv; e += kn_nthreads()) {
        const long long r = e / rowv, c = (e - r * rowv) * vec;
        const long long j = kn_index_clamped(a.idx, a.idx64, r * a.ist[0], a.size);
        const char *src = a.x + (j * a.xst[0] + c) * es;
        char *dst = a.dst + (r * row + c) * es;
        if (vec > 1) *(uint4 *)dst = *(const uint4 *)src;
        else kn_cpy<KN_DT>(dst, src);
    }
}
#endif

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_gather)
extern "C" __global__ void kn_gather(kn_index_args a)
{
    const int es = kn_esize<KN_DT>();
    long long c[KN_T_MAXD];
    for (long long e = kn_tid(); e < a.n; e += kn_nthreads()) {
        kn_coords_n(e, a.n, a.ndim, a.shape, c);
        long long ioff = kn_offset_at(c, a.ndim, a.ist, -1, 0);
        long long j = kn_index_clamped(a.idx, a.idx64, ioff, a.size);
        kn_cpy<KN_DT>(a.dst + e * es, a.x + kn_offset_at(c, a.ndim, a.xst, a.dim, j) * es);
    }
}
#endif

/* dst += v with one atomic read-modify-write, rounding as the CPU's
 * kn_store_f64(dst, kn_load_f64(dst) + v) does. bf16 and f16 have no
 * atomics without CUDA's headers: compare-and-swap the 32-bit word that
 * holds them. */
KN_FN void kn_atomic_add(char *dst, const char *src)
{
    if constexpr (KN_DT == KN_DT_F32) {
        atomicAdd((float *)dst, *(const float *)src);
    } else if constexpr (KN_DT == KN_DT_F64) {
        atomicAdd((double *)dst, *(const double *)src);
    } else if constexpr (KN_DT == KN_DT_I32) {
        atomicAdd((unsigned int *)dst, *(const unsigned int *)src); /* wraps, as the CPU */
    } else if constexpr (KN_DT == KN_DT_I64) {
        atomicAdd((unsigned long long *)dst, *(const unsigned long long *)src);
    } else if constexpr (KN_DT == KN_DT_BOOL) {
        unsigned long long addr = (unsigned long long)dst;
        unsigned int *w = (unsigned int *)(addr & ~3ULL);
        if (*(const unsigned char *)src) atomicOr(w, 1u << (8 * (addr & 3)));
    } else {
        unsigned long long addr = (unsigned long long)dst;
        unsigned int *w = (unsigned int *)(addr & ~3ULL);
        int sh = (int)(addr & 2) * 8;
        double v = kn_ldd<KN_DT>(src);
        unsigned int old = *w, seen;
        do {
            seen = old;
            kn_u16 cur = (kn_u16)(seen >> sh), sum;
            kn_std<KN_DT>((char *)&sum, kn_ldd<KN_DT>((const char *)&cur) + v);
            unsigned int nw = (seen & ~(0xffffu << sh)) | ((unsigned int)sum << sh);
            old = atomicCAS(w, seen, nw);
        } while (old != seen);
    }
}

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_index_add_rows)
/* index_add of whole rows: dst row idx[r] += source row r, along dim 0,
 * the source's rows (every dim after the first) contiguous, a.xst[0]
 * apart, dst contiguous. a.shape[1] is the row's length in elements and
 * a.dim the vector width: 4 for f32 rows whose starts are 16-byte aligned,
 * added by one vector reduction (red.global.add.v4.f32, sm_90) where the
 * device has it, else 1. One 32-bit division an element or vector, where
 * kn_index_add works out every coordinate in 64 bits: an embedding's
 * gradient (4096 token rows of 512 into 1000) took 35.6 us that way on the
 * H200, 6% of its memory roof. */
extern "C" __global__ void kn_index_add_rows(kn_index_args a)
{
    const int es = kn_esize<KN_DT>();
    const long long row = a.shape[1], vec = a.dim, rowv = row / vec, nv = a.n / vec;
    for (long long e = kn_tid(); e < nv; e += kn_nthreads()) {
        long long r, c;
        if (nv <= 2147483647LL) { /* 32-bit division: 64-bit is a long software sequence */
            const unsigned r32 = (unsigned)e / (unsigned)rowv;
            r = r32;
            c = ((unsigned)e - r32 * (unsigned)rowv) * vec;
        } else {
            r = e / rowv;
            c = (e - r * rowv) * vec;
        }
        const long long j = kn_index_clamped(a.idx, a.idx64, r * a.ist[0], a.size);
        char *dst = a.dst + (j * row + c) * es;
        const char *src = a.x + (r * a.xst[0] + c) * es;
        if constexpr (KN_DT == KN_DT_F32) {
            if (vec == 4) {
                const float4 v = *(const float4 *)src;
#if __CUDA_ARCH__ >= 900
                asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "f"(v.x), "f"(v.y), "f"(v.z),
                             "f"(v.w)
                             : "memory");
#else
                atomicAdd((float *)dst, v.x);
                atomicAdd((float *)dst + 1, v.y);
                atomicAdd((float *)dst + 2, v.z);
                atomicAdd((float *)dst + 3, v.w);
#endif
                continue;
            }
        }
        kn_atomic_add(dst, src);
    }
}
#endif

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_index_add)
extern "C" __global__ void kn_index_add(kn_index_args a)
{
    const int es = kn_esize<KN_DT>();
    long long c[KN_T_MAXD];
    for (long long e = kn_tid(); e < a.n; e += kn_nthreads()) {
        kn_coords_n(e, a.n, a.ndim, a.shape, c);
        long long j = kn_index_clamped(a.idx, a.idx64, kn_pick(c, a.dim) * a.ist[0], a.size);
        kn_atomic_add(a.dst + kn_offset_at(c, a.ndim, a.dst_st, a.dim, j) * es,
                      a.x + kn_offset_at(c, a.ndim, a.xst, -1, 0) * es);
    }
}
#endif
