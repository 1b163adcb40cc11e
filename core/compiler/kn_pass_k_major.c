/* kn_pass_k_major: fixed matmul weights laid out k-contiguous where the
 * device's matmul runs faster so.
 *
 * PyTorch's ONNX exporter writes a Linear layer as MatMul(x, W) with W an
 * initializer of shape [K, N]: its rows are the sums' index, so b is
 * n-contiguous. On Hopper, kiln's split-f32 GEMM (the "ieee" default for
 * large f32 products) ran 1.2-1.4x as fast with both operands
 * k-contiguous as with that layout (bench/split_gemm.c, H200, session 15:
 * BERT's FFN GEMM 95 us k-contiguous, 105-117 us [K, N], cuBLASLt 119-130).
 * So, for each matmul whose b is such a fixed [K, N] weight (a parameter,
 * a captured tensor, or a pass's fold) and for which the backend says so
 * (kn_backend.matmul_b_k_major, asked with the product's m, n, k and the
 * plan's settings),
 *
 *   y = x @ W                     W [K, N], as captured
 * becomes
 *   y = x @ permute(Wt, {1, 0})   Wt = W transposed, [N, K], made now
 *
 * The permute is a view: the matmul reads Wt through strides, which the
 * backend maps to a transposed operand, and later passes (fusion,
 * epilogues) see the same matmul. Wt is made now on W's device and
 * becomes an input the graph owns, as batch norm's and the projections'
 * folds do: the plan builds again when W is written later
 * (kn_plan_stale), and a training step, which writes its weights at every
 * call, is left alone (kn_pass_fixed_value). Wt costs W's bytes again
 * while the plan lives (the note says how many). merge_projections, which
 * runs first, lays a merged weight out this way itself
 * (kn_pass_wants_k_major): its [K, 3N] fold would otherwise stay beside
 * the copy, unread. What changed goes to the pass notes
 * (KILN_LOGS=fusion). The flag KN_PASSES_K_MAJOR_WEIGHTS turns the pass
 * on; kn_plan_build sets it where the backend can answer.
 */
#include "kn_pass_k_major.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_pass_flags.h"
#include "kn_view.h"

bool kn_pass_wants_k_major(const kn_pass_ctx *x, const kn_meta *a, kn_dtype dt, int64_t k, int64_t n,
                           kn_device dev)
{
    if (!(x->flags & KN_PASSES_K_MAJOR_WEIGHTS) || !kn_dtype_is_float(dt) || k <= 0 || a->ndim < 1) return false;
    int64_t m = kn_numel_of(a->ndim, a->shape) / k; /* a's leading dims are rows of one GEMM (b shared) */
    kn_device_ctx *dc = kn_backend_get(dev);
    if (!dc) return false;
    /* a backend without the query is the CPU under KILN_CPU_K_MAJOR_WEIGHTS
     * (kn_plan_build sets the flag only then): every weight, so tests
     * without a GPU cover the rewrite */
    if (!dc->be->matmul_b_k_major) return true;
    return dc->be->matmul_b_k_major(dc, x->settings, dt, m, n, k);
}

kn_status kn_pass_transpose_now(const kn_pass_ctx *x, kn_tensor *w, kn_tensor **out)
{
    *out = NULL;
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_PERMUTE);
    c.n_in = 1;
    c.in[0] = w;
    c.a.ndims = 2, c.a.dims[0] = 1, c.a.dims[1] = 0;
    c.settings = x->settings;
    kn_tensor *view = NULL;
    KN_TRY(kn_view_run(&c, &view));
    kn_status st = kn_tensor_contiguous_copy(view, x->settings, out);
    kn_tensor_release(view);
    return st;
}

/* One weight laid out: its input node and the permute view of its
 * k-contiguous copy (a weight two matmuls read is laid out once). */
typedef struct laid {
    int w_node, view_ref;
} laid;

/* Whether anything reads node i's value: a matmul an earlier pass
 * replaced (merge_projections' members) stays until dce, and laying its
 * weight out would only keep a copy no one reads. */
static bool is_read(const kn_pass_ctx *x, int i)
{
    if (kn_pass_is_output(x, i)) return true;
    const kn_graph *g = x->g;
    for (int j = i + 1; j < g->n_nodes; j++) {
        if (x->dead[j]) continue;
        const kn_node *n = &g->nodes[j];
        for (int k = 0; k < n->n_in; k++)
            if (KN_REF_NODE(kn_pass_resolve(x, KN_REF(n->in_node[k], n->in_out[k]))) == i) return true;
    }
    return false;
}

/* The b weight of matmul node i when the rewrite applies: its fixed
 * [K, N] tensor, else NULL. */
static kn_tensor *weight_to_lay_out(kn_pass_ctx *x, int i)
{
    kn_graph *g = x->g;
    if (x->dead[i] || g->nodes[i].op != KN_OP_MATMUL || g->nodes[i].n_in != 2 || !is_read(x, i)) return NULL;
    kn_pass_resolve_inputs(x, i);
    const kn_node *mm = &g->nodes[i];
    const kn_meta *am = &g->nodes[mm->in_node[0]].out[mm->in_out[0]];
    kn_tensor *w = kn_pass_fixed_value(g, mm->in_node[1], mm->in_out[1]);
    if (!w || w->ndim != 2 || w->dtype != mm->out[0].dtype || am->dtype != w->dtype || am->ndim < 2) return NULL;
    /* [K, N] as stored: row-major with unit column stride (a transposed
     * view, or any other layout, is the backend's to read as it is) */
    if (w->strides[1] != 1 || w->strides[0] != w->shape[1] || w->shape[0] < 2 || w->shape[1] < 2) return NULL;
    if (am->shape[am->ndim - 1] != w->shape[0]) return NULL;
    return w;
}

static kn_status lay_out(kn_pass_ctx *x, int i, kn_tensor *w, laid *done, int *n_done)
{
    kn_graph *g = x->g;
    int w_node = g->nodes[i].in_node[1];
    char where[KN_WHERE_MAX];
    memcpy(where, g->nodes[i].where, sizeof where); /* appends move the node array */
    int view_ref = -1;
    for (int d = 0; d < *n_done; d++)
        if (done[d].w_node == w_node) view_ref = done[d].view_ref;
    if (view_ref < 0) {
        kn_tensor *wt = NULL;
        KN_TRY(kn_pass_transpose_now(x, w, &wt));
        int in_node;
        kn_status st = kn_pass_add_folded_value(x, "k-major matmul weight", wt, where, i, &in_node);
        kn_tensor_release(wt);
        KN_TRY(st);
        kn_attrs t;
        memset(&t, 0, sizeof t);
        t.ndims = 2, t.dims[0] = 1, t.dims[1] = 0;
        int in_ref = KN_REF(in_node, 0), perm;
        KN_TRY(kn_pass_append_node(x, KN_OP_PERMUTE, &in_ref, 1, &t, i, where, &perm));
        view_ref = KN_REF(perm, 0);
        done[(*n_done)++] = (laid){w_node, view_ref};
    }
    const kn_node *mm = &x->g->nodes[i];
    kn_attrs a = mm->a;
    int refs[2] = {KN_REF(mm->in_node[0], mm->in_out[0]), view_ref}, nmm;
    KN_TRY(kn_pass_append_node(x, KN_OP_MATMUL, refs, 2, &a, i, where, &nmm));
    kn_pass_replace(x, i, KN_REF(nmm, 0)); /* same meta, an output 0: cannot refuse */
    return KN_OK;
}

kn_status kn_pass_k_major(kn_pass_ctx *x)
{
    if (!(x->flags & KN_PASSES_K_MAJOR_WEIGHTS)) return KN_OK;
    int n0 = x->g->n_nodes, n_done = 0, n_kept = 0;
    laid *done = malloc(sizeof *done * (size_t)(n0 > 0 ? n0 : 1));
    if (!done) return kn_error(KN_ERR_OOM, "out of host memory for a pass");
    kn_status st = KN_OK;
    int64_t bytes = 0;
    for (int i = 0; i < n0 && st == KN_OK; i++) {
        kn_tensor *w = weight_to_lay_out(x, i);
        if (!w) continue;
        const kn_node *mm = &x->g->nodes[i];
        const kn_meta *am = &x->g->nodes[mm->in_node[0]].out[mm->in_out[0]];
        if (!kn_pass_wants_k_major(x, am, w->dtype, w->shape[0], w->shape[1], kn_tensor_device(w))) {
            n_kept++;
            continue;
        }
        int before = n_done;
        st = lay_out(x, i, w, done, &n_done);
        if (n_done > before) bytes += kn_tensor_numel(w) * (int64_t)kn_dtype_size(w->dtype);
    }
    free(done);
    if (st == KN_OK && n_done)
        kn_pass_note(x, "k_major_weights: %d [K, N] matmul weight%s laid out k-contiguous (%.1f MiB more device "
                        "memory), the device's matmul runs faster so; %d left as given",
                     n_done, n_done == 1 ? "" : "s", (double)bytes / 1048576.0, n_kept);
    return st;
}
