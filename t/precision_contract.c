/* t/precision_contract.c: the "ieee" contract's measure on the CPU
 * (core/compiler/kn_plan_ledger.c), the one the precision ledger and
 * max-autotune share: max |got - ref| over max |ref|, across dtypes and
 * devices; NaN where the reference has a number is an infinite error (so
 * it never passes); a zero reference is measured absolutely; and the
 * contract's bound, twice the true-f32 error plus a floor for results true
 * f32 gets exactly. The GPU side (split-f32 candidates held to it) is
 * t/split_gemm_contract.lua.
 */
#include <math.h>
#include <string.h>

#include "kn_plan_impl.h"
#include "kn_tensor.h"
#include "kn_view.h"
#include "tap.h"

static kn_tensor *vec(kn_dtype dt, const double *v, int n)
{
    int64_t shape[1] = {n};
    kn_tensor *t = NULL, *c = NULL;
    if (kn_tensor_new(KN_F64, 1, shape, KN_CPU, &t) != KN_OK) return NULL;
    memcpy(kn_tensor_data(t), v, sizeof(double) * (size_t)n);
    if (dt == KN_F64) return t;
    kn_tensor_cast(t, dt, &c);
    kn_tensor_release(t);
    return c;
}

static double err_of(kn_dtype dg, const double *got, const double *ref, int n, kn_status *st)
{
    kn_tensor *g = vec(dg, got, n), *r = vec(KN_F64, ref, n);
    double e = -1;
    *st = kn_plan_rel_error(g, r, NULL, &e);
    kn_tensor_release(g);
    kn_tensor_release(r);
    return e;
}

int main(void)
{
    kn_status st;
    const double ref[4] = {4, -2, 0.5, 1};
    const double got[4] = {4, -2.002, 0.5, 1.001};
    double e = err_of(KN_F64, got, ref, 4, &st);
    ok(st == KN_OK && fabs(e - 0.002 / 4) < 1e-12, "relative to the reference's largest magnitude: %.6g", e);
    const double same[4] = {4, -2, 0.5, 1};
    e = err_of(KN_F32, same, ref, 4, &st);
    ok(st == KN_OK && e == 0, "an f32 copy of exact values has no error (%g)", e);
    const double with_nan[4] = {4, NAN, 0.5, 1};
    e = err_of(KN_F32, with_nan, ref, 4, &st);
    ok(st == KN_OK && isinf(e), "NaN where the reference has a number is an infinite error (%g)", e);
    ok(!kn_plan_within_contract(e, 1e-6), "and never keeps the contract");
    const double zeros[3] = {0, 0, 0}, small[3] = {0, 1e-9, 0};
    e = err_of(KN_F64, small, zeros, 3, &st);
    ok(st == KN_OK && fabs(e - 1e-9) < 1e-20, "a zero reference: the error is absolute (%g)", e);
    const double longer[5] = {1, 2, 3, 4, 5};
    kn_tensor *g = vec(KN_F64, longer, 5), *r = vec(KN_F64, ref, 4);
    st = kn_plan_rel_error(g, r, NULL, &e);
    ok(st != KN_OK && strstr(kn_last_error(), "5 elements against a reference of 4"), "a size mismatch is an error: %s",
       kn_last_error());
    kn_tensor_release(g);
    kn_tensor_release(r);
    /* the bound: twice the true-f32 error, plus the floor */
    ok(kn_plan_within_contract(2e-6, 1e-6), "twice the true-f32 error keeps the contract");
    ok(!kn_plan_within_contract(2.5e-6, 1e-6), "2.5 times it does not");
    ok(kn_plan_within_contract(3e-7, 0), "where true f32 is exact, a few units of f32 rounding still pass (3e-7)");
    ok(!kn_plan_within_contract(1e-6, 0), "but not 1e-6");
    /* which passes are the floor's alone */
    ok(kn_plan_contract_by_floor(3e-7, 0), "3e-7 against an exact true f32 passes by the floor");
    ok(kn_plan_contract_by_floor(1.64e-7, 2.36e-8), "so does 7 times a true-f32 error of 2.4e-8");
    ok(!kn_plan_contract_by_floor(2e-6, 1e-6), "twice the true-f32 error passes by the factor");
    ok(!kn_plan_contract_by_floor(1e-7, 2e-7), "as does less than it");
    ok(!kn_plan_contract_by_floor(1e-6, 0), "and a break of the contract is no pass at all");
    done_testing();
}
