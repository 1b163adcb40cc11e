/* kn_plan_run: running a plan. Kernels in order (generated ones through
 * the backend's launch, library ones as eager ops or in a matmul's library
 * epilogue), views made as the values they read exist, every intermediate
 * freed after its last use; and the numerics check, which runs the plan
 * against the reference executor. */
#include "kn_plan.h"
#include "kn_plan_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_kernel_cost.h"
#include "kn_profile.h"
#include "kn_view.h"

/* Bind input node i's tensor (the caller's, or a constant of the passes). */
static kn_status bind_input(run_ctx *r, int i)
{
    kn_plan *p = r->p;
    const kn_node *n = &p->g.nodes[i];
    if (r->val[i * KN_MAX_OUTPUTS]) return KN_OK; /* bound early, for a library epilogue */
    kn_tensor *t = n->input < p->n_orig_inputs ? r->inputs[n->input] : p->g.inputs[n->input].tensor;
    if (!t) return kn_error(KN_ERR_ARG, "plan: input '%s' is not bound", p->g.inputs[n->input].name);
    kn_tensor_retain(t);
    r->val[i * KN_MAX_OUTPUTS] = t; /* not counted: the caller's memory */
    return KN_OK;
}

static int64_t tensor_bytes(const kn_tensor *t)
{
    return t && t->storage ? t->storage->nbytes : 0;
}

static void set_val(run_ctx *r, int node, int out, kn_tensor *t)
{
    r->val[node * KN_MAX_OUTPUTS + out] = t;
    r->live += tensor_bytes(t);
    if (r->live > r->peak) r->peak = r->live;
}

static void drop_val(run_ctx *r, int node)
{
    for (int o = 0; o < KN_MAX_OUTPUTS; o++) {
        kn_tensor **v = &r->val[node * KN_MAX_OUTPUTS + o];
        if (!*v) continue;
        if ((*v)->refcount == 1 && (*v)->storage && (*v)->storage->refcount == 1 && !(*v)->storage->borrowed)
            r->live -= tensor_bytes(*v);
        kn_tensor_release(*v);
        *v = NULL;
    }
}

/* The library call at node, writing its value through the permuted
 * strides the fusion gave it (into one buffer of the value's size: the
 * bytes the reshape after it reads in place). When the backend declines
 * this call (KN_ERR_UNSUPPORTED: a stride pattern its library cannot
 * take), it computes contiguous and one copy lays the value out, as the
 * reshape would have copied. */
static kn_status run_permuted(run_ctx *r, int node, const kn_opcall *call)
{
    kn_plan *p = r->p;
    const kn_node *n = &p->g.nodes[node];
    const kn_layout *l = &p->code.fusion.layout[node];
    kn_device_ctx *dc = kn_backend_get(p->device);
    int64_t numel = kn_numel_of(n->out[0].ndim, n->out[0].shape);
    kn_tensor *buf, *out;
    KN_TRY(kn_tensor_new(n->out[0].dtype, 1, &numel, p->device, &buf));
    kn_status st = kn_tensor_view_of(buf, l->ndim, l->shape, l->strides, 0, &out);
    kn_tensor_release(buf);
    KN_TRY(st);
    kn_opcall c = *call;
    c.n_out = 1;
    c.out[0] = out;
    st = dc && dc->be->strided_out && dc->be->strided_out(dc, &c) ? dc->be->run(dc, &c) : KN_ERR_UNSUPPORTED;
    if (st == KN_ERR_UNSUPPORTED) {
        kn_tensor_release(out);
        out = NULL;
        /* contiguous, then the dims in the layout's order (largest stride
         * first) copied into a dense buffer: the same bytes */
        kn_opcall e = *call;
        if (kn_profile_on) kn_profile_next_is_kernel(true);
        st = kn_op_eager(&e, p->device);
        if (kn_profile_on) kn_profile_next_is_kernel(false);
        if (st != KN_OK) return st;
        int64_t order[KN_MAX_DIMS];
        for (int d = 0; d < l->ndim; d++) order[d] = d;
        for (int a = 1; a < l->ndim; a++) /* stable insertion sort by stride, descending */
            for (int b = a; b > 0 && l->strides[order[b]] > l->strides[order[b - 1]]; b--) {
                int64_t t = order[b];
                order[b] = order[b - 1];
                order[b - 1] = t;
            }
        kn_tensor *perm = NULL, *dense = NULL;
        st = kn_view_permute(e.out[0], l->ndim, order, &perm);
        if (st == KN_OK) st = kn_tensor_contiguous_copy(perm, p->settings, &dense);
        if (st == KN_OK) st = kn_tensor_view_of(dense, l->ndim, l->shape, l->strides, 0, &out);
        kn_tensor_release(perm);
        kn_tensor_release(dense);
        for (int k = 0; k < e.n_out; k++) kn_tensor_release(e.out[k]);
        if (st != KN_OK) return st;
    } else if (st != KN_OK) {
        kn_tensor_release(out);
        return st;
    }
    set_val(r, node, 0, out);
    return KN_OK;
}

static kn_status run_reference(run_ctx *r, int node, int kid)
{
    const kn_node *n = &r->p->g.nodes[node];
    kn_opcall c;
    kn_opcall_init(&c, (kn_op)n->op);
    c.a = n->a;
    c.settings = r->p->settings;
    c.variant = r->p->tune.variant && kid >= 0 ? r->p->tune.variant[kid] : 0;
    c.n_in = n->n_in;
    for (int k = 0; k < n->n_in; k++) {
        c.in[k] = r->val[n->in_node[k] * KN_MAX_OUTPUTS + n->in_out[k]];
        if (!c.in[k]) return kn_error(KN_ERR_ARG, "plan: node %d reads a value that was not computed", node);
    }
    if (n->n_out == 1 && kn_plan_permuted_value(r->p, node)) return run_permuted(r, node, &c);
    if (kn_profile_on) kn_profile_next_is_kernel(true); /* what it runs inside is the kernel's */
    kn_status st = kn_op_eager(&c, r->p->device);
    if (kn_profile_on) kn_profile_next_is_kernel(false);
    if (st != KN_OK) return st;
    for (int k = 0; k < c.n_out; k++) set_val(r, node, k, c.out[k]);
    return KN_OK;
}

kn_status kn_plan_kernel_bufs(run_ctx *r, int kid, char **bufs)
{
    kn_plan *p = r->p;
    const kn_kernel *k = &p->code.fusion.prog.kernels[kid];
    for (int a = 0; a < k->n_args; a++) {
        const kn_karg *ar = &k->args[a];
        kn_tensor **slot = &r->val[ar->node * KN_MAX_OUTPUTS + ar->out];
        /* an input first read by a value riding on this kernel (kn_fusion.rides)
         * may come after it in graph order: inputs can be bound early */
        if (!*slot && p->code.fusion.disp[ar->node] == KN_D_INPUT) KN_TRY(bind_input(r, ar->node));
        if (ar->is_output && !*slot) {
            kn_tensor *t;
            const kn_meta *m = &p->g.nodes[ar->node].out[ar->out];
            /* a numerics check keeps every value: the arena would reuse their bytes */
            int64_t off = r->keep ? -1 : p->mem.arena_off[ar->node * KN_MAX_OUTPUTS + ar->out];
            if (off >= 0) {
                /* the header over this slot is made once and kept by the
                 * plan: the slot's address and the value's meta never change */
                int v = ar->node * KN_MAX_OUTPUTS + ar->out;
                if (!p->scratch.arena_t) {
                    p->scratch.arena_t = calloc((size_t)p->g.n_nodes * KN_MAX_OUTPUTS + 1, sizeof *p->scratch.arena_t);
                    if (!p->scratch.arena_t) return kn_error(KN_ERR_OOM, "out of host memory running a plan");
                }
                if (!p->scratch.arena_t[v])
                    KN_TRY(kn_tensor_new_borrowed(m, (char *)p->mem.arena + off, p->device, &p->scratch.arena_t[v]));
                t = p->scratch.arena_t[v];
                kn_tensor_retain(t);
                r->val[v] = t; /* counted in the arena */
            } else {
                KN_TRY(kn_tensor_new_meta(m, p->device, &t));
                set_val(r, ar->node, ar->out, t);
            }
        }
        if (!*slot) return kn_error(KN_ERR_ARG, "plan: kernel %s reads node %d before it is computed", k->name, ar->node);
        bufs[a] = (char *)kn_tensor_data(*slot) + ar->offset * (int64_t)kn_dtype_size(ar->dtype);
    }
    return KN_OK;
}

static kn_status run_generated(run_ctx *r, int kid)
{
    kn_plan *p = r->p;
    const kn_kernel *k = &p->code.fusion.prog.kernels[kid];
    char *bufs[KN_KIR_MAX_ARGS];
    KN_TRY(kn_plan_kernel_bufs(r, kid, bufs));
    kn_device_ctx *dc = kn_backend_get(p->device);
    KN_TRY(dc->be->launch(dc, k, p->code.fns[kid], bufs, k->shape));
    if (kid == p->fault_kernel && kn_device_kind_of(p->device) == KN_DEVICE_CPU) /* a deliberate fault, for the checker's tests */
        for (int a = 0; a < k->n_args; a++)
            if (k->args[a].is_output && kn_dtype_is_float(k->args[a].dtype)) {
                kn_store_f64(bufs[a], k->args[a].dtype, kn_load_f64(bufs[a], k->args[a].dtype) + 1.0);
                break;
            }
    return KN_OK;
}

/* The matmul at node m with the next kernel in its library epilogue (see
 * plan_epilogues in kn_plan_build.c); *ok false when this run's tensors do not fit (a
 * strided bias or residual), and the kernels then run as planned. */
kn_status kn_plan_fused_call(run_ctx *r, int kid, int m, kn_opcall *cp, kn_tensor **biasp, kn_tensor **resp,
                             bool *ok)
{
    kn_plan *p = r->p;
    const struct kn_plan_epi *e = &p->epi.kernel[kid];
    const kn_node *mn = &p->g.nodes[m];
    *ok = false;
    /* the bias (a parameter first used by the add) may come after the
     * matmul in graph order: inputs can be bound early */
    if (e->bias_node >= 0 && p->code.fusion.disp[e->bias_node] == KN_D_INPUT) KN_TRY(bind_input(r, e->bias_node));
    if (e->res_node >= 0 && p->code.fusion.disp[e->res_node] == KN_D_INPUT) KN_TRY(bind_input(r, e->res_node));
    kn_opcall c;
    kn_opcall_init(&c, (kn_op)mn->op);
    c.a = mn->a;
    c.settings = p->settings;
    c.n_in = mn->n_in;
    for (int i = 0; i < mn->n_in; i++) {
        c.in[i] = r->val[mn->in_node[i] * KN_MAX_OUTPUTS + mn->in_out[i]];
        if (!c.in[i]) return KN_OK;
    }
    kn_tensor *bias = e->bias_node >= 0 ? r->val[e->bias_node * KN_MAX_OUTPUTS + e->bias_out] : NULL;
    kn_tensor *res = e->res_node >= 0 ? r->val[e->res_node * KN_MAX_OUTPUTS + e->res_out] : NULL;
    if ((e->bias_node >= 0 && !bias) || (e->res_node >= 0 && !res)) return KN_OK;
    if (bias && (bias->ndim != 1 || (bias->shape[0] > 1 && bias->strides[0] != 1))) return KN_OK;
    if (res && !kn_tensor_is_contiguous(res)) return KN_OK;
    c.variant = p->tune.variant ? p->tune.variant[kid] : 0;
    *cp = c;
    *biasp = bias;
    *resp = res;
    *ok = true;
    return KN_OK;
}

static kn_status run_fused(run_ctx *r, int kid, int m, bool *done)
{
    kn_plan *p = r->p;
    const struct kn_plan_epi *e = &p->epi.kernel[kid];
    int root = p->code.fusion.kernel_at[e->into];
    kn_opcall c;
    kn_tensor *bias, *res;
    *done = false;
    if (r->val[root * KN_MAX_OUTPUTS]) return KN_OK;
    KN_TRY(kn_plan_fused_call(r, kid, m, &c, &bias, &res, done));
    if (!*done) return KN_OK;
    *done = false;
    const kn_meta *m_out = &p->g.nodes[root].out[0];
    /* not the arena slot the memory plan gave the pointwise kernel's
     * output: that plan let it reuse the bytes of values dead by then,
     * such as the matmul's own input, which the library call still reads */
    kn_tensor *out;
    KN_TRY(kn_tensor_new_meta(m_out, p->device, &out));
    set_val(r, root, 0, out);
    c.n_out = 1;
    c.out[0] = out;
    kn_device_ctx *dc = kn_backend_get(p->device);
    KN_TRY(dc->be->library_fused(dc, &c, bias, p->epi.kernel[kid].act, res));
    r->folded[e->into] = true;
    *done = true;
    return KN_OK;
}

/* A constant's value on the plan's device: made at the first run and kept,
 * so later runs (and recordings, which cannot copy from the host) reuse it. */
static kn_status const_value(run_ctx *r, int node)
{
    kn_plan *p = r->p;
    if (!p->mem.consts) {
        p->mem.consts = calloc((size_t)p->g.n_nodes + 1, sizeof *p->mem.consts);
        if (!p->mem.consts) return kn_error(KN_ERR_OOM, "out of host memory for a plan's constants");
    }
    if (p->mem.consts[node]) {
        kn_tensor_retain(p->mem.consts[node]);
        r->val[node * KN_MAX_OUTPUTS] = p->mem.consts[node]; /* not counted: the plan's memory */
        return KN_OK;
    }
    const kn_node *n = &r->p->g.nodes[node];
    kn_tensor *t;
    KN_TRY(kn_tensor_new(n->out[0].dtype, 0, NULL, KN_CPU, &t));
    kn_store_f64(t->storage->data, n->out[0].dtype, n->value);
    if (r->p->device != KN_CPU) {
        kn_tensor *d;
        kn_status st = kn_tensor_to_device(t, r->p->device, NULL, &d); /* contiguous: no kernel runs */
        kn_tensor_release(t);
        KN_TRY(st);
        t = d;
    }
    p->mem.consts[node] = t;
    kn_tensor_retain(t);
    r->val[node * KN_MAX_OUTPUTS] = t;
    return KN_OK;
}

/* The profiler's description of kernel `kernel` of p (filled only when the
 * profiler records it: slot >= 0). */
static void profile_kernel_end(int slot, const kn_plan *p, int kernel)
{
    kn_profile_record r;
    memset(&r, 0, sizeof r);
    r.parent = -1;
    if (slot >= 0) {
        const kn_kernel *k = &p->code.fusion.prog.kernels[kernel];
        int node = p->code.fusion.kernel_at ? p->code.fusion.kernel_at[kernel] : k->lib_node;
        snprintf(r.name, sizeof r.name, "%s", k->name);
        bool gen = k->kind == KN_KERNEL_POINTWISE || k->kind == KN_KERNEL_ROW;
        int op = node >= 0 && node < p->g.n_nodes ? p->g.nodes[node].op : -1;
        snprintf(r.kind, sizeof r.kind, "%s",
                 gen ? "generated" : kn_profile_op_kind(p->device, op >= 0 && op < KN_OP_COUNT ? (kn_op)op : KN_OP_COUNT));
        /* a library op that ran kiln's own kernel (a fallback, the stem
         * conv, the split-precision conv gradients): its backend's label
         * for the call says so ("kiln ..."); likewise a conv that cuBLASLt
         * ran, and attention that cuDNN ran */
        kn_device_ctx *dc = kn_backend_get(p->device);
        char label[128] = "";
        bool labelled = op == KN_OP_MATMUL || op == KN_OP_CONV2D || op == KN_OP_CONV2D_INPUT_GRAD ||
                        op == KN_OP_CONV2D_WEIGHT_GRAD || op == KN_OP_ATTENTION;
        if (!gen && labelled && dc &&
            dc->be->library_variant_label)
            dc->be->library_variant_label(dc, label, sizeof label);
        if (strncmp(label, "kiln ", 5) == 0) snprintf(r.kind, sizeof r.kind, "%s", dc->be->name);
        /* a conv run as a GEMM (a channels-last 1x1 conv) */
        if (op == KN_OP_CONV2D && strncmp(label, "cublaslt", 8) == 0) snprintf(r.kind, sizeof r.kind, "cublaslt");
        if (op == KN_OP_ATTENTION && strncmp(label, "cudnn", 5) == 0) snprintf(r.kind, sizeof r.kind, "cudnn");
        r.owner = p;
        r.index = kernel;
        r.dtype = node >= 0 && node < p->g.n_nodes ? p->g.nodes[node].out[0].dtype : KN_F32;
        kn_cost c = kn_kernel_cost(&p->g, k, node);
        r.bytes = c.bytes;
        r.write_bytes = c.write_bytes;
        r.flops = c.flops;
    }
    kn_profile_kernel_end(slot, &r);
}

/* The kernel that reads view node `view` (through further views), for the
 * profiler: the first live reader's kernel, else `fallback` (a view that is
 * an output is charged to the kernel that ran before it). */
static int view_reader_kernel(const kn_plan *p, int view, int fallback)
{
    const kn_graph *g = &p->g;
    const kn_fusion *f = &p->code.fusion;
    for (int depth = 0; depth < g->n_nodes; depth++) {
        int reader = -1;
        for (int j = view + 1; j < g->n_nodes && reader < 0; j++) {
            if (f->disp[j] == KN_D_DEAD) continue;
            for (int k = 0; k < g->nodes[j].n_in; k++)
                if (g->nodes[j].in_node[k] == view) reader = j;
        }
        if (reader < 0) return fallback;
        if (f->disp[reader] != KN_D_VIEW) return f->kernel[reader] >= 0 ? f->kernel[reader] : fallback;
        view = reader;
    }
    return fallback;
}

/* The run's value table and folded flags: the plan's scratch tables
 * unless own (another run holds them, or this one hands its values to the
 * caller); and the plan's arena, allocated at its first run. */
static kn_status run_tables(run_ctx *r, bool own)
{
    kn_plan *p = r->p;
    size_t n_vals = (size_t)p->g.n_nodes * KN_MAX_OUTPUTS + 1, n_kernels = (size_t)p->code.fusion.prog.n_kernels + 1;
    if (!own && !p->scratch.val) {
        p->scratch.val = calloc(n_vals, sizeof *p->scratch.val);
        p->scratch.folded = calloc(n_kernels, sizeof *p->scratch.folded);
        if (!p->scratch.val || !p->scratch.folded) {
            free(p->scratch.val);
            free(p->scratch.folded);
            p->scratch.val = NULL;
            p->scratch.folded = NULL;
            return kn_error(KN_ERR_OOM, "out of host memory running a plan");
        }
    }
    r->val = own ? calloc(n_vals, sizeof(kn_tensor *)) : p->scratch.val;
    if (p->epi.n_folded) r->folded = own ? calloc(n_kernels, sizeof *r->folded) : p->scratch.folded;
    if (!r->val || (p->epi.n_folded && !r->folded)) {
        if (own) {
            free(r->val);
            free(r->folded);
        }
        return kn_error(KN_ERR_OOM, "out of host memory running a plan");
    }
    if (p->mem.arena_bytes && !p->mem.arena) {
        kn_device_ctx *dc = kn_backend_get(p->device);
        kn_status ast = dc ? dc->be->alloc(dc, p->mem.arena_bytes, &p->mem.arena) : kn_error(KN_ERR_DEVICE, "no backend");
        if (ast != KN_OK) {
            if (own) {
                free(r->val);
                free(r->folded);
            }
            return ast;
        }
        /* the headers over the last arena's slots point into it: made again
         * where this one is elsewhere (a caching pool mostly hands the same
         * block back) */
        if (p->mem.arena != p->mem.arena_seen && p->scratch.arena_t)
            for (int i = 0; i < p->g.n_nodes * KN_MAX_OUTPUTS; i++) {
                kn_tensor_release(p->scratch.arena_t[i]);
                p->scratch.arena_t[i] = NULL;
            }
        p->mem.arena_seen = p->mem.arena;
    }
    if (p->mem.arena) p->mem.arena_runs++;
    return KN_OK;
}

/* A run that used the arena ends: the last one gives it back where the
 * backend's free caches it (caches_freed), so plans that are not running
 * hold no arena: a training step traced twice (the optimizer's state
 * appears at the first step) kept both versions' arenas, 273 MiB each in
 * a bf16 convnet on the H200, after the first had run for the last time.
 * Work queued on the arena still runs first: the pool reuses a block in
 * stream order. A recording keeps what its run used reserved. */
static void arena_run_end(kn_plan *p)
{
    if (!p->mem.arena || --p->mem.arena_runs > 0) return;
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (!dc || !dc->be->caches_freed) return;
    dc->be->free(dc, p->mem.arena);
    p->mem.arena = NULL;
}

/* View node i of the value it reads, sharing its storage. */
static kn_status run_view(run_ctx *r, int i, int last_kernel)
{
    kn_plan *p = r->p;
    const kn_node *n = &p->g.nodes[i];
    kn_opcall c;
    kn_opcall_init(&c, (kn_op)n->op);
    c.a = n->a;
    c.settings = p->settings;
    c.n_in = 1;
    c.in[0] = r->val[n->in_node[0] * KN_MAX_OUTPUTS + n->in_out[0]];
    kn_tensor *v = NULL;
    /* a reshape that must copy runs an eager op: timing tables show
     * it under the kernel that reads the view */
    if (kn_profile_on) kn_profile_within(p, view_reader_kernel(p, i, last_kernel));
    kn_status st = c.in[0] ? kn_view_run(&c, &v) : kn_error(KN_ERR_ARG, "plan: view %d of a missing value", i);
    if (kn_profile_on) kn_profile_within(NULL, -1);
    if (st == KN_OK) r->val[i * KN_MAX_OUTPUTS] = v; /* shares its source's storage */
    return st;
}

/* The kernel whose root is node i: in its matmul's library epilogue, as a
 * generated kernel or as the library (or reference) op; profiled when the
 * profiler is on, then searched in max-autotune's first call.
 * *last_kernel: it, once it ran. */
static kn_status run_kernel(run_ctx *r, int i, int *last_kernel)
{
    kn_plan *p = r->p;
    const kn_fusion *f = &p->code.fusion;
    int kid = f->kernel[i];
    const kn_kernel *k = &f->prog.kernels[kid];
    if (r->folded && r->folded[kid]) return KN_OK; /* ran in the matmul's epilogue */
    bool prof = kn_profile_on;
    int slot = prof ? kn_profile_kernel_begin(p->device, p->settings) : -1;
    bool fused = false;
    kn_status st = KN_OK;
    if (kn_plan_epi_active(p, kid) && !r->keep) st = run_fused(r, kid, i, &fused);
    if (fused || st != KN_OK) {
        /* done (or failed) in the library call */
    } else if (k->kind == KN_KERNEL_POINTWISE || k->kind == KN_KERNEL_ROW) {
        st = run_generated(r, kid);
    } else {
        st = run_reference(r, i, kid);
    }
    if (prof) profile_kernel_end(slot, p, kid);
    *last_kernel = kid;
    if (st == KN_OK && r->tune) st = r->tune->search_kernel(r, kid, i, fused);
    return st;
}

kn_status kn_plan_run_ex(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, kn_tensor ***kept,
                         kn_tune_session *tune)
{
    kn_graph *g = &p->g;
    size_t n_kernels = (size_t)p->code.fusion.prog.n_kernels + 1;
    /* the plan's scratch tables unless another run holds them or this one
     * hands its values to the caller (kept) */
    bool own = kept != NULL || p->scratch.busy;
    run_ctx r = {p, NULL, 0, 0, kept != NULL, NULL, inputs, tune};
    KN_TRY(run_tables(&r, own));
    if (!own) p->scratch.busy = true;
    r.live = r.peak = p->mem.arena_bytes;
    kn_status st = KN_OK;
    const kn_fusion *f = &p->code.fusion;
    int last_kernel = -1; /* the kernel that ran last, for view_reader_kernel */
    for (int i = 0; i < g->n_nodes && st == KN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        switch (f->disp[i]) {
        case KN_D_DEAD:
        case KN_D_INLINE: break;
        case KN_D_INPUT: st = bind_input(&r, i); break;
        case KN_D_CONST: st = const_value(&r, i); break;
        case KN_D_VIEW: st = run_view(&r, i, last_kernel); break;
        case KN_D_ROOT: st = run_kernel(&r, i, &last_kernel); break;
        }
        if (st != KN_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", kn_last_error());
            st = kn_error(st, "%s (node %d, traced at %s)", msg, i, n->where);
            break;
        }
        /* free what no later kernel reads */
        if (!r.keep)
            for (int d = f->drop_head[i]; d >= 0; d = f->drop_next[d]) drop_val(&r, d);
    }
    if (st == KN_OK)
        for (int o = 0; o < p->n_outputs; o++) {
            kn_tensor *t = r.val[p->outputs[o].node * KN_MAX_OUTPUTS + p->outputs[o].out];
            if (!t) {
                st = kn_error(KN_ERR_ARG, "plan: output %d was not computed", o);
                break;
            }
            kn_tensor_retain(t);
            results[o] = t;
        }
    if (st != KN_OK)
        for (int o = 0; o < p->n_outputs; o++) results[o] = NULL;
    if (own) free(r.folded);
    else if (r.folded) memset(r.folded, 0, sizeof *r.folded * n_kernels);
    if (kept && st == KN_OK) {
        *kept = r.val; /* no value of a kept run is in the arena (r.keep) */
        arena_run_end(p);
        return st;
    }
    for (int i = 0; i < g->n_nodes; i++) drop_val(&r, i); /* every slot back to NULL */
    p->mem.peak_bytes = r.peak;
    if (own) free(r.val);
    else p->scratch.busy = false;
    arena_run_end(p);
    return st;
}

kn_status kn_plan_run(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results)
{
    return kn_plan_run_ex(p, inputs, results, NULL, NULL);
}

kn_status kn_plan_check(kn_plan *p, kn_tensor *const *inputs, double rtol, int *bad_kernel, char *why,
                        size_t size)
{
    *bad_kernel = -1;
    kn_graph *g = &p->g;
    kn_tensor **res = calloc((size_t)p->n_outputs + 1, sizeof *res);
    kn_tensor **ref = calloc((size_t)g->n_nodes * KN_MAX_OUTPUTS + 1, sizeof *ref);
    kn_tensor **got = NULL;
    if (!res || !ref) {
        free(res);
        free(ref);
        return kn_error(KN_ERR_OOM, "out of host memory for a numerics check");
    }
    kn_status st = kn_plan_run_ex(p, inputs, res, &got, NULL);
    if (st == KN_OK) {
        for (int i = 0; i < p->n_orig_inputs; i++) g->inputs[i].tensor = inputs[i];
        st = kn_graph_run(g, p->settings, ref);
        for (int i = 0; i < p->n_orig_inputs; i++) g->inputs[i].tensor = NULL;
    }
    for (int k = 0; st == KN_OK && k < p->code.fusion.prog.n_kernels && *bad_kernel < 0; k++) {
        int node = p->code.fusion.kernel_at[k];
        for (int o = 0; o < g->nodes[node].n_out && *bad_kernel < 0; o++) {
            kn_tensor *a = got[node * KN_MAX_OUTPUTS + o], *b = ref[node * KN_MAX_OUTPUTS + o];
            if (a && b && !kn_tensor_close(a, b, rtol, p->settings, why, size)) *bad_kernel = k;
        }
    }
    for (int i = 0; i < p->n_outputs; i++) kn_tensor_release(res[i]);
    for (int i = 0; i < g->n_nodes * KN_MAX_OUTPUTS; i++) {
        kn_tensor_release(ref[i]);
        if (got) kn_tensor_release(got[i]);
    }
    free(res);
    free(ref);
    free(got);
    return st;
}
