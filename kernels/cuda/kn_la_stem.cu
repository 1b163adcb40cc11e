// kn_la_stem.cu: a stem conv, channels-last out, on the CUDA cores: one
// thread per output pixel, all of its output channels (32 at a time) in
// registers; the taps' weights in shared memory, read by every thread at
// once (broadcast). Multiply-adds are fused (explicit fmaf: this kernel is
// a fast path, not the CPU's bit-for-bit fallback); bias and ReLU added
// before the one rounding. For an image conv (3 channels, 3x3) cuDNN's NHWC
// engines need the channels padded to 8 and ran 180-240 us on convnet's
// first layer (H100, bf16); this reads the image once and writes each
// pixel's channels contiguously.
#define KN_LA_STEM_KC 32

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

// one module per dtype: kn_cuda_linalg.c defines KN_LA_DT and names the
// kernel (KN_LA_KERNEL, kn_la_conv_stem_<dtype>), so a model compiles the
// stem of its own dtype only
extern "C" __global__ void __launch_bounds__(128) KN_LA_KERNEL(kn_la_stem_args p)
{
    __shared__ float ws[KN_LA_STEM_TAPS * KN_LA_STEM_KC]; // [tap][channel]
    __shared__ float bs[KN_LA_STEM_KC];
    kn_la_stem_body<KN_LA_DT>(p, ws, bs);
}
