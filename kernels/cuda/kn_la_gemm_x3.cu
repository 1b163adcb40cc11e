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
// [k, n] n-contiguous (0). A split-K block (p.splits > 1) sums its own
// k range into its plane of p.ws.
//
// Two forms share the split, the per-stage flush and the epilogue: the
// mma.sync form (any GPU with TF32 tensor cores) just below, and the wgmma
// form (KN_X3_WGMMA, Hopper's sm_90a) further down, which measured 1.2-1.6x
// cuBLASLt's strict f32 GEMM where the mma.sync form measured 0.8-1.2x.
//
// The mma.sync form. A block takes a KN_X3_BM x KN_X3_BN tile of y
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
#define X3_BM KN_X3_BM
#define X3_BN KN_X3_BN

// 16 bytes from global src to shared dst, asynchronously; bytes < 16
// copies that many and zero-fills the rest
__device__ __forceinline__ void x3_cp16(float *dst, const float *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(bytes));
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

// Where a block's results go, from the epilogue's view: bias (f32, over
// n), residual (y's layout), activation. A split-K block stores its raw
// sums in its own plane of ws instead (kn_la_gemm_x3_sum adds the planes
// in order and applies the epilogue).
struct x3_out {
    float *y;
    const float *res, *bias;
    long long ldy;
    int act;
    bool split, vec2;
};

__device__ __forceinline__ x3_out x3_out_of(const kn_la_gemm_args &p, long long z)
{
    x3_out o;
    o.split = p.splits > 1;
    o.y = o.split ? (float *)p.ws + (long long)blockIdx.z * p.m * p.n : (float *)p.y + z * p.sy;
    o.ldy = o.split ? p.n : p.ldy;
    o.res = p.res && !o.split ? (const float *)p.res + z * p.sy : 0;
    o.bias = o.split ? 0 : (const float *)p.bias;
    o.act = o.split ? 0 : p.act;
    o.vec2 = o.split ? p.n % 2 == 0 : p.vec2 != 0;
    return o;
}

// Every form's epilogue, an operation at a time over all of a thread's
// sums: the bias, the residual, the activation, then the stores, each
// behind one uniform branch, so that a plain GEMM runs the stores alone.
// Element by element (one store function a pair of sums), every sum
// carried its own tests, its row's scatter (64-bit divisions) and the
// code of every activation: 300 KB of kernel text, of which a warp ran
// 3,600 instructions once each, waiting on instruction fetches, for as
// long as the 16 k tiles of its main loop took (ncu, wg128x192 at
// 4096x2048x512, H200, session 26).
//
// A thread's sums: v over ROWS rows and COLS columns, the sum of row
// r0 + at.row(i) and column c0 + at.col(j) at v[at(i, j)] (compile-time
// offsets: every form gives a thread a few rows and columns). Where
// at.pairs, columns come in neighbouring pairs (j even: c, j odd: c + 1),
// stored as one float2 where y allows.
template <int ROWS, int COLS, class AT>
__device__ __forceinline__ void x3_epilogue(const x3_out &o, const kn_la_gemm_args &p, long long r0, long long c0,
                                            float *v, AT at)
{
    if (o.bias) {
#pragma unroll
        for (int j = 0; j < COLS; j++) {
            const long long c = c0 + at.col(j);
            const float b = c < p.n ? o.bias[c] : 0.f;
#pragma unroll
            for (int i = 0; i < ROWS; i++) v[at(i, j)] += b;
        }
    }
    long long yrow[ROWS]; // y's row of each, scattered (a convolution's input gradient); -1: past m
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const long long r = r0 + at.row(i);
        yrow[i] = r < p.m ? kn_la_scatter_row(p.ys, r) : -1;
    }
    if (o.res) {
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            if (yrow[i] < 0) continue;
            const float *rr = o.res + yrow[i] * p.ldy + c0;
#pragma unroll
            for (int j = 0; j < COLS; j++)
                if (c0 + at.col(j) < p.n) v[at(i, j)] += rr[at.col(j)];
        }
    }
    switch (o.act) { // one loop an activation: the constant folds kn_la_act's tests away
    case 1:
#pragma unroll
        for (int i = 0; i < ROWS * COLS; i++) v[i] = kn_la_act<float>(v[i], 1);
        break;
    case 2:
#pragma unroll
        for (int i = 0; i < ROWS * COLS; i++) v[i] = kn_la_act<float>(v[i], 2);
        break;
    case 3:
#pragma unroll
        for (int i = 0; i < ROWS * COLS; i++) v[i] = kn_la_act<float>(v[i], 3);
        break;
    default: break;
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        if (yrow[i] < 0) continue;
        float *y = o.y + (o.split ? r0 + at.row(i) : yrow[i]) * o.ldy + c0;
#pragma unroll
        for (int j = 0; j < COLS; j += at.pairs ? 2 : 1) {
            const int cj = at.col(j);
            if (c0 + cj >= p.n) continue;
            const float v0 = v[at(i, j)];
            if (at.pairs) {
                const bool two = c0 + cj + 1 < p.n;
                const float v1 = v[at(i, j + 1)];
                if (two && o.vec2) *(float2 *)(y + cj) = make_float2(v0, v1);
                else {
                    y[cj] = v0;
                    if (two) y[cj + 1] = v1;
                }
            } else y[cj] = v0;
        }
    }
}

#if KN_X3_WGMMA
// ---- The wgmma form (sm_90a) ----
//
// Hopper's asynchronous warpgroup MMA reads both operands from shared
// memory, so the split is done once per element as a stage is staged, not
// once per warp that reads it (the mma.sync form's split instructions
// outnumbered its MMAs six to one and bound it, ncu run 6). Raw f32 tiles
// come in by cp.async, W_STAGES - 1 ahead; while the tensor cores work on
// tile kt, each thread splits what it copied of tile kt + 1: the big part
// in place, the small part into a second plane. A block is X3_BM / 64
// warpgroups; warpgroup w computes rows 64w .. 64w+63 of the tile over all
// X3_BN columns with m64nX3_BNk8 instructions.
//
// Planes are in the instruction's 128-byte swizzled K-major layout: a row
// is its 32 of k (128 bytes), rows follow each other, and the 16-byte
// chunk j of row r sits at chunk j ^ (r mod 8). Eight rows are one
// 1024-byte atom (the descriptor's stride offset). Unswizzled "core
// matrix" planes, where the two 16-byte halves of a row's k-step lie 128
// bytes apart in the same banks, ran the GEMM at 30-38% of the TF32 peak
// (H200, session 15 run 4). Every copy and split of 16 bytes a thread
// then falls in distinct banks within its quarter-warp.
//
// What bounds it (ncu, run 5, 4096x1536x512: 58-64 TFLOP/s of f32 work,
// about 40% of the tensor cores' TF32 rate): the warpgroups that issue the
// products also copy, split and flush, and wait for the products before
// the flush and the barrier, with 30% of issue slots busy. A producer
// warpgroup that copies and splits beside consumer warpgroups, and a from
// registers (split there, no planes of its own), are the next steps.
#if KN_X3_SWAP
#define W_THREADS (128 * (X3_BN / 64)) // a warpgroup per 64 columns of y (the swapped form, below)
#elif KN_X3_CONV == 2
// The weight-gradient form's 64-row tile: two warpgroups, each all 64 rows
// by half the columns. With one (4 warps an SM, its 255 registers
// spilling) the 64x128 tile ran a k tile in 5-6 us (ncu, session 25).
#define W_THREADS 256
#define W_COLUMN_HALVES 1
#else
#define W_THREADS (128 * (X3_BM / 64)) // a warpgroup per 64 rows of y
#endif
// the columns one wgmma instruction (one warpgroup) takes
#if W_COLUMN_HALVES
#define W_MMA_N (X3_BN / 2)
#else
#define W_MMA_N X3_BN
#endif
// Two accumulator chains a stage where the registers hold them (up to 128
// columns): the big.big products in one, the small terms in the other.
// The tensor core truncates each sum it adds into an accumulator, so a
// chain's rounding is biased toward zero; the bias is a fraction of an ulp
// of the chain's value per add, and it is the same sign in every output.
// One chain of all three products takes 12 such adds a stage at the
// result's magnitude, two chains 4 (the small chain's are 2^-11 smaller).
// A kernel's error stays within the contract either way, but a bias adds
// up from layer to layer where rounding errors do not: ResNet-18's
// logits, 20 convolutions deep with no normalization in between at
// inference, came out with 3.5x PyTorch's error against float64 (1.8e-6
// against 5.2e-7, H200, session 19) with one chain.
#ifndef W_CHAINS
#define W_CHAINS (X3_BN <= 128 ? 2 : 1)
#endif
#define W_PLANE(rows) ((rows) * X3_KT)
// Tiles in flight: three ahead of the one computed with both operands
// k-contiguous; an m- or n-contiguous operand stages its raw tiles apart
// from its planes (below), and shared memory then holds fewer.
// The 192-column tile holds one stage fewer (its shared memory is the
// SM's otherwise; both operands m- or n-contiguous it does not fit at all).
// The weight-gradient form (64-row tiles only) keeps four raw stages of
// both operands in flight: with two, each tile's gathered loads were
// waited for in full (5 us a tile of 64x128, H200, session 25).
#if KN_X3_CONV == 2
#define W_STAGES 4
static_assert(X3_BM == 64 && X3_BN == 128, "the weight-gradient form's four stages fit its 64x128 tile");
#else
#define W_STAGES ((KN_X3_AK + KN_X3_BK == 2 ? 4 : KN_X3_AK + KN_X3_BK == 1 ? 3 : 2) - (X3_BN > 128 && KN_X3_AK + KN_X3_BK >= 1))
#endif
static_assert(X3_KT == 32, "the wgmma form's rows are one 128-byte swizzle atom wide");

// float offset of (row r, k) in a plane
__device__ __forceinline__ int w_at(int r, int k)
{
    return r * 32 + ((((k >> 2) ^ r) & 7) << 2) + (k & 3);
}

// a shared-memory matrix descriptor: start address (an atom's, plus the
// k-step's bytes within it), stride offset 1024 bytes, 128-byte swizzle
// (the leading offset is unused when a k-step lies within one atom)
__device__ __forceinline__ unsigned long long w_desc(const float *s)
{
    const unsigned long long a = (unsigned)__cvta_generic_to_shared(s);
    return ((a & 0x3ffff) >> 4) | 1ull << 16 | (1024ull >> 4) << 32 | 1ull << 62;
}

// One operand's tiles (ROWS rows of m or n by X3_KT of k, from row r0) and
// its region of shared memory, which starts on 1024 bytes.
//
// A k-contiguous operand: tile kt comes by cp.async, 16 bytes (4 of k of a
// row) a copy, straight into its place in the big plane of stage
// kt % W_STAGES, quarter-warps taking 8 rows of one 16-byte column (128
// contiguous bytes); each thread then splits what it copied, no barrier in
// between: the big part in place, the small part into the small plane of
// the tile's parity. Region: W_STAGES big planes, two small ones.
//
// An m- or n-contiguous operand (a [k, rows] matrix: ONNX's MatMul weights,
// a backward pass's operands): tile kt comes as 16-byte copies of 4 rows
// at one k into a raw [k][ROWS + 8] stage, and the thread that copied 4
// rows splits them into the big and small planes of the tile's parity.
// A warp's copies take 2 runs of 4 rows at 16 consecutive k: the raw rows'
// 8 floats of padding put a quarter-warp's 16-byte reads in distinct banks,
// and the swizzle puts the warp's 4-byte writes of a row in 32. Region:
// two big planes, two small ones, W_STAGES raw stages.
//
// Outside the matrix: zeros. A thread's source pointer and offsets are
// worked out once (computed per tile, they were most of the kernel's
// instructions), a tile only adds its k. A thread's copies lie at one k,
// RSTEP rows apart (W_THREADS copies cover RSTEP rows in either layout),
// so copy i's places are copy 0's plus constants: one set of offsets a
// thread, not one a copy (a copy's own held 6 registers, and the
// accumulators of W_CHAINS need them).
//
// PLANES false: a k-contiguous operand whose tiles are only staged, in the
// big planes' layout, never split there (the swapped form's b); its region
// has no small planes.
template <int ROWS, bool KMAJ, bool PLANES = true>
struct w_tile {
    static_assert(KMAJ || PLANES, "an m- or n-contiguous operand is split into planes");
    static constexpr int CH = ROWS * X3_KT / 4 / W_THREADS; // copies a thread
    static constexpr int RAW = X3_KT * (ROWS + 8);        // floats of a raw stage
    static constexpr int FLOATS = KMAJ ? (W_STAGES + (PLANES ? 2 : 0)) * W_PLANE(ROWS)
                                       : 4 * W_PLANE(ROWS) + W_STAGES * RAW;
    static constexpr int RSTEP = W_THREADS / 8;              // rows from one copy to the next
    static constexpr int SSTEP = KMAJ ? RSTEP * 32 : RSTEP;  // the same in a stage
    static_assert(X3_KT / 4 == 8 && RSTEP % 8 == 0, "copy i's swizzle is copy 0's");
    float *base;
    const float *src;    // copy 0's first element (g itself when the thread has no rows)
    long long step;      // from one copy's source to the next
    long long rows_left; // rows from copy 0's first on (0 or less: none)
    int soff;            // where copy 0 lands in its stage
    int doff;            // where its first element goes in a plane
    int kin;             // the copies' k within the tile
    long long ld, K;

    // copy i's row and k within the tile (its k is the same for every i)
    __device__ __forceinline__ static void place(int i, int &r, int &k)
    {
        const int c = threadIdx.x + i * W_THREADS;
        if (KMAJ) {
            r = (c >> 3) / (X3_KT / 4) * 8 + (c & 7);
            k = (c >> 3) % (X3_KT / 4) * 4;
        } else {
            r = ((c >> 1) / X3_KT * 2 + (c & 1)) * 4;
            k = (c >> 1) % X3_KT;
        }
    }

    // the region and copy 0's place in it; g == 0: an operand that gathers
    // its tiles itself (w_conv_tile)
    __device__ __forceinline__ w_tile(float *region, const float *g, long long ld_, long long rows, long long K_,
                                      long long r0)
        : base(region), ld(ld_), K(K_)
    {
        int r, k;
        place(0, r, k);
        soff = KMAJ ? w_at(r, k) : k * (ROWS + 8) + r;
        doff = w_at(r, k);
        kin = k;
        rows_left = rows - r0 - r;
        step = KMAJ ? RSTEP * ld : RSTEP;
        src = g && rows_left > 0 ? g + (KMAJ ? (r0 + r) * ld + k : k * ld + r0 + r) : g;
    }

    __device__ __forceinline__ float *stage(int kt) const
    {
        return KMAJ ? base + kt % W_STAGES * W_PLANE(ROWS) : base + 4 * W_PLANE(ROWS) + kt % W_STAGES * RAW;
    }
    // the planes wgmma reads for tile kt
    __device__ __forceinline__ float *big(int kt) const
    {
        return KMAJ ? stage(kt) : base + (kt & 1) * W_PLANE(ROWS);
    }
    __device__ __forceinline__ float *small(int kt) const
    {
        return base + (KMAJ ? W_STAGES : 2) * W_PLANE(ROWS) + (kt & 1) * W_PLANE(ROWS);
    }

    __device__ __forceinline__ void fetch(int kt) const
    {
        const long long k0 = (long long)kt * X3_KT;
        float *st = stage(kt);
        const long long kleft = K - k0 - kin; // of k, from the copies' first on
        const int kbytes = kleft <= 0 ? 0 : KMAJ && kleft < 4 ? (int)kleft * 4 : 16;
        const float *from = src + (KMAJ ? k0 : k0 * ld);
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const long long left = rows_left - i * RSTEP; // rows from this copy's first on
            const int bytes = left <= 0 ? 0 : KMAJ || left >= 4 ? kbytes : kbytes ? (int)left * 4 : 0;
            x3_cp16(st + soff + i * SSTEP, bytes ? from + i * step : src, bytes);
        }
    }

    // this thread's copies of tile kt, split
    __device__ __forceinline__ void split(int kt) const
    {
        const float *st = stage(kt);
        float *b = big(kt), *sm = small(kt);
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const float4 v = *(const float4 *)(st + soff + i * SSTEP);
            unsigned hb[4], hs[4];
            x3_split(v.x, hb[0], hs[0]);
            x3_split(v.y, hb[1], hs[1]);
            x3_split(v.z, hb[2], hs[2]);
            x3_split(v.w, hb[3], hs[3]);
            const int d = doff + i * RSTEP * 32;
            if (KMAJ) {
                *(uint4 *)(b + d) = make_uint4(hb[0], hb[1], hb[2], hb[3]);
                *(uint4 *)(sm + d) = make_uint4(hs[0], hs[1], hs[2], hs[3]);
            } else { // four rows at one k: row r + e sits 32 e floats on, its chunk swizzled by its own row
                const int r = d >> 5;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int o = w_at(r + e, kin);
                    b[o] = __uint_as_float(hb[e]);
                    sm[o] = __uint_as_float(hs[e]);
                }
            }
        }
    }
};

#if KN_X3_CONV == 1
// The convolution form's a operand: the im2col matrix of a channels-last
// x {N, h, w, c}, never written out. Row m of the tile is output pixel
// (n, p, q) of the conv; its k = (r s + s') c + c' is tap (r, s') and
// channel c' of the window, whose 4 channels from c' on are 16 contiguous
// bytes of x when in the image (c is a multiple of 4), zeros (the
// padding) when not. Its tiles land where a k-contiguous operand's do, so
// the split and the planes are w_tile's.
//
// Where each copy reads is worked out as a tile is fetched, from its
// pixel's window origin (set once) and the tap and channel of this
// thread's k, which is the same for all its copies (a copy's k within the
// tile depends on its thread alone: w_tile::place) and moves on X3_KT a
// tile, so it is carried from tile to tile instead of divided out.
// fetch(kt) must come in the order kt = 0, 1, 2, ..., as the kernel's
// pipeline asks.
struct w_conv_tile : w_tile<X3_BM, true> {
    typedef w_tile<X3_BM, true> tile_t;
    const float *x;
    const float *img[tile_t::CH]; // x's image of the copy's pixel
    int ih0[tile_t::CH], iw0[tile_t::CH]; // its window's origin (rows past m: far outside)
    int tr, ts, tc; // this thread's k in the next tile fetched: tap row, tap column, channel
    int h, w, c, s, dh, dw;

    __device__ __forceinline__ w_conv_tile(float *region, const kn_la_gemm_args &p, long long K_, long long m0,
                                           long long kbeg)
        : tile_t(region, 0, 0, 0, K_, 0), x((const float *)p.a), h(p.cv.h), w(p.cv.w), c(p.cv.c), s(p.cv.s), dh(p.cv.dh),
          dw(p.cv.dw)
    {
        const long long pq = (long long)p.cv.p * p.cv.q;
#pragma unroll
        for (int i = 0; i < tile_t::CH; i++) {
            int r, k;
            tile_t::place(i, r, k);
            const long long m = m0 + r;
            img[i] = x;
            ih0[i] = -(1 << 30);
            iw0[i] = 0;
            if (m < p.m) {
                const long long n = m / pq, rem = m - n * pq;
                const int oh = (int)(rem / p.cv.q), ow = (int)(rem - (long long)oh * p.cv.q);
                img[i] = x + n * h * w * c;
                ih0[i] = oh * p.cv.sh - p.cv.ph;
                iw0[i] = ow * p.cv.sw - p.cv.pw;
            }
        }
        const long long k0 = kbeg + tile_t::kin;
        const long long tap = k0 / c;
        tc = (int)(k0 - tap * c);
        tr = (int)(tap / s);
        ts = (int)(tap - (long long)tr * s);
    }

    __device__ __forceinline__ void fetch(int kt)
    {
        float *st = tile_t::stage(kt);
        const bool live = (long long)kt * X3_KT + tile_t::kin < tile_t::K;
        const int dr = tr * dh, ds = ts * dw;
#pragma unroll
        for (int i = 0; i < tile_t::CH; i++) {
            const int ih = ih0[i] + dr, iw = iw0[i] + ds;
            const bool in = live && (unsigned)ih < (unsigned)h && (unsigned)iw < (unsigned)w;
            x3_cp16(st + tile_t::soff + i * tile_t::SSTEP, in ? img[i] + ((long long)ih * w + iw) * c + tc : x, in ? 16 : 0);
        }
        tc += X3_KT;
        while (tc >= c) {
            tc -= c;
            if (++ts == s) ts = 0, tr++;
        }
    }
};
#endif

#if KN_X3_CONV == 2
// The weight-gradient form's b operand: the same im2col matrix, read the
// other way round. Its k is the output pixel (n, p, q) and its rows n =
// (r s + s') c + c' the taps and channels, so a tile is laid out as an
// n-contiguous operand's (w_tile<.., false>): a copy is 4 rows (4 channels
// of one tap, 16 contiguous bytes of x) at one k. A thread's copies share
// their k (w_tile::place), so the pixel is carried from tile to tile once a
// thread; each copy keeps its tap's offsets and channel.
struct w_conv_tile_n : w_tile<X3_BN, false> {
    typedef w_tile<X3_BN, false> tile_t;
    const float *x;
    int dr[tile_t::CH], ds[tile_t::CH], ch[tile_t::CH]; // a copy's tap offsets and channel (ch < 0: past n)
    int pn, pp, pq; // this thread's pixel in the next tile fetched
    long long kleft; // pixels of this split from it on
    int h, w, c, P, Q, sh, sw;

    __device__ __forceinline__ w_conv_tile_n(float *region, const kn_la_gemm_args &p, long long K_, long long n0,
                                             long long kbeg)
        : tile_t(region, 0, 0, 0, K_, 0), x((const float *)p.b), h(p.cv.h), w(p.cv.w), c(p.cv.c), P(p.cv.p),
          Q(p.cv.q), sh(p.cv.sh), sw(p.cv.sw)
    {
#pragma unroll
        for (int i = 0; i < tile_t::CH; i++) {
            int r, k;
            tile_t::place(i, r, k);
            const long long row = n0 + r; // 4 rows from here: one tap (c is a multiple of 4)
            ch[i] = -1;
            dr[i] = ds[i] = 0;
            if (row < p.n) {
                const int tap = (int)(row / c);
                ch[i] = (int)(row - (long long)tap * c);
                const int tr = tap / p.cv.s, ts = tap - tr * p.cv.s;
                dr[i] = tr * p.cv.dh - p.cv.ph;
                ds[i] = ts * p.cv.dw - p.cv.pw;
            }
        }
        const long long pix = kbeg + tile_t::kin, pqn = (long long)P * Q;
        pn = (int)(pix / pqn);
        const long long rem = pix - (long long)pn * pqn;
        pp = (int)(rem / Q);
        pq = (int)(rem - (long long)pp * Q);
        kleft = K_ - tile_t::kin;
    }

    __device__ __forceinline__ void fetch(int kt)
    {
        float *st = tile_t::stage(kt);
        const bool live = kleft > 0;
        const float *img = x + (long long)pn * h * w * c;
        const int ih0 = pp * sh, iw0 = pq * sw;
#pragma unroll
        for (int i = 0; i < tile_t::CH; i++) {
            const int ih = ih0 + dr[i], iw = iw0 + ds[i];
            const bool in = live && ch[i] >= 0 && (unsigned)ih < (unsigned)h && (unsigned)iw < (unsigned)w;
            x3_cp16(st + tile_t::soff + i * tile_t::SSTEP, in ? img + ((long long)ih * w + iw) * c + ch[i] : x,
                    in ? 16 : 0);
        }
        kleft -= X3_KT;
        pq += X3_KT;
        while (pq >= Q) {
            pq -= Q;
            if (++pp == P) pp = 0, pn++;
        }
    }
};
#endif

// The pipeline's start: the copies of the first W_STAGES - 1 tiles of
// both operands, a commit group a tile (empty past the last tile, so that
// the waits count groups alike)
template <class TA, class TB> __device__ __forceinline__ void w_prefetch(TA &ta, TB &tb, int ktiles)
{
#pragma unroll
    for (int s = 0; s < W_STAGES - 1; s++) {
        if (s < ktiles) {
            ta.fetch(s);
            tb.fetch(s);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    }
}

// the 32 accumulator operands of an m64n64k8 (the n64 form and the
// swapped form's)
#define W_ACC32(d)                                                                                                   \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),     \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),     \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),    \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// d (+)= a . b^T for a 64 x 8 slice of a and a W_MMA_N x 8 slice of b;
// `accumulate` 0 starts d afresh
__device__ __forceinline__ void w_mma(float *d, unsigned long long da, unsigned long long db, int accumulate)
{
#if W_MMA_N == 128
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
                   "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
                   "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
                   "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
#elif W_MMA_N == 64
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1;\n}\n"
                 : W_ACC32(d)
                 : "l"(da), "l"(db), "r"(accumulate));
#elif W_MMA_N == 192
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
                 "%96, %97, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                 : "l"(da), "l"(db), "r"(accumulate));
#else
#error "the wgmma form's instructions take 64, 128 or 192 columns"
#endif
}

#if KN_X3_SWAP
// ---- The swapped form (KN_X3_SWAP, tiles wgs64xN) ----
//
// For few rows (large_linear's 64 x 4096 x 4096, a decode step's), where
// the GEMM is a stream of b: y^T = b . a^T, b's rows (a linear layer's
// output features, y's columns) the MMA's m, a's 64 rows its n. b's tiles
// come by cp.async into stages in the big planes' layout and are never
// split there: each warp reads its 16 rows' fragments from the stage into
// registers, splits them there, and wgmma takes them from registers as
// its a operand against a's split planes. b then costs one shared-memory
// write and one read; in the planes it cost a write, a read, two writes
// and the tensor core's three reads, and the 64x64 tile of the ordinary
// form ran with shared memory 68% busy and DRAM 23% (ncu, H200, session
// 19). A warpgroup takes 64 columns of y; the fragments of tile kt + 1
// are read and split while the tensor cores work on tile kt, so the
// copies run two tiles ahead of the wait (cp.async.wait_group 1).
static_assert(KN_X3_AK && KN_X3_BK && X3_BM == 64, "the swapped form: both operands k-contiguous, 64 rows");

// d (+)= a . b^T for a 64 x 8 slice of a in registers (the lane's
// fragment: rows g and g + 8 of its warp's 16, k t and t + 4) and a 64 x 8
// slice of b in shared memory
__device__ __forceinline__ void w_mma_r(float *d, const unsigned a[4], unsigned long long db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                 : W_ACC32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

// The fragments of rows r and r + 8 of a staged b tile, split: big[kk],
// small[kk] for each k-step kk (k 8 kk + t and 8 kk + t + 4). The
// swizzle puts a warp's 32 reads of one k in 32 banks.
__device__ __forceinline__ void w_frags(const float *st, int r, int t, unsigned big[4][4], unsigned small[4][4])
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const int k = 8 * kk + t;
        x3_split(st[w_at(r, k)], big[kk][0], small[kk][0]);
        x3_split(st[w_at(r + 8, k)], big[kk][1], small[kk][1]);
        x3_split(st[w_at(r, k + 4)], big[kk][2], small[kk][2]);
        x3_split(st[w_at(r + 8, k + 4)], big[kk][3], small[kk][3]);
    }
}

// where the swapped form's sums sit, for x3_epilogue: d[4q + e] is y's
// row 8q + 2t (+ 1 for odd e), column rb (+ 8 for e >= 2)
struct w_swapped_at {
    static constexpr bool pairs = false;
    __device__ __forceinline__ int row(int i) const { return (i >> 1) * 8 + (i & 1); }
    __device__ __forceinline__ int col(int j) const { return 8 * j; }
    __device__ __forceinline__ int operator()(int i, int j) const { return 4 * (i >> 1) + 2 * j + (i & 1); }
};

extern "C" __global__ void __launch_bounds__(W_THREADS, 1) KN_LA_KERNEL(kn_la_gemm_args p)
{
    constexpr int NR = X3_BM / 2; // accumulator floats a thread (64 of b's rows by X3_BM of a's)
    extern __shared__ __align__(16) float x3_raw_smem[];
    float *const x3_smem = x3_raw_smem + ((1024 - ((unsigned)__cvta_generic_to_shared(x3_raw_smem) & 1023)) & 1023) / 4;
    const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const long long m0 = (long long)blockIdx.x * X3_BM, n0 = (long long)blockIdx.y * X3_BN;
    const long long z = blockIdx.z / p.splits, kbeg = (blockIdx.z % p.splits) * p.kchunk;
    const long long kend = kbeg + p.kchunk < p.k ? kbeg + p.kchunk : p.k;
    const long long K = kend - kbeg;
    const int ktiles = (int)((K + X3_KT - 1) / X3_KT);
    const float *A = (const float *)p.a + z * p.sa + kbeg, *B = (const float *)p.b + z * p.sb + kbeg;
    const w_tile<X3_BM, true> ta(x3_smem, A, p.lda, p.m, K, m0);
    const w_tile<X3_BN, true, false> tb(x3_smem + w_tile<X3_BM, true>::FLOATS, B, p.ldb, p.n, K, n0);
    const int rb = wg * 64 + warp * 16 + g; // this lane's first row of b's tile

    float acc[NR], part[NR], part_small[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = part[i] = part_small[i] = 0.f;
    unsigned fb[4][4], fs[4][4], nb[4][4], ns[4][4]; // tile kt's fragments, and tile kt + 1's

    w_prefetch(ta, tb, ktiles);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(W_STAGES - 3)); // tiles 0 and 1
    ta.split(0);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    w_frags(tb.stage(0), rb, t, fb, fs);

    for (int kt = 0; kt < ktiles; kt++) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        const float *ab = ta.big(kt), *as = ta.small(kt);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            w_mma_r(part_small, fs[kk], w_desc(ab + 8 * kk), kk > 0);
            w_mma_r(part_small, fb[kk], w_desc(as + 8 * kk), 1);
            w_mma_r(part, fb[kk], w_desc(ab + 8 * kk), kk > 0);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        // meanwhile: tile kt + 1's fragments (in since the last barrier) ...
        if (kt + 1 < ktiles) w_frags(tb.stage(kt + 1), rb, t, nb, ns);
        // ... the copies of tile kt + W_STAGES - 1, into the stages of tile
        // kt - 1 ...
        if (kt + W_STAGES - 1 < ktiles) {
            ta.fetch(kt + W_STAGES - 1);
            tb.fetch(kt + W_STAGES - 1);
        }
        asm volatile("cp.async.commit_group;\n" ::);
        // ... and a's split of tile kt + 1; tile kt + 2 in for the next
        asm volatile("cp.async.wait_group %0;\n" ::"n"(W_STAGES - 3));
        if (kt + 1 < ktiles) ta.split(kt + 1);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        // the tensor cores read fb and fs until the wait: held live to here,
        // so that the compiler puts tile kt + 1's fragments elsewhere
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) asm volatile("" : "+r"(fb[kk][e]), "+r"(fs[kk][e])::"memory");
#pragma unroll
        for (int i = 0; i < NR; i++) acc[i] += part[i] + part_small[i];
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) fb[kk][e] = nb[kk][e], fs[kk][e] = ns[kk][e];
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); // a's tile kt + 1 is split, b's tile kt + 2 in; every warpgroup is done with tile kt
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    // d[4j + e]: b's row rb (+ 8 for e >= 2) = y's column; a's row 8j + 2t
    // (+ 1 for odd e) = y's row
    const x3_out o = x3_out_of(p, z);
    x3_epilogue<X3_BM / 4, 2>(o, p, m0 + 2 * t, n0 + rb, acc, w_swapped_at());
}
#else // the ordinary wgmma form
// where its sums sit, for x3_epilogue: d[4q + e] is row 16 warp + g (+ 8
// for e >= 2), column 8q + 2t (+ 1 for odd e)
struct w_ordinary_at {
    static constexpr bool pairs = true;
    __device__ __forceinline__ int row(int i) const { return 8 * i; }
    __device__ __forceinline__ int col(int j) const { return (j >> 1) * 8 + (j & 1); }
    __device__ __forceinline__ int operator()(int i, int j) const { return 4 * (j >> 1) + 2 * i + (j & 1); }
};

extern "C" __global__ void __launch_bounds__(W_THREADS, 1) KN_LA_KERNEL(kn_la_gemm_args p)
{
    constexpr int NR = W_MMA_N / 2; // accumulator floats a thread
    // planes on 1024 bytes, the swizzle atom (the launcher adds the slack)
    extern __shared__ __align__(16) float x3_raw_smem[];
    float *const x3_smem = x3_raw_smem + ((1024 - ((unsigned)__cvta_generic_to_shared(x3_raw_smem) & 1023)) & 1023) / 4;
    const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    const long long m0 = (long long)blockIdx.x * X3_BM, n0 = (long long)blockIdx.y * X3_BN;
    const long long z = blockIdx.z / p.splits, kbeg = (blockIdx.z % p.splits) * p.kchunk;
    const long long kend = kbeg + p.kchunk < p.k ? kbeg + p.kchunk : p.k;
    const long long K = kend - kbeg;
    const int ktiles = (int)((K + X3_KT - 1) / X3_KT);

    // a's region, then b's (both on 1024 bytes: every plane and stage is a
    // multiple of 1024 bytes)
#if KN_X3_CONV == 1
    static_assert(KN_X3_AK && KN_X3_BK, "the convolution form's operands are k-contiguous");
    w_conv_tile ta(x3_smem, p, K, m0, kbeg);
#else
    const float *A = (const float *)p.a + z * p.sa + (KN_X3_AK ? kbeg : kbeg * p.lda);
    const w_tile<X3_BM, KN_X3_AK> ta(x3_smem, A, p.lda, p.m, K, m0);
#endif
#if KN_X3_CONV == 2
    static_assert(!KN_X3_AK && !KN_X3_BK, "the weight-gradient form's operands are m- and n-contiguous");
    w_conv_tile_n tb(x3_smem + w_tile<X3_BM, KN_X3_AK>::FLOATS, p, K, n0, kbeg);
#else
    const float *B = (const float *)p.b + z * p.sb + (KN_X3_BK ? kbeg : kbeg * p.ldb);
    const w_tile<X3_BN, KN_X3_BK> tb(x3_smem + w_tile<X3_BM, KN_X3_AK>::FLOATS, B, p.ldb, p.n, K, n0);
#endif

    // acc: the running sums; part: the tensor core's sums of the current
    // stage, added to acc by f32 adds when the stage is done (the reason
    // is at the top of this file); part_small: the stage's small terms, where
    // the registers allow (W_CHAINS)
    float acc[NR], part[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = part[i] = 0.f;
#if W_CHAINS == 2
    float part_small[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) part_small[i] = 0.f;
#endif

    w_prefetch(ta, tb, ktiles);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(W_STAGES - 2));
    ta.split(0);
    tb.split(0);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); // the splits, seen by the async proxy
    __syncthreads();

    for (int kt = 0; kt < ktiles; kt++) {
        // the tensor cores first: tile kt (split by the last iteration)
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#if W_COLUMN_HALVES
        // every warpgroup all of a's 64 rows, its own half of b's
        const float *ab = ta.big(kt), *as = ta.small(kt);
        const float *bb = tb.big(kt) + wg * W_MMA_N * X3_KT, *bs = tb.small(kt) + wg * W_MMA_N * X3_KT;
#else
        const float *ab = ta.big(kt) + wg * 64 * X3_KT, *as = ta.small(kt) + wg * 64 * X3_KT;
        const float *bb = tb.big(kt), *bs = tb.small(kt);
#endif
#pragma unroll
        for (int kk = 0; kk < X3_KT; kk += 8) {
#if W_CHAINS == 2
            w_mma(part_small, w_desc(as + kk), w_desc(bb + kk), kk > 0);
            w_mma(part_small, w_desc(ab + kk), w_desc(bs + kk), 1);
            w_mma(part, w_desc(ab + kk), w_desc(bb + kk), kk > 0);
#else
            // the small terms first, so the big one is added to a partial
            // of their size, not the other way round
            w_mma(part, w_desc(as + kk), w_desc(bb + kk), kk > 0);
            w_mma(part, w_desc(ab + kk), w_desc(bs + kk), 1);
            w_mma(part, w_desc(ab + kk), w_desc(bb + kk), 1);
#endif
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        // meanwhile: copies of the tile W_STAGES - 1 ahead, into the stage
        // of tile kt - 1 (done with since the last barrier) ...
        if (kt + W_STAGES - 1 < ktiles) {
            ta.fetch(kt + W_STAGES - 1);
            tb.fetch(kt + W_STAGES - 1);
        }
        asm volatile("cp.async.commit_group;\n" ::);
        // ... and the split of this thread's copies of tile kt + 1 (into
        // the planes of tile kt - 1's parity, done with too)
        asm volatile("cp.async.wait_group %0;\n" ::"n"(W_STAGES - 2));
        if (kt + 1 < ktiles) {
            ta.split(kt + 1);
            tb.split(kt + 1);
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#if W_CHAINS == 2
#pragma unroll
        for (int i = 0; i < NR; i++) acc[i] += part[i] + part_small[i];
#else
#pragma unroll
        for (int i = 0; i < NR; i++) acc[i] += part[i];
#endif
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); // tile kt + 1 is split; every warpgroup is done with tile kt
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    const x3_out o = x3_out_of(p, z);
    const int g = lane >> 2, t = lane & 3;
#if W_COLUMN_HALVES
    const long long r = m0 + warp * 16 + g, c0 = n0 + wg * W_MMA_N + 2 * t;
#else
    const long long r = m0 + wg * 64 + warp * 16 + g, c0 = n0 + 2 * t;
#endif
    x3_epilogue<2, W_MMA_N / 4>(o, p, r, c0, acc, w_ordinary_at());
}
#endif // KN_X3_SWAP
#else // the mma.sync form

#define X3_STAGES 3
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

__device__ __forceinline__ void x3_mma(float c[4], const unsigned a[4], const unsigned b[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// where its sums sit, for x3_epilogue: acc[mi][nj][e] is row 16 mi + g
// (+ 8 for e >= 2), column 8 nj + 2t (+ 1 for odd e)
template <int NT> struct x3_mma_at {
    static constexpr bool pairs = true;
    __device__ __forceinline__ int row(int i) const { return (i >> 1) * 16 + (i & 1) * 8; }
    __device__ __forceinline__ int col(int j) const { return (j >> 1) * 8 + (j & 1); }
    __device__ __forceinline__ int operator()(int i, int j) const
    {
        return ((i >> 1) * NT + (j >> 1)) * 4 + 2 * (i & 1) + (j & 1);
    }
};

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

    const x3_out o = x3_out_of(p, z);
    x3_epilogue<2 * MT, 2 * NT>(o, p, m0 + wm0 + g, n0 + wn0 + 2 * t, &acc[0][0][0], x3_mma_at<NT>());
}
#endif
