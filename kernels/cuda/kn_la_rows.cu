// kn_la_rows.cu: y = act(a . b^T + bias) for a few rows of a (M up to
// 16 a pass), in strict f32 on the CUDA cores: the fully connected layers
// of a squeeze-excitation block (1x1 convs of one pixel) and a batch's
// classifier. cuBLASLt's heuristic picks for M = 16 in f32 ran at 1-4% of
// their roofline (MobileNetV3 on an H200: 16 x 480 -> 120 took 54 us, 16 x
// 960 -> 240 8.5 us; its bf16 GEMMs of the same shapes 3 us). The work is
// reading b once. One module a dtype (KN_LA_DT), the kernel named by
// KN_LA_KERNEL (kn_cuda_linalg.c).
#define KN_LA_ROWS_MT 16
#define KN_LA_ROWS_WARPS 8

// A block takes one column of y (one row of b); its warps split k (warp w,
// lane l: k = 32 w + l, then 256 on), each summing every row of a at once
// over its part, so all the loads are in flight together; the warps then
// sum their lanes by shuffles and the block their partials in shared
// memory. One warp a column (the first version) left most SMs with two
// warps to hide the loads' latency: 16 x 960 -> 240 took 40 us.
template <int DT>
__device__ void kn_la_rows_body(const kn_la_rows_args &p)
{
    __shared__ float part[KN_LA_ROWS_WARPS][KN_LA_ROWS_MT];
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int es = DT == KN_LA_F32 ? 4 : 2;
    for (long long n = blockIdx.x; n < p.n; n += gridDim.x) {
        const char *brow = p.b + n * p.b_s0 * es;
        for (long long m0 = 0; m0 < p.m; m0 += KN_LA_ROWS_MT) {
            const int mt = p.m - m0 < KN_LA_ROWS_MT ? (int)(p.m - m0) : KN_LA_ROWS_MT;
            float acc[KN_LA_ROWS_MT];
#pragma unroll
            for (int r = 0; r < KN_LA_ROWS_MT; r++) acc[r] = 0.f;
            for (long long k = warp * 32 + lane; k < p.k; k += 32 * KN_LA_ROWS_WARPS) {
                const float bv = kn_la_ld_t<DT>(brow + k * es, 0);
#pragma unroll
                for (int r = 0; r < KN_LA_ROWS_MT; r++)
                    if (r < mt) acc[r] = fmaf(kn_la_ld_t<DT>(p.a + ((m0 + r) * p.a_s0 + k) * es, 0), bv, acc[r]);
            }
#pragma unroll
            for (int r = 0; r < KN_LA_ROWS_MT; r++) {
#pragma unroll
                for (int w = 16; w > 0; w >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], w);
            }
            // lane r keeps row r (the sums are the same in every lane)
#pragma unroll
            for (int r = 0; r < KN_LA_ROWS_MT; r++)
                if (lane == r) part[warp][r] = acc[r];
            __syncthreads();
            if (threadIdx.x < mt) {
                const int r = (int)threadIdx.x;
                float v = p.bias ? kn_la_ld<float>(p.bias, p.b_dt, n * p.bias_s) : 0.f;
#pragma unroll
                for (int w = 0; w < KN_LA_ROWS_WARPS; w++) v += part[w][r];
                if (p.act == 1) v = v > 0.f ? v : (v == v ? 0.f : v); // NaN passes, as relu on the CPU
                else if (p.act == 3) v = v * fminf(fmaxf(v * (1.f / 6.f) + 0.5f, 0.f), 1.f);
                kn_la_st<float>(p.y, DT, (m0 + r) * p.y_s0 + n, v);
            }
            __syncthreads();
        }
    }
}

extern "C" __global__ void __launch_bounds__(32 * KN_LA_ROWS_WARPS) KN_LA_KERNEL(kn_la_rows_args p)
{
    kn_la_rows_body<KN_LA_DT>(p);
}
