/* kn_pool.cu: max_pool2d, avg_pool2d and adaptive_avg_pool2d, one thread
 * per output (kernels/cpu/kn_cpu_conv.c is the reference).
 *
 * Windows, their clipping and the avg divisor follow the CPU's
 * pool_axis_fill line for line, and each window is read in the CPU's order
 * with a double accumulator, so every result is the CPU's to the bit.
 */

/* Taps [*st, *en) stepping *step along one axis of length `in`, for output
 * i of `out`; *div is the avg divisor's factor. */
KN_FN void kn_pool_axis(const kn_pool_args &a, int d, long long i, long long in, long long out,
                        long long *st, long long *en, long long *step, long long *div)
{
    long long k = d ? a.kw : a.kh, s = d ? a.sx : a.sy, p = d ? a.px : a.py, dil = d ? a.dx : a.dy;
    long long b, e, dv;
    *step = a.op == KN_TP_MAX ? dil : 1;
    if (a.op == KN_TP_ADAPTIVE) {
        b = i * in / out;
        e = ((i + 1) * in + out - 1) / out;
        dv = e - b;
    } else if (a.op == KN_TP_MAX) {
        b = i * s - p;
        e = b + (k - 1) * dil + 1;
        if (b < 0) b += (-b + dil - 1) / dil * dil; /* first tap inside */
        dv = 1;
    } else {
        b = i * s - p;
        e = b + k;
        if (e > in + p) e = in + p;
        dv = e - b; /* the padded extent */
        if (b < 0) b = 0;
    }
    if (e > in) e = in;
    if (b > e) b = e;
    if (a.op == KN_TP_AVG && !a.count_include_pad) dv = e - b;
    *st = b;
    *en = e;
    *div = dv;
}

// One output of the pool: image n, channel ch, at (oy, ox).
KN_FN double kn_pool_one(const kn_pool_args &a, long long n, long long ch, long long oy, long long ox)
{
    const int es = kn_esize<KN_DT>();
    long long ys, ye, ystep, ydiv, xs, xe, xstep, xdiv;
    kn_pool_axis(a, 0, oy, a.h, a.oh, &ys, &ye, &ystep, &ydiv);
    kn_pool_axis(a, 1, ox, a.w, a.ow, &xs, &xe, &xstep, &xdiv);
    const char *plane = a.x + (n * a.sn + ch * a.sc) * es;
    if (a.op == KN_TP_MAX) {
        double m = -__longlong_as_double(0x7ff0000000000000LL);
        bool nan = false;
        for (long long y = ys; y < ye; y += ystep)
            for (long long x = xs; x < xe; x += xstep) {
                double v = kn_ldd<KN_DT>(plane + (y * a.sh + x * a.sw) * es);
                m = v > m ? v : m;
                nan |= v != v;
            }
        return nan ? kn_qnan() : m;
    }
    double s = 0.0;
    // eight loads in flight before their adds, which stay in the
    // CPU's order: a global average pool's window (14 x 14 in the
    // convnet) was one load-to-use wait per element
    for (long long y = ys; y < ye; y++) {
        const char *row = plane + y * a.sh * es;
        long long x = xs;
        for (; x + 8 <= xe; x += 8) {
            double v[8];
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = kn_ldd<KN_DT>(row + (x + j) * a.sw * es);
#pragma unroll
            for (int j = 0; j < 8; j++) s += v[j];
        }
        for (; x < xe; x++) s += kn_ldd<KN_DT>(row + x * a.sw * es);
    }
    long long div = ydiv * xdiv;
    return div > 0 ? s / (double)div : 0.0;
}

// Contiguous NCHW output, one thread per output.
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_pool)
extern "C" __global__ void kn_pool(kn_pool_args a)
{
    const int es = kn_esize<KN_DT>();
    for (long long e = kn_tid(); e < a.total; e += kn_nthreads()) {
        long long ox = e % a.ow, t = e / a.ow;
        long long oy = t % a.oh;
        t /= a.oh;
        long long ch = t % a.c, n = t / a.c;
        kn_std<KN_DT>(a.out + e * es, kn_pool_one(a, n, ch, oy, ox));
    }
}
#endif

// The layout pass's channels-last pool: output {N, OH, OW, C} contiguous,
// one thread per output with the channel fastest, so that a warp's loads of
// each tap are 32 neighbouring channels of one pixel (a channels-last input
// has channel stride 1). The NCHW-ordered kernel above, given the same
// view, made each warp's loads C elements apart: resnet18's max_pool2d
// (bf16, 32x64x112x112, H100) took 352 us, 5% of its roofline. 32-bit
// index arithmetic where the output allows it.
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_pool_nhwc)
extern "C" __global__ void kn_pool_nhwc(kn_pool_args a)
{
    const int es = kn_esize<KN_DT>();
    if (a.total < 2147483647LL) {
        unsigned c = (unsigned)a.c, ow = (unsigned)a.ow, oh = (unsigned)a.oh;
        for (long long e = kn_tid(); e < a.total; e += kn_nthreads()) {
            unsigned u = (unsigned)e, ch = u % c, t = u / c, ox = t % ow;
            t /= ow;
            unsigned oy = t % oh, n = t / oh;
            kn_std<KN_DT>(a.out + e * es, kn_pool_one(a, n, ch, oy, ox));
        }
        return;
    }
    for (long long e = kn_tid(); e < a.total; e += kn_nthreads()) {
        long long ch = e % a.c, t = e / a.c, ox = t % a.ow;
        t /= a.ow;
        long long oy = t % a.oh, n = t / a.oh;
        kn_std<KN_DT>(a.out + e * es, kn_pool_one(a, n, ch, oy, ox));
    }
}
#endif

// kn_pool_nhwc with 16 bytes of channels a thread (8 bf16 / f16, 4 f32,
// 2 f64), when the channel count and the input's strides and pointers allow
// it: one window computation and one 16-byte load per tap for 16 / esize
// outputs. Each channel's result is kn_pool_one's (the same taps in the
// same order, the same double sum).
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_pool_nhwc_vec)
extern "C" __global__ void kn_pool_nhwc_vec(kn_pool_args a)
{
    constexpr int es = kn_esize<KN_DT>(), vec = 16 / es;
    const unsigned cv = (unsigned)(a.c / vec), ow = (unsigned)a.ow, oh = (unsigned)a.oh;
    const long long vectors = a.total / vec;
    for (long long e = kn_tid(); e < vectors; e += kn_nthreads()) {
        unsigned u = (unsigned)e, v = u % cv, t = u / cv, ox = t % ow;
        t /= ow;
        unsigned oy = t % oh, n = t / oh;
        long long ys, ye, ystep, ydiv, xs, xe, xstep, xdiv;
        kn_pool_axis(a, 0, oy, a.h, a.oh, &ys, &ye, &ystep, &ydiv);
        kn_pool_axis(a, 1, ox, a.w, a.ow, &xs, &xe, &xstep, &xdiv);
        const char *base = a.x + ((long long)n * a.sn + (long long)v * vec) * es;
        double r[vec];
        bool nan[vec];
#pragma unroll
        for (int j = 0; j < vec; j++) {
            r[j] = a.op == KN_TP_MAX ? -__longlong_as_double(0x7ff0000000000000LL) : 0.0;
            nan[j] = false;
        }
        if (a.op == KN_TP_MAX && es <= 4) {
            // a max of f32 or narrower is exact in f32: no double math
            // (the double compares and 64-bit offsets held resnet18's max
            // pool at 73 us, 23% of its roofline); an image's offsets fit
            // 32 bits where the host says so (a.total bounds them)
            float m[vec];
#pragma unroll
            for (int j = 0; j < vec; j++) m[j] = -__int_as_float(0x7f800000);
            if (a.kh <= 3 && a.kw <= 3) {
                // a window of at most 3 x 3 (ResNet's): all its loads in
                // flight before the compares (one at a time, each waited
                // for, held the pool at 55 us: 31% of its roofline); the
                // taps are the window's inside the input, as kn_pool_axis
                // clips them
                uint4 w[9];
                bool in[9];
#pragma unroll
                for (int t = 0; t < 9; t++) {
                    int ky = t / 3, kx = t % 3;
                    int y = (int)oy * a.sy - a.py + ky * a.dy, x = (int)ox * a.sx - a.px + kx * a.dx;
                    in[t] = ky < a.kh && kx < a.kw && y >= 0 && y < (int)a.h && x >= 0 && x < (int)a.w;
                    if (in[t]) w[t] = *(const uint4 *)(base + ((long long)y * a.sh + (long long)x * a.sw) * es);
                }
#pragma unroll
                for (int t = 0; t < 9; t++) {
                    if (!in[t]) continue;
                    const char *q = (const char *)&w[t];
#pragma unroll
                    for (int j = 0; j < vec; j++) {
                        float d;
                        if constexpr (KN_DT == KN_DT_BF16) d = kn_ld_bf16(((const kn_u16 *)q)[j]);
                        else if constexpr (KN_DT == KN_DT_F16) d = kn_ld_f16(((const kn_u16 *)q)[j]);
                        else d = (float)kn_ldd<KN_DT>(q + j * es);
                        m[j] = d > m[j] ? d : m[j];
                        nan[j] |= d != d;
                    }
                }
                ye = ys; // the loop below has nothing left to do
            }
            for (int y = (int)ys; y < (int)ye; y += (int)ystep)
                for (int x = (int)xs; x < (int)xe; x += (int)xstep) {
                    uint4 w = *(const uint4 *)(base + ((long long)y * a.sh + (long long)x * a.sw) * es);
                    const char *q = (const char *)&w;
#pragma unroll
                    for (int j = 0; j < vec; j++) {
                        float d;
                        if constexpr (KN_DT == KN_DT_BF16) d = kn_ld_bf16(((const kn_u16 *)q)[j]);
                        else if constexpr (KN_DT == KN_DT_F16) d = kn_ld_f16(((const kn_u16 *)q)[j]);
                        else d = (float)kn_ldd<KN_DT>(q + j * es);
                        m[j] = d > m[j] ? d : m[j];
                        nan[j] |= d != d;
                    }
                }
#pragma unroll
            for (int j = 0; j < vec; j++) r[j] = m[j];
        } else {
            for (long long y = ys; y < ye; y += ystep)
                for (long long x = xs; x < xe; x += xstep) {
                    uint4 w = *(const uint4 *)(base + (y * a.sh + x * a.sw) * es);
                    const char *q = (const char *)&w;
#pragma unroll
                    for (int j = 0; j < vec; j++) {
                        double d = kn_ldd<KN_DT>(q + j * es);
                        if (a.op == KN_TP_MAX) {
                            r[j] = d > r[j] ? d : r[j];
                            nan[j] |= d != d;
                        } else {
                            r[j] += d;
                        }
                    }
                }
        }
        long long div = ydiv * xdiv;
        uint4 out;
        char *o = (char *)&out;
#pragma unroll
        for (int j = 0; j < vec; j++)
            kn_std<KN_DT>(o + j * es, a.op == KN_TP_MAX ? (nan[j] ? kn_qnan() : r[j])
                                                         : (div > 0 ? r[j] / (double)div : 0.0));
        *(uint4 *)(a.out + e * 16) = out;
    }
}
#endif

// A max pool with windows of at most 3 x 3 (ResNet's stem pool) on a
// channels-last input, 16 bytes of channels a thread, in the dtype's own
// packed max with NaN (max.NaN.bf16x2 / f16x2 / f32: a NaN in the window
// gives NaN, as on the CPU; the max of values is one of them, so no
// rounding): the window's nine loads in flight, then 4-8 max
// instructions a tap. kn_pool_nhwc_vec, converting every channel to f32
// and tracking NaNs apart, ran resnet18's pool (bf16, 32x64x112x112) at
// 53.6 us, 33% of its roofline (H100). Taps outside the input are left
// out, as kn_pool_axis clips them; an empty window gives -inf.
template <int D>
__device__ __forceinline__ unsigned kn_max2_nan(unsigned a, unsigned b)
{
    unsigned d;
    if constexpr (D == KN_DT_BF16) asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    else if constexpr (D == KN_DT_F16) asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    else asm("max.NaN.f32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_pool_max3_nhwc_vec)
extern "C" __global__ void kn_pool_max3_nhwc_vec(kn_pool_args a)
{
    if constexpr (KN_DT == KN_DT_BF16 || KN_DT == KN_DT_F16 || KN_DT == KN_DT_F32) {
        constexpr int es = kn_esize<KN_DT>(), vec = 16 / es;
        constexpr unsigned ninf = KN_DT == KN_DT_BF16 ? 0xff80ff80u : KN_DT == KN_DT_F16 ? 0xfc00fc00u : 0xff800000u;
        const unsigned cv = (unsigned)(a.c / vec), ow = (unsigned)a.ow, oh = (unsigned)a.oh;
        const int h = (int)a.h, w = (int)a.w;
        const long long vectors = a.total / vec;
        for (long long e = kn_tid(); e < vectors; e += kn_nthreads()) {
            unsigned u = (unsigned)e, v = u % cv, t = u / cv, ox = t % ow;
            t /= ow;
            unsigned oy = t % oh, n = t / oh;
            const int y0 = (int)oy * a.sy - a.py, x0 = (int)ox * a.sx - a.px;
            const char *base = a.x + ((long long)n * a.sn + (long long)v * vec) * es;
            uint4 tap[9];
            bool in[9];
#pragma unroll
            for (int k = 0; k < 9; k++) {
                const int ky = k / 3, kx = k % 3, y = y0 + ky * a.dy, x = x0 + kx * a.dx;
                in[k] = ky < a.kh && kx < a.kw && (unsigned)y < (unsigned)h && (unsigned)x < (unsigned)w;
                if (in[k]) tap[k] = *(const uint4 *)(base + ((long long)y * a.sh + (long long)x * a.sw) * es);
            }
            uint4 m = make_uint4(ninf, ninf, ninf, ninf);
#pragma unroll
            for (int k = 0; k < 9; k++) {
                if (!in[k]) continue;
                m.x = kn_max2_nan<KN_DT>(m.x, tap[k].x);
                m.y = kn_max2_nan<KN_DT>(m.y, tap[k].y);
                m.z = kn_max2_nan<KN_DT>(m.z, tap[k].z);
                m.w = kn_max2_nan<KN_DT>(m.w, tap[k].w);
            }
            *(uint4 *)(a.out + e * 16) = m;
        }
    }
}
#endif

// A global average pool (adaptive, output 1 x 1) of a channels-last input
// (channel stride 1: the view the layout pass leaves after a conv chain).
// A block takes 32 channels of one image, its warps (8, or 32 when the
// images' channel groups are too few to fill the GPU: a squeeze-excitation
// pool of 16 x 72 channels is 48 groups) slices of the window; lanes read
// 32 neighbouring channels at once. The slices' double sums are added in
// slice order, so a result equals the CPU's sequential double sum wherever
// that sum is exact (inputs of f32 or narrower whose magnitudes span less
// than ~2^20); elsewhere they may differ in the last bit. Launched with 256
// or 1024 threads a block.
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_pool_gap)
extern "C" __global__ void __launch_bounds__(1024) kn_pool_gap(kn_pool_args a)
{
    __shared__ double part[32][32];
    const int es = kn_esize<KN_DT>();
    const int lane = threadIdx.x & 31, slice = threadIdx.x >> 5, slices = blockDim.x >> 5;
    long long groups = (a.c + 31) / 32, hw = a.h * a.w;
    for (long long b = blockIdx.x; b < a.n * groups; b += gridDim.x) {
        long long n = b / groups, ch = (b % groups) * 32 + lane;
        double s = 0.0;
        if (ch < a.c) {
            const char *base = a.x + (n * a.sn + ch * a.sc) * es;
            // the slice's positions i, i + slices, ... as (y, x), stepped
            // without divisions (64-bit divisions per load made this
            // kernel 10 us on convnet's 32x256x14x14 pool)
            long long i = slice, y = slice / a.w, x = slice % a.w;
            // eight loads in flight before their adds (in order); with
            // four, convnet's 14 x 14 window was seven waits a warp
            for (; i + 7 * slices < hw; i += 8 * slices) {
                double v[8];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    v[j] = kn_ldd<KN_DT>(base + (y * a.sh + x * a.sw) * es);
                    for (x += slices; x >= a.w; x -= a.w) y++;
                }
#pragma unroll
                for (int j = 0; j < 8; j++) s += v[j];
            }
            for (; i < hw; i += slices) {
                s += kn_ldd<KN_DT>(base + (y * a.sh + x * a.sw) * es);
                for (x += slices; x >= a.w; x -= a.w) y++;
            }
        }
        part[slice][lane] = s;
        __syncthreads();
        if (slice == 0 && ch < a.c) {
            double t = 0.0;
            for (int k = 0; k < slices; k++) t += part[k][lane];
            kn_std<KN_DT>(a.out + (n * a.c + ch) * es, hw > 0 ? t / (double)hw : 0.0);
        }
        __syncthreads();
    }
}
#endif

// kn_pool_gap with 16 bytes of channels a thread (8 bf16 / f16, 4 f32),
// for a channels-last input whose channels, strides and pointers allow it:
// a squeeze-excitation's pool (MobileNetV3: 16 images x 72-960 channels).
// A block takes one image's channels, or a slice of at most 32 vectors of
// them; its threads are (vector, pixel slot) pairs, each summing the
// pixels slot, slot + slots, ... with four loads in flight, and the slots'
// double sums are added in slot order in shared memory. kn_pool_gap, with
// lanes of one 2-byte channel and 48 blocks for 16 x 72 channels, ran
// these pools at 240-400 GB/s (7.6 us for 1.8 MB, H100); this one took
// 3.6-9.3 us on MobileNetV3's (52.5 us against 54.6 in all). Blocks of
// channel slices, so that the grid fills every SM, measured twice as slow
// (a slice of one vector leaves a warp's loads one 16-byte piece of 32
// lines); splitting the pixels over blocks, with a reduction across them,
// is what is left. Sums as kn_pool_gap's: equal to the CPU's where its
// double sum is exact. Launched with KN_GAP_VEC_BLOCK threads a block; not
// for f64.
#define KN_GAP_VEC_BLOCK 512
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_pool_gap_vec)
extern "C" __global__ void __launch_bounds__(KN_GAP_VEC_BLOCK) kn_pool_gap_vec(kn_pool_args a)
{
    constexpr int es = kn_esize<KN_DT>(), vec = 16 / es;
    // one-byte dtypes' modules compile this too; the host never sends them
    __shared__ double part[KN_GAP_VEC_BLOCK * (vec > 8 ? 1 : vec)];
    if constexpr (vec > 8) return;
    const long long cv = a.c / vec, hw = a.h * a.w;
    const int slices = (int)((cv + 31) / 32), lanes = (int)((cv + slices - 1) / slices);
    const int slots = KN_GAP_VEC_BLOCK / lanes, tid = (int)threadIdx.x, lane = tid % lanes, slot = tid / lanes;
    for (long long b = blockIdx.x; b < a.n * slices; b += gridDim.x) {
        const long long n = b / slices, v = (b % slices) * lanes + lane;
        double s[vec];
#pragma unroll
        for (int j = 0; j < vec; j++) s[j] = 0.0;
        if (slot < slots && v < cv) {
            const char *base = a.x + (n * a.sn + v * vec) * es;
            long long i = slot, y = slot / a.w, x = slot % a.w;
            for (; i < hw; i += 4 * slots) {
                uint4 w[4];
                bool in[4];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    in[k] = i + (long long)k * slots < hw;
                    if (in[k]) w[k] = *(const uint4 *)(base + (y * a.sh + x * a.sw) * es);
                    for (x += slots; x >= a.w; x -= a.w) y++;
                }
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    if (!in[k]) continue;
                    const char *q = (const char *)&w[k];
#pragma unroll
                    for (int j = 0; j < vec; j++) {
                        if constexpr (KN_DT == KN_DT_BF16) s[j] += (double)kn_ld_bf16(((const kn_u16 *)q)[j]);
                        else if constexpr (KN_DT == KN_DT_F16) s[j] += (double)kn_ld_f16(((const kn_u16 *)q)[j]);
                        else s[j] += kn_ldd<KN_DT>(q + j * es);
                    }
                }
            }
        }
#pragma unroll
        for (int j = 0; j < vec; j++) part[tid * vec + j] = s[j];
        __syncthreads();
        const long long ch = (b % slices) * lanes * vec + tid;
        if (tid < lanes * vec && ch < a.c) {
            const int l = tid / vec, j = tid % vec;
            double t = 0.0;
            for (int k = 0; k < slots; k++) t += part[(k * lanes + l) * vec + j];
            kn_std<KN_DT>(a.out + (n * a.c + ch) * es, hw > 0 ? t / (double)hw : 0.0);
        }
        __syncthreads();
    }
}
#endif

// A global average pool of contiguous planes (NCHW: each channel's h x w
// elements in a row), a warp a plane: lanes read neighbouring elements,
// four loads in flight before their adds, and the lanes' double sums meet
// in a butterfly. One thread a plane, summing in the CPU's order, took 21
// us on convnet's 32x256x14x14 pool (H100, f32): 8192 threads, each with
// 196 dependent adds. Like kn_pool_gap, a result equals the CPU's
// sequential double sum wherever that sum is exact (inputs of f32 or
// narrower whose magnitudes span less than ~2^20); the host sends f64
// here never, as its double sums are not exact. KN_T_BLOCK threads a block.
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_pool_gap_planes)
extern "C" __global__ void kn_pool_gap_planes(kn_pool_args a)
{
    const int es = kn_esize<KN_DT>();
    const int lane = threadIdx.x & 31, wpb = KN_T_BLOCK / 32;
    long long hw = a.h * a.w, planes = a.n * a.c;
    for (long long p = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); p < planes; p += (long long)gridDim.x * wpb) {
        long long n = p / a.c, ch = p % a.c;
        const char *base = a.x + (n * a.sn + ch * a.sc) * es;
        double s = 0.0;
        long long i = lane;
        for (; i + 96 < hw; i += 128) {
            double v[4];
#pragma unroll
            for (int j = 0; j < 4; j++) v[j] = kn_ldd<KN_DT>(base + (i + 32 * j) * es);
#pragma unroll
            for (int j = 0; j < 4; j++) s += v[j];
        }
        for (; i < hw; i += 32) s += kn_ldd<KN_DT>(base + i * es);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) kn_std<KN_DT>(a.out + p * es, hw > 0 ? s / (double)hw : 0.0);
    }
}
#endif
