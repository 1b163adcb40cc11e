/* kn_copy.cu: strided copies with a dtype conversion, and cat.
 *
 * kn_copy_<dst> copies a KN_DT view into a view of dtype <dst> of the same
 * shape: CONTIGUOUS and CAST for every pair of dtypes, index_add's first
 * copy and cat's inputs of another dtype. A conversion goes through
 * double, as the CPU's cast does; same-dtype copies move bytes.
 */

/* Run r of a space of rows `row` long, cut into runs of KN_T_RUN that stay
 * inside one row (per_row of them a row): its first element e0, its column
 * in the row and its length m. */
KN_FN void kn_row_run(long long r, long long row, long long per_row, long long *e0, long long *col, int *m)
{
    const long long ri = r / per_row;
    *col = (r - ri * per_row) * KN_T_RUN;
    *e0 = ri * row + *col;
    *m = row - *col < KN_T_RUN ? (int)(row - *col) : KN_T_RUN;
}

template <int S, int D> KN_FN void kn_copy_impl(const kn_copy_args &a)
{
    if (a.ndim == 1) {
        for (long long e = kn_tid(); e < a.n; e += kn_nthreads()) {
            const char *s = a.src + e * a.sst[0] * kn_esize<S>();
            char *d = a.dst + e * a.dst_st[0] * kn_esize<D>();
            if constexpr (S == D) kn_cpy<S>(d, s);
            else kn_std<D>(d, kn_ldd<S>(s));
        }
        return;
    }
    /* runs of KN_T_RUN along the last dim (kn_ops.cu), one set of
     * coordinates for both sides */
    const int L = a.ndim - 1;
    const long long row = kn_pick(a.shape, L), sl = kn_pick(a.sst, L), dl = kn_pick(a.dst_st, L);
    const long long per_row = (row + KN_T_RUN - 1) / KN_T_RUN, nrun = a.n / row * per_row;
    long long c[KN_T_MAXD];
    for (long long r = kn_tid(); r < nrun; r += kn_nthreads()) {
        long long e0, col;
        int m;
        kn_row_run(r, row, per_row, &e0, &col, &m);
        kn_coords_n(e0, a.n, a.ndim, a.shape, c);
        const long long so = kn_offset_at(c, a.ndim, a.sst, -1, 0), dof = kn_offset_at(c, a.ndim, a.dst_st, -1, 0);
        if constexpr (S == D) {
            unsigned long long v[KN_T_RUN];
#pragma unroll
            for (int q = 0; q < KN_T_RUN; q++) v[q] = q < m ? kn_ldraw<S>(a.src + (so + q * sl) * kn_esize<S>()) : 0;
#pragma unroll
            for (int q = 0; q < KN_T_RUN; q++)
                if (q < m) kn_straw<D>(a.dst + (dof + q * dl) * kn_esize<D>(), v[q]);
        } else {
            double v[KN_T_RUN];
#pragma unroll
            for (int q = 0; q < KN_T_RUN; q++) v[q] = q < m ? kn_ldd<S>(a.src + (so + q * sl) * kn_esize<S>()) : 0.0;
#pragma unroll
            for (int q = 0; q < KN_T_RUN; q++)
                if (q < m) kn_std<D>(a.dst + (dof + q * dl) * kn_esize<D>(), v[q]);
        }
    }
}

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_copy_f32)
extern "C" __global__ void kn_copy_f32(kn_copy_args a) { kn_copy_impl<KN_DT, KN_DT_F32>(a); }
#endif
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_copy_f64)
extern "C" __global__ void kn_copy_f64(kn_copy_args a) { kn_copy_impl<KN_DT, KN_DT_F64>(a); }
#endif
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_copy_bf16)
extern "C" __global__ void kn_copy_bf16(kn_copy_args a) { kn_copy_impl<KN_DT, KN_DT_BF16>(a); }
#endif
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_copy_f16)
extern "C" __global__ void kn_copy_f16(kn_copy_args a) { kn_copy_impl<KN_DT, KN_DT_F16>(a); }
#endif
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_copy_i32)
extern "C" __global__ void kn_copy_i32(kn_copy_args a) { kn_copy_impl<KN_DT, KN_DT_I32>(a); }
#endif
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_copy_i64)
extern "C" __global__ void kn_copy_i64(kn_copy_args a) { kn_copy_impl<KN_DT, KN_DT_I64>(a); }
#endif
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_copy_bool)
extern "C" __global__ void kn_copy_bool(kn_copy_args a) { kn_copy_impl<KN_DT, KN_DT_BOOL>(a); }
#endif

/* A patch embedding's windows, taps in the channels-last weight's order
 * (kh, kw, c) from an NCHW image: the copy kn_copy makes of that view
 * reads one element of each channel's plane in turn (c is innermost), 3
 * elements a coordinate computation; ViT-B/16's 8 images took 8.2 us, at
 * 18% of the copy's roofline. A block here stages one band (an image
 * row kh of a patch row p, across the channels: C rows of Q * KW
 * contiguous elements, read coalesced) in shared memory and writes its Q
 * windows' runs of KW * C contiguous elements.
 * Measured (H200, :time of the bf16 conv, windows and GEMM together): 14.0
 * us against 14.7 with the view's copy; Nsight Compute (base clocks, cold
 * caches) 12.2 us for this kernel alone. A band is a few kilobytes, so an
 * SM has little in flight: staging several image rows a block, with
 * 16-byte loads, is the next step (written, not yet measured). */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_patches)
extern "C" __global__ void kn_patches(kn_patches_args a)
{
    __shared__ __align__(16) unsigned char band_buf[KN_T_PATCHES_SMEM];
    const int es = kn_esize<KN_DT>();
    const int w = a.q * a.kw, run = a.kw * a.c, taps = a.kh * run, total = a.q * run;
    /* 32-bit index math, once a band (64-bit divisions are a software
     * sequence each), and none in the staging loop */
    for (unsigned band = blockIdx.x; band < (unsigned)a.bands; band += gridDim.x) {
        const unsigned kh = band % (unsigned)a.kh, np = band / (unsigned)a.kh;
        const unsigned p = np % (unsigned)a.p, n = np / (unsigned)a.p;
        const char *src = a.src + ((long long)n * a.sn + (long long)(p * a.kh + kh) * a.sh) * es;
        for (int c = 0; c < a.c; c++) {
            const char *row = src + (long long)c * a.sc * es;
            unsigned char *buf = band_buf + c * w * es;
            for (int x = threadIdx.x; x < w; x += blockDim.x) kn_cpy<KN_DT>((char *)buf + x * es, row + (long long)x * a.sw * es);
        }
        __syncthreads();
        char *dst = a.dst + ((long long)np * a.q * taps + (long long)kh * run) * es;
        for (int j = threadIdx.x; j < total; j += blockDim.x) {
            const int q = j / run, r = j - q * run, kw = r / a.c, c = r - kw * a.c;
            kn_cpy<KN_DT>(dst + ((long long)q * taps + r) * es, (const char *)band_buf + (c * w + q * a.kw + kw) * es);
        }
        __syncthreads(); /* the band's buffer is free */
    }
}
#endif

/* The input of a cat whose range along its dim holds position p. */
KN_FN int kn_cat_part(const kn_cat_args &a, long long p)
{
    int k = 0;
    while (k + 1 < a.nin && a.start[k + 1] <= p) k++;
    return k;
}

/* cat where every input's part of an output row is contiguous: the output
 * is outer rows of a.shape[0] elements, input k fills elements
 * start[k] .. start[k+1]-1 of each row from src[k] + row * st[k][0].
 * a.dim is the vector width in elements (16 bytes' worth where every part
 * and pointer allows, else 1). One division a vector, where kn_cat works
 * out every coordinate of every element (ViT's class-token cat of
 * 8 x 197 x 768 took 14 us that way). */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_cat_rows)
extern "C" __global__ void kn_cat_rows(kn_cat_args a)
{
    const int es = kn_esize<KN_DT>();
    const long long vec = a.dim, row = a.shape[0], rowv = row / vec, nv = a.n / vec;
    const bool narrow = nv <= 2147483647LL; /* 32-bit division where it fits: 64-bit is a long sequence */
    for (long long e = kn_tid(); e < nv; e += kn_nthreads()) {
        const long long o = narrow ? (long long)((unsigned)e / (unsigned)rowv) : e / rowv, w = (e - o * rowv) * vec;
        const int k = kn_cat_part(a, w);
        const char *src = a.src[k] + (o * a.st[k][0] + w - a.start[k]) * es;
        char *dst = a.dst + (o * row + w) * es;
        if (vec > 1) *(uint4 *)dst = *(const uint4 *)src;
        else kn_cpy<KN_DT>(dst, src);
    }
}
#endif

/* cat along the last dim of short rows (at most KN_T_CAT_SHORT elements,
 * inputs with any strides): a thread an output row. The row's outer
 * coordinates are worked out once (32-bit divisions where the sizes fit),
 * each input's offset from them, then every input's elements of the row
 * are copied through its own last-dim stride. kn_cat works out a run's
 * coordinates with 64-bit divisions and searches for each element's
 * input: the first conv's image padded to 8 channels for its weight's
 * gradient (32 x 224 x 224 x 8 bf16, from the permuted NCHW image and a
 * zero block) took 69 us there, 17% of the memory roof, on the H200; this
 * kernel 62.5 us. Storing a row as one 16-byte vector, packed in
 * registers (91 us) or staged through shared memory (107 us), measured
 * slower still: the time is not in the stores. */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_cat_short)
/* Output row o's outer coordinates, and from them each input's offset. */
KN_FN void kn_cat_row_offsets(const kn_cat_args &a, long long o, bool narrow, long long off[KN_T_MAXCAT])
{
    const int L = a.ndim - 1;
#pragma unroll
    for (int k = 0; k < KN_T_MAXCAT; k++) off[k] = 0;
    long long rem = o;
#pragma unroll
    for (int d = KN_T_MAXD - 1; d >= 0; d--) {
        if (d >= L) continue;
        const long long size = a.shape[d];
        const long long q = narrow ? (long long)((unsigned)rem / (unsigned)size) : rem / size, c = rem - q * size;
        rem = q;
#pragma unroll
        for (int k = 0; k < KN_T_MAXCAT; k++)
            if (k < a.nin) off[k] += c * a.st[k][d];
    }
}

/* Row o's elements, input by input, to dst, the output's row. */
template <int D> KN_FN void kn_cat_row_copy(const kn_cat_args &a, const long long off[KN_T_MAXCAT], char *dst)
{
    constexpr int es = kn_esize<D>();
    const int L = a.ndim - 1;
#pragma unroll
    for (int k = 0; k < KN_T_MAXCAT; k++) {
        if (k >= a.nin) break;
        const long long len = a.start[k + 1] - a.start[k], sl = kn_pick(a.st[k], L);
        const char *src = a.src[k] + off[k] * es;
        for (long long j = 0; j < len; j++)
            kn_straw<D>(dst + (a.start[k] + j) * es, kn_ldraw<D>(src + j * sl * es));
    }
}

extern "C" __global__ void kn_cat_short(kn_cat_args a)
{
    const int es = kn_esize<KN_DT>();
    const int L = a.ndim - 1;
    const long long row = kn_pick(a.shape, L), rows = a.n / row;
    const bool narrow = rows <= 4294967295LL;
    long long off[KN_T_MAXCAT];
    for (long long o = kn_tid(); o < rows; o += kn_nthreads()) {
        kn_cat_row_offsets(a, o, narrow, off);
        kn_cat_row_copy<KN_DT>(a, off, a.dst + o * row * es);
    }
}
#endif

/* Output element e (contiguous) comes from the input whose range along
 * dim holds e's coordinate there. Runs of KN_T_RUN along the last dim
 * (kn_ops.cu), each inside one row: one input a run when the cat is along
 * another dim, else an input an element. */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_cat)
extern "C" __global__ void kn_cat(kn_cat_args a)
{
    const int es = kn_esize<KN_DT>();
    const int L = a.ndim - 1;
    const long long row = kn_pick(a.shape, L), per_row = (row + KN_T_RUN - 1) / KN_T_RUN, nrun = a.n / row * per_row;
    long long c[KN_T_MAXD];
    for (long long r = kn_tid(); r < nrun; r += kn_nthreads()) {
        long long e0, col;
        int m;
        kn_row_run(r, row, per_row, &e0, &col, &m);
        kn_coords_n(e0, a.n, a.ndim, a.shape, c);
        if (a.dim != L) {
            const long long p = kn_pick(c, a.dim);
            const int k = kn_cat_part(a, p);
            const long long off = kn_offset_at(c, a.ndim, a.st[k], a.dim, p - a.start[k]);
            const long long sl = kn_pick(a.st[k], L);
            unsigned long long v[KN_T_RUN];
#pragma unroll
            for (int q = 0; q < KN_T_RUN; q++) v[q] = q < m ? kn_ldraw<KN_DT>(a.src[k] + (off + q * sl) * es) : 0;
#pragma unroll
            for (int q = 0; q < KN_T_RUN; q++)
                if (q < m) kn_straw<KN_DT>(a.dst + (e0 + q) * es, v[q]);
            continue;
        }
        /* along the last dim: an input an element, the run's coordinates
         * shared (a gradient's zero insertion: cat(g, zeros) along a new
         * last dim of 2) */
        unsigned long long v[KN_T_RUN];
#pragma unroll
        for (int q = 0; q < KN_T_RUN; q++) {
            v[q] = 0;
            if (q >= m) continue;
            const long long p = col + q;
            const int k = kn_cat_part(a, p);
            v[q] = kn_ldraw<KN_DT>(a.src[k] + kn_offset_at(c, a.ndim, a.st[k], L, p - a.start[k]) * es);
        }
#pragma unroll
        for (int q = 0; q < KN_T_RUN; q++)
            if (q < m) kn_straw<KN_DT>(a.dst + (e0 + q) * es, v[q]);
    }
}
#endif
