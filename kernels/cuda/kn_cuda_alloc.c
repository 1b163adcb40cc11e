/* kn_cuda_alloc: the caching device allocator's pool, one per GPU
 * (contract in kn_cuda_alloc.h).
 *
 * cudaMalloc and cudaFree are slow (cudaFree synchronizes the device), and
 * eager code frees and allocates the same sizes over and over; so blocks
 * are rounded to size classes and a freed block goes to a cache, from
 * which the smallest block that fits (and is at most twice the request,
 * so a small tensor does not pin a huge block) serves the next request.
 * No block is split, and none grows: a block is one cudaMalloc, or one of
 * several equal blocks carved from one (a segment, below).
 *
 * Segments. Results that outlive their call are freed only when Lua's
 * collector gets to them, so a loop of compiled calls can ask for the same
 * size a hundred times before any comes back, and each miss was a
 * cudaMalloc: 9-33 us of host time a call on the H200 (2026-12-02), more
 * than the whole replay should cost. A size that keeps missing gets more
 * blocks a cudaMalloc: one the first time, then 2, 4, ... up to
 * SEGMENT_MAX_BYTES (SEGMENT_MAX_BLOCKS), the rest of them cached. A
 * segment goes back to CUDA (emptying the cache) only once every block of
 * it is cached.
 *
 * Reuse without waiting is safe because all of kiln's device work runs on
 * one stream: work queued after the reuse runs after the work that still
 * read the block. Recordings (CUDA graphs) replay later, so a block they
 * touched must never be handed to anyone else while they live: see
 * capture_begin below.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_alloc.h"

#define SMALL_MAX ((int64_t)1 << 20)
#define SMALL_ROUND ((int64_t)512)
#define LARGE_ROUND ((int64_t)2 << 20)
#define SEGMENT_MAX_BYTES ((int64_t)32 << 20)
#define SEGMENT_MAX_BLOCKS 64
#define MISS_SIZES 8 /* sizes whose misses are counted */

typedef struct block block;

/* One cudaMalloc carved into n equal blocks (base: the pointer to free). */
typedef struct segment {
    void *base;
    int64_t bytes;
    int n;
    block **blocks;
    bool freeing; /* empty_locked: every block cached, to be given back */
} segment;

typedef struct rec rec;

struct block {
    void *ptr;
    int64_t size;
    segment *seg;        /* the segment it was carved from; NULL: its own cudaMalloc */
    bool in_use;
    int holds;           /* live recordings the block is reserved for */
    rec *owner;          /* the latest of them (tells whether the open one has it) */
    struct block *hnext; /* chain of the pointer table */
};

/* Blocks sorted by (size, address): best fit is a binary search. */
typedef struct blist {
    block **v;
    int n, cap;
} blist;

struct rec {
    blist all;  /* every block reserved for this recording */
    blist free; /* those free to reuse while it is still being recorded */
};

/* One GPU's allocator (kn_cuda_dev.pool): its blocks are that GPU's memory. */
struct kn_cuda_pool {
    pthread_mutex_t lock;
    block **table; /* by pointer, chained */
    size_t table_size, table_count;
    blist cache;
    rec *recording; /* the recording open now, or NULL */
    kn_cuda_alloc_stats stats;
    bool warned_unknown;
    struct {
        int64_t size;
        int misses;
    } missed[MISS_SIZES]; /* the latest sizes that missed the cache, with their count */
    int missed_next;      /* the slot the next new size takes */
};

kn_cuda_pool *kn_cuda_pool_new(void)
{
    kn_cuda_pool *pool = calloc(1, sizeof *pool);
    if (pool) pthread_mutex_init(&pool->lock, NULL);
    return pool;
}

/* ---- sorted lists ---- */

static bool before(const block *a, const block *b)
{
    return a->size < b->size || (a->size == b->size && (uintptr_t)a->ptr < (uintptr_t)b->ptr);
}

static bool blist_insert(blist *l, block *b)
{
    if (l->n == l->cap) {
        int ncap = l->cap ? l->cap * 2 : 64;
        block **nv = realloc(l->v, sizeof *nv * (size_t)ncap);
        if (!nv) return false;
        l->v = nv;
        l->cap = ncap;
    }
    int lo = 0, hi = l->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (before(l->v[mid], b)) lo = mid + 1;
        else hi = mid;
    }
    memmove(&l->v[lo + 1], &l->v[lo], sizeof *l->v * (size_t)(l->n - lo));
    l->v[lo] = b;
    l->n++;
    return true;
}

static void blist_remove_at(blist *l, int i)
{
    memmove(&l->v[i], &l->v[i + 1], sizeof *l->v * (size_t)(l->n - i - 1));
    l->n--;
}

/* Take the smallest block of at least need bytes and at most twice that. */
static block *blist_take(blist *l, int64_t need)
{
    int lo = 0, hi = l->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (l->v[mid]->size < need) lo = mid + 1;
        else hi = mid;
    }
    if (lo == l->n || l->v[lo]->size > 2 * need) return NULL;
    block *b = l->v[lo];
    blist_remove_at(l, lo);
    return b;
}

/* ---- the pointer table ---- */

static size_t slot_of(const void *p, size_t size)
{
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h & (size - 1);
}

static bool table_add(kn_cuda_pool *pool, block *b)
{
    if (pool->table_count + 1 > pool->table_size) { /* load factor 1: rehash into twice the buckets */
        size_t nsize = pool->table_size ? pool->table_size * 2 : 1024;
        block **nt = calloc(nsize, sizeof *nt);
        if (!nt) return false;
        for (size_t i = 0; i < pool->table_size; i++)
            for (block *c = pool->table[i], *next; c; c = next) {
                next = c->hnext;
                size_t s = slot_of(c->ptr, nsize);
                c->hnext = nt[s];
                nt[s] = c;
            }
        free(pool->table);
        pool->table = nt;
        pool->table_size = nsize;
    }
    size_t s = slot_of(b->ptr, pool->table_size);
    b->hnext = pool->table[s];
    pool->table[s] = b;
    pool->table_count++;
    return true;
}

static block *table_find(kn_cuda_pool *pool, const void *p)
{
    if (!pool->table_size) return NULL;
    for (block *b = pool->table[slot_of(p, pool->table_size)]; b; b = b->hnext)
        if (b->ptr == p) return b;
    return NULL;
}

static void table_remove(kn_cuda_pool *pool, block *b)
{
    block **pp = &pool->table[slot_of(b->ptr, pool->table_size)];
    while (*pp && *pp != b) pp = &(*pp)->hnext;
    if (*pp) {
        *pp = b->hnext;
        pool->table_count--;
    }
}

/* ---- allocation ---- */

static int64_t round_size(int64_t n)
{
    if (n <= 0) return SMALL_ROUND; /* a zero-byte tensor still gets a unique pointer */
    if (n <= SMALL_MAX) return (n + SMALL_ROUND - 1) / SMALL_ROUND * SMALL_ROUND;
    return (n + LARGE_ROUND - 1) / LARGE_ROUND * LARGE_ROUND;
}

/* Whether every block of the segment is cached (free, held by no recording). */
static bool segment_idle(const segment *g)
{
    for (int i = 0; i < g->n; i++)
        if (g->blocks[i]->in_use || g->blocks[i]->holds > 0) return false;
    return true;
}

/* Give a segment back to CUDA, its blocks out of the table (lock held;
 * the caller has taken them out of every list). */
static void segment_free(kn_cuda_pool *pool, segment *g)
{
    for (int i = 0; i < g->n; i++) {
        table_remove(pool, g->blocks[i]);
        free(g->blocks[i]);
    }
    cudaFree(g->base);
    pool->stats.reserved -= g->bytes;
    free(g->blocks);
    free(g);
}

/* Give a block that is in no list back to CUDA: its own cudaMalloc now; a
 * segment's stays in the table, unlisted, until empty_locked finds its
 * segment idle (the cache had no room for it: out of host memory). */
static void block_give_back(kn_cuda_pool *pool, block *b)
{
    if (b->seg) return;
    table_remove(pool, b);
    cudaFree(b->ptr);
    pool->stats.reserved -= b->size;
    free(b);
}

/* cudaFree the cached blocks, and the segments all of whose blocks are
 * cached (lock held). */
static void empty_locked(kn_cuda_pool *pool)
{
    segment **idle = calloc((size_t)pool->cache.n + 1, sizeof *idle);
    int n_idle = 0, keep = 0;
    for (int i = 0; i < pool->cache.n; i++) {
        block *b = pool->cache.v[i];
        if (!b->seg) {
            block_give_back(pool, b);
        } else if (idle && (b->seg->freeing || segment_idle(b->seg))) {
            if (!b->seg->freeing) idle[n_idle++] = b->seg; /* freed below, once out of the list */
            b->seg->freeing = true;
        } else {
            pool->cache.v[keep++] = b; /* (no host memory for the list of idle segments: kept) */
        }
    }
    pool->cache.n = keep;
    for (int i = 0; i < n_idle; i++) segment_free(pool, idle[i]);
    free(idle);
}

/* Reserve b for the open recording (lock held). */
static bool reserve(kn_cuda_pool *pool, block *b)
{
    if (!pool->recording || b->owner == pool->recording) return true;
    if (!blist_insert(&pool->recording->all, b)) return false;
    b->owner = pool->recording;
    b->holds++;
    return true;
}

static void hand_out(kn_cuda_pool *pool, block *b)
{
    b->in_use = true;
    pool->stats.allocated += b->size;
    if (pool->stats.allocated > pool->stats.peak_allocated) pool->stats.peak_allocated = pool->stats.allocated;
}

/* The blocks of a new cudaMalloc at ptr: k of need bytes each (a segment
 * when k > 1), in the table, all but the first cached; the first reserved
 * for an open recording and returned. NULL, with the memory given back,
 * when host memory for the lists runs out (lock held). */
static block *carve(kn_cuda_pool *pool, void *ptr, int64_t need, int k)
{
    segment *g = k > 1 ? calloc(1, sizeof *g) : NULL;
    block **blocks = calloc((size_t)k, sizeof *blocks);
    bool ok = blocks && (k == 1 || g);
    for (int i = 0; ok && i < k; i++) {
        blocks[i] = calloc(1, sizeof *blocks[i]);
        ok = blocks[i] != NULL;
        if (ok) {
            blocks[i]->ptr = (char *)ptr + (int64_t)i * need;
            blocks[i]->size = need;
            blocks[i]->seg = g;
        }
    }
    int added = 0;
    while (ok && added < k && table_add(pool, blocks[added])) added++;
    ok = ok && added == k;
    for (int i = 1; ok && i < k; i++) ok = blist_insert(&pool->cache, blocks[i]);
    ok = ok && reserve(pool, blocks[0]); /* last: nothing after it can fail */
    if (!ok) {
        for (int i = 0; i < k && blocks; i++) {
            if (!blocks[i]) continue;
            if (i < added) table_remove(pool, blocks[i]);
            int at = -1;
            for (int j = 0; j < pool->cache.n; j++)
                if (pool->cache.v[j] == blocks[i]) at = j;
            if (at >= 0) blist_remove_at(&pool->cache, at);
            free(blocks[i]);
        }
        free(blocks);
        free(g);
        cudaFree(ptr);
        return NULL;
    }
    pool->stats.reserved += k * need;
    if (pool->stats.reserved > pool->stats.peak_reserved) pool->stats.peak_reserved = pool->stats.reserved;
    block *first = blocks[0];
    if (g) {
        g->base = ptr;
        g->bytes = k * need;
        g->n = k;
        g->blocks = blocks;
    } else {
        free(blocks);
    }
    return first;
}

kn_status kn_cuda_pool_malloc(kn_cuda_pool *pool, int64_t nbytes, void **p, cudaError_t *cuda_error)
{
    *p = NULL;
    *cuda_error = cudaSuccess;
    int64_t need = round_size(nbytes);
    pthread_mutex_lock(&pool->lock);
    block *b = pool->recording ? blist_take(&pool->recording->free, need) : NULL;
    if (!b) b = blist_take(&pool->cache, need);
    if (b) {
        if (!reserve(pool, b)) {
            blist_insert(&pool->cache, b); /* cannot fail: the block was just in it */
            pthread_mutex_unlock(&pool->lock);
            return kn_error(KN_ERR_OOM, "out of host memory for the CUDA allocator's lists");
        }
        pool->stats.n_reuse++;
        hand_out(pool, b);
        *p = b->ptr;
        pthread_mutex_unlock(&pool->lock);
        return KN_OK;
    }
    /* a miss: this size's blocks a cudaMalloc (segments, above) */
    int slot = -1;
    for (int i = 0; i < MISS_SIZES; i++)
        if (pool->missed[i].size == need) slot = i;
    if (slot < 0) {
        slot = pool->missed_next;
        pool->missed_next = (pool->missed_next + 1) % MISS_SIZES;
        pool->missed[slot].size = need;
        pool->missed[slot].misses = 0;
    }
    /* blocks this cudaMalloc: twice as many for each earlier miss of the size, 1, 2, 4, ... */
    int misses = ++pool->missed[slot].misses, k = 1;
    for (int m = 1; m < misses && k < SEGMENT_MAX_BLOCKS && 2 * k * need <= SEGMENT_MAX_BYTES; m++) k *= 2;
    void *ptr = NULL;
    cudaError_t e = cudaMalloc(&ptr, (size_t)(k * need));
    pool->stats.n_malloc++;
    if (e == cudaErrorMemoryAllocation && k > 1) { /* no room for the segment: one block will do */
        (void)cudaGetLastError();
        k = 1;
        e = cudaMalloc(&ptr, (size_t)need);
        pool->stats.n_malloc++;
    }
    if (e == cudaErrorMemoryAllocation && !pool->recording) {
        /* cudaFree synchronizes the device, which an open recording's
         * capture cannot tolerate; outside one, give the cache back and
         * try once more */
        (void)cudaGetLastError();
        empty_locked(pool);
        e = cudaMalloc(&ptr, (size_t)need);
        pool->stats.n_malloc++;
    }
    if (e != cudaSuccess) {
        pthread_mutex_unlock(&pool->lock);
        (void)cudaGetLastError(); /* an OOM is not sticky: later calls must not see it */
        *cuda_error = e;
        return KN_ERR_DEVICE; /* kn_cuda_malloc words it */
    }
    block *nb = carve(pool, ptr, need, k);
    if (!nb) {
        pthread_mutex_unlock(&pool->lock);
        return kn_error(KN_ERR_OOM, "out of host memory for the CUDA allocator's lists");
    }
    hand_out(pool, nb);
    *p = nb->ptr;
    pthread_mutex_unlock(&pool->lock);
    return KN_OK;
}

void kn_cuda_pool_free(kn_cuda_pool *pool, void *p)
{
    if (!p) return;
    pthread_mutex_lock(&pool->lock);
    block *b = table_find(pool, p);
    if (!b || !b->in_use) {
        bool warn = !pool->warned_unknown;
        pool->warned_unknown = true;
        pthread_mutex_unlock(&pool->lock);
        if (warn) fprintf(stderr, "kiln: CUDA free of a pointer the allocator does not hold (%p); ignored\n", p);
        return;
    }
    b->in_use = false;
    pool->stats.allocated -= b->size;
    bool kept = false;
    if (pool->recording && reserve(pool, b)) {
        /* freed while recording: the recording may have read it, so it is
         * the recording's from now on; reusable inside it unless another
         * live recording holds it too */
        if (b->holds == 1) blist_insert(&pool->recording->free, b);
        kept = true;
    } else if (b->holds > 0) {
        kept = true; /* a live recording's: stays reserved until that is destroyed */
    }
    if (!kept && !blist_insert(&pool->cache, b)) block_give_back(pool, b); /* no room in the list */
    pthread_mutex_unlock(&pool->lock);
}

void kn_cuda_pool_empty(kn_cuda_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    empty_locked(pool);
    memset(pool->missed, 0, sizeof pool->missed); /* a fresh start: sizes begin again at one block a miss */
    pthread_mutex_unlock(&pool->lock);
}

void kn_cuda_pool_stats(kn_cuda_pool *pool, kn_cuda_alloc_stats *s)
{
    pthread_mutex_lock(&pool->lock);
    *s = pool->stats;
    pthread_mutex_unlock(&pool->lock);
}

void kn_cuda_pool_reset_peak(kn_cuda_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    pool->stats.peak_allocated = pool->stats.allocated;
    pool->stats.peak_reserved = pool->stats.reserved;
    pthread_mutex_unlock(&pool->lock);
}

/* ---- recordings ---- */

kn_status kn_cuda_pool_capture_begin(kn_cuda_pool *pool)
{
    rec *r = calloc(1, sizeof *r);
    if (!r) return kn_error(KN_ERR_OOM, "out of host memory for a recording");
    pthread_mutex_lock(&pool->lock);
    if (pool->recording) {
        pthread_mutex_unlock(&pool->lock);
        free(r);
        return kn_error(KN_ERR_ARG, "cuda: a recording is already open (recordings do not nest)");
    }
    pool->recording = r;
    pthread_mutex_unlock(&pool->lock);
    return KN_OK;
}

void kn_cuda_pool_capture_end(kn_cuda_pool *pool, void **held)
{
    pthread_mutex_lock(&pool->lock);
    rec *r = pool->recording;
    pool->recording = NULL;
    if (r) { /* its free blocks stay reserved, no longer reusable */
        free(r->free.v);
        memset(&r->free, 0, sizeof r->free);
    }
    pthread_mutex_unlock(&pool->lock);
    *held = r;
}

void kn_cuda_pool_release_held(kn_cuda_pool *pool, void *held)
{
    rec *r = held;
    if (!r) return;
    pthread_mutex_lock(&pool->lock);
    if (pool->recording == r) pool->recording = NULL;
    for (int i = 0; i < r->all.n; i++) {
        block *b = r->all.v[i];
        if (b->owner == r) b->owner = NULL;
        if (--b->holds > 0 || b->in_use) continue; /* its holder frees it into the cache later */
        if (!blist_insert(&pool->cache, b)) block_give_back(pool, b);
    }
    pthread_mutex_unlock(&pool->lock);
    free(r->all.v);
    free(r->free.v);
    free(r);
}
