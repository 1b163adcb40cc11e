/* kn_pass_ctx: the rewrite context the passes share (see kn_pass_ctx.h). */
#include "kn_pass_ctx.h"

#include <stdlib.h>

kn_status kn_pass_sync(kn_pass_ctx *x)
{
    int n = x->g->n_nodes;
    if (n <= x->cap) return KN_OK;
    int ncap = x->cap ? x->cap : 16;
    while (ncap < n) ncap *= 2;
    int *repl = realloc(x->repl, sizeof(int) * (size_t)ncap * KN_MAX_OUTPUTS);
    if (repl) x->repl = repl;
    unsigned char *dead = realloc(x->dead, (size_t)ncap);
    if (dead) x->dead = dead;
    int *before = realloc(x->before, sizeof(int) * (size_t)ncap);
    if (before) x->before = before;
    if (!repl || !dead || !before) return kn_error(KN_ERR_OOM, "passes: out of host memory");
    for (int i = x->cap; i < ncap; i++) {
        for (int k = 0; k < KN_MAX_OUTPUTS; k++) x->repl[KN_REF(i, k)] = KN_REF(i, k);
        x->dead[i] = 0;
        x->before[i] = -1;
    }
    x->cap = ncap;
    return KN_OK;
}

int kn_pass_resolve(const kn_pass_ctx *x, int r)
{
    while (x->repl[r] != r) r = x->repl[r];
    return r;
}

void kn_pass_resolve_inputs(kn_pass_ctx *x, int i)
{
    kn_node *n = &x->g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
        int r = kn_pass_resolve(x, KN_REF(n->in_node[k], n->in_out[k]));
        n->in_node[k] = KN_REF_NODE(r);
        n->in_out[k] = KN_REF_OUT(r);
    }
}

bool kn_pass_is_output(const kn_pass_ctx *x, int i)
{
    for (int k = 0; k < x->n_outputs; k++)
        if (kn_pass_resolve(x, KN_REF(x->outputs[k], 0)) == KN_REF(i, 0)) return true;
    return false;
}

bool kn_pass_replace(kn_pass_ctx *x, int i, int r)
{
    if (KN_REF_OUT(r) != 0 && kn_pass_is_output(x, i)) return false;
    x->repl[KN_REF(i, 0)] = r;
    x->dead[i] = 1;
    return true;
}

double kn_pass_const_value(const kn_node *n)
{
    /* a number next to an f16 or bf16 tensor enters the op in f32, the
     * type half ops compute in (x * (1 + 2^-11) is not x * 1 in f16) */
    kn_dtype dt = n->out[0].dtype == KN_F16 || n->out[0].dtype == KN_BF16 ? KN_F32 : n->out[0].dtype;
    unsigned char buf[16];
    kn_store_f64(buf, dt, n->value);
    return kn_load_f64(buf, dt);
}

