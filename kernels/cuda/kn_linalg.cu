// kn_linalg.cu: kiln's own matmul and conv2d kernels, the fallback behind
// cuBLASLt and cuDNN (kn_cuda_blas.c, kn_cuda_dnn.c), and the depthwise
// conv. The fallback runs whatever the libraries refuse (or when a library
// is missing), so it takes any strides and any mix of float dtypes, and it
// sums the way the CPU reference does: in f32 (f64 for an f64 result), k in
// order, one rounding at the store. NVRTC compiles kiln's modules with
// --fmad=false, so a multiply and an add round separately as on the CPU.
//
// One NVRTC module (kn_cuda_linalg.c): the argument structs
// (kn_cuda_la_args.h), the helpers of kn_la_common.cu, then this file. The
// other kernels of kiln's own linear algebra have modules of their own, so
// that a model compiles only what it runs: kn_la_aux.cu (bias and
// activation, the channels-last copy), kn_la_stem.cu and kn_la_stem_tc.cu
// (the stem convolutions, a module per dtype).
#ifdef KN_LA_STANDALONE

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

template <int DT, int VEC>
__device__ void kn_la_dw_body(const kn_la_dw_args &p, float *ws, float *bs)
{
    const int es = DT == KN_LA_F32 ? 4 : 2;
    const int lanes = (int)blockDim.x, rows = (int)blockDim.y, width = lanes * VEC;
    const int taps = p.r * p.s, tid = (int)(threadIdx.y * blockDim.x + threadIdx.x);
    const long long slice0 = (long long)blockIdx.y * width;
    for (int i = tid; i < taps * width; i += lanes * rows) {
        int tap = i / width, j = i % width;
        long long ch = slice0 + j;
        ws[i] = ch < p.c ? kn_la_ld_t<DT>(p.w, (int)(ch * taps + tap)) : 0.f;
    }
    for (int j = tid; j < width; j += lanes * rows)
        bs[j] = p.bias && slice0 + j < p.c ? kn_la_ld<float>(p.bias, p.b_dt, (slice0 + j) * p.bias_s) : 0.f;
    __syncthreads();
    const long long c0 = slice0 + (long long)threadIdx.x * VEC;
    if (c0 >= p.c) return;
    const unsigned npix = (unsigned)(p.n * p.p * p.q), q = (unsigned)p.q, pp = (unsigned)p.p;
    const int h = (int)p.h, wd = (int)p.wd;
    const float *wl = ws + threadIdx.x * VEC, *bl = bs + threadIdx.x * VEC;
    for (unsigned pix = blockIdx.x * rows + threadIdx.y; pix < npix; pix += gridDim.x * rows) {
        unsigned t = pix / q, ox = pix % q, oy = t % pp, ni = t / pp;
        const char *xb = p.x + ((long long)ni * p.xs[0] + c0 * p.xs[3]) * es;
        int iy0 = (int)oy * p.sh - p.ph, ix0 = (int)ox * p.sw - p.pw;
        float acc[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j++) acc[j] = 0.f;
        for (int ky = 0; ky < p.r; ky++) {
            int iy = iy0 + ky * p.dh;
            if (iy < 0 || iy >= h) continue;
            for (int kx = 0; kx < p.s; kx++) {
                int ix = ix0 + kx * p.dw;
                if (ix < 0 || ix >= wd) continue;
                float xv[VEC];
                kn_la_dw_load<DT, VEC>(xb + (iy * p.xs[1] + ix * p.xs[2]) * es, xv);
                const float *wr = wl + (ky * p.s + kx) * width;
#pragma unroll
                for (int j = 0; j < VEC; j++) acc[j] = fmaf(xv[j], wr[j], acc[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            float v = acc[j] + bl[j];
            if (p.act == 1) v = v > 0.f ? v : (v == v ? 0.f : v); // NaN passes, as relu on the CPU
            acc[j] = v;
        }
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

// shared: the slice's weights (taps x 32 lanes x 8 channels at most) and bias
extern "C" __global__ void __launch_bounds__(256) kn_la_conv_dw(kn_la_dw_args p)
{
    __shared__ float ws[KN_LA_DW_TAPS * 256];
    __shared__ float bs[256];
    if (p.dt == KN_LA_BF16) {
        if (p.vec) kn_la_dw_body<KN_LA_BF16, 8>(p, ws, bs);
        else kn_la_dw_body<KN_LA_BF16, 1>(p, ws, bs);
    } else if (p.dt == KN_LA_F16) {
        if (p.vec) kn_la_dw_body<KN_LA_F16, 8>(p, ws, bs);
        else kn_la_dw_body<KN_LA_F16, 1>(p, ws, bs);
    } else {
        if (p.vec) kn_la_dw_body<KN_LA_F32, 4>(p, ws, bs);
        else kn_la_dw_body<KN_LA_F32, 1>(p, ws, bs);
    }
}


#endif // KN_LA_STANDALONE
