/* graph_fuzz.h: a seeded random-graph generator for tests of anything that
 * rewrites or executes graphs (passes, fusion, codegen), plus the helpers
 * such a test needs: a bound copy of a graph and a value comparison.
 *
 *   kn_graph g; int outs[KN_FUZZ_MAX_OUTPUTS], n_outs;
 *   kn_fuzz_graph(seed, &g, outs, &n_outs);   // g initialized here; kn_graph_free(&g) after
 *
 * A graph has 5..40 nodes over 1..3 bound f32 CPU inputs (shapes of up to 3
 * dims, sizes 1..7, broadcast-compatible), and draws from elementwise ops
 * (with tensors and with constants, including constant-only chains), where,
 * masked_fill, sum/mean/amax, max (two outputs), softmax/log_softmax,
 * layer_norm, matmul, reshape/permute/slice/expand views, contiguous, casts
 * to f64 and back, tril, and exact repeats of earlier nodes. Every node's
 * metas come from shape inference (a candidate that fails it is dropped).
 * The same seed gives the same graph. Header-only: everything is static.
 */
#ifndef KN_GRAPH_FUZZ_H
#define KN_GRAPH_FUZZ_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_graph.h"
#include "kn_passes.h"
#include "kn_view.h"

#define KN_FUZZ_MAX_OUTPUTS 3

typedef struct kn_fuzz {
    uint64_t s;
    kn_graph *g;
    int n_consts;
} kn_fuzz;

static inline uint64_t kn_fuzz_u64(kn_fuzz *f)
{
    uint64_t z = (f->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static inline int kn_fuzz_int(kn_fuzz *f, int lo, int hi)
{
    return lo + (int)(kn_fuzz_u64(f) % (uint64_t)(hi - lo + 1));
}

static inline double kn_fuzz_unit(kn_fuzz *f)
{
    return (double)(kn_fuzz_u64(f) >> 11) * 0x1p-53;
}

static inline const kn_meta *kn_fuzz_meta(const kn_fuzz *f, int ref)
{
    return &f->g->nodes[ref / KN_MAX_OUTPUTS].out[ref % KN_MAX_OUTPUTS];
}

/* A random value (node * KN_MAX_OUTPUTS + output) of the graph: `want`
 * 0 = any non-bool, 1 = bool, 2 = float; -1 when none fits. */
static inline int kn_fuzz_pick(kn_fuzz *f, int want)
{
    int refs[256], n = 0;
    for (int i = 0; i < f->g->n_nodes; i++)
        for (int k = 0; k < f->g->nodes[i].n_out && n < 256; k++) {
            kn_dtype dt = f->g->nodes[i].out[k].dtype;
            bool fits = want == 1 ? dt == KN_BOOL : want == 2 ? kn_dtype_is_float(dt) : dt != KN_BOOL;
            if (fits) refs[n++] = i * KN_MAX_OUTPUTS + k;
        }
    if (n == 0) return -1;
    /* mostly a value nothing reads yet, so that graphs stay connected */
    if (kn_fuzz_int(f, 0, 3) != 0) {
        int unused[256], m = 0;
        for (int k = 0; k < n; k++) {
            bool used = false;
            for (int j = refs[k] / KN_MAX_OUTPUTS + 1; j < f->g->n_nodes && !used; j++)
                for (int q = 0; q < f->g->nodes[j].n_in; q++)
                    used = used || (f->g->nodes[j].in_node[q] == refs[k] / KN_MAX_OUTPUTS &&
                                    f->g->nodes[j].in_out[q] == refs[k] % KN_MAX_OUTPUTS);
            if (!used) unused[m++] = refs[k];
        }
        if (m > 0) return unused[kn_fuzz_int(f, 0, m - 1)];
    }
    /* else lean toward recent values so that chains (neg of neg, view of view) form */
    int r = kn_fuzz_int(f, 0, 2) == 0 ? kn_fuzz_int(f, 0, n - 1) : n - 1 - kn_fuzz_int(f, 0, n < 4 ? n - 1 : 3);
    return refs[r];
}

/* Append op node with inputs refs[0..n_in) and attrs a if shape inference
 * accepts it; its index, or -1. */
static inline int kn_fuzz_add(kn_fuzz *f, kn_op op, const kn_attrs *a, int n_in, const int *refs)
{
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = (int)op;
    n.n_in = n_in;
    n.a = *a;
    for (int k = 0; k < n_in; k++) {
        if (refs[k] < 0) return -1;
        n.in_node[k] = refs[k] / KN_MAX_OUTPUTS;
        n.in_out[k] = refs[k] % KN_MAX_OUTPUTS;
    }
    snprintf(n.where, sizeof n.where, "fuzz.lua:%d", f->g->n_nodes + 1);
    int idx;
    if (kn_graph_add_node(f->g, &n, &idx) != KN_OK) return -1;
    int n_out = 0;
    if (kn_node_infer(f->g, idx, f->g->nodes[idx].out, &n_out) != KN_OK) {
        f->g->n_nodes--;
        return -1;
    }
    f->g->nodes[idx].n_out = n_out;
    return idx;
}

static inline kn_attrs kn_fuzz_attrs(kn_op op)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    return c.a;
}

/* A constant node; constants 0 and 1 come often so that identities appear. */
static inline int kn_fuzz_const(kn_fuzz *f)
{
    static const double vals[] = {0, 1, 1, 2, -1, 0.5, 3};
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = KN_NODE_CONST;
    n.n_out = 1;
    int r = kn_fuzz_int(f, 0, 9);
    n.value = r < 7 ? vals[r] : kn_fuzz_unit(f) * 4 - 2;
    int d = kn_fuzz_int(f, 0, 9);
    n.out[0].dtype = d < 7 ? KN_F32 : d < 9 ? KN_F64 : KN_I32;
    if (n.out[0].dtype == KN_I32) n.value = floor(n.value);
    snprintf(n.name, sizeof n.name, "c%d", f->n_consts++);
    snprintf(n.where, sizeof n.where, "fuzz.lua:%d", f->g->n_nodes + 1);
    int idx;
    if (kn_graph_add_node(f->g, &n, &idx) != KN_OK) return -1;
    return idx * KN_MAX_OUTPUTS;
}

static inline void kn_fuzz_shuffle(kn_fuzz *f, int *p, int n)
{
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = kn_fuzz_int(f, 0, i), t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

/* A view of a random value: reshape, permute, slice or expand. */
static inline int kn_fuzz_view(kn_fuzz *f)
{
    int x = kn_fuzz_pick(f, 0);
    if (x < 0) return -1;
    const kn_meta *m = kn_fuzz_meta(f, x);
    kn_attrs a;
    int which = kn_fuzz_int(f, 0, 3);
    if (which == 0) {
        a = kn_fuzz_attrs(KN_OP_RESHAPE);
        int64_t numel = 1;
        for (int d = 0; d < m->ndim; d++) numel *= m->shape[d];
        int v = kn_fuzz_int(f, 0, 3);
        if (v == 0 || m->ndim == 0) { /* flatten */
            a.nshape = 1;
            a.shape[0] = numel;
        } else if (v == 1 && m->ndim >= 2) { /* merge two adjacent dims */
            int d0 = kn_fuzz_int(f, 0, m->ndim - 2);
            for (int d = 0; d < m->ndim; d++) {
                if (d == d0 + 1) a.shape[a.nshape - 1] *= m->shape[d];
                else a.shape[a.nshape++] = m->shape[d];
            }
        } else if (v == 2 && m->ndim < 3) { /* insert a 1 */
            int at = kn_fuzz_int(f, 0, m->ndim);
            for (int d = 0; d <= m->ndim; d++) a.shape[a.nshape++] = d == at ? 1 : m->shape[d < at ? d : d - 1];
        } else { /* the same shape */
            a.nshape = m->ndim;
            memcpy(a.shape, m->shape, sizeof(int64_t) * (size_t)m->ndim);
        }
        return kn_fuzz_add(f, KN_OP_RESHAPE, &a, 1, &x);
    }
    if (m->ndim == 0) return -1;
    if (which == 1) {
        a = kn_fuzz_attrs(KN_OP_PERMUTE);
        a.ndims = m->ndim;
        kn_fuzz_shuffle(f, a.dims, m->ndim);
        return kn_fuzz_add(f, KN_OP_PERMUTE, &a, 1, &x);
    }
    if (which == 2) {
        a = kn_fuzz_attrs(KN_OP_SLICE);
        a.dim = kn_fuzz_int(f, 0, m->ndim - 1);
        int64_t size = m->shape[a.dim];
        if (kn_fuzz_int(f, 0, 2) == 0) { /* the whole dim */
            a.start = 0, a.stop = size, a.step = 1;
        } else {
            a.start = kn_fuzz_int(f, 0, (int)size - 1);
            a.stop = kn_fuzz_int(f, (int)a.start + 1, (int)size);
            a.step = kn_fuzz_int(f, 1, 2);
        }
        return kn_fuzz_add(f, KN_OP_SLICE, &a, 1, &x);
    }
    a = kn_fuzz_attrs(KN_OP_EXPAND);
    int lead = m->ndim < 3 ? kn_fuzz_int(f, 0, 1) : 0;
    if (lead) a.shape[a.nshape++] = kn_fuzz_int(f, 1, 4);
    for (int d = 0; d < m->ndim; d++)
        a.shape[a.nshape++] = m->shape[d] == 1 ? kn_fuzz_int(f, 1, 5) : m->shape[d];
    return kn_fuzz_add(f, KN_OP_EXPAND, &a, 1, &x);
}

/* A reduction-like op over a random value: sum/mean/amax, max, softmax,
 * log_softmax, layer_norm. */
static inline int kn_fuzz_reduce(kn_fuzz *f)
{
    int x = kn_fuzz_pick(f, 2);
    if (x < 0) return -1;
    const kn_meta *m = kn_fuzz_meta(f, x);
    int which = kn_fuzz_int(f, 0, 6);
    int nd = m->ndim > 0 ? m->ndim : 1;
    if (which <= 2) {
        static const kn_op ops[] = {KN_OP_SUM, KN_OP_MEAN, KN_OP_AMAX};
        kn_attrs a = kn_fuzz_attrs(ops[which]);
        a.keepdim = kn_fuzz_int(f, 0, 1);
        if (m->ndim > 0 && kn_fuzz_int(f, 0, 3) > 0) {
            int p[KN_MAX_DIMS];
            kn_fuzz_shuffle(f, p, m->ndim);
            a.ndims = kn_fuzz_int(f, 1, m->ndim);
            memcpy(a.dims, p, sizeof(int) * (size_t)a.ndims);
        }
        return kn_fuzz_add(f, ops[which], &a, 1, &x);
    }
    if (which == 3) {
        kn_attrs a = kn_fuzz_attrs(KN_OP_MAX);
        a.dim = kn_fuzz_int(f, 0, nd - 1);
        a.keepdim = kn_fuzz_int(f, 0, 1);
        return kn_fuzz_add(f, KN_OP_MAX, &a, 1, &x);
    }
    if (which <= 5) {
        kn_op op = which == 4 ? KN_OP_SOFTMAX : KN_OP_LOG_SOFTMAX;
        kn_attrs a = kn_fuzz_attrs(op);
        a.dim = kn_fuzz_int(f, 0, nd - 1);
        return kn_fuzz_add(f, op, &a, 1, &x);
    }
    if (m->ndim == 0) return -1;
    kn_attrs a = kn_fuzz_attrs(KN_OP_LAYER_NORM);
    a.nshape = 1;
    a.shape[0] = m->shape[m->ndim - 1];
    return kn_fuzz_add(f, KN_OP_LAYER_NORM, &a, 1, &x);
}

/* An elementwise op: unary, binary (with a tensor or a constant),
 * constant-only, comparison, where, masked_fill. */
static inline int kn_fuzz_elementwise(kn_fuzz *f)
{
    static const kn_op unary[] = {KN_OP_NEG, KN_OP_NEG, KN_OP_RELU, KN_OP_GELU, KN_OP_SILU,
                                  KN_OP_TANH, KN_OP_SIGMOID, KN_OP_EXP, KN_OP_LOG, KN_OP_SQRT,
                                  KN_OP_RSQRT, KN_OP_ABS};
    static const kn_op binary[] = {KN_OP_ADD, KN_OP_SUB, KN_OP_MUL, KN_OP_DIV,
                                   KN_OP_POW, KN_OP_MAXIMUM, KN_OP_MINIMUM};
    static const kn_op compare[] = {KN_OP_GT, KN_OP_LT, KN_OP_GE, KN_OP_LE, KN_OP_EQ, KN_OP_NE};
    int which = kn_fuzz_int(f, 0, 9), r[3];
    if (which <= 2) {
        kn_op op = unary[kn_fuzz_int(f, 0, (int)(sizeof unary / sizeof unary[0]) - 1)];
        r[0] = kn_fuzz_pick(f, op == KN_OP_NEG || op == KN_OP_ABS ? 0 : 2);
        kn_attrs a = kn_fuzz_attrs(op);
        return kn_fuzz_add(f, op, &a, 1, r);
    }
    if (which <= 7) {
        kn_op op = binary[kn_fuzz_int(f, 0, (int)(sizeof binary / sizeof binary[0]) - 1)];
        if (which <= 4) { /* tensor with tensor */
            r[0] = kn_fuzz_pick(f, 0);
            r[1] = kn_fuzz_pick(f, 0);
        } else if (which <= 6) { /* tensor with a constant, either side */
            int t = kn_fuzz_pick(f, 0), c = kn_fuzz_const(f), s = kn_fuzz_int(f, 0, 1);
            r[s] = t;
            r[1 - s] = c;
        } else { /* constant with constant: constant folding */
            r[0] = kn_fuzz_const(f);
            r[1] = kn_fuzz_const(f);
        }
        kn_attrs a = kn_fuzz_attrs(op);
        return kn_fuzz_add(f, op, &a, 2, r);
    }
    if (which == 8) {
        kn_op op = compare[kn_fuzz_int(f, 0, 5)];
        r[0] = kn_fuzz_pick(f, 0);
        r[1] = kn_fuzz_int(f, 0, 2) == 0 ? kn_fuzz_const(f) : kn_fuzz_pick(f, 0);
        kn_attrs a = kn_fuzz_attrs(op);
        return kn_fuzz_add(f, op, &a, 2, r);
    }
    if (kn_fuzz_int(f, 0, 1) == 0) {
        r[0] = kn_fuzz_pick(f, 1);
        r[1] = kn_fuzz_pick(f, 0);
        r[2] = kn_fuzz_int(f, 0, 2) == 0 ? kn_fuzz_const(f) : kn_fuzz_pick(f, 0);
        kn_attrs a = kn_fuzz_attrs(KN_OP_WHERE);
        return kn_fuzz_add(f, KN_OP_WHERE, &a, 3, r);
    }
    r[0] = kn_fuzz_pick(f, 2);
    r[1] = kn_fuzz_pick(f, 1);
    kn_attrs a = kn_fuzz_attrs(KN_OP_MASKED_FILL);
    a.value = kn_fuzz_int(f, -3, 3);
    return kn_fuzz_add(f, KN_OP_MASKED_FILL, &a, 2, r);
}

/* matmul, contiguous, casts, tril, or a repeat of an earlier op node. */
static inline int kn_fuzz_other(kn_fuzz *f)
{
    int which = kn_fuzz_int(f, 0, 5), r[2];
    if (which == 0) {
        for (int tries = 0; tries < 8; tries++) {
            kn_attrs a = kn_fuzz_attrs(KN_OP_MATMUL);
            r[0] = kn_fuzz_pick(f, 2);
            r[1] = kn_fuzz_pick(f, 2);
            int idx = kn_fuzz_add(f, KN_OP_MATMUL, &a, 2, r);
            if (idx >= 0) return idx;
        }
        return -1;
    }
    if (which == 1) {
        kn_attrs a = kn_fuzz_attrs(KN_OP_CONTIGUOUS);
        r[0] = kn_fuzz_pick(f, 0);
        return kn_fuzz_add(f, KN_OP_CONTIGUOUS, &a, 1, r);
    }
    if (which == 2) {
        kn_attrs a = kn_fuzz_attrs(KN_OP_CAST);
        r[0] = kn_fuzz_pick(f, 0);
        if (r[0] < 0) return -1;
        kn_dtype from = kn_fuzz_meta(f, r[0])->dtype;
        int v = kn_fuzz_int(f, 0, 3);
        a.dtype = v == 0 ? from : from == KN_F64 ? KN_F32 : KN_F64;
        int c = kn_fuzz_add(f, KN_OP_CAST, &a, 1, r);
        if (c < 0 || v != 1) return c;
        r[0] = c * KN_MAX_OUTPUTS; /* and back */
        a.dtype = from;
        return kn_fuzz_add(f, KN_OP_CAST, &a, 1, r);
    }
    if (which == 3) {
        kn_attrs a = kn_fuzz_attrs(KN_OP_TRIL);
        a.diagonal = kn_fuzz_int(f, -2, 2);
        r[0] = kn_fuzz_pick(f, 0);
        return kn_fuzz_add(f, KN_OP_TRIL, &a, 1, r);
    }
    /* repeat an earlier op node exactly: common subexpressions */
    int ops[256], n = 0;
    for (int i = 0; i < f->g->n_nodes && n < 256; i++)
        if (f->g->nodes[i].op < KN_OP_COUNT) ops[n++] = i;
    if (n == 0) return -1;
    kn_node copy = f->g->nodes[ops[kn_fuzz_int(f, 0, n - 1)]];
    int idx;
    return kn_graph_add_node(f->g, &copy, &idx) == KN_OK ? idx : -1;
}

/* The inputs: shapes are suffixes of one base shape with some dims set to 1. */
static inline kn_status kn_fuzz_inputs(kn_fuzz *f)
{
    int base_nd = kn_fuzz_int(f, 1, 3), n_in = kn_fuzz_int(f, 1, 3);
    int64_t base[3];
    for (int d = 0; d < base_nd; d++) base[d] = kn_fuzz_int(f, 1, 7);
    for (int i = 0; i < n_in; i++) {
        int nd = kn_fuzz_int(f, 0, 3) == 0 ? kn_fuzz_int(f, 1, base_nd) : base_nd;
        int64_t shape[3];
        for (int d = 0; d < nd; d++) {
            shape[d] = base[base_nd - nd + d];
            if (kn_fuzz_int(f, 0, 4) == 0) shape[d] = 1;
        }
        kn_tensor *t;
        KN_TRY(kn_tensor_new(KN_F32, nd, shape, KN_CPU, &t));
        float *p = t->storage->data;
        for (int64_t k = 0; k < kn_tensor_numel(t); k++) p[k] = (float)(kn_fuzz_unit(f) * 4 - 2);
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        int node;
        kn_status st = kn_graph_add_input(f->g, KN_IN_ARG, name, t, "fuzz.lua:0", &node);
        kn_tensor_release(t);
        KN_TRY(st);
    }
    return KN_OK;
}

/* Build a random graph for `seed` into g (initialized here; the caller frees
 * it with kn_graph_free). outputs gets 1..KN_FUZZ_MAX_OUTPUTS node indices,
 * the last op node first. */
static inline kn_status kn_fuzz_graph(uint64_t seed, kn_graph *g, int *outputs, int *n_outputs)
{
    kn_fuzz f = {seed * 0x2545F4914F6CDD1Dull + 1, g, 0};
    kn_graph_init(g);
    kn_status st = kn_fuzz_inputs(&f);
    if (st != KN_OK) {
        kn_graph_free(g);
        return st;
    }
    int target = kn_fuzz_int(&f, 5, 40);
    for (int tries = 0; g->n_nodes < target && tries < 400; tries++) {
        int kind = kn_fuzz_int(&f, 0, 9);
        if (kind <= 4) kn_fuzz_elementwise(&f);
        else if (kind <= 6) kn_fuzz_view(&f);
        else if (kind <= 7) kn_fuzz_reduce(&f);
        else kn_fuzz_other(&f);
    }
    /* outputs: the last op node, then other op nodes nothing reads (so most
     * of the graph is live), now and then any node at all */
    int last = g->n_nodes - 1;
    while (last > 0 && g->nodes[last].op >= KN_OP_COUNT) last--;
    *n_outputs = 1;
    outputs[0] = last;
    int want = kn_fuzz_int(&f, 1, KN_FUZZ_MAX_OUTPUTS);
    for (int i = g->n_nodes - 1; i >= 0 && *n_outputs < want; i--) {
        bool used = i == last || g->nodes[i].op >= KN_OP_COUNT;
        for (int j = i + 1; j < g->n_nodes && !used; j++)
            for (int k = 0; k < g->nodes[j].n_in; k++) used = used || g->nodes[j].in_node[k] == i;
        if (!used) outputs[(*n_outputs)++] = i;
    }
    if (*n_outputs < KN_FUZZ_MAX_OUTPUTS && kn_fuzz_int(&f, 0, 3) == 0)
        outputs[(*n_outputs)++] = kn_fuzz_int(&f, 0, g->n_nodes - 1);
    return KN_OK;
}

/* A structural copy of src with the same input tensors bound (retained). */
static inline kn_status kn_fuzz_copy_bound(const kn_graph *src, kn_graph *dst)
{
    KN_TRY(kn_graph_copy(src, dst));
    for (int i = 0; i < src->n_inputs; i++) {
        dst->inputs[i].tensor = src->inputs[i].tensor;
        kn_tensor_retain(dst->inputs[i].tensor);
    }
    return KN_OK;
}

/* Compare two values (see kn_tensor_close in core/tensor/kn_view.h). */
static inline bool kn_fuzz_close(const kn_tensor *got, const kn_tensor *want, double rtol,
                                 char *why, size_t size)
{
    return kn_tensor_close(got, want, rtol, NULL, why, size);
}

#endif
