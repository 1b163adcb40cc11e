/* kn_plan_tune: max-autotune's measured search, run inside a plan's first
 * call (see kn_plan.h and kn_autotune.h).
 *
 * The plan runs as usual; right after a tunable kernel has run with its
 * default, its other candidates run on the same inputs into the same
 * outputs: generated kernels in every configuration of
 * kn_kconfig_candidates (compiled together, one program per kernel),
 * library calls in every variant their backend offers. The default's
 * outputs are the reference: a candidate that differs beyond tolerance is
 * rejected and reported. Each survivor is timed (cache flushed before each
 * run, median of enough runs to be stable); the fastest wins, but a
 * non-default choice must be measurably faster (FASTER) to replace the
 * default. The winner runs last, so the values later kernels read are the
 * winner's, and is saved in the cache file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kn_autotune.h"
#include "kn_backend.h"
#include "kn_interrupt.h"
#include "kn_plan.h"
#include "kn_plan_impl.h"
#include "kn_view.h"
#include "kn_clock.h"

#define MAX_CANDS KN_TUNE_MAX_CANDS
#define MIN_REPS 5
#define MAX_REPS 60
#define STABLE_SPREAD 0.05 /* quartiles within 5% of the median */
#define FASTER 0.97        /* a non-default choice must take at most 97% of the default's time */

static kn_status keep_lib(kn_plan *p, void *lib)
{
    void **n = realloc(p->tune.libs, sizeof *n * (size_t)(p->tune.n_libs + 1));
    if (!n) return kn_error(KN_ERR_OOM, "out of host memory for autotuning");
    p->tune.libs = n;
    p->tune.libs[p->tune.n_libs++] = lib;
    return KN_OK;
}

static kn_status apply_choice(kn_plan *p, int kid, const char *choice, const char *cache_dir, kn_kconfig *cfg,
                              int *v);

/* ---- one kernel's search ---- */

typedef struct tune_job {
    run_ctx *r;
    int kid, node;
    kn_device_ctx *dc;
    bool library, fused;
    /* generated: the candidates as kernels (0 is the plan's own) and their entry points */
    kn_kernel *variants;
    void *fns[MAX_CANDS];
    void *lib;
    char *bufs[KN_KIR_MAX_ARGS];
    /* library: the call */
    kn_opcall c;
    kn_tensor *bias, *res;
    int act;
    /* a fused call's "unfused" candidate (index unfused_ci, -1: none): the
     * library call alone into tmp, then the epilogue's own kernel */
    int unfused_ci;
    kn_tensor *tmp;
    const kn_kernel *epi_kernel;
    void *epi_fn;
    char *epi_bufs[KN_KIR_MAX_ARGS];
    /* the outputs, and the default's values of them */
    int n_out;
    kn_tensor *out[KN_KIR_MAX_ARGS];
    kn_tensor *ref[KN_KIR_MAX_ARGS];
    /* the "ieee" contract (contract_setup): the float64 result, and the
     * error of the backend's strict f32 engine against it; f32_err < 0
     * when the contract does not apply to this job */
    kn_tensor *ref64;
    double f32_err;
} tune_job;

/* j's library call c (its bias and residual given: the contract's float64
 * run passes casts of them), fused or plain as j is */
static kn_status run_call(tune_job *j, kn_opcall *c, kn_tensor *bias, kn_tensor *res)
{
    return j->fused ? j->dc->be->library_fused(j->dc, c, bias, j->act, res) : j->dc->be->run(j->dc, c);
}

static kn_status job_run(tune_job *j, int ci)
{
    if (!j->library) {
        const kn_kernel *k = &j->variants[ci];
        return j->dc->be->launch(j->dc, k, j->fns[ci], j->bufs, k->shape);
    }
    if (ci == j->unfused_ci) {
        kn_opcall c = j->c;
        c.variant = 0;
        c.out[0] = j->tmp;
        KN_TRY(j->dc->be->run(j->dc, &c));
        return j->dc->be->launch(j->dc, j->epi_kernel, j->epi_fn, j->epi_bufs, j->epi_kernel->shape);
    }
    kn_opcall c = j->c;
    c.variant = ci;
    return run_call(j, &c, j->bias, j->res);
}

static kn_status time_once(tune_job *j, int ci, void *ea, void *eb, double *ms)
{
    if (j->dc->be->flush_cache) KN_TRY(j->dc->be->flush_cache(j->dc));
    KN_TRY(j->dc->be->event_record(j->dc, ea));
    KN_TRY(job_run(j, ci));
    KN_TRY(j->dc->be->event_record(j->dc, eb));
    return j->dc->be->event_elapsed_ms(j->dc, ea, eb, ms);
}

/* Median of at least MIN_REPS runs; more (up to MAX_REPS) while the
 * quartiles are apart and the candidate's share of the budget lasts. */
static kn_status measure(tune_job *j, int ci, double share_s, kn_tune_cand *cand)
{
    void *ea = NULL, *eb = NULL;
    KN_TRY(j->dc->be->event_create(j->dc, &ea));
    kn_status st = j->dc->be->event_create(j->dc, &eb);
    double ms[MAX_REPS], tmp[MAX_REPS];
    int n = 0;
    double t0 = kn_clock_s(), med = -1;
    while (st == KN_OK && n < MAX_REPS) {
        st = time_once(j, ci, ea, eb, &ms[n]);
        if (st != KN_OK) break;
        n++;
        if (n >= MIN_REPS) {
            bool stable;
            memcpy(tmp, ms, sizeof *ms * (size_t)n);
            med = kn_autotune_median_us(tmp, n, STABLE_SPREAD, &stable);
            if (stable || kn_clock_s() - t0 > share_s) break;
        }
    }
    if (ea) j->dc->be->event_destroy(j->dc, ea);
    if (eb) j->dc->be->event_destroy(j->dc, eb);
    KN_TRY(st);
    if (n < MIN_REPS) {
        bool stable;
        memcpy(tmp, ms, sizeof *ms * (size_t)n);
        med = kn_autotune_median_us(tmp, n, STABLE_SPREAD, &stable);
    }
    cand->us = med;
    cand->reps = n;
    return KN_OK;
}

/* How far a candidate may differ from the default: float kernels reorder
 * additions (and bf16/f16 round each store); integers must match. */
static double tolerance(kn_dtype dt, const kn_settings *settings)
{
    if (dt == KN_BF16 || dt == KN_F16) return 3e-2;
    if (dt == KN_F32) return kn_settings_allow_tf32(kn_settings_or_defaults(settings)) ? 1e-2 : 1e-4;
    if (dt == KN_F64) return 1e-9;
    return 0;
}

/* KILN_AUTOTUNE_FAULT: make a candidate wrong, to see it rejected. */
static void corrupt(tune_job *j)
{
    for (int o = 0; o < j->n_out; o++) {
        kn_tensor *t = j->out[o];
        if (!kn_dtype_is_float(t->dtype) || kn_tensor_numel(t) == 0) continue;
        unsigned char v[8];
        size_t es = kn_dtype_size(t->dtype);
        char *at = kn_tensor_data(t);
        if (j->dc->be->sync) j->dc->be->sync(j->dc);
        if (j->dc->be->to_host(j->dc, v, at, (int64_t)es) != KN_OK) return;
        kn_store_f64(v, t->dtype, kn_load_f64(v, t->dtype) + 1.0);
        j->dc->be->from_host(j->dc, at, v, (int64_t)es);
        return;
    }
}

/* ---- the "ieee" contract (kiln.config.f32_precision) ----
 * An f32 matmul, convolution or attention candidate may win only if its
 * error against float64, on this run's inputs, is within twice that of
 * the default, which in this mode is a true-f32 engine (cuBLASLt's and
 * cuDNN's strict FMA engines, kiln's f32 kernels). This replaces the
 * element-wise comparison with the default, which holds each element to
 * 1e-4 of itself: small elements of a long sum differ by more than that
 * between two correct f32 orders of summation (H200, a 4096-long sum: an
 * element of 0.333 differed by 1.2e-4 between kiln's split kernel and
 * cuBLASLt, whose errors against float64 were 3.2e-7 and 4.8e-7 of the
 * largest element). */

static bool contract_applies(const tune_job *j)
{
    const kn_plan *p = j->r->p;
    int op = j->c.op;
    return j->library && j->n_out == 1 && j->c.n_out == 1 && j->out[0]->dtype == KN_F32 &&
           !kn_settings_allow_tf32(kn_settings_or_defaults(p->settings)) &&
           (op == KN_OP_MATMUL || op == KN_OP_CONV2D || op == KN_OP_ATTENTION);
}

/* j's call once in float64 (inputs cast), and the default's error against
 * it (j->out[0] holds the default's result): j->ref64 and j->f32_err. A
 * failure leaves the contract off for this kernel (the caller logs why). */
static kn_status contract_setup(tune_job *j)
{
    const kn_plan *p = j->r->p;
    j->f32_err = -1;
    if (!contract_applies(j)) return KN_OK;
    kn_opcall c = j->c;
    kn_tensor *casts[KN_MAX_INPUTS + 2] = {0}, *bias = NULL, *res = NULL;
    kn_status st = KN_OK;
    c.variant = 0;
    for (int i = 0; i < c.n_in && st == KN_OK; i++)
        if (c.in[i] && kn_dtype_is_float(c.in[i]->dtype)) {
            st = kn_tensor_cast(c.in[i], KN_F64, &casts[i]);
            c.in[i] = casts[i];
        }
    if (st == KN_OK && j->bias) st = kn_tensor_cast(j->bias, KN_F64, &bias);
    if (st == KN_OK && j->res) st = kn_tensor_cast(j->res, KN_F64, &res);
    kn_meta m = {0};
    m.dtype = KN_F64;
    m.ndim = j->out[0]->ndim;
    memcpy(m.shape, j->out[0]->shape, sizeof m.shape);
    if (st == KN_OK) st = kn_tensor_new_meta(&m, p->device, &j->ref64);
    c.out[0] = j->ref64;
    if (st == KN_OK) st = run_call(j, &c, bias, res);
    double e = -1;
    if (st == KN_OK && (j->c.op == KN_OP_MATMUL || j->c.op == KN_OP_ATTENTION || j->c.op == KN_OP_CONV2D)) {
        /* a matmul's, attention's or convolution's default may itself be a
         * split method (the CUDA backend's): the true-f32 error is its
         * strict engine's */
        kn_opcall sc = j->c;
        kn_tensor *strict = NULL;
        m.dtype = KN_F32;
        st = kn_tensor_new_meta(&m, p->device, &strict);
        sc.variant = KN_VARIANT_STRICT;
        sc.out[0] = strict;
        if (st == KN_OK) st = run_call(j, &sc, j->bias, j->res);
        if (st == KN_OK) st = kn_plan_rel_error(strict, j->ref64, p->settings, &e);
        kn_tensor_release(strict);
    } else if (st == KN_OK) {
        st = kn_plan_rel_error(j->out[0], j->ref64, p->settings, &e); /* the other ops' defaults are strict */
    }
    if (st == KN_OK) j->f32_err = e;
    for (int i = 0; i < KN_MAX_INPUTS + 2; i++) kn_tensor_release(casts[i]);
    kn_tensor_release(bias);
    kn_tensor_release(res);
    return st;
}

/* false (why says so) when candidate's output breaks the contract */
static bool within_contract(tune_job *j, char *why, size_t size)
{
    if (j->f32_err < 0) return true;
    double e = 0;
    if (kn_plan_rel_error(j->out[0], j->ref64, j->r->p->settings, &e) != KN_OK) {
        snprintf(why, size, "its error against float64 could not be measured: %s", kn_last_error());
        return false;
    }
    if (kn_plan_within_contract(e, j->f32_err)) return true;
    snprintf(why, size, "breaks the ieee contract: error %.2e against float64, strict f32's %.2e", e, j->f32_err);
    return false;
}

static bool outputs_match(tune_job *j, char *why, size_t size)
{
    for (int o = 0; o < j->n_out; o++)
        if (!kn_tensor_close(j->out[o], j->ref[o], tolerance(j->out[o]->dtype, j->r->p->settings), j->r->p->settings,
                             why, size))
            return false;
    return true;
}

/* The call, outputs and (generated) candidate programs of kernel kid. */
static kn_status job_setup(tune_job *j, run_ctx *r, int kid, int node, bool fused, kn_kconfig *cfgs, int *n_cands)
{
    kn_plan *p = r->p;
    const kn_kernel *k = &p->code.fusion.prog.kernels[kid];
    memset(j, 0, sizeof *j);
    j->unfused_ci = -1;
    j->r = r;
    j->kid = kid;
    j->node = node;
    j->dc = kn_backend_get(p->device);
    j->library = !kn_plan_generated(k);
    j->fused = fused;
    *n_cands = 1;
    if (!j->library) {
        int n = kn_kconfig_candidates(k, kn_plan_target(p), cfgs, KN_TUNE_MAX_KCONFIGS);
        j->variants = calloc((size_t)n, sizeof *j->variants);
        if (!j->variants) return kn_error(KN_ERR_OOM, "out of host memory for autotuning");
        for (int i = 0; i < n; i++) {
            j->variants[i] = *k;
            j->variants[i].cfg = cfgs[i];
            if (i) snprintf(j->variants[i].name, sizeof j->variants[i].name, "%.70s_t%d", k->name, i % 100);
        }
        j->fns[0] = p->code.fns[kid];
        if (n > 1) {
            kn_kprogram prog = {n - 1, j->variants + 1};
            void *fns[MAX_CANDS] = {0};
            KN_TRY(j->dc->be->compile_program(j->dc, &prog, r->tune->cache_dir, &j->lib, fns, NULL));
            for (int i = 1; i < n; i++) j->fns[i] = fns[i - 1];
        }
        *n_cands = n;
        KN_TRY(kn_plan_kernel_bufs(r, kid, j->bufs));
        for (int a = 0; a < k->n_args; a++)
            if (k->args[a].is_output) j->out[j->n_out++] = r->val[k->args[a].node * KN_MAX_OUTPUTS + k->args[a].out];
    } else if (fused) {
        bool ok;
        KN_TRY(kn_plan_fused_call(r, kid, node, &j->c, &j->bias, &j->res, &ok));
        if (!ok) return kn_error(KN_ERR_UNSUPPORTED, "kernel %s: its fused call does not fit this run", k->name);
        j->act = p->epi.kernel[kid].act;
        int into = p->epi.kernel[kid].into, root = p->code.fusion.kernel_at[into];
        j->c.n_out = 1;
        j->c.out[0] = j->out[j->n_out++] = r->val[root * KN_MAX_OUTPUTS];
        /* the unfused candidate: the epilogue kernel reads the library's
         * output from tmp and everything else from this run's values */
        const kn_kernel *ek = &p->code.fusion.prog.kernels[into];
        bool can = p->code.fns[into] != NULL && kn_plan_generated(ek) &&
                   kn_tensor_new_meta(&p->g.nodes[node].out[0], p->device, &j->tmp) == KN_OK;
        for (int a = 0; can && a < ek->n_args; a++) {
            const kn_karg *ar = &ek->args[a];
            kn_tensor *t = ar->node == node ? j->tmp : r->val[ar->node * KN_MAX_OUTPUTS + ar->out];
            if (!t) can = false;
            else j->epi_bufs[a] = (char *)kn_tensor_data(t) + ar->offset * (int64_t)kn_dtype_size(ar->dtype);
        }
        if (can) {
            j->epi_kernel = ek;
            j->epi_fn = p->code.fns[into];
        }
    } else {
        const kn_node *n = &p->g.nodes[node];
        kn_opcall_init(&j->c, (kn_op)n->op);
        j->c.a = n->a;
        j->c.settings = p->settings;
        j->c.n_in = n->n_in;
        for (int i = 0; i < n->n_in; i++) j->c.in[i] = r->val[n->in_node[i] * KN_MAX_OUTPUTS + n->in_out[i]];
        j->c.n_out = n->n_out;
        for (int o = 0; o < n->n_out; o++) j->c.out[o] = j->out[j->n_out++] = r->val[node * KN_MAX_OUTPUTS + o];
    }
    for (int o = 0; o < j->n_out; o++) {
        if (!j->out[o]) return kn_error(KN_ERR_ARG, "kernel %s: an output is missing after its run", k->name);
        KN_TRY(kn_tensor_contiguous_copy(j->out[o], p->settings, &j->ref[o]));
    }
    return KN_OK;
}

static void job_free(tune_job *j, bool keep_lib_loaded)
{
    kn_tensor_release(j->tmp);
    kn_tensor_release(j->ref64);
    for (int o = 0; o < j->n_out; o++) kn_tensor_release(j->ref[o]);
    if (j->lib && !keep_lib_loaded && j->dc->be->release_program) j->dc->be->release_program(j->dc, j->lib);
    free(j->variants);
}

static void progress(kn_tune_session *s, const char *kernel, bool done)
{
    const kn_autotune_opts *o = s->opts;
    if (!o->progress) return;
    kn_autotune_progress pr = {kernel,        s->kernels_done, s->kernels_total, s->candidates,
                               kn_clock_s() - s->t0, s->budget_s,   done, s->resume_left, s->resume_total};
    o->progress(&pr, o->progress_ud);
}

/* "k3_... | winner  41.2 us  100% | other  44.9 us  92% | bad  rejected: ..." */
static void log_result(kn_tune_session *s, const kn_kernel *k, const kn_tune_cand *c, int n, int best)
{
    if (!s->log) return;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return;
    fprintf(f, "autotune %s  %s%s  %.1f us  100%%", k->name, c[best].label, best == 0 ? " (default)" : "",
            c[best].us);
    bool shown[MAX_CANDS] = {false};
    shown[best] = true;
    for (;;) { /* the others, fastest first */
        int m = -1;
        for (int i = 0; i < n; i++)
            if (!shown[i] && !c[i].status[0] && c[i].us >= 0 && (m < 0 || c[i].us < c[m].us)) m = i;
        if (m < 0) break;
        shown[m] = true;
        fprintf(f, "  | %s%s  %.1f us  %.0f%%", c[m].label, m == 0 ? " (default)" : "", c[m].us,
                100.0 * c[best].us / c[m].us);
    }
    for (int i = 0; i < n; i++)
        if (!shown[i] && c[i].status[0]) fprintf(f, "  | %s  %s", c[i].label, c[i].status);
    if (best != 0 && c[0].us >= 0) fprintf(f, "  (%.2fx the default)", c[0].us / c[best].us);
    fprintf(f, "\n");
    fclose(f);
    s->log(s->log_ud, text);
    free(text);
}

/* The same kernel earlier in this model (a repeated block) was measured:
 * take its choice (true), or reject an entry that no longer applies. */
static bool reuse_measured(kn_plan *p, kn_tune_session *s, int kid, kn_tune_result *tr)
{
    kn_tune_entry e;
    if (!kn_autotune_cache_find(s->cache_dir, p->tune.dev, tr->sig, &e)) return false;
    kn_kconfig cfg;
    int v;
    if (apply_choice(p, kid, e.choice, s->cache_dir, &cfg, &v) == KN_OK) {
        kn_plan_take_entry(tr, &e);
        s->kernels_done++;
        return true; /* its outputs are the default's: valid */
    }
    kn_autotune_cache_reject(s->cache_dir, &e, kn_last_error());
    return false;
}

/* Run, check and time candidates 0.. of job j into c[] within the kernel's
 * share of the budget: *tried how many were tried, *complete false when
 * Ctrl-C or the budget stopped before the last. */
static void measure_candidates(tune_job *j, kn_tune_session *s, const kn_kconfig *cfgs, int n, kn_tune_cand *c,
                               int *tried, bool *complete)
{
    const kn_kernel *k = &j->r->p->code.fusion.prog.kernels[j->kid];
    const kn_autotune_opts *o = s->opts;
    int left = s->kernels_total - s->kernels_done;
    double kernel_share = (s->budget_s - (kn_clock_s() - s->t0)) / (left > 0 ? left : 1);
    *tried = 0;
    *complete = true;
    for (int ci = 0; ci < (j->library ? MAX_CANDS : n); ci++) {
        kn_tune_cand *cd = &c[ci];
        cd->us = -1;
        if (ci == j->unfused_ci) snprintf(cd->choice, sizeof cd->choice, "unfused");
        else if (j->library) snprintf(cd->choice, sizeof cd->choice, ci ? "variant=%d" : "default", ci);
        else kn_kconfig_text(&cfgs[ci], cd->choice, sizeof cd->choice);
        snprintf(cd->label, sizeof cd->label, "%s", cd->choice);
        if (kn_interrupt_pending()) {
            s->interrupted = true;
            *complete = false;
            break;
        }
        if (kn_clock_s() - s->t0 > s->budget_s) {
            s->out_of_budget = true;
            *complete = false;
            break;
        }
        /* the correctness run (and warm-up); the default's was the plan's own run */
        kn_status rs = ci == 0 ? KN_OK : job_run(j, ci);
        if (rs == KN_ERR_RANGE) { /* the library has no more variants: last, the epilogue apart */
            if (!j->epi_kernel || j->unfused_ci >= 0) break;
            j->unfused_ci = ci;
            snprintf(cd->choice, sizeof cd->choice, "unfused");
            rs = job_run(j, ci);
        }
        if (ci == j->unfused_ci && rs == KN_OK) {
            char lib[KN_TUNE_LABEL - 40] = "library call";
            if (j->dc->be->library_variant_label) j->dc->be->library_variant_label(j->dc, lib, sizeof lib);
            snprintf(cd->label, sizeof cd->label, "%.60s, then %.60s", lib, j->epi_kernel->name);
        } else if (j->library && j->dc->be->library_variant_label && (ci == 0 || rs == KN_OK)) {
            if (ci == 0) rs = job_run(j, 0); /* to learn its label */
            j->dc->be->library_variant_label(j->dc, cd->label, sizeof cd->label);
        }
        *tried = ci + 1;
        if (rs != KN_OK) {
            snprintf(cd->status, sizeof cd->status, "failed: %s", kn_last_error());
            if (ci == 0) break; /* no default: nothing to compare with */
            continue;
        }
        if (ci > 0 && ci == o->fault_candidate) corrupt(j);
        char why[140];
        if (ci == 0 && contract_setup(j) != KN_OK) {
            j->f32_err = -1;
            snprintf(why, sizeof why, "%s", kn_last_error());
            if (s->log) {
                char msg[300];
                snprintf(msg, sizeof msg, "autotune %s: the ieee contract is not checked: %s\n", k->name, why);
                s->log(s->log_ud, msg);
            }
        }
        /* an f32 library kernel under the contract is held to it, the
         * default too (it is measured all the same, and loses to any
         * candidate that keeps the contract); any other to the default's
         * values, element by element */
        char default_broke[sizeof cd->status] = "";
        if (j->f32_err >= 0 && !within_contract(j, why, sizeof why)) {
            snprintf(ci == 0 ? default_broke : cd->status, sizeof cd->status, "rejected: %s", why);
            if (ci > 0) continue;
        }
        if (ci > 0 && j->f32_err < 0 && !outputs_match(j, why, sizeof why)) {
            snprintf(cd->status, sizeof cd->status, "rejected: differs from the default: %s", why);
            continue;
        }
        int remaining = (j->library ? 4 : n) - ci; /* library lists are short; assume a few more */
        if (ci == j->unfused_ci) remaining = 1;
        rs = measure(j, ci, kernel_share / (remaining > 0 ? remaining : 1), cd);
        if (rs != KN_OK) snprintf(cd->status, sizeof cd->status, "failed: %s", kn_last_error());
        else if (default_broke[0]) snprintf(cd->status, sizeof cd->status, "%s", default_broke);
        s->candidates++;
        progress(s, k->name, false);
    }
    if (c[0].us < 0) *complete = false; /* the default could not be timed: keep it */
}

/* The winner among the tried candidates: the fastest that passed, unless
 * within noise of the default. */
static int pick_best(const kn_tune_cand *c, int tried, bool complete)
{
    if (!complete) return 0; /* a kernel left half-searched keeps its default; a resumed search starts it again */
    bool default_ok = !c[0].status[0]; /* it can break the ieee contract */
    int best = default_ok ? 0 : -1;
    for (int ci = 1; ci < tried; ci++)
        if (!c[ci].status[0] && c[ci].us >= 0 && (best < 0 || c[ci].us < c[best].us)) best = ci;
    if (best < 0) return 0; /* none keeps it: the default stays, its status says why */
    if (best != 0 && default_ok && c[best].us > c[0].us * FASTER) best = 0; /* within noise of the default */
    return best;
}

/* Kernel k's measured choice into the cache file (a failure is logged, not
 * fatal). */
static void save_choice(kn_tune_session *s, const kn_plan *p, const kn_kernel *k, const kn_tune_result *tr)
{
    kn_tune_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.dev, sizeof e.dev, "%s", p->tune.dev);
    snprintf(e.sig, sizeof e.sig, "%s", tr->sig);
    snprintf(e.choice, sizeof e.choice, "%s", tr->choice);
    e.us = tr->us;
    e.default_us = tr->default_us;
    snprintf(e.name, sizeof e.name, "%s", k->name);
    snprintf(e.label, sizeof e.label, "%s", tr->label);
    char id[512];
    kn_plan_identity(p, id, sizeof id);
    if (kn_autotune_cache_put(s->cache_dir, id, &e) != KN_OK && s->log) {
        char msg[1200];
        snprintf(msg, sizeof msg, "autotune: the choice of %s is not saved: %s\n", k->name, kn_last_error());
        s->log(s->log_ud, msg);
    }
}

/* Kernel kid (root node, fused: it ran in its library epilogue) has just
 * run with its choice: search its candidates, keep and save the winner,
 * and run it last, so later kernels read the winner's values. */
static kn_status search_kernel(run_ctx *r, int kid, int node, bool fused)
{
    kn_plan *p = r->p;
    kn_tune_session *s = r->tune;
    kn_tune_result *tr = p->tune.result ? &p->tune.result[kid] : NULL;
    if (!tr || tr->source != KN_TUNED_NONE || !kn_plan_tunable(p, kid)) return KN_OK;
    if (s->interrupted || s->out_of_budget) {
        tr->source = KN_TUNED_SKIPPED;
        return KN_OK;
    }
    kn_kernel *k = &p->code.fusion.prog.kernels[kid];
    /* a kernel that became tunable during this run (its matmul's epilogue
     * was unfolded) has no key yet */
    if (!tr->sig[0]) KN_TRY(kn_plan_kernel_key(p, kid, tr->sig));
    if (reuse_measured(p, s, kid, tr)) return KN_OK;
    progress(s, k->name, false);
    tune_job j;
    kn_kconfig cfgs[MAX_CANDS];
    int n = 1;
    kn_status st = job_setup(&j, r, kid, node, fused, cfgs, &n);
    kn_tune_cand *c = calloc(MAX_CANDS, sizeof *c);
    if (!c && st == KN_OK) st = kn_error(KN_ERR_OOM, "out of host memory for autotuning");
    if (st != KN_OK) {
        free(c);
        job_free(&j, false);
        if (!kn_interrupt_pending()) return st;
        /* Ctrl-C during the candidates' compile: stop as between two candidates */
        s->interrupted = true;
        tr->source = KN_TUNED_SKIPPED;
        return KN_OK;
    }
    int tried;
    bool complete;
    measure_candidates(&j, s, cfgs, n, c, &tried, &complete);
    int best = pick_best(c, tried, complete);
    if (best != 0 && !j.library) {
        k->cfg = cfgs[best];
        p->code.fns[kid] = j.fns[best];
    }
    if (j.library) {
        p->tune.variant[kid] = best == j.unfused_ci ? 0 : best;
        kn_plan_set_unfused(p, kid, best == j.unfused_ci);
    }
    /* the winner's values are what later kernels read */
    st = job_run(&j, best);
    if (st == KN_OK && j.library && best == j.unfused_ci) {
        /* the epilogue kernel runs (and is searched) next in this run, on
         * the library's output, as it will in later runs */
        int into = p->epi.kernel[kid].into;
        kn_tensor_retain(j.tmp);
        r->val[node * KN_MAX_OUTPUTS] = j.tmp;
        if (r->folded) r->folded[into] = false;
    }
    bool keep = best != 0 && !j.library;
    if (keep && st == KN_OK) st = keep_lib(p, j.lib);
    job_free(&j, keep && st == KN_OK);
    if (st != KN_OK) {
        free(c);
        return st;
    }
    snprintf(tr->choice, sizeof tr->choice, "%s", c[best].choice);
    snprintf(tr->label, sizeof tr->label, "%s", c[best].label);
    tr->us = c[best].us;
    tr->default_us = c[0].us;
    tr->cands = c;
    tr->n_cands = tried;
    tr->source = complete ? KN_TUNED_MEASURED : KN_TUNED_SKIPPED;
    s->kernels_done++;
    if (complete) {
        s->measured++;
        log_result(s, k, c, tried, best);
        save_choice(s, p, k, tr);
    }
    progress(s, k->name, false);
    return KN_OK;
}

/* The whole program again, in the chosen configurations: what the next
 * process compiles from the cache file's choices, so its compile finds
 * this one in the persistent kernel cache instead of starting NVRTC (or
 * the C compiler) cold. */
static kn_status compile_chosen(kn_plan *p, const char *cache_dir)
{
    bool changed = false;
    for (int k = 0; k < p->code.fusion.prog.n_kernels; k++) {
        const kn_kconfig *c = &p->code.fusion.prog.kernels[k].cfg;
        changed = changed || c->block || c->ept || c->rows || c->unroll || c->tile;
    }
    if (!changed || !p->code.generated) return KN_OK;
    kn_device_ctx *dc = kn_backend_get(p->device);
    void **fns = calloc((size_t)p->code.fusion.prog.n_kernels + 1, sizeof *fns), *lib = NULL;
    if (!fns) return kn_error(KN_ERR_OOM, "out of host memory for autotuning");
    kn_status st = dc->be->compile_program(dc, &p->code.fusion.prog, cache_dir, &lib, fns, NULL);
    if (st == KN_OK) st = keep_lib(p, lib);
    if (st == KN_OK)
        for (int k = 0; k < p->code.fusion.prog.n_kernels; k++)
            if (fns[k]) p->code.fns[k] = fns[k];
    free(fns);
    return st;
}

kn_status kn_plan_autotune(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, kn_tune_session *s)
{
    /* one search per plan, even when the budget cuts it short; one that
     * Ctrl-C stopped goes on at the next call with the kernels it skipped */
    p->tune.state = KN_TUNE_DONE;
    s->opts = &kn_settings_or_defaults(p->settings)->autotune;
    int todo = 0, tunable = 0;
    for (int k = 0; p->tune.result && k < p->code.fusion.prog.n_kernels; k++) {
        if (!kn_plan_tunable(p, k)) continue;
        tunable++;
        if (p->tune.interrupted && p->tune.result[k].source == KN_TUNED_SKIPPED) {
            free(p->tune.result[k].cands);
            p->tune.result[k].cands = NULL;
            p->tune.result[k].n_cands = 0;
            p->tune.result[k].source = KN_TUNED_NONE;
        }
        todo += p->tune.result[k].source == KN_TUNED_NONE;
    }
    if (p->tune.interrupted && todo) {
        s->resume_left = todo;
        s->resume_total = tunable;
    }
    p->tune.interrupted = false;
    if (!todo) return kn_plan_run(p, inputs, results);
    s->kernels_total += todo;
    s->search_kernel = search_kernel;
    kn_status st = kn_plan_run_ex(p, inputs, results, NULL, s);
    if (s->interrupted) {
        p->tune.interrupted = true;
        p->tune.state = KN_TUNE_PENDING;
    }
    /* not fatal: the chosen kernels already run from their own programs */
    if (st == KN_OK && s->measured && compile_chosen(p, s->cache_dir) != KN_OK && s->log) {
        char msg[1200];
        snprintf(msg, sizeof msg, "autotune: the chosen program is not cached for later processes: %s\n",
                 kn_last_error());
        s->log(s->log_ud, msg);
    }
    s->spent_s = kn_clock_s() - s->t0;
    return st;
}

/* Switch compiled kernel kid to a choice: a generated one is compiled in
 * that configuration now. */
static kn_status apply_choice(kn_plan *p, int kid, const char *choice, const char *cache_dir, kn_kconfig *cfg,
                              int *v)
{
    kn_kernel *k = &p->code.fusion.prog.kernels[kid];
    bool unfused;
    KN_TRY(kn_plan_parse_choice(p, kid, choice, cfg, v, &unfused));
    if (!kn_plan_generated(k)) {
        p->tune.variant[kid] = *v;
        kn_plan_set_unfused(p, kid, unfused);
        return KN_OK;
    }
    if (memcmp(&k->cfg, cfg, sizeof *cfg) == 0) return KN_OK;
    kn_kernel *copy = malloc(sizeof *copy);
    if (!copy) return kn_error(KN_ERR_OOM, "out of host memory for autotuning");
    *copy = *k;
    copy->cfg = *cfg;
    void *lib = NULL, *fn = NULL;
    kn_kprogram prog = {1, copy};
    kn_device_ctx *dc = kn_backend_get(p->device);
    kn_status st = dc->be->compile_program(dc, &prog, cache_dir, &lib, &fn, NULL);
    free(copy);
    KN_TRY(st);
    KN_TRY(keep_lib(p, lib));
    k->cfg = *cfg;
    p->code.fns[kid] = fn;
    return KN_OK;
}

kn_status kn_plan_tune_pin(kn_plan *p, int kid, const char *choice, const char *cache_dir)
{
    if (kid < 0 || kid >= p->code.fusion.prog.n_kernels) return kn_error(KN_ERR_ARG, "autotune pin: no kernel %d", kid);
    kn_kernel *k = &p->code.fusion.prog.kernels[kid];
    if (!p->tune.result || !p->tune.variant) KN_TRY(kn_plan_tune_prepare(p, NULL));
    if (!kn_plan_tunable(p, kid))
        return kn_error(KN_ERR_ARG, "autotune pin: kernel %s has nothing to choose on %s", k->name,
                        kn_device_name(p->device));
    kn_kconfig cfg;
    int v;
    kn_tune_result *tr = &p->tune.result[kid];
    if (!tr->sig[0]) KN_TRY(kn_plan_kernel_key(p, kid, tr->sig));
    KN_TRY(apply_choice(p, kid, choice, cache_dir, &cfg, &v));
    char text[KN_TUNE_CHOICE];
    if (kn_plan_generated(k)) kn_kconfig_text(&cfg, text, sizeof text);
    else if (p->epi.kernel && p->epi.kernel[kid].into >= 0 && p->epi.kernel[kid].off)
        snprintf(text, sizeof text, "unfused");
    else snprintf(text, sizeof text, v ? "variant=%d" : "default", v);
    snprintf(tr->choice, sizeof tr->choice, "%s", text);
    snprintf(tr->label, sizeof tr->label, "%s", text);
    tr->source = KN_TUNED_PINNED;
    tr->us = -1;
    kn_plan_drop_recording(p); /* it replays the old kernel */
    kn_tune_entry e = {0};
    snprintf(e.dev, sizeof e.dev, "%s", p->tune.dev);
    snprintf(e.sig, sizeof e.sig, "%s", tr->sig);
    snprintf(e.choice, sizeof e.choice, "%s", text);
    e.us = -1;
    e.default_us = tr->default_us;
    e.pinned = 1;
    snprintf(e.name, sizeof e.name, "%s", k->name);
    snprintf(e.label, sizeof e.label, "%s", text);
    char id[512];
    kn_plan_identity(p, id, sizeof id);
    return kn_autotune_cache_put(cache_dir, id, &e);
}
