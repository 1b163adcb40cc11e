/* kn_capture: turning a run of Lua code into graphs, and the per-function
 * cache of compiled graph versions with their guards.
 *
 * The model: while a compiled function runs, every kiln op appends a node to
 * the current graph instead of computing, and returns a placeholder tensor
 * (kn_tensor with a kn_lazy). When the code needs a value (a graph break) or
 * returns, the graph so far is looked up in the cache (guards), compiled if
 * no version fits (a recompilation, explained), and run; every placeholder
 * still referenced gets its value, and capture goes on in the next graph.
 *
 * Nothing here knows Lua: the scripting layer passes source locations,
 * names and break reasons in as plain strings.
 */
#ifndef KN_CAPTURE_H
#define KN_CAPTURE_H

#include <stdbool.h>

#include "kn_fs.h"
#include "kn_graph.h"
#include "kn_lazy.h"
#include "kn_plan.h"
#include "kn_symbolic.h"
#include "kn_phase.h"

struct kn_capture;

#define KN_MAX_FRAMES 16
#define KN_CATEGORY_MAX 32
#define KN_REASON_MAX 512

/* A graph break, as the design's message shows it. */
typedef struct kn_break {
    char category[KN_CATEGORY_MAX]; /* data-dependent control flow | unsupported op | explicit break | eager function */
    char reason[KN_REASON_MAX];
    char hint[KN_REASON_MAX];
    char where[KN_WHERE_MAX];       /* "file.lua:LINE" */
    int n_frames;                   /* user stack, innermost first */
    char frame_where[KN_MAX_FRAMES][KN_WHERE_MAX];
    char frame_fn[KN_MAX_FRAMES][64];
    int graph;                      /* the graph the break ended */
} kn_break;

/* "Graph break in user code at ...\n  Reason: ...\n  Hint: ...\n  User stack:\n    ..." */
void kn_break_format(const kn_break *b, char *buf, size_t size);

#define KN_MAX_REASONS 16

typedef struct kn_recompile {
    int graph, version;
    char where[KN_WHERE_MAX];
    int n_reasons;
    char reasons[KN_MAX_REASONS][KN_REASON_MAX]; /* "0/0: tensor 'x' size mismatch at dim 2: ..." */
    int n_dynamic;                               /* numbers this recompile made dynamic */
    char dynamic[KN_MAX_REASONS][KN_NAME_MAX];   /* "number 's' at f.lua:5" */
} kn_recompile;

/* A cached, compiled version of graph K of a function: the structure it
 * was traced with (inputs unbound) and the mode it was compiled for. */
typedef struct kn_version {
    kn_graph g;
    char mode[32];
    bool training; /* traced with a module in train mode (kn_compiled.id.training) */
    char training_what[64]; /* which module, when training */
    bool dynamic;  /* some input dims are symbolic */
    kn_symbols sym; /* valid when dynamic */
    int n_guards;
    char (*guards)[KN_REASON_MAX]; /* human-readable guard strings */
    /* compiled plans, one per set of values wanted (and, for a dynamic
     * version, per set of input shapes) */
    struct kn_plan_entry {
        kn_plan_value *want;
        int n_want;
        kn_meta *in_metas;
        kn_plan *plan;
    } *plans;
    int n_plans;
    char plan_error[KN_REASON_MAX]; /* why it runs op by op ("" when it compiles) */
} kn_version;

typedef struct kn_graph_cache {
    kn_version *versions;
    int n_versions;
    bool eager; /* hit the cache size limit: runs without caching from now on */
} kn_graph_cache;

typedef struct kn_compile_stats {
    int calls;
    int graphs_run;
    int cache_hits;   /* a traced graph matched a cached version */
    int cache_misses; /* a version was compiled */
    int eager_fallbacks;
    double capture_s, passes_s, codegen_s, backend_s;
    int plans_built;
    int kernels_generated, kernels_cached; /* of the plans built: compiled, and of those loaded from a cache */
    int64_t peak_bytes; /* most bytes of intermediate values alive in one compiled run */
    int64_t device_peak_bytes; /* most device memory the allocator held by the end of a compiled run (0: none kept) */
    int64_t replays;    /* calls answered by replaying a recording (reduce-overhead) */
    double replay_launch_s; /* host time those replays spent in the backend's launch (cudaGraphLaunch) */
    double replay_copy_in_s, replay_copy_out_s; /* and copying inputs in, outputs out (rec.copy_in_s) */
    double replay_out_alloc_s; /* the part of replay_copy_out_s spent allocating the results */
    int recorded_writes; /* values the latest recording writes into their inputs itself
                            (kn_plan_run_recorded_into) */
    char cuda_graph_why[256]; /* why the last graph that could not be recorded was not */
    /* max-autotune */
    double autotune_s;       /* time spent searching (the budget counts it) */
    int autotune_cache_hits; /* kernels whose choice came from the cache file */
    int autotune_kernels;    /* kernels searched */
    int autotune_candidates; /* candidates measured */
    bool autotune_interrupted, autotune_out_of_budget;
    /* the first call, phase by phase (kn_phase: exclusive seconds that add
     * up to first_call_s, the call from its capture's start to its end) */
    double first_call_s;
    double first_call_phase_s[KN_PHASE_COUNT];
} kn_compile_stats;

/* Whether a mode searches (max-autotune, max-autotune-no-cudagraphs). */
bool kn_mode_autotunes(const char *mode);

/* Whether a mode records CUDA graphs (reduce-overhead, max-autotune). */
bool kn_mode_records(const char *mode);

typedef struct kn_compiled kn_compiled;

typedef struct kn_capture {
    kn_compiled *cm;
    bool active;
    kn_graph g;  /* the graph being captured */
    int segment; /* its index in this call */
    kn_lazy **lazies;
    int n_lazies, cap_lazies;
    int ops_per_graph[256];
    int graph_version[256]; /* the cached version each graph of this call ran (-1: eagerly) */
    int n_graphs; /* graphs run in this call */
    int n_breaks; /* breaks in this call */
    kn_break *call_breaks; /* every break of this call, in order */
    int cap_call_breaks;
    double t_start;
    uint64_t first_tensor_id; /* tensors with ids from here on were made during this call */
    double capture_s; /* time spent capturing in this call */
    /* this call phase by phase: the totals at its start, then (at its end)
     * its own seconds of each phase and its length */
    double phase_at_start[KN_PHASE_COUNT];
    double call_phase_s[KN_PHASE_COUNT];
    double call_s, call_t0;
    /* what compiling cost in this call: the phases of the plans it built,
     * and all of it (guards and version lookup included); the generated
     * kernels compiled, and how many of them came from a cache */
    double passes_s, codegen_s, backend_s, compile_s;
    int kernels_generated, kernels_cached;
    /* in-place writes of the open graph (kn_capture_write): each tensor
     * written and the placeholder of its new value, copied in once the
     * graph ran; call_writes counts this call's (a replay cannot repeat
     * them) */
    struct kn_capture_write {
        kn_tensor *dst, *src;
    } *writes;
    int n_writes, cap_writes;
    int call_writes;
    int call_backwards; /* backward passes traced in this call */
    /* the .grad changes this call made by hand (zero_grad, t.grad = v),
     * noted by the front end: the tensors whose gradient it cleared
     * (retained until the next call), which a direct replay of a training
     * step clears again, and how many it set to a tensor, which a replay
     * cannot repeat (a backward's gradients are values of the graph: the
     * replay finds them on the tensors themselves) */
    kn_tensor **grad_cleared;
    int n_grad_cleared, cap_grad_cleared;
    int call_grad_assigns;
    /* values a tape node saved are outputs of their graph (kept for a
     * backward in a later graph or after the call); else only what else
     * refers to them is (inference: the fused graph stays as it was).
     * The caller sets it per call: a module in train mode, grad mode on */
    bool keep_saved;
    /* the part of a training step the ops traced now belong to (KN_PART_*,
     * kn_graph.h), set by the caller; in_backward while a backward runs */
    int part;
    bool in_backward;
    /* the outputs of this call's graphs that a tape node saved (kept for
     * a backward in a later graph or after the call): cm:saved() lists
     * them */
    struct kn_kept_value {
        int graph, node, out;
    } *kept;
    int n_kept, cap_kept;
    /* the values the last graph run computed (its plan's outputs, in
     * order): a direct replay that rebuilds the call's autograd history
     * asks for the same values, the kept ones with the results, and so
     * runs the same plan */
    kn_plan_value *last_want;
    int n_last_want;
    /* the in-place writes of this call's graphs once they ran: the value
     * (node, out of its graph) each written tensor got, and which input of
     * that graph the tensor is (-1: one the graph does not read). A direct
     * replay of a call that wrote copies the same values into the tensors
     * the replay binds to those inputs */
    struct kn_applied_write {
        int graph, node, out, input;
    } *last_writes;
    int n_last_writes, cap_last_writes;
} kn_capture;

/* Copy value v into dst's storage, as a write of a traced call does once
 * its graph ran (same shape and dtype; dst contiguous): a direct replay
 * repeats those writes with it. */
kn_status kn_capture_copy_value(kn_tensor *dst, kn_tensor *v);

/* Note that the call being traced cleared t's gradient (cleared) or set
 * it to a tensor; out of memory drops the note and counts an assignment,
 * so the call is traced again rather than replayed wrongly. */
void kn_capture_note_grad_set(kn_capture *cap, kn_tensor *t, bool cleared);
/* Forget the notes (at the start of each call, and when the capture is freed). */
void kn_capture_forget_grad_sets(kn_capture *cap);
/* Whether the call being traced cleared the gradient of the tensor with this id. */
bool kn_capture_grad_cleared(const kn_capture *cap, uint64_t tensor_id);

struct kn_compiled {
    /* which function this is and what it is compiled for: named in every
     * message, and the mode is part of every version's guards */
    struct {
        char name[64];              /* "forward" */
        char where[KN_WHERE_MAX];   /* "samples/transformer_block.lua:21" */
        char mode[32];
        /* this call's train/eval mode: whether a module it runs is in
         * train mode, and which ("model", "net.encoder"); set by the
         * caller at each call, guarded by every version */
        bool training;
        char training_what[64];
    } id;
    /* how the caller asked for it to be compiled: kiln.compile's options,
     * and kiln.config as read again at every call */
    struct {
        int cache_size_limit;
        bool error_on_recompile;
        bool fullgraph;
        bool compiler;          /* run versions through compiled plans (else op by op) */
        bool check_numerics;    /* compare every compiled run with the reference */
        int dynamic;            /* -1: automatic (a dim that changed once), 0: never, 1: every dim */
        bool dynamic_numbers;   /* a Lua number that changed once becomes an input (kiln.config.dynamic_numbers) */
        int pass_flags;         /* KN_PASSES_* and KN_PLAN_* (kn_passes.h) */
        /* the calling state's settings (TF32, the persistent kernel cache
         * kiln.config.cache_dir, the autotune budget), borrowed: its plans
         * keep and run with them; NULL: the defaults */
        const kn_settings *settings;
    } opt;
    /* what earlier calls traced: per graph of a call its compiled versions,
     * and the breaks and recompiles met on the way, for explain() */
    struct {
        kn_graph_cache *graphs;
        int n_graphs;
        kn_break *breaks;       /* distinct breaks seen so far, in order */
        int n_breaks;
        kn_recompile *recompiles;
        int n_recompiles;
    } cache;
    kn_compile_stats stats;
    /* the numerics check: its state between calls and what it found */
    struct {
        bool once;              /* cm:check: this call only */
        int fault_kernel;       /* tests of the checker: add 1 to this kernel's first output (-1: none) */
        char report[KN_REASON_MAX * 2]; /* the last check's finding ("" = all agreed) */
        int runs;
    } check;
    /* the precision ledger (cm:precision): its rows from the last call that
     * asked for them (kn_plan_precision), one per f32 library kernel */
    struct {
        bool once;              /* cm:precision: this call only */
        kn_precision_row *rows; /* owned */
        int n_rows;
        int runs;               /* plans measured for it (0: nothing compiled ran) */
    } ledger;
    /* dims made dynamic automatically (opt.dynamic -1), by input name, so
     * later versions trace them symbolic */
    struct {
        struct {
            char name[KN_NAME_MAX];
            int dim;
        } *dims;
        int n_dims;
        /* Lua numbers made dynamic: the ordinal-th number of line `where`
         * of a graph (names are found by value, so they do not identify
         * one), and the input name it is traced as from now on ("number
         * 's' at f.lua:5"): an input of the graph, read at every call,
         * instead of a constant */
        struct kn_dyn_number {
            int graph; /* the graph of a call (k of "k/v") it is in */
            char where[KN_WHERE_MAX];
            int ordinal;
            char name[KN_NAME_MAX];
            kn_tensor *last; /* its value at the latest trace (owned), for replays */
        } *numbers;
        int n_numbers;
    } dyn;
    kn_capture cap;
    /* Messages for the caller to show (recompiles, cache-limit warnings),
     * appended as they happen; the scripting layer prints and clears them. */
    struct {
        char *text;
        size_t len;
        int flags;              /* which kinds of message to keep: KN_LOG_* */
    } log;
};

enum { KN_LOG_RECOMPILES = 1, KN_LOG_GRAPH_BREAKS = 2, KN_LOG_GUARDS = 4, KN_LOG_WARN = 8 };

kn_status kn_compiled_new(const char *fn_name, const char *fn_where, kn_compiled **out);
void kn_compiled_free(kn_compiled *cm);
/* Change the mode: later graphs fail their "mode" guard and recompile. */
void kn_compiled_set_mode(kn_compiled *cm, const char *mode);

/* Start capturing one call. */
kn_status kn_capture_begin(kn_compiled *cm);
/* The placeholder standing for a real tensor in the current graph: reuses
 * the input already made for t (by identity), else adds one with `kind` and
 * `name`. A placeholder of an earlier graph of this call becomes an input
 * named "graph K output N". New reference in *out. */
kn_status kn_capture_input(kn_capture *cap, kn_tensor *t, kn_input_kind kind, const char *name,
                           const char *where, kn_tensor **out);
/* Whether t needs kn_capture_input before it can enter an op. */
bool kn_capture_needs_input(const kn_capture *cap, const kn_tensor *t);
/* A placeholder for a Lua number baked into the graph. */
kn_status kn_capture_const(kn_capture *cap, double value, kn_dtype dt, const char *name,
                           const char *where, kn_tensor **out);
/* Append the op; c->in are placeholders of the current graph. Shape
 * inference runs now, so a shape error comes back here, at the user's line.
 * Output placeholders in c->out (owned by the caller). */
kn_status kn_capture_op(kn_capture *cap, kn_opcall *c, const char *where);
/* dst:copy_(src) while capturing: src is a placeholder of the current
 * graph. A dst of the current graph now stands for src's value; any other
 * (a parameter, a .grad, optimizer state) gets src's value copied into
 * its storage once the graph ran, and until then the graph's later reads
 * of it read src. */
kn_status kn_capture_write(kn_capture *cap, kn_tensor *dst, kn_tensor *src);
/* Whether t's storage has a write of the open graph still to apply (its
 * data is stale until the graph runs: a read of it must break the graph). */
bool kn_capture_pending_write(const kn_capture *cap, const kn_tensor *t);
/* Record a break and end the current graph: run it and give every live
 * placeholder its value. With fullgraph, fails with the break report instead. */
kn_status kn_capture_break(kn_capture *cap, const kn_break *b);
/* End the current graph (run it) and start the next one. */
kn_status kn_capture_flush(kn_capture *cap);
/* Finish the call: flush when ok, then detach every placeholder. */
kn_status kn_capture_end(kn_capture *cap, bool ok);

/* A Lua number entering an op as a scalar operand next to a tensor on
 * `dev`: a constant (kn_capture_const), or, once the number was made
 * dynamic by a recompile, a 0-dim input of the graph holding it. */
kn_status kn_capture_number(kn_capture *cap, double value, kn_dtype dt, kn_device dev, const char *name,
                            const char *where, kn_tensor **out);
/* Whether graph input `in` is a dynamic Lua number (not a tensor). */
bool kn_input_is_number(const kn_graph_input *in);
/* The 0-dim tensor dynamic number input `input_name` of graph `graph` held
 * at the latest trace (borrowed), or NULL. A replay binds it: every Lua
 * value the trace read is unchanged then, so the number is too. */
kn_tensor *kn_compiled_number_value(const kn_compiled *cm, int graph, const char *input_name);

/* kiln.mark_dynamic: dim of the tensor with this id is symbolic wherever
 * it enters a graph. */
void kn_mark_dynamic(uint64_t tensor_id, int dim);
/* Size `dim` of output `out` of node `node` of a version, as its expression
 * ("s0*8") when the version is dynamic, else the number. */
void kn_version_size_text(const kn_version *v, int node, int out, int dim, char *buf, size_t size);

/* Fast guard for replay: does tensor t pass input i of static version v
 * (identity for parameters aside)? */
bool kn_version_input_matches(const kn_version *v, int i, const kn_tensor *t);

/* Run graph g (inputs bound) of version v for the values wanted:
 * through v's compiled plan (built on first use), or node by node when v is
 * NULL (eager fallback) or its plan cannot be built. results[i] gets new
 * references. */
kn_status kn_compiled_run(kn_compiled *cm, kn_version *v, const kn_graph *g, const kn_plan_value *wanted,
                          int n_wanted, kn_tensor **results);
/* kn_compiled_run where into[i] >= 0 asks for wanted value i to end up in
 * graph input into[i]'s tensor (a write the caller repeats). A recorded
 * run may put it there itself (kn_plan_run_recorded_into): results[i] is
 * then that input's tensor, and the caller's copy finds nothing to do;
 * otherwise results[i] is the value, for the caller to copy. */
kn_status kn_compiled_run_into(kn_compiled *cm, kn_version *v, const kn_graph *g, const kn_plan_value *wanted,
                               int n_wanted, kn_tensor **results, const int *into);
/* The plan a version ran most recently (NULL when none). */
kn_plan *kn_version_plan(const kn_version *v);

enum { KN_LOG_FUSION = 16, KN_LOG_KERNELS = 32, KN_LOG_PASSES = 64, KN_LOG_CUDAGRAPHS = 128, KN_LOG_AUTOTUNE = 256 };

/* Append to cm->log.text (kept when `kind` is in cm->log.flags). */
void kn_compiled_log(kn_compiled *cm, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
