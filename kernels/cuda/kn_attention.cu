// kn_attention.cu: kiln's fused scaled-dot-product attention forward,
//   o = softmax(q k^T * scale (+ mask)) v
// FlashAttention-2 style: one CTA per (batch*head, block of query rows); it
// walks the key/value tiles once, keeping a running row max and row sum in
// f32 (online softmax), so the [tq, tk] score matrix never reaches memory.
//
// kernels/cuda/kn_cuda_attention.c builds one module per (dtype, head-dim
// bucket) from this file by prepending
//   #define KN_ATT_STANDALONE 1
//   #define KN_ATT_DT <kn_dtype code>     0 f32, 2 bf16, 3 f16
//   #define KN_ATT_DP <16..128>           tensor-core kernels for this padded head dim
//  or
//   #define KN_ATT_NC <1..8>              the SIMT kernel for dv <= 32*NC
// and looks the kernels up by the names built below (kn_attn_tc_* and
// kn_attn_simt_*). kn_cuda_attention_source puts kn_cuda_attn_args.h (the
// args struct the host fills) before this text. The f32 kernels, tiled and
// split (KN_ATT_FT, KN_ATT_X3), are in kn_attention_f32.cu, which follows
// this text in their modules and uses its helpers.
//
// No CUDA headers (NVRTC runs without include paths): bf16/f16 are raw
// 16-bit words, converted with PTX cvt. NVRTC compiles with --fmad=false, so
// the dot products below call fmaf explicitly where a fused multiply-add is
// wanted (it is both faster and more accurate).
#ifdef KN_ATT_STANDALONE

#define KN_ATT_LOG2E 1.4426950408889634f
#define KN_ATT_NEG_INF __int_as_float(0xff800000)
#define KN_ATT_PASTE2(a, b) a##b
#define KN_ATT_PASTE(a, b) KN_ATT_PASTE2(a, b)

__device__ __forceinline__ float kn_att_bf16_f32(unsigned short h)
{
    return __uint_as_float((unsigned)h << 16);
}
__device__ __forceinline__ float kn_att_f16_f32(unsigned short h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short kn_att_f32_bf16(float f)
{
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ unsigned short kn_att_f32_f16(float f)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// element i of a tensor of the module's dtype, as f32
__device__ __forceinline__ float kn_att_ld(const char *p, long long i)
{
#if KN_ATT_DT == 0
    return ((const float *)p)[i];
#elif KN_ATT_DT == 2
    return kn_att_bf16_f32(((const unsigned short *)p)[i]);
#else
    return kn_att_f16_f32(((const unsigned short *)p)[i]);
#endif
}
__device__ __forceinline__ void kn_att_st(char *p, long long i, float f)
{
#if KN_ATT_DT == 0
    ((float *)p)[i] = f;
#elif KN_ATT_DT == 2
    ((unsigned short *)p)[i] = kn_att_f32_bf16(f);
#else
    ((unsigned short *)p)[i] = kn_att_f32_f16(f);
#endif
}

// The log2-domain score after masking: s2 is q.k * scale * log2(e); -inf
// where the key is dropped (past tk, above the causal diagonal, a false
// bool mask entry), plus the additive mask (in natural-log units, hence the
// log2(e) factor). row_off is the mask's offset of query row i (batch,
// head and row terms: kn_att_mask_row), so that a kernel computes it once
// per row rather than per score.
__device__ __forceinline__ long long kn_att_mask_row(const kn_attn_args &a, long long b, long long h, long long i)
{
    return b * a.ms[0] + h * a.ms[1] + i * a.ms[2];
}
__device__ __forceinline__ float kn_att_masked(const kn_attn_args &a, float s2, long long row_off, long long i,
                                               long long j)
{
    if (j >= a.tk || (a.causal && j > i)) return KN_ATT_NEG_INF;
    if (a.mask_kind && i < a.tq) {
        long long off = row_off + j * a.ms[3];
        if (a.mask_kind == 1) {
            if (!((const unsigned char *)a.mask)[off]) return KN_ATT_NEG_INF;
        } else {
            float m = a.mask_kind == 3 ? ((const float *)a.mask)[off] : kn_att_ld(a.mask, off);
            s2 = fmaf(m, KN_ATT_LOG2E, s2);
        }
    }
    return s2;
}

// A row max that is -inf (every key so far dropped) is used as 0: then
// exp2(s - 0) is 0 for the dropped keys instead of exp2(-inf + inf) = NaN,
// the row sum stays 0 and the final o = acc / 0 is NaN, as the unfused
// softmax of an all -inf row is.
__device__ __forceinline__ float kn_att_safe_max(float m)
{
    return m == KN_ATT_NEG_INF ? 0.f : m;
}

// 2^x by the SFU's approximation (relative error about 2^-22, far below
// bf16's and f16's rounding; 2^-inf is +0): exp2f adds range handling
// for subnormal results around it, three more instructions an element
__device__ __forceinline__ float kn_att_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned kn_att_smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

// 16 bytes global -> shared, asynchronously; src_bytes 0 zero-fills (rows
// past the end, head-dim padding)
__device__ __forceinline__ void kn_att_cp16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(kn_att_smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void kn_att_cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void kn_att_cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#if defined(KN_ATT_DP) && KN_ATT_DT != 0
// ============================================================================
// Tensor-core kernel (bf16 / f16): mma.sync m16n8k16 with f32 accumulators.
//
// A group of 4 warps owns a block of query rows; each warp owns MT m16
// tiles (16*MT query rows), so BM = 64*MT. KS groups share one block (KS*128
// threads): group g walks key tiles g, g+KS, g+2*KS, ... with shared memory
// and barriers of its own, and at the end the groups' partial softmax
// states (row max, row sum, unnormalized O) are merged through shared
// memory. On short sequences that splits a warp's chain of dependent
// tensor-core and softmax steps KS ways and puts KS times the warps on an
// SM: with one group, BERT's 8x12x128x64 ran 192 blocks of 4 warps (0.48
// waves) and its warps sat with nothing to issue 74% of the cycles.
// DP is the head dim padded to 16 (the mma k step); d and dv both pad to DP
// with zeros in shared memory, which adds nothing to q.k and gives unused
// output columns that are never stored.
//
// Fragment layouts of mma.m16n8k16 (g = lane/4, t = lane%4):
//   A 16x16 row-major, 4 regs of 2 halves: a0 (g, 2t..2t+1), a1 (g+8, 2t..),
//     a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8 "col": b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C 16x8 f32: c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
// S = Q K^T: A = Q rows (ldmatrix), B = K^T, i.e. K rows with the head dim
// contiguous, exactly what a plain ldmatrix of K gives.
// O += P V: the C fragments of S for key n-tiles 2j and 2j+1 are the A
// fragment of P for key chunk j (FlashAttention's register reuse), packed
// to bf16/f16 pairs; B = V needs (key 2t..2t+1, col g): ldmatrix.trans of V.
//
// Shared-memory rows are DP+8 elements: the 16-byte pad shifts each row by
// 4 banks, so the 8 row addresses of an ldmatrix phase hit distinct banks.
// ============================================================================

#if KN_ATT_DT == 2
#define KN_ATT_MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#define KN_ATT_CVT2 "cvt.rn.bf16x2.f32"
#else
#define KN_ATT_MMA "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#define KN_ATT_CVT2 "cvt.rn.f16x2.f32"
#endif

__device__ __forceinline__ void kn_att_ldm_x4(unsigned r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(kn_att_smem_addr(p)));
}
__device__ __forceinline__ void kn_att_ldm_x4_t(unsigned r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(kn_att_smem_addr(p)));
}

__device__ __forceinline__ void kn_att_mma(float c[4], const unsigned a[4], unsigned b0, unsigned b1)
{
    asm volatile(KN_ATT_MMA " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// two f32 as a packed pair: lo (the lower column) in the low half
__device__ __forceinline__ unsigned kn_att_pack(float lo, float hi)
{
    unsigned r;
    asm(KN_ATT_CVT2 " %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo)); // cvt puts its first source in the high half
    return r;
}

// Stage rows [row0, row0+nrows) of a [rows, width] tensor slice (row
// stride rs elements) into shared memory as nrows x DP (+8 pad): 16-byte
// chunks, zero past `limit` rows and past `width` columns.
//
// Where 128 threads tile the rows evenly (DP a power of two), each thread
// keeps one column chunk and steps down the rows by a fixed stride: one
// bounds test, one address add and the copy a chunk. The general loop
// below recomputes row, column and a 64-bit offset for every chunk, about
// 25 instructions; at BERT's and GPT-2's 128 tokens, where a warp walks one
// or two key tiles, that address work was a third of the kernel's
// instructions.
template <int DP, int NROWS>
__device__ __forceinline__ void kn_att_stage(unsigned short *dst, const char *src, long long rs, long long row0,
                                             long long limit, int width, int tid)
{
    constexpr int CHUNKS = DP / 8; // 8 halves per 16 bytes
    constexpr int STEP = 128 / CHUNKS; // rows one pass of the 128 threads covers
    if constexpr (128 % CHUNKS == 0 && NROWS % STEP == 0) {
        const int col = (tid % CHUNKS) * 8, r0 = tid / CHUNKS;
        const long long left = limit - row0 - r0; // this thread's rows in bounds: i * STEP < left
        const bool col_in = col < width;
        const char *g = src + ((row0 + r0) * rs + col) * 2;
        const long long gstep = (long long)STEP * rs * 2;
        unsigned short *d = dst + r0 * (DP + 8) + col;
#pragma unroll
        for (int i = 0; i < NROWS / STEP; i++) {
            const bool in = col_in && i * STEP < left;
            kn_att_cp16(d + i * STEP * (DP + 8), in ? g + i * gstep : src, in ? 16 : 0);
        }
    } else {
        for (int c = tid; c < NROWS * CHUNKS; c += 128) {
            int r = c / CHUNKS, col = (c % CHUNKS) * 8;
            long long row = row0 + r;
            bool in = row < limit && col < width;
            const char *g = in ? src + (row * rs + col) * 2 : src;
            kn_att_cp16(dst + r * (DP + 8) + col, g, in ? 16 : 0);
        }
    }
}

// A group's barrier (named barrier 1 + group, its 128 threads): the groups
// of a block run their key tiles independently
// (immediate ids: a register id makes ptxas reserve all 16 barriers)
template <int KS> __device__ __forceinline__ void kn_att_group_sync(int grp)
{
    if (KS == 1) __syncthreads();
    else if (grp == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else if (grp == 1) asm volatile("bar.sync 2, 128;\n" ::: "memory");
    else if (grp == 2) asm volatile("bar.sync 3, 128;\n" ::: "memory");
    else asm volatile("bar.sync 4, 128;\n" ::: "memory");
}

// 16-bit float bits of the module's dtype as f32 (an additive mask of the q dtype)
__device__ __forceinline__ float kn_att_h16_f32(unsigned bits)
{
#if KN_ATT_DT == 2
    return kn_att_bf16_f32((unsigned short)bits);
#else
    return kn_att_f16_f32((unsigned short)bits);
#endif
}

// This lane's entries of a key tile of a bool (E: byte) or 16-bit float
// mask: rows g and g+8 of each m tile (mrow), columns 2t and 2t+1 from j0
// on in the register of their pair (keys past tk read key tk-1: dropped
// later)
template <typename E, int MT, int NT>
__device__ __forceinline__ void kn_att_mask_pairs(unsigned (&mbits)[MT][NT][2], const char *const (&mrow)[MT][2], int j0,
                                                  int tk, int ms3)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const E *mp = (const E *)mrow[mt][r];
                const int j = j0 + n * 8;
                mbits[mt][n][r] = (unsigned)mp[min(j, tk - 1) * ms3] | (unsigned)mp[min(j + 1, tk - 1) * ms3] << 16;
            }
}

// Scores to the log2 domain with a mask of kind KIND (kn_attn_args.mask_kind):
// s * scale (+ mask * log2(e)), or -inf where a bool mask drops the key.
template <int KIND, int MT, int NT>
__device__ __forceinline__ void kn_att_scale_mask(float (&s)[MT][NT][4], const unsigned (&mbits)[MT][NT][2],
                                                  const float (&mf32)[MT][NT][4], float scale_log2)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[mt][n][e] * scale_log2;
                if (KIND == 2) v = fmaf(kn_att_h16_f32(mbits[mt][n][e / 2] >> 16 * (e % 2)), KN_ATT_LOG2E, v);
                else if (KIND == 1) v = (mbits[mt][n][e / 2] >> 16 * (e % 2)) & 0xffu ? v : KN_ATT_NEG_INF;
                else if (KIND == 3) v = fmaf(mf32[mt][n][e], KN_ATT_LOG2E, v);
                s[mt][n][e] = v;
            }
}

// kn_att_mask_pairs for a 16-bit mask whose keys are contiguous, with
// mask_word_pairs set (kn_cuda_attention.c: even tk, even strides, a
// 4-byte aligned base): a pair of keys is one aligned 32-bit load. The
// last pair (tk - 2, tk - 1) stands in for keys past tk.
template <int MT, int NT>
__device__ __forceinline__ void kn_att_mask_words(unsigned (&mbits)[MT][NT][2], const char *const (&mrow)[MT][2], int j0,
                                                  int tk)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int r = 0; r < 2; r++)
                mbits[mt][n][r] = ((const unsigned *)mrow[mt][r])[min(j0 + n * 8, tk - 2) / 2];
}

template <int DP, int MT, int BN, int KS>
__device__ __forceinline__ void kn_att_tc(const kn_attn_args &a, unsigned short *smem_all)
{
    constexpr int BM = 64 * MT, LD = DP + 8, NT = BN / 8, DT8 = DP / 8;
    constexpr int GROUP_HALVES = (BM + 4 * BN) * LD; // a group's Q block and two stages of K and V
    // the merge below writes a group's state over its own Q, K and V
    // (4 + 4 * DT8 floats a thread, MT of each)
    static_assert(KS == 1 || 128 * MT * (4 + 4 * DT8) * 4 <= GROUP_HALVES * 2, "merge buffer too small");
    // (one group: constants, which keeps the loop's bookkeeping out of registers)
    const int grp = KS == 1 ? 0 : threadIdx.x / 128, tid = KS == 1 ? threadIdx.x : threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    // the last query blocks go first: under causal masking they do the most work
    const long long nbh = gridDim.x / a.n_qblocks;
    const long long bh = blockIdx.x % nbh;
    const int qb = a.n_qblocks - 1 - (int)(blockIdx.x / nbh);
    const long long b = bh / a.heads, h = bh % a.heads;
    const long long q0 = (long long)qb * BM;
    const char *qp = a.q + (b * a.qs[0] + h * a.qs[1]) * 2;
    const char *kp = a.k + (b * a.ks[0] + h * a.ks[1]) * 2;
    const char *vp = a.v + (b * a.vs[0] + h * a.vs[1]) * 2;

    unsigned short *sq = smem_all + grp * GROUP_HALVES; // BM x LD
    unsigned short *sk = sq + BM * LD;                  // 2 stages x BN x LD
    unsigned short *sv = sk + 2 * BN * LD;              // 2 stages x BN x LD

    // keys this block needs: all, or up to its last query row under causal
    long long kend = a.tk;
    if (a.causal && q0 + BM < kend) kend = q0 + BM;
    const int ntiles = (int)((kend + BN - 1) / BN);

    // a group with no tile issues no copy: one left in flight could land
    // on the merge buffer that overlays this memory
    if (grp < ntiles) {
        kn_att_stage<DP, BM>(sq, qp, a.qs[2], q0, a.tq, a.d, tid);
        kn_att_stage<DP, BN>(sk, kp, a.ks[2], (long long)grp * BN, a.tk, a.d, tid);
        kn_att_stage<DP, BN>(sv, vp, a.vs[2], (long long)grp * BN, a.tk, a.dv, tid);
        kn_att_cp_commit();
    }

    // The mask row of each of this lane's rows (g and g+8 of each m tile),
    // found once: per score only the key's term (32-bit) is added. Rows past
    // tq read row tq-1 and keys past tk read key tk-1, so every load is in
    // bounds without a branch; such scores are dropped or never stored.
    // Masking is per score, so its instructions are kept few: 32-bit
    // indices, and the mask kind's branch taken outside the loops (the
    // per-score index arithmetic and branches had been 60% of the
    // kernel's instructions, its tensor-core work under 3%).
    const long long wq0 = q0 + warp * 16 * MT; // this warp's first query row
    const int ms3 = (int)a.ms[3];
    const char *mrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            long long i = wq0 + mt * 16 + g + 8 * r;
            if (i >= a.tq) i = a.tq - 1;
            const int es = a.mask_kind == 1 ? 1 : a.mask_kind == 3 ? 4 : 2;
            mrow[mt][r] = a.mask_kind ? a.mask + kn_att_mask_row(a, b, h, i) * es : a.mask;
        }
    const int tk = (int)a.tk;

    unsigned qf[MT][DP / 16][4]; // Q fragments, loaded once
    float o[MT][DT8][4];
    float m[MT][2], l[MT][2]; // running max (log2 domain) and sum of rows g and g+8
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < DT8; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
        m[mt][0] = m[mt][1] = KN_ATT_NEG_INF;
        l[mt][0] = l[mt][1] = 0.f;
    }

    int buf = 0;
    for (int it = grp; it < ntiles; it += KS, buf ^= 1) {
        const long long k0 = (long long)it * BN;
        // prefetch this group's next tile into the other buffer while this one is used
        if (it + KS < ntiles) {
            kn_att_stage<DP, BN>(sk + (buf ^ 1) * BN * LD, kp, a.ks[2], k0 + KS * BN, a.tk, a.d, tid);
            kn_att_stage<DP, BN>(sv + (buf ^ 1) * BN * LD, vp, a.vs[2], k0 + KS * BN, a.tk, a.dv, tid);
            kn_att_cp_commit();
            kn_att_cp_wait<1>();
        } else {
            kn_att_cp_wait<0>();
        }
        // this lane's mask entries of the tile, in flight across the barrier
        // and Q K^T: a 16-bit mask's columns 2t and 2t+1 share a register
        unsigned mbits[MT][NT][2];
        float mf32[MT][NT][4];
        const int j0 = (int)k0 + 2 * t;
        if (a.mask_kind == 2 && a.mask_word_pairs) kn_att_mask_words<MT, NT>(mbits, mrow, j0, tk);
        else if (a.mask_kind == 2) kn_att_mask_pairs<unsigned short, MT, NT>(mbits, mrow, j0, tk, ms3);
        else if (a.mask_kind == 1) kn_att_mask_pairs<unsigned char, MT, NT>(mbits, mrow, j0, tk, ms3);
        kn_att_group_sync<KS>(grp);
        if (it == grp) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kc = 0; kc < DP / 16; kc++)
                    kn_att_ldm_x4(qf[mt][kc], sq + (warp * 16 * MT + mt * 16 + lane % 16) * LD + kc * 16 + 8 * (lane / 16));
        }
        const unsigned short *skb = sk + buf * BN * LD, *svb = sv + buf * BN * LD;

        // S = Q K^T for this warp's rows and the BN keys
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NT; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
        for (int kc = 0; kc < DP / 16; kc++)
#pragma unroll
            for (int n2 = 0; n2 < NT / 2; n2++) {
                // keys 16*n2 .. +15, head dims 16*kc .. +15: b0/b1 of n-tiles 2*n2 and 2*n2+1
                unsigned kf[4];
                kn_att_ldm_x4(kf, skb + (n2 * 16 + (lane % 8) + 8 * (lane / 16)) * LD + kc * 16 + 8 * ((lane / 8) % 2));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    kn_att_mma(s[mt][2 * n2], qf[mt][kc], kf[0], kf[1]);
                    kn_att_mma(s[mt][2 * n2 + 1], qf[mt][kc], kf[2], kf[3]);
                }
            }

        // scale, mask (its kind's loop), then drop keys past tk (the last
        // tile) and above the diagonal (causal, the diagonal's tiles)
        if (a.mask_kind == 3) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        mf32[mt][n][e] = ((const float *)mrow[mt][e / 2])[min(j0 + n * 8 + (e % 2), tk - 1) * ms3];
        }
        // one loop per kind: the kind's test inside the loop cost a chain
        // of branches per score even with no mask
        switch (a.mask_kind) {
        case 0: kn_att_scale_mask<0, MT, NT>(s, mbits, mf32, a.scale_log2); break;
        case 1: kn_att_scale_mask<1, MT, NT>(s, mbits, mf32, a.scale_log2); break;
        case 2: kn_att_scale_mask<2, MT, NT>(s, mbits, mf32, a.scale_log2); break;
        default: kn_att_scale_mask<3, MT, NT>(s, mbits, mf32, a.scale_log2); break;
        }
        if (k0 + BN > a.tk) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (j0 + n * 8 + (e % 2) >= tk) s[mt][n][e] = KN_ATT_NEG_INF;
        }
        if (a.causal && k0 + BN - 1 > wq0) {
            const int di = (int)(wq0 - k0) + g - 2 * t; // query row minus key column, at mt = n = e = 0
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (n * 8 + (e % 2) > di + mt * 16 + 8 * (e / 2)) s[mt][n][e] = KN_ATT_NEG_INF;
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            // online softmax: rows g (e = 0,1) and g+8 (e = 2,3); a row's
            // values are spread over the 4 lanes of a quad
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = m[mt][r];
#pragma unroll
                for (int n = 0; n < NT; n++) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float use = kn_att_safe_max(mx);
                const float corr = kn_att_exp2(m[mt][r] - use); // 0 for the first finite max
                m[mt][r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    float p0 = kn_att_exp2(s[mt][n][2 * r] - use), p1 = kn_att_exp2(s[mt][n][2 * r + 1] - use);
                    s[mt][n][2 * r] = p0;
                    s[mt][n][2 * r + 1] = p1;
                    sum += p0 + p1;
                }
                l[mt][r] = l[mt][r] * corr + sum; // lane-partial; the quad sum comes at the end
#pragma unroll
                for (int n = 0; n < DT8; n++) {
                    o[mt][n][2 * r] *= corr;
                    o[mt][n][2 * r + 1] *= corr;
                }
            }
        }

        // O += P V, P in the input precision as FlashAttention does
#pragma unroll
        for (int kc = 0; kc < BN / 16; kc++) {
            unsigned pf[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                pf[mt][0] = kn_att_pack(s[mt][2 * kc][0], s[mt][2 * kc][1]);
                pf[mt][1] = kn_att_pack(s[mt][2 * kc][2], s[mt][2 * kc][3]);
                pf[mt][2] = kn_att_pack(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
                pf[mt][3] = kn_att_pack(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
            }
#pragma unroll
            for (int n2 = 0; n2 < DP / 16; n2++) {
                // keys 16*kc .. +15, value columns 16*n2 .. +15
                unsigned vf[4];
                kn_att_ldm_x4_t(vf, svb + (kc * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * LD + n2 * 16 + 8 * (lane / 16));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    kn_att_mma(o[mt][2 * n2], pf[mt], vf[0], vf[1]);
                    kn_att_mma(o[mt][2 * n2 + 1], pf[mt], vf[2], vf[3]);
                }
            }
        }
        kn_att_group_sync<KS>(grp); // the buffer just read is the next prefetch's target
    }

    if (KS > 1) {
        // merge: groups 1.. write (m, l, O) over their own tiles, lane by
        // lane, and group 0 rescales each to the common row max and adds it
        // (the lane-partial sums stay lane-partial: the scale is a row's)
        float *xb = (float *)sq;
        if (grp > 0) {
            int k = 0;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    xb[(k++) * 128 + tid] = m[mt][r];
                    xb[(k++) * 128 + tid] = l[mt][r];
#pragma unroll
                    for (int n = 0; n < DT8; n++) {
                        xb[(k++) * 128 + tid] = o[mt][n][2 * r];
                        xb[(k++) * 128 + tid] = o[mt][n][2 * r + 1];
                    }
                }
        }
        __syncthreads();
        if (grp > 0) return;
#pragma unroll
        for (int other = 1; other < KS; other++) {
            const float *ob = (const float *)(smem_all + other * GROUP_HALVES);
            int k = 0;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float mo = ob[(k++) * 128 + tid], lo = ob[(k++) * 128 + tid];
                    const float mx = fmaxf(m[mt][r], mo), use = kn_att_safe_max(mx);
                    const float cs = kn_att_exp2(m[mt][r] - use), co = kn_att_exp2(mo - use);
                    m[mt][r] = mx;
                    l[mt][r] = l[mt][r] * cs + lo * co;
#pragma unroll
                    for (int n = 0; n < DT8; n++) {
                        o[mt][n][2 * r] = o[mt][n][2 * r] * cs + ob[(k++) * 128 + tid] * co;
                        o[mt][n][2 * r + 1] = o[mt][n][2 * r + 1] * cs + ob[(k++) * 128 + tid] * co;
                    }
                }
        }
    }

    // normalize and store: lane holds columns 2t, 2t+1 of rows g and g+8
    char *op = a.o + (b * a.os[0] + h * a.os[1]) * 2;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float sum = l[mt][r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = 1.f / sum; // inf for a fully masked row: 0 * inf = NaN
            const long long i = wq0 + mt * 16 + g + 8 * r;
            if (i >= a.tq) continue;
            unsigned *row = (unsigned *)(op + i * a.os[2] * 2);
#pragma unroll
            for (int n = 0; n < DT8; n++) {
                const int col = n * 8 + 2 * t;
                float v0 = o[mt][n][2 * r] * inv, v1 = o[mt][n][2 * r + 1] * inv;
                if (a.zero_nan) {
                    v0 = v0 != v0 ? 0.f : v0;
                    v1 = v1 != v1 ? 0.f : v1;
                }
                if (col < a.dv) row[col / 2] = kn_att_pack(v0, v1);
            }
        }
}

#if KN_ATT_DT == 2
#define KN_ATT_TNAME bf16
#else
#define KN_ATT_TNAME f16
#endif
// kn_attn_tc_<dtype>_d<DP>_m<BM>_n<BN>, and _k<KS> when key groups split the keys
#define KN_ATT_TC_NAME(BM, BN, SUFFIX)                                                                            \
    KN_ATT_PASTE(KN_ATT_PASTE(KN_ATT_PASTE(KN_ATT_PASTE(KN_ATT_PASTE(kn_attn_tc_, KN_ATT_TNAME), _d), KN_ATT_DP),  \
                              _m##BM##_n##BN),                                                                     \
                 SUFFIX)
#define KN_ATT_TC_KERNEL(MT, BM, BN, KS, SUFFIX, MINB)                                                             \
    extern "C" __global__ void __launch_bounds__(128 * KS, MINB) KN_ATT_TC_NAME(BM, BN, SUFFIX)(const kn_attn_args a) \
    {                                                                                                              \
        extern __shared__ __align__(16) unsigned short kn_att_smem[];                                             \
        kn_att_tc<KN_ATT_DP, MT, BN, KS>(a, kn_att_smem);                                                          \
    }

KN_ATT_TC_KERNEL(1, 64, 64, 1, , 1)
KN_ATT_TC_KERNEL(1, 64, 32, 1, , 1)
#if KN_ATT_DP <= 64
KN_ATT_TC_KERNEL(2, 128, 64, 1, , 1) // 32 rows a warp: O and S fragments fit in registers only for small heads
#endif
// short sequences: two or four groups split the keys. 128 registers a
// thread (two blocks of 256 or one of 512 an SM) hold a 64-wide head
// without spilling; wider heads keep one block of 256 and more registers.
KN_ATT_TC_KERNEL(1, 64, 64, 2, _k2, 1)
#if KN_ATT_DP <= 64
KN_ATT_TC_KERNEL(1, 64, 32, 2, _k2, 2)
KN_ATT_TC_KERNEL(1, 64, 32, 4, _k4, 1)
#else
KN_ATT_TC_KERNEL(1, 64, 32, 2, _k2, 1)
#endif

#endif // KN_ATT_DP

#ifdef KN_ATT_NC
// ============================================================================
// SIMT kernel: any dtype (f32 keeps f32 accuracy: f32 FMA throughout), any
// d, dv <= 256, any strides. 4 warps, 8 query rows a warp (BM = 32), key
// tiles of 32: lane j scores key j of the tile against the warp's 8 rows,
// then each lane accumulates output columns lane, lane+32, ... (NC of them)
// with p broadcast across the warp by shuffles. Tiles are staged in shared
// memory as f32: Q [32][d], K [32][d+1] (the +1 makes lane j's reads of row
// j fall in distinct banks), V [32][dv].
// ============================================================================
#define KN_ATT_SIMT_BM 32
#define KN_ATT_SIMT_BN 32
#define KN_ATT_SIMT_RW 8

template <int NC> __device__ __forceinline__ void kn_att_simt(const kn_attn_args &a, float *smem)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long nbh = gridDim.x / a.n_qblocks;
    const long long bh = blockIdx.x % nbh;
    const int qb = a.n_qblocks - 1 - (int)(blockIdx.x / nbh);
    const long long b = bh / a.heads, h = bh % a.heads;
    const long long q0 = (long long)qb * KN_ATT_SIMT_BM;
    const int d = a.d, dv = a.dv;
    const char *qp = a.q, *kp = a.k, *vp = a.v;
    const long long qoff = b * a.qs[0] + h * a.qs[1], koff = b * a.ks[0] + h * a.ks[1],
                    voff = b * a.vs[0] + h * a.vs[1];
    float *sq = smem, *sk = sq + KN_ATT_SIMT_BM * d, *sv = sk + KN_ATT_SIMT_BN * (d + 1);

    for (int c = threadIdx.x; c < KN_ATT_SIMT_BM * d; c += 128) {
        int r = c / d, col = c % d;
        long long i = q0 + r;
        sq[c] = i < a.tq ? kn_att_ld(qp, qoff + i * a.qs[2] + col) : 0.f;
    }
    long long kend = a.tk;
    if (a.causal && q0 + KN_ATT_SIMT_BM < kend) kend = q0 + KN_ATT_SIMT_BM;

    float o[KN_ATT_SIMT_RW][NC], m[KN_ATT_SIMT_RW], l[KN_ATT_SIMT_RW];
#pragma unroll
    for (int r = 0; r < KN_ATT_SIMT_RW; r++) {
        m[r] = KN_ATT_NEG_INF;
        l[r] = 0.f;
#pragma unroll
        for (int c = 0; c < NC; c++) o[r][c] = 0.f;
    }
    const int row0 = warp * KN_ATT_SIMT_RW;
    for (long long k0 = 0; k0 < kend; k0 += KN_ATT_SIMT_BN) {
        __syncthreads(); // the previous tile is consumed (and Q is staged)
        for (int c = threadIdx.x; c < KN_ATT_SIMT_BN * d; c += 128) {
            int r = c / d, col = c % d;
            long long j = k0 + r;
            sk[r * (d + 1) + col] = j < a.tk ? kn_att_ld(kp, koff + j * a.ks[2] + col) : 0.f;
        }
        for (int c = threadIdx.x; c < KN_ATT_SIMT_BN * dv; c += 128) {
            int r = c / dv, col = c % dv;
            long long j = k0 + r;
            sv[c] = j < a.tk ? kn_att_ld(vp, voff + j * a.vs[2] + col) : 0.f;
        }
        __syncthreads();
        float s[KN_ATT_SIMT_RW];
#pragma unroll
        for (int r = 0; r < KN_ATT_SIMT_RW; r++) s[r] = 0.f;
        const float *krow = sk + lane * (d + 1);
        for (int x = 0; x < d; x++) {
            const float kv = krow[x];
#pragma unroll
            for (int r = 0; r < KN_ATT_SIMT_RW; r++) s[r] = fmaf(sq[(row0 + r) * d + x], kv, s[r]);
        }
        const long long j = k0 + lane;
#pragma unroll
        for (int r = 0; r < KN_ATT_SIMT_RW; r++) {
            const long long i = q0 + row0 + r;
            float v = kn_att_masked(a, s[r] * a.scale_log2, kn_att_mask_row(a, b, h, i), i, j);
            float mx = v;
#pragma unroll
            for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            mx = fmaxf(mx, m[r]);
            const float use = kn_att_safe_max(mx);
            const float corr = exp2f(m[r] - use);
            m[r] = mx;
            const float p = exp2f(v - use);
            l[r] = l[r] * corr + p; // lane-partial, summed at the end
#pragma unroll
            for (int c = 0; c < NC; c++) o[r][c] *= corr;
            for (int jj = 0; jj < KN_ATT_SIMT_BN; jj++) {
                const float pj = __shfl_sync(0xffffffffu, p, jj);
                const float *vrow = sv + jj * dv;
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const int col = lane + 32 * c;
                    if (col < dv) o[r][c] = fmaf(pj, vrow[col], o[r][c]);
                }
            }
        }
    }
    const long long ooff = b * a.os[0] + h * a.os[1];
#pragma unroll
    for (int r = 0; r < KN_ATT_SIMT_RW; r++) {
        float sum = l[r];
#pragma unroll
        for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        const long long i = q0 + row0 + r;
        if (i >= a.tq) continue;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int col = lane + 32 * c;
            float val = o[r][c] / sum; // 0/0 = NaN: fully masked
            if (a.zero_nan && val != val) val = 0.f;
            if (col < dv) kn_att_st(a.o, ooff + i * a.os[2] + col, val);
        }
    }
}

#if KN_ATT_DT == 0
#define KN_ATT_SNAME f32
#elif KN_ATT_DT == 2
#define KN_ATT_SNAME bf16
#else
#define KN_ATT_SNAME f16
#endif
// kn_attn_simt_<dtype>_c<NC>
extern "C" __global__ void __launch_bounds__(128)
    KN_ATT_PASTE(KN_ATT_PASTE(KN_ATT_PASTE(kn_attn_simt_, KN_ATT_SNAME), _c), KN_ATT_NC)(const kn_attn_args a)
{
    extern __shared__ __align__(16) float kn_att_fsmem[];
    kn_att_simt<KN_ATT_NC>(a, kn_att_fsmem);
}
#endif // KN_ATT_NC

#endif // KN_ATT_STANDALONE
