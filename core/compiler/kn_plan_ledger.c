/* kn_plan_ledger: the precision ledger (kn_plan.h, kn_plan_precision).
 *
 * For every library kernel of a plan with an f32 result (matmul,
 * convolution, attention: the kernels whose engine decides how f32 is
 * computed), the inputs the plan gave it on this call are run three ways:
 * through the same op on the plan's device with the plan's engine choice
 * (its autotuned variant, epilogue aside), on the CPU in float64 (the
 * reference), and on the CPU in f32 (a true-f32 computation: FMA in f32,
 * what the "ieee" contract measures against). The ledger row gives both
 * errors against the reference, and whether the kernel's is within twice
 * the true-f32 one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_plan.h"
#include "kn_plan_impl.h"
#include "kn_view.h"

/* Slack for results that true f32 gets exactly (an error of 0): a few
 * units of f32's rounding of the reference's largest element. */
#define LEDGER_FLOOR 4.0e-7

static bool is_ledger_op(int op)
{
    return op == KN_OP_MATMUL || op == KN_OP_CONV2D || op == KN_OP_ATTENTION;
}

/* t on the CPU as float64, contiguous (*host must be freed) */
static kn_status host_f64(kn_tensor *t, const kn_settings *settings, double **host, int64_t *n)
{
    kn_tensor *cpu = NULL, *f = NULL;
    *host = NULL;
    KN_TRY(kn_tensor_to_device(t, KN_CPU, settings, &cpu));
    kn_status st = kn_tensor_cast(cpu, KN_F64, &f);
    kn_tensor_release(cpu);
    if (st != KN_OK) return st;
    *n = kn_tensor_numel(f);
    *host = malloc(sizeof(double) * (size_t)(*n + 1));
    if (!*host) st = kn_error(KN_ERR_OOM, "out of host memory for the precision ledger");
    else kn_tensor_gather_host(f, *host);
    kn_tensor_release(f);
    return st;
}

/* max and RMS of |got - ref| over max |ref| (NaN in got where ref has a
 * number counts as an infinite error) */
static void rel_errors(const double *got, const double *ref, int64_t n, double *max_err, double *rms_err)
{
    double scale = 0, mx = 0, sq = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > scale) scale = fabs(ref[i]);
    if (scale == 0) scale = 1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(ref[i])) continue;
        double e = isnan(got[i]) ? INFINITY : fabs(got[i] - ref[i]) / scale;
        if (e > mx) mx = e;
        sq += e * e;
    }
    *max_err = mx;
    *rms_err = n ? sqrt(sq / (double)n) : 0;
}

kn_status kn_plan_rel_error(kn_tensor *got, kn_tensor *ref, const kn_settings *settings, double *max_err)
{
    double *hg = NULL, *hr = NULL, rms;
    int64_t ng = 0, nr = 0;
    kn_status st = host_f64(got, settings, &hg, &ng);
    if (st == KN_OK) st = host_f64(ref, settings, &hr, &nr);
    if (st == KN_OK && ng != nr)
        st = kn_error(KN_ERR_ARG, "precision: %lld elements against a reference of %lld", (long long)ng, (long long)nr);
    if (st == KN_OK) rel_errors(hg, hr, nr, max_err, &rms);
    free(hg);
    free(hr);
    return st;
}

bool kn_plan_within_contract(double err, double f32_err)
{
    return err <= 2 * f32_err + LEDGER_FLOOR;
}

bool kn_plan_contract_by_floor(double err, double f32_err)
{
    return kn_plan_within_contract(err, f32_err) && err > 2 * f32_err;
}

/* Run node n's op on dev with inputs in (cast to dt when dt is not
 * KN_DTYPE_COUNT); *out gets the result. */
static kn_status run_node(const kn_plan *p, const kn_node *n, kn_tensor **in, kn_device dev, kn_dtype dt, int variant,
                          kn_tensor **out)
{
    kn_opcall c;
    kn_opcall_init(&c, (kn_op)n->op);
    c.a = n->a;
    c.settings = p->settings;
    c.variant = variant;
    c.n_in = n->n_in;
    kn_tensor *moved[KN_MAX_INPUTS] = {0};
    kn_status st = KN_OK;
    for (int i = 0; i < n->n_in && st == KN_OK; i++) {
        kn_tensor *t = NULL;
        st = kn_tensor_to_device(in[i], dev, p->settings, &t);
        if (st == KN_OK && dt != KN_DTYPE_COUNT && kn_dtype_is_float(t->dtype)) {
            kn_tensor *cast = NULL;
            st = kn_tensor_cast(t, dt, &cast);
            kn_tensor_release(t);
            t = cast;
        }
        moved[i] = t;
        c.in[i] = t;
    }
    if (st == KN_OK) st = kn_op_eager(&c, dev);
    for (int i = 0; i < n->n_in; i++) kn_tensor_release(moved[i]);
    *out = st == KN_OK ? c.out[0] : NULL;
    for (int o = 1; st == KN_OK && o < c.n_out; o++) kn_tensor_release(c.out[o]);
    return st;
}

static kn_status ledger_row(const kn_plan *p, int k, kn_tensor *const *vals, kn_precision_row *row, bool *taken)
{
    const kn_fusion *f = &p->code.fusion;
    int node = f->kernel_at[k];
    const kn_node *n = &p->g.nodes[node];
    *taken = false;
    if (n->op >= KN_OP_COUNT || !is_ledger_op(n->op) || n->out[0].dtype != KN_F32) return KN_OK;
    kn_tensor *in[KN_MAX_INPUTS];
    for (int i = 0; i < n->n_in; i++) {
        in[i] = vals[n->in_node[i] * KN_MAX_OUTPUTS + n->in_out[i]];
        if (!in[i]) return KN_OK; /* an input the plan never materialized: nothing to measure on */
    }
    memset(row, 0, sizeof *row);
    row->kernel = k;
    snprintf(row->name, sizeof row->name, "%s", f->prog.kernels[k].name);
    snprintf(row->op, sizeof row->op, "%s", kn_op_name((kn_op)n->op));
    snprintf(row->where, sizeof row->where, "%s", n->where);
    row->variant = p->tune.variant ? p->tune.variant[k] : 0;
    kn_tensor *dev = NULL, *ref = NULL, *f32 = NULL;
    double *hd = NULL, *hr = NULL, *hf = NULL;
    int64_t nd = 0, nr = 0, nf = 0;
    kn_status st = run_node(p, n, in, p->device, KN_DTYPE_COUNT, row->variant, &dev);
    kn_device_ctx *dc = kn_backend_get(p->device);
    if (st == KN_OK && dc && dc->be->library_variant_label)
        dc->be->library_variant_label(dc, row->engine, sizeof row->engine);
    if (st == KN_OK && !row->engine[0])
        snprintf(row->engine, sizeof row->engine, "%s %s", kn_device_name(p->device), row->op);
    if (st == KN_OK) st = run_node(p, n, in, KN_CPU, KN_F64, 0, &ref);
    if (st == KN_OK) st = run_node(p, n, in, KN_CPU, KN_F32, 0, &f32);
    if (st == KN_OK) st = host_f64(dev, p->settings, &hd, &nd);
    if (st == KN_OK) st = host_f64(ref, p->settings, &hr, &nr);
    if (st == KN_OK) st = host_f64(f32, p->settings, &hf, &nf);
    if (st == KN_OK && (nd != nr || nf != nr))
        st = kn_error(KN_ERR_ARG, "precision ledger: %s gave %lld elements on the device, %lld in f64", row->name,
                      (long long)nd, (long long)nr);
    if (st == KN_OK) {
        rel_errors(hd, hr, nr, &row->max_err, &row->rms_err);
        rel_errors(hf, hr, nr, &row->f32_max_err, &row->f32_rms_err);
        row->meets = kn_plan_within_contract(row->max_err, row->f32_max_err);
        row->by_floor = kn_plan_contract_by_floor(row->max_err, row->f32_max_err);
        *taken = true;
    }
    kn_tensor_release(dev);
    kn_tensor_release(ref);
    kn_tensor_release(f32);
    free(hd);
    free(hr);
    free(hf);
    return st;
}

kn_status kn_plan_precision(kn_plan *p, kn_tensor *const *inputs, kn_precision_row **rows, int *n_rows)
{
    *rows = NULL;
    *n_rows = 0;
    kn_graph *g = &p->g;
    kn_tensor **res = calloc((size_t)p->n_outputs + 1, sizeof *res), **vals = NULL;
    kn_precision_row *out = calloc((size_t)p->code.fusion.prog.n_kernels + 1, sizeof *out);
    if (!res || !out) {
        free(res);
        free(out);
        return kn_error(KN_ERR_OOM, "out of host memory for the precision ledger");
    }
    kn_status st = kn_plan_run_ex(p, inputs, res, &vals, NULL);
    int n = 0;
    for (int k = 0; st == KN_OK && k < p->code.fusion.prog.n_kernels; k++) {
        bool taken = false;
        st = ledger_row(p, k, vals, &out[n], &taken);
        n += taken;
    }
    for (int i = 0; i < p->n_outputs; i++) kn_tensor_release(res[i]);
    for (int i = 0; vals && i < g->n_nodes * KN_MAX_OUTPUTS; i++) kn_tensor_release(vals[i]);
    free(vals);
    free(res);
    if (st != KN_OK) {
        free(out);
        return st;
    }
    *rows = out;
    *n_rows = n;
    return KN_OK;
}
