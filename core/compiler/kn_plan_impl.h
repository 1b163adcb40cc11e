/* kn_plan_impl: what kn_plan.c (building and running plans) shares with
 * kn_plan_tune.c (max-autotune's search inside a plan's run). Private to
 * core/. */
#ifndef KN_PLAN_IMPL_H
#define KN_PLAN_IMPL_H

#include "kn_plan.h"

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

/* kn_plan_tune.c */
kn_status kn_plan_tune_prepare(kn_plan *p, const char *cache_dir);
kn_status kn_plan_tune_kernel(run_ctx *r, int kid, int node, bool fused);
void kn_plan_tune_free(kn_plan *p);

#endif
