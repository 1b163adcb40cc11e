/* kn_capture: the compiled function: made, set to a mode and freed; the
 * log of messages it keeps for the caller; the lazies (placeholders) its
 * captures make and drop; and running a version of one of its graphs
 * through the compiled plans built for it (max-autotune's search, CUDA
 * graph recording and the numerics check included), or op by op.
 *
 * Capture itself is in kn_capture_trace.c, the version cache's guards in
 * kn_capture_guards.c, and what is made dynamic in kn_capture_dynamic.c;
 * they share kn_capture_internal.h. This file uses none of them. */
#include "kn_capture.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_autotune.h"
#include "kn_backend.h"
#include "kn_capture_internal.h"
#include "kn_clock.h"
#include "kn_passes.h"

/* Messages here are built into fixed buffers on purpose (they are kept in
 * arrays of records); a name long enough to overflow one is cut, not lost. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

/* ---- lazies and placeholders --------------------------------------------- */

_Static_assert(KN_LAZY_NAME_MAX == KN_NAME_MAX, "a lazy keeps the name of a graph input");

static kn_device graph_device(const kn_capture *cap)
{
    for (int i = 0; i < cap->g.n_inputs; i++)
        if (cap->g.inputs[i].tensor) return cap->g.inputs[i].device;
    return KN_CPU;
}

/* A placeholder for output `out` of node `node` of the open graph. */
kn_status kn_capture_placeholder(kn_capture *cap, int node, int out, kn_tensor **t)
{
    if (cap->n_lazies == cap->cap_lazies) {
        int ncap = cap->cap_lazies ? cap->cap_lazies * 2 : 64;
        kn_lazy **np = realloc(cap->lazies, sizeof *np * (size_t)ncap);
        if (!np) return kn_error(KN_ERR_OOM, "out of host memory while capturing");
        cap->lazies = np;
        cap->cap_lazies = ncap;
    }
    kn_lazy *lz = calloc(1, sizeof *lz);
    if (!lz) return kn_error(KN_ERR_OOM, "out of host memory while capturing");
    lz->refcount = 2; /* the placeholder's and the capture's */
    lz->cap = cap;
    lz->segment = cap->segment;
    lz->node = node;
    lz->out = out;
    lz->output_index = -1;
    lz->device = graph_device(cap);
    kn_status st = kn_tensor_new_placeholder(&cap->g.nodes[node].out[out], lz, t);
    if (st != KN_OK) {
        free(lz);
        return st;
    }
    cap->lazies[cap->n_lazies++] = lz;
    return KN_OK;
}

/* Drop the capture's references on the open graph's lazies; the ones still
 * referenced by placeholders stay, detached from this graph. */
void kn_capture_drop_lazies(kn_capture *cap, bool detach)
{
    for (int i = 0; i < cap->n_lazies; i++) {
        kn_lazy *lz = cap->lazies[i];
        if (detach) lz->cap = NULL;
        kn_tensor_release(kn_lazy_release(lz));
    }
    cap->n_lazies = 0;
}

/* The call's phases: its own seconds of each (kn_phase), kept for
 * kiln.explain, and the first call's for cm:stats().first_call. */
static void call_phases_done(kn_capture *cap)
{
    kn_phase_end(KN_PHASE_CAPTURE);
    double now[KN_PHASE_COUNT];
    kn_phase_totals(now);
    cap->call_s = kn_clock_s() - cap->call_t0;
    for (int i = 0; i < KN_PHASE_COUNT; i++) cap->call_phase_s[i] = now[i] - cap->phase_at_start[i];
    kn_compile_stats *s = cap->cm ? &cap->cm->stats : NULL;
    if (s && s->calls == 1) {
        s->first_call_s = cap->call_s;
        memcpy(s->first_call_phase_s, cap->call_phase_s, sizeof s->first_call_phase_s);
    }
}

/* Close the capture of a call: every placeholder of the open graph
 * detached, the graph freed. The end of every call (kn_capture_end), and
 * of one still open when its function is freed. */
void kn_capture_close(kn_capture *cap)
{
    /* writes still pending belong to a call that failed: none is applied */
    for (int i = 0; i < cap->n_writes; i++) {
        kn_tensor_release(cap->writes[i].dst);
        kn_tensor_release(cap->writes[i].src);
    }
    cap->n_writes = 0;
    kn_capture_drop_lazies(cap, true);
    kn_graph_free(&cap->g);
    if (cap->active) call_phases_done(cap);
    cap->active = false;
}

/* ---- messages ------------------------------------------------------------ */

void kn_compiled_log(kn_compiled *cm, int kind, const char *fmt, ...)
{
    if (!(cm->log.flags & kind)) return;
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
    char *p = realloc(cm->log.text, cm->log.len + (size_t)n + 1);
    if (!p) return;
    memcpy(p + cm->log.len, buf, (size_t)n + 1);
    cm->log.text = p;
    cm->log.len += (size_t)n;
}

/* ---- running a version --------------------------------------------------- */

kn_plan *kn_version_plan(const kn_version *v)
{
    return v && v->n_plans ? v->plans[v->n_plans - 1].plan : NULL;
}

static bool same_wanted(const struct kn_plan_entry *e, const kn_plan_value *w, int n, const kn_graph *g, bool dyn)
{
    if (e->n_want != n || memcmp(e->want, w, sizeof *w * (size_t)n) != 0) return false;
    if (!dyn) return true;
    for (int i = 0; i < g->n_inputs; i++)
        if (memcmp(&e->in_metas[i], &g->inputs[i].meta, sizeof(kn_meta)) != 0) return false;
    return true;
}

/* The plan of v for these values, built now if needed; NULL (with
 * v->plan_error set) when it cannot be built. */
static kn_plan *version_plan(kn_compiled *cm, kn_version *v, const kn_graph *g, const kn_plan_value *w, int n)
{
    for (int i = v->n_plans - 1; i >= 0; i--)
        if (same_wanted(&v->plans[i], w, n, g, v->dynamic)) return v->plans[i].plan;
    if (v->plan_error[0] || v->n_plans >= 16) return NULL;
    kn_plan *plan;
    int flags = cm->opt.pass_flags | (kn_mode_autotunes(cm->id.mode) ? KN_PLAN_AUTOTUNE : 0) |
                (kn_mode_records(cm->id.mode) ? KN_PLAN_GATHER_LOADS : 0);
    double t0 = kn_clock_s();
    kn_status st = kn_plan_build(g, w, n, cm->opt.settings, flags, &plan);
    cm->cap.compile_s += kn_clock_s() - t0;
    if (st != KN_OK) {
        snprintf(v->plan_error, sizeof v->plan_error, "%s", kn_last_error());
        kn_compiled_log(cm, KN_LOG_WARN, "kiln: %s (%s): could not compile a graph (%s); it runs op by op\n",
                        cm->id.name, cm->id.where, v->plan_error);
        return NULL;
    }
    struct kn_plan_entry *ne = realloc(v->plans, sizeof *ne * (size_t)(v->n_plans + 1));
    kn_plan_value *want = malloc(sizeof *want * (size_t)(n ? n : 1));
    kn_meta *metas = malloc(sizeof *metas * (size_t)(g->n_inputs ? g->n_inputs : 1));
    if (!ne || !want || !metas) {
        if (ne) v->plans = ne;
        free(want);
        free(metas);
        kn_plan_free(plan);
        return NULL;
    }
    v->plans = ne;
    memcpy(want, w, sizeof *want * (size_t)n);
    for (int i = 0; i < g->n_inputs; i++) metas[i] = g->inputs[i].meta;
    v->plans[v->n_plans++] = (struct kn_plan_entry){want, n, metas, plan};
    cm->stats.plans_built++;
    cm->stats.passes_s += plan->times.passes_s;
    cm->stats.codegen_s += plan->times.codegen_s;
    cm->stats.backend_s += plan->times.backend_s;
    cm->cap.passes_s += plan->times.passes_s;
    cm->cap.codegen_s += plan->times.codegen_s;
    cm->cap.backend_s += plan->times.backend_s;
    cm->stats.kernels_generated += plan->times.generated;
    cm->stats.kernels_cached += plan->times.cached;
    cm->cap.kernels_generated += plan->times.generated;
    cm->cap.kernels_cached += plan->times.cached;
    cm->stats.autotune_cache_hits += plan->tune.cache_hits;
    if (cm->log.flags & KN_LOG_FUSION) {
        const kn_fusion *f = &plan->code.fusion;
        kn_compiled_log(cm, KN_LOG_FUSION, "Fusion of %s (%s): %d kernel%s, %d edge%s between kernels\n%s",
                        cm->id.name, cm->id.where, f->prog.n_kernels, f->prog.n_kernels == 1 ? "" : "s", f->n_edges,
                        f->n_edges == 1 ? "" : "s", f->why ? f->why : "");
        for (int e = 0; e < f->n_edges; e++) {
            char reason[KN_FUSE_REASON_MAX + 160];
            kn_plan_edge_reason(plan, &f->edges[e], reason, sizeof reason);
            kn_compiled_log(cm, KN_LOG_FUSION, "  %s -> %s: %s\n", f->prog.kernels[f->edges[e].from_kernel].name,
                            f->prog.kernels[f->edges[e].to_kernel].name, reason);
        }
    }
    if (cm->log.flags & KN_LOG_KERNELS)
        for (int k = 0; k < plan->code.fusion.prog.n_kernels; k++)
            kn_compiled_log(cm, KN_LOG_KERNELS, "kernel %s (%d nodes)\n", plan->code.fusion.prog.kernels[k].name,
                            plan->code.fusion.prog.kernels[k].n_nodes);
    return plan;
}

static void autotune_log(void *ud, const char *text)
{
    kn_compiled_log(ud, KN_LOG_AUTOTUNE, "%s", text);
}

/* Whether a search Ctrl-C stopped waits in any plan of cm (resumed at
 * that plan's next call). */
static bool any_search_interrupted(const kn_compiled *cm)
{
    for (int k = 0; k < cm->cache.n_graphs; k++)
        for (int v = 0; v < cm->cache.graphs[k].n_versions; v++) {
            const kn_version *ver = &cm->cache.graphs[k].versions[v];
            for (int i = 0; i < ver->n_plans; i++)
                if (ver->plans[i].plan->tune.interrupted) return true;
        }
    return false;
}

/* The last progress report, and a line on how the search ended when it
 * did not finish (the budget, Ctrl-C): printed, not only logged. */
static void autotune_done(kn_compiled *cm, const kn_plan *p, kn_tune_session *s)
{
    const kn_autotune_opts *o = &kn_settings_or_defaults(cm->opt.settings)->autotune;
    if (o->progress) {
        kn_autotune_progress pr = {"", s->kernels_done, s->kernels_total, s->candidates, kn_clock_s() - s->t0,
                                   s->budget_s, true, s->resume_left, s->resume_total};
        o->progress(&pr, o->progress_ud);
    }
    int skipped = 0;
    for (int k = 0; p->tune.result && k < p->code.fusion.prog.n_kernels; k++)
        skipped += p->tune.result[k].source == KN_TUNED_SKIPPED;
    if (s->interrupted || s->out_of_budget) {
        char path[KN_CACHE_PATH_MAX];
        if (kn_autotune_cache_path(kn_settings_cache_dir(cm->opt.settings), path, sizeof path) != KN_OK)
            snprintf(path, sizeof path, "the process (the cache dir is too long)");
        kn_compiled_log(cm, KN_LOG_WARN,
                        "kiln: %s (%s): autotuning %s: %d kernels measured and saved in %s, %d keep their defaults\n",
                        cm->id.name, cm->id.where,
                        s->interrupted ? "interrupted" : "stopped at kiln.config.autotune_budget_s",
                        s->measured, path, skipped);
    }
}

/* A plan that baked values its inputs no longer hold (a parameter of a
 * folded batch norm written by copy_) is dropped; the caller builds it
 * again from this call's values. The reason is logged as a recompile's. */
static bool drop_stale_plan(kn_compiled *cm, kn_version *v, kn_plan *plan, kn_tensor *const *ins)
{
    char why[KN_REASON_MAX];
    if (!kn_plan_stale(plan, ins, why, sizeof why)) return false;
    for (int i = 0; i < v->n_plans; i++) {
        if (v->plans[i].plan != plan) continue;
        kn_plan_free(plan);
        free(v->plans[i].want);
        free(v->plans[i].in_metas);
        v->plans[i] = v->plans[--v->n_plans];
        break;
    }
    kn_compiled_log(cm, KN_LOG_RECOMPILES, "Rebuilding a plan of %s (%s): %s\n", cm->id.name, cm->id.where, why);
    return true;
}

static kn_status compiled_run(kn_compiled *cm, kn_version *v, const kn_graph *g, const kn_plan_value *wanted,
                             int n_wanted, kn_tensor **results, const int *into);

/* The most device memory the allocator held by the end of a run of this
 * function (its peak since the last reset: weights, inputs, the plan's
 * buffers, library workspaces, CUDA-graph pools). */
static void note_device_memory(kn_compiled *cm, kn_device dev)
{
    kn_device_ctx *dc = kn_backend_get(dev);
    if (!dc || !dc->be->memory) return;
    kn_memory_stats m;
    dc->be->memory(dc, &m);
    if (m.peak_reserved > cm->stats.device_peak_bytes) cm->stats.device_peak_bytes = m.peak_reserved;
}

/* The run of a graph is the RUN phase; building its plan, the first time,
 * and autotuning are phases of their own inside it. */
kn_status kn_compiled_run(kn_compiled *cm, kn_version *v, const kn_graph *g, const kn_plan_value *wanted,
                          int n_wanted, kn_tensor **results)
{
    return kn_compiled_run_into(cm, v, g, wanted, n_wanted, results, NULL);
}

kn_status kn_compiled_run_into(kn_compiled *cm, kn_version *v, const kn_graph *g, const kn_plan_value *wanted,
                               int n_wanted, kn_tensor **results, const int *into)
{
    kn_phase_begin(KN_PHASE_RUN);
    kn_status st = compiled_run(cm, v, g, wanted, n_wanted, results, into);
    kn_phase_end(KN_PHASE_RUN);
    return st;
}

static kn_status run_plan(kn_compiled *cm, kn_version *v, const kn_graph *g, kn_plan *plan, kn_tensor **ins,
                         const kn_plan_value *wanted, int n_wanted, kn_tensor **results, const int *into);

static kn_status compiled_run(kn_compiled *cm, kn_version *v, const kn_graph *g, const kn_plan_value *wanted,
                             int n_wanted, kn_tensor **results, const int *into)
{
    kn_plan *plan = v && cm->opt.compiler ? version_plan(cm, v, g, wanted, n_wanted) : NULL;
    if (plan) {
        /* the inputs' tensors: on the stack for the usual graph, on the
         * heap for one with hundreds (a function of 300 arguments) */
        kn_tensor *on_stack[256], **ins = on_stack;
        if (g->n_inputs > 256 && !(ins = malloc(sizeof *ins * (size_t)g->n_inputs)))
            return kn_error(KN_ERR_OOM, "out of host memory running a graph of %d inputs", g->n_inputs);
        kn_status st = run_plan(cm, v, g, plan, ins, wanted, n_wanted, results, into);
        if (ins != on_stack) free(ins);
        return st;
    }
    kn_tensor **values = calloc((size_t)g->n_nodes * KN_MAX_OUTPUTS + 1, sizeof *values);
    if (!values) return kn_error(KN_ERR_OOM, "out of host memory running a graph");
    kn_status st = kn_graph_run(g, cm->opt.settings, values);
    for (int i = 0; i < n_wanted; i++) {
        results[i] = st == KN_OK ? values[wanted[i].node * KN_MAX_OUTPUTS + wanted[i].out] : NULL;
        kn_tensor_retain(results[i]);
    }
    if (st == KN_OK)
        for (int i = 0; i < g->n_nodes * KN_MAX_OUTPUTS; i++) kn_tensor_release(values[i]);
    free(values);
    return st;
}

/* A version's plan, on the graph's bound inputs (ins: room for them). */
static kn_status run_plan(kn_compiled *cm, kn_version *v, const kn_graph *g, kn_plan *plan, kn_tensor **ins,
                         const kn_plan_value *wanted, int n_wanted, kn_tensor **results, const int *into)
{
    for (int i = 0; i < g->n_inputs; i++) ins[i] = g->inputs[i].tensor;
    if (plan->baked.storage && drop_stale_plan(cm, v, plan, ins)) {
        plan = version_plan(cm, v, g, wanted, n_wanted);
        if (!plan) return compiled_run(cm, NULL, g, wanted, n_wanted, results, NULL); /* op by op, as without a plan */
    }
    /* fresh random nodes draw at this call's counters, not the build's */
    kn_plan_bind_rng(plan, g);
    plan->fault_kernel = cm->check.fault_kernel;
    if (cm->opt.check_numerics || cm->check.once) {
        int bad = -1;
        char why[KN_REASON_MAX];
        KN_TRY(kn_plan_check(plan, ins, 1e-4, &bad, why, sizeof why));
        cm->check.runs++;
        if (bad >= 0) {
            const kn_kernel *k = &plan->code.fusion.prog.kernels[bad];
            size_t n = (size_t)snprintf(cm->check.report, sizeof cm->check.report,
                                        "kernel %s (ops", k->name);
            for (int i = 0; i < k->n_nodes && n < sizeof cm->check.report; i++) {
                const kn_node *nd = &plan->g.nodes[k->nodes[i]];
                if (nd->op < KN_OP_COUNT)
                    n += (size_t)snprintf(cm->check.report + n, sizeof cm->check.report - n, " %s at %s",
                                          kn_op_name((kn_op)nd->op), nd->where);
            }
            if (n < sizeof cm->check.report)
                snprintf(cm->check.report + n, sizeof cm->check.report - n, ") differs from the reference: %s",
                         why);
            kn_compiled_log(cm, KN_LOG_WARN, "kiln: numerics check of %s (%s): %s\n", cm->id.name, cm->id.where,
                            cm->check.report);
        }
    }
    if (cm->ledger.once) {
        free(cm->ledger.rows);
        cm->ledger.rows = NULL;
        cm->ledger.n_rows = 0;
        KN_TRY(kn_plan_precision(plan, ins, &cm->ledger.rows, &cm->ledger.n_rows));
        cm->ledger.runs++;
    }
    kn_status st;
    if (plan->tune.enabled && plan->tune.state == KN_TUNE_PENDING && !cm->opt.check_numerics) {
        /* max-autotune's search, inside this first call */
        kn_tune_session ts = {0};
        ts.cache_dir = kn_settings_cache_dir(cm->opt.settings);
        ts.budget_s = kn_settings_or_defaults(cm->opt.settings)->autotune.budget_s - cm->stats.autotune_s;
        ts.log = autotune_log;
        ts.log_ud = cm;
        ts.t0 = kn_clock_s();
        kn_phase_begin(KN_PHASE_AUTOTUNE);
        st = kn_plan_autotune(plan, ins, results, &ts);
        kn_phase_end(KN_PHASE_AUTOTUNE);
        if (ts.kernels_total) cm->stats.autotune_s += kn_clock_s() - ts.t0;
        cm->stats.autotune_kernels += ts.measured;
        cm->stats.autotune_candidates += ts.candidates;
        if (ts.resume_total) {
            kn_compiled_log(cm, KN_LOG_WARN,
                            "kiln: %s (%s): autotuning resumed where Ctrl-C stopped it: %d of %d kernels were "
                            "left to tune; %d tuned now\n",
                            cm->id.name, cm->id.where, ts.resume_left, ts.resume_total, ts.kernels_done);
            cm->stats.autotune_interrupted = ts.interrupted || any_search_interrupted(cm);
        }
        cm->stats.autotune_interrupted |= ts.interrupted;
        cm->stats.autotune_out_of_budget |= ts.out_of_budget;
        if (ts.kernels_total) autotune_done(cm, plan, &ts);
    } else if (kn_mode_records(cm->id.mode) && !cm->opt.check_numerics) {
        bool replayed = false;
        int before = plan->rec.state;
        double launch_before = plan->rec.launch_s, in_before = plan->rec.copy_in_s,
               out_before = plan->rec.copy_out_s, alloc_before = plan->rec.out_alloc_s;
        st = kn_plan_run_recorded_into(plan, ins, results, into, &replayed);
        cm->stats.replay_out_alloc_s += plan->rec.out_alloc_s - alloc_before;
        cm->stats.replay_launch_s += plan->rec.launch_s - launch_before;
        cm->stats.replay_copy_in_s += plan->rec.copy_in_s - in_before;
        cm->stats.replay_copy_out_s += plan->rec.copy_out_s - out_before;
        if (replayed) {
            cm->stats.replays++;
            cm->stats.recorded_writes = 0;
            for (int o = 0; plan->rec.wb && o < plan->n_outputs; o++) cm->stats.recorded_writes += plan->rec.wb[o];
        }
        if (plan->rec.state == KN_REC_NEVER && before != KN_REC_NEVER) {
            snprintf(cm->stats.cuda_graph_why, sizeof cm->stats.cuda_graph_why, "%s", plan->rec.why);
            /* torch says "skipping cudagraphs due to ..." once; so does kiln, on a GPU */
            kn_compiled_log(cm, kn_device_kind_of(plan->device) == KN_DEVICE_CPU || plan->rec.by_choice ? KN_LOG_CUDAGRAPHS | KN_LOG_AUTOTUNE
                                                                              : KN_LOG_WARN,
                            "kiln: %s (%s): a graph runs without a CUDA graph: %s\n", cm->id.name,
                            cm->id.where, plan->rec.why);
        }
    } else {
        st = kn_plan_run(plan, ins, results);
    }
    if (plan->mem.peak_bytes > cm->stats.peak_bytes) cm->stats.peak_bytes = plan->mem.peak_bytes;
    note_device_memory(cm, plan->device);
    return st;
}

/* ---- compiled functions -------------------------------------------------- */

kn_status kn_compiled_new(const char *fn_name, const char *fn_where, kn_compiled **out)
{
    kn_compiled *cm = calloc(1, sizeof *cm);
    if (!cm) return kn_error(KN_ERR_OOM, "out of host memory for a compiled function");
    snprintf(cm->id.name, sizeof cm->id.name, "%s", fn_name);
    snprintf(cm->id.where, sizeof cm->id.where, "%s", fn_where);
    snprintf(cm->id.mode, sizeof cm->id.mode, "default");
    cm->opt.cache_size_limit = 8;
    cm->opt.dynamic = -1;
    cm->opt.dynamic_numbers = true;
    cm->log.flags = KN_LOG_WARN;
    *out = cm;
    return KN_OK;
}

bool kn_mode_autotunes(const char *mode)
{
    return strncmp(mode, "max-autotune", 12) == 0;
}

bool kn_mode_records(const char *mode)
{
    return strcmp(mode, "reduce-overhead") == 0 || strcmp(mode, "max-autotune") == 0;
}

void kn_compiled_set_mode(kn_compiled *cm, const char *mode)
{
    snprintf(cm->id.mode, sizeof cm->id.mode, "%s", mode);
}

void kn_compiled_free(kn_compiled *cm)
{
    if (!cm) return;
    if (cm->cap.active) kn_capture_close(&cm->cap);
    free(cm->ledger.rows);
    free(cm->cap.lazies);
    free(cm->cap.writes);
    free(cm->cap.kept);
    free(cm->cap.last_want);
    free(cm->cap.last_writes);
    for (int i = 0; i < cm->cap.n_grad_cleared; i++) kn_tensor_release(cm->cap.grad_cleared[i]);
    free(cm->cap.grad_cleared);
    free(cm->cap.call_breaks);
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        for (int v = 0; v < cm->cache.graphs[k].n_versions; v++) {
            kn_version *ver = &cm->cache.graphs[k].versions[v];
            for (int i = 0; i < ver->n_plans; i++) {
                kn_plan_free(ver->plans[i].plan);
                free(ver->plans[i].want);
                free(ver->plans[i].in_metas);
            }
            free(ver->plans);
            kn_graph_free(&cm->cache.graphs[k].versions[v].g);
            kn_sym_free(&cm->cache.graphs[k].versions[v].sym);
            free(cm->cache.graphs[k].versions[v].guards);
        }
        free(cm->cache.graphs[k].versions);
    }
    free(cm->cache.graphs);
    free(cm->cache.breaks);
    free(cm->cache.recompiles);
    free(cm->dyn.dims);
    for (int i = 0; i < cm->dyn.n_numbers; i++) kn_tensor_release(cm->dyn.numbers[i].last);
    free(cm->dyn.numbers);
    free(cm->log.text);
    free(cm);
}
