/* kn_plan_impl: what the plan's files share with each other (kn_plan.c
 * lists them): kn_plan.c's helpers, kn_plan_run.c's run state and entry
 * points (for kn_plan_tune.c, max-autotune's search inside a run) and
 * kn_plan_choice.c's autotuning choices (for kn_plan_build.c and
 * kn_plan_tune.c). Private to core/. It names the plan types without
 * including kn_plan.h, so kn_plan.c can include it without a circle. */
#ifndef KN_PLAN_IMPL_H
#define KN_PLAN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_autotune.h"
#include "kn_kir.h"

typedef struct kn_plan kn_plan;
typedef struct kn_tune_session kn_tune_session;
typedef struct kn_tune_result kn_tune_result;

/* The most candidates one kernel's search measures (library variants are
 * numbered below it): an f32 matmul on Hopper has about 24 (cuBLASLt's
 * algorithms and split-K variants, the split kernel's eight tile shapes,
 * and cuBLASLt's first where the default is the split kernel). A
 * generated kernel's configurations stay at most KN_TUNE_MAX_KCONFIGS. */
#define KN_TUNE_MAX_CANDS 32
#define KN_TUNE_MAX_KCONFIGS 16

/* ---- kn_plan.c ---- */

/* The language the plan's device generates kernels in (NULL: none). */
const kn_render_target *kn_plan_target(const kn_plan *p);
/* The backend's identity (what a choice is valid for). */
void kn_plan_identity(const kn_plan *p, char *buf, size_t size);
/* The recording (p->rec) and its tables freed, the pointers NULL; its
 * state is the caller's to set (kn_plan_record.c, kn_plan_free). */
void kn_plan_free_recording(kn_plan *p);
/* Whether node's value is laid out other than contiguous (a library
 * kernel writing it permuted, kn_fuse_ex): the run hands the library those
 * strides, and the kernel's cache key names them. */
bool kn_plan_permuted_value(const kn_plan *p, int node);
/* Whether kernel k is generated (rendered and compiled by kiln), not a
 * library call. */
static inline bool kn_plan_generated(const kn_kernel *k)
{
    return k->kind == KN_KERNEL_POINTWISE || k->kind == KN_KERNEL_ROW;
}

/* ---- kn_plan_run.c ---- */

/* One run of a plan: the values computed so far. */
typedef struct run_ctx {
    kn_plan *p;
    kn_tensor **val; /* per node * KN_MAX_OUTPUTS */
    int64_t live, peak;
    bool keep;       /* keep every value (numerics check) */
    bool *folded;    /* per kernel: already computed by a library epilogue this run */
    kn_tensor *const *inputs; /* the caller's */
    kn_tune_session *tune;    /* max-autotune's first call: search each kernel once it ran */
} run_ctx;

/* A plan run; kept: keep every value (the numerics check); tune: search. */
kn_status kn_plan_run_ex(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, kn_tensor ***kept,
                         kn_tune_session *tune);
/* The argument addresses of generated kernel kid (its outputs allocated
 * when missing). */
kn_status kn_plan_kernel_bufs(run_ctx *r, int kid, char **bufs);
/* The library call of matmul kernel kid (node m) with the next kernel in
 * its epilogue: *ok false when this run's tensors do not fit it. */
kn_status kn_plan_fused_call(run_ctx *r, int kid, int m, kn_opcall *c, kn_tensor **bias, kn_tensor **res, bool *ok);

/* ---- kn_plan_choice.c ---- */

/* Choices. tune_prepare: the cache file's choices for every tunable kernel
 * (before the compile: their configurations are what gets compiled). */
/* kn_plan_epilogue.c: which pointwise kernels fold into the library call before them */
kn_status kn_plan_epilogues(kn_plan *p);
kn_status kn_plan_tune_prepare(kn_plan *p, const char *cache_dir);
/* Kernel kid's cache key: what it computes, on which shapes, dtypes and
 * strides, hashed (names and graph positions left out). */
kn_status kn_plan_kernel_key(const kn_plan *p, int kid, char sig[KN_TUNE_KEY]);
/* A choice text ("block=128 ept=4", "variant=3", "unfused", "default")
 * for kernel kid, parsed; applying it is the caller's. */
kn_status kn_plan_parse_choice(const kn_plan *p, int kid, const char *choice, kn_kconfig *cfg, int *variant,
                               bool *unfused);
/* Fold kernel kid's epilogue into its library call, or not. */
void kn_plan_set_unfused(kn_plan *p, int kid, bool unfused);
/* A kernel's result from a cache entry. */
void kn_plan_take_entry(kn_tune_result *tr, const kn_tune_entry *e);

/* The precision ledger's measure (kn_plan_ledger.c): max |got - ref| over
 * max |ref| (NaN where ref has a number: infinite), any devices and float
 * dtypes; and the "ieee" contract on it: at most twice a true-f32
 * computation's error, plus a floor for results true f32 gets exactly. The
 * autotuner holds f32 library candidates to the same test. */
kn_status kn_plan_rel_error(kn_tensor *got, kn_tensor *ref, const kn_settings *settings, double *max_err);
bool kn_plan_within_contract(double err, double f32_err);
/* Whether err keeps the contract only by its floor: within it, but over
 * twice the true-f32 error (the ledger says so, so that a kernel several
 * times less accurate than true f32 on small errors is not mistaken for
 * one within a factor of 2). */
bool kn_plan_contract_by_floor(double err, double f32_err);

#endif
