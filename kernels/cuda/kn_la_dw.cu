// kn_la_dw.cu: kiln's channels-last depthwise convolutions (MobileNet's),
// in modules of their own, one a kernel and dtype (kn_cuda_linalg.c), so
// that a model compiles only those it runs: kn_la_conv_dw_<dtype>, one
// output a thread, for any window, stride and dilation;
// kn_la_conv_dw_strip3_<dtype> / strip5, four outputs along a row a thread,
// for 3x3 and 5x5 windows of stride 1 or 2. Bias and the
// epilogue's activation (ReLU, hardswish) fused. The module's source puts
// kn_cuda_la_args.h and kn_la_common.cu before this file.

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

// The block's shared state before any output: the slice's weights and each
// lane's bias (0 past the channels), then a barrier. Both kernels start so.
template <int DT, int VEC>
__device__ __forceinline__ void kn_la_dw_stage(const kn_la_dw_args &p, int taps, int width, long long c0, float *ws,
                                               float *bs)
{
    kn_la_dw_stage_weights<DT, VEC>(p, taps, width, c0, ws);
    if (threadIdx.y == 0) {
#pragma unroll
        for (int j = 0; j < VEC; j++)
            bs[threadIdx.x * VEC + j] = p.bias && c0 + j < p.c ? kn_la_ld<float>(p.bias, p.b_dt, (c0 + j) * p.bias_s) : 0.f;
    }
    __syncthreads();
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
    kn_la_dw_stage<DT, VEC>(p, taps, width, c0, ws, bs);
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
    kn_la_dw_stage<DT, VEC>(p, K * K, width, c0, ws, bs);
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

// One module a dtype (KN_LA_DT) and kernel (KN_LA_DW_WINDOW, KN_LA_KERNEL
// its name), as kn_cuda_linalg.c's table lists them: the three kernels in
// three dtypes took NVRTC 4.5 s as one module, and MobileNet runs the
// strips of one dtype.
#if !defined(KN_LA_DT) || !defined(KN_LA_DW_WINDOW) || !defined(KN_LA_KERNEL)
#error "kn_la_dw.cu: a module needs KN_LA_DT, KN_LA_DW_WINDOW and KN_LA_KERNEL"
#endif
#define KN_LA_DW_VEC (KN_LA_DT == KN_LA_F32 ? 4 : 8) // 16 bytes of channels

#if defined(KN_LA_DW_NCHW)
// ---- the depthwise conv on NCHW planes (f32 models, which stay NCHW:
// cuDNN's engines ran MobileNetV3's 15 at 6-15% of their roofline on an
// H200, 600 of 1844 us). Each plane is a 2-D stencil: a block stages its
// planes (or a band of rows of one) into shared memory once, halo and
// padding as zeros, so the window's taps are shared reads; a thread then
// takes four output rows of one column, reusing each staged row for every
// output whose window covers it, and neighbouring threads take
// neighbouring columns (shared reads S words apart, stores coalesced).
template <int DT, int K, int S>
__device__ void kn_la_dw_nchw_body(const kn_la_dwc_args &p, float *sm)
{
    __shared__ long long base[KN_LA_DWC_PLANES]; // each staged plane's offset in x
    __shared__ int chan[KN_LA_DWC_PLANES];
    const int nt = (int)blockDim.x, t0 = (int)threadIdx.x, lane = t0 & 31, warps = nt >> 5;
    const long long plane0 = (long long)(blockIdx.x / p.bands) * p.ppb;
    const int band0 = (int)(blockIdx.x % p.bands) * p.band;
    const int np = (int)(p.planes - plane0 < p.ppb ? p.planes - plane0 : p.ppb);
    const int rows = (int)(p.p - band0 < p.band ? p.p - band0 : p.band);
    const int pitch = p.pitch, ra = p.rows_alloc, per_plane = ra * pitch;
    float *xs = sm, *ws = sm + (long long)p.ppb * per_plane, *bs = ws + p.ppb * K * K;
    const int iy0 = band0 * S - p.ph, ix0 = -p.pw, h = (int)p.h, wd = (int)p.wd;
    const int es = DT == KN_LA_F32 ? 4 : 2;
    // one 64-bit division a plane, not one an element (they made the
    // staging, not the taps, the kernel's cost)
    for (int pl = t0; pl < np; pl += nt) {
        const long long plane = plane0 + pl, ni = plane / p.c, ci = plane - ni * p.c;
        base[pl] = ni * p.xs[0] + ci * p.xs[1];
        chan[pl] = (int)ci;
        bs[pl] = p.bias ? kn_la_ld<float>(p.bias, p.b_dt, ci * p.bias_s) : 0.f;
    }
    __syncthreads();
    if (pitch >= 32) {
        // a warp a staged row: its lanes load neighbouring columns
        for (int row = t0 >> 5; row < np * ra; row += warps) {
            const int pl = row / ra, iy = iy0 + (row - pl * ra);
            float *dst = xs + (long long)row * pitch;
            const bool in_row = (unsigned)iy < (unsigned)h;
            const char *src = p.x + (base[pl] + (long long)iy * p.xs[2]) * es;
            for (int xx = lane; xx < pitch; xx += 32) {
                const int ix = ix0 + xx;
                dst[xx] = in_row && (unsigned)ix < (unsigned)wd ? kn_la_ld_t<DT>(src + (long long)ix * p.xs[3] * es, 0)
                                                                : 0.f;
            }
        }
    } else {
        // short rows (7x7 and 14x14 planes): a thread an element, or most
        // lanes of a warp a row would idle (5x5 layers 20-60% slower so)
        for (int e = t0; e < np * per_plane; e += nt) {
            const int row = e / pitch, xx = e - row * pitch, pl = row / ra;
            const int iy = iy0 + (row - pl * ra), ix = ix0 + xx;
            xs[e] = (unsigned)iy < (unsigned)h && (unsigned)ix < (unsigned)wd
                        ? kn_la_ld_t<DT>(p.x + (base[pl] + (long long)iy * p.xs[2] + (long long)ix * p.xs[3]) * es, 0)
                        : 0.f;
        }
    }
    for (int e = t0; e < np * K * K; e += nt) {
        const int pl = e / (K * K), tap = e - pl * (K * K);
        ws[e] = kn_la_ld_t<DT>(p.w + ((long long)chan[pl] * K * K + tap) * es, 0);
    }
    __syncthreads();
    const int q = (int)p.q, strips = (rows + 3) / 4, items = np * strips * q;
    constexpr int RR = 3 * S + K; // the staged rows four outputs of a column read
    for (int it = t0; it < items; it += nt) {
        const int pl = it / (strips * q), r = it - pl * strips * q, sy = r / q, ox = r - sy * q;
        const float *xc = xs + pl * per_plane + (sy * 4 * S) * pitch + ox * S, *wp = ws + pl * K * K;
        float acc[4];
#pragma unroll
        for (int o = 0; o < 4; o++) acc[o] = bs[pl];
#pragma unroll
        for (int kx = 0; kx < K; kx++) {
#pragma unroll
            for (int rr = 0; rr < RR; rr++) {
                const float v = xc[rr * pitch + kx];
#pragma unroll
                for (int o = 0; o < 4; o++) {
                    const int ky = rr - o * S; // the tap row of output o that staged row rr is
                    if (ky >= 0 && ky < K) acc[o] = fmaf(v, wp[ky * K + kx], acc[o]);
                }
            }
        }
        const long long plane = plane0 + pl;
        const int oy = band0 + sy * 4;
#pragma unroll
        for (int o = 0; o < 4; o++)
            if (sy * 4 + o < rows)
                kn_la_st<float>(p.y, DT, (plane * p.p + oy + o) * q + ox, kn_la_dw_act(p.act, acc[o]));
    }
}

// kn_la_conv_dw_nchw<K>_<dtype>: dynamic shared memory, sized by the host
// (kn_cuda_linalg_conv_dw_nchw) to at most 48 KB
extern "C" __global__ void __launch_bounds__(256) KN_LA_KERNEL(kn_la_dwc_args p)
{
    extern __shared__ float sm[];
    if (p.s == 1) kn_la_dw_nchw_body<KN_LA_DT, KN_LA_DW_WINDOW, 1>(p, sm);
    else kn_la_dw_nchw_body<KN_LA_DT, KN_LA_DW_WINDOW, 2>(p, sm);
}
#elif KN_LA_DW_WINDOW == 0
// kn_la_conv_dw_<dtype>: any window, stride and dilation. Blocks are
// (channel vector, pixel) pairs: blockDim.x vectors of one channel slice
// (blockIdx.y) by blockDim.y pixels; shared: the slice's weights (taps x
// 256 channels at most) and bias.
extern "C" __global__ void __launch_bounds__(256) KN_LA_KERNEL(kn_la_dw_args p)
{
    __shared__ float ws[KN_LA_DW_TAPS * 256];
    __shared__ float bs[256];
    if (p.vec) kn_la_dw_window<KN_LA_DT, KN_LA_DW_VEC>(p, ws, bs);
    else kn_la_dw_body<KN_LA_DT, 1, 0, 0>(p, ws, bs);
}
#else
// kn_la_conv_dw_strip<K>_<dtype>: 16-byte channel vectors only (p.vec),
// stride 1 or 2 along the row
extern "C" __global__ void __launch_bounds__(256, 2) KN_LA_KERNEL(kn_la_dw_args p)
{
    __shared__ float ws[KN_LA_DW_WINDOW * KN_LA_DW_WINDOW * 256];
    __shared__ float bs[256];
    if (p.sw == 1) kn_la_dw_strip_body<KN_LA_DT, KN_LA_DW_VEC, KN_LA_DW_WINDOW, 1>(p, ws, bs);
    else kn_la_dw_strip_body<KN_LA_DT, KN_LA_DW_VEC, KN_LA_DW_WINDOW, 2>(p, ws, bs);
}
#endif
