// kn_attention_f32.cu: kiln's f32 attention kernels, the tiled one of
// strict f32 FMA and the split-f32 one on the TF32 tensor cores, both of
//   o = softmax(q k^T * scale (+ mask)) v
// FlashAttention-2 style, as kn_attention.cu's others.
//
// kernels/cuda/kn_cuda_attention.c builds their modules from kn_attention.cu
// (the shared helpers: masks, exp2, cp.async; the argument struct before
// it) followed by this file, with
//   #define KN_ATT_DT 0
//   #define KN_ATT_FT <32, 64, 128>       the tiled f32 kernel for this padded head dim
//  or
//   #define KN_ATT_X3 <32, 64>            the split-f32 tensor-core kernel for this padded head dim
// and looks the kernels up by the names built below (kn_attn_f32t_* and
// kn_attn_x3_*). No CUDA headers (NVRTC runs without include paths).
#ifdef KN_ATT_STANDALONE

#if (defined(KN_ATT_FT) || defined(KN_ATT_X3)) && KN_ATT_DT == 0
// ---- f32 staging and masks, shared by the tiled f32 and split-f32 kernels ----

// One thread's share of staging a [NROWS][FT] f32 slice into shared memory
// as [NROWS][LD] (LD = FT + 4 unless said), in 16-byte cp.async chunks, by
// the block's NTHREADS threads. NTHREADS is a multiple of a row's FT / 4
// chunks, so a thread always copies the same column (col) of rows r0,
// r0 + RSTEP, ...; only the row bound changes from tile to tile.
template <int FT, int NROWS, int LD = FT + 4, int NTHREADS = 128> struct kn_att_ft_stager {
    static constexpr int CH = FT / 4, RSTEP = NTHREADS / CH, PER = NROWS / RSTEP;
    static_assert(NTHREADS % CH == 0 && NROWS % RSTEP == 0, "the threads must tile the rows evenly");
    const char *base; // the slice: what a zero-filled chunk names (it reads nothing)
    const char *g;    // this thread's first chunk, in row r0 of the slice
    long long step;   // bytes between its chunks (RSTEP rows)
    int r0, bytes;    // its first row; bytes a chunk copies (0 past the width)
    int dst_off;      // its first chunk's offset in shared memory, in floats
    // thread tid of the NTHREADS (threadIdx.x when they are the whole block)
    __device__ __forceinline__ void init(const char *slice, long long rs, int width, int tid)
    {
        const int col = (tid % CH) * 4, left = width - col;
        base = slice;
        r0 = tid / CH;
        bytes = left >= 4 ? 16 : left > 0 ? 4 * left : 0;
        g = slice + ((long long)r0 * rs + col) * 4;
        step = (long long)RSTEP * rs * 4;
        dst_off = r0 * LD + col;
    }
    // rows row0 .. row0 + NROWS - 1 of the slice (row0 * row_bytes bytes in), zero past `limit`
    __device__ __forceinline__ void copy(float *dst, long long row0, long long row_bytes, long long limit) const
    {
        const char *p = g + row0 * row_bytes;
#pragma unroll
        for (int u = 0; u < PER; u++) {
            const bool in = row0 + r0 + u * RSTEP < limit && bytes;
            kn_att_cp16(dst + dst_off + u * RSTEP * LD, in ? p + u * step : base, in ? bytes : 0);
        }
    }
};

// a mask entry of key j (clamped to tk - 1: keys past tk are dropped
// anyway) in row mrow: a bool as 0 or 1, an additive f32 entry as itself
__device__ __forceinline__ float kn_att_ft_mask(int kind, const char *mrow, int j, int tk, int ms3)
{
    const int off = min(j, tk - 1) * ms3;
    return kind == 1 ? (float)((const unsigned char *)mrow)[off] : ((const float *)mrow)[off];
}

#endif

#if defined(KN_ATT_FT) && KN_ATT_DT == 0
// ============================================================================
// Tiled f32 kernel: f32 FMA throughout (strict f32, no tensor cores), for
// head dims up to FT (32, 64 or 128), rows 16-byte aligned. 128 threads, a
// block of BM = 64 (or 32) query rows, key tiles of 64; Q, K and V staged in
// shared memory as [row][FT + 4], P as [row][64 + 8]. Thread (ty, tx) =
// (tid / 8, tid % 8) owns query rows ty + 16*i (i < RPT = BM / 16) and, in
// S = Q K^T, key columns tx + 8*j (j < 8): each score a 4-wide dot step
// from one LDS.128 of Q and one of K. In O += P V it owns output columns
// 32*q + 4*tx + e, from LDS.128 of P's row and V's. The interleaved
// ownership and the pads put the rows a warp reads at once (4 values of
// ty, 8 of tx) in distinct banks. A row's softmax statistics are shared by
// its 8 threads (lanes 8 apart in tid: shuffles over lane bits 0..2).
//
// The kernel is bound by how many instructions it issues besides its FMAs
// (BERT's 8x12x128x64 walks 2 key tiles a block, so per-tile and per-block
// work weigh as much as the products): stage addresses are worked out once
// and stepped a tile at a time; a tile's mask entries are loaded before its
// products, which hide their latency; the bounds and causal checks run only
// on tiles that cross tk or the diagonal; exponentials use the SFU's ex2
// (kn_att_exp2); the output is scaled by one reciprocal a row and stored
// 16 bytes at a time where aligned. Copies are asynchronous: K of the next
// tile is requested once this tile's scores are written, V once its
// products are done.
//
// What bounds it, and three rewrites measured slower on the H200 at every
// suite shape (bench/results/2026-11-30-h200-s14-attention-f32-experiments.txt):
// a warp's 16-byte shared-memory load costs 4 wavefronts and an SM serves
// one a cycle against 4 warp-FMAs, so 4 x 8 products a thread (2.7 FMAs a
// float read) can reach two thirds of the FMA rate at most, and it runs at
// 3 warps a scheduler. 8 x 8 register tiles (4 FMAs a float: 3.6x fewer
// wavefronts) need 240+ registers, 1.4 warps a scheduler, and stalled on
// instruction fetch and latency (ViT 69 us against 49); P in K's buffer
// with 8-byte loads, for 4 blocks an SM, spilled and stalled on shared
// memory (ViT 57); query rows spread evenly over the blocks (ViT's 197 as
// 4 x 52, not 3 x 64 + 5) cost more in guards than it balanced (ViT 57).
// ============================================================================
#define KN_ATT_FT_BN 64
#define KN_ATT_FT_LP (KN_ATT_FT_BN + 8)
// S = Q K^T for one tile: rows ty + 16*i, keys tx + 8*j. TAIL: only the
// first jn key groups of 8 hold keys that can be kept (the last tile of a
// sequence that is not a multiple of 64, or of a causal block); the others'
// products are skipped, their scores stay 0 and the edge checks drop them. ViT's 197 keys end in a tile
// of 5: the full product there was a fifth of its kernel's work.
template <int FT, int RPT, bool TAIL>
__device__ __forceinline__ void kn_att_ft_scores(float (&s)[RPT][8], const float *sq, const float *sk, int ty, int tx,
                                                 int jn)
{
    constexpr int LD = FT + 4;
#pragma unroll
    for (int i = 0; i < RPT; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) s[i][j] = 0.f;
    // all loads of a step first, then its FMAs: the loads' latency is
    // paid once a step, not once a key column
#pragma unroll 2
    for (int x = 0; x < FT; x += 4) {
        float4 qv[RPT], kv[8];
#pragma unroll
        for (int i = 0; i < RPT; i++) qv[i] = *(const float4 *)(sq + (ty + 16 * i) * LD + x);
        // (every group's K loads, even in a tail: skipping them too took
        // the 32-row kernel from 128 registers a thread to 168)
#pragma unroll
        for (int j = 0; j < 8; j++) kv[j] = *(const float4 *)(sk + (tx + 8 * j) * LD + x);
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (!TAIL || j < jn) {
#pragma unroll
                for (int i = 0; i < RPT; i++) {
                    float acc = s[i][j];
                    acc = fmaf(qv[i].x, kv[j].x, acc);
                    acc = fmaf(qv[i].y, kv[j].y, acc);
                    acc = fmaf(qv[i].z, kv[j].z, acc);
                    s[i][j] = fmaf(qv[i].w, kv[j].w, acc);
                }
            }
    }
}

// O += P V over keys c < cn of the tile (TAIL; else all 64): rows
// ty + 16*i, columns 32*q + 4*tx + e. P is 0 past the kept keys, so a
// tail tile stops at them, cn rounded up to 4.
template <int FT, int RPT, bool TAIL>
__device__ __forceinline__ void kn_att_ft_pv(float (&o)[RPT][FT / 32][4], const float *sp, const float *sv, int ty,
                                             int tx, int cn)
{
    constexpr int LD = FT + 4, LP = KN_ATT_FT_LP, NQ = FT / 32;
    const int end = TAIL ? cn : KN_ATT_FT_BN;
#pragma unroll 2
    for (int c = 0; c < end; c += 4) {
        float4 pv[RPT], vv4[4][NQ];
#pragma unroll
        for (int i = 0; i < RPT; i++) pv[i] = *(const float4 *)(sp + (ty + 16 * i) * LP + c);
#pragma unroll
        for (int cc = 0; cc < 4; cc++)
#pragma unroll
            for (int q = 0; q < NQ; q++) vv4[cc][q] = *(const float4 *)(sv + (c + cc) * LD + 32 * q + 4 * tx);
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                const float4 vv = vv4[cc][q];
#pragma unroll
                for (int i = 0; i < RPT; i++) {
                    const float p = cc == 0 ? pv[i].x : cc == 1 ? pv[i].y : cc == 2 ? pv[i].z : pv[i].w;
                    o[i][q][0] = fmaf(p, vv.x, o[i][q][0]);
                    o[i][q][1] = fmaf(p, vv.y, o[i][q][1]);
                    o[i][q][2] = fmaf(p, vv.z, o[i][q][2]);
                    o[i][q][3] = fmaf(p, vv.w, o[i][q][3]);
                }
            }
        }
    }
}

template <int FT, int BM> __device__ __forceinline__ void kn_att_f32t(const kn_attn_args &a, float *smem)
{
    constexpr int BN = KN_ATT_FT_BN, LD = FT + 4, LP = KN_ATT_FT_LP, NQ = FT / 32, RPT = BM / 16; // rows a thread
    // a tile's mask entries in registers ahead of its products: for 2 rows a
    // thread; with 4 they would take the registers of a third block an SM
    constexpr bool PREFETCH = RPT <= 2;
    const int tid = threadIdx.x, ty = tid / 8, tx = tid % 8;
    const long long nbh = gridDim.x / a.n_qblocks;
    const long long bh = blockIdx.x % nbh;
    const int qb = a.n_qblocks - 1 - (int)(blockIdx.x / nbh);
    const long long b = bh / a.heads, h = bh % a.heads;
    const long long q0 = (long long)qb * BM;
    const char *qp = a.q + (b * a.qs[0] + h * a.qs[1]) * 4;
    const char *kp = a.k + (b * a.ks[0] + h * a.ks[1]) * 4;
    const char *vp = a.v + (b * a.vs[0] + h * a.vs[1]) * 4;
    float *sq = smem, *sk = sq + BM * LD, *sv = sk + BN * LD, *sp = sv + BN * LD; // P: BM x LP

    long long kend = a.tk;
    if (a.causal && q0 + BM < kend) kend = q0 + BM;
    const int ntiles = (int)((kend + BN - 1) / BN), tk = (int)a.tk;

    kn_att_ft_stager<FT, BN> kst, vst;
    kst.init(kp, a.ks[2], a.d, threadIdx.x);
    vst.init(vp, a.vs[2], a.dv, threadIdx.x);
    const long long krow = a.ks[2] * 4, vrow = a.vs[2] * 4;
    {
        kn_att_ft_stager<FT, BM> qst;
        qst.init(qp, a.qs[2], a.d, threadIdx.x);
        qst.copy(sq, q0, a.qs[2] * 4, a.tq);
    }
    kst.copy(sk, 0, krow, a.tk);
    kn_att_cp_commit();
    vst.copy(sv, 0, vrow, a.tk);
    kn_att_cp_commit();

    // the mask rows of this thread's query rows (clamped into range: rows
    // past tq are never stored)
    const int ms3 = (int)a.ms[3];
    const char *mrow[RPT];
#pragma unroll
    for (int i = 0; i < RPT; i++) {
        long long r = q0 + ty + 16 * i;
        if (r >= a.tq) r = a.tq - 1;
        const int es = a.mask_kind == 1 ? 1 : 4; // an f32 kernel's float masks are f32
        mrow[i] = a.mask_kind ? a.mask + kn_att_mask_row(a, b, h, r) * es : a.mask;
    }

    float o[RPT][NQ][4], m[RPT], l[RPT];
#pragma unroll
    for (int i = 0; i < RPT; i++) {
        m[i] = KN_ATT_NEG_INF;
        l[i] = 0.f;
#pragma unroll
        for (int q = 0; q < NQ; q++) o[i][q][0] = o[i][q][1] = o[i][q][2] = o[i][q][3] = 0.f;
    }

    for (int it = 0; it < ntiles; it++) {
        const int k0 = it * BN;
        // this tile's mask entries, requested now and used after the
        // products (keys past tk read key tk - 1: dropped below)
        float madd[RPT][8];
        if (PREFETCH && a.mask_kind) {
#pragma unroll
            for (int i = 0; i < RPT; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) madd[i][j] = kn_att_ft_mask(a.mask_kind, mrow[i], k0 + tx + 8 * j, tk, ms3);
        }
        kn_att_cp_wait<1>(); // this tile's K (and Q); its V may still be on the way
        __syncthreads();

        // S = Q K^T; nk: this tile's keys that can be kept (past them: past
        // tk, or above every row's diagonal)
        const int nk = (int)(kend - k0 < BN ? kend - k0 : BN);
        float s[RPT][8];
        if (nk == BN)
            kn_att_ft_scores<FT, RPT, false>(s, sq, sk, ty, tx, 8);
        else
            kn_att_ft_scores<FT, RPT, true>(s, sq, sk, ty, tx, (nk + 7) / 8);

        // scale and mask; drop keys past tk and above the diagonal, on the
        // tiles that have such keys
        const bool edge = k0 + BN > tk || (a.causal && k0 + BN - 1 > q0);
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            const long long qi = q0 + ty + 16 * i;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float v = s[i][j] * a.scale_log2;
                if (a.mask_kind) {
                    const float mk = PREFETCH ? madd[i][j] : kn_att_ft_mask(a.mask_kind, mrow[i], k0 + tx + 8 * j, tk, ms3);
                    v = a.mask_kind == 1 ? (mk != 0.f ? v : KN_ATT_NEG_INF) : fmaf(mk, KN_ATT_LOG2E, v);
                }
                if (edge) {
                    const int kj = k0 + tx + 8 * j;
                    if (kj >= tk || (a.causal && kj > qi)) v = KN_ATT_NEG_INF;
                }
                s[i][j] = v;
            }
        }

        // online softmax; P to shared memory
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            float mx = m[i];
#pragma unroll
            for (int j = 0; j < 8; j++) mx = fmaxf(mx, s[i][j]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            const float use = kn_att_safe_max(mx);
            const float corr = kn_att_exp2(m[i] - use);
            m[i] = mx;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float p = kn_att_exp2(s[i][j] - use);
                sum += p;
                sp[(ty + 16 * i) * LP + tx + 8 * j] = p;
            }
            l[i] = fmaf(l[i], corr, sum); // thread-partial: the 8 threads' sum comes at the end
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                o[i][q][0] *= corr;
                o[i][q][1] *= corr;
                o[i][q][2] *= corr;
                o[i][q][3] *= corr;
            }
        }
        kn_att_cp_wait<0>(); // this tile's V
        __syncthreads();     // P and V visible; K free
        if (it + 1 < ntiles) {
            kst.copy(sk, k0 + BN, krow, a.tk);
            kn_att_cp_commit();
        }

        if (nk == BN)
            kn_att_ft_pv<FT, RPT, false>(o, sp, sv, ty, tx, BN);
        else
            kn_att_ft_pv<FT, RPT, true>(o, sp, sv, ty, tx, (nk + 3) & ~3);
        __syncthreads(); // V and P free
        if (it + 1 < ntiles) {
            vst.copy(sv, k0 + BN, vrow, a.tk);
            kn_att_cp_commit();
        }
    }

    const long long ooff = b * a.os[0] + h * a.os[1];
#pragma unroll
    for (int i = 0; i < RPT; i++) {
        float sum = l[i];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        sum += __shfl_xor_sync(0xffffffffu, sum, 4);
        const float inv = 1.f / sum; // 1/0 = inf and 0 * inf = NaN: a fully masked row
        const long long qi = q0 + ty + 16 * i;
        if (qi >= a.tq) continue;
        float *row = (float *)a.o + ooff + qi * a.os[2];
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            const int col = 32 * q + 4 * tx;
            float v4[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = o[i][q][e] * inv;
                if (a.zero_nan && v != v) v = 0.f;
                v4[e] = v;
            }
            if (col + 3 < a.dv && ((unsigned long long)(row + col) & 15) == 0) {
                float4 t;
                t.x = v4[0], t.y = v4[1], t.z = v4[2], t.w = v4[3];
                *(float4 *)(row + col) = t;
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (col + e < a.dv) row[col + e] = v4[e];
            }
        }
    }
}

// kn_attn_f32t_d<FT>: blocks of 64 query rows; _m32: of 32 (short
// sequences: twice the blocks where 64-row ones leave SMs idle)
// Blocks an SM the 64-row kernel is built to hold (registers capped to
// fit): head dims up to 64, three (168 registers a thread, no spills; left
// alone ptxas took 206, two blocks), which its 71 KB of shared memory also
// allows. On the H200 ViT-B/16's 8 x 12 x 197 x 64 went from 67.9 to 49.6
// us. The 32-row kernel was slower held to four blocks (128 registers:
// BERT's 8 x 12 x 128 x 64 from 22.3 to 23.9 us): it keeps its 158, three.
#define KN_ATT_FT_MINB64 (KN_ATT_FT <= 64 ? 3 : 1)
extern "C" __global__ void __launch_bounds__(128, KN_ATT_FT_MINB64)
    KN_ATT_PASTE(kn_attn_f32t_d, KN_ATT_FT)(const kn_attn_args a)
{
    extern __shared__ __align__(16) float kn_att_ftsmem[];
    kn_att_f32t<KN_ATT_FT, 64>(a, kn_att_ftsmem);
}
extern "C" __global__ void __launch_bounds__(128)
    KN_ATT_PASTE(KN_ATT_PASTE(kn_attn_f32t_d, KN_ATT_FT), _m32)(const kn_attn_args a)
{
    extern __shared__ __align__(16) float kn_att_ftsmem[];
    kn_att_f32t<KN_ATT_FT, 32>(a, kn_att_ftsmem);
}
#endif // KN_ATT_FT

#if defined(KN_ATT_X3) && KN_ATT_DT == 0
// ============================================================================
// Split-f32 kernel: f32 attention on the TF32 tensor cores at f32 accuracy,
// the split-precision ("3xTF32") method of kn_la_gemm_x3.cu (read its head
// comment for why the method is accurate and where it is not). Each f32
// operand x is split into a TF32 "big" part and a TF32 "small" remainder,
// and a product is big.big + big.small + small.big on mma.sync m16n8k8,
// the small terms first. The tensor core adds to its accumulator with
// truncation, so, as in the GEMM, no accumulator is chained through more
// than four k-steps: S's k-steps (the head dim) are summed four at a time
// into a zeroed partial that an f32 add folds into the scores, and each
// tile's P V (32 keys, four k-steps) into a zeroed partial that an f32 add
// folds into O. PyTorch's memory-efficient attention uses the same split
// for f32 on sm_80 and later.
//
// Layout. A warp owns 16 query rows (a block RW of them in each of KG key
// groups: kn_att_x3 below); key tiles of 32 (BN), K and V double-buffered
// in shared memory by cp.async (one buffer a group with key groups), Q
// staged there once (Q and K rows of DP + 8 floats, V rows of DP + 4: the
// pads put a warp's fragment loads in distinct banks). Q's fragments are
// read and split at each use, scaled by scale * log2(e) so that the scores
// come out in the log2 domain. Held in registers instead they took ptxas
// to 241 registers a thread; split once into shared-memory planes they
// measured slower (H200: ViT's 8 x 12 x 197 x 64 36.7 us against 33.8).
//
// The k permutation. Within a k-step of 8, mma k index t stands for element
// 2t and index t + 4 for element 2t + 1, on both operands (a sum does not
// care about the order of its terms):
//   S = Q K^T: a lane's Q and K elements of a k-step are two neighbours, one
//     8-byte load;
//   O += P V: the S accumulator of key n-tile kc holds (row g, keys 2t and
//     2t + 1) and (row g + 8, the same keys), which is exactly P's A
//     fragment for the k-step over those 8 keys; B is V's rows 2t and
//     2t + 1. P never leaves registers, with no shuffles.
// Fragment layouts of m16n8k8 .tf32 (g = lane / 4, t = lane % 4):
//   A: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B: b0 (k t, n g), b1 (k t + 4, n g)
//   C: c0, c1 (g, 2t .. 2t + 1), c2, c3 (g + 8, 2t .. 2t + 1)
// ============================================================================
#define KN_ATT_X3_BN 32

// x rounded to TF32's 11 significant bits, to nearest (ties away), by two
// integer ops (kn_la_gemm_x3.cu measured cvt.rna.tf32.f32 slower)
__device__ __forceinline__ unsigned kn_att_tf32(unsigned bits)
{
    return (bits + 0x1000u) & 0xffffe000u;
}
// x = big + small, both TF32; x - big is exact
__device__ __forceinline__ void kn_att_split(float x, unsigned &big, unsigned &small)
{
    big = kn_att_tf32(__float_as_uint(x));
    small = kn_att_tf32(__float_as_uint(x - __uint_as_float(big)));
}
// c += a b on TF32 fragments
__device__ __forceinline__ void kn_att_mma_tf32(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// c = a b: a zeroed accumulator, with no instructions to zero it
__device__ __forceinline__ void kn_att_mma_tf32_first(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}
// the split product's three terms, small ones first: c (+)= a b
template <bool FIRST>
__device__ __forceinline__ void kn_att_mma_x3(float (&c)[4], const unsigned (&ab)[4], const unsigned (&as)[4], unsigned bb0,
                                              unsigned bb1, unsigned bs0, unsigned bs1)
{
    if (FIRST) kn_att_mma_tf32_first(c, as, bb0, bb1);
    else kn_att_mma_tf32(c, as, bb0, bb1);
    kn_att_mma_tf32(c, ab, bs0, bs1);
    kn_att_mma_tf32(c, ab, bb0, bb1);
}

// A key group's barrier (named barrier 1 + group, its RW warps): the
// groups of a block walk their key tiles independently (immediate ids: a
// register id makes ptxas reserve all 16 barriers)
template <int KG, int RW> __device__ __forceinline__ void kn_att_x3_group_sync(int grp)
{
    if (KG == 1) __syncthreads();
    else if (grp == 0) asm volatile("bar.sync 1, %0;\n" ::"n"(32 * RW) : "memory");
    else if (grp == 1) asm volatile("bar.sync 2, %0;\n" ::"n"(32 * RW) : "memory");
    else if (grp == 2) asm volatile("bar.sync 3, %0;\n" ::"n"(32 * RW) : "memory");
    else asm volatile("bar.sync 4, %0;\n" ::"n"(32 * RW) : "memory");
}

// RW row warps (BM = 16 RW query rows) x KG key groups: group g walks key
// tiles g, g + KG, ... through ST buffers of its own (ST 2: the next tile
// loads while this one is used), and at the end the groups' softmax
// states (row max, row sum, unnormalized O) are merged through shared
// memory, as the tensor-core kernel's key groups are. Key groups put more
// warps on the GPU where the grid is small (BERT's 8 x 12 heads x 128
// tokens make 768 warps of 16 rows for 132 SMs).
template <int DP, int RW, int KG, int ST> __device__ __forceinline__ void kn_att_x3(const kn_attn_args &a, float *smem)
{
    constexpr int BN = KN_ATT_X3_BN, BM = 16 * RW, LK = DP + 8, LV = DP + 4, KSTEPS = DP / 8, NT = BN / 8,
                  DT8 = DP / 8, GROUP = 4; // k-steps a partial sum chains
    constexpr int STAGE = BN * (LK + LV); // floats: a tile's K, then its V
    constexpr int GT = 32 * RW;           // threads a key group
    static_assert(KG == 1 || (4 + 4 * DT8) * GT <= ST * STAGE, "a key group's merge state must fit its buffers");
    const int grp = KG == 1 ? 0 : threadIdx.x / GT, gtid = KG == 1 ? threadIdx.x : threadIdx.x % GT;
    const int warp = gtid / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const long long nbh = gridDim.x / a.n_qblocks;
    const long long bh = blockIdx.x % nbh;
    const int qb = a.n_qblocks - 1 - (int)(blockIdx.x / nbh);
    const long long b = bh / a.heads, h = bh % a.heads;
    const long long q0 = (long long)qb * BM, wq0 = q0 + warp * 16; // the block's and this warp's first query row
    const char *qp = a.q + (b * a.qs[0] + h * a.qs[1]) * 4;
    const char *kp = a.k + (b * a.ks[0] + h * a.ks[1]) * 4;
    const char *vp = a.v + (b * a.vs[0] + h * a.vs[1]) * 4;

    long long kend = a.tk;
    if (a.causal && q0 + BM < kend) kend = q0 + BM;
    const int ntiles = (int)((kend + BN - 1) / BN), tk = (int)a.tk;
    // a warp whose rows all lie past tq stages tiles and meets the barriers, nothing more
    const bool active = wq0 < a.tq;

    float *sq = smem + KG * ST * STAGE; // Q: BM rows of LK, after every group's stages of K and V
    float *gbuf = smem + grp * ST * STAGE; // this group's stages
    {
        kn_att_ft_stager<DP, BM, LK, GT * KG> qst;
        qst.init(qp, a.qs[2], a.d, threadIdx.x);
        qst.copy(sq, q0, a.qs[2] * 4, a.tq);
    }
    kn_att_ft_stager<DP, BN, LK, GT> kst;
    kn_att_ft_stager<DP, BN, LV, GT> vst;
    kst.init(kp, a.ks[2], a.d, gtid);
    vst.init(vp, a.vs[2], a.dv, gtid);
    const long long krow = a.ks[2] * 4, vrow = a.vs[2] * 4;
    if (grp < ntiles) {
        kst.copy(gbuf, (long long)grp * BN, krow, a.tk);
        vst.copy(gbuf + BN * LK, (long long)grp * BN, vrow, a.tk);
    }
    kn_att_cp_commit();
    if (KG > 1) { // Q is copied by every group's threads: in and seen by all before a group's first tile
        kn_att_cp_wait<0>();
        __syncthreads();
    }
    const float *sqw = sq + (warp * 16 + g) * LK + 2 * t; // this lane's Q elements: rows g, g + 8, from 2t on

    // the mask rows of rows g and g + 8 (clamped into range: rows past tq are never stored)
    const int ms3 = (int)a.ms[3];
    const char *mrow[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        long long i = wq0 + g + 8 * r;
        if (i >= a.tq) i = a.tq - 1;
        const int es = a.mask_kind == 1 ? 1 : 4; // an f32 kernel's float masks are f32
        mrow[r] = a.mask_kind ? a.mask + kn_att_mask_row(a, b, h, i) * es : a.mask;
    }

    float o[DT8][4], m[2], l[2]; // O of rows g (e = 0, 1) and g + 8 (e = 2, 3); running max and sum
#pragma unroll
    for (int n = 0; n < DT8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    m[0] = m[1] = KN_ATT_NEG_INF;
    l[0] = l[1] = 0.f;

    for (int it = grp, n_it = 0; it < ntiles; it += KG, n_it++) {
        const int k0 = it * BN, j0 = k0 + 2 * t; // j0: this lane's first key column
        float *sk = gbuf + (ST == 2 ? n_it % 2 : 0) * STAGE, *sv = sk + BN * LK;
        if (ST == 1 && n_it > 0) { // one buffer: this tile loads now (the last one's readers are past the barrier)
            kst.copy(sk, k0, krow, a.tk);
            vst.copy(sv, k0, vrow, a.tk);
            kn_att_cp_commit();
        }
        // two: the next tile into the other buffer, while this one is used
        if (ST == 2 && it + KG < ntiles) {
            float *nk = gbuf + ((n_it + 1) % 2) * STAGE;
            kst.copy(nk, k0 + KG * BN, krow, a.tk);
            vst.copy(nk + BN * LK, k0 + KG * BN, vrow, a.tk);
            kn_att_cp_commit();
            kn_att_cp_wait<1>();
        } else {
            kn_att_cp_wait<0>();
        }
        // this tile's mask entries, in flight across the barrier and Q K^T
        float mk[NT][4];
        if (a.mask_kind && active) {
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    mk[n][e] = kn_att_ft_mask(a.mask_kind, mrow[e / 2], j0 + n * 8 + (e % 2), tk, ms3);
        }
        kn_att_x3_group_sync<KG, RW>(grp);
        if (active) {
            // S = Q K^T, four k-steps a partial
            float s[NT][4], part[NT][4];
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                // Q in the log2 domain, in A's order: rows g, g + 8 of element 2t, then of 2t + 1
                const float2 qlo = *(const float2 *)(sqw + kk * 8), qhi = *(const float2 *)(sqw + 8 * LK + kk * 8);
                const float qa[4] = {qlo.x * a.scale_log2, qhi.x * a.scale_log2, qlo.y * a.scale_log2,
                                     qhi.y * a.scale_log2};
                unsigned qb4[4], qs4[4];
#pragma unroll
                for (int e = 0; e < 4; e++) kn_att_split(qa[e], qb4[e], qs4[e]);
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const float2 kv = *(const float2 *)(sk + (n * 8 + g) * LK + kk * 8 + 2 * t);
                    unsigned kb0, ks0, kb1, ks1;
                    kn_att_split(kv.x, kb0, ks0);
                    kn_att_split(kv.y, kb1, ks1);
                    float(&acc)[4] = kk < GROUP ? s[n] : part[n];
                    if (kk % GROUP == 0) kn_att_mma_x3<true>(acc, qb4, qs4, kb0, kb1, ks0, ks1);
                    else kn_att_mma_x3<false>(acc, qb4, qs4, kb0, kb1, ks0, ks1);
                }
                if (kk >= GROUP && (kk % GROUP == GROUP - 1 || kk == KSTEPS - 1)) {
#pragma unroll
                    for (int n = 0; n < NT; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++) s[n][e] += part[n][e];
                }
            }

            // mask; drop keys past tk and above the diagonal, on the tiles that have them
            if (a.mask_kind == 1) {
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[n][e] = mk[n][e] != 0.f ? s[n][e] : KN_ATT_NEG_INF;
            } else if (a.mask_kind) {
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[n][e] = fmaf(mk[n][e], KN_ATT_LOG2E, s[n][e]);
            }
            if (k0 + BN > tk) {
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (j0 + n * 8 + (e % 2) >= tk) s[n][e] = KN_ATT_NEG_INF;
            }
            if (a.causal && k0 + BN - 1 > wq0) {
                const int di = (int)(wq0 - k0) + g - 2 * t; // query row minus key column, at n = e = 0
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (n * 8 + (e % 2) > di + 8 * (e / 2)) s[n][e] = KN_ATT_NEG_INF;
            }
            // online softmax of rows g (e = 0, 1) and g + 8 (e = 2, 3): a
            // row's scores are spread over the 4 lanes of a quad
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = m[r];
#pragma unroll
                for (int n = 0; n < NT; n++) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float use = kn_att_safe_max(mx);
                const float corr = kn_att_exp2(m[r] - use); // 0 for the first finite max
                m[r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const float p0 = kn_att_exp2(s[n][2 * r] - use), p1 = kn_att_exp2(s[n][2 * r + 1] - use);
                    s[n][2 * r] = p0;
                    s[n][2 * r + 1] = p1;
                    sum += p0 + p1;
                }
                l[r] = fmaf(l[r], corr, sum); // lane-partial; the quad's sum comes at the end
#pragma unroll
                for (int n = 0; n < DT8; n++) {
                    o[n][2 * r] *= corr;
                    o[n][2 * r + 1] *= corr;
                }
            }
            // O += P V over the tile's 32 keys (4 k-steps: one partial; chained
            // straight into O instead, every tile's truncations pile up
            // there: 2.9-3.8x strict f32's error, H200)
            float op[DT8][4];
#pragma unroll
            for (int kc = 0; kc < NT; kc++) {
                unsigned pb[4], ps[4];
                kn_att_split(s[kc][0], pb[0], ps[0]); // (row g, key 2t)
                kn_att_split(s[kc][2], pb[1], ps[1]); // (row g + 8, key 2t)
                kn_att_split(s[kc][1], pb[2], ps[2]); // (row g, key 2t + 1)
                kn_att_split(s[kc][3], pb[3], ps[3]); // (row g + 8, key 2t + 1)
                const float *v0 = sv + (kc * 8 + 2 * t) * LV + g;
#pragma unroll
                for (int n = 0; n < DT8; n++) {
                    unsigned vb0, vs0, vb1, vs1;
                    kn_att_split(v0[n * 8], vb0, vs0);
                    kn_att_split(v0[LV + n * 8], vb1, vs1);
                    if (kc == 0) kn_att_mma_x3<true>(op[n], pb, ps, vb0, vb1, vs0, vs1);
                    else kn_att_mma_x3<false>(op[n], pb, ps, vb0, vb1, vs0, vs1);
                }
            }
#pragma unroll
            for (int n = 0; n < DT8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[n][e] += op[n][e];
        }
        kn_att_x3_group_sync<KG, RW>(grp); // the buffer just read is the next copy's target
    }

    if (KG > 1) {
        // merge: groups 1.. write (m, l, O) over their own buffers, lane by
        // lane, and group 0 rescales each to the common row max and adds it
        // (the lane-partial sums stay lane-partial: the scale is a row's)
        __syncthreads(); // every group is done with its buffers
        if (grp > 0) {
            float *xb = gbuf;
            int k = 0;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                xb[(k++) * GT + gtid] = m[r];
                xb[(k++) * GT + gtid] = l[r];
#pragma unroll
                for (int n = 0; n < DT8; n++) {
                    xb[(k++) * GT + gtid] = o[n][2 * r];
                    xb[(k++) * GT + gtid] = o[n][2 * r + 1];
                }
            }
        }
        __syncthreads();
        if (grp > 0) return;
#pragma unroll
        for (int other = 1; other < KG; other++) {
            const float *ob = smem + other * ST * STAGE;
            int k = 0;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const float mo = ob[(k++) * GT + gtid], lo = ob[(k++) * GT + gtid];
                const float mx = fmaxf(m[r], mo), use = kn_att_safe_max(mx);
                const float cs = kn_att_exp2(m[r] - use), co = kn_att_exp2(mo - use);
                m[r] = mx;
                l[r] = l[r] * cs + lo * co;
#pragma unroll
                for (int n = 0; n < DT8; n++) {
                    o[n][2 * r] = o[n][2 * r] * cs + ob[(k++) * GT + gtid] * co;
                    o[n][2 * r + 1] = o[n][2 * r + 1] * cs + ob[(k++) * GT + gtid] * co;
                }
            }
        }
    }
    if (!active) return;

    // normalize and store: this lane holds columns 2t, 2t + 1 of rows g and g + 8 in each 8
    float *op = (float *)a.o + b * a.os[0] + h * a.os[1];
    const bool pairs = a.os[2] % 2 == 0 && ((unsigned long long)op & 7) == 0;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float sum = l[r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = 1.f / sum; // 1/0 = inf and 0 * inf = NaN: a fully masked row
        const long long i = wq0 + g + 8 * r;
        if (i >= a.tq) continue;
        float *row = op + i * a.os[2];
#pragma unroll
        for (int n = 0; n < DT8; n++) {
            const int col = n * 8 + 2 * t;
            float v0 = o[n][2 * r] * inv, v1 = o[n][2 * r + 1] * inv;
            if (a.zero_nan) {
                v0 = v0 != v0 ? 0.f : v0;
                v1 = v1 != v1 ? 0.f : v1;
            }
            if (pairs && col + 1 < a.dv) {
                float2 w;
                w.x = v0, w.y = v1;
                *(float2 *)(row + col) = w;
            } else {
                if (col < a.dv) row[col] = v0;
                if (col + 1 < a.dv) row[col + 1] = v1;
            }
        }
    }
}

// kn_attn_x3_d<DP>_m<BM>[_k<KG>]: blocks of 64 query rows (4 warps), 32
// (2 warps: twice the blocks, for launches that would leave SMs idle), or
// 32 rows in two key groups of one buffer each (4 warps: twice the warps
// again, in the same shared memory). Registers: the 4-warp kernels are held
// to three blocks an SM (168 registers a thread, no spills), the 2-warp one
// to five, what its 45 KB of shared memory allows. Held to four blocks
// (128 registers, a few bytes spilled) the 4-warp kernels ran slower on the
// H200 at every suite shape though their grids never fill three blocks an
// SM: ViT's 8 x 12 x 197 x 64 36.9 us against 33.8, BERT's 16.0 against
// 15.4 (bench/attention_variants.c).
#define KN_ATT_X3_KERNEL(SUFFIX, RW, KG, ST, MINB)                                                               \
    extern "C" __global__ void __launch_bounds__(32 * RW * KG, MINB)                                              \
        KN_ATT_PASTE(KN_ATT_PASTE(kn_attn_x3_d, KN_ATT_X3), SUFFIX)(const kn_attn_args a)                          \
    {                                                                                                              \
        extern __shared__ __align__(16) float kn_att_x3smem[];                                                    \
        kn_att_x3<KN_ATT_X3, RW, KG, ST>(a, kn_att_x3smem);                                                    \
    }
KN_ATT_X3_KERNEL(_m64, 4, 1, 2, 3)
KN_ATT_X3_KERNEL(_m32, 2, 1, 2, 5)
KN_ATT_X3_KERNEL(_m32_k2, 2, 2, 1, 3)
#endif // KN_ATT_X3

#endif // KN_ATT_STANDALONE
