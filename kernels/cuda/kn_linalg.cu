// kn_linalg.cu: kiln's own matmul and conv2d kernels, the fallback behind
// cuBLASLt and cuDNN (kn_cuda_blas.c, kn_cuda_conv.c). The fallback runs whatever the libraries refuse (or when a library
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
// (the stem convolutions, a module per dtype), kn_la_dw.cu (the depthwise
// convolutions).
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

#endif // KN_LA_STANDALONE
