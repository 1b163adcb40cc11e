/* kn_plan: a compiled graph: passes, fusion, generated code, and the run.
 *
 * kn_plan_build takes a captured graph (inputs bound), runs the pass list,
 * fuses it into kernels, renders and compiles the generated ones through
 * the backend (with the persistent cache), and keeps everything needed to
 * run it again on new inputs of the same shapes. kn_plan_run binds the
 * inputs, runs the kernels in order and frees each intermediate value after
 * its last use. The code is split by concern; kn_plan.c lists the files.
 */
#ifndef KN_PLAN_H
#define KN_PLAN_H

#include "kn_fuse.h"
#include "kn_settings.h"

typedef struct kn_plan_value {
    int node, out;
} kn_plan_value;

typedef struct kn_plan {
    kn_graph g;          /* the optimized graph; inputs past n_orig_inputs are owned constants */
    int n_orig_inputs;
    int n_outputs;
    kn_plan_value *outputs; /* what the caller asked for, in its order, in g's numbering */
    int *pass_out;          /* node list given to the passes */
    kn_device device;
    /* the settings of whoever built it (a Lua state's, borrowed: they
     * outlive the plan; NULL: the defaults): its ops and kernels run with
     * them, so a plan runs as its own state asks, whichever state runs next */
    const kn_settings *settings;
    int fault_kernel;       /* testing the numerics check: corrupt this kernel's output (-1: none) */
    /* the program: the graph cut into kernels and the code that runs them */
    struct {
        kn_fusion fusion;
        void *lib;
        void **fns;
        bool generated;     /* false: the backend has no code generator; runs node by node */
        char *source;       /* the generated source (C), for :src */
    } code;
    /* values the passes may have read at build (fold_batch_norm bakes
     * parameters into new inputs, past n_orig_inputs): each original
     * input's storage and write version then, NULL when nothing was baked;
     * see kn_plan_stale */
    struct {
        const kn_storage **storage;
        uint64_t *version;
    } baked;
    /* random nodes that draw from the caller's stream (attrs.rng_fresh):
     * their node here and the caller's graph node they came from, whose
     * seed and offset each run takes (kn_plan_bind_rng) */
    struct {
        int n;
        int *node, *orig;
    } rng;
    /* what each build step cost, for cm:stats() */
    struct {
        double passes_s, codegen_s, backend_s;
        int generated; /* generated kernels compiled for it */
        int cached;    /* of those, loaded from a cache without a compiler run */
    } times;
    /* memory plan: the generated kernels' intermediate values share one
     * arena, placed by liveness (a value's bytes are reused once its last
     * reader has run); graph outputs and what views of them reach are not
     * in it, since they outlive the run */
    struct {
        int64_t *arena_off; /* per node * KN_MAX_OUTPUTS: offset in the arena, or -1 */
        int64_t arena_bytes;
        void *arena;        /* allocated at a run; kept for the next where the backend's free does not
                               cache (caches_freed), else given back when the last run using it ends */
        void *arena_seen;   /* the address scratch.arena_t's headers point into */
        int arena_runs;     /* runs using the arena now (a run inside a run shares it) */
        int64_t peak_bytes; /* most bytes of values alive at once in the last run (arena included) */
        kn_tensor **consts; /* per node: the constant's value on the device, made at the first run */
    } mem;
    /* a matmul whose following pointwise kernel (bias, relu, residual) runs
     * in the library call's epilogue instead; see plan_epilogues */
    struct {
        struct kn_plan_epi {
            int into;       /* the kernel folded into this one, -1: none */
            int bias_node, bias_out, res_node, res_out; /* res_node -1: no residual */
            int act;
            bool off;       /* max-autotune measured the two kernels apart faster: run them so */
        } *kernel;          /* per kernel */
        int n_folded;       /* how many kernels were folded, for cm:stats() */
    } epi;
    /* reduce-overhead: the recording (CUDA graph) of this plan, see kn_plan_run_recorded */
    struct {
        int state;          /* KN_REC_* */
        char why[256];      /* why it runs without a recording (KN_REC_NEVER) */
        void *exec;         /* the backend's replayable recording */
        kn_tensor **in;     /* per caller input: the static buffer the recording reads, or NULL
                               when it reads the caller's tensor in place (parameters) */
        void **ptr;         /* per caller input read in place: its data address when recorded */
        kn_tensor **out;    /* the recording's outputs (overwritten by each replay) */
        /* write-backs (kn_plan_run_recorded_into): per output, the caller's
         * input its value was asked to go into (-1: none), as recorded, and
         * whether the recording copies it there itself (wb) */
        int *into;
        bool *wb;
        /* the copies in and out as steps of the recording itself (a replay
         * is then one launch, the backend's graph_set_copy pointing them
         * at each call's tensors; KILN_GRAPH_COPIES=0 or a backend without
         * it copies around the launch instead): per caller input, the
         * recorded copy into its static buffer (-1: none) and the address
         * that copy reads now; per output, the recorded copy out of it
         * (-1: cloned after the launch) and the address it writes now */
        int *in_copy;
        const void **in_src;
        int *out_copy;
        void **out_dst;
        bool no_graph_copies; /* the backend could not find or change them: record without */
        int64_t replays;
        double launch_s;    /* host time in the backend's launches of the recording, over its replays */
        double copy_in_s;   /* host time copying callers' inputs into the static buffers, over its replays */
        double copy_out_s;  /* host time making the caller's results (new tensors, the copies pointed at
                               them or queued), over its replays */
        double out_alloc_s; /* the part of copy_out_s spent allocating the results */
        bool by_choice;     /* max-autotune chose to run without the recording (measured slower) */
        double replay_us, plain_us; /* what that measurement saw (0: not measured) */
    } rec;
    /* max-autotune (core/compiler/kn_plan_tune.c): per kernel, the library
     * variant it runs (0: the library's default pick) and what the search
     * measured or the cache gave; the compiled programs of chosen configurations */
    struct {
        bool enabled;       /* built with KN_PLAN_AUTOTUNE */
        int state;          /* KN_TUNE_*: PENDING again after a search Ctrl-C stopped */
        bool interrupted;   /* the last search was stopped by Ctrl-C: the next call resumes it */
        int *variant;
        struct kn_tune_result *result; /* per kernel */
        void **libs;
        int n_libs;
        int cache_hits;     /* kernels whose choice came from the cache file */
        char dev[17];       /* the device key of the choices */
    } tune;
    /* what a run reuses from the last one instead of allocating it again
     * (the launch path's host cost): its value table and folded flags, and
     * the tensor headers over the arena's slots. A run that finds them busy
     * (a run inside a run) or keeps its values allocates its own. */
    struct {
        kn_tensor **val;    /* per node * KN_MAX_OUTPUTS, all NULL between runs */
        bool *folded;       /* per kernel */
        bool busy;
        kn_tensor **arena_t; /* per node * KN_MAX_OUTPUTS: a borrowed tensor over its arena slot, or NULL */
    } scratch;
} kn_plan;

/* Per kernel of an autotuned plan. */
typedef struct kn_tune_result {
    int source;             /* KN_TUNED_* */
    char sig[17];           /* the cache key (kn_autotune.h) */
    char choice[64], label[128];
    double us, default_us;  /* the chosen one's median and the default's; < 0: not measured */
    int n_cands;
    struct kn_tune_cand *cands; /* what was measured (NULL when from the cache) */
} kn_tune_result;

enum { KN_TUNE_PENDING = 0, KN_TUNE_DONE };
enum {
    KN_TUNED_NONE = 0,      /* nothing to tune (views, fallbacks, folded kernels) or not reached */
    KN_TUNED_MEASURED,      /* searched in this process */
    KN_TUNED_CACHED,        /* the cache file's choice */
    KN_TUNED_PINNED,        /* kiln.autotune.pin */
    KN_TUNED_SKIPPED        /* tunable, but the budget ran out or the search was interrupted: default */
};

struct run_ctx; /* kn_plan_impl.h */

/* One max-autotune search (a compiled function's call); see kn_plan_autotune. */
typedef struct kn_tune_session {
    const char *cache_dir;
    const kn_autotune_opts *opts; /* the plan's settings' (set by kn_plan_autotune) */
    double budget_s;        /* what this function may still spend */
    double spent_s;         /* out: time spent searching (compiles included) */
    int measured;           /* out: kernels searched */
    int candidates;         /* out: candidates measured */
    bool out_of_budget, interrupted;
    /* out: a search that resumes one Ctrl-C stopped: the kernels left to
     * tune and the plan's tunable kernels (0, 0: a first search) */
    int resume_left, resume_total;
    void (*log)(void *ud, const char *text);
    void *log_ud;
    /* internal */
    double t0;
    int kernels_total, kernels_done;
    /* the search, run by the plan right after each kernel (set by
     * kn_plan_autotune: kn_plan_tune.c sits above the plan it runs) */
    kn_status (*search_kernel)(struct run_ctx *r, int kid, int node, bool fused);
} kn_tune_session;

enum { KN_REC_WARMUP = 0, KN_REC_RECORD, KN_REC_READY, KN_REC_NEVER };

/* Build a plan for the values `wanted` (node, out) of g, whose inputs are
 * bound, with settings (kept as p->settings: they must outlive the plan;
 * their cache dir is where its kernels are cached). pass_flags:
 * KN_PASSES_LOG / VERIFY and KN_PLAN_* from kn_passes.h. */
kn_status kn_plan_build(const kn_graph *g, const kn_plan_value *wanted, int n_wanted, const kn_settings *settings,
                        int pass_flags, kn_plan **out);
/* Run on inputs[0..n_orig_inputs) (same shapes, dtypes and strides as at
 * build); results[i] gets a new reference to wanted value i. */
kn_status kn_plan_run(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results);
void kn_plan_free(kn_plan *p);

/* Whether the plan baked values of its inputs (a folded batch norm) that
 * these inputs no longer hold: another tensor, or the same one written in
 * place since. Then it must be built again; why names the input. */
bool kn_plan_stale(const kn_plan *p, kn_tensor *const *inputs, char *why, size_t size);

/* Take the seed and counter offset of every fresh random node from g, the
 * caller's graph of this call (the one the plan was built from, or another
 * trace of the same structure): unseeded random ops draw new numbers at
 * every call, as they do eagerly. */
void kn_plan_bind_rng(kn_plan *p, const kn_graph *g);

/* kn_plan_run through a recording (reduce-overhead): the first call runs
 * as usual (warm-up: kernels loaded, library plans and workspaces made),
 * the second records the run into a replayable graph, later calls copy the
 * inputs that come from outside into the recording's static buffers and
 * replay it; results are copies of the recording's outputs, so a later
 * replay never changes a value the caller holds. A plan that cannot be
 * recorded (backend without recording, random ops, non-contiguous inputs,
 * a failed capture) runs as kn_plan_run from then on, with the reason in
 * p->rec.why (the caller reports it once, when rec.state turns KN_REC_NEVER).
 * *replayed: the recording answered this call (recorded now or replayed). */
kn_status kn_plan_run_recorded(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, bool *replayed);
/* kn_plan_run_recorded where into[o] >= 0 asks for output o's value to end
 * up in inputs[into[o]] (an in-place write the caller repeats: an updated
 * parameter or optimizer state). The recording itself copies it there
 * (unless KILN_RECORD_WRITES=0), as its last step, where that is safe: the input
 * is read in place (a parameter or guarded tensor), contiguous, of the
 * output's dtype and size, no other output shares its storage or goes into
 * it, and the plan is not autotuned (max-autotune times replays). Such an
 * output's results[o] is then the input tensor itself, its storage marked
 * written; every other output is a copy as before, and the caller copies
 * it. into may be NULL. */
kn_status kn_plan_run_recorded_into(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, const int *into,
                                    bool *replayed);

/* max-autotune. Plans built with KN_PLAN_AUTOTUNE take the cache file's
 * choices at build (tune.cache_hits); the first call then runs through
 * kn_plan_autotune, which measures every kernel still untuned on that
 * call's inputs (see core/compiler/kn_autotune.h), keeps the winners, saves them
 * and returns the call's results. KN_ERR_INTERRUPTED when Ctrl-C stopped
 * the search (what was measured is kept and saved). A search Ctrl-C
 * stopped leaves the plan PENDING: the next call resumes it, measuring
 * the kernels it skipped (s->resume_left of s->resume_total). */
kn_status kn_plan_autotune(kn_plan *p, kn_tensor *const *inputs, kn_tensor **results, kn_tune_session *s);
/* Pin kernel kid to a choice ("default", "block=128 ept=4", "variant=3"):
 * compiled now, saved in the cache as pinned; the recording is dropped. */
kn_status kn_plan_tune_pin(kn_plan *p, int kid, const char *choice, const char *cache_dir);
/* Forget the recording (its kernels changed): the next calls warm up and record again. */
void kn_plan_drop_recording(kn_plan *p);
/* Whether kernel kid runs with the next kernel in its library epilogue. */
static inline bool kn_plan_epi_active(const kn_plan *p, int kid)
{
    return p->epi.kernel && p->epi.kernel[kid].into >= 0 && !p->epi.kernel[kid].off;
}

/* Fusion edge e's reason as this plan runs it: kn_fuse_edge.reason, and
 * a note when the backend folds the consumer into the library call's
 * epilogue (then the two run as one call). */
void kn_plan_edge_reason(const kn_plan *p, const kn_fuse_edge *e, char *buf, size_t size);

/* Whether kernel kid has anything to tune on this plan's device. */
bool kn_plan_tunable(const kn_plan *p, int kid);

/* Numerics check: run the plan and, node by node, the reference executor
 * on the same inputs, and compare every value a kernel materializes. On a
 * difference beyond rtol (relative to max(1, |reference|); NaN only where
 * the reference has NaN) *bad_kernel gets the first such kernel and why a
 * description; -1 when all agree. */
kn_status kn_plan_check(kn_plan *p, kn_tensor *const *inputs, double rtol, int *bad_kernel, char *why,
                        size_t size);

/* One row of the precision ledger: an f32 library kernel (matmul, conv,
 * attention) on the inputs a plan gave it. Errors are against a float64
 * computation of the same op on the same inputs, relative to the
 * reference's largest magnitude: the kernel's (its engine: the plan's
 * variant on the plan's device, epilogue aside) and a true-f32 one's (f32
 * FMA on the CPU). meets: the "ieee" contract, the kernel's max error at
 * most twice the true-f32 one (a few f32 roundings of slack where that is
 * 0); by_floor: met only by that slack (over twice the true-f32 error). */
typedef struct kn_precision_row {
    int kernel;      /* index among the plan's kernels */
    char name[80];   /* the kernel's name, "k3_matmul_f32_64x128" */
    char op[32];
    char where[KN_WHERE_MAX];
    char engine[128]; /* what the device ran: the library's algorithm or kiln's kernel */
    int variant;      /* the plan's variant (0: the default pick) */
    double max_err, rms_err;
    double f32_max_err, f32_rms_err;
    bool meets;
    bool by_floor;
} kn_precision_row;

/* Run the plan on inputs and measure every f32 library kernel of it
 * (kn_precision_row). *rows (malloc'd, NULL when none) gets n_rows rows. */
kn_status kn_plan_precision(kn_plan *p, kn_tensor *const *inputs, kn_precision_row **rows, int *n_rows);

#endif
