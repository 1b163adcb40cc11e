/* kn_cuda_render: the CUDA backend's render target (kn_render_target in
 * kn_kir.h): generated kernels as CUDA C++ for NVRTC.
 *
 * Threads share the space: POINTWISE kernels walk it flattened in a
 * grid-stride loop (optionally several elements a thread, or aligned
 * vector loads), ROW kernels give each row a block or a warp, whose threads
 * then combine their partial accumulators with warp shuffles (and shared
 * memory across the warps of a block). Launch geometry: kn_kernel_launch_dims.
 *
 * Plain C with no CUDA header: it is built without the CUDA toolkit too,
 * so CUDA source can be written (cm:source "cuda") on any machine.
 */
#include "kn_cuda_render.h"

#include <stdio.h>
#include <stdlib.h>

#include "kn_kir_target.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* The elements of a row each thread keeps in registers (a multiple of the
 * row's vector width). */
static int row_regs_per_thread(const kn_kernel *k)
{
    int R = k->ndim - 1, V = kn_kernel_row_vec(k);
    int threads = kn_kernel_warp_rows(k) ? kn_kernel_row_lanes(k) : kn_kernel_block(k);
    int64_t groups = (k->shape[R] + (int64_t)threads * V - 1) / ((int64_t)threads * V);
    return (int)(groups > 0 ? groups : 1) * V;
}

/* A row kernel that keeps at most 64 bytes of its row per thread through
 * its reductions (a 512-wide f32 or bf16 layer norm, softmax rows of 256)
 * asks for 64 registers a thread (1024 threads an SM): left alone, ptxas
 * took 75-124 for the ILP, which left 2-3 blocks of 256 an SM and the
 * kernel latency-bound; at 64 these spill nothing (-Xptxas -v). */
static void cuda_signature(kn_kir_rctx *r)
{
    const kn_kernel *k = r->k;
    int block = kn_kernel_block(k);
    char bounds[32];
    snprintf(bounds, sizeof bounds, "%d", block);
    if (kn_kernel_row_regs(k) && kn_kernel_warp_rows(k) && block <= 1024 &&
        (size_t)row_regs_per_thread(k) * kn_kir_row_early_bytes(k) <= 64)
        snprintf(bounds, sizeof bounds, "%d, %d", block, 1024 / block);
    kn_kir_line(r, "extern \"C\" __global__ void __launch_bounds__(%s) %s(kn_kargs ka)", bounds, k->name);
}

/* i<d> for d < upto from the flat index `flat` (row-major). 64-bit
 * division is a long software sequence on the GPU, so a space under 2^31
 * elements (a uniform branch) divides in 32 bits. `width`: 0 both under
 * that branch, 32 or 64 only the one (inside a loop already chosen by it). */
static void render_unflatten(kn_kir_rctx *r, const char *flat, const char *total, int upto, int width)
{
    if (upto == 0) return;
    if (upto == 1) {
        kn_kir_line(r, "const kn_i64 i0 = %s;", flat);
        return;
    }
    kn_strbuf_printf(r->s, "%*skn_i64 i0", r->indent * 4, "");
    for (int d = 1; d < upto; d++) kn_strbuf_printf(r->s, ", i%d", d);
    kn_strbuf_printf(r->s, ";\n");
    if (width == 0) {
        kn_kir_line(r, "if (%s <= 2147483647LL) {", total);
        r->indent++;
    }
    if (width != 64) {
        kn_kir_line(r, "unsigned rest = (unsigned)%s;", flat);
        for (int d = upto - 1; d > 0; d--) {
            kn_kir_line(r, "i%d = rest %% (unsigned)n%d;", d, d);
            kn_kir_line(r, "rest /= (unsigned)n%d;", d);
        }
        kn_kir_line(r, "i0 = rest;");
    }
    if (width == 0) {
        r->indent--;
        kn_kir_line(r, "} else {");
        r->indent++;
    }
    if (width != 32) {
        kn_kir_line(r, "kn_i64 rest = %s;", flat);
        for (int d = upto - 1; d > 0; d--) {
            kn_kir_line(r, "i%d = rest %% n%d;", d, d);
            kn_kir_line(r, "rest /= n%d;", d);
        }
        kn_kir_line(r, "i0 = rest;");
    }
    if (width == 0) {
        r->indent--;
        kn_kir_line(r, "}");
    }
}

static void cuda_vector_type(kn_kir_rctx *r, int j, int V)
{
    kn_dtype dt = r->k->args[j].dtype;
    kn_kir_line(r, "struct __align__(%zu) v%d_t { %s x[%d]; };", V * kn_dtype_size(dt), j, kn_kir_storage_name(dt), V);
}

/* The vector path's loop, in 32-bit (index math in unsigned: the space is
 * under 2^31 elements) or 64-bit integers: each thread takes E vectors a
 * block-width apart per grid step, first loading all of them (E loads in
 * flight per argument), then computing and storing them. */
/* Whether some expression loads argument j (a plan binds only those it
 * reads; a kernel built by hand may bind more). */
static bool arg_loaded(const kn_kernel *k, int j)
{
    for (int i = 0; i < k->n_exprs; i++)
        if (k->exprs[i].kind == KN_KX_LOAD && k->exprs[i].buf == j) return true;
    return false;
}

static kn_status cuda_vector_loop(kn_kir_rctx *r, int V, int E, int width)
{
    const kn_kernel *k = r->k;
    int L = k->ndim - 1;
    const char *it = width == 32 ? "unsigned" : "kn_i64";
    kn_kir_line(r, "for (%s base = (%s)blockIdx.x * blockDim.x * %d + threadIdx.x; base < (%s)nvec;"
                " base += (%s)gridDim.x * blockDim.x * %d) {", it, it, E, it, it, E);
    r->indent++;
    bool any_input = false;
    for (int j = 0; j < k->n_args; j++)
        if (k->args[j].strides[L] == 1 && !k->args[j].is_output && arg_loaded(k, j)) {
            kn_kir_line(r, "v%d_t l%d[%d];", j, j, E);
            any_input = true;
        }
    for (int phase = any_input ? 0 : 1; phase < 2; phase++) {
        kn_kir_line(r, "#pragma unroll");
        kn_kir_line(r, "for (int g = 0; g < %d; g++) {", E);
        r->indent++;
        kn_kir_line(r, "const %s q = base + (%s)g * blockDim.x;", it, it);
        kn_kir_line(r, "if (q >= (%s)nvec) break;", it);
        kn_kir_line(r, "const %s t = q * %d;", it, V);
        render_unflatten(r, "t", "total", k->ndim, width);
        if (phase == 0) { /* the loads */
            for (int d = 0; d < k->ndim; d++) kn_kir_line(r, "(void)i%d;", d);
            for (int j = 0; j < k->n_args; j++)
                if (k->args[j].strides[L] == 1 && !k->args[j].is_output && arg_loaded(k, j)) {
                    kn_strbuf_printf(r->s, "%*sl%d[g] = *(const v%d_t *)&", r->indent * 4, "", j, j);
                    kn_kir_put_elem(r, j, k->ndim);
                    kn_strbuf_printf(r->s, ";\n");
                }
        } else { /* the values, from registers, and the stores */
            for (int j = 0; j < k->n_args; j++)
                if (k->args[j].strides[L] == 1 && k->args[j].is_output) kn_kir_line(r, "v%d_t s%d;", j, j);
            kn_kir_line(r, "#pragma unroll");
            kn_kir_line(r, "for (int e = 0; e < %d; e++) {", V);
            r->indent++;
            r->vec_body = true;
            kn_status st = kn_kir_render_stores(r, false, k->ndim);
            r->vec_body = false;
            KN_TRY(st);
            r->indent--;
            kn_kir_line(r, "}");
            for (int j = 0; j < k->n_args; j++)
                if (k->args[j].strides[L] == 1 && k->args[j].is_output) {
                    char value[24];
                    snprintf(value, sizeof value, "s%d", j);
                    kn_kir_put_vec_store(r, j, V, value);
                }
        }
        r->indent--;
        kn_kir_line(r, "}");
    }
    r->indent--;
    kn_kir_line(r, "}");
    return KN_OK;
}

/* Vector path (kn_kernel_vec_width V > 0): each thread moves V consecutive
 * elements of every argument contiguous along the last dim with one
 * aligned vector load or store (a broadcast bias too), then computes them
 * one by one from registers. Taken when every such pointer is aligned to
 * its vector (a view's offset may break that: then the scalar loop below
 * runs) and the last size is a multiple of V (kn_kernel_vec_ok checked the
 * shape the kernel was built for; a dynamic size that is not falls back
 * too). */
static kn_status cuda_vector(kn_kir_rctx *r, int V)
{
    const kn_kernel *k = r->k;
    int L = k->ndim - 1;
    kn_strbuf_printf(r->s, "%*sif (n%d %% %d == 0", r->indent * 4, "", L, V);
    for (int j = 0; j < k->n_args; j++)
        if (k->args[j].strides[L] == 1)
            kn_strbuf_printf(r->s, " && ((unsigned long long)p%d %% %zu) == 0", j, V * kn_dtype_size(k->args[j].dtype));
    kn_strbuf_printf(r->s, ") {\n");
    r->indent++;
    for (int j = 0; j < k->n_args; j++)
        if (k->args[j].strides[L] == 1) cuda_vector_type(r, j, V);
    kn_kir_line(r, "const kn_i64 nvec = total / %d;", V);
    int E = kn_kernel_vec_ept(k);
    /* 32 bits while the space and one grid step both fit 31 (the loop
     * counter then stays under 2^32) */
    kn_kir_line(r, "if (total <= 2147483647LL && (kn_i64)gridDim.x * blockDim.x * %d <= 2147483647LL) {", E);
    r->indent++;
    KN_TRY(cuda_vector_loop(r, V, E, 32));
    r->indent--;
    kn_kir_line(r, "} else {");
    r->indent++;
    KN_TRY(cuda_vector_loop(r, V, E, 64));
    r->indent--;
    kn_kir_line(r, "}");
    kn_kir_line(r, "return;");
    r->indent--;
    kn_kir_line(r, "}");
    return KN_OK;
}

static kn_status cuda_pointwise(kn_kir_rctx *r)
{
    const kn_kernel *k = r->k;
    kn_strbuf_printf(r->s, "%*sconst kn_i64 total = 1", r->indent * 4, "");
    for (int d = 0; d < k->ndim; d++) kn_strbuf_printf(r->s, " * n%d", d);
    kn_strbuf_printf(r->s, ";\n");
    int V = kn_kernel_vec_width(k);
    if (V) KN_TRY(cuda_vector(r, V));
    int ept = k->cfg.ept > 1 ? k->cfg.ept : 1;
    if (ept == 1) {
        kn_kir_line(r, "for (kn_i64 t = (kn_i64)blockIdx.x * blockDim.x + threadIdx.x; t < total;"
                " t += (kn_i64)gridDim.x * blockDim.x) {");
        r->indent++;
    } else {
        /* ept elements a block-width apart per thread and step: loads stay
         * coalesced, and the unrolled steps keep ept loads in flight */
        kn_kir_line(r, "for (kn_i64 base = (kn_i64)blockIdx.x * blockDim.x * %d + threadIdx.x; base < total;"
                " base += (kn_i64)gridDim.x * blockDim.x * %d) {", ept, ept);
        r->indent++;
        kn_kir_line(r, "#pragma unroll");
        kn_kir_line(r, "for (int e = 0; e < %d; e++) {", ept);
        r->indent++;
        kn_kir_line(r, "const kn_i64 t = base + (kn_i64)e * blockDim.x;");
        kn_kir_line(r, "if (t >= total) break;");
    }
    render_unflatten(r, "t", "total", k->ndim, 0);
    KN_TRY(kn_kir_render_stores(r, false, k->ndim));
    for (int l = 0; l < (ept == 1 ? 1 : 2); l++) {
        r->indent--;
        kn_kir_line(r, "}");
    }
    return KN_OK;
}

static kn_status cuda_row(kn_kir_rctx *r)
{
    const kn_kernel *k = r->k;
    int R = k->ndim - 1;
    r->warp_rows = kn_kernel_warp_rows(k);
    /* the thread that writes a row's per-row values */
    const char *first = r->warp_rows ? "if (lane == 0) {" : "if (threadIdx.x == 0) {";
    if (!r->warp_rows)
        for (int s = 0; s < k->n_stages; s++)
            kn_kir_line(r, "__shared__ %s red%d[32]; /* one partial per warp */", kn_kir_acc_type(r, s), s);
    kn_strbuf_printf(r->s, "%*sconst kn_i64 rows = 1", r->indent * 4, "");
    for (int d = 0; d < R; d++) kn_strbuf_printf(r->s, " * n%d", d);
    kn_strbuf_printf(r->s, ";\n");
    /* The sizes are baked (sizes_baked), so the grid kn_kernel_launch_dims
     * gives is known here: where it has a warp (or block) for every row, a
     * row each and no loop. The loop's 64-bit induction kept registers and
     * instructions through the body: a bf16 layer norm of 4096 x 512 took
     * 2.88 us on the H100 without it, with rsqrtf, against 2.98 with the
     * loop. A block's exit is uniform, so no barrier loses a thread. */
    int64_t n_rows = 1;
    for (int d = 0; d < R; d++) n_rows *= k->shape[d];
    int lanes = kn_kernel_row_lanes(k);
    int rows_a_block = r->warp_rows ? kn_kernel_block(k) / lanes : 1;
    bool row_each = (n_rows + rows_a_block - 1) / rows_a_block <= KN_KIR_MAX_GRID;
    char step[8];
    snprintf(step, sizeof step, "%d", lanes);
    if (r->warp_rows) {
        /* one warp per row (or 32 / lanes rows, whole ones: the shuffles
         * below take the full mask): no barriers at all, and a block's
         * rows keep that many times the loads in flight */
        kn_kir_line(r, "const unsigned lane = threadIdx.x & %du;", lanes - 1);
        kn_kir_line(r, "const kn_i64 rpb = blockDim.x / %d;", lanes);
        if (row_each) {
            kn_kir_line(r, "{");
            kn_kir_line(r, "    const kn_i64 row = (kn_i64)blockIdx.x * rpb + threadIdx.x / %d;", lanes);
            kn_kir_line(r, "    if (row >= rows) return;");
        } else {
            kn_kir_line(r, "for (kn_i64 row = (kn_i64)blockIdx.x * rpb + threadIdx.x / %d; row < rows;"
                    " row += (kn_i64)gridDim.x * rpb) {", lanes);
        }
    } else if (row_each) {
        kn_kir_line(r, "{");
        kn_kir_line(r, "    const kn_i64 row = blockIdx.x;");
        kn_kir_line(r, "    if (row >= rows) return;");
    } else {
        kn_kir_line(r, "for (kn_i64 row = blockIdx.x; row < rows; row += gridDim.x) {");
    }
    r->indent++;
    render_unflatten(r, "row", "rows", R, 0);
    bool regs = kn_kernel_row_regs(k);
    if (regs) {
        /* int indices: the row is short (the guard below) */
        const char *lo = r->warp_rows ? "(int)lane" : "(int)threadIdx.x";
        const char *regs_step = r->warp_rows ? step : "(int)blockDim.x";
        /* the row in registers when it fits what was rendered and, with
         * vectors, moves in whole aligned vectors; otherwise (a longer row
         * of a dynamic size, a misaligned view) the plain loop. A thread
         * holds K elements in groups of V consecutive ones (one vector each). */
        int V = kn_kernel_row_vec(k), K = row_regs_per_thread(k);
        r->regs_k = K;
        r->regs_v = V;
        if (r->warp_rows) kn_strbuf_printf(r->s, "%*sif (n%d <= %d", r->indent * 4, "", R, K * lanes);
        else kn_strbuf_printf(r->s, "%*sif (n%d <= %d * (kn_i64)blockDim.x", r->indent * 4, "", R, K);
        if (V > 1) {
            kn_strbuf_printf(r->s, " && ");
            kn_kir_put_row_vec_ok(r);
        }
        kn_strbuf_printf(r->s, ") {\n");
        r->indent++;
        kn_status st = kn_kir_row_body(r, lo, regs_step, first);
        r->regs_k = 0;
        r->regs_v = 0;
        KN_TRY(st);
        r->indent--;
        kn_kir_line(r, "} else {");
        r->indent++;
    }
    KN_TRY(kn_kir_row_body(r, r->warp_rows ? "(kn_i64)lane" : "threadIdx.x", r->warp_rows ? step : "blockDim.x",
                           first));
    if (regs) {
        r->indent--;
        kn_kir_line(r, "}");
    }
    r->indent--;
    kn_kir_line(r, "}");
    return KN_OK;
}

/* After a stage's loop: butterfly shuffles inside each warp, then the
 * warps' partials through shared memory, combined by every thread in the
 * same order (so all agree): two barriers a stage instead of a
 * shared-memory tree's nine, which had made softmax rows of 256
 * latency-bound (131 us for 8.4M elements on the H100). blockDim is a
 * power of two >= 32 (kn_kernel_launch_dims). */
static void cuda_row_partials(kn_kir_rctx *r, int s)
{
    char acc[16];
    snprintf(acc, sizeof acc, "s%d", s);
    kn_kir_line(r, "for (int w = %d; w > 0; w >>= 1) {", r->warp_rows ? kn_kernel_row_lanes(r->k) / 2 : 16);
    r->indent++;
    kn_kir_line(r, "%s o = __shfl_xor_sync(0xffffffffu, s%d, w);", kn_kir_acc_type(r, s), s);
    kn_kir_combine(r, s, acc, "o");
    r->indent--;
    kn_kir_line(r, "}");
    if (r->warp_rows) return;
    kn_kir_line(r, "if ((threadIdx.x & 31u) == 0) red%d[threadIdx.x >> 5] = s%d;", s, s);
    kn_kir_line(r, "__syncthreads();");
    kn_kir_line(r, "s%d = red%d[0];", s, s);
    kn_kir_line(r, "for (unsigned w = 1; w < (blockDim.x >> 5); w++) {");
    r->indent++;
    kn_kir_line(r, "%s o = red%d[w];", kn_kir_acc_type(r, s), s);
    kn_kir_combine(r, s, acc, "o");
    r->indent--;
    kn_kir_line(r, "}");
    kn_kir_line(r, "__syncthreads(); /* red%d is free again for the next row */", s);
}

/* Pointwise: where vectors fit (the default then), blocks and vectors per
 * thread at the default width, the narrower widths, and the scalar loop;
 * elsewhere blocks and elements per thread. Rows: a warp per row with the
 * row in registers (the default up to KN_KIR_WARP_ROW_MAX elements; also
 * element by element), a warp per row reading memory, or a block per row,
 * in several block sizes. */
static int cuda_candidates(const kn_kernel *k, kn_kconfig *out, int max)
{
    int n = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (n < max) out[n++] = (kn_kconfig){__VA_ARGS__};                                         \
    } while (0)
    if (k->kind == KN_KERNEL_POINTWISE) {
        static const int blocks[] = {128, 256, 512}, epts[] = {1, 2, 4};
        int widest = 0;
        for (int v = 16; v >= 2 && !widest; v /= 2)
            if (kn_kernel_vec_ok(k, v)) widest = v;
        if (widest) {
            int64_t numel = 1;
            for (int d = 0; d < k->ndim; d++) numel *= k->shape[d];
            for (int b = 0; b < 3; b++)
                for (int e = 0; e < 3; e++) {
                    /* the default's own vectors per thread at its block: measured already */
                    int def = 1;
                    for (int x = 4; x > 1 && def == 1; x /= 2)
                        if (numel / ((int64_t)KN_KIR_ROW_BLOCK * widest * x) >= KN_KIR_FULL_GRID) def = x;
                    if (!(blocks[b] == KN_KIR_ROW_BLOCK && epts[e] == def)) ADD(.block = blocks[b], .ept = epts[e]);
                }
            for (int v = widest / 2; v >= 2; v /= 2) ADD(.block = KN_KIR_ROW_BLOCK, .vec = v);
            ADD(.block = KN_KIR_ROW_BLOCK, .vec = 1);
            ADD(.block = KN_KIR_ROW_BLOCK, .vec = 1, .ept = 4);
        } else {
            for (int b = 0; b < 3; b++)
                for (int e = 0; e < 3; e++)
                    if (!(blocks[b] == KN_KIR_ROW_BLOCK && epts[e] == 1)) ADD(.block = blocks[b], .ept = epts[e]);
        }
    } else {
        int64_t row = k->ndim ? k->shape[k->ndim - 1] : 1;
        bool auto_regs = kn_kernel_row_regs(k) && k->cfg.rows == KN_ROWS_AUTO;
        static const int wblocks[] = {64, 128, 256, 512}, bblocks[] = {64, 128, 256, 512, 1024};
        if (row <= KN_KIR_WARP_ROW_MAX) { /* one warp per row, the row in registers */
            for (int b = 0; b < 4; b++)
                if (!(auto_regs && wblocks[b] == KN_KIR_ROW_BLOCK)) ADD(.block = wblocks[b], .rows = KN_ROWS_REGS);
            ADD(.block = KN_KIR_ROW_BLOCK, .rows = KN_ROWS_REGS, .vec = 1);
            /* rows shared by fewer lanes: more of each lane's loads in flight */
            int64_t n_rows = 1;
            for (int d = 0; d + 1 < k->ndim; d++) n_rows *= k->shape[d];
            for (int lanes = 32; lanes >= 8; lanes /= 2)
                if (n_rows % (32 / lanes) == 0 && kn_kernel_row_lanes_auto(k) != lanes)
                    ADD(.block = KN_KIR_ROW_BLOCK, .rows = KN_ROWS_REGS, .lanes = lanes);
        }
        for (int b = 0; b < 4; b++) /* one warp per row reading memory: for rows up to a few thousand */
            if (row <= 8 * KN_KIR_WARP_ROW_MAX) ADD(.block = wblocks[b], .rows = KN_ROWS_WARP);
        bool auto_bregs = auto_regs && !kn_kernel_warp_rows(k);
        for (int b = 1; b < 5 && row > KN_KIR_WARP_ROW_MAX; b++) /* one block per row, the row in registers */
            if (row <= (int64_t)KN_KIR_REGS_PER_THREAD * bblocks[b] && !(auto_bregs && bblocks[b] == KN_KIR_ROW_BLOCK))
                ADD(.block = bblocks[b], .rows = KN_ROWS_BLOCK_REGS);
        for (int b = 0; b < 5; b++) /* one block per row reading memory: wide rows want wide blocks */
            if (bblocks[b] / 2 <= row && !(!auto_regs && bblocks[b] == KN_KIR_ROW_BLOCK))
                ADD(.block = bblocks[b], .rows = KN_ROWS_BLOCK);
    }
#undef ADD
    return n;
}

const kn_render_target kn_cuda_render_target = {
    .name = "cuda",
    /* NVRTC has no standard headers: everything is self-contained. */
    .prelude = "/* generated by kiln (CUDA target) */\n"
               "typedef long long kn_i64; typedef int kn_i32; typedef unsigned int kn_u32;\n"
               "typedef unsigned short kn_u16; typedef unsigned char kn_u8;\n"
               "typedef struct kn_kargs { char *bufs[" STR(KN_KIR_MAX_ARGS) "]; long long sizes[" STR(
                   KN_MAX_DIMS) "]; } kn_kargs;\n"
               "#define KN_FN [[maybe_unused]] static __device__ __forceinline__\n" /* helpers a kernel may not use */
               "#define INFINITY __int_as_float(0x7f800000)\n"
               "#define NAN __int_as_float(0x7fffffff)\n"
               "KN_FN float kn_u2f(kn_u32 u) { return __uint_as_float(u); }\n"
               "KN_FN kn_u32 kn_f2u(float f) { return __float_as_uint(f); }\n"
               /* the half conversions in one instruction each (sm_80+),
                * instead of the shared prelude's integer versions: a bf16
                * chain rounds after every op (docs/dtypes.md), so they are
                * much of a half kernel's work. Both round to nearest even,
                * overflow to inf and keep subnormals; a NaN keeps the
                * integer versions' bits (cvt would make every NaN the
                * canonical one, and a copy must keep the bytes it copies). */
               "#define KN_HALF_CONVERSIONS_DEFINED 1\n"
               "KN_FN float kn_ld_bf16(kn_u16 h) { return kn_u2f((kn_u32)h << 16); }\n"
               "KN_FN kn_u16 kn_st_bf16(float f)\n"
               "{\n"
               "    kn_u32 u = kn_f2u(f);\n"
               "    if ((u & 0x7fffffffu) > 0x7f800000u) return (kn_u16)((u >> 16) | 0x40u);\n"
               "    kn_u16 h;\n"
               "    asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
               "    return h;\n"
               "}\n"
               "KN_FN float kn_ld_f16(kn_u16 h)\n"
               "{\n"
               "    if ((h & 0x7fffu) > 0x7c00u) return kn_u2f(((kn_u32)(h & 0x8000u) << 16) | 0x7f800000u | ((kn_u32)(h & 0x3ffu) << 13));\n"
               "    float f;\n"
               "    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
               "    return f;\n"
               "}\n"
               "KN_FN kn_u16 kn_st_f16(float f)\n"
               "{\n"
               "    kn_u32 u = kn_f2u(f);\n"
               "    if ((u & 0x7fffffffu) > 0x7f800000u) return (kn_u16)(((u >> 16) & 0x8000u) | 0x7e00u);\n"
               "    kn_u16 h;\n"
               "    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
               "    return h;\n"
               "}\n"
               /* an intermediate's rounding: any NaN will do, so no check */
               "KN_FN float kn_round_bf16(float f) { kn_u16 h; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return kn_ld_bf16(h); }\n"
               "KN_FN float kn_round_f16(float f) { kn_u16 h; float r; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(r) : \"h\"(h)); return r; }\n"
               /* GELU whose result is rounded to bf16 (kn_gelu_bf16) or f16
                * (kn_gelu_f16), the target's half_gelu: x Phi(x), where
                * Phi(-|x|) = t 2^(P(t) - x^2 log2(e) / 2), t = 1 / (1 + c|x|),
                * and the polynomial P was fitted (mpmath, iterated weighted
                * least squares) for the smallest largest relative error of
                * Phi(-|x|) over |x| <= 14; past that, the result is 0 or x
                * in either dtype. bf16: degree 5, c = 0.3536, 7.6e-6, 1/500
                * of bf16's half unit (H100: 99.96% of results correctly
                * rounded on N(0, 3) inputs, every one within one unit).
                * f16: degree 7, c = 0.34, 3.5e-7. The reciprocal and exp2
                * are the fast ones (rcp.approx: 1 + c|x| >= 1 is never
                * subnormal). Bias + GELU on bf16 is bound by its
                * instructions: erff's two branches (19 us for 16x256x2048),
                * then Numerical Recipes' degree-9 erfcc (12.0 us), now 16
                * instructions an element. x = -inf gives NaN, as the
                * formula 0.5 x (1 + erf(x / sqrt 2)) does in eager. */
               "KN_FN float kn_gelu_from(float x, float t, float p)\n"
               "{\n"
               "    float e;\n"
               "    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(e) : \"f\"(fmaf(x * -0.72134752044448170f, x, p)));\n"
               "    const float h = t * e; /* Phi(-|x|) */\n"
               "    return x * (x > 0.0f ? 1.0f - h : h);\n"
               "}\n"
               "KN_FN float kn_gelu_bf16(float x)\n"
               "{\n"
               "    float t;\n"
               "    asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(t) : \"f\"(fmaf(fabsf(x), 0.3536f, 1.0f)));\n"
               "    float p = fmaf(t, 0.330040937375f, -1.02281216053f);\n"
               "    p = fmaf(t, p, 0.683885756763f);\n"
               "    p = fmaf(t, p, 0.367310827768f);\n"
               "    p = fmaf(t, p, 1.4686244049f);\n"
               "    p = fmaf(t, p, -2.82703875828f);\n"
               "    return kn_gelu_from(x, t, p);\n"
               "}\n"
               "KN_FN float kn_gelu_f16(float x)\n"
               "{\n"
               "    float t;\n"
               "    asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(t) : \"f\"(fmaf(fabsf(x), 0.34f, 1.0f)));\n"
               "    float p = fmaf(t, -0.278648017893f, 1.18876577156f);\n"
               "    p = fmaf(t, p, -1.75768954588f);\n"
               "    p = fmaf(t, p, 0.851654721919f);\n"
               "    p = fmaf(t, p, -0.177037601841f);\n"
               "    p = fmaf(t, p, 0.618897996115f);\n"
               "    p = fmaf(t, p, 1.4359042646f);\n"
               "    p = fmaf(t, p, -2.88184808696f);\n"
               "    return kn_gelu_from(x, t, p);\n"
               "}\n"
               /* The target's pair ops: a bf16 or f16 add, subtract or
                * multiply of elements e of two loaded vectors, computed with
                * its neighbour e ^ 1 in one packed instruction. The f32
                * result rounded to the dtype, which eager computes, is the
                * same value: a product of two 8- or 11-bit significands fits
                * f32 exactly; so does a sum, unless one operand is under
                * 2^-13 of the other, and then both round to the larger.
                * Bias + GELU on bf16 paid two conversions and an f32 add an
                * element for it (8.90 against 10.34 us on the H100). bf16
                * pairs need sm_90; before, the f32 form. */
               "#define KN_PAIR_PACKED(OP, T)\\\n"
               "KN_FN float kn_pair_##OP##_##T(const kn_u16 *a, const kn_u16 *b, int e)\\\n"
               "{\\\n"
               "    const int lo = e & ~1;\\\n"
               "    const kn_u32 x = (kn_u32)a[lo] | (kn_u32)a[lo + 1] << 16, y = (kn_u32)b[lo] | (kn_u32)b[lo + 1] << 16;\\\n"
               "    kn_u32 r;\\\n"
               "    asm(#OP \".rn.\" #T \"x2 %0, %1, %2;\" : \"=r\"(r) : \"r\"(x), \"r\"(y));\\\n"
               "    return kn_ld_##T((kn_u16)(e & 1 ? r >> 16 : r));\\\n"
               "}\n"
               "#define KN_PAIR_F32(OP, T, F32OP)\\\n"
               "KN_FN float kn_pair_##OP##_##T(const kn_u16 *a, const kn_u16 *b, int e)\\\n"
               "{\\\n"
               "    return kn_round_##T(kn_ld_##T(a[e]) F32OP kn_ld_##T(b[e]));\\\n"
               "}\n"
               "#if __CUDA_ARCH__ >= 900\n"
               "KN_PAIR_PACKED(add, bf16) KN_PAIR_PACKED(sub, bf16) KN_PAIR_PACKED(mul, bf16)\n"
               "#else\n"
               "KN_PAIR_F32(add, bf16, +) KN_PAIR_F32(sub, bf16, -) KN_PAIR_F32(mul, bf16, *)\n"
               "#endif\n"
               "KN_PAIR_PACKED(add, f16) KN_PAIR_PACKED(sub, f16) KN_PAIR_PACKED(mul, f16)\n"
               /* the same on whole 32-bit words of pairs, for a row's folded
                * adds (kn_kir_row.c: a layer norm's bias and residual adds
                * took 8 instructions an element in f32, one word op takes
                * two elements) */
               "#define KN_PAIRW_PACKED(OP, T)\\\n"
               "KN_FN kn_u32 kn_pairw_##OP##_##T(kn_u32 x, kn_u32 y)\\\n"
               "{\\\n"
               "    kn_u32 r;\\\n"
               "    asm(#OP \".rn.\" #T \"x2 %0, %1, %2;\" : \"=r\"(r) : \"r\"(x), \"r\"(y));\\\n"
               "    return r;\\\n"
               "}\n"
               "#define KN_PAIRW_F32(OP, T, F32OP)\\\n"
               "KN_FN kn_u32 kn_pairw_##OP##_##T(kn_u32 x, kn_u32 y)\\\n"
               "{\\\n"
               "    const kn_u16 lo = kn_st_##T(kn_round_##T(kn_ld_##T((kn_u16)x) F32OP kn_ld_##T((kn_u16)y)));\\\n"
               "    const kn_u16 hi = kn_st_##T(kn_round_##T(kn_ld_##T((kn_u16)(x >> 16)) F32OP kn_ld_##T((kn_u16)(y >> 16))));\\\n"
               "    return (kn_u32)lo | (kn_u32)hi << 16;\\\n"
               "}\n"
               "#if __CUDA_ARCH__ >= 900\n"
               "KN_PAIRW_PACKED(add, bf16) KN_PAIRW_PACKED(sub, bf16) KN_PAIRW_PACKED(mul, bf16)\n"
               "#else\n"
               "KN_PAIRW_F32(add, bf16, +) KN_PAIRW_F32(sub, bf16, -) KN_PAIRW_F32(mul, bf16, *)\n"
               "#endif\n"
               "KN_PAIRW_PACKED(add, f16) KN_PAIRW_PACKED(sub, f16) KN_PAIRW_PACKED(mul, f16)\n"
               /* a 16-byte vector in one store: assigned as a struct, the
                * compiler split a layer norm's first group of bf16 results
                * into four 4-byte stores */
               "template <class T> KN_FN void kn_st16(void *p, const T &v)\n"
               "{\n"
               "    static_assert(sizeof(T) == 16, \"a 16-byte vector\");\n"
               "    const uint4 q = *(const uint4 *)&v;\n"
               "    asm(\"st.global.v4.u32 [%0], {%1, %2, %3, %4};\" : : \"l\"(p), \"r\"(q.x), \"r\"(q.y), \"r\"(q.z), \"r\"(q.w));\n"
               "}\n"
               /* element i of a vector of bf16 in registers, from its 32-bit
                * words (i is a constant once the loops unroll) */
               "template <class T> KN_FN float kn_ldv_bf16(const T &v, int i)\n"
               "{\n"
               "    const kn_u32 w = ((const kn_u32 *)&v)[i >> 1];\n"
               "    return kn_u2f(i & 1 ? w & 0xffff0000u : w << 16);\n"
               "}\n",
    .bufs = "ka.bufs",
    .sizes = "ka.sizes",
    .after_params = NULL,
    .unroll_pragma = NULL, /* cfg.unroll is the C target's knob */
    .full_unroll_pragma = "#pragma unroll",
    .f32_math_in_f64 = false,
    .f32_row_sum_in_f64 = false,
    .sizes_baked = true,
    .half_gelu = "kn_gelu_",
    .pair_op = "kn_pair_",
    .pair_word_op = "kn_pairw_",
    .rsqrt_f32 = "rsqrtf",
    .ld_bf16_in_vec = "kn_ldv_bf16",
    .store16 = "kn_st16",
    /* 48 registers of row and kept values: a bf16 softmax row of 256 on 16
     * lanes keeps its masked input and its exps (44 registers, no spills)
     * and took 12.8 us on the H100 for 16 x 8 x 256 rows; at 96 bytes it
     * computed both again, 18.0 us */
    .kept_bytes = 192,
    .signature = cuda_signature,
    .pointwise = cuda_pointwise,
    .row = cuda_row,
    .row_partials = cuda_row_partials,
    .candidates = cuda_candidates,
    .vector_type = cuda_vector_type,
};

const char *kn_cuda_render_prelude(void)
{
    /* rendered once and kept: template modules prepend it on every build */
    static char *text;
    if (!text && kn_kir_prelude(&kn_cuda_render_target, &text) != KN_OK) return NULL;
    return text;
}
