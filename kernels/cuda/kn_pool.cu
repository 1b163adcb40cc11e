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

extern "C" __global__ void kn_pool(kn_pool_args a)
{
    const int es = kn_esize<KN_DT>();
    for (long long e = kn_tid(); e < a.total; e += kn_nthreads()) {
        long long ox = e % a.ow, t = e / a.ow;
        long long oy = t % a.oh;
        t /= a.oh;
        long long ch = t % a.c, n = t / a.c;
        long long ys, ye, ystep, ydiv, xs, xe, xstep, xdiv;
        kn_pool_axis(a, 0, oy, a.h, a.oh, &ys, &ye, &ystep, &ydiv);
        kn_pool_axis(a, 1, ox, a.w, a.ow, &xs, &xe, &xstep, &xdiv);
        const char *plane = a.x + (n * a.sn + ch * a.sc) * es;
        double r;
        if (a.op == KN_TP_MAX) {
            double m = -__longlong_as_double(0x7ff0000000000000LL);
            bool nan = false;
            for (long long y = ys; y < ye; y += ystep)
                for (long long x = xs; x < xe; x += xstep) {
                    double v = kn_ldd<KN_DT>(plane + (y * a.sh + x * a.sw) * es);
                    m = v > m ? v : m;
                    nan |= v != v;
                }
            r = nan ? kn_qnan() : m;
        } else {
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
            r = div > 0 ? s / (double)div : 0.0;
        }
        kn_std<KN_DT>(a.out + e * es, r);
    }
}

// A global average pool (adaptive, output 1 x 1) of a channels-last input
// (channel stride 1: the view the layout pass leaves after a conv chain).
// A block takes 32 channels of one image, its eight warps eight slices of
// the window; lanes read 32 neighbouring channels at once. The slices'
// double sums are added in slice order, so a result equals the CPU's
// sequential double sum wherever that sum is exact (inputs of f32 or
// narrower whose magnitudes span less than ~2^20); elsewhere they may
// differ in the last bit. Launched with 256 threads a block.
extern "C" __global__ void kn_pool_gap(kn_pool_args a)
{
    __shared__ double part[8][32];
    const int es = kn_esize<KN_DT>();
    int lane = threadIdx.x & 31, slice = threadIdx.x >> 5;
    long long groups = (a.c + 31) / 32, hw = a.h * a.w;
    for (long long b = blockIdx.x; b < a.n * groups; b += gridDim.x) {
        long long n = b / groups, ch = (b % groups) * 32 + lane;
        double s = 0.0;
        if (ch < a.c) {
            const char *base = a.x + (n * a.sn + ch * a.sc) * es;
            // the slice's positions i, i + 8, ... as (y, x), stepped
            // without divisions (64-bit divisions per load made this
            // kernel 10 us on convnet's 32x256x14x14 pool)
            long long i = slice, y = slice / a.w, x = slice % a.w;
            // eight loads in flight before their adds (in order); with
            // four, convnet's 14 x 14 window was seven waits a warp
            for (; i + 56 < hw; i += 64) {
                double v[8];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    v[j] = kn_ldd<KN_DT>(base + (y * a.sh + x * a.sw) * es);
                    for (x += 8; x >= a.w; x -= a.w) y++;
                }
#pragma unroll
                for (int j = 0; j < 8; j++) s += v[j];
            }
            for (; i < hw; i += 8) {
                s += kn_ldd<KN_DT>(base + (y * a.sh + x * a.sw) * es);
                for (x += 8; x >= a.w; x -= a.w) y++;
            }
        }
        part[slice][lane] = s;
        __syncthreads();
        if (slice == 0 && ch < a.c) {
            double t = 0.0;
            for (int k = 0; k < 8; k++) t += part[k][lane];
            kn_std<KN_DT>(a.out + (n * a.c + ch) * es, hw > 0 ? t / (double)hw : 0.0);
        }
        __syncthreads();
    }
}

// A global average pool of contiguous planes (NCHW: each channel's h x w
// elements in a row), a warp a plane: lanes read neighbouring elements,
// four loads in flight before their adds, and the lanes' double sums meet
// in a butterfly. One thread a plane, summing in the CPU's order, took 21
// us on convnet's 32x256x14x14 pool (H100, f32): 8192 threads, each with
// 196 dependent adds. Like kn_pool_gap, a result equals the CPU's
// sequential double sum wherever that sum is exact (inputs of f32 or
// narrower whose magnitudes span less than ~2^20); the host sends f64
// here never, as its double sums are not exact. KN_T_BLOCK threads a block.
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
