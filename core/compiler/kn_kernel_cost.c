/* kn_kernel_cost: bytes and flops of a fused program's kernels (the rules
 * are in kn_cost.h). */
#include "kn_kernel_cost.h"

/* Flops of a kernel's expressions over `elems` elements: casts are free. */
static double expr_flops(const kn_kernel *k, double elems)
{
    int ops = 0;
    for (int e = 0; e < k->n_exprs; e++)
        ops += k->exprs[e].kind == KN_KX_OP && k->exprs[e].op != KN_OP_CAST;
    return elems * (double)(ops + k->n_stages);
}

kn_cost kn_kernel_cost(const kn_graph *g, const kn_kernel *k, int node)
{
    kn_cost c = {0, 0, 0};
    double space = (double)kn_numel_of(k->ndim, k->shape);
    if (k->kind == KN_KERNEL_LIBRARY || k->kind == KN_KERNEL_FALLBACK) {
        if (node < 0 || node >= g->n_nodes) return c;
        const kn_node *n = &g->nodes[node];
        if (n->op >= KN_OP_COUNT) return c;
        kn_meta in[KN_MAX_INPUTS];
        int n_in = 0;
        for (int i = 0; i < n->n_in && i < KN_MAX_INPUTS; i++) {
            int src = n->in_node[i];
            if (src < 0 || src >= g->n_nodes) continue;
            in[n_in++] = g->nodes[src].out[n->in_out[i]];
        }
        c = kn_cost_op((kn_op)n->op, &n->a, n_in, in, n->n_out, n->out);
        if (k->n_stores) c.flops += expr_flops(k, space); /* a fused epilogue */
        return c;
    }
    /* each distinct value once, as many elements as the loop nest reaches */
    for (int a = 0; a < k->n_args; a++) {
        const kn_karg *ar = &k->args[a];
        bool seen = false;
        for (int b = 0; b < a && !seen; b++) seen = k->args[b].node == ar->node && k->args[b].out == ar->out;
        if (seen) continue;
        /* a gathered argument reaches a row per distinct index position */
        const kn_karg *by = ar->gather_by > 0 && ar->gather_by <= k->n_args ? &k->args[ar->gather_by - 1] : NULL;
        double reach = 1;
        for (int d = 0; d < k->ndim; d++)
            if (ar->strides[d] != 0 || (by && by->strides[d] != 0) || k->shape[d] == 0) reach *= (double)k->shape[d];
        if (ar->node >= 0 && ar->node < g->n_nodes) {
            const kn_meta *m = &g->nodes[ar->node].out[ar->out];
            double held = (double)kn_numel_of(m->ndim, m->shape);
            if (reach > held) reach = held;
        }
        c.bytes += reach * (double)kn_dtype_size(ar->dtype);
        if (ar->is_output) c.write_bytes += reach * (double)kn_dtype_size(ar->dtype);
    }
    c.flops = expr_flops(k, space);
    return c;
}
