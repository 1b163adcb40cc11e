// kn_la_aux.cu: the small kernels kiln runs around a cuBLASLt or cuDNN
// call when the library cannot do their part itself: the bias and
// activation after a matmul or conv (kn_cuda_bias_act), the copy of an
// NCHW input into a channels-last one (kn_cuda_linalg_to_nhwc), and the sum
// of the split-f32 GEMM's split-K partials (kn_cuda_gemm_x3.c). A module of
// its own (kn_cuda_linalg.c), so that a model which needs one of them does
// not compile the fallback convolutions with them.

// ---- channels-last input: y [n, h, w, cp] = x [n, c, h, w], zero past c.
// Bytes move as they are (no dtype conversion). Few channels (an image's,
// padded to 16 bytes: the usual chain entry): a thread per pixel, its cp
// values stored together, the pixel's indices divided out once; with an
// element a thread and its six 64-bit divisions, convnet's 32x3x224x224
// took 60 us (H200). More channels: a thread per element of y, so the
// stores are coalesced. ----
template <typename T>
__device__ void kn_la_nhwc_body(const kn_la_nhwc_args &p)
{
    if (p.cp <= 8) {
        const long long pixels = p.n * p.h * p.w;
        for (long long px = (long long)blockIdx.x * blockDim.x + threadIdx.x; px < pixels;
             px += (long long)gridDim.x * blockDim.x) {
            const long long t = px / p.w, wx = px - t * p.w, ni = t / p.h, hy = t - ni * p.h;
            const T *src = (const T *)p.x + ni * p.xs[0] + hy * p.xs[2] + wx * p.xs[3];
            T v[8];
#pragma unroll
            for (int c = 0; c < 8; c++) v[c] = c < p.c ? src[c * p.xs[1]] : (T)0;
            T *dst = (T *)p.y + px * p.cp;
            for (int c = 0; c < p.cp; c++) dst[c] = v[c];
        }
        return;
    }
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

// ---- y = act(y + bias[channel]) in place, channel = (i / inner) % channels;
// act as kn_la_act ----
template <typename Acc>
__device__ void kn_la_bias_body(const kn_la_bias_args &p)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.total;
         i += (long long)gridDim.x * blockDim.x) {
        Acc v = kn_la_ld<Acc>(p.y, p.y_dt, i);
        if (p.bias) v = v + kn_la_ld<Acc>(p.bias, p.b_dt, ((i / p.inner) % p.channels) * p.bias_s);
        kn_la_st<Acc>(p.y, p.y_dt, i, kn_la_act<Acc>(v, p.act));
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

// ---- kn_la_gemm_x3's split-K (kn_cuda_la_args.h): y = act(the splits'
// partial sums, added in split order, + bias + res); the order is fixed,
// so a result does not depend on timing. A thread takes 4 columns of a
// row, blockIdx.y strides over the batches' rows: the index arithmetic
// is a row's, not an element's (the 64-bit divisions of a flat index per
// element, with scalar loads, made this 7.8 us for large_linear's eight
// splits of 64x4096, this form 6.6, ncu on the H200 with its caches
// flushed, session 19) ----

extern "C" __global__ void __launch_bounds__(256) kn_la_gemm_x3_sum(kn_la_gemm_args p)
{
    const long long plane = p.m * p.n, rows = p.batches * p.m;
    const long long c = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (c >= p.n) return;
    const int w = p.n - c >= 4 ? 4 : (int)(p.n - c);
    // the planes' rows start on 16 bytes when n is a multiple of 4 (the
    // pool's blocks are 256-byte aligned)
    const bool v4 = w == 4 && p.n % 4 == 0;
    const float *bias = (const float *)p.bias, *res = (const float *)p.res;
    for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
        const long long z = row / p.m, r = row - z * p.m;
        const float *src = (const float *)p.ws + z * p.splits * plane + r * p.n + c;
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        if (v4) {
#pragma unroll 8
            for (int s = 0; s < p.splits; s++) {
                const float4 t = *(const float4 *)(src + s * plane);
                v[0] += t.x, v[1] += t.y, v[2] += t.z, v[3] += t.w;
            }
        } else {
            for (int s = 0; s < p.splits; s++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (e < w) v[e] += src[s * plane + e];
        }
        const long long o = z * p.sy + kn_la_scatter_row(p.ys, r) * p.ldy + c;
        float *y = (float *)p.y + o;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (e >= w) break;
            if (bias) v[e] += bias[c + e];
            if (res) v[e] += res[o + e];
            v[e] = kn_la_act<float>(v[e], p.act);
        }
        if (w == 4 && ((unsigned long long)y & 15) == 0) *(float4 *)y = make_float4(v[0], v[1], v[2], v[3]);
        else
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (e < w) y[e] = v[e];
    }
}

// The weights of a strided convolution's input-gradient classes
// (kn_la_dgrad_weight_args): a thread an element of w, read in order
extern "C" __global__ void __launch_bounds__(256) kn_la_conv_dgrad_weight(kn_la_dgrad_weight_args p)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= p.n) return;
    long long q = e;
    const int ci = (int)(q % p.c);
    q /= p.c;
    const int si = (int)(q % p.s);
    q /= p.s;
    const int ri = (int)(q % p.r);
    const int ki = (int)(q / p.r);
    // the class whose taps r and s are: r = a + ph (mod sh)
    const int a = ((ri - p.ph) % p.sh + p.sh) % p.sh, b = ((si - p.pw) % p.sw + p.sw) % p.sw;
    const int t = (p.rl[a] - ri) / p.sh, u = (p.sl[b] - si) / p.sw;
    float *out = (float *)p.out + p.base[a * p.sw + b];
    out[(((long long)ci * p.rc[a] + t) * p.sc[b] + u) * p.k + ki] = ((const float *)p.w)[e];
}
