/* kn_gather_scatter.cu: the fused gather_scatter op (message passing),
 * out = base or 0; out[dst[e], :] += h[src[e], :] * w[e], in two variants
 * (kernels/cuda/kn_cuda_gather_scatter.c launches them, and
 * kernels/cpu/kn_cpu_index.c is the reference):
 *
 * - atomics (kn_gs_atomic): a thread per (edge, vector of columns) reads
 *   its slice of h's row with one 16-byte load where aligned, scales it and
 *   adds it into out's row with atomic reductions (red, the result unused).
 *   The host first copies base into out or zeroes it. f32: red.v4.f32 on
 *   sm_90. bf16 / f16: packed red.add.noftz.{bf16x2, f16x2} (v4: 8 halves
 *   in one instruction on sm_90), which round after every add as eager
 *   index_add's compare-and-swap does (the message is rounded to the dtype
 *   first, as the eager mul stores it). Sums come in any order.
 * - segments (kn_gs_segment): a thread per (row, vector of columns) walks
 *   the row's edges in dst order (a CSR built once per version of dst by
 *   kn_gs_count, kn_gs_scan, kn_gs_fill and kn_gs_order) and writes the row
 *   once: no atomics, no separate zero fill, and a fixed order, the edges'
 *   own (so the result is deterministic, with the CPU's rounding steps:
 *   each message and each add rounded to the dtype).
 *
 * The epilogue (kn_gs_args act, row_op: what kn_pass_gather_scatter
 * absorbed) runs on each finished sum before the store, each op in the math
 * type and rounded to the dtype as the eager op stores it, with the eager
 * kernels' formulas (kn_ops.def's, the generated row kernel's softmax).
 * Segments apply the activations in the kernel, and a row op in a second
 * launch over the finished rows (kn_gs_epilogue_rows: a warp per row, at
 * most 64 elements). Atomics cannot apply any (the sums
 * finish only when every edge has added), so the host launches
 * kn_gs_epilogue (or kn_gs_epilogue_rows) over the output after them.
 *
 * Indices are 1-based and clamped into range (the host checks them first,
 * as for index_add: a bad one never reads or writes outside a tensor).
 * Float dtypes only; the other dtypes' modules hold empty kernels.
 */

#if KN_DT == KN_DT_F64
typedef double kn_gs_m; /* the math type: f64 in f64, f32 for the others */
#else
typedef float kn_gs_m;
#endif

struct alignas(16) kn_gs_v16 {
    unsigned int w[4];
};

template <int D> KN_FN kn_gs_m kn_gs_ld(const char *p)
{
    if constexpr (D == KN_DT_F32) return *(const float *)p;
    else if constexpr (D == KN_DT_F64) return *(const double *)p;
    else if constexpr (D == KN_DT_BF16) return kn_ld_bf16(*(const kn_u16 *)p);
    else if constexpr (D == KN_DT_F16) return kn_ld_f16(*(const kn_u16 *)p);
    else return 0;
}

template <int D> KN_FN void kn_gs_st(char *p, kn_gs_m v)
{
    if constexpr (D == KN_DT_F32) *(float *)p = v;
    else if constexpr (D == KN_DT_F64) *(double *)p = v;
    else if constexpr (D == KN_DT_BF16) *(kn_u16 *)p = kn_st_bf16(v);
    else if constexpr (D == KN_DT_F16) *(kn_u16 *)p = kn_st_f16(v);
}

/* v's 16 bits in the dtype (v already holds a value of the dtype) */
template <int D> KN_FN unsigned int kn_gs_bits16(kn_gs_m v)
{
    if constexpr (D == KN_DT_BF16) return kn_st_bf16(v);
    else return kn_st_f16(v);
}

/* a * b and a + b, each rounded to the dtype as an eager op stores it
 * (the _rn forms: never contracted into an fma) */
template <int D> KN_FN kn_gs_m kn_gs_mul(kn_gs_m a, kn_gs_m b)
{
    if constexpr (D == KN_DT_F64) return __dmul_rn(a, b);
    else if constexpr (D == KN_DT_BF16) return kn_round_bf16(__fmul_rn(a, b));
    else if constexpr (D == KN_DT_F16) return kn_round_f16(__fmul_rn(a, b));
    else return __fmul_rn(a, b);
}

template <int D> KN_FN kn_gs_m kn_gs_add(kn_gs_m a, kn_gs_m b)
{
    if constexpr (D == KN_DT_F64) return __dadd_rn(a, b);
    else if constexpr (D == KN_DT_BF16) return kn_round_bf16(__fadd_rn(a, b));
    else if constexpr (D == KN_DT_F16) return kn_round_f16(__fadd_rn(a, b));
    else return __fadd_rn(a, b);
}

/* V adjacent elements at p: one 16-byte load when V > 1 (V * size == 16) */
template <int D, int V> KN_FN void kn_gs_load(const char *p, kn_gs_m *m)
{
    if constexpr (V == 1) {
        m[0] = kn_gs_ld<D>(p);
    } else {
        kn_gs_v16 v = *(const kn_gs_v16 *)p;
        if constexpr (D == KN_DT_F32) {
#pragma unroll
            for (int i = 0; i < 4; i++) m[i] = __uint_as_float(v.w[i]);
        } else if constexpr (D == KN_DT_F64) {
            m[0] = __hiloint2double((int)v.w[1], (int)v.w[0]);
            m[1] = __hiloint2double((int)v.w[3], (int)v.w[2]);
        } else if constexpr (D == KN_DT_BF16) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                m[2 * i] = kn_ld_bf16((kn_u16)(v.w[i] & 0xffffu));
                m[2 * i + 1] = kn_ld_bf16((kn_u16)(v.w[i] >> 16));
            }
        } else if constexpr (D == KN_DT_F16) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                m[2 * i] = kn_ld_f16((kn_u16)(v.w[i] & 0xffffu));
                m[2 * i + 1] = kn_ld_f16((kn_u16)(v.w[i] >> 16));
            }
        }
    }
}

/* V adjacent elements stored at p: one 16-byte store when V > 1 */
template <int D, int V> KN_FN void kn_gs_store(char *p, const kn_gs_m *m)
{
    if constexpr (V == 1) {
        kn_gs_st<D>(p, m[0]);
    } else {
        kn_gs_v16 v;
        if constexpr (D == KN_DT_F32) {
#pragma unroll
            for (int i = 0; i < 4; i++) v.w[i] = __float_as_uint(m[i]);
        } else if constexpr (D == KN_DT_F64) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                long long b = __double_as_longlong(m[i]);
                v.w[2 * i] = (unsigned int)b;
                v.w[2 * i + 1] = (unsigned int)(b >> 32);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) v.w[i] = kn_gs_bits16<D>(m[2 * i]) | (kn_gs_bits16<D>(m[2 * i + 1]) << 16);
        }
        *(kn_gs_v16 *)p = v;
    }
}

/* out[0..V) += m[0..V) with atomic reductions (see the top of the file).
 * Asm operands are checked in discarded branches too: hence the casts. */
template <int D, int V> KN_FN void kn_gs_red(char *p, const kn_gs_m *m)
{
    if constexpr (D == KN_DT_F32) {
#if __CUDA_ARCH__ >= 900
        if constexpr (V == 4)
            asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"((float)m[0]),
                         "f"((float)m[1]), "f"((float)m[2]), "f"((float)m[3])
                         : "memory");
        else
#endif
        {
#pragma unroll
            for (int i = 0; i < V; i++) atomicAdd((float *)p + i, (float)m[i]);
        }
    } else if constexpr (D == KN_DT_F64) {
#pragma unroll
        for (int i = 0; i < V; i++) atomicAdd((double *)p + i, (double)m[i]);
    } else if constexpr (V == 8) {
        unsigned int w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = kn_gs_bits16<D>(m[2 * i]) | (kn_gs_bits16<D>(m[2 * i + 1]) << 16);
#if __CUDA_ARCH__ >= 900
        if constexpr (D == KN_DT_BF16)
            asm volatile("red.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]),
                         "r"(w[2]), "r"(w[3])
                         : "memory");
        else
            asm volatile("red.global.add.noftz.v4.f16x2 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]),
                         "r"(w[2]), "r"(w[3])
                         : "memory");
#else
        if constexpr (D == KN_DT_F16) {
#pragma unroll
            for (int i = 0; i < 4; i++)
                asm volatile("red.global.add.noftz.f16x2 [%0], %1;" ::"l"(p + 4 * i), "r"(w[i]) : "memory");
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                kn_u16 h = (kn_u16)kn_gs_bits16<D>(m[i]);
                kn_atomic_add(p + 2 * i, (const char *)&h);
            }
        }
#endif
    } else {
        kn_u16 h = (kn_u16)kn_gs_bits16<D>(m[0]);
#if __CUDA_ARCH__ >= 900
        if constexpr (D == KN_DT_BF16)
            asm volatile("red.global.add.noftz.bf16 [%0], %1;" ::"l"(p), "h"(h) : "memory");
        else
#endif
            if constexpr (D == KN_DT_F16)
            asm volatile("red.global.add.noftz.f16 [%0], %1;" ::"l"(p), "h"(h) : "memory");
        else
            kn_atomic_add(p, (const char *)&h);
    }
}

/* m[0..V) = h[s, c..c+V) * wv (wv read where a.w is set), each product
 * rounded to the dtype */
template <int D, int V> KN_FN void kn_gs_scaled(const kn_gs_args &a, long long s, kn_gs_m wv, long long c, kn_gs_m *m)
{
    const int es = kn_esize<D>();
    kn_gs_load<D, V>(a.h + (s * a.h_st + c) * es, m);
    if (a.w) {
#pragma unroll
        for (int i = 0; i < V; i++) m[i] = kn_gs_mul<D>(m[i], wv);
    }
}

/* message m[0..V) = h[src[e], c..c+V) * w[e] */
template <int D, int V> KN_FN void kn_gs_message(const kn_gs_args &a, long long e, long long c, kn_gs_m *m)
{
    const int es = kn_esize<D>();
    long long s = kn_index_clamped(a.src, a.src64, e * a.src_st, a.hrows);
    kn_gs_scaled<D, V>(a, s, a.w ? kn_gs_ld<D>(a.w + e * a.w_st * es) : (kn_gs_m)1, c, m);
}

/* ---- the epilogue ---- */

/* v rounded to the dtype (a value as the eager op stores it) */
template <int D> KN_FN kn_gs_m kn_gs_round(kn_gs_m v)
{
    if constexpr (D == KN_DT_BF16) return kn_round_bf16(v);
    else if constexpr (D == KN_DT_F16) return kn_round_f16(v);
    else return v;
}

/* the math functions in the math type, as the generated kernels call them */
template <int D> KN_FN kn_gs_m kn_gs_exp(kn_gs_m v)
{
    if constexpr (D == KN_DT_F64) return exp(v);
    else return expf(v);
}

template <int D> KN_FN kn_gs_m kn_gs_log(kn_gs_m v)
{
    if constexpr (D == KN_DT_F64) return log(v);
    else return logf(v);
}

/* activation op of a value of the dtype: kn_ops.def's formula in the math
 * type (literals in it, as the renderer writes them), rounded to the dtype */
template <int D> KN_FN kn_gs_m kn_gs_act(int op, kn_gs_m a)
{
    kn_gs_m r;
    if (op == KN_GS_RELU) r = a > 0 ? a : (a != a ? a : (kn_gs_m)0);
    else if (op == KN_GS_GELU) {
        kn_gs_m x = a * (kn_gs_m)0.70710678118654752440;
        if constexpr (D == KN_DT_F64) r = (kn_gs_m)0.5 * a * (1 + erf(x));
        else if constexpr (D == KN_DT_BF16) r = kn_gelu_bf16(a); /* as the generated GELU */
        else if constexpr (D == KN_DT_F16) r = kn_gelu_f16(a);
        else r = (kn_gs_m)0.5 * a * (1 + erff(x));
    } else if (op == KN_GS_SILU) r = a / (1 + kn_gs_exp<D>(-a));
    else if (op == KN_GS_SIGMOID) r = 1 / (1 + kn_gs_exp<D>(-a));
    else if (op == KN_GS_TANH) {
        if constexpr (D == KN_DT_F64) r = tanh(a);
        else r = tanhf(a);
    } else r = a;
    return kn_gs_round<D>(r);
}

template <int D, int V> KN_FN void kn_gs_acts(const kn_gs_args &a, kn_gs_m *m)
{
    for (int k = 0; k < a.n_act; k++) {
        int op = a.act[k];
#pragma unroll
        for (int i = 0; i < V; i++) m[i] = kn_gs_act<D>(op, m[i]);
    }
}

template <int D, int V> KN_FN void kn_gs_atomic_body(const kn_gs_args &a)
{
    const int es = kn_esize<D>();
    long long total = a.edges * a.nvec;
    for (long long t = kn_tid(); t < total; t += kn_nthreads()) {
        long long e = t / a.nvec, c = (t - e * a.nvec) * V;
        long long d = kn_index_clamped(a.dst, a.dst64, e * a.dst_st, a.rows);
        kn_gs_m m[V];
        kn_gs_message<D, V>(a, e, c, m);
        kn_gs_red<D, V>(a.out + (d * a.row + c) * es, m);
    }
}

template <int D, int V> KN_FN void kn_gs_segment_body(const kn_gs_args &a)
{
    const int es = kn_esize<D>();
    long long total = a.rows * a.nvec;
    for (long long t = kn_tid(); t < total; t += kn_nthreads()) {
        long long r = t / a.nvec, c = (t - r * a.nvec) * V;
        kn_gs_m acc[V];
        if (a.base) {
            kn_gs_load<D, V>(a.base + (r * a.base_st + c) * es, acc);
        } else {
#pragma unroll
            for (int i = 0; i < V; i++) acc[i] = 0;
        }
        int k1 = a.start[r + 1];
        for (int k = a.start[r]; k < k1; k++) {
            kn_gs_m m[V];
            kn_gs_message<D, V>(a, a.perm[k], c, m);
#pragma unroll
            for (int i = 0; i < V; i++) acc[i] = kn_gs_add<D>(acc[i], m[i]);
        }
        kn_gs_acts<D, V>(a, acc);
        kn_gs_store<D, V>(a.out + (r * a.row + c) * es, acc);
    }
}

/* after atomics: the epilogue over the finished output, in place; a thread
 * per vector of columns, or per row with a row op */
template <int D, int V> KN_FN void kn_gs_epilogue_body(const kn_gs_args &a)
{
    const int es = kn_esize<D>();
    long long total = a.rows * a.nvec;
    for (long long t = kn_tid(); t < total; t += kn_nthreads()) {
        kn_gs_m m[V];
        kn_gs_load<D, V>(a.out + t * V * es, m);
        kn_gs_acts<D, V>(a, m);
        kn_gs_store<D, V>(a.out + t * V * es, m);
    }
}

/* The finished rows' epilogue, in place: the activations (after atomics;
 * segments applied them already and pass none), then softmax / log_softmax
 * as the generated row kernel computes it: max keeping NaN, t = x - max,
 * e = exp(t), the sum of e, then e / sum (a half type: e * (1 / sum)) or
 * t - log(sum); each in the math type, the result rounded to the dtype.
 * A warp per row, lane l holding columns l and l + 32 (rows of at most
 * KN_GATHER_SCATTER_ROW_MAX = 64), the max and the sum through shuffles:
 * a thread per row took 4.8 us for gcn's 2708 rows of 7 (11 blocks). The
 * row index is the warp's, so every lane of a warp takes the same steps. */
template <int D> KN_FN void kn_gs_epilogue_rows_body(const kn_gs_args &a)
{
    const int es = kn_esize<D>();
    const int lane = threadIdx.x & 31;
    const long long warps = kn_nthreads() / 32;
    for (long long r = kn_tid() / 32; r < a.rows; r += warps) {
        char *row = a.out + r * a.row * es;
        kn_gs_m x[2];
        bool own[2];
#pragma unroll
        for (int p = 0; p < 2; p++) {
            own[p] = lane + 32 * p < a.row;
            x[p] = own[p] ? kn_gs_ld<D>(row + (long long)(lane + 32 * p) * es) : (kn_gs_m)0;
            for (int k = 0; k < a.n_act; k++) x[p] = kn_gs_act<D>(a.act[k], x[p]);
        }
        if (a.row_op) {
            kn_gs_m mx = -INFINITY, sum = 0;
#pragma unroll
            for (int p = 0; p < 2; p++)
                if (own[p] && (x[p] != x[p] || x[p] > mx)) mx = x[p];
            for (int o = 16; o > 0; o >>= 1) {
                kn_gs_m y = __shfl_xor_sync(0xffffffffu, mx, o);
                if (mx == mx && (y != y || y > mx)) mx = y; /* a NaN anywhere wins */
            }
#pragma unroll
            for (int p = 0; p < 2; p++)
                if (own[p]) {
                    x[p] = x[p] - mx;
                    sum += kn_gs_exp<D>(x[p]);
                }
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (a.row_op == KN_GS_LOG_SOFTMAX) {
                kn_gs_m lg = kn_gs_log<D>(sum);
#pragma unroll
                for (int p = 0; p < 2; p++) x[p] = kn_gs_round<D>(x[p] - lg);
            } else if constexpr (D == KN_DT_BF16 || D == KN_DT_F16) {
                kn_gs_m inv = 1 / sum;
#pragma unroll
                for (int p = 0; p < 2; p++) x[p] = kn_gs_round<D>(kn_gs_exp<D>(x[p]) * inv);
            } else {
#pragma unroll
                for (int p = 0; p < 2; p++) x[p] = kn_gs_exp<D>(x[p]) / sum;
            }
        }
#pragma unroll
        for (int p = 0; p < 2; p++)
            if (own[p]) kn_gs_st<D>(row + (long long)(lane + 32 * p) * es, x[p]);
    }
}

/* the vector width of a 16-byte load in this dtype */
#define KN_GS_VEC (16 / kn_esize<KN_DT>())

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_gs_atomic)
extern "C" __global__ void __launch_bounds__(KN_T_BLOCK) kn_gs_atomic(kn_gs_args a)
{
    if constexpr (kn_isfloat<KN_DT>()) {
        if (a.vec == KN_GS_VEC) kn_gs_atomic_body<KN_DT, KN_GS_VEC>(a);
        else kn_gs_atomic_body<KN_DT, 1>(a);
    }
}
#endif

/* The row ops run in kernels of their own (kn_gs_epilogue_rows), so their
 * register rows do not raise this kernel's register count (occupancy hides
 * the gathers' latency). */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_gs_segment)
extern "C" __global__ void __launch_bounds__(KN_T_BLOCK) kn_gs_segment(kn_gs_args a)
{
    if constexpr (kn_isfloat<KN_DT>()) {
        if (a.vec == KN_GS_VEC) kn_gs_segment_body<KN_DT, KN_GS_VEC>(a);
        else kn_gs_segment_body<KN_DT, 1>(a);
    }
}
#endif

/* the activations after atomics (rows * nvec threads) */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_gs_epilogue)
extern "C" __global__ void __launch_bounds__(KN_T_BLOCK) kn_gs_epilogue(kn_gs_args a)
{
    if constexpr (kn_isfloat<KN_DT>()) {
        if (a.vec == KN_GS_VEC) kn_gs_epilogue_body<KN_DT, KN_GS_VEC>(a);
        else kn_gs_epilogue_body<KN_DT, 1>(a);
    }
}
#endif

/* the activations and the row op over finished rows (rows * 32 threads) */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_gs_epilogue_rows)
extern "C" __global__ void __launch_bounds__(KN_T_BLOCK) kn_gs_epilogue_rows(kn_gs_args a)
{
    if constexpr (kn_isfloat<KN_DT>()) kn_gs_epilogue_rows_body<KN_DT>(a);
}
#endif

/* ---- the CSR of the edges by dst (once per version of dst) ----
 * count[r] = edges ending at row r (count zeroed by the host); start =
 * exclusive scan of count (one block); perm filled by atomics (count
 * zeroed again), then each row's edges sorted by edge number, so the order
 * is the edges' own whatever order the atomics took. */

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_gs_count)
extern "C" __global__ void kn_gs_count(kn_gs_args a)
{
    for (long long e = kn_tid(); e < a.edges; e += kn_nthreads())
        atomicAdd(a.count + kn_index_clamped(a.dst, a.dst64, e * a.dst_st, a.rows), 1);
}
#endif

/* one block of KN_T_BLOCK threads: start[0..rows] = exclusive scan of count */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_gs_scan)
extern "C" __global__ void __launch_bounds__(KN_T_BLOCK) kn_gs_scan(kn_gs_args a)
{
    __shared__ int part[KN_T_BLOCK];
    int t = threadIdx.x;
    long long chunk = (a.rows + KN_T_BLOCK - 1) / KN_T_BLOCK;
    long long lo = t * chunk, hi = lo + chunk < a.rows ? lo + chunk : a.rows;
    int sum = 0;
    for (long long r = lo; r < hi; r++) sum += a.count[r];
    part[t] = sum;
    __syncthreads();
    for (int off = 1; off < KN_T_BLOCK; off <<= 1) { /* inclusive scan of the parts */
        int v = t >= off ? part[t - off] : 0;
        __syncthreads();
        part[t] += v;
        __syncthreads();
    }
    int run = t ? part[t - 1] : 0;
    for (long long r = lo; r < hi; r++) {
        a.start[r] = run;
        run += a.count[r];
    }
    if (t == KN_T_BLOCK - 1) a.start[a.rows] = part[t];
}
#endif

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_gs_fill)
extern "C" __global__ void kn_gs_fill(kn_gs_args a)
{
    for (long long e = kn_tid(); e < a.edges; e += kn_nthreads()) {
        long long d = kn_index_clamped(a.dst, a.dst64, e * a.dst_st, a.rows);
        a.perm[a.start[d] + atomicAdd(a.count + d, 1)] = (int)e;
    }
}
#endif

/* each row's edges in their own order (insertion sort: rows hold few edges) */
#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_gs_order)
extern "C" __global__ void kn_gs_order(kn_gs_args a)
{
    for (long long r = kn_tid(); r < a.rows; r += kn_nthreads()) {
        int lo = a.start[r], hi = a.start[r + 1];
        for (int i = lo + 1; i < hi; i++) {
            int v = a.perm[i], j = i - 1;
            while (j >= lo && a.perm[j] > v) {
                a.perm[j + 1] = a.perm[j];
                j--;
            }
            a.perm[j + 1] = v;
        }
    }
}
#endif
