/* kn_plan: building a compiled graph (passes -> fusion -> code) and running
 * it: kernels in order, views made as the values they read exist, every
 * intermediate freed after its last use. */
#include "kn_plan.h"
#include "kn_plan_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kn_autotune.h"
#include "kn_backend.h"
#include "kn_kernel_cost.h"
#include "kn_passes.h"
#include "kn_profile.h"
#include "kn_view.h"
#include "kn_clock.h"

/* ---- autotuning choices ----------------------------------------------------
 * Which kernels have choices, their cache keys, and applying a saved choice
 * before the compile; the measured search is kn_plan_tune.c. */

static bool permuted_value(const kn_plan *p, int node);

/* The language the plan's device generates kernels in: its backend's. */
const kn_render_target *kn_plan_target(const kn_plan *p)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    return dc ? dc->be->render_target : NULL;
}

/* Kernels that run inside a matmul's library epilogue never run alone. */
static bool folded_into(const kn_plan *p, int kid)
{
    for (int j = 0; p->epi.kernel && j < p->code.fusion.prog.n_kernels; j++)
        if (p->epi.kernel[j].into == kid && !p->epi.kernel[j].off) return true;
    return false;
}

bool kn_plan_tunable(const kn_plan *p, int kid)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    const kn_kernel *k = &p->code.fusion.prog.kernels[kid];
    if (!dc || folded_into(p, kid)) return false;
    if (kn_plan_generated(k)) {
        kn_kconfig c[2];
        return dc->be->compile_program && dc->be->render_target &&
               kn_kconfig_candidates(k, dc->be->render_target, c, 2) > 1;
    }
    /* a library call (fusion decides which ops: kn_fuse.c runs_in_library)
     * has candidates when its library offers variants, or when its
     * epilogue is fused (the unfused candidate) */
    return k->kind == KN_KERNEL_LIBRARY &&
           (dc->be->library_variant_label || (p->epi.kernel && p->epi.kernel[kid].into >= 0));
}

void kn_plan_identity(const kn_plan *p, char *buf, size_t size)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (dc && dc->be->identity) dc->be->identity(dc, buf, size);
    else snprintf(buf, size, "%s", dc ? dc->be->name : "none");
}

/* What the kernel computes, on which shapes, dtypes and strides, hashed:
 * its generated source under a fixed name, or the library call's
 * description. Names and graph positions are left out, so the same kernel
 * in another model or process finds the same entry. */
kn_status kn_plan_kernel_key(const kn_plan *p, int kid, char sig[KN_TUNE_KEY])
{
    const kn_kernel *k = &p->code.fusion.prog.kernels[kid];
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return kn_error(KN_ERR_OOM, "out of host memory for an autotune key");
    kn_status st = KN_OK;
    if (kn_plan_generated(k)) {
        kn_kernel *copy = malloc(sizeof *copy);
        char *src = NULL;
        if (!copy) {
            st = kn_error(KN_ERR_OOM, "out of host memory for an autotune key");
        } else {
            *copy = *k;
            snprintf(copy->name, sizeof copy->name, "k");
            memset(&copy->cfg, 0, sizeof copy->cfg);
            st = kn_kernel_render(copy, kn_plan_target(p), &src);
        }
        if (st == KN_OK) {
            fprintf(f, "gen %s shape", kn_plan_target(p)->name);
            for (int d = 0; d < k->ndim; d++) fprintf(f, " %lld", (long long)k->shape[d]);
            fprintf(f, "\n%s", src);
        }
        free(src);
        free(copy);
    } else {
        const kn_node *n = &p->g.nodes[k->lib_node];
        fprintf(f, "lib %s tf32 %d", kn_op_name((kn_op)n->op), kn_settings_or_defaults(p->settings)->allow_tf32 ? 1 : 0);
        for (int i = 0; i < n->n_in; i++) {
            const kn_layout *l = &p->code.fusion.layout[n->in_node[i]];
            fprintf(f, " in%d %s [", i, kn_dtype_name(p->g.nodes[n->in_node[i]].out[n->in_out[i]].dtype));
            for (int d = 0; d < l->ndim; d++)
                fprintf(f, "%s%lld:%lld", d ? "," : "", (long long)l->shape[d], (long long)l->strides[d]);
            fprintf(f, "]");
        }
        if (permuted_value(p, k->lib_node)) { /* written permuted (kn_fuse_ex): its own entry */
            const kn_layout *ol = &p->code.fusion.layout[k->lib_node];
            fprintf(f, " out strides [");
            for (int d = 0; d < ol->ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)ol->strides[d]);
            fprintf(f, "]");
        }
        fprintf(f, " out %s stride %d %d pad %d %d dil %d %d groups %d", kn_dtype_name(n->out[0].dtype),
                n->a.stride[0], n->a.stride[1], n->a.padding[0], n->a.padding[1], n->a.dilation[0],
                n->a.dilation[1], n->a.groups);
        if (p->epi.kernel && p->epi.kernel[kid].into >= 0)
            fprintf(f, " epilogue bias %d act %d residual %d", p->epi.kernel[kid].bias_node >= 0,
                    p->epi.kernel[kid].act, p->epi.kernel[kid].res_node >= 0);
    }
    fclose(f);
    if (st == KN_OK) kn_autotune_hash_key(text, sig);
    free(text);
    return st;
}

/* Apply a choice text to kernel kid before or after its compile (after:
 * the caller compiles it). */
kn_status kn_plan_parse_choice(const kn_plan *p, int kid, const char *choice, kn_kconfig *cfg, int *variant,
                              bool *unfused)
{
    const kn_kernel *k = &p->code.fusion.prog.kernels[kid];
    memset(cfg, 0, sizeof *cfg);
    *variant = 0;
    *unfused = false;
    if (kn_plan_generated(k)) {
        KN_TRY(kn_kconfig_parse(choice, cfg));
        /* only what the search itself would measure: a cached or pinned
         * layout outside it (an edited file's unroll=4096) could compile
         * for minutes or run wrong, unmeasured */
        kn_kconfig cands[KN_TUNE_MAX_CANDS];
        int n = kn_kconfig_candidates(k, kn_plan_target(p), cands, KN_TUNE_MAX_CANDS);
        char list[512] = "";
        size_t used = 0;
        for (int i = 0; i < n; i++) {
            if (memcmp(&cands[i], cfg, sizeof *cfg) == 0) return KN_OK;
            char text[KN_TUNE_CHOICE];
            kn_kconfig_text(&cands[i], text, sizeof text);
            if (used < sizeof list)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s'%s'", i ? ", " : "", text);
        }
        return kn_error(KN_ERR_ARG, "kernel %s: choice '%s' is not one of the layouts kiln searches for it on %s: %s",
                        k->name, choice, kn_device_name(p->device), list);
    }
    if (strcmp(choice, "default") == 0) return KN_OK;
    if (strcmp(choice, "unfused") == 0) {
        if (!p->epi.kernel || p->epi.kernel[kid].into < 0)
            return kn_error(KN_ERR_ARG, "kernel %s has no fused epilogue: 'unfused' does not apply", k->name);
        *unfused = true;
        return KN_OK;
    }
    char *end;
    if (strncmp(choice, "variant=", 8) == 0) {
        long v = strtol(choice + 8, &end, 10);
        if (*end == 0 && end != choice + 8 && v >= 0 && v < KN_TUNE_MAX_CANDS) {
            *variant = (int)v;
            return KN_OK;
        }
    }
    return kn_error(KN_ERR_ARG,
                    "kernel %s runs in a library: its choice is 'default', 'variant=N' (N < %d)%s, not '%s'", k->name,
                    KN_TUNE_MAX_CANDS,
                    p->epi.kernel && p->epi.kernel[kid].into >= 0 ? " or 'unfused' (its epilogue as its own kernel)" : "",
                    choice);
}

/* Fold kernel kid's epilogue into its library call, or not. */
void kn_plan_set_unfused(kn_plan *p, int kid, bool unfused)
{
    if (!p->epi.kernel || p->epi.kernel[kid].into < 0 || p->epi.kernel[kid].off == unfused) return;
    p->epi.kernel[kid].off = unfused;
    p->epi.n_folded += unfused ? -1 : 1;
}

/* A kernel's result from a cache entry (the file's, or an identical
 * kernel's measured earlier in this process). */
void kn_plan_take_entry(kn_tune_result *tr, const kn_tune_entry *e)
{
    tr->source = e->pinned ? KN_TUNED_PINNED : KN_TUNED_CACHED;
    snprintf(tr->choice, sizeof tr->choice, "%s", e->choice);
    snprintf(tr->label, sizeof tr->label, "%s", e->label);
    tr->us = e->us;
    tr->default_us = e->default_us;
}

kn_status kn_plan_tune_prepare(kn_plan *p, const char *cache_dir)
{
    int n = p->code.fusion.prog.n_kernels;
    p->tune.enabled = true;
    p->tune.variant = calloc((size_t)n + 1, sizeof *p->tune.variant);
    p->tune.result = calloc((size_t)n + 1, sizeof *p->tune.result);
    if (!p->tune.variant || !p->tune.result) return kn_error(KN_ERR_OOM, "out of host memory for autotuning");
    char id[512];
    kn_plan_identity(p, id, sizeof id);
    kn_autotune_device_key(id, p->tune.dev);
    for (int kid = 0; kid < n; kid++) {
        kn_tune_result *tr = &p->tune.result[kid];
        tr->us = tr->default_us = -1;
        if (!kn_plan_tunable(p, kid)) continue;
        KN_TRY(kn_plan_kernel_key(p, kid, tr->sig));
        kn_tune_entry e;
        if (!kn_autotune_cache_find(cache_dir, p->tune.dev, tr->sig, &e)) continue;
        kn_kconfig cfg;
        int v;
        bool unfused;
        if (kn_plan_parse_choice(p, kid, e.choice, &cfg, &v, &unfused) != KN_OK) {
            kn_autotune_cache_reject(cache_dir, &e, kn_last_error()); /* an edited file: search again */
            continue;
        }
        p->code.fusion.prog.kernels[kid].cfg = cfg;
        p->tune.variant[kid] = v;
        kn_plan_set_unfused(p, kid, unfused);
        kn_plan_take_entry(tr, &e);
        p->tune.cache_hits++;
    }
    return KN_OK;
}

/* What the choices and the search keep in p (kn_plan_free). */
static void free_tuning(kn_plan *p)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    for (int i = 0; i < p->tune.n_libs; i++)
        if (dc && dc->be->release_program) dc->be->release_program(dc, p->tune.libs[i]);
    free(p->tune.libs);
    for (int k = 0; p->tune.result && k < p->code.fusion.prog.n_kernels; k++) free(p->tune.result[k].cands);
    free(p->tune.result);
    free(p->tune.variant);
}

/* ---- building ---------------------------------------------------------------- */

void kn_plan_free(kn_plan *p)
{
    if (!p) return;
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (p->rec.exec && dc && dc->be->graph_destroy) dc->be->graph_destroy(dc, p->rec.exec);
    for (int i = 0; p->rec.in && i < p->n_orig_inputs; i++) kn_tensor_release(p->rec.in[i]);
    for (int i = 0; p->rec.out && i < p->n_outputs; i++) kn_tensor_release(p->rec.out[i]);
    free(p->rec.in);
    free(p->rec.ptr);
    free(p->rec.out);
    for (int i = 0; p->mem.consts && i < p->g.n_nodes; i++) kn_tensor_release(p->mem.consts[i]);
    free(p->mem.consts);
    free(p->baked.storage);
    free(p->baked.version);
    free(p->rng.node);
    free(p->rng.orig);
    free(p->epi.kernel);
    free_tuning(p);
    if (p->code.lib && dc && dc->be->release_program) dc->be->release_program(dc, p->code.lib);
    for (int i = 0; p->scratch.arena_t && i < p->g.n_nodes * KN_MAX_OUTPUTS; i++)
        kn_tensor_release(p->scratch.arena_t[i]); /* borrowed: the arena is freed below */
    free(p->scratch.arena_t);
    free(p->scratch.val);
    free(p->scratch.folded);
    if (p->mem.arena && dc) dc->be->free(dc, p->mem.arena);
    free(p->mem.arena_off);
    kn_fusion_free(&p->code.fusion);
    /* inputs the caller binds are borrowed during runs; the passes' are owned */
    for (int i = 0; i < p->n_orig_inputs && i < p->g.n_inputs; i++) p->g.inputs[i].tensor = NULL;
    kn_graph_free(&p->g);
    free(p->outputs);
    free(p->pass_out);
    free(p->code.fns);
    free(p->code.source);
    free(p);
}

static kn_status plan_memory(kn_plan *p);
static kn_status plan_epilogues(kn_plan *p);

/* ---- values a plan takes from each call (random streams, baked inputs) ---- */

static bool is_random_op(int op)
{
    return op == KN_OP_RANDN || op == KN_OP_RAND || op == KN_OP_RANDINT;
}

/* After the passes (p->g optimized, its original inputs still bound; g the
 * caller's graph): note the versions of the inputs when a pass baked
 * values into new inputs, and map each fresh random node back to g's. */
static kn_status plan_guard_values(kn_plan *p, const kn_graph *g)
{
    if (p->g.n_inputs > p->n_orig_inputs && p->n_orig_inputs > 0) {
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

/* kn_fuse_ex's question to the plan's backend: can the library call at
 * `node` write its value with the strides of `layout`? Asked on headers
 * without storage (inputs contiguous: their strides do not decide it). */
static bool plan_strided_out(void *ud, const kn_graph *g, int node, const kn_layout *layout)
{
    kn_plan *p = ud;
    kn_device_ctx *dc = kn_backend_get(p->device);
    const kn_node *n = &g->nodes[node];
    if (!dc || !dc->be->strided_out || n->op >= KN_OP_COUNT || n->n_in > KN_MAX_INPUTS) return false;
    kn_tensor hdr[KN_MAX_INPUTS + 1];
    kn_opcall c;
    kn_opcall_init(&c, (kn_op)n->op);
    c.a = n->a;
    c.n_in = n->n_in;
    for (int k = 0; k <= n->n_in; k++) {
        const kn_meta *m = k < n->n_in ? &g->nodes[n->in_node[k]].out[n->in_out[k]] : &n->out[0];
        memset(&hdr[k], 0, sizeof hdr[k]);
        hdr[k].refcount = 1;
        hdr[k].dtype = m->dtype;
        hdr[k].ndim = m->ndim;
        memcpy(hdr[k].shape, m->shape, sizeof hdr[k].shape);
        if (k < n->n_in) kn_contiguous_strides(m->ndim, m->shape, hdr[k].strides);
        else memcpy(hdr[k].strides, layout->strides, sizeof hdr[k].strides);
        if (k < n->n_in) c.in[k] = &hdr[k];
    }
    c.n_out = 1;
    c.out[0] = &hdr[n->n_in];
    return dc->be->strided_out(dc, &c);
}

kn_status kn_plan_build(const kn_graph *g, const kn_plan_value *wanted, int n_wanted, const kn_settings *settings,
                        int pass_flags, kn_plan **out)
{
    const char *cache_dir = kn_settings_cache_dir(settings);
    *out = NULL;
    kn_plan *p = calloc(1, sizeof *p);
    if (!p) return kn_error(KN_ERR_OOM, "out of host memory for a plan");
    kn_status st = kn_graph_copy(g, &p->g);
    if (st != KN_OK) {
        free(p);
        return st;
    }
    p->n_orig_inputs = g->n_inputs;
    p->device = KN_CPU;
    p->settings = settings;
    p->fault_kernel = -1;
    for (int i = 0; i < g->n_inputs; i++) { /* bound for the passes that read values */
        p->g.inputs[i].tensor = g->inputs[i].tensor;
        kn_tensor_retain(p->g.inputs[i].tensor);
        if (g->inputs[i].tensor) p->device = g->inputs[i].device;
    }
    p->n_outputs = n_wanted;
    p->outputs = malloc(sizeof *p->outputs * (size_t)(n_wanted ? n_wanted : 1));
    p->pass_out = malloc(sizeof *p->pass_out * (size_t)(n_wanted ? n_wanted : 1));
    if (!p->outputs || !p->pass_out) {
        st = kn_error(KN_ERR_OOM, "out of host memory for a plan");
        goto fail;
    }
    for (int i = 0; i < n_wanted; i++) {
        p->outputs[i] = wanted[i];
        p->pass_out[i] = wanted[i].node;
    }
    double t0 = kn_clock_s();
    char *pass_notes = NULL;
    {
        /* attention nodes only where the device's backend runs the op
         * (its supports_op looks at the op alone here: no tensors yet) */
        kn_device_ctx *adc = kn_backend_get(p->device);
        kn_opcall probe;
        kn_opcall_init(&probe, KN_OP_ATTENTION);
        if (!adc || !adc->be->supports_op(adc, &probe)) pass_flags |= KN_PASSES_NO_ATTENTION;
        /* channels-last convolutions where the backend says they are faster */
        bool has_conv = false; /* asking starts the device's conv library: only when it will run */
        for (int i = 0; i < p->g.n_nodes && !has_conv; i++) has_conv = p->g.nodes[i].op == KN_OP_CONV2D;
        if ((pass_flags & KN_PLAN_NHWC_AUTO) && has_conv) {
            if (adc && adc->be->conv_channels_last && adc->be->conv_channels_last(adc, KN_BF16))
                pass_flags |= KN_PASSES_NHWC_HALF;
            if (adc && adc->be->conv_channels_last && adc->be->conv_channels_last(adc, KN_F32))
                pass_flags |= KN_PASSES_NHWC_F32;
        }
    }
    st = kn_passes_run_noted(&p->g, p->pass_out, n_wanted, pass_flags, &pass_notes, settings);
    if (st != KN_OK) {
        free(pass_notes);
        goto fail;
    }
    for (int i = 0; i < n_wanted; i++) p->outputs[i].node = p->pass_out[i];
    st = plan_guard_values(p, g);
    if (st != KN_OK) goto fail;
    /* the caller's inputs are bound again at each run: drop ours now */
    for (int i = 0; i < p->n_orig_inputs; i++) {
        kn_tensor_release(p->g.inputs[i].tensor);
        p->g.inputs[i].tensor = NULL;
    }
    double t1 = kn_clock_s();
    p->times.passes_s = t1 - t0;
    st = kn_fuse_ex(&p->g, p->pass_out, n_wanted, plan_strided_out, p, &p->code.fusion);
    if (st == KN_OK && pass_notes) { /* the fusion log shows the passes' notes first */
        char *why = p->code.fusion.why;
        size_t a = strlen(pass_notes), b = why ? strlen(why) : 0;
        char *both = malloc(a + b + 1);
        if (both) {
            memcpy(both, pass_notes, a);
            memcpy(both + a, why ? why : "", b + 1);
            free(why);
            p->code.fusion.why = both;
        }
    }
    free(pass_notes);
    if (st != KN_OK) goto fail;
    st = plan_memory(p);
    if (st == KN_OK && !(pass_flags & KN_PLAN_NO_EPILOGUES)) st = plan_epilogues(p);
    if (st != KN_OK) goto fail;
    kn_device_ctx *dc = kn_backend_get(p->device);
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
    int generated = 0;
    for (int k = 0; k < p->code.fusion.prog.n_kernels; k++)
        generated += p->code.fusion.prog.kernels[k].kind == KN_KERNEL_POINTWISE ||
                     p->code.fusion.prog.kernels[k].kind == KN_KERNEL_ROW;
    double t2 = kn_clock_s();
    p->times.codegen_s = t2 - t1;
    p->times.generated = generated;
    if (generated && dc && dc->be->compile_program) {
        bool cached = false;
        st = dc->be->compile_program(dc, &p->code.fusion.prog, cache_dir, &p->code.lib, p->code.fns, &cached);
        if (st != KN_OK) goto fail;
        p->code.generated = true;
        /* the program is one unit: all its kernels are cached or none */
        p->times.cached = cached ? generated : 0;
    }
    p->times.backend_s = kn_clock_s() - t2;
    if (generated && !p->code.generated) {
        st = kn_error(KN_ERR_UNSUPPORTED, "the %s backend cannot run generated kernels", dc ? dc->be->name : "?");
        goto fail;
    }
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
 * kernel that writes another may not share its bytes). */
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
    if (!p->mem.arena_off || !escapes || !size || !live || !end) {
        free(escapes);
        free(size);
        free(live);
        free(end);
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
    int n_live = 0;
    for (int i = 0; i < n; i++) {
        if (f->disp[i] != KN_D_ROOT || escapes[i] || end[i] >= n || end[i] < 0) continue;
        const kn_kernel *k = &f->prog.kernels[f->kernel[i]];
        if (k->kind != KN_KERNEL_POINTWISE && k->kind != KN_KERNEL_ROW) continue;
        /* retire what died before this kernel */
        int w = 0;
        for (int j = 0; j < n_live; j++)
            if (end[live[j] / KN_MAX_OUTPUTS] >= i) live[w++] = live[j];
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
    return KN_OK;
}

/* ---- library epilogues ------------------------------------------------------ */

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

/* Fold the pointwise kernel after a matmul into the library call where
 * the backend can (cuBLASLt's BIAS / RELU_BIAS epilogues, and a residual
 * as its C operand): Linear's `x·wᵀ + b`, its ReLU, and the transformer's
 * `x + proj(y)`. The kernel must be exactly that chain and the matmul's
 * own value read nowhere else; the run checks the tensors' layouts and
 * falls back to the two kernels when they do not fit. */
static kn_status plan_epilogues(kn_plan *p)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (!dc || !dc->be->library_fused) return KN_OK;
    if (kn_device_kind_of(p->device) == KN_DEVICE_CPU && !getenv("KILN_CPU_FOLD_EPILOGUES")) return KN_OK; /* see kn_cpu_backend.c */
    kn_fusion *f = &p->code.fusion;
    int nk = f->prog.n_kernels;
    p->epi.kernel = malloc(sizeof *p->epi.kernel * (size_t)(nk + 1));
    if (!p->epi.kernel) return kn_error(KN_ERR_OOM, "out of host memory for a plan");
    for (int k = 0; k < nk; k++) p->epi.kernel[k].into = -1;
    for (int k = 0; k + 1 < nk; k++) {
        const kn_kernel *L = &f->prog.kernels[k], *P = &f->prog.kernels[k + 1];
        int m = f->kernel_at[k];
        const kn_node *mn = &p->g.nodes[m];
        if (L->kind == KN_KERNEL_LIBRARY && mn->op == KN_OP_CONV2D && P->kind == KN_KERNEL_POINTWISE &&
            P->n_nodes == 1 && mn->n_in == 3 && kn_dtype_is_float(mn->out[0].dtype)) {
            /* conv (+ its bias, as batch norm folding leaves it) + ReLU: one
             * cuDNN graph; but not in strict f32, where cuDNN's fused engines
             * were slower than conv then a ReLU kernel (convnet on an H200:
             * 596 against 580 us; bf16 316 against 329; bench/fold_ab.lua) */
            if (mn->out[0].dtype == KN_F32 && !kn_settings_or_defaults(p->settings)->allow_tf32) continue;
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

/* ---- running ------------------------------------------------------------- */

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

/* Whether node's value is laid out other than contiguous (a library
 * kernel writing it permuted, kn_fuse_ex). */
static bool permuted_value(const kn_plan *p, int node)
{
    const kn_layout *l = &p->code.fusion.layout[node];
    int64_t cs[KN_MAX_DIMS];
    kn_contiguous_strides(l->ndim, l->shape, cs);
    for (int d = 0; d < l->ndim; d++)
        if (l->shape[d] > 1 && l->strides[d] != cs[d]) return true;
    return false;
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
    if (n->n_out == 1 && permuted_value(r->p, node)) return run_permuted(r, node, &c);
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

/* A constant's value on the plan's device: made at the first run and kept,
 * so later runs (and recordings, which cannot copy from the host) reuse it. */
/* The matmul at node m with the next kernel in its library epilogue (see
 * plan_epilogues); *done false when this run's tensors do not fit (a
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
         * conv): its backend's label for the call says so ("kiln ...") */
        kn_device_ctx *dc = kn_backend_get(p->device);
        char label[128] = "";
        if (!gen && (op == KN_OP_MATMUL || op == KN_OP_CONV2D) && dc && dc->be->library_variant_label)
            dc->be->library_variant_label(dc, label, sizeof label);
        if (strncmp(label, "kiln ", 5) == 0) snprintf(r.kind, sizeof r.kind, "%s", dc->be->name);
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

kn_status kn_plan_run_ex(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, kn_tensor ***kept,
                         kn_tune_session *tune)
{
    kn_graph *g = &p->g;
    size_t n_vals = (size_t)g->n_nodes * KN_MAX_OUTPUTS + 1, n_kernels = (size_t)p->code.fusion.prog.n_kernels + 1;
    /* the plan's scratch tables unless another run holds them or this one
     * hands its values to the caller (kept) */
    bool own = kept != NULL || p->scratch.busy;
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
    run_ctx r = {p, own ? calloc(n_vals, sizeof(kn_tensor *)) : p->scratch.val, 0, 0, kept != NULL, NULL, inputs, tune};
    if (p->epi.n_folded) r.folded = own ? calloc(n_kernels, sizeof *r.folded) : p->scratch.folded;
    if (!r.val || (p->epi.n_folded && !r.folded)) {
        if (own) {
            free(r.val);
            free(r.folded);
        }
        return kn_error(KN_ERR_OOM, "out of host memory running a plan");
    }
    if (p->mem.arena_bytes && !p->mem.arena) {
        kn_device_ctx *dc = kn_backend_get(p->device);
        kn_status ast = dc ? dc->be->alloc(dc, p->mem.arena_bytes, &p->mem.arena) : kn_error(KN_ERR_DEVICE, "no backend");
        if (ast != KN_OK) {
            if (own) {
                free(r.val);
                free(r.folded);
            }
            return ast;
        }
    }
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
        case KN_D_VIEW: {
            kn_opcall c;
            kn_opcall_init(&c, (kn_op)n->op);
            c.a = n->a;
            c.settings = p->settings;
            c.n_in = 1;
            c.in[0] = r.val[n->in_node[0] * KN_MAX_OUTPUTS + n->in_out[0]];
            kn_tensor *v = NULL;
            /* a reshape that must copy runs an eager op: timing tables show
             * it under the kernel that reads the view */
            if (kn_profile_on) kn_profile_within(p, view_reader_kernel(p, i, last_kernel));
            st = c.in[0] ? kn_view_run(&c, &v) : kn_error(KN_ERR_ARG, "plan: view %d of a missing value", i);
            if (kn_profile_on) kn_profile_within(NULL, -1);
            if (st == KN_OK) r.val[i * KN_MAX_OUTPUTS] = v; /* shares its source's storage */
            break;
        }
        case KN_D_ROOT: {
            int kid = f->kernel[i];
            const kn_kernel *k = &f->prog.kernels[kid];
            if (r.folded && r.folded[kid]) break; /* ran in the matmul's epilogue */
            bool prof = kn_profile_on;
            int slot = prof ? kn_profile_kernel_begin(p->device, p->settings) : -1;
            bool fused = false;
            if (kn_plan_epi_active(p, kid) && !r.keep) st = run_fused(&r, kid, i, &fused);
            if (fused || st != KN_OK) {
                /* done (or failed) in the library call */
            } else if (k->kind == KN_KERNEL_POINTWISE || k->kind == KN_KERNEL_ROW) {
                st = run_generated(&r, kid);
            } else {
                st = run_reference(&r, i, kid);
            }
            if (prof) profile_kernel_end(slot, p, kid);
            last_kernel = kid;
            if (st == KN_OK && r.tune) st = r.tune->search_kernel(&r, kid, i, fused);
            break;
        }
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
        *kept = r.val;
        return st;
    }
    for (int i = 0; i < g->n_nodes; i++) drop_val(&r, i); /* every slot back to NULL */
    p->mem.peak_bytes = r.peak;
    if (own) free(r.val);
    else p->scratch.busy = false;
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

/* ---- recordings (reduce-overhead) ------------------------------------------ */

static kn_status rec_never(kn_plan *p, const char *fmt, const char *arg)
{
    p->rec.state = KN_REC_NEVER;
    snprintf(p->rec.why, sizeof p->rec.why, fmt, arg);
    return KN_OK;
}

/* Whether p can be recorded at all; sets rec.why when not. */
static void rec_check(kn_plan *p, kn_tensor *const *inputs)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (!dc || !dc->be->capture_begin || !dc->be->copy) {
        rec_never(p, "the %s backend has no graph recording", kn_device_name(p->device));
        return;
    }
    for (int i = 0; i < p->g.n_nodes; i++) {
        int op = p->g.nodes[i].op;
        if (p->code.fusion.disp[i] == KN_D_ROOT && (op == KN_OP_RANDN || op == KN_OP_RAND || op == KN_OP_RANDINT)) {
            /* a replay would repeat the recorded numbers */
            rec_never(p, "the graph makes random numbers (%s)", kn_op_name((kn_op)op));
            return;
        }
    }
    for (int i = 0; i < p->n_orig_inputs; i++) {
        if (!inputs[i] || !inputs[i]->storage) {
            rec_never(p, "input '%s' has no data", p->g.inputs[i].name);
            return;
        }
        if (kn_tensor_device(inputs[i]) != p->device) {
            rec_never(p, "input '%s' is on another device", p->g.inputs[i].name);
            return;
        }
        kn_input_kind k = p->g.inputs[i].kind;
        if (k != KN_IN_PARAM && k != KN_IN_TENSOR && !kn_tensor_is_contiguous(inputs[i])) {
            rec_never(p, "input '%s' is not contiguous (it would need a static buffer of its layout)",
                      p->g.inputs[i].name);
            return;
        }
    }
}

/* Inputs from outside are copied into the recording's static buffers;
 * parameters and identity-guarded tensors are read in place. */
static bool rec_in_place(const kn_plan *p, int i)
{
    kn_input_kind k = p->g.inputs[i].kind;
    return k == KN_IN_PARAM || k == KN_IN_TENSOR;
}

static kn_status rec_copy_inputs(kn_plan *p, kn_tensor *const *inputs)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    for (int i = 0; i < p->n_orig_inputs; i++) {
        kn_tensor *s = p->rec.in[i];
        if (!s) continue;
        void *dst = kn_tensor_data(s);
        const void *src = kn_tensor_data(inputs[i]);
        if (dst != src)
            KN_TRY(dc->be->copy(dc, dst, src, kn_tensor_numel(s) * (int64_t)kn_dtype_size(s->dtype)));
    }
    return KN_OK;
}

/* The caller's copy of a recording output: a new tensor, so the next
 * replay cannot change it. */
static kn_status rec_clone(kn_plan *p, kn_tensor *t, kn_tensor **out)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (kn_tensor_is_contiguous(t)) {
        kn_meta m = kn_tensor_meta(t);
        KN_TRY(kn_tensor_new_meta(&m, p->device, out));
        kn_status st = dc->be->copy(dc, kn_tensor_data(*out), kn_tensor_data(t),
                                kn_tensor_numel(t) * (int64_t)kn_dtype_size(t->dtype));
        if (st != KN_OK) {
            kn_tensor_release(*out);
            *out = NULL;
        }
        return st;
    }
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CONTIGUOUS);
    c.n_in = 1;
    c.in[0] = t;
    c.settings = p->settings;
    KN_TRY(kn_op_eager(&c, p->device));
    *out = c.out[0];
    return KN_OK;
}

static kn_status rec_replay(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    KN_TRY(rec_copy_inputs(p, inputs));
    KN_TRY(dc->be->graph_launch(dc, p->rec.exec));
    p->rec.replays++;
    for (int o = 0; o < p->n_outputs; o++) {
        kn_status st = rec_clone(p, p->rec.out[o], &results[o]);
        if (st != KN_OK) {
            for (int j = 0; j < o; j++) {
                kn_tensor_release(results[j]);
                results[j] = NULL;
            }
            return st;
        }
    }
    return KN_OK;
}

void kn_plan_drop_recording(kn_plan *p)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (p->rec.exec && dc && dc->be->graph_destroy) dc->be->graph_destroy(dc, p->rec.exec);
    p->rec.exec = NULL;
    for (int i = 0; p->rec.in && i < p->n_orig_inputs; i++) kn_tensor_release(p->rec.in[i]);
    for (int i = 0; p->rec.out && i < p->n_outputs; i++) kn_tensor_release(p->rec.out[i]);
    free(p->rec.in);
    free(p->rec.ptr);
    free(p->rec.out);
    p->rec.in = p->rec.out = NULL;
    p->rec.ptr = NULL;
    if (p->rec.state != KN_REC_NEVER) p->rec.state = KN_REC_WARMUP;
}

static kn_status rec_record(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    int n_in = p->n_orig_inputs;
    p->rec.in = calloc((size_t)n_in + 1, sizeof *p->rec.in);
    p->rec.ptr = calloc((size_t)n_in + 1, sizeof *p->rec.ptr);
    p->rec.out = calloc((size_t)p->n_outputs + 1, sizeof *p->rec.out);
    kn_tensor **bound = calloc((size_t)n_in + 1, sizeof *bound);
    if (!p->rec.in || !p->rec.ptr || !p->rec.out || !bound) {
        free(bound);
        return kn_error(KN_ERR_OOM, "out of host memory recording a graph");
    }
    kn_status st = KN_OK;
    for (int i = 0; i < n_in && st == KN_OK; i++) {
        if (rec_in_place(p, i)) {
            bound[i] = inputs[i];
            p->rec.ptr[i] = kn_tensor_data(inputs[i]);
            continue;
        }
        kn_meta m = kn_tensor_meta(inputs[i]);
        st = kn_tensor_new_meta(&m, p->device, &p->rec.in[i]);
        bound[i] = p->rec.in[i];
    }
    if (st == KN_OK) st = rec_copy_inputs(p, inputs);
    if (st == KN_OK) st = dc->be->capture_begin(dc);
    if (st == KN_OK) {
        kn_status run = kn_plan_run(p, bound, p->rec.out);
        char why[200];
        snprintf(why, sizeof why, "%s", run != KN_OK ? kn_last_error() : "");
        void *exec = NULL;
        kn_status end = dc->be->capture_end(dc, &exec); /* always end the capture, even after a failed run */
        if (run != KN_OK || end != KN_OK) {
            if (run == KN_OK) snprintf(why, sizeof why, "%s", kn_last_error());
            if (exec) dc->be->graph_destroy(dc, exec);
            for (int o = 0; o < p->n_outputs; o++) {
                kn_tensor_release(p->rec.out[o]);
                p->rec.out[o] = NULL;
            }
            rec_never(p, "recording failed: %s", why);
            free(bound);
            return KN_OK; /* the caller runs it without */
        }
        p->rec.exec = exec;
        p->rec.state = KN_REC_READY;
    }
    free(bound);
    KN_TRY(st);
    /* the capture ran nothing: the first replay computes this call */
    return rec_replay(p, inputs, results);
}

/* Wall time of n calls (synchronized) in us per call: replays or plain runs. */
static kn_status time_calls(kn_plan *p, kn_tensor *const *inputs, bool replay, int n, double *us)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    kn_tensor *res[64];
    if (p->n_outputs > 64) return kn_error(KN_ERR_UNSUPPORTED, "timing a plan with more than 64 outputs");
    KN_TRY(dc->be->sync(dc));
    double t0 = kn_clock_s();
    for (int i = 0; i < n; i++) {
        KN_TRY(replay ? rec_replay(p, inputs, res) : kn_plan_run(p, inputs, res));
        for (int o = 0; o < p->n_outputs; o++) kn_tensor_release(res[o]);
    }
    KN_TRY(dc->be->sync(dc));
    *us = (kn_clock_s() - t0) / n * 1e6;
    return KN_OK;
}

/* max-autotune: a recording is kept only when replaying it is measured
 * faster than running the plan (it usually is; a plan of a few large
 * library calls may not be: the input and output copies around a replay
 * cost more than the launches they save). The calls are timed here, in C;
 * a caller's call also does host work outside the plan (the Lua call, its
 * guards, the results), which a replay overlaps with the device but which
 * adds to a plain run bound by its launches. So the plain run must win by
 * more than that work: on the H100 host, gcn f32's plain run measured 44.5
 * us here against 47.1 replaying, and then took 72.9 us a call back to
 * back from Lua against 50.9 replaying. */
#define REC_TIMED_CALLS 20
#define REC_OUTER_HOST_US 20.0
static kn_status rec_choose(kn_plan *p, kn_tensor *const *inputs)
{
    double rep = 1e30, plain = 1e30;
    for (int round = 0; round < 3; round++) { /* interleaved, best of three */
        double r, q;
        KN_TRY(time_calls(p, inputs, true, REC_TIMED_CALLS, &r));
        KN_TRY(time_calls(p, inputs, false, REC_TIMED_CALLS, &q));
        if (r < rep) rep = r;
        if (q < plain) plain = q;
    }
    p->rec.replay_us = rep;
    p->rec.plain_us = plain;
    if (plain + REC_OUTER_HOST_US < rep * 0.97) {
        char why[200];
        snprintf(why, sizeof why,
                 "max-autotune measured the plain run faster (%.1f us against %.1f us replaying, more than a "
                 "call's %.0f us of host work outside the plan)",
                 plain, rep, REC_OUTER_HOST_US);
        kn_plan_drop_recording(p);
        p->rec.by_choice = true;
        return rec_never(p, "%s", why);
    }
    return KN_OK;
}

kn_status kn_plan_run_recorded(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, bool *replayed)
{
    *replayed = false;
    /* profiling times each kernel with events, which a capture cannot hold:
     * a profiled call runs the plan as is */
    if (kn_profile_on) return kn_plan_run(p, inputs, results);
    if (p->rec.state == KN_REC_WARMUP) {
        rec_check(p, inputs);
        if (p->rec.state == KN_REC_WARMUP) p->rec.state = KN_REC_RECORD;
        return kn_plan_run(p, inputs, results);
    }
    if (p->rec.state == KN_REC_NEVER) return kn_plan_run(p, inputs, results);
    for (int i = 0; i < p->n_orig_inputs; i++)
        if (p->rec.state == KN_REC_READY && rec_in_place(p, i) && kn_tensor_data(inputs[i]) != p->rec.ptr[i]) {
            /* a parameter's storage moved (same tensor, new data): record again */
            kn_device_ctx *dc = kn_backend_get(p->device);
            dc->be->graph_destroy(dc, p->rec.exec);
            p->rec.exec = NULL;
            for (int j = 0; j < p->n_orig_inputs; j++) kn_tensor_release(p->rec.in[j]);
            for (int j = 0; j < p->n_outputs; j++) kn_tensor_release(p->rec.out[j]);
            free(p->rec.in);
            free(p->rec.ptr);
            free(p->rec.out);
            p->rec.in = p->rec.out = NULL;
            p->rec.ptr = NULL;
            p->rec.state = KN_REC_RECORD;
            break;
        }
    if (p->rec.state == KN_REC_RECORD) {
        KN_TRY(rec_record(p, inputs, results));
        if (p->rec.state == KN_REC_NEVER) return kn_plan_run(p, inputs, results);
        if (p->tune.enabled && p->rec.state == KN_REC_READY && !p->rec.by_choice && p->rec.plain_us == 0) {
            kn_status st = rec_choose(p, inputs);
            if (st != KN_OK) {
                for (int o = 0; o < p->n_outputs; o++) kn_tensor_release(results[o]);
                return st;
            }
        }
        *replayed = p->rec.state == KN_REC_READY;
        return KN_OK;
    }
    *replayed = true;
    return rec_replay(p, inputs, results);
}

void kn_plan_edge_reason(const kn_plan *p, const kn_fuse_edge *e, char *buf, size_t size)
{
    if (kn_plan_epi_active(p, e->from_kernel) && p->epi.kernel[e->from_kernel].into == e->to_kernel)
        snprintf(buf, size, "%s; here the library call runs %s in its epilogue, so the two are one call", e->reason,
                 p->code.fusion.prog.kernels[e->to_kernel].name);
    else snprintf(buf, size, "%s", e->reason);
}
