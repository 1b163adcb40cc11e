// kn_la_stem_tc.cu: a stem conv on the tensor cores (bf16 / f16): an
// implicit GEMM of pixels (M) by output channels (N) over the taps C x R x
// S (K, at most KN_LA_TC_TAPS), mma.sync m16n8k16 with f32 accumulators. A
// block takes 128 pixels by NT x 8 output channels (NT 2, 4 or 8: a 16- or
// 32-channel stem does not pay for 64): its 4 warps 32 pixels each; the
// block's weights sit in shared memory once, [channel][tap]; each thread
// gathers its pixel's taps 32 at a time (the image, NCHW, from L1/L2: a
// warp's 32 neighbouring pixels read neighbouring addresses) into shared
// [pixel][tap], with each tap's offset, dy and dx from a table made once.
// Shared rows are padded to 40 / KN_LA_TC_TAPS + 8 halves, so the
// fragments' 32-bit loads hit distinct banks. Bias and ReLU before the one
// rounding; the tile's results go through shared memory and out in 16-byte
// rows. Blocks stay (a grid of 4 an SM) and take tile after tile. ResNet's
// 7x7 stride-2 stem (3 -> 64 channels, 147 taps) ran 530 us through cuDNN's
// heuristic pick with the channels padded to 8 (H100, 32 images of 224 x
// 224, bf16), and the CUDA-core stem kernel holds at most 64 taps. Measured
// (ncu) on convnet's stem before the staged stores and NT: latency-bound,
// 11.5 cycles an instruction at 25% occupancy.
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

// one module per dtype and NT: kn_cuda_linalg.c defines KN_LA_DT and
// KN_LA_NT (from the output channels: 2 up to 16, 4 up to 32, else 8) and
// names the kernel (KN_LA_KERNEL, kn_la_conv_stem_tc_<dtype>_n<NT>), so a
// model compiles the one instantiation it runs (each costs NVRTC about as
// much as the whole module of kn_linalg.cu's fallback kernels)
extern "C" __global__ void __launch_bounds__(128, 4) KN_LA_KERNEL(kn_la_stem_args p)
{
    __shared__ __align__(16) kn_la_stem_tc_smem sm;
    kn_la_stem_tc_body<KN_LA_DT, KN_LA_NT>(p, sm);
}
