/* kn_reduce.cu: sum / mean / amax / amin / var over any set of dims, and
 * max along one dim with its 1-based index (kernels/cpu/kn_cpu_reduce.c is
 * the reference).
 *
 * Floats accumulate in double and integers in int64 (sums wrap), as the
 * CPU does; only the order of the double additions differs, far below the
 * output's precision. NaN is sticky in amax / amin; max returns the first
 * NaN or else the first maximum. `group` threads (a power of two dividing
 * the block) share one output and combine through shared memory.
 */

KN_FN double kn_fext(int op, double a, double b)
{
    if (a != a) return a;
    if (b != b) return b;
    return op == KN_TR_AMAX ? (b > a ? b : a) : (b < a ? b : a);
}

KN_FN long long kn_iext(int op, long long a, long long b)
{
    return op == KN_TR_AMAX ? (b > a ? b : a) : (b < a ? b : a);
}

/* Tree-combine v over the `g` lanes of this thread's group; every lane
 * gets the result. All threads of the block must call it together. A
 * group of a warp or less combines by shuffles (its lanes are aligned in
 * one warp): no shared memory and no barrier. */
KN_FN double kn_group_fsum(double v, double *sh, int g, int lane, int op)
{
    if (g <= 32) {
        for (int w = g / 2; w > 0; w >>= 1) {
            double o = __shfl_xor_sync(0xffffffffu, v, w);
            v = op == KN_TR_AMAX || op == KN_TR_AMIN ? kn_fext(op, v, o) : v + o;
        }
        return v;
    }
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = g / 2; w > 0; w >>= 1) {
        if (lane < w) {
            double a = sh[threadIdx.x], b = sh[threadIdx.x + w];
            sh[threadIdx.x] = op == KN_TR_AMAX || op == KN_TR_AMIN ? kn_fext(op, a, b) : a + b;
        }
        __syncthreads();
    }
    double r = sh[threadIdx.x - lane];
    __syncthreads();
    return r;
}

KN_FN long long kn_group_isum(long long v, long long *sh, int g, int lane, int op)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = g / 2; w > 0; w >>= 1) {
        if (lane < w) {
            long long a = sh[threadIdx.x], b = sh[threadIdx.x + w];
            sh[threadIdx.x] = op == KN_TR_SUM ? (long long)((unsigned long long)a + (unsigned long long)b)
                                              : kn_iext(op, a, b);
        }
        __syncthreads();
    }
    long long r = sh[threadIdx.x - lane];
    __syncthreads();
    return r;
}

/* The finished value of a float reduction into out (dtype KN_DT). */
KN_FN void kn_rfinish_f(const kn_reduce_args &a, long long o, double s, double m2)
{
    double v = s, n = (double)a.count;
    if (a.op == KN_TR_MEAN) v = s / n; /* 0/0 = NaN for an empty set, as torch */
    else if (a.op == KN_TR_VAR) {
        double denom = n - a.correction;
        v = m2 / (denom > 0 ? denom : 0.0);
    }
    if (a.out_dt == KN_DT) kn_std<KN_DT>(a.out + o * kn_esize<KN_DT>(), v);
    else if (a.out_dt == KN_DT_F32) kn_std<KN_DT_F32>(a.out + o * 4, v);
    else kn_std<KN_DT_F64>(a.out + o * 8, v);
}

/* Integer results: sums are i64, extremes keep the input dtype. */
KN_FN void kn_rfinish_i(const kn_reduce_args &a, long long o, long long v)
{
    if (a.op == KN_TR_SUM) kn_sti<KN_DT_I64>(a.out + o * 8, v);
    else kn_sti<KN_DT>(a.out + o * kn_esize<KN_DT>(), v);
}

/* The reduced elements e = first, first + g, ... of one output, walked
 * without a division per element: the innermost reduced dim's index
 * advances by g and carries into the outer ones, whose offset is worked
 * out again only when a row is crossed. kn_offset divides by every dim's
 * size (64-bit divisions, tens of instructions each), which held
 * BatchNorm's statistics over N, H and W of a 32 x 32 x 112 x 112 batch to
 * 100-190 us a channel set. */
struct kn_rwalk {
    long long row, col, inner, row_off, col_st;
};

KN_FN void kn_rwalk_init(kn_rwalk &w, const kn_reduce_args &a, long long e)
{
    w.inner = a.rsize[a.nr - 1];
    w.col_st = a.rst[a.nr - 1];
    w.row = e / w.inner;
    w.col = e % w.inner;
    w.row_off = kn_offset(w.row, a.nr - 1, a.rsize, a.rst);
}

KN_FN long long kn_rwalk_off(const kn_rwalk &w) { return w.row_off + w.col * w.col_st; }

KN_FN void kn_rwalk_step(kn_rwalk &w, const kn_reduce_args &a, int g)
{
    w.col += g;
    if (w.col >= w.inner) {
        w.row += w.col / w.inner;
        w.col %= w.inner;
        w.row_off = kn_offset(w.row, a.nr - 1, a.rsize, a.rst);
    }
}

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_reduce)
extern "C" __global__ void kn_reduce(kn_reduce_args a)
{
    __shared__ double shd[KN_T_BLOCK];
    __shared__ long long shl[KN_T_BLOCK];
    const int g = a.group, lane = threadIdx.x % g, per = KN_T_BLOCK / g;
    const bool ext = a.op == KN_TR_AMAX || a.op == KN_TR_AMIN;
    const long long units = a.nout * a.nsplit;
    const char *x = a.x;
    const int es = kn_esize<KN_DT>();
    for (long long u0 = (long long)blockIdx.x * per; u0 < units; u0 += (long long)gridDim.x * per) {
        long long u = u0 + threadIdx.x / g;
        bool live = u < units;
        long long o = live ? u / a.nsplit : 0, s = live ? u % a.nsplit : 0;
        long long base = kn_offset(o, a.nk, a.ksize, a.kst);
        long long lo = s * a.chunk, hi = lo + a.chunk < a.count ? lo + a.chunk : a.count;
        if (!live || hi < lo) hi = lo;
        if constexpr (kn_isfloat<KN_DT>()) {
            double acc = ext ? (a.op == KN_TR_AMAX ? -__longlong_as_double(0x7ff0000000000000LL)
                                                   : __longlong_as_double(0x7ff0000000000000LL))
                             : 0.0;
            kn_rwalk w;
            kn_rwalk_init(w, a, lo + lane);
            for (long long e = lo + lane; e < hi; e += g, kn_rwalk_step(w, a, g)) {
                double v = kn_ldd<KN_DT>(x + (base + kn_rwalk_off(w)) * es);
                acc = ext ? kn_fext(a.op, acc, v) : acc + v;
            }
            double tot = kn_group_fsum(acc, shd, g, lane, a.op), m2 = 0.0;
            if (a.op == KN_TR_VAR) {
                double mean = tot / (double)(hi - lo), sq = 0.0;
                kn_rwalk_init(w, a, lo + lane);
                for (long long e = lo + lane; e < hi; e += g, kn_rwalk_step(w, a, g)) {
                    double v = kn_ldd<KN_DT>(x + (base + kn_rwalk_off(w)) * es);
                    sq += (v - mean) * (v - mean);
                }
                m2 = kn_group_fsum(sq, shd, g, lane, KN_TR_SUM);
            }
            if (live && lane == 0) {
                if (a.nsplit == 1) kn_rfinish_f(a, o, tot, m2);
                else a.part[u] = kn_rpart{tot, m2, 0, hi - lo};
            }
        } else {
            long long acc = a.op == KN_TR_AMAX ? (-9223372036854775807LL - 1)
                            : a.op == KN_TR_AMIN ? 9223372036854775807LL : 0;
            kn_rwalk w;
            kn_rwalk_init(w, a, lo + lane);
            for (long long e = lo + lane; e < hi; e += g, kn_rwalk_step(w, a, g)) {
                long long v = kn_ldi<KN_DT>(x + (base + kn_rwalk_off(w)) * es);
                acc = ext ? kn_iext(a.op, acc, v) : (long long)((unsigned long long)acc + (unsigned long long)v);
            }
            long long tot = kn_group_isum(acc, shl, g, lane, a.op);
            if (live && lane == 0) {
                if (a.nsplit == 1) kn_rfinish_i(a, o, tot);
                else a.part[u] = kn_rpart{0.0, 0.0, tot, hi - lo};
            }
        }
    }
}
#endif

/* Chan et al.'s pairwise update: (n, mean, m2), a count, its mean and its
 * squared deviations from it, merged with another part's (nb > 0). */
KN_FN void kn_chan_merge(double &n, double &mean, double &m2, double nb, double mb, double m2b)
{
    const double nt = n + nb, d = mb - mean;
    mean += d * (nb / nt);
    m2 += m2b + d * d * (n * nb / nt);
    n = nt;
}

/* One thread per output: combine its nsplit partials in order (var by
 * Chan et al.'s pairwise update of count, mean and squared deviations). */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_reduce_final)
extern "C" __global__ void kn_reduce_final(kn_reduce_args a)
{
    const bool ext = a.op == KN_TR_AMAX || a.op == KN_TR_AMIN;
    for (long long o = kn_tid(); o < a.nout; o += kn_nthreads()) {
        const kn_rpart *p = a.part + o * a.nsplit;
        if constexpr (kn_isfloat<KN_DT>()) {
            double s = p[0].s, m2 = p[0].m2, n = (double)p[0].n;
            double mean = n > 0 ? s / n : 0.0;
            for (int k = 1; k < a.nsplit; k++) {
                if (ext) {
                    s = kn_fext(a.op, s, p[k].s);
                } else if (a.op == KN_TR_VAR) {
                    double nb = (double)p[k].n;
                    if (nb == 0) continue;
                    kn_chan_merge(n, mean, m2, nb, p[k].s / nb, p[k].m2);
                } else {
                    s += p[k].s;
                }
            }
            kn_rfinish_f(a, o, s, m2);
        } else {
            long long v = p[0].i;
            for (int k = 1; k < a.nsplit; k++)
                v = ext ? kn_iext(a.op, v, p[k].i)
                        : (long long)((unsigned long long)v + (unsigned long long)p[k].i);
            kn_rfinish_i(a, o, v);
        }
    }
}
#endif

/* Column sums: a sum or mean over the leading dims of a contiguous value
 * (a bias's gradient, summed over the rows), as a.count rows of a.nout
 * columns, row stride a.rst[0] elements. A block takes 32 columns and
 * a.chunk rows (split a.nsplit ways over blockIdx); its 8 warps take every
 * eighth row, a warp reading 32 adjacent columns of one row at once, and
 * the 8 partial sums of a column are added in a fixed order; with more
 * than one split, a block's sums go to a.part for kn_reduce_cols_final.
 * A var (BatchNorm's statistics over N, H and W of a channels-last batch)
 * reads its rows once, summing deviations from a shift (the column's value
 * at the block's first row) and their squares, from which come the block's
 * sum and squared deviations from its mean; the splits' go to a.part
 * ([2][nsplit][nout]) and are merged by count, mean and deviations. Reading
 * the rows twice (mean, then deviations) ran at 12-15% of the memory roof.
 * The generic kernel walks a column's elements a row apart, one output a
 * thread group, and the compiled plans made such sums a cast to f64 and a
 * GEMV, which read the input 2-3 times. Sums in double, as kn_reduce. */
/* The column sums' combine, both passes: a block's 8 warps each hold a
 * sum of its 32 columns (acc, thread tx's column), added in a fixed order,
 * warp 0 to 7; the threads of warp 0 get their column's total. */
KN_FN double kn_cols_combine(double acc, int tx, int ty)
{
    __shared__ double part[8][33];
    part[ty][tx] = acc;
    __syncthreads();
    double s = part[0][tx];
    for (int k = 1; k < 8; k++) s += part[k][tx];
    return s;
}

/* A block's column col, from its n rows' sum s (a var's: of deviations
 * from shift, s2 the sum of their squares): the result where the block is
 * the column's only split, else its sum and (var) its squared deviations
 * from its own mean for kn_reduce_cols_final. Both column kernels end so. */
KN_FN void kn_cols_block_out(const kn_reduce_args &a, long long col, long long split, double s, double s2, double n,
                             double shift)
{
    double m2 = 0.0;
    if (a.op == KN_TR_VAR) {
        m2 = n > 0 ? s2 - s * s / n : 0.0; /* squared deviations from the block's mean */
        if (m2 < 0) m2 = 0.0;
        s += n * shift; /* the block's sum */
    }
    if (a.nsplit == 1) kn_rfinish_f(a, col, s, m2);
    else {
        ((double *)a.part)[split * a.nout + col] = s;
        if (a.op == KN_TR_VAR) ((double *)a.part)[(a.nsplit + split) * a.nout + col] = m2;
    }
}

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_reduce_cols)
extern "C" __global__ void kn_reduce_cols(kn_reduce_args a)
{
    if constexpr (kn_isfloat<KN_DT>()) {
        const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
        const long long tiles = (a.nout + 31) / 32;
        const long long col = (long long)(blockIdx.x % tiles) * 32 + tx, split = blockIdx.x / tiles;
        const long long lo = split * a.chunk, hi = lo + a.chunk < a.count ? lo + a.chunk : a.count;
        const int es = kn_esize<KN_DT>();
        const long long step = 8 * a.rst[0] * es;
        const bool var = a.op == KN_TR_VAR;
        /* a var's deviations from a shift, the column's value at the
         * block's first row (any value of the column keeps the sums
         * small: the shifted-data variance), so one pass reads the rows */
        double shift = 0.0, acc = 0.0, acc2 = 0.0;
        if (col < a.nout) {
            const char *p = a.x + ((lo + ty) * a.rst[0] + col) * es;
            if (var && hi > lo) shift = kn_ldd<KN_DT>(a.x + (lo * a.rst[0] + col) * es);
            /* eight rows a warp at a time, every load issued before any
             * sum: with loads and sums interleaved a warp waited on each
             * load in turn (a BatchNorm var over 32 x 112 x 112 rows of 32
             * channels, f32, took 100 us on the H200: 9% of the memory
             * roof). The sums still run row by row, in order. */
            for (long long r = lo + ty; r < hi; r += 64, p += 8 * step) {
                double v[8];
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = r + 8 * j < hi ? kn_ldd<KN_DT>(p + j * step) : 0.0;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    if (r + 8 * j >= hi) break;
                    if (var) {
                        const double d = v[j] - shift;
                        acc += d;
                        acc2 += d * d;
                    } else {
                        acc += v[j];
                    }
                }
            }
        }
        const double s = kn_cols_combine(acc, tx, ty);
        double s2 = 0.0;
        if (var) {
            __syncthreads(); /* kn_cols_combine's shared sums are read above */
            s2 = kn_cols_combine(acc2, tx, ty);
        }
        if (ty == 0 && col < a.nout) kn_cols_block_out(a, col, split, s, s2, hi > lo ? (double)(hi - lo) : 0.0, shift);
    }
}
#endif

/* Element i of a 16-byte vector of KN_DT values, as a double. */
template <int D> KN_FN double kn_vec_elem(const uint4 &v, int i)
{
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    if constexpr (D == KN_DT_F32) return (double)__uint_as_float(w[i]);
    else if constexpr (D == KN_DT_F64) return __hiloint2double((int)w[2 * i + 1], (int)w[2 * i]);
    else {
        const kn_u16 h = (kn_u16)(w[i >> 1] >> (16 * (i & 1)));
        if constexpr (D == KN_DT_BF16) return (double)kn_ld_bf16(h);
        else return (double)kn_ld_f16(h);
    }
}

/* The column sums' first pass where a row is whole 16-byte vectors (the
 * host checks: columns a multiple of 16 / esize, x 16-byte aligned): a
 * thread takes one vector column (V = 16 / esize columns), a block TW of
 * them (all of a row's, up to 32) and RB = 256 / TW rows at a time, each
 * thread 8 rows' vectors in flight before it sums any, a column's sums
 * kept per element in double. The block's RB sums of a column are added
 * in row-lane order; var as kn_reduce_cols (deviations from the column's
 * value at the block's first row, and their squares). The scalar kernel
 * reads a column's 2 or 4 bytes a thread, so a warp's load was 64 bytes
 * of a bf16 row of 32 channels, and it needed 8 blocks an SM of them,
 * 1,056 splits, to keep the memory busy: a BatchNorm's statistics over
 * 32 x 112 x 112 pixels of 32 channels read 1.1 TB/s (bf16) and 2.1
 * (f32) on the H200, and the final pass over the 1,056 splits' partials
 * took 7-47 us more. Here 16 bytes a load need 2 blocks an SM. */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_reduce_cols_vec)
extern "C" __global__ void __launch_bounds__(KN_T_BLOCK) kn_reduce_cols_vec(kn_reduce_args a)
{
    if constexpr (kn_isfloat<KN_DT>()) {
        constexpr int es = kn_esize<KN_DT>(), V = 16 / es, U = 8;
        __shared__ double sh[KN_T_BLOCK * V];
        const long long G = a.nout / V; /* vectors a row */
        const int TW = G < 32 ? (int)G : 32, RB = KN_T_BLOCK / TW, W = TW * V;
        const long long tiles = (G + TW - 1) / TW, tile = blockIdx.x % tiles, split = blockIdx.x / tiles;
        const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
        const long long vc = tile * TW + tx;
        const long long lo = split * a.chunk, hi = lo + a.chunk < a.count ? lo + a.chunk : a.count;
        const bool var = a.op == KN_TR_VAR, live = ty < RB && vc < G && hi > lo;
        double acc[V], acc2[V], shift[V];
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = acc2[e] = shift[e] = 0.0;
        if (live) {
            const uint4 *col = (const uint4 *)a.x + vc; /* row r's vector: col[r * G] */
            if (var) {
                const uint4 s0 = col[lo * G];
#pragma unroll
                for (int e = 0; e < V; e++) shift[e] = kn_vec_elem<KN_DT>(s0, e);
            }
            for (long long r = lo + ty; r < hi; r += (long long)RB * U) {
                uint4 v[U];
#pragma unroll
                for (int u = 0; u < U; u++) v[u] = r + u * RB < hi ? col[(r + u * RB) * G] : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int u = 0; u < U; u++) {
                    if (r + u * RB < hi) {
#pragma unroll
                        for (int e = 0; e < V; e++) {
                            const double d = kn_vec_elem<KN_DT>(v[u], e) - shift[e];
                            acc[e] += d;
                            acc2[e] += d * d;
                        }
                    }
                }
            }
        }
        /* column c of the tile (c = tx V + e) is summed by thread c over
         * the row lanes, in order */
        const int c = threadIdx.x;
        const long long ccol = (tile * TW + c / V) * V + c % V;
        const bool owner = c < W && tile * TW + c / V < G;
        if (ty < RB)
#pragma unroll
            for (int e = 0; e < V; e++) sh[ty * W + tx * V + e] = acc[e];
        __syncthreads();
        double s = 0.0, s2 = 0.0;
        if (owner)
            for (int t = 0; t < RB; t++) s += sh[t * W + c];
        if (var) {
            __syncthreads();
            if (ty < RB)
#pragma unroll
                for (int e = 0; e < V; e++) sh[ty * W + tx * V + e] = acc2[e];
            __syncthreads();
            if (owner)
                for (int t = 0; t < RB; t++) s2 += sh[t * W + c];
        }
        if (owner)
            kn_cols_block_out(a, ccol, split, s, s2, hi > lo ? (double)(hi - lo) : 0.0,
                              var && hi > lo ? kn_ldd<KN_DT>(a.x + (lo * a.nout + ccol) * es) : 0.0);
    }
}
#endif

/* The column sums' second pass: out[col] from the a.nsplit partials
 * kn_reduce_cols left as doubles, split-major ([nsplit][nout]), so that a
 * warp's loads are adjacent. A block takes 32 columns; its 8 warps take
 * every eighth split each, then the 8 warps' sums of a column are added
 * in a fixed order.
 *
 * A var merges its splits' sums s_k and squared deviations m2_k about
 * c, the first split's mean, in one pass of plain sums:
 *   M2 = sum m2_k + sum (s_k - n_k c)^2 / n_k - (sum (s_k - n_k c))^2 / N,
 * every split but the last n_k = chunk rows, so 1/n_k is one reciprocal.
 * (Merging split by split with Chan et al.'s update, two divisions and a
 * chain of dependent loads a split, took 102 us for the 1,056 splits of a
 * 32-channel BatchNorm over 32 x 112 x 112 pixels on the H200: one block
 * of 8 warps, each walking 132 splits in turn.) About c the terms are the
 * splits' deviations from a value inside the data, so they stay small
 * beside the mean, as the shift in kn_reduce_cols. */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_reduce_cols_final)
extern "C" __global__ void kn_reduce_cols_final(kn_reduce_args a)
{
    if constexpr (kn_isfloat<KN_DT>()) {
        const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
        const long long col = (long long)blockIdx.x * 32 + tx;
        const bool live = col < a.nout, var = a.op == KN_TR_VAR;
        const double *p = (const double *)a.part, *q = p + (long long)a.nsplit * a.nout;
        const double n0 = (double)(a.chunk < a.count ? a.chunk : a.count), inv = 1.0 / (double)a.chunk;
        const double c = var && live ? p[col] / n0 : 0.0;
        double acc = 0.0, dev = 0.0, dev2 = 0.0;
        if (live && !var)
            for (int k = ty; k < a.nsplit; k += 8) acc += p[(long long)k * a.nout + col];
        if (live && var)
            for (int k = ty; k < a.nsplit; k += 8) {
                /* both loads first, whatever the split holds: behind the
                 * empty-split test, the second waited on the first */
                const double s = p[(long long)k * a.nout + col], m2 = q[(long long)k * a.nout + col];
                /* rows of split k: chunk, fewer for the last ones (the
                 * rounded-up chunk can leave the tail splits short or
                 * empty; an empty split's sums are 0) */
                const long long left = a.count - (long long)k * a.chunk;
                const long long nk = left < a.chunk ? left : a.chunk;
                if (nk <= 0) continue;
                const double d = s - (double)nk * c;
                acc += m2;
                dev += d;
                dev2 += d * d * (nk == a.chunk ? inv : 1.0 / (double)nk);
            }
        const double tot = kn_cols_combine(acc, tx, ty);
        if (!var) {
            if (ty == 0 && live) kn_rfinish_f(a, col, tot, 0.0);
            return;
        }
        __syncthreads(); /* kn_cols_combine's shared sums are read above */
        const double tdev = kn_cols_combine(dev, tx, ty);
        __syncthreads();
        const double tdev2 = kn_cols_combine(dev2, tx, ty), N = (double)a.count;
        if (ty == 0 && live) {
            double m2 = tot + tdev2 - tdev * tdev / N;
            if (m2 < 0) m2 = 0.0;
            kn_rfinish_f(a, col, N * c + tdev, m2);
        }
    }
}
#endif

/* Is candidate (vb, jb) better than (va, ja) by the CPU's scan order: the
 * first NaN wins, then the larger value, then the lower index. ja < 0 or
 * jb < 0 marks no candidate. */
KN_FN bool kn_better_f(double va, long long ja, double vb, long long jb)
{
    if (jb < 0) return false;
    if (ja < 0) return true;
    bool na = va != va, nb = vb != vb;
    if (na || nb) return nb && (!na || jb < ja);
    return vb > va || (vb == va && jb < ja);
}

KN_FN bool kn_better_i(long long va, long long ja, long long vb, long long jb)
{
    if (jb < 0) return false;
    if (ja < 0) return true;
    return vb > va || (vb == va && jb < ja);
}

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_argmax)
extern "C" __global__ void kn_argmax(kn_argmax_args a)
{
    __shared__ double shd[KN_T_BLOCK];
    __shared__ long long shv[KN_T_BLOCK];
    __shared__ long long shj[KN_T_BLOCK];
    const int g = a.group, lane = threadIdx.x % g, per = KN_T_BLOCK / g;
    const int es = kn_esize<KN_DT>();
    for (long long o0 = (long long)blockIdx.x * per; o0 < a.nout; o0 += (long long)gridDim.x * per) {
        long long o = o0 + threadIdx.x / g;
        bool live = o < a.nout;
        long long base = live ? kn_offset(o, a.nk, a.ksize, a.kst) : 0;
        long long best = -1;
        double bv = 0.0;
        long long bi = 0;
        /* this lane's elements in order: the CPU's scan restricted to them */
        for (long long j = lane; live && j < a.len; j += g) {
            const char *p = a.x + (base + j * a.lst) * es;
            if constexpr (kn_isfloat<KN_DT>()) {
                double v = kn_ldd<KN_DT>(p);
                if (best < 0 || v > bv || v != v) {
                    bv = v;
                    best = j;
                }
                if (v != v) break;
            } else {
                long long v = kn_ldi<KN_DT>(p);
                if (best < 0 || v > bi) {
                    bi = v;
                    best = j;
                }
            }
        }
        shd[threadIdx.x] = bv;
        shv[threadIdx.x] = bi;
        shj[threadIdx.x] = best;
        __syncthreads();
        for (int w = g / 2; w > 0; w >>= 1) {
            if (lane < w) {
                int t = threadIdx.x, q = t + w;
                bool take;
                if constexpr (kn_isfloat<KN_DT>()) take = kn_better_f(shd[t], shj[t], shd[q], shj[q]);
                else take = kn_better_i(shv[t], shj[t], shv[q], shj[q]);
                if (take) {
                    shd[t] = shd[q];
                    shv[t] = shv[q];
                    shj[t] = shj[q];
                }
            }
            __syncthreads();
        }
        if (live && lane == 0) {
            long long j = shj[threadIdx.x];
            kn_cpy<KN_DT>(a.val + o * es, a.x + (base + j * a.lst) * es);
            a.idx[o] = j + 1; /* 1-based, as Lua and Torch7 */
        }
        __syncthreads();
    }
}
#endif
