/* kn_cuda_ops: eager ops through kiln's CUDA templates (kernels/cuda/ *.cu)
 * for what the one-node kernel IR does not cover: reductions over several
 * dims, max with indices, the pools, cat, index_select / gather /
 * index_add, the random creation ops, and strided copies between any two
 * dtypes (contiguous, cast); gather_scatter's kernels live in the same
 * modules, launched by kn_cuda_gather_scatter.c.
 *
 * Every result matches the CPU reference (kernels/cpu) bit for bit, except
 * float sums (double accumulation in another order) and index_add on floats
 * (atomics in another order). Kernels are looked up once per (dtype, kernel)
 * and kept in a static table, so a call costs one struct fill and one
 * launch; index ops add a read-back of their range check.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_ops.h"

#include "kn_cuda_context.h"
#include "kn_cuda_module.h"
#include "kn_cuda_targs.h"
#include "kn_cuda_tsrc.h"
#include "kn_shape.h"
#include "kn_view.h"

#define GRID_CAP 65535 /* kernels loop over their work: any grid is correct */

/* Process-wide: modules are loaded context-independently (cudaLibrary), so
 * one kernel handle serves every GPU (of one architecture, as the eager
 * cache assumes too). A module holds one kernel (kn_cuda_ops_source): a
 * first call compiles only the kernels it runs. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const void *g_fn[KN_DTYPE_COUNT][KN_TK_COUNT];

static kn_status kernel_of(kn_dtype dt, int k, const void **fn)
{
    pthread_mutex_lock(&g_lock);
    *fn = g_fn[dt][k];
    pthread_mutex_unlock(&g_lock);
    if (*fn) return KN_OK;
    /* compiled outside the lock: two threads after one kernel get one module
     * from the module cache, which keeps the source */
    char *src = NULL;
    kn_cuda_module *mod = NULL;
    kn_status st = kn_cuda_ops_source(dt, k, &src);
    if (st == KN_OK) st = kn_cuda_module_get(src, kn_cuda_cache_dir(), &mod);
    free(src);
    KN_TRY(st);
    KN_TRY(kn_cuda_module_kernel(mod, kn_cuda_ops_kernel_name(k), fn));
    pthread_mutex_lock(&g_lock);
    g_fn[dt][k] = *fn;
    pthread_mutex_unlock(&g_lock);
    return KN_OK;
}

static int64_t grid_for(int64_t work, int per_block)
{
    int64_t g = (work + per_block - 1) / per_block;
    return g < GRID_CAP ? g : GRID_CAP;
}

static kn_status launch(kn_dtype dt, int k, int64_t grid, void *args)
{
    const void *fn;
    KN_TRY(kernel_of(dt, k, &fn));
    if (grid <= 0) return KN_OK;
    return kn_cuda_launch(fn, grid, KN_T_BLOCK, args, 0);
}

kn_status kn_cuda_ops_launch(kn_dtype dt, int k, int64_t work, void *args)
{
    return launch(dt, k, grid_for(work, KN_T_BLOCK), args);
}

static int64_t esize(const kn_tensor *t)
{
    return (int64_t)kn_dtype_size(t->dtype);
}

/* Append dim (size, strides in two views) to a dim list, dropping size 1
 * and merging with the previous dim where both views allow it. */
static void push_dim(int *n, long long *shape, long long *s1, long long *s2, int64_t size,
                     int64_t st1, int64_t st2)
{
    if (size == 1) return;
    int m = *n;
    if (m > 0 && s1[m - 1] == st1 * size && (!s2 || s2[m - 1] == st2 * size)) {
        shape[m - 1] *= size;
        s1[m - 1] = st1;
        if (s2) s2[m - 1] = st2;
        return;
    }
    shape[m] = size;
    s1[m] = st1;
    if (s2) s2[m] = st2;
    *n = m + 1;
}

/* Group size for `count` elements per output: a few elements per lane,
 * unless the outputs alone fill the device and the reduced elements are
 * not adjacent (then one thread per output reads neighbouring outputs).
 * Groups of a warp or less combine by shuffles. Capping groups at a warp
 * (so that a block takes eight outputs) measured mixed on the H200's
 * squeeze-excitation means (16 x 72 x 28 x 28: 11.6 -> 18.2 us, the grid
 * eight times smaller; 16 x 672 x 14 x 14: 23 -> 18.9 us), so it is not. */
static int pick_group(int64_t count, int64_t nout, bool adjacent)
{
    int g = 1;
    if (!adjacent && nout >= 4096) return 1;
    while (g < KN_T_BLOCK && g * 4 < count) g <<= 1;
    return g;
}

/* ---- copies ---- */

/* The runs of KN_T_RUN elements, each inside one row of `row`, that
 * strided copies and cats take a thread each (kn_ops.cu). */
static int64_t row_runs(int64_t n, int64_t row)
{
    return row > 0 ? n / row * ((row + KN_T_RUN - 1) / KN_T_RUN) : 0;
}

/* The view `in` into dst (dtype ddt, strides dst_st over in's shape). */
static kn_status copy_strided(const kn_tensor *in, char *dst, kn_dtype ddt, const int64_t *dst_st)
{
    kn_copy_args a;
    memset(&a, 0, sizeof a);
    a.n = kn_tensor_numel(in);
    if (a.n == 0) return KN_OK;
    a.src = kn_cuda_tensor_ptr(in);
    a.dst = dst;
    for (int d = 0; d < in->ndim; d++)
        push_dim(&a.ndim, a.shape, a.sst, a.dst_st, in->shape[d], in->strides[d], dst_st[d]);
    if (a.ndim == 0) {
        a.ndim = 1;
        a.shape[0] = 1;
    }
    if (in->dtype == ddt && a.ndim == 1 && a.sst[0] == 1 && a.dst_st[0] == 1) {
        KN_CUDA_TRY(cudaMemcpyAsync(dst, a.src, (size_t)(a.n * esize(in)), cudaMemcpyDeviceToDevice,
                                    kn_cuda_stream()),
                    "copy");
        return KN_OK;
    }
    return launch(in->dtype, KN_TK_COPY + ddt, grid_for(a.ndim == 1 ? a.n : row_runs(a.n, a.shape[a.ndim - 1]), KN_T_BLOCK),
                  &a);
}

kn_status kn_cuda_patches(const kn_tensor *x, int64_t kh, int64_t kw, kn_tensor **out)
{
    *out = NULL;
    if (x->ndim != 4 || kh < 1 || kw < 1)
        return kn_error(KN_ERR_ARG, "patches: expects an {N, C, H, W} view and a window of at least 1 x 1");
    int64_t n = x->shape[0], c = x->shape[1], p = x->shape[2] / kh, q = x->shape[3] / kw;
    if (c * q * kw * esize(x) > KN_T_PATCHES_SMEM || n * p * kh > INT32_MAX)
        return kn_error(KN_ERR_UNSUPPORTED, "patches: a band of %lld channels x %lld elements is more than the "
                        "kernel stages", (long long)c, (long long)(q * kw));
    int64_t shape[6] = {n, p, q, kh, kw, c};
    KN_TRY(kn_tensor_new(x->dtype, 6, shape, kn_tensor_device(x), out));
    kn_patches_args a = {kn_cuda_tensor_ptr(x), kn_cuda_tensor_ptr(*out), n * p * kh, (int)c, (int)p, (int)q,
                         (int)kh, (int)kw, x->strides[0], x->strides[1], x->strides[2], x->strides[3]};
    /* one block a band (the grid capped: the blocks loop) */
    kn_status st = a.bands > 0 ? launch(x->dtype, KN_TK_PATCHES, grid_for(a.bands, 1), &a) : KN_OK;
    if (st != KN_OK) {
        kn_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

/* in into out through out's own strides: a fresh output is contiguous, and
 * an output handed over as a view (a plan's permuted layout, attention's
 * unfused fallback) is written where its strides say. */
static kn_status copy_into(const kn_tensor *in, kn_tensor *out)
{
    return copy_strided(in, kn_cuda_tensor_ptr(out), out->dtype, out->strides);
}

/* ---- reductions ---- */

/* A float sum, mean or var over the leading dims of a contiguous x, the
 * rest kept (a bias's gradient over the rows, BatchNorm's statistics of a
 * channels-last batch): kn_reduce_cols. */
static bool columns_of_contiguous(const kn_opcall *c, const kn_tensor *x, const bool *red)
{
    if ((c->op != KN_OP_SUM && c->op != KN_OP_MEAN && c->op != KN_OP_VAR) || !kn_dtype_is_float(x->dtype) ||
        x->ndim < 2 ||
        !kn_tensor_is_contiguous(x))
        return false;
    return kn_shape_leading_reduced(x->ndim, red) > 0;
}

static kn_status run_reduce_cols(const kn_tensor *x, kn_reduce_args *a)
{
    const int64_t cols = a->nout, rows = a->count, sms = kn_cuda_current()->sm_count;
    const int64_t vec = 16 / esize(x); /* columns a 16-byte vector holds */
    int first = KN_TK_REDUCE_COLS;
    int64_t tiles = (cols + 31) / 32;
    /* enough blocks for eight an SM (each 8 warps, 8 loads in flight a
     * warp: 64 KB an SM, what the H200's bandwidth needs), each at least
     * 64 rows */
    int64_t want = (8 * sms + tiles - 1) / tiles, most = rows / 64;
    if (cols % vec == 0 && (uintptr_t)kn_cuda_tensor_ptr(x) % 16 == 0) {
        /* kn_reduce_cols_vec: two blocks an SM (16 bytes a load, 8 in
         * flight a thread), each thread at least 8 rows */
        const int64_t g = cols / vec, tw = g < 32 ? g : 32, rb = KN_T_BLOCK / tw;
        first = KN_TK_REDUCE_COLS_VEC;
        tiles = (g + tw - 1) / tw;
        want = (2 * sms + tiles - 1) / tiles;
        most = rows / (rb * 8);
    }
    a->nsplit = (int)(want < most ? want : most);
    if (a->nsplit < 1) a->nsplit = 1;
    a->chunk = (rows + a->nsplit - 1) / a->nsplit;
    a->nr = 1;
    a->rsize[0] = rows;
    a->rst[0] = cols;
    if (a->nsplit == 1) return launch(x->dtype, first, tiles, a);
    void *part; /* the partial sums, doubles [nsplit][cols]; a var's squared deviations after them */
    int64_t parts = a->op == KN_TR_VAR ? 2 : 1;
    KN_TRY(kn_cuda_malloc(parts * cols * a->nsplit * (int64_t)sizeof(double), &part));
    a->part = part;
    kn_status st = launch(x->dtype, first, tiles * a->nsplit, a);
    if (st == KN_OK) st = launch(x->dtype, KN_TK_REDUCE_COLS_FINAL, (cols + 31) / 32, a);
    kn_cuda_free(part);
    return st;
}

static kn_status run_reduce(const kn_opcall *c)
{
    const kn_tensor *x = c->in[0];
    kn_tensor *out = c->out[0];
    kn_reduce_args a;
    memset(&a, 0, sizeof a);
    a.nout = kn_tensor_numel(out);
    if (a.nout == 0) return KN_OK;
    switch (c->op) {
    case KN_OP_SUM: a.op = KN_TR_SUM; break;
    case KN_OP_MEAN: a.op = KN_TR_MEAN; break;
    case KN_OP_AMAX: a.op = KN_TR_AMAX; break;
    case KN_OP_AMIN: a.op = KN_TR_AMIN; break;
    default: a.op = KN_TR_VAR; break;
    }
    bool red[KN_MAX_DIMS] = {false};
    for (int i = 0; i < c->a.ndims; i++)
        if (x->ndim > 0) red[c->a.dims[i]] = true;
    if (c->a.ndims == 0)
        for (int d = 0; d < x->ndim; d++) red[d] = true;
    a.count = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (red[d]) {
            a.count *= x->shape[d];
            push_dim(&a.nr, a.rsize, a.rst, NULL, x->shape[d], x->strides[d], 0);
        } else {
            push_dim(&a.nk, a.ksize, a.kst, NULL, x->shape[d], x->strides[d], 0);
        }
    }
    if (a.nr == 0) {
        a.nr = 1;
        a.rsize[0] = 1;
    }
    a.x = kn_cuda_tensor_ptr(x);
    a.out = kn_cuda_tensor_ptr(out);
    a.out_dt = kn_dtype_is_float(x->dtype) ? (int)out->dtype : (int)x->dtype; /* ints: kn_rfinish_i's own */
    a.correction = c->a.correction;
    if (columns_of_contiguous(c, x, red)) return run_reduce_cols(x, &a);
    a.group = pick_group(a.count, a.nout, a.rst[a.nr - 1] == 1 || a.nk == 0);
    a.nsplit = 1;
    if (a.nout <= 64 && a.count >= 65536) { /* too few outputs for the device: split them */
        int64_t want = (512 + a.nout - 1) / a.nout, most = a.count / 16384;
        a.nsplit = (int)(want < most ? want : most);
        a.group = KN_T_BLOCK;
    }
    a.chunk = (a.count + a.nsplit - 1) / a.nsplit;
    int per = KN_T_BLOCK / a.group;
    if (a.nsplit == 1) return launch(x->dtype, KN_TK_REDUCE, grid_for(a.nout, per), &a);
    void *part;
    KN_TRY(kn_cuda_malloc(a.nout * a.nsplit * (int64_t)sizeof(kn_rpart), &part));
    a.part = part;
    kn_status st = launch(x->dtype, KN_TK_REDUCE, grid_for(a.nout * a.nsplit, per), &a);
    if (st == KN_OK) st = launch(x->dtype, KN_TK_REDUCE_FINAL, grid_for(a.nout, KN_T_BLOCK), &a);
    kn_cuda_free(part); /* later work on the one stream is ordered after these kernels */
    return st;
}

static kn_status run_argmax(const kn_opcall *c)
{
    if (c->n_out != 2 || !c->out[1]) return kn_error(KN_ERR_ARG, "max: bad call (needs 2 outputs)");
    const kn_tensor *x = c->in[0];
    kn_argmax_args a;
    memset(&a, 0, sizeof a);
    a.nout = kn_tensor_numel(c->out[0]);
    if (a.nout == 0) return KN_OK;
    a.len = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d == c->a.dim) {
            a.len = x->shape[d];
            a.lst = x->strides[d];
        } else {
            push_dim(&a.nk, a.ksize, a.kst, NULL, x->shape[d], x->strides[d], 0);
        }
    }
    a.x = kn_cuda_tensor_ptr(x);
    a.val = kn_cuda_tensor_ptr(c->out[0]);
    a.idx = (long long *)(void *)kn_cuda_tensor_ptr(c->out[1]);
    a.group = pick_group(a.len, a.nout, a.lst == 1 || a.nk == 0);
    return launch(x->dtype, KN_TK_ARGMAX, grid_for(a.nout, KN_T_BLOCK / a.group), &a);
}

/* ---- pools ---- */

/* A channels-last pool (in_layout NHWC: x {N, H, W, C}, out {N, OH, OW,
 * C}) reads x through an NCHW-ordered header, as the NCHW pool does, and
 * runs kn_pool_nhwc, whose threads follow the output's channel order; a
 * global average pool's {N, 1, 1, C} has NCHW's bytes and runs
 * kn_pool_gap. */
static kn_status run_pool(const kn_opcall *c)
{
    bool nhwc = c->a.in_layout == KN_LAYOUT_NHWC;
    kn_tensor xv = nhwc ? kn_view_nhwc_as_nchw(c->in[0]) : *c->in[0];
    kn_tensor ov = nhwc ? kn_view_nhwc_as_nchw(c->out[0]) : *c->out[0];
    const kn_tensor *x = &xv, *out = &ov;
    const kn_attrs *at = &c->a;
    kn_pool_args a;
    memset(&a, 0, sizeof a);
    a.total = kn_tensor_numel(out);
    if (a.total == 0) return KN_OK;
    a.op = c->op == KN_OP_MAX_POOL2D ? KN_TP_MAX : c->op == KN_OP_AVG_POOL2D ? KN_TP_AVG : KN_TP_ADAPTIVE;
    int xo = x->ndim - 3;
    a.n = xo ? x->shape[0] : 1;
    a.sn = xo ? x->strides[0] : 0;
    a.c = x->shape[xo];
    a.h = x->shape[xo + 1];
    a.w = x->shape[xo + 2];
    a.sc = x->strides[xo];
    a.sh = x->strides[xo + 1];
    a.sw = x->strides[xo + 2];
    a.oh = out->shape[out->ndim - 2];
    a.ow = out->shape[out->ndim - 1];
    a.kh = at->kernel[0], a.kw = at->kernel[1];
    a.sy = at->stride[0], a.sx = at->stride[1];
    a.py = at->padding[0], a.px = at->padding[1];
    a.dy = at->dilation[0], a.dx = at->dilation[1];
    a.count_include_pad = at->count_include_pad;
    a.x = kn_cuda_tensor_ptr(x);
    a.out = kn_cuda_tensor_ptr(out);
    int64_t vec = 16 / esize(x);
    if (a.op == KN_TP_ADAPTIVE && a.oh == 1 && a.ow == 1 && a.sc == 1 && a.h * a.w > 8 && x->dtype != KN_F64 &&
        esize(x) >= 2 && a.c % vec == 0 && a.sn % vec == 0 && a.sh % vec == 0 && a.sw % vec == 0 &&
        (uintptr_t)a.x % 16 == 0) {
        /* 16 bytes of channels a thread, a block an image (or 32 vectors
         * of its channels); must match KN_GAP_VEC_BLOCK in kn_pool.cu */
        int64_t cv = a.c / vec, slices = (cv + 31) / 32;
        const void *fn;
        KN_TRY(kernel_of(x->dtype, KN_TK_POOL_GAP_VEC, &fn));
        return kn_cuda_launch(fn, grid_for(a.n * slices, 1), 512, &a, 0);
    }
    if (a.op == KN_TP_ADAPTIVE && a.oh == 1 && a.ow == 1 && a.sc == 1 && a.c > 1 && a.h * a.w > 8) {
        /* few channel groups (a squeeze-excitation's pool): 32 slices a
         * group instead of 8, so that the GPU fills */
        int64_t groups = a.n * ((a.c + 31) / 32);
        int block = groups < 256 && a.h * a.w >= 64 ? 1024 : 256;
        const void *fn;
        KN_TRY(kernel_of(x->dtype, KN_TK_POOL_GAP, &fn));
        return kn_cuda_launch(fn, grid_for(groups, 1), block, &a, 0);
    }
    /* contiguous planes (NCHW), a warp each; not f64, whose double sums
     * depend on their order (one thread a plane keeps the CPU's) */
    if (a.op == KN_TP_ADAPTIVE && a.oh == 1 && a.ow == 1 && a.sw == 1 && a.sh == a.w && a.h * a.w > 8 &&
        x->dtype != KN_F64)
        return launch(x->dtype, KN_TK_POOL_GAP_PLANES, grid_for(a.n * a.c, KN_T_BLOCK / 32), &a);
    /* channels-last, 16 bytes of channels a thread where the strides and
     * pointers allow */
    if (nhwc && a.sc == 1 && a.c % vec == 0 && a.sn % vec == 0 && a.sh % vec == 0 && a.sw % vec == 0 &&
        (uintptr_t)a.x % 16 == 0 && (uintptr_t)a.out % 16 == 0) {
        /* a max pool of windows up to 3 x 3 in the dtype's packed max
         * (32-bit offsets: the output's, bounded by total) */
        bool max3 = a.op == KN_TP_MAX && a.kh <= 3 && a.kw <= 3 && a.total < INT32_MAX &&
                    (x->dtype == KN_BF16 || x->dtype == KN_F16 || x->dtype == KN_F32);
        return launch(x->dtype, max3 ? KN_TK_POOL_MAX3_NHWC_VEC : KN_TK_POOL_NHWC_VEC, grid_for(a.total / vec, KN_T_BLOCK),
                      &a);
    }
    /* one thread per output: a pool with few outputs (a global pool's
     * N x C) runs in smaller blocks, so that it reaches every SM */
    int block = a.total < (int64_t)KN_T_BLOCK * 256 ? 64 : KN_T_BLOCK;
    const void *fn;
    KN_TRY(kernel_of(x->dtype, nhwc ? KN_TK_POOL_NHWC : KN_TK_POOL, &fn));
    return kn_cuda_launch(fn, grid_for(a.total, block), block, &a, 0);
}

/* ---- cat ---- */

/* Whether t's dims from `from` on are one contiguous run of elements (as
 * kn_tensor_is_contiguous asks of all of them); *run gets its length. */
static bool trailing_run(const kn_tensor *t, int from, int64_t *run)
{
    *run = 1;
    for (int d = t->ndim - 1; d >= from; d--) {
        if (t->shape[d] != 1 && t->strides[d] != *run) return false;
        *run *= t->shape[d];
    }
    return true;
}

/* Whether cat along dim can run as kn_cat_rows: each input's dims from dim
 * on are contiguous (its part of an output row is one run) and its dims
 * before dim step as one (stride 0 included: an expanded class token).
 * Fills a's row layout (see kn_cat_rows) and returns the vector width. */
static int64_t rows_cat(const kn_opcall *c, kn_cat_args *a)
{
    const kn_tensor *out = c->out[0];
    int dim = c->a.dim;
    int64_t vec = 16 / (int64_t)esize(out);
    a->start[0] = 0;
    for (int i = 0; i < c->n_in; i++) {
        const kn_tensor *x = c->in[i];
        int64_t run, outer_st = 0;
        if (!trailing_run(x, dim, &run)) return 0;
        bool first = true;
        for (int d = dim - 1; d >= 0; d--) { /* the outer dims, innermost first: one stride */
            if (x->shape[d] == 1) continue;
            if (first) outer_st = x->strides[d], first = false;
            else if (x->strides[d] != outer_st * x->shape[d + 1]) return 0;
        }
        a->src[i] = kn_cuda_tensor_ptr(x);
        a->start[i + 1] = a->start[i] + run;
        a->st[i][0] = outer_st;
        if (run % vec || outer_st % vec || (uintptr_t)a->src[i] % 16) vec = 1;
    }
    if ((uintptr_t)kn_cuda_tensor_ptr(out) % 16) vec = 1;
    a->shape[0] = a->start[c->n_in];
    a->dim = (int)vec;
    return vec;
}

static kn_status run_cat(const kn_opcall *c)
{
    kn_tensor *out = c->out[0];
    int dim = c->a.dim;
    bool same = true;
    for (int i = 0; i < c->n_in; i++) same = same && c->in[i]->dtype == out->dtype;
    if (!same) { /* each input converted into its slice of the output */
        int64_t st[KN_MAX_DIMS], pos = 0;
        kn_contiguous_strides(out->ndim, out->shape, st);
        for (int i = 0; i < c->n_in; i++) {
            KN_TRY(copy_strided(c->in[i], kn_cuda_tensor_ptr(out) + pos * st[dim] * esize(out), out->dtype, st));
            pos += c->in[i]->shape[dim];
        }
        return KN_OK;
    }
    kn_cat_args a;
    memset(&a, 0, sizeof a);
    a.n = kn_tensor_numel(out);
    if (a.n == 0) return KN_OK;
    a.dst = kn_cuda_tensor_ptr(out);
    a.nin = c->n_in;
    int64_t vec = rows_cat(c, &a);
    if (vec > 0) return launch(out->dtype, KN_TK_CAT_ROWS, grid_for(a.n / vec, KN_T_BLOCK), &a);
    memset(&a.st, 0, sizeof a.st);
    a.ndim = out->ndim;
    a.dim = dim;
    for (int d = 0; d < out->ndim; d++) a.shape[d] = out->shape[d];
    for (int i = 0; i < c->n_in; i++) {
        const kn_tensor *x = c->in[i];
        a.src[i] = kn_cuda_tensor_ptr(x);
        a.start[i + 1] = a.start[i] + x->shape[dim];
        for (int d = 0; d < x->ndim; d++) a.st[i][d] = x->strides[d];
    }
    const int64_t row = a.shape[a.ndim - 1];
    if (dim == out->ndim - 1 && row <= KN_T_CAT_SHORT)
        return launch(out->dtype, KN_TK_CAT_SHORT, grid_for(a.n / row, KN_T_BLOCK), &a);
    return launch(out->dtype, KN_TK_CAT, grid_for(row_runs(a.n, row), KN_T_BLOCK), &a);
}

/* ---- index ops ---- */


/* Where flat position p of the index lies, 1-based, for the message. */
static void index_position(const kn_tensor *idx, unsigned long long p, char *buf, int size)
{
    int64_t c[KN_MAX_DIMS];
    for (int d = idx->ndim - 1; d >= 0; d--) {
        c[d] = (int64_t)(p % (unsigned long long)idx->shape[d]) + 1;
        p /= (unsigned long long)idx->shape[d];
    }
    kn_shape_str(idx->ndim, c, buf, size);
}

/* Queue the range check of idx against 1..size (with the kernel of the
 * op's dtype module, which the op loads anyway); *check says whether the
 * host can read it back (not while the stream is being recorded, when
 * nothing is queued). */
kn_status kn_cuda_index_check_launch(kn_dtype dt, const kn_tensor *idx, int64_t size, bool *check)
{
    kn_icheck_args a;
    memset(&a, 0, sizeof a);
    a.n = kn_tensor_numel(idx);
    *check = false;
    if (a.n == 0) return KN_OK;
    kn_cuda_dev *gpu = kn_cuda_current();
    if (!gpu->index_flag) KN_TRY(kn_cuda_malloc(sizeof *gpu->index_flag, (void **)&gpu->index_flag));
    cudaStream_t s = kn_cuda_stream();
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    KN_CUDA_TRY(cudaStreamIsCapturing(s, &cs), "index check");
    *check = cs == cudaStreamCaptureStatusNone;
    /* a recording cannot read the flag back, so a check in it would be
     * dead work at every replay (a memset and a kernel per gather): a
     * replay clamps a bad index, as its copying kernels always do, and
     * reports nothing (docs/modes.md says so for reduce-overhead) */
    if (!*check) return KN_OK;
    KN_CUDA_TRY(cudaMemsetAsync(gpu->index_flag, 0xff, sizeof *gpu->index_flag, s), "index check");
    a.idx = kn_cuda_tensor_ptr(idx);
    a.idx64 = idx->dtype == KN_I64;
    a.ndim = idx->ndim;
    a.size = size;
    a.flag = gpu->index_flag;
    for (int d = 0; d < idx->ndim; d++) {
        a.shape[d] = idx->shape[d];
        a.st[d] = idx->strides[d];
    }
    return launch(dt, KN_TK_ICHECK, grid_for(a.n, KN_T_BLOCK), &a);
}

kn_status kn_cuda_index_check_read(const kn_tensor *idx, int64_t *pos, int64_t *value)
{
    unsigned long long bad = 0;
    *pos = -1;
    *value = 0;
    cudaStream_t s = kn_cuda_stream();
    KN_CUDA_TRY(cudaMemcpyAsync(&bad, kn_cuda_current()->index_flag, sizeof bad, cudaMemcpyDeviceToHost, s), "index check");
    KN_CUDA_TRY(cudaStreamSynchronize(s), "index check");
    if (bad == ~0ULL) return KN_OK;
    int64_t off = 0;
    unsigned long long rem = bad;
    for (int d = idx->ndim - 1; d >= 0; d--) {
        off += (int64_t)(rem % (unsigned long long)idx->shape[d]) * idx->strides[d];
        rem /= (unsigned long long)idx->shape[d];
    }
    int64_t v = 0;
    if (idx->dtype == KN_I64) {
        KN_CUDA_TRY(cudaMemcpy(&v, kn_cuda_tensor_ptr(idx) + off * 8, 8, cudaMemcpyDeviceToHost), "index check");
    } else {
        int32_t w = 0;
        KN_CUDA_TRY(cudaMemcpy(&w, kn_cuda_tensor_ptr(idx) + off * 4, 4, cudaMemcpyDeviceToHost), "index check");
        v = w;
    }
    *pos = (int64_t)bad;
    *value = v;
    return KN_OK;
}

/* After the op's kernels: the CPU's error for the first bad index, if any. */
static kn_status index_check_result(const kn_opcall *c, const kn_tensor *idx, int64_t size)
{
    int64_t pos, v;
    KN_TRY(kn_cuda_index_check_read(idx, &pos, &v));
    if (pos < 0) return KN_OK;
    unsigned long long bad = (unsigned long long)pos;
    if (c->op == KN_OP_GATHER) {
        char where[KN_MAX_DIMS * 24];
        index_position(idx, bad, where, (int)sizeof where);
        return kn_error(KN_ERR_ARG, "gather: index %lld at position %s is out of range 1..%lld",
                        (long long)v, where, (long long)size);
    }
    return kn_error(KN_ERR_ARG, "%s: index %lld at position %lld is out of range 1..%lld",
                    kn_op_name(c->op), (long long)v, (long long)(bad + 1), (long long)size);
}

/* Whether index_select(x, dim, idx) -> out moves whole contiguous rows
 * (dim 0, every later dim of x contiguous, out contiguous), for
 * kn_index_rows: *row gets the row's length in elements and *vec the
 * vector width, 16 bytes' worth where the row and the pointers allow. */
static bool rows_gather(const kn_tensor *x, const kn_tensor *out, int dim, int64_t *row_out, int64_t *vec_out)
{
    if (dim != 0 || x->ndim < 1 || !kn_tensor_is_contiguous(out)) return false;
    int64_t row;
    if (!trailing_run(x, 1, &row) || row < 1) return false;
    int64_t es = (int64_t)kn_dtype_size(x->dtype), vec = 16 / es;
    bool vectors = (row * es) % 16 == 0 && (x->strides[0] * es) % 16 == 0 &&
                   (uintptr_t)kn_cuda_tensor_ptr(x) % 16 == 0 && (uintptr_t)kn_cuda_tensor_ptr(out) % 16 == 0;
    *row_out = row;
    *vec_out = vectors ? vec : 1;
    return true;
}

/* Whether index_add(x, dim, idx, src) -> out adds whole contiguous rows
 * (dim 0, every later dim of src contiguous; out is contiguous), for
 * kn_index_add_rows: *row gets the row's length and *vec 4 where f32 rows
 * start 16-byte aligned (one vector reduction a 4 elements), else 1. */
static bool rows_scatter(const kn_tensor *src, const kn_tensor *out, int dim, int64_t *row_out, int64_t *vec_out)
{
    int64_t row;
    if (dim != 0 || src->ndim < 1 || !kn_tensor_is_contiguous(out) || !trailing_run(src, 1, &row) || row < 1)
        return false;
    bool vectors = src->dtype == KN_F32 && row % 4 == 0 && src->strides[0] % 4 == 0 &&
                   (uintptr_t)kn_cuda_tensor_ptr(src) % 16 == 0 && (uintptr_t)kn_cuda_tensor_ptr(out) % 16 == 0;
    *row_out = row;
    *vec_out = vectors ? 4 : 1;
    return true;
}

static kn_status run_index(const kn_opcall *c)
{
    const kn_tensor *x = c->in[0], *idx = c->in[1];
    kn_tensor *out = c->out[0];
    int dim = c->a.dim;
    int64_t size = x->shape[dim];
    bool check;
    KN_TRY(kn_cuda_index_check_launch(x->dtype, idx, size, &check));
    kn_index_args a;
    memset(&a, 0, sizeof a);
    a.idx = kn_cuda_tensor_ptr(idx);
    a.idx64 = idx->dtype == KN_I64;
    a.ndim = x->ndim;
    a.dim = dim;
    a.size = size;
    int k;
    const kn_tensor *shape_of = out; /* the tensor whose elements the kernel walks */
    if (c->op == KN_OP_INDEX_ADD) {
        KN_TRY(copy_into(x, out));
        const kn_tensor *src = c->in[2];
        shape_of = src;
        a.x = kn_cuda_tensor_ptr(src);
        for (int d = 0; d < src->ndim; d++) a.xst[d] = src->strides[d];
        int64_t ost[KN_MAX_DIMS];
        kn_contiguous_strides(out->ndim, out->shape, ost);
        for (int d = 0; d < out->ndim; d++) a.dst_st[d] = ost[d];
        a.ist[0] = idx->strides[0];
        k = KN_TK_IADD;
    } else {
        a.x = kn_cuda_tensor_ptr(x);
        for (int d = 0; d < x->ndim; d++) a.xst[d] = x->strides[d];
        if (c->op == KN_OP_GATHER)
            for (int d = 0; d < idx->ndim; d++) a.ist[d] = idx->strides[d];
        else a.ist[0] = idx->strides[0];
        k = c->op == KN_OP_GATHER ? KN_TK_GATHER : KN_TK_ISELECT;
    }
    int64_t row = 0, vec = 0;
    if (c->op == KN_OP_INDEX_SELECT && rows_gather(x, out, dim, &row, &vec)) k = KN_TK_IROWS;
    if (c->op == KN_OP_INDEX_ADD && rows_scatter(c->in[2], out, dim, &row, &vec)) k = KN_TK_IADD_ROWS;
    a.dst = kn_cuda_tensor_ptr(out);
    a.n = kn_tensor_numel(shape_of);
    for (int d = 0; d < shape_of->ndim; d++) a.shape[d] = shape_of->shape[d];
    bool rows = k == KN_TK_IROWS || k == KN_TK_IADD_ROWS;
    if (rows) { /* kn_index_rows's and kn_index_add_rows's layout: see rows_gather, rows_scatter */
        a.shape[1] = row;
        a.dim = (int)vec;
    }
    if (a.n > 0 && size > 0) KN_TRY(launch(x->dtype, k, grid_for(rows ? a.n / vec : a.n, KN_T_BLOCK), &a));
    return check ? index_check_result(c, idx, size) : KN_OK;
}

/* ---- random creation ---- */

static kn_status run_random(const kn_opcall *c)
{
    kn_tensor *out = c->out[0];
    kn_random_args a;
    memset(&a, 0, sizeof a);
    a.n = kn_tensor_numel(out);
    if (a.n == 0) return KN_OK;
    a.out = kn_cuda_tensor_ptr(out);
    a.op = c->op == KN_OP_RANDN ? KN_TRNG_NORMAL : c->op == KN_OP_RAND ? KN_TRNG_UNIFORM : KN_TRNG_INT;
    a.seed = c->a.seed;
    a.offset = c->a.rng_offset;
    a.lo = c->a.value;
    a.hi = c->a.value2;
    return launch(out->dtype, KN_TK_RANDOM, grid_for(a.n, KN_T_BLOCK), &a);
}

static kn_status run_copy(const kn_opcall *c)
{
    return copy_into(c->in[0], c->out[0]);
}

typedef kn_status (*template_run)(const kn_opcall *c);

/* The template family that runs op, NULL for none: the one list that
 * kn_cuda_ops_supports answers from and kn_cuda_ops_run dispatches by. */
static template_run family_of(kn_op op)
{
    switch (op) {
    case KN_OP_SUM:
    case KN_OP_MEAN:
    case KN_OP_AMAX:
    case KN_OP_AMIN:
    case KN_OP_VAR: return run_reduce;
    case KN_OP_MAX: return run_argmax;
    case KN_OP_MAX_POOL2D:
    case KN_OP_AVG_POOL2D:
    case KN_OP_ADAPTIVE_AVG_POOL2D: return run_pool;
    case KN_OP_CAT: return run_cat;
    case KN_OP_INDEX_SELECT:
    case KN_OP_GATHER:
    case KN_OP_INDEX_ADD: return run_index;
    case KN_OP_RANDN:
    case KN_OP_RAND:
    case KN_OP_RANDINT: return run_random;
    case KN_OP_CONTIGUOUS:
    case KN_OP_CAST: return run_copy;
    default: return NULL;
    }
}

/* The op alone decides: every dtype's module holds every template kernel
 * (kn_cuda_tsrc.c; t/cuda_templates_compile.c checks each), and each
 * family takes every shape and attribute kn_op_infer lets through. */
bool kn_cuda_ops_supports(const kn_opcall *c)
{
    return c && family_of(c->op) != NULL;
}

kn_status kn_cuda_ops_run(const kn_opcall *c)
{
    if (c->n_out < 1 || !c->out[0])
        return kn_error(KN_ERR_ARG, "%s: bad call (no output)", kn_op_name(c->op));
    template_run run = family_of(c->op);
    if (!run) return kn_error(KN_ERR_UNSUPPORTED, "%s: no CUDA template kernel for this op", kn_op_name(c->op));
    return run(c);
}
