// kn_la_gemm_x3.cu: an f32 GEMM on the tensor cores at f32 accuracy, the
// split-precision ("3xTF32") method. Each f32 operand x is split into a
// TF32 "big" part (x rounded to TF32's 11 significant bits) and a TF32
// "small" part (the exact remainder x - big, rounded again); the product
// a.b is big.big + big.small + small.big, and small.small (at most 2^-22
// of a.b) is dropped. TF32 runs on the tensor cores at about 8x the f32
// CUDA-core rate, so three of them still beat one strict f32 FMA.
//
// Where it is accurate. The tensor core sums a k-step's products and adds
// them to its accumulator with truncation, not rounding (Fasi et al.,
// "Numerical behavior of NVIDIA tensor cores", 2021), so an accumulator
// chained through all of K collects a biased error that grows with K and
// loses to f32 FMA's rounding (CUTLASS issue 729: plain 3xTF32 is less
// accurate than FMA for K < 256; on the H200 this kernel summing all of K
// in the tensor core had 3-45x strict f32's error, bench/split_gemm.c run
// 7). Here the tensor core sums only one pipeline stage's k (the three
// products of each k-step) into a zeroed partial, and that partial is
// added to the running sum by an ordinary
// f32 add, which rounds to nearest (Ootomo and Yokota, arXiv 2203.03341,
// make the same move). The contract (kiln.config.f32_precision = "ieee")
// still decides on the real inputs whether this kernel may run: the
// autotuner measures its error against float64 beside the strict f32
// library's.
//
// Layout. y [m, n] (rows ldy apart, batches sy apart) = act(a . b + bias +
// res); a is [m, k] k-contiguous (KN_X3_AK 1) or [k, m] m-contiguous (0);
// b is [n, k] k-contiguous (KN_X3_BK 1: a linear layer's weight) or
// [k, n] n-contiguous (0). A block takes a KN_X3_BM x KN_X3_BN tile of y
// over k in steps of KN_X3_KTILE (32, or 64 for one 128x128 module),
// staged through shared memory by 16-byte cp.async
// (zero fill past the edges) in a 3-stage pipeline; its warps take
// KN_X3_WM x KN_X3_WN each, as mma.sync m16n8k8 tiles. Operands are split
// as their fragments are read from shared memory. (Splitting each landed
// tile once, into big and small planes in shared memory, cuts the split's
// instructions by the warps that share an element, but ran 20-40% slower
// on the H200: a second barrier a tile and twice the fragment loads.) One
// module per tile shape and layout (kn_cuda_linalg.c), the kernel named
// KN_LA_KERNEL.
#ifndef KN_X3_KTILE
#define KN_X3_KTILE 32 // k a pipeline stage holds
#endif
#define X3_KT KN_X3_KTILE
#define X3_STAGES 3
#define X3_BM KN_X3_BM
#define X3_BN KN_X3_BN
#define X3_WM KN_X3_WM
#define X3_WN KN_X3_WN
#define X3_THREADS (32 * (X3_BM / X3_WM) * (X3_BN / X3_WN))

// The k order inside a step of 8. An mma's fragments give lane (g, t)
// the k indices t and t + 4; since a product sums over k, any order of
// k taken alike for both operands gives the same sum, so here fragment
// index t is stored k 2t and t + 4 is 2t + 1: a lane's two values of a
// row are neighbours, one 8-byte load from a k-contiguous tile.
//
// Shared rows: a k-contiguous tile is [rows][X3_KT + 8] (a half-warp's
// 8-byte loads, rows g and columns 2t, fall in distinct banks), an m- or
// n-contiguous one [X3_KT][rows + 4] (its 4-byte loads, k rows 2t or 2t+1
// and columns g, do); every row starts on 16 bytes for cp.async.
#define X3_KSTRIDE (X3_KT + 8)
#define X3_MSTRIDE(rows) ((rows) + 4)
#define X3_TILE_FLOATS(rows, kmaj) ((kmaj) ? (rows) * X3_KSTRIDE : X3_KT * X3_MSTRIDE(rows))
#define X3_A_FLOATS X3_TILE_FLOATS(X3_BM, KN_X3_AK)
#define X3_B_FLOATS X3_TILE_FLOATS(X3_BN, KN_X3_BK)

__device__ __forceinline__ void x3_cp16(float *dst, const float *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(bytes));
}

// One operand's tile (ROWS of m or n by X3_KT of k, from row r0 and k0)
// into shared memory s, as lines of contiguous floats: a k-contiguous
// operand's ROWS rows of X3_KT, or an m/n-contiguous one's X3_KT k-rows of
// ROWS; g's lines are ld floats apart. 16-byte chunks, cut short (and
// zero-filled) at the matrix's edges: the host guarantees 16-byte aligned
// bases and lds.
template <int ROWS, bool KMAJ>
__device__ __forceinline__ void x3_stage(float *s, const float *g, long long ld, long long rows, long long k,
                                         long long r0, long long k0)
{
    constexpr int INNER = KMAJ ? X3_KT : ROWS, OUTER = KMAJ ? ROWS : X3_KT, CPL = INNER / 4;
    constexpr int SSTRIDE = KMAJ ? X3_KSTRIDE : X3_MSTRIDE(ROWS);
    const long long o0 = KMAJ ? r0 : k0, i0 = KMAJ ? k0 : r0, olim = KMAJ ? rows : k, ilim = KMAJ ? k : rows;
#pragma unroll
    for (int c = threadIdx.x; c < OUTER * CPL; c += X3_THREADS) {
        const int o = c / CPL, i = (c % CPL) * 4;
        const long long go = o0 + o, gi = i0 + i;
        int bytes = 0;
        const float *src = g;
        if (go < olim && gi < ilim) {
            bytes = ilim - gi >= 4 ? 16 : (int)(ilim - gi) * 4;
            src = g + go * ld + gi;
        }
        x3_cp16(s + o * SSTRIDE + i, src, bytes);
    }
}

// a lane's two values of row r in the k-step at kk: fragment k indices t
// and t + 4, stored at kk + 2t and kk + 2t + 1
template <int ROWS, bool KMAJ>
__device__ __forceinline__ float2 x3_pair(const float *s, int r, int kk, int t)
{
    if (KMAJ) return *(const float2 *)(s + r * X3_KSTRIDE + kk + 2 * t);
    return make_float2(s[(kk + 2 * t) * X3_MSTRIDE(ROWS) + r], s[(kk + 2 * t + 1) * X3_MSTRIDE(ROWS) + r]);
}

// x rounded to TF32's 11 significant bits, to nearest (ties away), by
// two integer ops: with cvt.rna.tf32.f32 instead the kernel ran 5-20%
// slower (H200, bench/split_gemm.c, run 3), and the big part by Veltkamp's
// splitting on the float pipe was no faster overall (run 6)
__device__ __forceinline__ unsigned x3_tf32(unsigned bits)
{
    return (bits + 0x1000u) & 0xffffe000u;
}

// x = big + small, both TF32; x - big is exact
__device__ __forceinline__ void x3_split(float x, unsigned &big, unsigned &small)
{
    big = x3_tf32(__float_as_uint(x));
    small = x3_tf32(__float_as_uint(x - __uint_as_float(big)));
}

__device__ __forceinline__ void x3_mma(float c[4], const unsigned a[4], const unsigned b[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(X3_THREADS, X3_THREADS >= 256 ? 1 : 2) KN_LA_KERNEL(kn_la_gemm_args p)
{
    constexpr int MT = X3_WM / 16, NT = X3_WN / 8, WARPS_N = X3_BN / X3_WN;
    extern __shared__ __align__(16) float x3_smem[];
    float *sa = x3_smem, *sb = x3_smem + X3_STAGES * X3_A_FLOATS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int wm0 = (warp / WARPS_N) * X3_WM, wn0 = (warp % WARPS_N) * X3_WN;
    const long long m0 = (long long)blockIdx.x * X3_BM, n0 = (long long)blockIdx.y * X3_BN;
    const long long z = blockIdx.z / p.splits, kbeg = (blockIdx.z % p.splits) * p.kchunk;
    const long long kend = kbeg + p.kchunk < p.k ? kbeg + p.kchunk : p.k;
    // the operands from this split's first k on (kchunk is a multiple of
    // X3_KT: the 16-byte copies stay aligned), k counted from there
    const float *A = (const float *)p.a + z * p.sa + (KN_X3_AK ? kbeg : kbeg * p.lda);
    const float *B = (const float *)p.b + z * p.sb + (KN_X3_BK ? kbeg : kbeg * p.ldb);
    const long long K = kend - kbeg;
    const int ktiles = (int)((K + X3_KT - 1) / X3_KT);

    // acc: the running sums; part: the tensor core's sums of the current
    // stage, added to acc by f32 adds when the stage is done (flushing every
    // 8 or 16 of k instead ran slower and no more accurately, runs 2 and 3)
    float acc[MT][NT][4], part[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = part[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < X3_STAGES - 1; s++) {
        if (s < ktiles) {
            x3_stage<X3_BM, KN_X3_AK>(sa + s * X3_A_FLOATS, A, p.lda, p.m, K, m0, (long long)s * X3_KT);
            x3_stage<X3_BN, KN_X3_BK>(sb + s * X3_B_FLOATS, B, p.ldb, p.n, K, n0, (long long)s * X3_KT);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    }

    for (int kt = 0; kt < ktiles; kt++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(X3_STAGES - 2));
        __syncthreads(); // tile kt is in, and every warp is done with the stage refilled next
        const int next = kt + X3_STAGES - 1;
        if (next < ktiles) {
            const int st = next % X3_STAGES;
            x3_stage<X3_BM, KN_X3_AK>(sa + st * X3_A_FLOATS, A, p.lda, p.m, K, m0, (long long)next * X3_KT);
            x3_stage<X3_BN, KN_X3_BK>(sb + st * X3_B_FLOATS, B, p.ldb, p.n, K, n0, (long long)next * X3_KT);
        }
        asm volatile("cp.async.commit_group;\n" ::);
        const float *ta = sa + (kt % X3_STAGES) * X3_A_FLOATS, *tb = sb + (kt % X3_STAGES) * X3_B_FLOATS;
#pragma unroll
        for (int kk = 0; kk < X3_KT; kk += 8) {
            unsigned ab[MT][4], as[MT][4], bb[NT][2], bs[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const int r = wm0 + i * 16 + g;
                const float2 lo = x3_pair<X3_BM, KN_X3_AK>(ta, r, kk, t), hi = x3_pair<X3_BM, KN_X3_AK>(ta, r + 8, kk, t);
                x3_split(lo.x, ab[i][0], as[i][0]); // (row g, k t)
                x3_split(hi.x, ab[i][1], as[i][1]); // (row g + 8, k t)
                x3_split(lo.y, ab[i][2], as[i][2]); // (row g, k t + 4)
                x3_split(hi.y, ab[i][3], as[i][3]); // (row g + 8, k t + 4)
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const float2 v = x3_pair<X3_BN, KN_X3_BK>(tb, wn0 + j * 8 + g, kk, t);
                x3_split(v.x, bb[j][0], bs[j][0]);
                x3_split(v.y, bb[j][1], bs[j][1]);
            }
            // the small terms first, so the big one is added to a partial
            // of their size, not the other way round
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    x3_mma(part[i][j], as[i], bb[j]);
                    x3_mma(part[i][j], ab[i], bs[j]);
                    x3_mma(part[i][j], ab[i], bb[j]);
                }
        }
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    acc[i][j][e] += part[i][j][e];
                    part[i][j][e] = 0.f;
                }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    // epilogue: bias (f32, over n), residual (y's layout), activation; a
    // thread holds two neighbouring columns of each of its rows. A split
    // stores its raw sums in its own plane of ws instead.
    const bool split = p.splits > 1;
    float *Y = split ? (float *)p.ws + (long long)blockIdx.z * p.m * p.n : (float *)p.y + z * p.sy;
    const long long ldy = split ? p.n : p.ldy;
    const float *R = p.res && !split ? (const float *)p.res + z * p.sy : 0;
    const float *bias = split ? 0 : (const float *)p.bias;
    const int act = split ? 0 : p.act;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const long long c = n0 + wn0 + j * 8 + 2 * t;
            if (c >= p.n) continue;
            const bool two = c + 1 < p.n;
            const float b0 = bias ? bias[c] : 0.f, b1 = bias && two ? bias[c + 1] : 0.f;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const long long r = m0 + wm0 + i * 16 + g + h * 8;
                if (r >= p.m) continue;
                float v0 = acc[i][j][2 * h] + b0, v1 = acc[i][j][2 * h + 1] + b1;
                if (R) {
                    v0 += R[r * p.ldy + c];
                    if (two) v1 += R[r * p.ldy + c + 1];
                }
                v0 = kn_la_act<float>(v0, act);
                v1 = kn_la_act<float>(v1, act);
                if (two && (split ? p.n % 2 == 0 : p.vec2)) *(float2 *)(Y + r * ldy + c) = make_float2(v0, v1);
                else {
                    Y[r * ldy + c] = v0;
                    if (two) Y[r * ldy + c + 1] = v1;
                }
            }
        }
}
