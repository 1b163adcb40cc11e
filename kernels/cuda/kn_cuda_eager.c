/* kn_cuda_eager: eager ops through the kernel IR. One op becomes a graph
 * of its inputs and itself; when fusion makes one POINTWISE or ROW kernel
 * of it, that kernel is rendered to CUDA, compiled through the module
 * cache and launched on the call's tensors. So every elementwise op,
 * single-dim reduction, softmax and layer_norm runs the same generated
 * code as a compiled graph, with no hand-written kernel per op.
 *
 * Eager pays this per call, so the result is kept per call signature (op,
 * attrs, each input's dtype, shape and strides, the output's meta): a
 * repeated call is one hash lookup and one launch, with no fusion,
 * rendering or source hashing. Calls the IR cannot express are remembered
 * too, so they fall through to the templates at once.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_eager.h"

#include "kn_cuda_module.h"
#include "kn_cuda_render.h"
#include "kn_fuse.h"
#include "kn_kir.h"

#define N_BUCKETS 2048
#define MAX_ENTRIES 16384 /* past this, calls are built each time (still correct) */
#define MAX_WORDS 320

typedef struct entry {
    struct entry *next;
    uint64_t hash;
    int n_words;
    int64_t *sig;
    bool ok; /* false: not one generated kernel; the caller tries the templates */
    const void *fn;
    int n_args;
    signed char src[KN_KIR_MAX_ARGS]; /* -1: output 0; i >= 0: input i */
    int64_t off[KN_KIR_MAX_ARGS];     /* the argument's offset, in bytes */
    long long sizes[KN_MAX_DIMS];
    int64_t grid;
    int block;
} entry;

/* Process-wide: an entry holds a context-independent kernel handle and
 * launch geometry, valid on every GPU (of the architecture it was built
 * for: kiln assumes one architecture per machine, see kn_cuda_module.c). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry *buckets[N_BUCKETS];
static int n_entries;

/* ---- signatures ---- */

typedef struct sigbuf {
    int64_t w[MAX_WORDS];
    int n;
} sigbuf;

static void put(sigbuf *s, int64_t v)
{
    if (s->n < MAX_WORDS) s->w[s->n] = v;
    s->n++;
}

static void put_f(sigbuf *s, double v)
{
    int64_t bits;
    memcpy(&bits, &v, sizeof bits);
    put(s, bits);
}

static void put_ints(sigbuf *s, const int *v, int n)
{
    for (int i = 0; i < n; i++) put(s, v[i]);
}

static void put_i64s(sigbuf *s, const int64_t *v, int n)
{
    for (int i = 0; i < n; i++) put(s, v[i]);
}

/* Field by field: kn_attrs has padding, whose bytes a struct copy need not keep. */
static void put_attrs(sigbuf *s, const kn_attrs *a)
{
    put_ints(s, a->dims, KN_MAX_DIMS);
    put(s, a->ndims);
    put_i64s(s, a->shape, KN_MAX_DIMS);
    put(s, a->nshape);
    put(s, a->dim);
    put(s, a->keepdim);
    put(s, a->correction);
    put(s, a->diagonal);
    put(s, a->start);
    put(s, a->stop);
    put(s, a->step);
    put_ints(s, a->kernel, 2);
    put_ints(s, a->stride, 2);
    put_ints(s, a->padding, 2);
    put_ints(s, a->dilation, 2);
    put(s, a->groups);
    put(s, a->ceil_mode);
    put(s, a->count_include_pad);
    put_f(s, a->eps);
    put_f(s, a->value);
    put_f(s, a->value2);
    put(s, (int64_t)a->seed);
    put(s, (int64_t)a->rng_offset);
    put(s, a->dtype);
}

static bool signature(const kn_opcall *c, sigbuf *s)
{
    s->n = 0;
    put(s, c->op);
    put(s, c->n_in);
    put(s, c->n_out);
    put_attrs(s, &c->a);
    for (int i = 0; i < c->n_in; i++) {
        const kn_tensor *t = c->in[i];
        put(s, t->dtype);
        put(s, t->ndim);
        put_i64s(s, t->shape, t->ndim);
        put_i64s(s, t->strides, t->ndim);
    }
    for (int i = 0; i < c->n_out; i++) {
        const kn_tensor *t = c->out[i];
        put(s, t->dtype);
        put(s, t->ndim);
        put_i64s(s, t->shape, t->ndim);
    }
    return s->n <= MAX_WORDS;
}

static uint64_t sig_hash(const sigbuf *s)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < s->n; i++) {
        h ^= (uint64_t)s->w[i];
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    return h;
}

/* ---- building an entry (the first call of a signature) ---- */

/* The kernel for c, into e; KN_ERR_UNSUPPORTED (no message) when fusion
 * does not make exactly one generated kernel of it. */
static kn_status build(const kn_opcall *c, entry *e)
{
    if (c->n_out != 1 || !c->out[0] || c->n_in > KN_MAX_INPUTS) return KN_ERR_UNSUPPORTED;
    kn_graph g;
    kn_graph_init(&g);
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = c->op;
    n.n_in = c->n_in;
    n.a = c->a;
    n.n_out = 1;
    n.out[0] = kn_tensor_meta(c->out[0]);
    snprintf(n.where, sizeof n.where, "eager");
    kn_status st = KN_OK;
    for (int i = 0; i < c->n_in && st == KN_OK; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        st = kn_graph_add_input(&g, KN_IN_ARG, name, c->in[i], "eager", &n.in_node[i]);
    }
    int root = -1;
    if (st == KN_OK) st = kn_graph_add_node(&g, &n, &root);
    if (st != KN_OK) {
        kn_graph_free(&g);
        return st;
    }
    kn_fusion f;
    st = kn_fuse(&g, &root, 1, &f);
    if (st != KN_OK) {
        kn_graph_free(&g);
        return st;
    }
    const kn_kernel *k = f.prog.n_kernels == 1 ? &f.prog.kernels[0] : NULL;
    bool fits = k && (k->kind == KN_KERNEL_POINTWISE || k->kind == KN_KERNEL_ROW) && f.kernel[root] == 0;
    int n_out_args = 0;
    for (int a = 0; fits && a < k->n_args; a++) {
        const kn_karg *ar = &k->args[a];
        const kn_node *src = &g.nodes[ar->node];
        const kn_tensor *t = NULL;
        if (ar->node == root && ar->out == 0 && ar->is_output) {
            e->src[a] = -1;
            t = c->out[0];
            n_out_args++;
        } else if (src->op == KN_NODE_INPUT && !ar->is_output && ar->out == 0) {
            e->src[a] = (signed char)src->input;
            t = c->in[src->input];
        } else {
            fits = false; /* a constant or a second output: not a plain eager call */
            break;
        }
        if (t->dtype != ar->dtype) fits = false;
        e->off[a] = ar->offset * (int64_t)kn_dtype_size(ar->dtype);
    }
    if (!fits || n_out_args != 1) {
        kn_fusion_free(&f);
        kn_graph_free(&g);
        return KN_ERR_UNSUPPORTED;
    }
    e->n_args = k->n_args;
    for (int d = 0; d < k->ndim; d++) e->sizes[d] = k->shape[d];
    kn_kernel_launch_dims(k, NULL, &e->grid, &e->block);
    char *src = NULL;
    st = kn_kernel_render(k, &kn_cuda_render_target, &src);
    kn_cuda_module *m = NULL;
    if (st == KN_OK) st = kn_cuda_module_get(src, kn_cuda_cache_dir(), &m);
    if (st == KN_OK) st = kn_cuda_module_kernel(m, k->name, &e->fn);
    if (st == KN_ERR_UNSUPPORTED) {
        /* the renderer or NVRTC refused generated code: a bug in kiln, not
         * a gap for the templates to fill quietly */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kn_last_error());
        st = kn_error(KN_ERR_DEVICE, "%s: the generated CUDA kernel %s does not build: %s", kn_op_name(c->op),
                      k->name, msg);
    }
    free(src);
    kn_fusion_free(&f);
    kn_graph_free(&g);
    if (st == KN_OK) e->ok = true;
    return st;
}

/* ---- running ---- */

static kn_status launch(const entry *e, const kn_opcall *c)
{
    kn_kargs ka;
    memset(&ka, 0, sizeof ka);
    for (int a = 0; a < e->n_args; a++) {
        const kn_tensor *t = e->src[a] < 0 ? c->out[0] : c->in[(int)e->src[a]];
        ka.bufs[a] = (char *)t->storage->data + t->offset * (int64_t)kn_dtype_size(t->dtype) + e->off[a];
    }
    memcpy(ka.sizes, e->sizes, sizeof ka.sizes);
    return kn_cuda_launch(e->fn, e->grid, e->block, &ka, 0);
}

static bool same_sig(const entry *e, uint64_t h, const sigbuf *s)
{
    return e->hash == h && e->n_words == s->n && memcmp(e->sig, s->w, sizeof(int64_t) * (size_t)s->n) == 0;
}

/* A view of t whose dims from `from` on are merged into one, or NULL
 * when their strides do not allow it. */
static kn_tensor *merged_view(const kn_tensor *t, int from)
{
    int64_t shape[KN_MAX_DIMS], strides[KN_MAX_DIMS], n = 1, inner = 1;
    int prev = -1; /* the last dim of size > 1 seen, walking inwards */
    for (int d = from; d < t->ndim; d++) {
        n *= t->shape[d];
        if (t->shape[d] == 1) continue; /* its stride never moves */
        if (prev >= 0 && t->strides[prev] != t->strides[d] * t->shape[d]) return NULL;
        prev = d;
        inner = t->strides[d];
    }
    for (int d = 0; d < from; d++) {
        shape[d] = t->shape[d];
        strides[d] = t->strides[d];
    }
    shape[from] = n;
    strides[from] = inner;
    kn_tensor *v = NULL;
    return kn_tensor_view_of(t, from + 1, shape, strides, t->offset, &v) == KN_OK ? v : NULL;
}

/* merged_view, through a contiguous copy when t's layout does not merge
 * (the copy is freed at once: later work on the stream runs after this). */
static kn_tensor *merged_or_copy(kn_tensor *t, int from)
{
    kn_tensor *v = merged_view(t, from);
    if (v) return v;
    kn_opcall cc;
    kn_opcall_init(&cc, KN_OP_CONTIGUOUS);
    cc.n_in = 1;
    cc.in[0] = t;
    if (kn_op_eager(&cc, kn_tensor_device(t)) != KN_OK) return NULL;
    v = merged_view(cc.out[0], from);
    kn_tensor_release(cc.out[0]);
    return v;
}

/* Calls the IR covers once reshaped: layer_norm over several trailing
 * dims (merged into one row; an input whose layout does not merge is
 * copied first), softmax of a scalar (a row of one). The row kernel is
 * the same; only the views differ. */
static kn_status run_reshaped(const kn_opcall *c)
{
    kn_opcall r = *c;
    bool lnorm = c->op == KN_OP_LAYER_NORM;
    int k = lnorm ? c->a.nshape : 0;
    for (int i = 0; i < c->n_in; i++) {
        const kn_tensor *t = c->in[i];
        r.in[i] = merged_or_copy(c->in[i], lnorm && i == 0 ? t->ndim - k : 0); /* weight and bias have the normalized shape */
    }
    r.out[0] = merged_view(c->out[0], lnorm ? c->out[0]->ndim - k : 0);
    bool ready = r.out[0] != NULL;
    for (int i = 0; i < c->n_in; i++) ready = ready && r.in[i];
    if (lnorm) {
        r.a.nshape = 1;
        r.a.shape[0] = r.in[0] ? r.in[0]->shape[r.in[0]->ndim - 1] : 0;
        for (int i = 1; ready && i < c->n_in; i++) ready = r.in[i]->ndim == 1;
    } else {
        r.a.dim = 0;
    }
    kn_status st = ready ? kn_cuda_eager_ir(&r) : KN_ERR_UNSUPPORTED;
    for (int i = 0; i < c->n_in; i++) kn_tensor_release(r.in[i]);
    kn_tensor_release(r.out[0]);
    return st;
}

/* The calls fusion makes one POINTWISE or ROW kernel of (kn_fuse_group.c's
 * is_pointwise and row_dim, with the reshaped calls of run_reshaped):
 * every elementwise op, copy, tril / triu, batch_norm, full and arange;
 * softmax and layer_norm over any dims; a reduction over one dim. Any
 * dtype: the IR loads, computes and stores each of them. */
bool kn_cuda_eager_supports(const kn_opcall *c)
{
    if (!c || (unsigned)c->op >= KN_OP_COUNT) return false;
    switch (kn_op_kind_of(c->op)) {
    case KN_K_UNARY:
    case KN_K_BINARY:
    case KN_K_COMPARE:
    case KN_K_TERNARY:
    case KN_K_MASKED:
    case KN_K_COPY:
    case KN_K_TRI:
    case KN_K_SOFTMAX:
    case KN_K_NORM: return true;
    /* Random ops are never one generated kernel (the templates take seed and
     * counter offset as kernel arguments), and their offset is new at every
     * call: a signature keyed on it would add a futile entry per call. */
    case KN_K_CREATE: return c->op == KN_OP_FULL || c->op == KN_OP_ARANGE;
    /* all dims of a 1-D input is one dim; without tensors, the op alone */
    case KN_K_REDUCE: return c->a.ndims == 1 || (c->a.ndims == 0 && (c->n_in < 1 || !c->in[0] || c->in[0]->ndim == 1));
    default: return false;
    }
}

kn_status kn_cuda_eager_ir(const kn_opcall *c)
{
    /* what the IR never makes one kernel of goes to the templates at once */
    if (!kn_cuda_eager_supports(c)) return KN_ERR_UNSUPPORTED;
    for (int i = 0; i < c->n_in; i++)
        if (!c->in[i] || !c->in[i]->storage) return KN_ERR_UNSUPPORTED;
    for (int i = 0; i < c->n_out; i++)
        if (!c->out[i] || !c->out[i]->storage) return KN_ERR_UNSUPPORTED;
    if (c->n_out == 1 && c->n_in >= 1 &&
        ((c->op == KN_OP_LAYER_NORM && c->a.nshape >= 2 && c->a.nshape <= c->in[0]->ndim) ||
         ((c->op == KN_OP_SOFTMAX || c->op == KN_OP_LOG_SOFTMAX) && c->in[0]->ndim == 0)))
        return run_reshaped(c);
    sigbuf s;
    if (!signature(c, &s)) return KN_ERR_UNSUPPORTED; /* cannot happen with KN_MAX_* as they are */
    uint64_t h = sig_hash(&s);
    size_t b = (size_t)(h % N_BUCKETS);
    pthread_mutex_lock(&lock);
    entry *found = NULL;
    for (entry *e = buckets[b]; e; e = e->next)
        if (same_sig(e, h, &s)) {
            found = e;
            break;
        }
    pthread_mutex_unlock(&lock);
    if (found) return found->ok ? launch(found, c) : KN_ERR_UNSUPPORTED;

    entry *e = calloc(1, sizeof *e);
    if (!e) return kn_error(KN_ERR_OOM, "out of host memory for an eager CUDA kernel");
    kn_status st = build(c, e);
    if (st != KN_OK && st != KN_ERR_UNSUPPORTED) { /* an error, not an answer: do not remember it */
        free(e);
        return st;
    }
    kn_status ran = st == KN_OK ? launch(e, c) : KN_ERR_UNSUPPORTED;
    e->hash = h;
    e->n_words = s.n;
    e->sig = malloc(sizeof(int64_t) * (size_t)s.n);
    pthread_mutex_lock(&lock);
    bool keep = e->sig && n_entries < MAX_ENTRIES;
    if (keep) {
        memcpy(e->sig, s.w, sizeof(int64_t) * (size_t)s.n);
        e->next = buckets[b];
        buckets[b] = e;
        n_entries++;
    }
    pthread_mutex_unlock(&lock);
    if (!keep) {
        free(e->sig);
        free(e);
    }
    return ran;
}
