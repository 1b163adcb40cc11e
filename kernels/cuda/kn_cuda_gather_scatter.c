/* kn_cuda_gather_scatter: the gather_scatter op on the GPU (message
 * passing: out = base or 0; out[dst[e]] += h[src[e]] * w[e]), through the
 * kernels of kn_gather_scatter.cu, which describes the two variants.
 *
 * Variants (max-autotune measures them as the attention kernel's): 1 is
 * atomics (the host zeroes out or copies base into it, then one kernel),
 * 2 segments (one kernel over the rows, the edges read in dst order from
 * a CSR that is built on the device once per version of dst and kept),
 * past 2 is KN_ERR_RANGE. 0, the default, is segments where the CSR can
 * be kept: one launch with no separate zero fill and no atomics, and
 * deterministic. It is atomics while the stream is being recorded (a CUDA
 * graph replays without this host code, so it could not see dst written
 * in place between replays; variant 2 recorded rebuilds the CSR inside
 * the recording) and where dst lives in a plan's arena (its storage
 * version does not change when a kernel rewrites it, so nothing can be
 * kept: the CSR would be built at every call).
 *
 * An epilogue (attrs epilogue: activations, then softmax or log_softmax
 * over rows of at most KN_GATHER_SCATTER_ROW_MAX) runs inside the segment
 * kernel, before its store (a row op as a second launch over the rows); after
 * atomics, as kn_gs_epilogue over the output in the same call, so either
 * variant is one kiln kernel and max-autotune times it whole. It leaves
 * the default pick as it is: segments already, where the CSR is kept;
 * elsewhere atomics add one launch for it, where segments would rebuild
 * the CSR at every call (four launches).
 *
 * Indices are checked as eager index_add checks its own (a read-back of
 * the first bad position), but once per version of each index tensor:
 * checked (storage, version) pairs are remembered, so a plan's later calls
 * on the same graph add no synchronization.
 */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_gather_scatter.h"

#include "kn_cuda_context.h"
#include "kn_cuda_ops.h"
#include "kn_cuda_targs.h"
#include "kn_cuda_tsrc.h"
#include "kn_op.h"
#include "kn_view.h"

#define GS_SLOTS 16 /* index tensors remembered (checked ones; CSRs) */

/* What identifies the values of a 1-D index view. */
typedef struct gs_key {
    const kn_storage *storage;
    uint64_t version;
    int64_t offset, n, stride, size; /* size: the range checked, or the CSR's rows */
    kn_dtype dtype;
} gs_key;

typedef struct gs_csr {
    gs_key key;
    int *buf; /* start[rows + 1], count[rows], perm[edges], from gpu's allocator */
    const kn_cuda_dev *gpu;
    uint64_t used;
} gs_csr;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static gs_key g_checked[GS_SLOTS];
static uint64_t g_checked_used[GS_SLOTS];
static gs_csr g_csr[GS_SLOTS];
static uint64_t g_tick;

static gs_key key_of(const kn_tensor *idx, int64_t size)
{
    gs_key k;
    memset(&k, 0, sizeof k);
    k.storage = idx->storage;
    k.version = idx->storage->version;
    k.offset = idx->offset;
    k.n = idx->shape[0];
    k.stride = idx->strides[0];
    k.size = size;
    k.dtype = idx->dtype;
    return k;
}

static bool same_key(const gs_key *a, const gs_key *b)
{
    return a->storage == b->storage && a->version == b->version && a->offset == b->offset && a->n == b->n &&
           a->stride == b->stride && a->size == b->size && a->dtype == b->dtype;
}

/* Values that stay what the storage version says: not a plan's arena. */
static bool keepable(const kn_tensor *idx)
{
    return idx->storage && !idx->storage->borrowed;
}

static bool capturing(void)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(kn_cuda_stream(), &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone;
}

/* Every index of idx in 1..size, or the CPU's error naming the first bad
 * one; once per version of idx where its values can be kept. */
static kn_status check_indices(kn_dtype dt, const kn_tensor *idx, int64_t size, const char *which)
{
    if (kn_tensor_numel(idx) == 0) return KN_OK;
    bool keep = keepable(idx);
    gs_key k = key_of(idx, size);
    if (keep) {
        pthread_mutex_lock(&g_lock);
        bool seen = false;
        for (int i = 0; i < GS_SLOTS && !seen; i++)
            if (same_key(&g_checked[i], &k)) {
                g_checked_used[i] = ++g_tick;
                seen = true;
            }
        pthread_mutex_unlock(&g_lock);
        if (seen) return KN_OK;
    }
    bool readable;
    KN_TRY(kn_cuda_index_check_launch(dt, idx, size, &readable));
    if (!readable) return KN_OK; /* being recorded: the kernels clamp, as index_add's do */
    int64_t pos, v;
    KN_TRY(kn_cuda_index_check_read(idx, &pos, &v));
    if (pos >= 0)
        return kn_error(KN_ERR_ARG, "gather_scatter: %s index %lld at position %lld is out of range 1..%lld", which,
                        (long long)v, (long long)(pos + 1), (long long)size);
    if (keep) {
        pthread_mutex_lock(&g_lock);
        int lru = 0;
        for (int i = 1; i < GS_SLOTS; i++)
            if (g_checked_used[i] < g_checked_used[lru]) lru = i;
        g_checked[lru] = k;
        g_checked_used[lru] = ++g_tick;
        pthread_mutex_unlock(&g_lock);
    }
    return KN_OK;
}

/* The segment kernel, activations applied before its store; a row op then
 * runs over the finished rows as a second launch of this call (a thread per
 * row, kn_gs_epilogue_rows). Inside the segment kernel, with a thread or
 * a group of lanes per row, gcn's 2708 rows of 7 took 15.6 and 8.9 us
 * against 4.6 us of segments and 1.8 of a separate log_softmax (H100, bf16). */
static kn_status launch_segments(kn_dtype dt, kn_gs_args *a)
{
    kn_gs_args sums = *a;
    sums.row_op = 0;
    KN_TRY(kn_cuda_ops_launch(dt, KN_TK_GS_SEGMENT, a->rows * a->nvec, &sums));
    if (!a->row_op) return KN_OK;
    kn_gs_args rows = *a;
    rows.n_act = 0; /* applied already */
    return kn_cuda_ops_launch(dt, KN_TK_GS_EPILOGUE_ROWS, a->rows * 32, &rows); /* a warp a row */
}

/* Build the CSR of a's dst into buf (start, count, perm: 2 * rows + 1 +
 * edges ints) on the stream. */
static kn_status build_csr(kn_dtype dt, kn_gs_args *a, int *buf)
{
    a->start = buf;
    a->count = buf + a->rows + 1;
    a->perm = a->count + a->rows;
    cudaStream_t s = kn_cuda_stream();
    size_t count_bytes = sizeof(int) * (size_t)(a->rows > 0 ? a->rows : 1);
    KN_CUDA_TRY(cudaMemsetAsync(a->count, 0, count_bytes, s), "gather_scatter: sorting the edges");
    KN_TRY(kn_cuda_ops_launch(dt, KN_TK_GS_COUNT, a->edges, a));
    KN_TRY(kn_cuda_ops_launch(dt, KN_TK_GS_SCAN, 1, a)); /* one block */
    KN_CUDA_TRY(cudaMemsetAsync(a->count, 0, count_bytes, s), "gather_scatter: sorting the edges");
    KN_TRY(kn_cuda_ops_launch(dt, KN_TK_GS_FILL, a->edges, a));
    return kn_cuda_ops_launch(dt, KN_TK_GS_ORDER, a->rows, a);
}

/* The segment variant: the CSR kept for this version of dst (built on a
 * miss), or, where it cannot be kept, built into a block freed after
 * (the allocator holds blocks a recording uses). */
static kn_status run_segments(kn_dtype dt, const kn_tensor *dst, kn_gs_args *a)
{
    int64_t ints = 2 * a->rows + 1 + a->edges;
    const kn_cuda_dev *gpu = kn_cuda_current();
    gs_key k = key_of(dst, a->rows);
    gs_csr *hit = NULL, *lru = NULL;
    bool keep = keepable(dst) && !capturing();
    if (keep) {
        pthread_mutex_lock(&g_lock);
        for (int i = 0; i < GS_SLOTS; i++) {
            gs_csr *e = &g_csr[i];
            if (e->buf && same_key(&e->key, &k)) hit = e;
            /* a slot to take: an empty one, else this GPU's least recently used
             * (another GPU's block is not this allocator's to free) */
            if (!e->buf ? !lru || lru->buf : e->gpu == gpu && (!lru || (lru->buf && e->used < lru->used))) lru = e;
        }
        keep = hit || lru;
        if (!keep) pthread_mutex_unlock(&g_lock);
    }
    if (!keep) {
        void *tmp = NULL;
        KN_TRY(kn_cuda_malloc(ints * (int64_t)sizeof(int), &tmp));
        kn_status st = build_csr(dt, a, tmp);
        if (st == KN_OK) st = launch_segments(dt, a);
        kn_cuda_free(tmp);
        return st;
    }
    bool built = hit != NULL;
    kn_status st = KN_OK;
    if (!hit) { /* one slot per dst view: a new version rebuilds into the old one's block */
        for (int i = 0; i < GS_SLOTS && !hit; i++) {
            gs_csr *e = &g_csr[i];
            if (e->buf && e->gpu == gpu && e->key.storage == k.storage && e->key.offset == k.offset &&
                e->key.n == k.n && e->key.stride == k.stride && e->key.size == k.size && e->key.dtype == k.dtype)
                hit = e;
        }
        if (!hit) {
            hit = lru;
            if (hit->buf) kn_cuda_free(hit->buf); /* stream-ordered: queued work still reads it first */
            hit->buf = NULL;
            hit->gpu = gpu;
            st = kn_cuda_malloc(ints * (int64_t)sizeof(int), (void **)&hit->buf);
        }
        hit->key = k;
    }
    hit->used = ++g_tick;
    if (st == KN_OK && !built) st = build_csr(dt, a, hit->buf);
    if (st == KN_OK) {
        a->start = hit->buf;
        a->count = hit->buf + a->rows + 1;
        a->perm = a->count + a->rows;
    } else {
        memset(&hit->key, 0, sizeof hit->key); /* not built: never a hit */
    }
    pthread_mutex_unlock(&g_lock);
    KN_TRY(st);
    return launch_segments(dt, a);
}

/* Whether t's dims after the first are contiguous (rows of `row` elements,
 * any row stride): what the kernels read through h_st / base_st. */
static bool rows_contiguous(const kn_tensor *t)
{
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 1; d--) {
        if (t->shape[d] != 1 && t->strides[d] != want) return false;
        want *= t->shape[d];
    }
    return true;
}

/* t itself where its rows are contiguous, else a contiguous copy; *hold
 * gets the copy to release. */
static kn_status rows_of(kn_tensor *t, kn_tensor **use, kn_tensor **hold)
{
    *hold = NULL;
    *use = t;
    if (!t || rows_contiguous(t)) return KN_OK;
    KN_TRY(kn_tensor_contiguous_copy(t, kn_cuda_call_settings(), hold));
    *use = *hold;
    return KN_OK;
}

/* A test hook (t/cuda_gather_scatter.lua): KILN_GATHER_SCATTER=atomics or
 * segments makes that the default pick, so each variant can be checked
 * through the ordinary op; 0 (unset or anything else): the rule above. */
static int forced_variant(void)
{
    const char *v = getenv("KILN_GATHER_SCATTER");
    if (!v) return 0;
    return strcmp(v, "atomics") == 0 ? 1 : strcmp(v, "segments") == 0 ? 2 : 0;
}

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

/* The kernels' code (KN_GS_*) for epilogue op `op`; 0: they have none. */
static int epilogue_code(int op)
{
    return op == KN_OP_RELU          ? KN_GS_RELU
           : op == KN_OP_GELU        ? KN_GS_GELU
           : op == KN_OP_SILU        ? KN_GS_SILU
           : op == KN_OP_SIGMOID     ? KN_GS_SIGMOID
           : op == KN_OP_TANH        ? KN_GS_TANH
           : op == KN_OP_SOFTMAX     ? KN_GS_SOFTMAX
           : op == KN_OP_LOG_SOFTMAX ? KN_GS_LOG_SOFTMAX
                                     : 0;
}

#define GS_MAX_ACT ((int)(sizeof((kn_gs_args *)0)->act / sizeof((kn_gs_args *)0)->act[0]))

/* Whether epilogue step i of c is one the kernels apply: an activation
 * while act[] has room (n_act before it), a row op only last. */
static bool epilogue_step_ok(const kn_opcall *c, int i, int n_act)
{
    int code = epilogue_code(c->a.epilogue[i]);
    bool row = code == KN_GS_SOFTMAX || code == KN_GS_LOG_SOFTMAX;
    return code && (row ? i == c->a.n_epilogue - 1 : n_act < GS_MAX_ACT);
}

/* The float modules hold the kernels (kn_gather_scatter.cu's are empty in
 * the others), and the epilogue must be steps they apply, a row op over
 * rows of at most KN_GATHER_SCATTER_ROW_MAX. */
bool kn_cuda_gather_scatter_supports(const kn_opcall *c)
{
    if (!c || c->op != KN_OP_GATHER_SCATTER) return false;
    const kn_tensor *h = c->n_in > 0 ? c->in[0] : NULL;
    if (h && !kn_dtype_is_float(h->dtype)) return false;
    if (c->a.n_epilogue < 0 || c->a.n_epilogue > KN_GATHER_SCATTER_EPILOGUE_MAX) return false;
    int64_t row = 1;
    for (int d = 1; h && d < h->ndim; d++) row *= h->shape[d];
    for (int i = 0, n_act = 0; i < c->a.n_epilogue; i++) {
        if (!epilogue_step_ok(c, i, n_act)) return false;
        int code = epilogue_code(c->a.epilogue[i]);
        if (code == KN_GS_SOFTMAX || code == KN_GS_LOG_SOFTMAX) {
            if (row > KN_GATHER_SCATTER_ROW_MAX) return false;
        } else {
            n_act++;
        }
    }
    return true;
}

/* The epilogue of the call's attrs into a's act / row_op. */
static kn_status epilogue_args(const kn_opcall *c, kn_gs_args *a)
{
    for (int i = 0; i < c->a.n_epilogue; i++) {
        int op = c->a.epilogue[i], code = epilogue_code(op);
        bool row = code == KN_GS_SOFTMAX || code == KN_GS_LOG_SOFTMAX;
        if (!epilogue_step_ok(c, i, a->n_act))
            return kn_error(KN_ERR_UNSUPPORTED, "gather_scatter: no epilogue of %s as op %d of %d", kn_op_name((kn_op)op),
                            i + 1, c->a.n_epilogue);
        if (row && a->row > KN_GATHER_SCATTER_ROW_MAX)
            return kn_error(KN_ERR_UNSUPPORTED, "gather_scatter: a %s epilogue over rows of %lld elements (at most %d)",
                            kn_op_name((kn_op)op), (long long)a->row, KN_GATHER_SCATTER_ROW_MAX);
        if (row) a->row_op = code;
        else a->act[a->n_act++] = code;
    }
    return KN_OK;
}

static kn_status run(const kn_opcall *c, kn_tensor *h, kn_tensor *w, kn_tensor *base)
{
    const kn_tensor *src = c->in[1], *dst = c->in[2];
    kn_tensor *out = c->out[0];
    kn_dtype dt = out->dtype;
    if (!kn_tensor_is_contiguous(out))
        return kn_error(KN_ERR_UNSUPPORTED, "gather_scatter: the output must be contiguous");
    kn_gs_args a;
    memset(&a, 0, sizeof a);
    a.rows = out->shape[0];
    a.edges = src->shape[0];
    a.hrows = h->shape[0];
    a.row = a.rows > 0 ? kn_tensor_numel(out) / a.rows : 0;
    KN_TRY(epilogue_args(c, &a));
    int variant = c->variant;
    if (variant < 0 || variant > 2)
        return kn_error(KN_ERR_RANGE, "gather_scatter: no variant %d (1 atomics, 2 segments)", variant);
    KN_TRY(check_indices(dt, src, a.hrows, "src"));
    KN_TRY(check_indices(dt, dst, a.rows, "dst"));
    if (variant == 0) variant = forced_variant();
    bool segments = variant == 2 || (variant == 0 && keepable(dst) && !capturing());
    if (a.edges >= INT_MAX || a.rows >= INT_MAX) segments = false; /* the CSR holds ints */
    kn_cuda_variant_label("kiln gather_scatter, %s", segments                   ? "segments"
                                                     : a.n_act || a.row_op ? "atomics, then the epilogue"
                                                                           : "atomics");
    if (kn_tensor_numel(out) == 0) return KN_OK;
    a.h = kn_cuda_tensor_ptr(h);
    a.h_st = h->strides[0];
    a.src = kn_cuda_tensor_ptr(src);
    a.dst = kn_cuda_tensor_ptr(dst);
    a.src64 = src->dtype == KN_I64;
    a.dst64 = dst->dtype == KN_I64;
    a.src_st = src->strides[0];
    a.dst_st = dst->strides[0];
    if (w) {
        a.w = kn_cuda_tensor_ptr(w);
        a.w_st = w->strides[0];
    }
    a.out = kn_cuda_tensor_ptr(out);
    /* 16-byte vectors where every row starts aligned */
    int vec = 16 / (int)kn_dtype_size(dt);
    bool vec_ok = a.row % vec == 0 && aligned16(a.h) && a.h_st % vec == 0 && aligned16(a.out);
    if (segments && base) vec_ok = vec_ok && aligned16(kn_cuda_tensor_ptr(base)) && base->strides[0] % vec == 0;
    a.vec = vec_ok ? vec : 1;
    a.nvec = a.row / a.vec;
    if (!segments) {
        if (base) {
            kn_opcall cc;
            kn_opcall_init(&cc, KN_OP_CONTIGUOUS);
            cc.n_in = 1;
            cc.in[0] = base;
            cc.n_out = 1;
            cc.out[0] = out;
            KN_TRY(kn_cuda_ops_run(&cc));
        } else {
            KN_CUDA_TRY(cudaMemsetAsync(a.out, 0, (size_t)kn_tensor_numel(out) * kn_dtype_size(dt), kn_cuda_stream()),
                        "gather_scatter: zeroing the output");
        }
        if (a.edges > 0 && a.row > 0) KN_TRY(kn_cuda_ops_launch(dt, KN_TK_GS_ATOMIC, a.edges * a.nvec, &a));
        /* the epilogue once every sum is complete (rows no edge reaches too:
         * log_softmax of a zero row is not zero) */
        if (a.row_op) KN_TRY(kn_cuda_ops_launch(dt, KN_TK_GS_EPILOGUE_ROWS, a.rows * 32, &a)); /* a warp a row */
        else if (a.n_act) KN_TRY(kn_cuda_ops_launch(dt, KN_TK_GS_EPILOGUE, a.rows * a.nvec, &a));
        return KN_OK;
    }
    if (base) {
        a.base = kn_cuda_tensor_ptr(base);
        a.base_st = base->strides[0];
    }
    return run_segments(dt, dst, &a);
}

kn_status kn_cuda_gather_scatter(const kn_opcall *c)
{
    bool has_base = c->a.nshape == 0;
    bool has_w = c->n_in - 3 - (has_base ? 1 : 0) == 1;
    if (c->n_in < 3 || c->n_out < 1 || !c->out[0] || !kn_dtype_is_float(c->out[0]->dtype))
        return kn_error(KN_ERR_ARG, "gather_scatter: bad call");
    kn_tensor *h, *w = NULL, *base = NULL, *hold_h, *hold_b = NULL;
    KN_TRY(rows_of(c->in[0], &h, &hold_h));
    kn_status st = KN_OK;
    if (has_w) w = c->in[3]; /* one number per edge: read through its dim-1 stride */
    if (has_base) st = rows_of(c->in[c->n_in - 1], &base, &hold_b);
    if (st == KN_OK) st = run(c, h, w, base);
    kn_tensor_release(hold_h);
    kn_tensor_release(hold_b);
    return st;
}
