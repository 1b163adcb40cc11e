/* kn_cuda_gemm_x3: the launcher of kiln's split-precision f32 GEMM (see
 * kn_cuda_gemm_x3.h and kernels/cuda/kn_la_gemm_x3.cu). */
#include "kn_cuda_gemm_x3.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_context.h"
#include "kn_cuda_linalg.h"
#include "kn_cuda_module.h"

#define X3_STAGES 3

/* kt: the k a pipeline stage holds (kn_la_gemm_x3.cu's KN_X3_KTILE), and
 * one f32 add of the tensor core's partial sums per stage. 128x128 with 64
 * of k ran 6-21% faster than with 32 on the transformer block's GEMMs and
 * a 4096-cube (H200, run 7), slower on BERT's FFN2 and a weight gradient:
 * both are candidates. */
static const struct x3_tile {
    int bm, bn, wm, wn, kt;
    bool wgmma; /* the wgmma form: Hopper (sm_90a) only, a warpgroup per 64 rows */
    bool swap;  /* its swapped form: a warpgroup per 64 columns, both operands k-contiguous */
    const char *name;
} x3_tiles[KN_CUDA_X3_TILES] = {
    {128, 128, 64, 32, 32, false, false, "128x128"},
    {128, 64, 32, 32, 32, false, false, "128x64"},
    {64, 64, 32, 32, 32, false, false, "64x64"},
    {64, 32, 32, 16, 32, false, false, "64x32"},
    {128, 128, 64, 32, 64, false, false, "128x128k64"},
    [KN_CUDA_X3_TILE_WG128] = {128, 128, 64, 128, 32, true, false, "wg128x128"},
    [KN_CUDA_X3_TILE_WG64X128] = {64, 128, 64, 128, 32, true, false, "wg64x128"},
    [KN_CUDA_X3_TILE_WG64] = {64, 64, 64, 64, 32, true, false, "wg64x64"},
    /* one wave of 128-row tiles where 128x128 takes two or a ragged
     * second (BERT's 1024 x 2304 and 1024 x 3072: 96 and 128 tiles) */
    [KN_CUDA_X3_TILE_WG128X192] = {128, 192, 64, 192, 32, true, false, "wg128x192"},
    /* the convolutions' tile for 64 output channels or fewer */
    [KN_CUDA_X3_TILE_WG128X64] = {128, 64, 64, 64, 32, true, false, "wg128x64"},
    /* the swapped form, for few rows: b's tiles split in registers */
    [KN_CUDA_X3_TILE_WGS64X128] = {64, 128, 64, 64, 32, true, true, "wgs64x128"},
    [KN_CUDA_X3_TILE_WGS64X64] = {64, 64, 64, 64, 32, true, true, "wgs64x64"},
};

/* the most dynamic shared memory a block may have (sm_90: 227 KiB) */
#define X3_SMEM_MAX (227 * 1024)

bool kn_cuda_gemm_x3_tile_runs_here(int tile)
{
    if (tile < 0 || tile >= KN_CUDA_X3_TILES) return false;
    return !x3_tiles[tile].wgmma || kn_cuda_arch() == 90;
}

const char *kn_cuda_gemm_x3_tile_name(int tile)
{
    return tile >= 0 && tile < KN_CUDA_X3_TILES ? x3_tiles[tile].name : "?";
}

/* What a launch runs: the GEMM, the convolution form, or its weight
 * gradient's */
enum { X3_FORM_GEMM, X3_FORM_CONV, X3_FORM_CONV_WGRAD };

/* A launch of c in tile shape `tile`: its grid (x over m, y over n),
 * threads and shared bytes. */
static void x3_launch_shape(const kn_cuda_x3_call *c, int tile, int form, unsigned grid[2], unsigned *threads,
                            size_t *smem)
{
    const struct x3_tile *t = &x3_tiles[tile];
    const int kt = t->kt;
    if (t->swap) {
        /* a's planes for its 4 stages and two small ones, b's stages */
        *smem = ((size_t)6 * t->bm + (size_t)4 * t->bn) * (size_t)kt * sizeof(float) + 1024;
        *threads = 128u * (unsigned)(t->bn / 64);
    } else if (t->wgmma) {
        /* the kernel's w_tile regions (kn_la_gemm_x3.cu) and 1 KiB to
         * align them on: a k-contiguous operand's planes for its stages
         * and two small ones, an m- or n-contiguous one's four planes and
         * raw stages of kt rows of its rows + 8 */
        int stages = c->a_kmajor && c->b_kmajor ? 4 : c->a_kmajor || c->b_kmajor ? 3 : 2;
        if (t->bn > 128 && (c->a_kmajor || c->b_kmajor)) stages--; /* W_STAGES */
        if (form == X3_FORM_CONV_WGRAD) stages = 4;
        size_t floats = 0;
        for (int o = 0; o < 2; o++) {
            size_t rows = (size_t)(o ? t->bn : t->bm);
            bool kmaj = o ? c->b_kmajor : c->a_kmajor;
            floats += kmaj ? (size_t)(stages + 2) * rows * (size_t)kt
                           : 4 * rows * (size_t)kt + (size_t)stages * (size_t)kt * (rows + 8);
        }
        *smem = floats * sizeof(float) + 1024;
        /* the weight-gradient form: two warpgroups over the 64 rows' halves of columns */
        *threads = form == X3_FORM_CONV_WGRAD ? 256u : 128u * (unsigned)(t->bm / 64);
    } else {
        /* shared bytes: the kernel's X3_TILE_FLOATS, three stages */
        size_t a = c->a_kmajor ? (size_t)t->bm * (size_t)(kt + 8) : (size_t)kt * (size_t)(t->bm + 4);
        size_t b = c->b_kmajor ? (size_t)t->bn * (size_t)(kt + 8) : (size_t)kt * (size_t)(t->bn + 4);
        *smem = X3_STAGES * (a + b) * sizeof(float);
        *threads = 32u * (unsigned)(t->bm / t->wm) * (unsigned)(t->bn / t->wn);
    }
    grid[0] = (unsigned)((c->p.m + t->bm - 1) / t->bm);
    grid[1] = (unsigned)((c->p.n + t->bn - 1) / t->bn);
}

/* whether tile's stages fit in shared memory with these layouts */
static bool x3_layout_fits(int tile, bool a_kmajor, bool b_kmajor)
{
    kn_cuda_x3_call c;
    memset(&c, 0, sizeof c);
    c.p.m = c.p.n = c.p.k = 1, c.count = 1, c.a_kmajor = a_kmajor, c.b_kmajor = b_kmajor;
    unsigned grid[2], threads;
    size_t smem;
    x3_launch_shape(&c, tile, X3_FORM_GEMM, grid, &threads, &smem);
    return smem <= X3_SMEM_MAX;
}

bool kn_cuda_gemm_x3_tile_takes(int tile, bool a_kmajor, bool b_kmajor)
{
    return kn_cuda_gemm_x3_tile_runs_here(tile) && x3_layout_fits(tile, a_kmajor, b_kmajor) &&
           (!x3_tiles[tile].swap || (a_kmajor && b_kmajor));
}

bool kn_cuda_gemm_x3_shape_fits(const kn_cuda_x3_call *c)
{
    const kn_la_gemm_args *p = &c->p;
    if (p->m <= 0 || p->n <= 0 || p->k <= 0 || c->count < 1 || c->count > 65535) return false;
    if (p->m > (int64_t)1 << 30 || p->n > (int64_t)65535 * 32 || p->k > (int64_t)1 << 30) return false;
    if (p->lda % 4 || p->ldb % 4 || (c->count > 1 && (p->sa % 4 || p->sb % 4))) return false;
    return true;
}

bool kn_cuda_gemm_x3_fits(const kn_cuda_x3_call *c)
{
    const kn_la_gemm_args *p = &c->p;
    return kn_cuda_gemm_x3_shape_fits(c) && (uintptr_t)p->a % 16 == 0 && (uintptr_t)p->b % 16 == 0 &&
           (!p->bias || (uintptr_t)p->bias % 4 == 0);
}

/* c's output tiles in tile shape `tile`, all batches */
static int64_t x3_tiles_of(const kn_cuda_x3_call *c, int tile)
{
    const struct x3_tile *t = &x3_tiles[tile];
    return (c->p.m + t->bm - 1) / t->bm * ((c->p.n + t->bn - 1) / t->bn) * c->count;
}

/* Split-K for a call of few tiles and a long sum, each split at least
 * X3_SPLIT_MIN_K long. */
#define X3_SPLIT_MIN_K 512
#define X3_SPLITS_MAX 8

/* The wave model of the wgmma tiles of 128 rows, one block an SM (their
 * shared memory takes the SM): the blocks run in waves of an SM each, a
 * wave takes its tiles' k times X3_WG_US_PER_K for each 128x128 of their
 * area (X3_WG_192_COST times that for 128x192) plus X3_WG_WAVE_US
 * (filling the pipeline, the epilogue), an operand that is not
 * k-contiguous costs X3_WG_NOT_K_COST more (X3_WG_192_NOT_K_COST for the
 * 128x192 tile, whose stages then drop to two), and split-K adds its partial
 * sums' writes and reads at about 6 TB/s (they mostly stay in L2).
 * Fitted to bench/split_gemm.c on the H200 after the epilogue was made
 * compact (session 26, run 4), where the model says / it measured, us:
 * 4096x2048x512 129 / 130 (128x128, 4 waves) and 117 / 129 (128x192, 3);
 * 4096x512x2048 126 / 121 and 149 / 140 (one wave each); 4096x1536x512
 * 96 / 99 and 79 / 87; 1024x3072x768 94 / 96 and 58 / 63; 1576x2304x768
 * 94 / 94 and 115 / 125; 4096x2048x512 with b n-contiguous 136 / 136
 * and 147 / 147. (Before, the epilogue cost as much as 16 k tiles, and the
 * model had 0.06 us and 10 us a wave, 192 at 1.5.) */
#define X3_WG_US_PER_K 0.057
#define X3_WG_WAVE_US 3.0
#define X3_WG_192_COST 1.25
#define X3_WG_NOT_K_COST 1.05
#define X3_WG_192_NOT_K_COST 1.25
static double x3_wave_us(const kn_cuda_x3_call *c, int tile, int splits, int sms)
{
    const struct x3_tile *t = &x3_tiles[tile];
    int64_t blocks = x3_tiles_of(c, tile) * splits, waves = (blocks + sms - 1) / sms;
    double kchunk = (double)((c->p.k + splits - 1) / splits);
    double area = t->bm * t->bn / 16384.0 * (t->bn > 128 ? X3_WG_192_COST / 1.5 : 1.0);
    double per_k = X3_WG_US_PER_K * (c->a_kmajor && c->b_kmajor ? 1.0
                                     : t->bn > 128                ? X3_WG_192_NOT_K_COST
                                                                  : X3_WG_NOT_K_COST);
    double us = (double)waves * (per_k * kchunk * area + X3_WG_WAVE_US);
    if (splits > 1) us += (2.0 * splits + 1) * (double)(c->p.m * c->p.n * c->count) * 4.0 / 6.0e6;
    return us;
}

/* A 128-row wgmma tile's split count: the model's fastest (the fewer
 * splits of two as fast) */
static int x3_wave_splits(const kn_cuda_x3_call *c, int tile, int sms, double *us)
{
    int64_t most = c->p.k / X3_SPLIT_MIN_K;
    if (most > X3_SPLITS_MAX) most = X3_SPLITS_MAX;
    if (most * c->count > 65535) most = 1;
    int best = 1;
    *us = x3_wave_us(c, tile, 1, sms);
    for (int s = 2; s <= most; s++) {
        double t = x3_wave_us(c, tile, s, sms);
        if (t < *us) *us = t, best = s;
    }
    return best;
}

/* The default's rule (docs/precision.md), as measured with both operands
 * k-contiguous on the H200 (bench/split_gemm.c, session 16, runs 4 and
 * 6; each tile split as this model splits it):
 * - more than 96 rows: the 128x128 or 128x192 tile, whichever the wave
 *   model finds faster, where it beats cuBLASLt taken at 40 TFLOP/s, what
 *   its strict f32 GEMM sustained on these shapes (33-50). In session 16
 *   it picked the faster tile on each of twelve GEMMs of BERT, ViT-B/16
 *   and the transformer block, and left the two output projections of 48
 *   and 78 tiles (1024 and 1576 x 768 x 768), no faster, to cuBLASLt.
 *   Since the compact epilogue (session 26, run 4) the tiles it picks ran
 *   1.41-2.06x cuBLASLt on those shapes (4096x1536x512: 87.4 us against
 *   164.9; 1024x3072x768: 63.3 against 130.6);
 * - at most 64 rows, both operands k-contiguous and a long sum
 *   (large_linear's 64 x 4096 x 4096): the swapped 64x128 tile, split to
 *   about a wave, 1.36x (47.8 us against 65.2, where wgs64x64 took 49.8
 *   and wg64x64 57.5; session 19, run 5);
 * - 65 to 96 rows, or another layout: the 64x64 tile, split-K, 1.06-1.15x
 *   (session 15).
 * Short sums (k < 512) and small products stay with cuBLASLt. */
int kn_cuda_gemm_x3_default_pick(const kn_cuda_x3_call *c, int sms, int *splits)
{
    static const int tiles[2] = {KN_CUDA_X3_TILE_WG128, KN_CUDA_X3_TILE_WG128X192};
    const kn_la_gemm_args *p = &c->p;
    *splits = 1;
    if (sms < 1 || p->k < 512 || p->m * p->n * p->k * c->count < ((int64_t)1 << 28)) return -1;
    if (p->m <= 96) {
        *splits = 0; /* the launcher's rule for the smaller tiles */
        return p->m <= 64 && c->a_kmajor && c->b_kmajor ? KN_CUDA_X3_TILE_WGS64X128 : KN_CUDA_X3_TILE_WG64;
    }
    int best = -1;
    double best_us = 0;
    for (int i = 0; i < 2; i++) {
        if (!x3_layout_fits(tiles[i], c->a_kmajor, c->b_kmajor)) continue;
        double us;
        int s = x3_wave_splits(c, tiles[i], sms, &us);
        if (best < 0 || us < best_us) best = tiles[i], best_us = us, *splits = s;
    }
    double cublaslt_us = 2.0 * (double)p->m * (double)p->n * (double)p->k * (double)c->count / 40e6;
    if (best < 0 || best_us >= cublaslt_us) {
        *splits = 1;
        return -1;
    }
    return best;
}

/* The other tiles: enough splits for about four blocks an SM (the smaller
 * tiles fit four or more at once); the swapped tiles, about a whole wave. */
static int x3_splits(const kn_cuda_x3_call *c, int tile, int sms)
{
    /* KILN_X3_SPLITS=n: every call split n ways where its k allows (for
     * measuring the heuristic in bench/split_gemm.c, not for users) */
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("KILN_X3_SPLITS");
        forced = e ? atoi(e) : 0;
    }
    if (forced > 0) {
        int64_t f = forced < c->p.k / 64 ? forced : c->p.k / 64;
        return f > 1 && f * c->count <= 65535 ? (int)f : 1;
    }
    if (tile == KN_CUDA_X3_TILE_WG128 || tile == KN_CUDA_X3_TILE_WG128X192 || tile == KN_CUDA_X3_TILE_WG128X64) {
        double us;
        return x3_wave_splits(c, tile, sms, &us);
    }
    int64_t blocks = x3_tiles_of(c, tile), want, by_k;
    if (x3_tiles[tile].swap) {
        /* a wave: a block an SM (256 threads at up to 255 registers) or
         * two (128), splits to the nearest whole wave */
        int64_t per_sm = x3_tiles[tile].bn > 64 ? 1 : 2;
        want = (2 * per_sm * sms + blocks) / (2 * blocks), by_k = c->p.k / 256;
    } else {
        want = (4 * (int64_t)sms + blocks - 1) / blocks, by_k = c->p.k / X3_SPLIT_MIN_K;
    }
    int64_t s = want < by_k ? want : by_k;
    if (s > X3_SPLITS_MAX) s = X3_SPLITS_MAX;
    if (s * c->count > 65535) s = 1;
    return s > 1 ? (int)s : 1;
}

/* The weight-gradient form's splits: its k is every output pixel of the
 * batch (100,352 for the convnet sample's second layer) and its output a
 * few tiles, so a split takes a run of pixels, as many splits as make two
 * waves (a block an SM: its four stages take the shared memory), each at
 * least X3_WGRAD_MIN_K pixels long. More splits cost their sum
 * (kn_la_gemm_x3_sum reads every split's plane). */
#define X3_WGRAD_MIN_K 256
#define X3_WGRAD_SPLITS_MAX 256
static int x3_wgrad_splits(const kn_cuda_x3_call *c, int tile, int sms)
{
    int64_t blocks = x3_tiles_of(c, tile), want = (2 * (int64_t)sms + blocks - 1) / blocks,
            by_k = c->p.k / X3_WGRAD_MIN_K;
    int64_t s = want < by_k ? want : by_k;
    if (s > X3_WGRAD_SPLITS_MAX) s = X3_WGRAD_SPLITS_MAX;
    return s > 1 ? (int)s : 1;
}

/* Launch c in tile shape `tile`: the GEMM's module of that tile and
 * layout, or the convolution form's (form X3_FORM_CONV) or its weight
 * gradient's (X3_FORM_CONV_WGRAD) module of that tile. */
static kn_status x3_launch(const kn_cuda_x3_call *c, int tile, int form)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t smem_raised[KN_CUDA_X3_TILES][6]; /* a bit a GPU; [4], [5]: the convolution forms */
    const bool conv = form != X3_FORM_GEMM;
    const char *what = form == X3_FORM_CONV_WGRAD ? "conv2d_weight_grad" : conv ? "conv2d" : "matmul";
    if (tile < 0 || tile >= KN_CUDA_X3_TILES) return kn_error(KN_ERR_ARG, "%s: no split-f32 tile shape %d", what, tile);
    if (!kn_cuda_gemm_x3_fits(c)) return kn_error(KN_ERR_UNSUPPORTED, "%s: the split-f32 kernel cannot take this call", what);
    const struct x3_tile *t = &x3_tiles[tile];
    if (!kn_cuda_gemm_x3_tile_runs_here(tile))
        return kn_error(KN_ERR_UNSUPPORTED, "%s: the split-f32 kernel's %s tile runs on Hopper (sm_90) only", what,
                        t->name);
    if (t->swap && !(c->a_kmajor && c->b_kmajor))
        return kn_error(KN_ERR_UNSUPPORTED, "%s: the split-f32 kernel's %s tile takes both operands k-contiguous", what,
                        t->name);
    /* before the module is loaded: a layout whose stages do not fit is
     * refused without compiling it */
    unsigned grid[2], threads;
    size_t smem;
    x3_launch_shape(c, tile, form, grid, &threads, &smem);
    if (smem > X3_SMEM_MAX)
        return kn_error(KN_ERR_UNSUPPORTED,
                        "%s: the split-f32 kernel's %s tile does not fit in shared memory with both operands "
                        "m- or n-contiguous", what, t->name);
    int layout = form == X3_FORM_CONV ? 4 : form == X3_FORM_CONV_WGRAD ? 5 : (c->a_kmajor ? 0 : 2) + (c->b_kmajor ? 0 : 1);
    static const char *const lay[4] = {"kk", "kn", "mk", "mn"};
    char name[64];
    if (form == X3_FORM_CONV) snprintf(name, sizeof name, "kn_la_conv_x3_%s", t->name);
    else if (form == X3_FORM_CONV_WGRAD) snprintf(name, sizeof name, "kn_la_conv_x3w_%s", t->name);
    else snprintf(name, sizeof name, "kn_la_gemm_x3_%s_%s", t->name, lay[layout]);
    const void *fn;
    KN_TRY(kn_cuda_linalg_kernel(name, &fn));
    int dev = kn_cuda_current()->index;
    pthread_mutex_lock(&lock);
    bool raised = dev < 64 && (smem_raised[tile][layout] >> dev & 1);
    pthread_mutex_unlock(&lock);
    if (!raised && smem > 48 * 1024) {
        cudaError_t e = cudaKernelSetAttributeForDevice((cudaKernel_t)fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        (int)smem, dev);
        if (e != cudaSuccess) return kn_cuda_fail(e, conv ? "conv2d: raising the split-f32 kernel's shared-memory limit"
                                                          : "matmul: raising the split-f32 kernel's shared-memory limit");
        pthread_mutex_lock(&lock);
        if (dev < 64) smem_raised[tile][layout] |= 1ull << dev;
        pthread_mutex_unlock(&lock);
    }
    kn_la_gemm_args p = c->p;
    p.splits = form == X3_FORM_CONV_WGRAD ? x3_wgrad_splits(c, tile, kn_cuda_current()->sm_count)
                                           : x3_splits(c, tile, kn_cuda_current()->sm_count);
    p.batches = c->count;
    /* each split's k range, a multiple of the kernel's k tile */
    p.kchunk = ((p.k + p.splits - 1) / p.splits + t->kt - 1) / t->kt * t->kt;
    p.splits = (int)((p.k + p.kchunk - 1) / p.kchunk);
    if (p.splits == 1) return kn_cuda_launch_grid3(fn, grid[0], grid[1], (unsigned)c->count, threads, 1, &p, smem);
    /* the partial sums' planes: freed as soon as queued (the pool orders
     * their reuse after this work on the one stream, recordings too) */
    const void *sum;
    KN_TRY(kn_cuda_linalg_kernel("kn_la_gemm_x3_sum", &sum));
    void *ws = NULL;
    KN_TRY(kn_cuda_malloc(p.splits * c->count * p.m * p.n * (int64_t)sizeof(float), &ws));
    p.ws = ws;
    kn_status st = kn_cuda_launch_grid3(fn, grid[0], grid[1], (unsigned)(c->count * p.splits), threads, 1, &p, smem);
    if (st == KN_OK) {
        /* kn_la_gemm_x3_sum: a thread 4 columns of a row, a block up to
         * 256 threads across a row, rows along y */
        int64_t quads = (p.n + 3) / 4, rows = c->count * p.m;
        unsigned threads_sum = quads >= 256 ? 256 : (unsigned)((quads + 31) / 32 * 32);
        unsigned gx = (unsigned)((quads + threads_sum - 1) / threads_sum), gy = rows < 65535 ? (unsigned)rows : 65535;
        st = kn_cuda_launch_grid3(sum, gx, gy, 1, threads_sum, 1, &p, 0);
    }
    kn_cuda_free(ws);
    return st;
}

kn_status kn_cuda_gemm_x3(const kn_cuda_x3_call *c, int tile)
{
    return x3_launch(c, tile, X3_FORM_GEMM);
}

/* ---- the convolution form ---- */

/* Its tiles: 128 rows (output pixels) by 64 or 128 output channels, and
 * 64x64 for convolutions of few pixels. */
bool kn_cuda_conv_x3_tile_ok(int tile)
{
    return tile == KN_CUDA_X3_TILE_WG128X64 || tile == KN_CUDA_X3_TILE_WG128 || tile == KN_CUDA_X3_TILE_WG64;
}

bool kn_cuda_conv_x3_fits(const kn_cuda_x3_call *c)
{
    const kn_la_conv_geom *g = &c->p.cv;
    if (c->count != 1 || !c->a_kmajor || !c->b_kmajor || !kn_cuda_gemm_x3_fits(c)) return false;
    if (g->c <= 0 || g->c % 4 || g->h <= 0 || g->w <= 0 || g->p <= 0 || g->q <= 0 || g->s <= 0) return false;
    /* a padding may be negative: an input gradient's class starts inside
     * the output's gradient (kn_cuda_conv_x3.c) */
    if (g->sh <= 0 || g->sw <= 0 || g->dh <= 0 || g->dw <= 0) return false;
    /* k = r s c, each a 32-bit int in the kernel; m = N p q pixels */
    return c->p.k % ((int64_t)g->s * g->c) == 0 && c->p.ldb == c->p.k && c->p.m % ((int64_t)g->p * g->q) == 0 &&
           (int64_t)g->h * g->w * g->c < ((int64_t)1 << 31);
}

bool kn_cuda_conv_x3w_fits(const kn_cuda_x3_call *c)
{
    const kn_la_conv_geom *g = &c->p.cv;
    if (c->count != 1 || c->a_kmajor || c->b_kmajor || !kn_cuda_gemm_x3_fits(c) || c->p.ys.pc) return false;
    if (g->c <= 0 || g->c % 4 || g->h <= 0 || g->w <= 0 || g->p <= 0 || g->q <= 0 || g->s <= 0) return false;
    if (g->sh <= 0 || g->sw <= 0 || g->dh <= 0 || g->dw <= 0) return false;
    /* n = r s c taps and channels; k = N p q output pixels, N within an
     * int as the kernel carries it */
    return c->p.n % ((int64_t)g->s * g->c) == 0 && c->p.k % ((int64_t)g->p * g->q) == 0 &&
           c->p.k / ((int64_t)g->p * g->q) < ((int64_t)1 << 31) && (int64_t)g->h * g->w * g->c < ((int64_t)1 << 31);
}

kn_status kn_cuda_conv_x3w(const kn_cuda_x3_call *c)
{
    if (!kn_cuda_conv_x3w_fits(c))
        return kn_error(KN_ERR_UNSUPPORTED, "conv2d_weight_grad: the split-f32 weight gradient cannot take this call");
    return x3_launch(c, KN_CUDA_X3_TILE_WG64X128, X3_FORM_CONV_WGRAD);
}

int kn_cuda_conv_x3_default_pick(const kn_cuda_x3_call *c)
{
    return c->p.n <= 64 ? KN_CUDA_X3_TILE_WG128X64 : KN_CUDA_X3_TILE_WG128;
}

kn_status kn_cuda_conv_x3(const kn_cuda_x3_call *c, int tile)
{
    if (!kn_cuda_conv_x3_tile_ok(tile))
        return kn_error(KN_ERR_ARG, "conv2d: the split-f32 convolution has no %s tile", kn_cuda_gemm_x3_tile_name(tile));
    if (!kn_cuda_conv_x3_fits(c)) return kn_error(KN_ERR_UNSUPPORTED, "conv2d: the split-f32 convolution cannot take this call");
    return x3_launch(c, tile, X3_FORM_CONV);
}
