/* kn_pass_flags: the flags of kn_passes_run and kn_plan_build, apart so
 * that a pass (which kn_passes.c lists) can read them without including
 * the runner's header. */
#ifndef KN_PASS_FLAGS_H
#define KN_PASS_FLAGS_H

enum {
    KN_PASSES_VERIFY = 1, /* kn_graph_verify after each pass; an error names the pass and node */
    KN_PASSES_LOG = 2,    /* print the graph to stderr after each pass (KILN_LOGS=passes) */
    KN_PLAN_NO_EPILOGUES = 4, /* plans keep library epilogues as separate kernels (kiln.config.fold_epilogues = false) */
    KN_PLAN_AUTOTUNE = 8,     /* max-autotune: plans take cached choices and search at their first call */
    KN_PASSES_NO_ATTENTION = 16, /* skip the attention pass (the plan's backend has no attention kernel) */
    /* the channels-last pass (kn_pass_channels_last): which dtypes' convolutions run NHWC.
     * Without either it does not run. */
    KN_PASSES_NHWC_HALF = 32, /* bf16 and f16 */
    KN_PASSES_NHWC_F32 = 64,
    /* kn_plan_build: ask the plan's backend which dtypes to convert (kiln.config.channels_last = "auto") */
    KN_PLAN_NHWC_AUTO = 128,
    /* kn_plan_build: the plan's runs are CUDA-graph replays (reduce-overhead, max-autotune), which
     * clamp a bad index and report nothing: an embedding gather may then run inside the kernel that
     * reads it (kn_fuse_gathering), on a device that records (capture_begin) */
    KN_PLAN_GATHER_LOADS = 256,
    /* kn_pass_split_reductions: reductions over several dims as a row kernel and a small rest, on a
     * device that records (the GPU; KILN_CPU_SPLIT_REDUCTIONS=1 on the CPU, for tests) */
    KN_PASSES_SPLIT_REDUCTIONS = 512,
    /* kn_pass_k_major: fixed [K, N] matmul weights laid out k-contiguous where the plan's backend says
     * its matmul runs faster so (kn_backend.matmul_b_k_major; KILN_CPU_K_MAJOR_WEIGHTS=1 on the CPU,
     * for tests, takes every one) */
    KN_PASSES_K_MAJOR_WEIGHTS = 1024
};

#endif
