/* kn_plan_build: building a plan from a captured graph. The passes (with
 * the flags its device decides), fusion into kernels, the memory plan (an
 * arena shared by the generated kernels' values, placed by liveness), the
 * library epilogues (a matmul's bias, ReLU or residual run in its library
 * call), the cache file's autotuning choices, and the compile of the
 * generated kernels; also what the plan takes from each call (random
 * streams, baked inputs). */
#include "kn_plan.h"
#include "kn_plan_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_passes.h"
#include "kn_clock.h"
#include "kn_phase.h"

static kn_status plan_memory(kn_plan *p);

/* ---- values a plan takes from each call (random streams, baked inputs) ---- */

static bool is_random_op(int op)
{
    return op == KN_OP_RANDN || op == KN_OP_RAND || op == KN_OP_RANDINT;
}

/* After the passes (p->g optimized, its original inputs still bound; g the
 * caller's graph): note the versions of the inputs when a pass baked
 * their values into new inputs (fold_once's values, made from constants
 * alone, read none: a training step, which writes its parameters at every
 * call, was built again at every call for them), and map each fresh
 * random node back to g's. */
static kn_status plan_guard_values(kn_plan *p, const kn_graph *g)
{
    bool baked = false;
    for (int i = p->n_orig_inputs; i < p->g.n_inputs; i++) baked = baked || p->g.inputs[i].from_inputs;
    for (int i = 0; i < p->n_orig_inputs && i < p->g.n_inputs; i++) baked = baked || p->g.inputs[i].values_read;
    if (baked && p->n_orig_inputs > 0) {
        p->baked.storage = calloc((size_t)p->n_orig_inputs, sizeof *p->baked.storage);
        p->baked.version = calloc((size_t)p->n_orig_inputs, sizeof *p->baked.version);
        if (!p->baked.storage || !p->baked.version) return kn_error(KN_ERR_OOM, "out of host memory for a plan");
        for (int i = 0; i < p->n_orig_inputs; i++) {
            if (!kn_input_keeps_values(&p->g.inputs[i])) continue; /* new values every call: never folded */
            const kn_tensor *t = p->g.inputs[i].tensor;
            p->baked.storage[i] = t ? t->storage : NULL;
            p->baked.version[i] = t && t->storage ? t->storage->version : 0;
        }
    }
    int n = 0;
    for (int j = 0; j < p->g.n_nodes; j++) n += is_random_op(p->g.nodes[j].op) && p->g.nodes[j].a.rng_fresh;
    if (!n) return KN_OK;
    p->rng.node = malloc(sizeof *p->rng.node * (size_t)n);
    p->rng.orig = malloc(sizeof *p->rng.orig * (size_t)n);
    if (!p->rng.node || !p->rng.orig) return kn_error(KN_ERR_OOM, "out of host memory for a plan");
    for (int j = 0; j < p->g.n_nodes; j++) {
        const kn_attrs *a = &p->g.nodes[j].a;
        if (!is_random_op(p->g.nodes[j].op) || !a->rng_fresh) continue;
        /* passes renumber nodes but keep attributes: (seed, offset) names the
         * draw (two draws share them only when the first is empty, and then
         * they share them at every call) */
        int orig = -1;
        for (int i = 0; i < g->n_nodes && orig < 0; i++) {
            const kn_node *o = &g->nodes[i];
            if (o->op == p->g.nodes[j].op && o->a.rng_fresh && o->a.seed == a->seed && o->a.rng_offset == a->rng_offset)
                orig = i;
        }
        if (orig < 0) return kn_error(KN_ERR_ARG, "plan: random node %d lost its origin in the passes", j);
        p->rng.node[p->rng.n] = j;
        p->rng.orig[p->rng.n++] = orig;
    }
    return KN_OK;
}

void kn_plan_bind_rng(kn_plan *p, const kn_graph *g)
{
    for (int k = 0; k < p->rng.n; k++) {
        if (p->rng.orig[k] >= g->n_nodes) continue; /* not a graph of this plan's structure */
        const kn_attrs *from = &g->nodes[p->rng.orig[k]].a;
        kn_attrs *to = &p->g.nodes[p->rng.node[k]].a;
        to->seed = from->seed;
        to->rng_offset = from->rng_offset;
    }
}

bool kn_plan_stale(const kn_plan *p, kn_tensor *const *inputs, char *why, size_t size)
{
    if (!p->baked.storage) return false;
    for (int i = 0; i < p->n_orig_inputs; i++) {
        if (!kn_input_keeps_values(&p->g.inputs[i])) continue;
        const kn_storage *s = inputs[i] ? inputs[i]->storage : NULL;
        if (s == p->baked.storage[i] && (!s || s->version == p->baked.version[i])) continue;
        /* which inputs a fold read is not recorded: any of them may have been */
        snprintf(why, size, "it folded parameter values in, and input '%s' %s since", p->g.inputs[i].name,
                 s == p->baked.storage[i] ? "was written in place" : "is another tensor");
        return true;
    }
    return false;
}

/* ---- the build ---------------------------------------------------------------- */

/* kn_fuse_ex's question to the plan's backend: can the library call at
 * `node` write its value with the strides of `layout`? Asked on headers
 * without storage (inputs contiguous: their strides do not decide it). */
static bool plan_strided_out(void *ud, const kn_graph *g, int node, const kn_layout *layout)
{
    kn_plan *p = ud;
    kn_device_ctx *dc = kn_backend_get(p->device);
    const kn_node *n = &g->nodes[node];
    kn_tensor hdr[KN_MAX_INPUTS], out;
    kn_opcall c;
    if (!dc || !dc->be->strided_out || !kn_graph_node_call(g, n, hdr, &c)) return false;
    kn_graph_value_header(&n->out[0], &out);
    memcpy(out.strides, layout->strides, sizeof out.strides);
    c.n_out = 1;
    c.out[0] = &out;
    return dc->be->strided_out(dc, &c);
}

/* Every kernel that runs through the backend's `run` (library and
 * fallback kernels: kn_plan_run.c runs them as eager ops) asked of the
 * plan's device now, as eager asks before each call: with the node's op,
 * attrs and input dtypes and shapes. A call the device has no kernel for
 * fails the build in eager's words, with the node, not the first run.
 * Generated kernels are the compile's to refuse. */
static kn_status plan_check_ops(const kn_plan *p)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    const kn_fusion *f = &p->code.fusion;
    for (int k = 0; dc && k < f->prog.n_kernels; k++) {
        kn_kernel_kind kind = f->prog.kernels[k].kind;
        if (kind != KN_KERNEL_LIBRARY && kind != KN_KERNEL_FALLBACK) continue;
        int node = f->kernel_at[k];
        const kn_node *n = &p->g.nodes[node];
        kn_tensor hdr[KN_MAX_INPUTS];
        kn_opcall c;
        if (!kn_graph_node_call(&p->g, n, hdr, &c)) continue;
        kn_status st = kn_op_check_supported(dc, &c);
        if (st != KN_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", kn_last_error());
            return kn_error(st, "%s (node %d, traced at %s)", msg, node, n->where);
        }
    }
    return KN_OK;
}

/* A new plan for g's values `wanted`: g copied, its inputs bound for the
 * passes that read values, the device theirs. */
static kn_status plan_new(const kn_graph *g, const kn_plan_value *wanted, int n_wanted, kn_plan **out)
{
    kn_plan *p = calloc(1, sizeof *p);
    if (!p) return kn_error(KN_ERR_OOM, "out of host memory for a plan");
    kn_status st = kn_graph_copy(g, &p->g);
    if (st != KN_OK) {
        free(p);
        return st;
    }
    p->n_orig_inputs = g->n_inputs;
    p->device = KN_CPU;
    p->fault_kernel = -1;
    int first = -1; /* the first bound input: the plan runs on its device */
    for (int i = 0; i < g->n_inputs; i++) { /* bound for the passes that read values */
        p->g.inputs[i].tensor = g->inputs[i].tensor;
        kn_tensor_retain(p->g.inputs[i].tensor);
        if (!g->inputs[i].tensor) continue;
        if (first < 0) {
            first = i;
            p->device = g->inputs[i].device;
        } else if (g->inputs[i].device != p->device) {
            /* one plan runs its kernels on one device: a kernel of the
             * other would be handed pointers it cannot read (eager ops
             * refuse mixed devices too) */
            char a[32], b[32];
            snprintf(a, sizeof a, "%s", kn_device_name(g->inputs[i].device));
            snprintf(b, sizeof b, "%s", kn_device_name(p->device));
            st = kn_error(KN_ERR_DEVICE,
                          "the compiled function reads tensors on two devices: '%s' is on %s but '%s' is on %s; "
                          "move them to one device (t:to(\"%s\"))",
                          g->inputs[i].name, a, g->inputs[first].name, b, b);
            kn_plan_free(p);
            return st;
        }
    }
    p->n_outputs = n_wanted;
    p->outputs = malloc(sizeof *p->outputs * (size_t)(n_wanted ? n_wanted : 1));
    p->pass_out = malloc(sizeof *p->pass_out * (size_t)(n_wanted ? n_wanted : 1));
    if (!p->outputs || !p->pass_out) {
        st = kn_error(KN_ERR_OOM, "out of host memory for a plan");
        kn_plan_free(p);
        return st;
    }
    for (int i = 0; i < n_wanted; i++) {
        p->outputs[i] = wanted[i];
        p->pass_out[i] = wanted[i].node;
    }
    *out = p;
    return KN_OK;
}

/* pass_flags with what the plan's device decides added. */
static int device_pass_flags(const kn_plan *p, int pass_flags)
{
    /* attention nodes only where the device's backend runs the op
     * (its supports_op looks at the op alone here: no tensors yet) */
    kn_device_ctx *adc = kn_backend_get(p->device);
    kn_opcall probe;
    kn_opcall_init(&probe, KN_OP_ATTENTION);
    if (!adc || !adc->be->supports_op(adc, &probe)) pass_flags |= KN_PASSES_NO_ATTENTION;
    /* channels-last convolutions where the backend says they are faster */
    bool has_conv = false; /* asking starts the device's conv library: only when it will run */
    for (int i = 0; i < p->g.n_nodes; i++) {
        int op = p->g.nodes[i].op;
        has_conv = has_conv || op == KN_OP_CONV2D;
    }
    if ((pass_flags & KN_PLAN_NHWC_AUTO) && has_conv) {
        if (adc && adc->be->conv_channels_last && adc->be->conv_channels_last(adc, KN_BF16))
            pass_flags |= KN_PASSES_NHWC_HALF;
        /* f32 goes channels-last where the GPU runs kiln's split-precision
         * convolutions (Hopper), training graphs too: their gradients run
         * split as well (kn_cuda_conv_x3_grad_run). The convnet sample's
         * step took 2,453 us of kernels so, against 2,675 NCHW on cuDNN's
         * strict engines (H200, session 25). Their rounding differs from
         * those engines', which eager runs, and AdamW turns such
         * differences in near-zero gradients into steps of its learning
         * rate: the compiled step's losses drift from eager's
         * (t/training_samples.lua says how far), as PyTorch's compiled
         * step's drift from its eager one's.
         * (KILN_CPU_CONV_NHWC_F32=1: the CPU answers yes, so CI tests the
         * rule without a GPU.) */
        bool f32_faster = (adc && adc->be->conv_channels_last && adc->be->conv_channels_last(adc, KN_F32)) ||
                          (kn_device_kind_of(p->device) == KN_DEVICE_CPU && getenv("KILN_CPU_CONV_NHWC_F32"));
        if (f32_faster) pass_flags |= KN_PASSES_NHWC_F32;
    }
    /* k-contiguous matmul weights where the backend can say which shapes
     * want them (KILN_K_MAJOR_WEIGHTS=0 turns it off, for A/B runs) */
    const char *k_major = getenv("KILN_K_MAJOR_WEIGHTS");
    if (!(k_major && !strcmp(k_major, "0")) &&
        ((adc && adc->be->matmul_b_k_major) || getenv("KILN_CPU_K_MAJOR_WEIGHTS")))
        pass_flags |= KN_PASSES_K_MAJOR_WEIGHTS;
    /* gathered loads only where runs are replays: a device without
     * recording runs the plan, whose index ops report a bad index
     * (KILN_CPU_GATHER_LOADS=1 keeps them on the CPU, which lets CI test
     * them without a GPU) */
    if ((!adc || !adc->be->capture_begin) && !getenv("KILN_CPU_GATHER_LOADS")) pass_flags &= ~KN_PLAN_GATHER_LOADS;
    /* split reductions on the GPU, whose generic reduction kernel is the
     * slow path (the CPU's sums in double are its reference) */
    if ((adc && adc->be->capture_begin) || getenv("KILN_CPU_SPLIT_REDUCTIONS"))
        pass_flags |= KN_PASSES_SPLIT_REDUCTIONS;
    return pass_flags;
}

/* The fusion log shows the passes' notes first. */
static void prepend_pass_notes(kn_fusion *f, const char *pass_notes)
{
    char *why = f->why;
    size_t a = strlen(pass_notes), b = why ? strlen(why) : 0;
    char *both = malloc(a + b + 1);
    if (both) {
        memcpy(both, pass_notes, a);
        memcpy(both + a, why ? why : "", b + 1);
        free(why);
        f->why = both;
    }
}

/* Compile the generated kernels through the backend (with the persistent
 * cache): p->times.generated, cached and backend_s. */
static kn_status plan_compile(kn_plan *p, const char *cache_dir)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    int generated = 0;
    for (int k = 0; k < p->code.fusion.prog.n_kernels; k++)
        generated += p->code.fusion.prog.kernels[k].kind == KN_KERNEL_POINTWISE ||
                     p->code.fusion.prog.kernels[k].kind == KN_KERNEL_ROW;
    double t2 = kn_clock_s();
    p->times.generated = generated;
    if (generated && dc && dc->be->compile_program) {
        bool cached = false;
        KN_TRY(dc->be->compile_program(dc, &p->code.fusion.prog, cache_dir, &p->code.lib, p->code.fns, &cached));
        p->code.generated = true;
        /* the program is one unit: all its kernels are cached or none */
        p->times.cached = cached ? generated : 0;
    }
    p->times.backend_s = kn_clock_s() - t2;
    if (generated && !p->code.generated)
        return kn_error(KN_ERR_UNSUPPORTED, "the %s backend cannot run generated kernels", dc ? dc->be->name : "?");
    return KN_OK;
}

static kn_status plan_build(const kn_graph *g, const kn_plan_value *wanted, int n_wanted, const kn_settings *settings,
                           int pass_flags, kn_plan **out);

/* Building a plan is the kernel-source phase, but for its passes and the
 * backend's compiles (phases of their own, kn_phase.h). */
kn_status kn_plan_build(const kn_graph *g, const kn_plan_value *wanted, int n_wanted, const kn_settings *settings,
                        int pass_flags, kn_plan **out)
{
    kn_phase_begin(KN_PHASE_SOURCE);
    kn_status st = plan_build(g, wanted, n_wanted, settings, pass_flags, out);
    kn_phase_end(KN_PHASE_SOURCE);
    return st;
}

static kn_status plan_build(const kn_graph *g, const kn_plan_value *wanted, int n_wanted, const kn_settings *settings,
                           int pass_flags, kn_plan **out)
{
    const char *cache_dir = kn_settings_cache_dir(settings);
    *out = NULL;
    kn_plan *p = NULL;
    KN_TRY(plan_new(g, wanted, n_wanted, &p));
    p->settings = settings;
    double t0 = kn_clock_s();
    char *pass_notes = NULL;
    pass_flags = device_pass_flags(p, pass_flags);
    kn_phase_begin(KN_PHASE_PASSES);
    kn_status st = kn_passes_run_noted(&p->g, p->pass_out, n_wanted, pass_flags, &pass_notes, settings);
    kn_phase_end(KN_PHASE_PASSES);
    if (st == KN_OK) {
        for (int i = 0; i < n_wanted; i++) p->outputs[i].node = p->pass_out[i];
        st = plan_guard_values(p, g);
    }
    if (st != KN_OK) {
        free(pass_notes);
        goto fail;
    }
    /* the caller's inputs are bound again at each run: drop ours now */
    for (int i = 0; i < p->n_orig_inputs; i++) {
        kn_tensor_release(p->g.inputs[i].tensor);
        p->g.inputs[i].tensor = NULL;
    }
    double t1 = kn_clock_s();
    p->times.passes_s = t1 - t0;
    st = kn_fuse_gathering(&p->g, p->pass_out, n_wanted, plan_strided_out, p, (pass_flags & KN_PLAN_GATHER_LOADS) != 0,
                           &p->code.fusion);
    if (st == KN_OK && pass_notes) prepend_pass_notes(&p->code.fusion, pass_notes);
    free(pass_notes);
    if (st == KN_OK) st = plan_check_ops(p);
    if (st != KN_OK) goto fail;
    st = plan_memory(p);
    if (st == KN_OK && !(pass_flags & KN_PLAN_NO_EPILOGUES)) st = kn_plan_epilogues(p);
    if (st != KN_OK) goto fail;
    p->code.fns = calloc((size_t)p->code.fusion.prog.n_kernels + 1, sizeof *p->code.fns);
    if (p->code.fns && (pass_flags & KN_PLAN_AUTOTUNE)) {
        /* the cache file's choices, before the compile: their
         * configurations are what gets compiled */
        st = kn_plan_tune_prepare(p, cache_dir);
        if (st != KN_OK) goto fail;
    }
    if (!p->code.fns) {
        st = kn_error(KN_ERR_OOM, "out of host memory for a plan");
        goto fail;
    }
    p->times.codegen_s = kn_clock_s() - t1;
    st = plan_compile(p, cache_dir);
    if (st != KN_OK) goto fail;
    *out = p;
    return KN_OK;
fail:
    kn_plan_free(p);
    return st;
}

/* ---- memory plan ------------------------------------------------------------ */

#define KN_ARENA_ALIGN 64

/* Place the outputs of generated kernels in one arena: in order of the
 * kernels, each value goes at the lowest offset that no value still alive
 * overlaps (alive: its last reader has not run yet; a value read by the
 * kernel that writes another may not share its bytes). A value stored by
 * the kernel of another node is born where that kernel runs, its root's
 * position (kernel_at), which may come before the value's own node: a
 * small value riding on an earlier row kernel (ride_on_rows). Placed at
 * its own node, such a value was written over bytes still alive then: a
 * convnet's cross-entropy ignore mask, riding on log_softmax, over a value
 * its first BatchNorm's backward read, whose weight and bias came out
 * 100-1000 off after one AdamW step. */
static kn_status plan_memory(kn_plan *p)
{
    const kn_graph *g = &p->g;
    const kn_fusion *f = &p->code.fusion;
    int n = g->n_nodes, nv = n * KN_MAX_OUTPUTS;
    p->mem.arena_off = malloc(sizeof *p->mem.arena_off * (size_t)(nv + 1));
    bool *escapes = calloc((size_t)n + 1, sizeof *escapes);
    int64_t *size = calloc((size_t)nv + 1, sizeof *size);
    int *live = malloc(sizeof *live * (size_t)(nv + 1));
    int *end = malloc(sizeof *end * ((size_t)n + 1));
    int *born = malloc(sizeof *born * ((size_t)n + 1)), *order = malloc(sizeof *order * ((size_t)n + 1));
    int *first = calloc((size_t)n + 2, sizeof *first);
    if (!p->mem.arena_off || !escapes || !size || !live || !end || !born || !order || !first) {
        free(escapes);
        free(size);
        free(live);
        free(end);
        free(born);
        free(order);
        free(first);
        return kn_error(KN_ERR_OOM, "out of host memory planning a graph's memory");
    }
    /* a value's bytes live until the last reader of it or of any view of it */
    for (int i = 0; i < n; i++) end[i] = f->last_use[i];
    for (int i = n - 1; i >= 0; i--)
        if (f->disp[i] == KN_D_VIEW) {
            int src = g->nodes[i].in_node[0];
            if (end[i] > end[src]) end[src] = end[i];
        }
    for (int i = 0; i < nv; i++) p->mem.arena_off[i] = -1;
    for (int o = 0; o < p->n_outputs; o++) { /* an output, and the value its views reach */
        int b = p->outputs[o].node;
        while (b >= 0 && f->disp[b] == KN_D_VIEW) b = g->nodes[b].in_node[0];
        if (b >= 0) escapes[b] = true;
    }
    /* the values to place, in order of the position where they are written
     * (a counting sort: node order within a position) */
    for (int i = 0; i < n; i++) {
        born[i] = -1;
        bool made = f->disp[i] == KN_D_ROOT || (f->disp[i] == KN_D_INLINE && f->stored && f->stored[i]);
        if (!made || escapes[i] || end[i] >= n || end[i] < 0) continue;
        const kn_kernel *k = &f->prog.kernels[f->kernel[i]];
        if (k->kind != KN_KERNEL_POINTWISE && k->kind != KN_KERNEL_ROW) continue;
        born[i] = f->disp[i] == KN_D_INLINE ? f->kernel_at[f->kernel[i]] : i;
        if (born[i] < 0 || born[i] >= n) born[i] = i;
        first[born[i] + 1]++;
    }
    for (int i = 0; i < n; i++) first[i + 1] += first[i];
    int n_order = first[n];
    for (int i = 0; i < n; i++)
        if (born[i] >= 0) order[first[born[i]]++] = i;
    int n_live = 0;
    for (int oi = 0; oi < n_order; oi++) {
        int i = order[oi];
        /* retire what died before this kernel */
        int w = 0;
        for (int j = 0; j < n_live; j++)
            if (end[live[j] / KN_MAX_OUTPUTS] >= born[i]) live[w++] = live[j];
        n_live = w;
        const kn_meta *m = &g->nodes[i].out[0];
        int64_t bytes = kn_numel_of(m->ndim, m->shape) * (int64_t)kn_dtype_size(m->dtype);
        bytes = (bytes + KN_ARENA_ALIGN - 1) / KN_ARENA_ALIGN * KN_ARENA_ALIGN;
        if (bytes == 0) bytes = KN_ARENA_ALIGN; /* a zero-size value still gets an address */
        int64_t off = 0;
        for (bool moved = true; moved;) { /* first fit: lowest offset clear of every live block */
            moved = false;
            for (int j = 0; j < n_live; j++) {
                int64_t o2 = p->mem.arena_off[live[j]], s2 = size[live[j]];
                if (off < o2 + s2 && o2 < off + bytes) {
                    off = o2 + s2;
                    moved = true;
                }
            }
        }
        p->mem.arena_off[i * KN_MAX_OUTPUTS] = off;
        size[i * KN_MAX_OUTPUTS] = bytes;
        live[n_live++] = i * KN_MAX_OUTPUTS;
        if (off + bytes > p->mem.arena_bytes) p->mem.arena_bytes = off + bytes;
    }
    free(escapes);
    free(size);
    free(live);
    free(end);
    free(born);
    free(order);
    free(first);
    return KN_OK;
}
