/* kn_cost: bytes and flops of ops (the rules are in kn_cost.h). */
#include "kn_cost.h"

#include <string.h>

static double meta_bytes(const kn_meta *m)
{
    return (double)kn_numel_of(m->ndim, m->shape) * (double)kn_dtype_size(m->dtype);
}

kn_cost kn_cost_op(kn_op op, const kn_attrs *a, int n_in, const kn_meta *in, int n_out, const kn_meta *out)
{
    kn_cost c = {0, 0, 0};
    for (int i = 0; i < n_in; i++) c.bytes += meta_bytes(&in[i]);
    for (int i = 0; i < n_out; i++) c.write_bytes += meta_bytes(&out[i]);
    c.bytes += c.write_bytes;
    double on = n_out ? (double)kn_numel_of(out[0].ndim, out[0].shape) : 0;
    double inn = n_in ? (double)kn_numel_of(in[0].ndim, in[0].shape) : 0;
    switch (kn_op_kind_of(op)) {
    case KN_K_UNARY:
        c.flops = op == KN_OP_CAST ? 0 : on;
        break;
    case KN_K_BINARY:
    case KN_K_COMPARE:
    case KN_K_TERNARY:
    case KN_K_MASKED: c.flops = on; break;
    case KN_K_REDUCE:
    case KN_K_ARGREDUCE: c.flops = inn; break;
    case KN_K_SOFTMAX: c.flops = 4 * inn; break;
    case KN_K_NORM: c.flops = 6 * inn; break;
    case KN_K_MATMUL:
        /* the contracted dim is the first operand's last (a vector's only) one */
        if (n_in >= 1 && in[0].ndim >= 1) c.flops = 2 * on * (double)in[0].shape[in[0].ndim - 1];
        break;
    case KN_K_CONV:
        /* the gradients: as many products as the forward, whose output is
         * grad_out (in[0] of the input's, in[1] of the weight's) and whose
         * weight is in[1] (the input's) or the output (the weight's) */
        if (op == KN_OP_CONV2D_INPUT_GRAD && n_in >= 2 && in[1].ndim == 4) {
            c.flops = 2 * (double)kn_numel_of(in[0].ndim, in[0].shape) * (double)in[1].shape[1] *
                      (double)in[1].shape[2] * (double)in[1].shape[3];
            break;
        }
        if (op == KN_OP_CONV2D_WEIGHT_GRAD && n_in >= 2 && n_out >= 1 && out[0].ndim == 4) {
            c.flops = 2 * (double)kn_numel_of(in[1].ndim, in[1].shape) * (double)out[0].shape[1] *
                      (double)out[0].shape[2] * (double)out[0].shape[3];
            break;
        }
        /* weight {K, C/groups, R, S}: each output element sums (C/groups)*R*S products */
        if (n_in >= 2 && in[1].ndim == 4)
            c.flops = 2 * on * (double)in[1].shape[1] * (double)in[1].shape[2] * (double)in[1].shape[3];
        if (n_in >= 3) c.flops += on;
        break;
    case KN_K_POOL:
        c.flops = op == KN_OP_ADAPTIVE_AVG_POOL2D ? inn : on * (double)a->kernel[0] * (double)a->kernel[1];
        break;
    case KN_K_ATTENTION:
        /* q.k^T and probs.v: 2*Tq*Tk*d + 2*Tq*Tk*dv per batch-head (4*Tq*Tk*d when dv == d);
         * causal skips the keys after each query: Tq*Tk - Tq*(Tq-1)/2 pairs remain (Tq <= Tk) */
        if (n_in >= 3 && in[0].ndim >= 2 && in[2].ndim >= 2) {
            int nd = in[0].ndim;
            double tq = (double)in[0].shape[nd - 2], d = (double)in[0].shape[nd - 1];
            double tk = (double)in[1].shape[nd - 2], dv = (double)in[2].shape[nd - 1];
            double batch = tq > 0 ? inn / (tq * d > 0 ? tq * d : 1) : 0;
            double pairs = tq * tk;
            if (a && a->causal) {
                double kept_rows = tq < tk ? tq : tk; /* query i keeps min(i+1, Tk) keys */
                pairs = kept_rows * (kept_rows + 1) / 2 + (tq - kept_rows) * tk;
            }
            c.flops = 2 * batch * pairs * (d + dv);
        }
        break;
    case KN_K_INDEX:
        /* gather_scatter: a multiply (with a weight) and an add per gathered
         * element; h is read at most once per edge (rows read again hit cache) */
        if (op == KN_OP_GATHER_SCATTER && n_in >= 3 && in[0].ndim >= 1 && in[1].ndim == 1) {
            double edges = (double)in[1].shape[0];
            double row = in[0].shape[0] > 0 ? inn / (double)in[0].shape[0] : 0;
            bool has_weight = n_in - 3 - (a && a->nshape == 0 ? 1 : 0) == 1;
            c.flops = edges * row * (has_weight ? 2 : 1);
            double gathered = edges * row * (double)kn_dtype_size(in[0].dtype);
            if (gathered < meta_bytes(&in[0])) c.bytes += gathered - meta_bytes(&in[0]);
            /* its epilogue: as the ops would count on the output (an activation
             * one flop an element, softmax four) */
            for (int i = 0; a && i < a->n_epilogue && i < KN_GATHER_SCATTER_EPILOGUE_MAX; i++)
                c.flops += kn_op_kind_of((kn_op)a->epilogue[i]) == KN_K_SOFTMAX ? 4 * on : on;
        }
        /* index_select and gather read the source elements they copy, not
         * the whole table (an embedding's 50,257 rows for 1,024 tokens) */
        if ((op == KN_OP_INDEX_SELECT || op == KN_OP_GATHER) && n_in >= 2 && n_out >= 1) {
            double copied = (double)kn_numel_of(out[0].ndim, out[0].shape) * (double)kn_dtype_size(in[0].dtype);
            if (copied < meta_bytes(&in[0])) c.bytes += copied - meta_bytes(&in[0]);
        }
        break;
    case KN_K_COPY:
    case KN_K_CAT:
    case KN_K_TRI:
    case KN_K_VIEW:
    case KN_K_CREATE: break;
    }
    return c;
}

/* The elements a strided tensor reaches: a dim of stride 0 (broadcast)
 * repeats the same elements; never more than its storage holds. */
static double tensor_reach_bytes(const kn_tensor *t)
{
    double n = 1;
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] != 0 || t->shape[d] == 0) n *= (double)t->shape[d];
    double b = n * (double)kn_dtype_size(t->dtype);
    if (t->storage && b > (double)t->storage->nbytes) b = (double)t->storage->nbytes;
    return b;
}

kn_cost kn_cost_opcall(const kn_opcall *c)
{
    kn_meta in[KN_MAX_INPUTS], out[KN_MAX_OUTPUTS];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    int n_in = 0, n_out = 0;
    for (int i = 0; i < c->n_in && i < KN_MAX_INPUTS; i++) {
        if (!c->in[i]) continue;
        in[n_in].dtype = c->in[i]->dtype;
        in[n_in].ndim = c->in[i]->ndim;
        for (int d = 0; d < c->in[i]->ndim; d++) in[n_in].shape[d] = c->in[i]->shape[d];
        n_in++;
    }
    for (int i = 0; i < c->n_out && i < KN_MAX_OUTPUTS; i++) {
        if (!c->out[i]) continue;
        out[n_out].dtype = c->out[i]->dtype;
        out[n_out].ndim = c->out[i]->ndim;
        for (int d = 0; d < c->out[i]->ndim; d++) out[n_out].shape[d] = c->out[i]->shape[d];
        n_out++;
    }
    kn_cost r = kn_cost_op(c->op, &c->a, n_in, in, n_out, out);
    /* bytes: what the strided inputs really reach, not their logical size */
    r.bytes = 0;
    for (int i = 0; i < c->n_in && i < KN_MAX_INPUTS; i++)
        if (c->in[i]) r.bytes += tensor_reach_bytes(c->in[i]);
    if (c->op == KN_OP_GATHER_SCATTER && n_in >= 3 && c->in[0] && c->in[1] && c->in[0]->ndim >= 1 &&
        c->in[0]->shape[0] > 0) { /* h: at most one row read per edge, as kn_cost_op */
        double h_bytes = tensor_reach_bytes(c->in[0]);
        double gathered = (double)c->in[1]->shape[0] * (double)(kn_tensor_numel(c->in[0]) / c->in[0]->shape[0]) *
                          (double)kn_dtype_size(c->in[0]->dtype);
        if (gathered < h_bytes) r.bytes -= h_bytes - gathered;
    }
    if ((c->op == KN_OP_INDEX_SELECT || c->op == KN_OP_GATHER) && n_in >= 2 && n_out >= 1 && c->in[0]) {
        double src = tensor_reach_bytes(c->in[0]); /* as kn_cost_op: the copied elements only */
        double copied = (double)kn_numel_of(out[0].ndim, out[0].shape) * (double)kn_dtype_size(c->in[0]->dtype);
        if (copied < src) r.bytes -= src - copied;
    }
    for (int i = 0; i < n_out; i++) r.bytes += meta_bytes(&out[i]);
    return r;
}
