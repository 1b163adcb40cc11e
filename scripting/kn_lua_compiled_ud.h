/* kn_lua_compiled_ud: the kiln.Compiled userdata, which the files of the
 * compiled callable share (kn_lua_compile.c: kiln.compile and calling;
 * kn_lua_replay.c: the direct replay; kn_lua_inspect.c, kn_lua_autotune.c:
 * its methods; kn_lua_viz.c: drawing it). Private to scripting/. */
#ifndef KN_LUA_COMPILED_UD_H
#define KN_LUA_COMPILED_UD_H

#include <stdbool.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "kn_capture.h"

#define KN_COMPILED_MT "kiln.Compiled"

#define KN_REPLAY_MAX 256 /* arguments, results and in-place writes (a fused optimizer step: 4 a parameter) */
/* values a replay that rebuilds autograd history may ask its graph for
 * (results and the values kept for backward) */
#define KN_REPLAY_TAPE_MAX 256

/* What a direct replay needs: when the last trace of a call made exactly one
 * graph, saw no impure call and returned only values of that graph (or
 * plain constants), later calls whose guards hold run the cached graph
 * without running the Lua function again. The Lua values it checks
 * (non-tensor arguments, upvalues, and everything reachable from them, the
 * globals and the module: see kn_lua_replay_snapshot in kn_lua_replay.c)
 * live in the uservalue's `replay` table. */
typedef struct {
    bool valid;
    int version;                    /* of graph 0, static */
    int nargs;
    int arg_input[KN_REPLAY_MAX];   /* tensor argument -> graph input, -2: a Lua value, -1: unused tensor */
    int n_results;
    int res_node[KN_REPLAY_MAX], res_out[KN_REPLAY_MAX]; /* res_node -1: a constant Lua value */
    int n_params;
    int param_input[64];            /* graph input of each parameter the snapshot did not see (path in the replay table) */
    char mode[32];
    /* unseeded random ops: how many counters of the state's stream the
     * traced call drew; a replay draws the same count from where the stream
     * is now, so every call gets new numbers as a traced one does */
    uint64_t rng_used;
    /* results with autograd history (a module in train mode, grad on):
     * the traced call's tape, which each replay builds again from its
     * values (kn_lua_replay_tape.h); NULL when none has history */
    struct kn_replay_tape *tape;
    /* in-place writes of the traced call (an optimizer's update): each the
     * graph value (node, out) copied into the tensor bound to graph input
     * write_input once the replay's graph ran */
    int n_writes;
    int write_input[KN_REPLAY_MAX], write_node[KN_REPLAY_MAX], write_out[KN_REPLAY_MAX];
    /* the gradients a training step leaves in .grad: each graph input
     * grad_input gets the graph value (grad_node, grad_out) once the
     * replay's graph ran, or none (grad_node -1: the call cleared it,
     * zero_grad, and its backward set none) */
    int n_grads;
    int grad_input[KN_REPLAY_MAX], grad_node[KN_REPLAY_MAX], grad_out[KN_REPLAY_MAX];
    /* a gradient the backward made afresh because the tensor had none when
     * the trace began (the call did not clear it): a replay needs it to
     * have none again, else the backward accumulates and the call traces */
    bool grad_needs_none[KN_REPLAY_MAX];
    /* tensors the call cleared the gradient of that its graph does not
     * read (a parameter no loss depends on): a replay clears them too
     * (retained; kn_lua_replay_forget releases them) */
    int n_clear_extra;
    kn_tensor *clear_extra[KN_REPLAY_MAX];
    /* results whose history the call's own backward spent (a training
     * step's loss): a replay marks them so (KN_GRAD_ORIGIN_SPENT) */
    bool res_spent[KN_REPLAY_MAX];
    /* the values the trace asked its graph for (kn_capture.last_want), in
     * its order, and where each value a replay needs (results, writes,
     * gradients, in run_replay's order) is in it: a replay asking in its
     * own order would get a second plan of the same graph (in
     * reduce-overhead a second CUDA graph holding its own memory).
     * n_trace_want 0: not recorded (a tape has its own list) */
    kn_plan_value *trace_want;
    int n_trace_want;
    int want_pos[3 * KN_REPLAY_MAX];
    /* the graph input each value the replay asks for should end up in (-1:
     * none; the writes alone), in the order it asks (the trace's list, or
     * run_replay's): kn_compiled_run_into's into, found once at the trace */
    int write_into[3 * KN_REPLAY_MAX];
    /* per graph input, the userdata of a tensor found through the snapshot
     * (the replay table's tensors list holds it; NULL: bound otherwise):
     * a replay reads its tensor without a Lua lookup */
    struct kn_lua_tensor_ud **tensor_ud;
    /* the snapshot's tables other than the globals, as a replay walks
     * them (lua_next): the entries of table t, in that order, end at
     * walk_end[t]; the tables are the replay table's walk_tables list, and
     * its fields list keeps every key and value alive (kn_lua_replay.c) */
    struct kn_snap_entry *walk;
    int *walk_end;
    int n_walk_tables;
    int n_walk; /* entries of the walk: what a replay compares, table field by field */
    bool grad_enabled; /* grad mode of the trace: a replay of a training graph needs the same */
    bool autocast_on;  /* kiln.autocast of the trace (its casts are in the graph): a replay needs the same */
    kn_dtype autocast_dtype;
} replay_t;

typedef struct {
    kn_compiled *cm;
    replay_t rp;
    int direct_replays;
    double replay_run_s; /* time inside kn_graph_run during replays */
    double replay_guard_s; /* time checking a direct replay's guards (those that held and those that did not) */
    char no_replay[384]; /* why the last trace cannot be replayed ("" when it can) */
    bool trains; /* a traced call ran backward: later calls keep saved values across breaks */
    uint64_t trace_seq0; /* the first tape node number of the latest trace (its nodes are this or later) */
    /* kiln.compile(f, {autocast = "bf16"}): every call runs under
     * kiln.autocast in that dtype (false: autocast off for its calls) */
    bool has_autocast, autocast_on;
    kn_dtype autocast_dtype;
} compiled_ud;

/* The compiled callable at idx (raises if it is not one, or was freed). */
compiled_ud *kn_lua_check_compiled(lua_State *L, int idx);

#endif
