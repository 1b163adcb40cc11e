// kn_linalg.cu: kiln's own matmul, conv2d and bias/activation kernels, the
// fallback behind cuBLASLt and cuDNN (kn_cuda_blas.c, kn_cuda_dnn.c). They
// run whatever the libraries refuse (or when a library is missing), so they
// take any strides and any mix of float dtypes, and they sum the way the CPU
// reference does: in f32 (f64 for an f64 result), k in order, one rounding
// at the store. NVRTC compiles this file with --fmad=false, so a multiply
// and an add round separately as on the CPU.
//
// No CUDA headers: the program is compiled without include paths, so bf16
// and f16 are handled as raw 16-bit words.
//
// Each kernel takes one struct by value: kernels/cuda/kn_cuda_la_args.h,
// which the host includes and kn_cuda_linalg_source puts before this file.
//
// The build concatenates every kernels/cuda/*.cu into the template modules
// of kn_cuda_ops.c too; this file is wanted only in its own module, which
// kn_cuda_blas.c compiles with KN_LA_STANDALONE defined.
#ifdef KN_LA_STANDALONE

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

// ---- matmul: out[b, i, j] = sum_k a[b, i, k] * b[b, k, j] ----
// One 16x16 output tile per block iteration (block = 256 threads), k in
// tiles of 16 through shared memory; a grid-stride loop over
// (batch, tile row, tile col), so any grid >= 1 is correct.
template <typename Acc>
__device__ void kn_la_matmul_body(const kn_la_matmul_args &p)
{
    __shared__ Acc as[16][17];
    __shared__ Acc bs[16][17];
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    long long tm = (p.m + 15) / 16, tn = (p.n + 15) / 16, per = tm * tn;
    long long total = per * p.nbatch;
    for (long long t = blockIdx.x; t < total; t += gridDim.x) {
        long long bi = t / per, r = t % per, i0 = (r / tn) * 16, j0 = (r % tn) * 16;
        long long ao = 0, bo = 0, rem = bi;
        for (int d = p.nbat - 1; d >= 0; d--) {
            long long idx = rem % p.bsize[d];
            rem /= p.bsize[d];
            ao += idx * p.a_bs[d];
            bo += idx * p.b_bs[d];
        }
        Acc acc = (Acc)0;
        for (long long k0 = 0; k0 < p.k; k0 += 16) {
            long long ar = i0 + ty, ak = k0 + tx, bk = k0 + ty, bc = j0 + tx;
            as[ty][tx] = ar < p.m && ak < p.k ? kn_la_ld<Acc>(p.a, p.a_dt, ao + ar * p.a_rs + ak * p.a_cs)
                                              : (Acc)0;
            bs[ty][tx] = bk < p.k && bc < p.n ? kn_la_ld<Acc>(p.b, p.b_dt, bo + bk * p.b_rs + bc * p.b_cs)
                                              : (Acc)0;
            __syncthreads();
            int kend = p.k - k0 < 16 ? (int)(p.k - k0) : 16;
            for (int kk = 0; kk < kend; kk++) acc = acc + as[ty][kk] * bs[kk][tx];
            __syncthreads();
        }
        long long i = i0 + ty, j = j0 + tx;
        if (i < p.m && j < p.n) kn_la_st<Acc>(p.out, p.o_dt, (bi * p.m + i) * p.n + j, acc);
    }
}

extern "C" __global__ void __launch_bounds__(256) kn_la_matmul_f32(kn_la_matmul_args p)
{
    kn_la_matmul_body<float>(p);
}

extern "C" __global__ void __launch_bounds__(256) kn_la_matmul_f64(kn_la_matmul_args p)
{
    kn_la_matmul_body<double>(p);
}

// ---- conv2d, direct: one thread per output element of y [N, K, P, Q]
// (written through its strides: NCHW or channels-last); taps summed in the CPU's im2col order (channel, ky, kx),
// then the bias, then one rounding. ----
template <typename Acc>
__device__ void kn_la_conv_body(const kn_la_conv_args &p)
{
    long long total = p.n * p.k * p.p * p.q;
    long long kg = p.k / p.groups, cg = p.c / p.groups;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (long long)gridDim.x * blockDim.x) {
        long long ox = o % p.q, t = o / p.q;
        long long oy = t % p.p;
        t /= p.p;
        long long ko = t % p.k, ni = t / p.k;
        long long c0 = (ko / kg) * cg;
        Acc acc = (Acc)0;
        for (long long ci = 0; ci < cg; ci++)
            for (long long ky = 0; ky < p.r; ky++) {
                long long iy = oy * p.sh - p.ph + ky * p.dh;
                for (long long kx = 0; kx < p.s; kx++) {
                    long long ix = ox * p.sw - p.pw + kx * p.dw;
                    // a padding tap contributes 0 * w: add it too, so the
                    // sum rounds as the CPU's zero-filled im2col does
                    Acc xv = (Acc)0;
                    if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.wd)
                        xv = kn_la_ld<Acc>(p.x, p.x_dt,
                                           ni * p.xs[0] + (c0 + ci) * p.xs[1] + iy * p.xs[2] + ix * p.xs[3]);
                    Acc wv = kn_la_ld<Acc>(p.w, p.w_dt,
                                           ko * p.ws[0] + ci * p.ws[1] + ky * p.ws[2] + kx * p.ws[3]);
                    acc = acc + xv * wv;
                }
            }
        if (p.bias) acc = acc + kn_la_ld<Acc>(p.bias, p.b_dt, ko * p.bias_s);
        kn_la_st<Acc>(p.y, p.y_dt, ni * p.ys[0] + ko * p.ys[1] + oy * p.ys[2] + ox * p.ys[3], acc);
    }
}

extern "C" __global__ void __launch_bounds__(256) kn_la_conv2d_f32(kn_la_conv_args p)
{
    kn_la_conv_body<float>(p);
}

extern "C" __global__ void __launch_bounds__(256) kn_la_conv2d_f64(kn_la_conv_args p)
{
    kn_la_conv_body<double>(p);
}

// ---- channels-last input: y [n, h, w, cp] = x [n, c, h, w], zero past c.
// One thread per element of y, so the stores are coalesced; bytes move as
// they are (no dtype conversion). ----
template <typename T>
__device__ void kn_la_nhwc_body(const kn_la_nhwc_args &p)
{
    long long total = p.n * p.h * p.w * p.cp;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (long long)gridDim.x * blockDim.x) {
        long long c = o % p.cp, t = o / p.cp;
        long long wx = t % p.w;
        t /= p.w;
        long long hy = t % p.h, ni = t / p.h;
        T v = (T)0;
        if (c < p.c) v = ((const T *)p.x)[ni * p.xs[0] + c * p.xs[1] + hy * p.xs[2] + wx * p.xs[3]];
        ((T *)p.y)[o] = v;
    }
}

extern "C" __global__ void __launch_bounds__(256) kn_la_to_nhwc(kn_la_nhwc_args p)
{
    if (p.esize == 2) kn_la_nhwc_body<unsigned short>(p);
    else if (p.esize == 4) kn_la_nhwc_body<unsigned int>(p);
    else kn_la_nhwc_body<unsigned long long>(p);
}


// ---- a stem conv, channels-last out: one thread per output pixel, all
// of its output channels (32 at a time) in registers; the taps' weights in
// shared memory, read by every thread at once (broadcast). Multiply-adds
// are fused (explicit fmaf: this kernel is a fast path, not the CPU's
// bit-for-bit fallback); bias and ReLU added before the one rounding. For
// an image conv (3 channels, 3x3) cuDNN's NHWC engines need the channels
// padded to 8 and ran 180-240 us on convnet's first layer (H100, bf16);
// this reads the image once and writes each pixel's channels contiguously.
#define KN_LA_STEM_KC 32
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

// the body for one dtype: x's offsets in 32 bits (the host checks that
// every element of x is within reach), the window's rows walked from the
// pixel's corner instead of recomputed per tap. Measured on convnet's first
// layer (H100, bf16, 32x3x224x224 -> 32x112x112x32): 62 us at 43-60% SM
// throughput, 7% of DRAM bandwidth, about cuDNN's NCHW time for the same
// conv (65 us); two pixels a thread sharing the weight reads (64 us) and a
// channel's taps loaded together before their multiply-adds (75 us) were
// no faster. What it saves is the NHWC transpose the next conv would need.
template <int DT>
__device__ void kn_la_stem_body(const kn_la_stem_args &p, float *ws, float *bs)
{
    int taps = (int)(p.c * p.r * p.s);
    int xs1 = (int)p.xs[1], xs2 = (int)p.xs[2], xs3 = (int)p.xs[3];
    int h = (int)p.h, wd = (int)p.wd, r = (int)p.r, sk = (int)p.s;
    long long npix = p.n * p.p * p.q;
    for (long long base = (long long)blockIdx.x * blockDim.x; base < npix; base += (long long)gridDim.x * blockDim.x) {
        long long pix = base + threadIdx.x;
        bool live = pix < npix;
        long long t = pix / p.q;
        int ox = (int)(pix % p.q), oy = (int)(t % p.p);
        long long ni = t / p.p;
        const char *xb = p.x + ni * p.xs[0] * (DT == KN_LA_F32 ? 4 : 2);
        int iy0 = oy * p.sh - p.ph, ix0 = ox * p.sw - p.pw;
        for (long long k0 = 0; k0 < p.k; k0 += KN_LA_STEM_KC) {
            int kc = p.k - k0 < KN_LA_STEM_KC ? (int)(p.k - k0) : KN_LA_STEM_KC;
            __syncthreads(); // the previous chunk's weights are no longer read
            for (int i = threadIdx.x; i < taps * KN_LA_STEM_KC; i += blockDim.x) {
                int tap = i / KN_LA_STEM_KC, j = i % KN_LA_STEM_KC;
                int ci = tap / (r * sk), ky = (tap / sk) % r, kx = tap % sk;
                ws[i] = j < kc ? kn_la_ld<float>(p.w, p.dt, (((k0 + j) * p.r + ky) * p.s + kx) * p.cw + ci) : 0.f;
            }
            if (threadIdx.x < KN_LA_STEM_KC)
                bs[threadIdx.x] = p.bias && (int)threadIdx.x < kc
                                      ? kn_la_ld<float>(p.bias, p.b_dt, (k0 + threadIdx.x) * p.bias_s)
                                      : 0.f;
            __syncthreads();
            if (!live) continue;
            float acc[KN_LA_STEM_KC];
#pragma unroll
            for (int j = 0; j < KN_LA_STEM_KC; j++) acc[j] = 0.f;
            const float *wr = ws;
            for (int ci = 0; ci < (int)p.c; ci++)
                for (int ky = 0; ky < r; ky++) {
                    int iy = iy0 + ky * p.dh;
                    bool row_in = iy >= 0 && iy < h;
                    int roff = ci * xs1 + iy * xs2;
                    for (int kx = 0; kx < sk; kx++, wr += KN_LA_STEM_KC) {
                        int ix = ix0 + kx * p.dw;
                        float xv = row_in && ix >= 0 && ix < wd ? kn_la_ld_t<DT>(xb, roff + ix * xs3) : 0.f;
#pragma unroll
                        for (int j = 0; j < KN_LA_STEM_KC; j++) acc[j] = fmaf(xv, wr[j], acc[j]);
                    }
                }
#pragma unroll
            for (int j = 0; j < KN_LA_STEM_KC; j++) {
                float v = acc[j] + bs[j];
                if (p.act == 1) v = v > 0.f ? v : (v == v ? 0.f : v); // NaN passes, as relu on the CPU
                acc[j] = v;
            }
            long long row = pix * p.k + k0; // element index of this pixel's chunk in y
            if (p.vec && kc == KN_LA_STEM_KC && DT != KN_LA_F32) {
                uint4 *dst = (uint4 *)(p.y + row * 2);
#pragma unroll
                for (int q = 0; q < KN_LA_STEM_KC / 8; q++) {
                    uint4 u;
                    u.x = kn_la_pack2(DT, acc[8 * q + 0], acc[8 * q + 1]);
                    u.y = kn_la_pack2(DT, acc[8 * q + 2], acc[8 * q + 3]);
                    u.z = kn_la_pack2(DT, acc[8 * q + 4], acc[8 * q + 5]);
                    u.w = kn_la_pack2(DT, acc[8 * q + 6], acc[8 * q + 7]);
                    dst[q] = u;
                }
            } else if (p.vec && kc == KN_LA_STEM_KC) {
                float4 *dst = (float4 *)(p.y + row * 4);
#pragma unroll
                for (int q = 0; q < KN_LA_STEM_KC / 4; q++)
                    dst[q] = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < KN_LA_STEM_KC; j++)
                    if (j < kc) kn_la_st<float>(p.y, p.dt, row + j, acc[j]);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(128) kn_la_conv_stem(kn_la_stem_args p)
{
    __shared__ float ws[KN_LA_STEM_TAPS * KN_LA_STEM_KC]; // [tap][channel]
    __shared__ float bs[KN_LA_STEM_KC];
    if (p.dt == KN_LA_BF16) kn_la_stem_body<KN_LA_BF16>(p, ws, bs);
    else if (p.dt == KN_LA_F16) kn_la_stem_body<KN_LA_F16>(p, ws, bs);
    else kn_la_stem_body<KN_LA_F32>(p, ws, bs);
}

// ---- a stem conv on the tensor cores (bf16 / f16): an implicit GEMM of
// pixels (M) by output channels (N) over the taps C x R x S (K, at most
// KN_LA_TC_TAPS), mma.sync m16n8k16 with f32 accumulators. A block takes
// 128 pixels by NT x 8 output channels (NT 2, 4 or 8: a 16- or 32-channel
// stem does not pay for 64): its 4 warps 32 pixels each; the block's
// weights sit in shared memory once, [channel][tap]; each thread gathers
// its pixel's taps 32 at a time (the image, NCHW, from L1/L2: a warp's 32
// neighbouring pixels read neighbouring addresses) into shared
// [pixel][tap], with each tap's offset, dy and dx from a table made once.
// Shared rows are padded to 40 / KN_LA_TC_TAPS + 8 halves, so the
// fragments' 32-bit loads hit distinct banks. Bias and ReLU before the one
// rounding; the tile's results go through shared memory and out in 16-byte
// rows. Blocks stay (a grid of 4 an SM) and take tile after tile.
// ResNet's 7x7 stride-2 stem (3 -> 64 channels, 147 taps) ran 530 us
// through cuDNN's heuristic pick with the channels padded to 8 (H100, 32
// images of 224 x 224, bf16), and the CUDA-core stem kernel holds at most
// 64 taps. Measured (ncu) on convnet's stem before the staged stores and
// NT: latency-bound, 11.5 cycles an instruction at 25% occupancy.
#define KN_LA_TC_BM 128
#define KN_LA_TC_BK 32
#define KN_LA_TC_AST (KN_LA_TC_BK + 8)
#define KN_LA_TC_BST (KN_LA_TC_TAPS + 8)
#define KN_LA_TC_OST (64 + 8) // halves a staged output row, padded

template <int DT>
__device__ __forceinline__ void kn_la_mma(float c[4], const unsigned a[4], unsigned b0, unsigned b1)
{
    if (DT == KN_LA_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// the kernel's shared memory, declared once (each instantiation of a body
// with its own __shared__ arrays would get its own copy); the gathered taps
// and the staged outputs are never live together
struct kn_la_stem_tc_smem {
    union {
        unsigned short as[KN_LA_TC_BM * KN_LA_TC_AST];
        unsigned short os[KN_LA_TC_BM * KN_LA_TC_OST];
    };
    unsigned short bs[64 * KN_LA_TC_BST];
    int toff[KN_LA_TC_TAPS];
    short tdy[KN_LA_TC_TAPS], tdx[KN_LA_TC_TAPS];
};

template <int DT, int NT>
__device__ void kn_la_stem_tc_body(const kn_la_stem_args &p, kn_la_stem_tc_smem &sm)
{
    constexpr int BN = NT * 8;
    unsigned short *as = sm.as, *bs = sm.bs, *os = sm.os;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int c = (int)p.c, r = (int)p.r, sk = (int)p.s, taps = c * r * sk;
    const int kpad = (taps + KN_LA_TC_BK - 1) / KN_LA_TC_BK * KN_LA_TC_BK;
    const int h = (int)p.h, wd = (int)p.wd, k0 = blockIdx.y * BN;
    // the taps' table: tap = (ky * S + kx) * C + ci, offsets within an image
    for (int t = threadIdx.x; t < taps; t += blockDim.x) {
        int ci = t % c, rs = t / c, kx = rs % sk, ky = rs / sk;
        sm.tdy[t] = (short)(ky * p.dh);
        sm.tdx[t] = (short)(kx * p.dw);
        sm.toff[t] = (int)(ci * p.xs[1] + ky * p.dh * p.xs[2] + kx * p.dw * p.xs[3]);
    }
    // the block's weights, a thread a tap (divisions once per tap)
    const unsigned short *w = (const unsigned short *)p.w;
    const long long kstride = (long long)r * sk * p.cw;
    for (int t = threadIdx.x; t < kpad; t += blockDim.x) {
        int ci = t % c, rs = t / c;
        const unsigned short *wt = w + (long long)rs * p.cw + ci;
        for (int kk = 0; kk < BN; kk++)
            bs[kk * KN_LA_TC_BST + t] = k0 + kk < p.k && t < taps ? wt[(k0 + kk) * kstride] : (unsigned short)0;
    }
    float bias[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            long long ch = k0 + nt * 8 + 2 * t4 + e;
            bias[nt][e] = p.bias && ch < p.k ? kn_la_ld<float>(p.bias, p.b_dt, ch * p.bias_s) : 0.f;
        }
    const long long npix = p.n * p.p * p.q;
    const int xs2 = (int)p.xs[2], xs3 = (int)p.xs[3];
    // channels of this tile in y, and whether its rows go out 16 bytes at a time
    const int kc_n = p.k - k0 < BN ? (int)(p.k - k0) : BN;
    const bool vec_out = p.vec && (kc_n * 2) % 16 == 0 && (p.k * 2) % 16 == 0 && (k0 * 2) % 16 == 0;
    for (long long base = (long long)blockIdx.x * KN_LA_TC_BM; base < npix; base += (long long)gridDim.x * KN_LA_TC_BM) {
        long long pix = base + threadIdx.x;
        bool live = pix < npix;
        int iy0 = 0, ix0 = 0;
        const unsigned short *xb = (const unsigned short *)p.x;
        if (live) {
            long long t = pix / p.q;
            int ox = (int)(pix % p.q), oy = (int)(t % p.p);
            long long ni = t / p.p;
            iy0 = oy * p.sh - p.ph;
            ix0 = ox * p.sw - p.pw;
            xb += ni * p.xs[0]; // the image; offsets within it fit 32 bits (the host checks)
        }
        const int corner = iy0 * xs2 + ix0 * xs3;
        float acc[2][NT][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.f;
        for (int kc = 0; kc < kpad; kc += KN_LA_TC_BK) {
            __syncthreads(); // the table and weights are written; the previous chunk (or tile's outputs) is read
            unsigned short *ar = as + threadIdx.x * KN_LA_TC_AST;
            // sixteen taps' loads issued before their stores to shared memory
#pragma unroll
            for (int j0 = 0; j0 < KN_LA_TC_BK; j0 += 16) {
                unsigned short v[16];
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    int t = kc + j0 + j;
                    v[j] = 0;
                    if (live && t < taps) {
                        int iy = iy0 + sm.tdy[t], ix = ix0 + sm.tdx[t];
                        if ((unsigned)iy < (unsigned)h && (unsigned)ix < (unsigned)wd) v[j] = xb[corner + sm.toff[t]];
                    }
                }
#pragma unroll
                for (int j = 0; j < 16; j += 2)
                    *(unsigned *)(ar + j0 + j) = (unsigned)v[j] | ((unsigned)v[j + 1] << 16);
            }
            __syncthreads();
#pragma unroll
            for (int ks = 0; ks < KN_LA_TC_BK; ks += 16) {
                unsigned a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    const unsigned short *ap = as + (warp * 32 + mt * 16 + g) * KN_LA_TC_AST + ks + 2 * t4;
                    a[mt][0] = *(const unsigned *)ap;
                    a[mt][1] = *(const unsigned *)(ap + 8 * KN_LA_TC_AST);
                    a[mt][2] = *(const unsigned *)(ap + 8);
                    a[mt][3] = *(const unsigned *)(ap + 8 * KN_LA_TC_AST + 8);
                }
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const unsigned short *bp = bs + (nt * 8 + g) * KN_LA_TC_BST + kc + ks + 2 * t4;
                    unsigned b0 = *(const unsigned *)bp, b1 = *(const unsigned *)(bp + 8);
                    kn_la_mma<DT>(acc[0][nt], a[0], b0, b1);
                    kn_la_mma<DT>(acc[1][nt], a[1], b0, b1);
                }
            }
        }
        __syncthreads(); // the last chunk's taps are read: the region holds the outputs now
        // c0, c1: row g, columns 2t, 2t+1; c2, c3: row g + 8
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                int row = warp * 32 + mt * 16 + g + half * 8;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    float v2[2];
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float u = acc[mt][nt][half * 2 + e] + bias[nt][e];
                        if (p.act == 1) u = u > 0.f ? u : (u == u ? 0.f : u); // NaN passes, as relu on the CPU
                        v2[e] = u;
                    }
                    *(unsigned *)(os + row * KN_LA_TC_OST + nt * 8 + 2 * t4) = kn_la_pack2(DT, v2[0], v2[1]);
                }
            }
        __syncthreads();
        if (vec_out) { // 16 bytes (8 channels) a store, rows of neighbouring pixels together
            const int per_row = kc_n / 8;
            for (int i = threadIdx.x; i < KN_LA_TC_BM * per_row; i += blockDim.x) {
                int row = i / per_row, part = i % per_row;
                long long px = base + row;
                if (px < npix)
                    *(uint4 *)(p.y + (px * p.k + k0 + part * 8) * 2) =
                        *(const uint4 *)(os + row * KN_LA_TC_OST + part * 8);
            }
        } else {
            for (int i = threadIdx.x; i < KN_LA_TC_BM * kc_n; i += blockDim.x) {
                int row = i / kc_n, ch = i % kc_n;
                long long px = base + row;
                if (px < npix) ((unsigned short *)p.y)[px * p.k + k0 + ch] = os[row * KN_LA_TC_OST + ch];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(128, 4) kn_la_conv_stem_tc(kn_la_stem_args p)
{
    __shared__ __align__(16) kn_la_stem_tc_smem sm;
    int nt = p.k <= 16 ? 2 : p.k <= 32 ? 4 : 8;
    if (p.dt == KN_LA_BF16) {
        if (nt == 2) kn_la_stem_tc_body<KN_LA_BF16, 2>(p, sm);
        else if (nt == 4) kn_la_stem_tc_body<KN_LA_BF16, 4>(p, sm);
        else kn_la_stem_tc_body<KN_LA_BF16, 8>(p, sm);
    } else {
        if (nt == 2) kn_la_stem_tc_body<KN_LA_F16, 2>(p, sm);
        else if (nt == 4) kn_la_stem_tc_body<KN_LA_F16, 4>(p, sm);
        else kn_la_stem_tc_body<KN_LA_F16, 8>(p, sm);
    }
}

// ---- a depthwise conv, channels-last in and out (MobileNet's 3x3 and 5x5
// layers, stride 1 and 2): a block's threads are (channel vector, pixel)
// pairs, blockDim.x channel vectors of vec channels wide (16-byte loads and
// stores where the host allows it, else one channel) by 256 / blockDim.x
// pixels; the slice's weights sit in shared memory as [tap][channel], so
// every tap is one shared read per channel and one global load per vector.
// Memory-bound: each input element is read by about (r/sh)(s/sw) outputs,
// from L1/L2. cuDNN's engines chosen by its heuristics ran these layers at
// 2-5% of their roofline on the H100 (mobilenet_v3_large bf16, 16 images:
// 37-246 us a layer). Multiply-adds fused (fmaf), bias and ReLU before the
// one rounding, as the stem kernel.
template <int DT, int VEC>
__device__ __forceinline__ void kn_la_dw_load(const char *p, float v[VEC])
{
    if (VEC == 8) {
        uint4 u = *(const uint4 *)p;
        unsigned w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            unsigned short lo = (unsigned short)(w4[i] & 0xffffu), hi = (unsigned short)(w4[i] >> 16);
            v[2 * i] = DT == KN_LA_BF16 ? kn_la_bf16_ld(lo) : kn_la_f16_ld(lo);
            v[2 * i + 1] = DT == KN_LA_BF16 ? kn_la_bf16_ld(hi) : kn_la_f16_ld(hi);
        }
    } else if (VEC == 4) {
        float4 f = *(const float4 *)p;
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
        v[0] = kn_la_ld_t<DT>(p, 0);
    }
}

// A thread's VEC weights of one tap, staged as [tap][channel] floats. The
// global weights are [channel][tap], so a lane's VEC channels are one
// contiguous run of VEC * taps values: `taps` pieces of VEC values (16
// bytes each when vectorised), which the block's rows load together. The
// old fill loaded one value a thread per iteration, each load waited for:
// 25 waits before any work on a 5x5 layer, whose blocks take one pixel a
// thread (mobilenet's 7x7x960 layer: 14 us for 3 MB).
template <int DT, int VEC>
__device__ __forceinline__ void kn_la_dw_stage_weights(const kn_la_dw_args &p, int taps, int width, long long c0,
                                                       float *ws)
{
    const int lane = (int)threadIdx.x;
    if (c0 >= p.c) return;
    for (int k = (int)threadIdx.y; k < taps; k += (int)blockDim.y) {
        float v[VEC];
        kn_la_dw_load<DT, VEC>(p.w + (c0 * taps + (long long)k * VEC) * (DT == KN_LA_F32 ? 4 : 2), v);
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            int e = k * VEC + i, j = e / taps, t = e % taps;
            ws[t * width + lane * VEC + j] = v[i];
        }
    }
}

// the epilogue's activation: 1 relu, 3 hardswish as the ONNX importer
// writes it (x * clamp(x / 6 + 1/2, 0, 1)); NaN passes, as on the CPU
__device__ __forceinline__ float kn_la_dw_act(int act, float v)
{
    if (act == 1) return v > 0.f ? v : (v == v ? 0.f : v);
    if (act == 3) return v * fminf(fmaxf(v * (1.f / 6.f) + 0.5f, 0.f), 1.f);
    return v;
}

// One output pixel's VEC channels. KR, KS: the window when known at compile
// time (3x3 and 5x5, MobileNet's), so every tap's load is issued before the
// multiply-adds wait for any; 0 reads p.r, p.s.
template <int DT, int VEC, int KR, int KS>
__device__ __forceinline__ void kn_la_dw_pixel(const kn_la_dw_args &p, const char *xb, int iy0, int ix0,
                                               const float *wl, int width, float acc[VEC])
{
    const int es = DT == KN_LA_F32 ? 4 : 2;
    const int r = KR ? KR : p.r, s = KS ? KS : p.s, h = (int)p.h, wd = (int)p.wd;
#pragma unroll
    for (int ky = 0; ky < r; ky++) {
        int iy = iy0 + ky * p.dh;
        bool row_in = (unsigned)iy < (unsigned)h;
#pragma unroll
        for (int kx = 0; kx < s; kx++) {
            int ix = ix0 + kx * p.dw;
            float xv[VEC];
            if (row_in && (unsigned)ix < (unsigned)wd) {
                kn_la_dw_load<DT, VEC>(xb + ((long long)iy * p.xs[1] + (long long)ix * p.xs[2]) * es, xv);
            } else {
#pragma unroll
                for (int j = 0; j < VEC; j++) xv[j] = 0.f;
            }
            const float *wr = wl + (ky * s + kx) * width;
#pragma unroll
            for (int j = 0; j < VEC; j++) acc[j] = fmaf(xv[j], wr[j], acc[j]);
        }
    }
}

template <int DT, int VEC, int KR, int KS>
__device__ void kn_la_dw_body(const kn_la_dw_args &p, float *ws, float *bs)
{
    const int lanes = (int)blockDim.x, rows = (int)blockDim.y, width = lanes * VEC;
    const int taps = p.r * p.s;
    const long long c0 = ((long long)blockIdx.y * lanes + threadIdx.x) * VEC;
    kn_la_dw_stage_weights<DT, VEC>(p, taps, width, c0, ws);
    if (threadIdx.y == 0) {
#pragma unroll
        for (int j = 0; j < VEC; j++)
            bs[threadIdx.x * VEC + j] = p.bias && c0 + j < p.c ? kn_la_ld<float>(p.bias, p.b_dt, (c0 + j) * p.bias_s) : 0.f;
    }
    __syncthreads();
    if (c0 >= p.c) return;
    const int es = DT == KN_LA_F32 ? 4 : 2;
    const unsigned npix = (unsigned)(p.n * p.p * p.q), q = (unsigned)p.q, pp = (unsigned)p.p;
    const float *wl = ws + threadIdx.x * VEC, *bl = bs + threadIdx.x * VEC;
    for (unsigned pix = blockIdx.x * rows + threadIdx.y; pix < npix; pix += gridDim.x * rows) {
        unsigned t = pix / q, ox = pix % q, oy = t % pp, ni = t / pp;
        const char *xb = p.x + ((long long)ni * p.xs[0] + c0 * p.xs[3]) * es;
        float acc[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j++) acc[j] = bl[j];
        kn_la_dw_pixel<DT, VEC, KR, KS>(p, xb, (int)oy * p.sh - p.ph, (int)ox * p.sw - p.pw, wl, width, acc);
#pragma unroll
        for (int j = 0; j < VEC; j++) acc[j] = kn_la_dw_act(p.act, acc[j]);
        long long row = (long long)pix * p.c + c0;
        if (VEC == 8) {
            uint4 u;
            u.x = kn_la_pack2(DT, acc[0], acc[1]);
            u.y = kn_la_pack2(DT, acc[2], acc[3]);
            u.z = kn_la_pack2(DT, acc[4], acc[5]);
            u.w = kn_la_pack2(DT, acc[6], acc[7]);
            *(uint4 *)(p.y + row * 2) = u;
        } else if (VEC == 4) {
            *(float4 *)(p.y + row * 4) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        } else {
            kn_la_st<float>(p.y, p.dt, row, acc[0]);
        }
    }
}

template <int DT, int VEC>
__device__ __forceinline__ void kn_la_dw_window(const kn_la_dw_args &p, float *ws, float *bs)
{
    if (p.r == 3 && p.s == 3) kn_la_dw_body<DT, VEC, 3, 3>(p, ws, bs);
    else if (p.r == 5 && p.s == 5) kn_la_dw_body<DT, VEC, 5, 5>(p, ws, bs);
    else kn_la_dw_body<DT, VEC, 0, 0>(p, ws, bs);
}

// Blocks are (channel vector, pixel) pairs: blockDim.x vectors of one
// channel slice (blockIdx.y) by blockDim.y pixels; shared: the slice's
// weights (taps x 256 channels at most) and bias.
extern "C" __global__ void __launch_bounds__(256) kn_la_conv_dw(kn_la_dw_args p)
{
    __shared__ float ws[KN_LA_DW_TAPS * 256];
    __shared__ float bs[256];
    if (p.dt == KN_LA_BF16) {
        if (p.vec) kn_la_dw_window<KN_LA_BF16, 8>(p, ws, bs);
        else kn_la_dw_body<KN_LA_BF16, 1, 0, 0>(p, ws, bs);
    } else if (p.dt == KN_LA_F16) {
        if (p.vec) kn_la_dw_window<KN_LA_F16, 8>(p, ws, bs);
        else kn_la_dw_body<KN_LA_F16, 1, 0, 0>(p, ws, bs);
    } else {
        if (p.vec) kn_la_dw_window<KN_LA_F32, 4>(p, ws, bs);
        else kn_la_dw_body<KN_LA_F32, 1, 0, 0>(p, ws, bs);
    }
}

// ---- the depthwise conv on strips: a thread takes KN_LA_DW_STRIP
// neighbouring outputs of one row (and 16 bytes of channels), so each
// input column it loads serves every output whose window covers it, and
// the index arithmetic, the weights' shared loads and the pixel's
// bookkeeping are paid once a strip. One output a thread spent about 600
// instructions a warp on 72 multiply-adds a thread (ncu, H100,
// mobilenet_v3_large bf16: 13 cycles an instruction at 37% occupancy,
// 8-15% of the layers' roofline). Stride SW along the row and windows of
// K x K (3 and 5, MobileNet's) are compile-time; dilation 1. The host
// sends any other depthwise conv to kn_la_conv_dw. KN_LA_DW_STRIP: in
// kn_cuda_la_args.h, which the host reads too.

// two floats to one 32-bit word of bf16 / f16 (the low half first), one
// instruction, round to nearest even
template <int DT>
__device__ __forceinline__ unsigned kn_la_pack2_rn(float lo, float hi)
{
    unsigned u;
    if (DT == KN_LA_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
    return u;
}

template <int DT, int VEC, int K, int SW>
__device__ void kn_la_dw_strip_body(const kn_la_dw_args &p, float *ws, float *bs)
{
    constexpr int P = KN_LA_DW_STRIP, COLS = (P - 1) * SW + K, es = DT == KN_LA_F32 ? 4 : 2;
    const int lanes = (int)blockDim.x, rows = (int)blockDim.y, width = lanes * VEC;
    const long long c0 = ((long long)blockIdx.y * lanes + threadIdx.x) * VEC;
    kn_la_dw_stage_weights<DT, VEC>(p, K * K, width, c0, ws);
    if (threadIdx.y == 0) {
#pragma unroll
        for (int j = 0; j < VEC; j++)
            bs[threadIdx.x * VEC + j] = p.bias && c0 + j < p.c ? kn_la_ld<float>(p.bias, p.b_dt, (c0 + j) * p.bias_s) : 0.f;
    }
    __syncthreads();
    if (c0 >= p.c) return;
    const unsigned q = (unsigned)p.q, pp = (unsigned)p.p, per_row = (q + P - 1) / P;
    const unsigned strips = (unsigned)p.n * pp * per_row;
    const int h = (int)p.h, wd = (int)p.wd;
    const float *wl = ws + threadIdx.x * VEC, *bl = bs + threadIdx.x * VEC;
    for (unsigned s = blockIdx.x * rows + threadIdx.y; s < strips; s += gridDim.x * rows) {
        unsigned t = s / per_row, ox0 = (s - t * per_row) * P, oy = t % pp, ni = t / pp;
        const char *xb = p.x + ((long long)ni * p.xs[0] + c0) * es;
        const int iy0 = (int)oy * p.sh - p.ph, ix0 = (int)ox0 * SW - p.pw;
        float acc[P][VEC];
#pragma unroll
        for (int o = 0; o < P; o++)
#pragma unroll
            for (int j = 0; j < VEC; j++) acc[o][j] = bl[j];
        // rows one at a time: unrolled, their loads spilled registers
        // (ncu/nvcc: 128 registers, 5x5 spilling) and measured slower
#pragma unroll 1
        for (int ky = 0; ky < K; ky++) {
            const int iy = iy0 + ky;
            if ((unsigned)iy >= (unsigned)h) continue;
            const char *xr = xb + (long long)iy * p.xs[1] * es;
            const float *wrow = wl + ky * K * width; // read at each use: 128 registers hold no more
#pragma unroll
            for (int c = 0; c < COLS; c++) {
                const int ix = ix0 + c;
                float xv[VEC];
                if ((unsigned)ix < (unsigned)wd) {
                    kn_la_dw_load<DT, VEC>(xr + (long long)ix * p.xs[2] * es, xv);
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; j++) xv[j] = 0.f;
                }
#pragma unroll
                for (int o = 0; o < P; o++) {
                    const int kx = c - o * SW; // the tap of output o that column c is
                    if (kx >= 0 && kx < K) {
#pragma unroll
                        for (int j = 0; j < VEC; j++) acc[o][j] = fmaf(xv[j], wrow[kx * width + j], acc[o][j]);
                    }
                }
            }
        }
        const long long row0 = (((long long)ni * pp + oy) * q + ox0) * p.c + c0;
#pragma unroll
        for (int o = 0; o < P; o++) {
            if (ox0 + o >= q) break;
            float v[VEC];
#pragma unroll
            for (int j = 0; j < VEC; j++) v[j] = kn_la_dw_act(p.act, acc[o][j]);
            char *dst = p.y + (row0 + (long long)o * p.c) * es;
            if (VEC == 8) {
                *(uint4 *)dst = make_uint4(kn_la_pack2_rn<DT>(v[0], v[1]), kn_la_pack2_rn<DT>(v[2], v[3]),
                                           kn_la_pack2_rn<DT>(v[4], v[5]), kn_la_pack2_rn<DT>(v[6], v[7]));
            } else {
                *(float4 *)dst = make_float4(v[0], v[1], v[2], v[3]);
            }
        }
    }
}

template <int K>
__device__ __forceinline__ void kn_la_dw_strip(const kn_la_dw_args &p, float *ws, float *bs)
{
    if (p.dt == KN_LA_BF16) {
        if (p.sw == 1) kn_la_dw_strip_body<KN_LA_BF16, 8, K, 1>(p, ws, bs);
        else kn_la_dw_strip_body<KN_LA_BF16, 8, K, 2>(p, ws, bs);
    } else if (p.dt == KN_LA_F16) {
        if (p.sw == 1) kn_la_dw_strip_body<KN_LA_F16, 8, K, 1>(p, ws, bs);
        else kn_la_dw_strip_body<KN_LA_F16, 8, K, 2>(p, ws, bs);
    } else {
        if (p.sw == 1) kn_la_dw_strip_body<KN_LA_F32, 4, K, 1>(p, ws, bs);
        else kn_la_dw_strip_body<KN_LA_F32, 4, K, 2>(p, ws, bs);
    }
}

// 16-byte channel vectors only (p.vec), stride 1 or 2 along the row
extern "C" __global__ void __launch_bounds__(256, 2) kn_la_conv_dw_strip3(kn_la_dw_args p)
{
    __shared__ float ws[9 * 256];
    __shared__ float bs[256];
    kn_la_dw_strip<3>(p, ws, bs);
}

extern "C" __global__ void __launch_bounds__(256, 2) kn_la_conv_dw_strip5(kn_la_dw_args p)
{
    __shared__ float ws[25 * 256];
    __shared__ float bs[256];
    kn_la_dw_strip<5>(p, ws, bs);
}

// ---- y = act(y + bias[channel]) in place, channel = (i / inner) % channels;
// act 0 none, 1 relu, 2 gelu (tanh approximation, as cuBLASLt's epilogue),
// 3 hardswish (kn_epilogue_act) ----
template <typename Acc>
__device__ void kn_la_bias_body(const kn_la_bias_args &p)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.total;
         i += (long long)gridDim.x * blockDim.x) {
        Acc v = kn_la_ld<Acc>(p.y, p.y_dt, i);
        if (p.bias) v = v + kn_la_ld<Acc>(p.bias, p.b_dt, ((i / p.inner) % p.channels) * p.bias_s);
        if (p.act == 1) {
            v = v > (Acc)0 ? v : (v == v ? (Acc)0 : v); // NaN passes, as relu on the CPU
        } else if (p.act == 2) {
            Acc u = (Acc)0.7978845608028654 * (v + (Acc)0.044715 * v * v * v);
            v = (Acc)0.5 * v * ((Acc)1 + kn_la_tanh(u));
        } else if (p.act == 3) { // hardswish, as kn_la_dw_act
            Acc t = v * ((Acc)1 / (Acc)6) + (Acc)0.5;
            t = t > (Acc)0 ? t : (Acc)0;
            v = v * (t < (Acc)1 ? t : (Acc)1);
        }
        kn_la_st<Acc>(p.y, p.y_dt, i, v);
    }
}

extern "C" __global__ void __launch_bounds__(256) kn_la_bias_act_f32(kn_la_bias_args p)
{
    kn_la_bias_body<float>(p);
}

extern "C" __global__ void __launch_bounds__(256) kn_la_bias_act_f64(kn_la_bias_args p)
{
    kn_la_bias_body<double>(p);
}

#endif // KN_LA_STANDALONE
