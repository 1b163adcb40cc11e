/* kn_plan: a plan's lifecycle and what its parts share. The parts:
 * kn_plan_build.c (passes, fusion, memory plan, library epilogues,
 * compile), kn_plan_run.c (a run: kernels in order, values freed after
 * their last use; the numerics check), kn_plan_record.c (reduce-overhead's
 * recording and its replays), kn_plan_choice.c (autotuning choices: keys,
 * the cache file's choices at build) and kn_plan_tune.c (max-autotune's
 * measured search). kn_plan_impl.h is what they share. */
#include "kn_plan.h"
#include "kn_plan_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "kn_backend.h"

/* The language the plan's device generates kernels in: its backend's. */
const kn_render_target *kn_plan_target(const kn_plan *p)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    return dc ? dc->be->render_target : NULL;
}

void kn_plan_identity(const kn_plan *p, char *buf, size_t size)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (dc && dc->be->identity) dc->be->identity(dc, buf, size);
    else snprintf(buf, size, "%s", dc ? dc->be->name : "none");
}

/* Whether node's value is laid out other than contiguous (a library
 * kernel writing it permuted, kn_fuse_ex). */
bool kn_plan_permuted_value(const kn_plan *p, int node)
{
    const kn_layout *l = &p->code.fusion.layout[node];
    int64_t cs[KN_MAX_DIMS];
    kn_contiguous_strides(l->ndim, l->shape, cs);
    for (int d = 0; d < l->ndim; d++)
        if (l->shape[d] > 1 && l->strides[d] != cs[d]) return true;
    return false;
}

void kn_plan_edge_reason(const kn_plan *p, const kn_fuse_edge *e, char *buf, size_t size)
{
    if (kn_plan_epi_active(p, e->from_kernel) && p->epi.kernel[e->from_kernel].into == e->to_kernel)
        snprintf(buf, size, "%s; here the library call runs %s in its epilogue, so the two are one call", e->reason,
                 p->code.fusion.prog.kernels[e->to_kernel].name);
    else snprintf(buf, size, "%s", e->reason);
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

void kn_plan_free_recording(kn_plan *p)
{
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (p->rec.exec && dc && dc->be->graph_destroy) dc->be->graph_destroy(dc, p->rec.exec);
    p->rec.exec = NULL;
    for (int i = 0; p->rec.in && i < p->n_orig_inputs; i++) kn_tensor_release(p->rec.in[i]);
    for (int i = 0; p->rec.out && i < p->n_outputs; i++) kn_tensor_release(p->rec.out[i]);
    free(p->rec.in);
    free(p->rec.ptr);
    free(p->rec.out);
    free(p->rec.into);
    free(p->rec.wb);
    free(p->rec.in_copy);
    free(p->rec.in_src);
    free(p->rec.out_copy);
    free(p->rec.out_dst);
    p->rec.in = p->rec.out = NULL;
    p->rec.ptr = NULL;
    p->rec.into = p->rec.in_copy = p->rec.out_copy = NULL;
    p->rec.in_src = NULL;
    p->rec.out_dst = NULL;
    p->rec.wb = NULL;
}

void kn_plan_free(kn_plan *p)
{
    if (!p) return;
    kn_device_ctx *dc = kn_backend_get(p->device);
    kn_plan_free_recording(p);
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
