/* kn_symbolic: assigning symbols to dynamic dims, fitting and checking the
 * affine size expressions of a dynamic version. */
#include "kn_symbolic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool sized_attrs(int op)
{
    return op == KN_OP_RESHAPE || op == KN_OP_EXPAND || op == KN_OP_FULL || op == KN_OP_RANDN ||
           op == KN_OP_RAND || op == KN_OP_RANDINT || op == KN_OP_ARANGE;
}

int64_t *kn_node_slot(kn_node *n, int k)
{
    if (k < KN_MAX_OUTPUTS * KN_MAX_DIMS) {
        int o = k / KN_MAX_DIMS, d = k % KN_MAX_DIMS;
        return o < n->n_out && d < n->out[o].ndim ? &n->out[o].shape[d] : NULL;
    }
    k -= KN_MAX_OUTPUTS * KN_MAX_DIMS;
    if (k < KN_MAX_DIMS) return n->op < KN_OP_COUNT && sized_attrs(n->op) && k < n->a.nshape ? &n->a.shape[k] : NULL;
    k -= KN_MAX_DIMS;
    if (n->op != KN_OP_SLICE) return NULL;
    return k == 0 ? &n->a.start : &n->a.stop;
}

static int64_t slot_value(const kn_node *n, int k)
{
    int64_t *p = kn_node_slot((kn_node *)n, k);
    return p ? *p : 0;
}

bool kn_sym_same_node_modulo_sizes(const kn_node *a, const kn_node *b)
{
    if (a->op != b->op || a->n_in != b->n_in || a->n_out != b->n_out) return false;
    if (memcmp(a->in_node, b->in_node, sizeof(int) * (size_t)a->n_in) ||
        memcmp(a->in_out, b->in_out, sizeof(int) * (size_t)a->n_in))
        return false;
    for (int o = 0; o < a->n_out; o++)
        if (a->out[o].dtype != b->out[o].dtype || a->out[o].ndim != b->out[o].ndim) return false;
    if (a->op == KN_NODE_INPUT) return strcmp(a->name, b->name) == 0;
    if (a->op == KN_NODE_CONST) return strcmp(a->where, b->where) == 0;
    kn_attrs x = a->a, y = b->a;
    x.rng_offset = y.rng_offset = 0;
    if (x.rng_fresh) x.seed = y.seed = 0; /* the caller's stream: per call, not structure */
    if (sized_attrs(a->op)) {
        memset(x.shape, 0, sizeof x.shape);
        memset(y.shape, 0, sizeof y.shape);
    }
    if (a->op == KN_OP_SLICE) x.start = y.start = x.stop = y.stop = 0;
    return memcmp(&x, &y, sizeof x) == 0;
}

kn_status kn_sym_assign(const kn_graph *g, kn_sym_dynamic_fn is_dynamic, void *ctx, kn_symbols *s,
                        bool *any)
{
    memset(s, 0, sizeof *s);
    *any = false;
    s->input_sym = malloc(sizeof *s->input_sym * (size_t)(g->n_inputs ? g->n_inputs : 1));
    s->expr = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *s->expr);
    if (!s->input_sym || !s->expr) {
        kn_sym_free(s);
        return kn_error(KN_ERR_OOM, "out of host memory for symbolic shapes");
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_graph_input *in = &g->inputs[i];
        for (int d = 0; d < KN_MAX_DIMS; d++) {
            s->input_sym[i][d] = -1;
            if (d >= in->meta.ndim || in->meta.shape[d] < 2 || !is_dynamic(ctx, in, d)) continue;
            int sym = -1;
            for (int k = 0; k < s->nsyms && sym < 0; k++)
                if (s->value[k] == in->meta.shape[d]) sym = k; /* duck sizing */
            if (sym < 0 && s->nsyms < KN_MAX_SYMS) {
                sym = s->nsyms++;
                s->value[sym] = in->meta.shape[d];
            }
            s->input_sym[i][d] = (signed char)sym;
            *any = *any || sym >= 0;
        }
    }
    /* Until a second trace is seen, every size is what this trace had. */
    for (int n = 0; n < g->n_nodes; n++)
        for (int k = 0; k < KN_SLOTS; k++) s->expr[n][k] = (kn_dimexpr){-1, 0, 1, slot_value(&g->nodes[n], k)};
    return KN_OK;
}

void kn_sym_free(kn_symbols *s)
{
    free(s->input_sym);
    free(s->expr);
    memset(s, 0, sizeof *s);
}

kn_status kn_sym_copy(const kn_symbols *src, int n_inputs, int n_nodes, kn_symbols *dst)
{
    *dst = *src;
    dst->input_sym = malloc(sizeof *dst->input_sym * (size_t)(n_inputs ? n_inputs : 1));
    dst->expr = malloc(sizeof *dst->expr * (size_t)(n_nodes ? n_nodes : 1));
    if (!dst->input_sym || !dst->expr) {
        kn_sym_free(dst);
        return kn_error(KN_ERR_OOM, "out of host memory for symbolic shapes");
    }
    memcpy(dst->input_sym, src->input_sym, sizeof *dst->input_sym * (size_t)n_inputs);
    memcpy(dst->expr, src->expr, sizeof *dst->expr * (size_t)n_nodes);
    return KN_OK;
}

bool kn_sym_input_failure(const kn_symbols *s, int i, const kn_graph_input *want,
                          const kn_graph_input *got, int64_t *vals, bool *seen, char *buf,
                          size_t size)
{
    const char *what = want->kind == KN_IN_PARAM ? "parameter" : "tensor";
    for (int d = 0; d < want->meta.ndim; d++) {
        int sym = s && s->input_sym ? s->input_sym[i][d] : -1;
        int64_t w = want->meta.shape[d], a = got->meta.shape[d];
        if (sym < 0) {
            if (w != a) {
                snprintf(buf, size, "%s '%s' size mismatch at dim %d: expected %lld, actual %lld", what,
                         want->name, d + 1, (long long)w, (long long)a);
                return true;
            }
            continue;
        }
        if (a < 2) {
            snprintf(buf, size, "%s '%s' size at dim %d is %lld, but s%d is a dynamic size (>= 2)",
                     what, want->name, d + 1, (long long)a, sym);
            return true;
        }
        if (seen[sym] && vals[sym] != a) {
            snprintf(buf, size, "%s '%s' size mismatch at dim %d: expected s%d = %lld, actual %lld",
                     what, want->name, d + 1, sym, (long long)vals[sym], (long long)a);
            return true;
        }
        seen[sym] = true;
        vals[sym] = a;
    }
    return false;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a ? a : 1;
}

static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t eval(const kn_dimexpr *e, const int64_t *vals)
{
    if (e->sym < 0) return e->off;
    return floordiv(e->num * vals[(int)e->sym] + e->off, e->den);
}

kn_status kn_sym_fit(kn_symbols *s, const kn_graph *vg, const kn_graph *g, const int64_t *vals)
{
    for (int n = 0; n < vg->n_nodes && n < g->n_nodes; n++)
        for (int k = 0; k < KN_SLOTS; k++) {
            const int64_t *pa = kn_node_slot((kn_node *)&vg->nodes[n], k);
            const int64_t *pb = kn_node_slot((kn_node *)&g->nodes[n], k);
            if (!pa || !pb) continue;
            int64_t va = *pa, vb = *pb;
            kn_dimexpr e = {-1, 0, 1, va};
            if (va != vb) {
                for (int j = 0; j < s->nsyms; j++) {
                    int64_t a = s->value[j], b = vals[j];
                    if (a == b) continue;
                    int64_t num = vb - va, den = b - a, d = gcd64(num, den);
                    num /= d;
                    den /= d;
                    if (den < 0) {
                        num = -num;
                        den = -den;
                    }
                    /* off so that floor((num*a + off)/den) == va, exactly at a */
                    kn_dimexpr t = {(signed char)j, num, den, va * den - num * a};
                    if (eval(&t, s->value) == va && eval(&t, vals) == vb) {
                        e = t;
                        break;
                    }
                }
            }
            s->expr[n][k] = e;
        }
    s->fitted = true;
    return KN_OK;
}

int kn_sym_sizes_differ(const kn_symbols *s, const kn_graph *vg, const kn_graph *g,
                        const int64_t *vals)
{
    for (int n = 0; n < vg->n_nodes && n < g->n_nodes; n++)
        for (int k = 0; k < KN_SLOTS; k++) {
            const int64_t *p = kn_node_slot((kn_node *)&g->nodes[n], k);
            if (p && eval(&s->expr[n][k], vals) != *p) return n;
        }
    return -1;
}

void kn_dimexpr_text(const kn_dimexpr *e, char *buf, size_t size)
{
    if (e->sym < 0) {
        snprintf(buf, size, "%lld", (long long)e->off);
        return;
    }
    char lin[64];
    if (e->num == 1) snprintf(lin, sizeof lin, "s%d", e->sym);
    else snprintf(lin, sizeof lin, "s%d*%lld", e->sym, (long long)e->num);
    if (e->off && e->den == 1) {
        snprintf(buf, size, "%s %c %lld", lin, e->off > 0 ? '+' : '-', (long long)(e->off > 0 ? e->off : -e->off));
        return;
    }
    if (e->den == 1) {
        snprintf(buf, size, "%s", lin);
        return;
    }
    if (e->off)
        snprintf(buf, size, "(%s %c %lld)//%lld", lin, e->off > 0 ? '+' : '-',
                 (long long)(e->off > 0 ? e->off : -e->off), (long long)e->den);
    else
        snprintf(buf, size, "%s//%lld", lin, (long long)e->den);
}
