/* kn_plan_choice: a plan's autotuning choices. Which kernels have any,
 * their cache keys, a choice's text parsed and applied, and the cache
 * file's choices taken at build, before the compile; the measured search
 * is kn_plan_tune.c. */
#include "kn_plan.h"
#include "kn_plan_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_autotune.h"
#include "kn_backend.h"

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
    /* a library call (fusion decides which ops: kn_fuse_group.c runs_in_library)
     * has candidates when its library offers variants, or when its
     * epilogue is fused (the unfused candidate) */
    return k->kind == KN_KERNEL_LIBRARY &&
           (dc->be->library_variant_label || (p->epi.kernel && p->epi.kernel[kid].into >= 0));
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
        fprintf(f, "lib %s tf32 %d", kn_op_name((kn_op)n->op), kn_settings_allow_tf32(kn_settings_or_defaults(p->settings)) ? 1 : 0);
        for (int i = 0; i < n->n_in; i++) {
            const kn_layout *l = &p->code.fusion.layout[n->in_node[i]];
            fprintf(f, " in%d %s [", i, kn_dtype_name(p->g.nodes[n->in_node[i]].out[n->in_out[i]].dtype));
            for (int d = 0; d < l->ndim; d++)
                fprintf(f, "%s%lld:%lld", d ? "," : "", (long long)l->shape[d], (long long)l->strides[d]);
            fprintf(f, "]");
        }
        if (kn_plan_permuted_value(p, k->lib_node)) { /* written permuted (kn_fuse_ex): its own entry */
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
        /* a choice that does not even parse ('foo') gets the same answer as
         * one outside the search: the list of those it can be */
        bool parsed = kn_kconfig_parse(choice, cfg) == KN_OK;
        /* only what the search itself would measure: a cached or pinned
         * layout outside it (an edited file's unroll=4096) could compile
         * for minutes or run wrong, unmeasured */
        kn_kconfig cands[KN_TUNE_MAX_CANDS];
        int n = kn_kconfig_candidates(k, kn_plan_target(p), cands, KN_TUNE_MAX_KCONFIGS);
        char list[512] = "";
        size_t used = 0;
        for (int i = 0; i < n; i++) {
            if (parsed && memcmp(&cands[i], cfg, sizeof *cfg) == 0) return KN_OK;
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

