/* kn_plan_epilogue: the library epilogues of a plan. A library call (a
 * matmul through cuBLASLt, a conv through kiln's kernels, cuDNN or a GEMM)
 * can take the pointwise kernel after it into its own epilogue: a bias, a
 * ReLU, a residual, a depthwise conv's hardswish. The fold is decided here
 * from the graph; the backend's library_fused runs it, and the run checks
 * the tensors' layouts and falls back to the two kernels when they do not
 * fit. */
#include "kn_plan.h"
#include "kn_plan_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_pass_ctx.h"

/* Whether value (node, out) is read by any node but `reader`, or is a
 * graph output: then the matmul's own value must exist. */
static bool read_elsewhere(const kn_plan *p, int node, int reader)
{
    for (int o = 0; o < p->n_outputs; o++)
        if (p->outputs[o].node == node) return true;
    for (int j = 0; j < p->g.n_nodes; j++) {
        if (j == reader || p->code.fusion.disp[j] == KN_D_DEAD) continue;
        const kn_node *n = &p->g.nodes[j];
        for (int k = 0; k < n->n_in; k++)
            if (n->in_node[k] == node) return true;
    }
    return false;
}

/* The operand of binary node n that is not (node, 0); -1 when neither or both are. */
static int other_operand(const kn_node *n, int node, int *out)
{
    bool a = n->in_node[0] == node && n->in_out[0] == 0, b = n->in_node[1] == node && n->in_out[1] == 0;
    if (a == b) return -1;
    *out = a ? n->in_out[1] : n->in_out[0];
    return a ? n->in_node[1] : n->in_node[0];
}

/* Whether the plan's device says it runs conv node mn in a kernel whose
 * epilogue adds a bias, ReLU and residual at no cost (kn_backend's
 * conv_epilogue_free: kiln's split-precision f32 convolution on the GPU) */
static bool backend_epilogue_free(const kn_plan *p, const kn_node *mn)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    kn_tensor hdr[KN_MAX_INPUTS], out;
    kn_opcall c;
    if (!dc || !dc->be->conv_epilogue_free || !kn_graph_node_call(&p->g, mn, hdr, &c)) return false;
    kn_graph_value_header(&mn->out[0], &out);
    c.n_out = 1;
    c.out[0] = &out;
    return dc->be->conv_epilogue_free(dc, p->settings, &c);
}

/* A channels-last 1x1 conv (which the GPU runs as a GEMM over its input's
 * bytes), or a conv the backend runs with a free epilogue, followed by
 * exactly `+ residual` or `relu(+ residual)`: ResNet's block ends. The
 * backend adds the residual (and the ReLU) in the kernel's epilogue, so the
 * conv's output is not written and read again by an add_relu kernel
 * (ResNet-50 bf16 on the H100: 24 us each at 56x56x256). *e gets the fold. */
static bool conv_residual_epilogue(const kn_plan *p, int m, const kn_kernel *P, struct kn_plan_epi *e, int k)
{
    const kn_node *mn = &p->g.nodes[m];
    const kn_meta *y = &mn->out[0], *x = &p->g.nodes[mn->in_node[0]].out[mn->in_out[0]],
                  *w = &p->g.nodes[mn->in_node[1]].out[mn->in_out[1]];
    bool gemm = mn->a.in_layout == KN_LAYOUT_NHWC && mn->a.out_layout == KN_LAYOUT_NHWC && mn->a.groups == 1 &&
                !mn->a.padding[0] && !mn->a.padding[1] && w->ndim == 4 && w->shape[1] == 1 && w->shape[2] == 1 &&
                x->ndim == 4 && x->shape[3] == w->shape[3];
    if (!kn_dtype_is_float(y->dtype) || (!gemm && !backend_epilogue_free(p, mn))) return false;
    if (P->n_nodes < 1 || P->n_nodes > 2) return false;
    const kn_node *add = &p->g.nodes[P->nodes[0]];
    if (add->op != KN_OP_ADD || read_elsewhere(p, m, P->nodes[0])) return false;
    struct kn_plan_epi f = {k + 1, -1, 0, -1, 0, 0, false};
    f.res_node = other_operand(add, m, &f.res_out);
    if (f.res_node < 0) return false;
    const kn_meta *rm = &p->g.nodes[f.res_node].out[f.res_out];
    if (rm->dtype != y->dtype || rm->ndim != y->ndim || add->out[0].dtype != y->dtype ||
        memcmp(rm->shape, y->shape, sizeof(int64_t) * (size_t)y->ndim) != 0 ||
        memcmp(add->out[0].shape, y->shape, sizeof(int64_t) * (size_t)y->ndim) != 0)
        return false;
    if (P->n_nodes == 2) {
        const kn_node *rl = &p->g.nodes[P->nodes[1]];
        if (rl->op != KN_OP_RELU || rl->in_node[0] != P->nodes[0] || rl->in_out[0] != 0 ||
            read_elsewhere(p, P->nodes[0], P->nodes[1]))
            return false;
        f.act = 1;
    }
    *e = f;
    return true;
}

/* Whether the constant operand of binary node n (the other being (node, 0))
 * is `want`; constants are f32 or wider, so 1/6 matches to f32's precision. */
static bool const_operand_is(const kn_plan *p, const kn_node *n, int node, double want)
{
    int out = -1, c = other_operand(n, node, &out);
    if (c < 0 || p->g.nodes[c].op != KN_NODE_CONST) return false;
    double v = kn_pass_const_value(&p->g.nodes[c]);
    return fabs(v - want) <= 1e-6 * (fabs(want) > 1 ? fabs(want) : 1);
}

/* A depthwise conv followed by exactly hardswish as the ONNX importer
 * writes it, x * min(max(x * (1/6) + 1/2, 0), 1): MobileNetV3's blocks.
 * The activation runs in the conv's epilogue (KN_EPI_HARDSWISH), so the
 * conv's output is not written and read again by a pointwise kernel
 * (mobilenet_v3_large bf16 on the H100: nine such kernels, 24 us). Only
 * depthwise convs, whose kernel is kiln's own: a library conv would run
 * the activation as a pass of its own, no better than the generated one. */
static bool conv_hardswish_epilogue(const kn_plan *p, int m, const kn_kernel *P, struct kn_plan_epi *e, int k)
{
    const kn_node *mn = &p->g.nodes[m];
    const kn_meta *y = &mn->out[0];
    if (mn->a.groups <= 1 || y->ndim != 4 || !kn_dtype_is_float(y->dtype) ||
        mn->a.groups != y->shape[mn->a.out_layout == KN_LAYOUT_NHWC ? 3 : 1])
        return false;
    int chain[5], n = 0;
    for (int i = 0; i < P->n_nodes; i++) {
        if (p->g.nodes[P->nodes[i]].op == KN_NODE_CONST) continue;
        if (n == 5) return false;
        chain[n++] = P->nodes[i];
    }
    if (n != 5) return false;
    static const int ops[5] = {KN_OP_MUL, KN_OP_ADD, KN_OP_MAXIMUM, KN_OP_MINIMUM, KN_OP_MUL};
    static const double consts[4] = {1.0 / 6.0, 0.5, 0.0, 1.0};
    for (int i = 0; i < 5; i++) {
        const kn_node *c = &p->g.nodes[chain[i]];
        if (c->op != ops[i] || c->n_in != 2 || c->out[0].dtype != y->dtype || c->out[0].ndim != y->ndim ||
            memcmp(c->out[0].shape, y->shape, sizeof(int64_t) * (size_t)y->ndim) != 0)
            return false;
        int prev = i == 0 ? m : chain[i - 1];
        if (i < 4 && !const_operand_is(p, c, prev, consts[i])) return false;
        if (i < 4 && i > 0 && read_elsewhere(p, prev, chain[i])) return false;
    }
    /* the last multiply takes the conv's value and the clamp's */
    const kn_node *last = &p->g.nodes[chain[4]];
    int out = -1, other = other_operand(last, m, &out);
    if (other != chain[3] || out != 0 || read_elsewhere(p, chain[3], chain[4])) return false;
    /* the conv's value feeds the first and the last multiply, nothing else */
    for (int o = 0; o < p->n_outputs; o++)
        if (p->outputs[o].node == m) return false;
    for (int j = 0; j < p->g.n_nodes; j++) {
        if (j == chain[0] || j == chain[4] || p->code.fusion.disp[j] == KN_D_DEAD) continue;
        const kn_node *r = &p->g.nodes[j];
        for (int i = 0; i < r->n_in; i++)
            if (r->in_node[i] == m) return false;
    }
    *e = (struct kn_plan_epi){k + 1, -1, 0, -1, 0, KN_EPI_HARDSWISH, false};
    return true;
}

/* Whether the GPU runs conv node mn outside cuDNN, where an epilogue's
 * ReLU costs nothing: a depthwise conv (kiln's kernels, NCHW or
 * channels-last) or a 1x1 conv of one output pixel (a GEMM: the fcs of
 * squeeze-excitation). A conv the backend then hands to cuDNN after all
 * runs the fold there, as in bf16. */
static bool conv_outside_cudnn(const kn_plan *p, const kn_node *mn)
{
    const kn_meta *y = &mn->out[0], *w = &p->g.nodes[mn->in_node[1]].out[mn->in_out[1]];
    if (y->ndim != 4 || w->ndim != 4) return false;
    bool nhwc = mn->a.out_layout == KN_LAYOUT_NHWC;
    int64_t channels = y->shape[nhwc ? 3 : 1], ph = y->shape[nhwc ? 1 : 2], pw = y->shape[nhwc ? 2 : 3];
    int64_t r = w->shape[nhwc ? 1 : 2], s = w->shape[nhwc ? 2 : 3];
    return (mn->a.groups > 1 && mn->a.groups == channels) || (mn->a.groups == 1 && ph == 1 && pw == 1 && r == 1 && s == 1);
}

/* Fold the pointwise kernel after a matmul into the library call where
 * the backend can (cuBLASLt's BIAS / RELU_BIAS / GELU_BIAS epilogues, and a
 * residual as its C operand): Linear's `x·wᵀ + b`, its ReLU or tanh GELU, and the transformer's
 * `x + proj(y)`. The kernel must be exactly that chain and the matmul's
 * own value read nowhere else; the run checks the tensors' layouts and
 * falls back to the two kernels when they do not fit. */
kn_status kn_plan_epilogues(kn_plan *p)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (!dc || !dc->be->library_fused) return KN_OK;
    if (kn_device_kind_of(p->device) == KN_DEVICE_CPU && !getenv("KILN_CPU_FOLD_EPILOGUES")) return KN_OK; /* see kn_cpu_backend.c */
    kn_fusion *f = &p->code.fusion;
    int nk = f->prog.n_kernels;
    /* zeroed: `off` of a kernel with nothing folded is read too (a pin's
     * record of the choice); uninitialized, it once read true on the GPU */
    p->epi.kernel = calloc((size_t)nk + 1, sizeof *p->epi.kernel);
    if (!p->epi.kernel) return kn_error(KN_ERR_OOM, "out of host memory for a plan");
    for (int k = 0; k <= nk; k++) p->epi.kernel[k].into = -1;
    for (int k = 0; k + 1 < nk; k++) {
        const kn_kernel *L = &f->prog.kernels[k], *P = &f->prog.kernels[k + 1];
        int m = f->kernel_at[k];
        const kn_node *mn = &p->g.nodes[m];
        if (L->kind == KN_KERNEL_LIBRARY && mn->op == KN_OP_CONV2D && P->kind == KN_KERNEL_POINTWISE &&
            (conv_residual_epilogue(p, m, P, &p->epi.kernel[k], k) ||
             conv_hardswish_epilogue(p, m, P, &p->epi.kernel[k], k))) {
            p->epi.n_folded++;
            k++;
            continue;
        }
        if (L->kind == KN_KERNEL_LIBRARY && mn->op == KN_OP_CONV2D && P->kind == KN_KERNEL_POINTWISE &&
            P->n_nodes == 1 && mn->n_in == 3 && kn_dtype_is_float(mn->out[0].dtype)) {
            /* conv (+ its bias, as batch norm folding leaves it) + ReLU: one
             * cuDNN graph; but not in strict f32, where cuDNN's fused engines
             * were slower than conv then a ReLU kernel (convnet on an H200:
             * 596 against 580 us; bf16 316 against 329; bench/fold_ab.lua),
             * unless the GPU runs the conv in a kernel of kiln's or a GEMM */
            if (mn->out[0].dtype == KN_F32 && !kn_settings_allow_tf32(kn_settings_or_defaults(p->settings)) &&
                !conv_outside_cudnn(p, mn) && !backend_epilogue_free(p, mn))
                continue;
            const kn_node *rl = &p->g.nodes[P->nodes[0]];
            if (rl->op == KN_OP_RELU && rl->in_node[0] == m && rl->in_out[0] == 0 &&
                rl->out[0].dtype == mn->out[0].dtype && !read_elsewhere(p, m, P->nodes[0])) {
                p->epi.kernel[k] = (struct kn_plan_epi){k + 1, -1, 0, -1, 0, 1, false};
                p->epi.n_folded++;
                k++;
            }
            continue;
        }
        if (L->kind != KN_KERNEL_LIBRARY || mn->op != KN_OP_MATMUL || P->kind != KN_KERNEL_POINTWISE) continue;
        if (P->n_nodes < 1 || P->n_nodes > 2 || !kn_dtype_is_float(mn->out[0].dtype)) continue;
        const kn_node *add = &p->g.nodes[P->nodes[0]];
        if (add->op != KN_OP_ADD || read_elsewhere(p, m, P->nodes[0])) continue;
        struct kn_plan_epi e = {k + 1, -1, 0, -1, 0, 0, false};
        e.bias_node = other_operand(add, m, &e.bias_out);
        if (e.bias_node < 0) continue;
        const kn_meta *bm = &p->g.nodes[e.bias_node].out[e.bias_out];
        int64_t n_last = mn->out[0].ndim ? mn->out[0].shape[mn->out[0].ndim - 1] : 1;
        if (bm->ndim != 1 || bm->shape[0] != n_last || bm->dtype != mn->out[0].dtype) continue;
        if (add->out[0].dtype != mn->out[0].dtype || add->out[0].ndim != mn->out[0].ndim ||
            memcmp(add->out[0].shape, mn->out[0].shape, sizeof(int64_t) * (size_t)mn->out[0].ndim) != 0)
            continue;
        if (P->n_nodes == 2) {
            const kn_node *second = &p->g.nodes[P->nodes[1]];
            if (read_elsewhere(p, P->nodes[0], P->nodes[1])) continue;
            if (second->op == KN_OP_RELU && second->in_node[0] == P->nodes[0]) {
                e.act = 1;
            } else if (second->op == KN_OP_GELU_TANH && second->in_node[0] == P->nodes[0] &&
                       (mn->out[0].dtype == KN_BF16 || mn->out[0].dtype == KN_F16)) {
                /* cuBLASLt's GELU epilogue is the tanh form (GPT-2's
                 * gelu_new); half outputs only: computed in f32 and
                 * rounded once to bf16 or f16 it is within their rounding,
                 * while an f32 output keeps the generated kernel's tanhf */
                e.act = 2;
            } else if (second->op == KN_OP_ADD) {
                e.res_node = other_operand(second, P->nodes[0], &e.res_out);
                if (e.res_node < 0) continue;
                const kn_meta *rm = &p->g.nodes[e.res_node].out[e.res_out];
                if (rm->dtype != mn->out[0].dtype || rm->ndim != mn->out[0].ndim ||
                    memcmp(rm->shape, mn->out[0].shape, sizeof(int64_t) * (size_t)rm->ndim) != 0 ||
                    second->out[0].dtype != mn->out[0].dtype)
                    continue;
            } else {
                continue;
            }
        }
        p->epi.kernel[k] = e;
        p->epi.n_folded++;
        k++; /* the folded kernel cannot start a pair itself */
    }
    return KN_OK;
}
