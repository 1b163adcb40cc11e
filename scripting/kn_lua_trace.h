/* kn_lua_trace: the Lua side of capture. While a compiled callable traces
 * its function (kn_lua_state's cap is set), every op binding hands its call
 * to kn_lua_run, which appends a node instead of computing. What only Lua
 * knows goes to core/capture with it: the user's source lines and stacks,
 * the names of variables, parameters and baked-in numbers, and whether the
 * trace called something a replay could not repeat. Private to scripting/. */
#ifndef KN_LUA_TRACE_H
#define KN_LUA_TRACE_H

#include <stddef.h>

#include <lua.h>

#include "kn_autograd.h"
#include "kn_capture.h"

/* How this state runs an op (kn_exec, core/autograd): eagerly with its
 * settings, or appended to the graph being captured. Autograd records at
 * the one entry both go through, and runs backward's ops the same way. */
typedef struct {
    kn_exec base;
    lua_State *L;
    /* set_where: the state's where_override before it (restored after) */
    bool overriding;
    char saved_where[128];
} kn_lua_exec;
void kn_lua_exec_init(kn_lua_exec *ex, lua_State *L);

/* The capture of the compiled call in progress in this state, or NULL. */
kn_capture *kn_lua_active_capture(lua_State *L);
/* Run an op: eagerly, or appended to the graph being captured, through
 * autograd's entry (kn_autograd_run), which records it when an input
 * requires grad. Pushes the outputs and returns their count; raises on
 * error. */
int kn_lua_run(lua_State *L, kn_opcall *c, kn_device dev);
/* A placeholder for the Lua number at idx baked into the graph (pushed). */
kn_tensor *kn_lua_capture_number(lua_State *L, int idx, kn_dtype dt, const kn_tensor *like);
/* The value of t, breaking the graph first when t is a traced placeholder
 * whose value does not exist yet; `method` names what needs it. */
kn_tensor *kn_lua_need_value(lua_State *L, kn_tensor *t, const char *method);
/* Record a graph break (category, reason, hint) at the user's line and run
 * what was captured; nothing when no capture is active. */
void kn_lua_graph_break(lua_State *L, const char *category, const char *reason, const char *hint);
/* The trace in progress called something whose result may differ next
 * time (print, io, math.random): replaying it would be wrong. (A random op
 * without a seed is not: a replay draws its numbers from the stream.) */
void kn_lua_mark_impure(lua_State *L, const char *what);

/* Print and drop what the compiled function logged. */
void kn_lua_trace_flush_log(kn_compiled *cm);
/* Name, into buf ("" if none), a local or upvalue of the innermost user
 * function rawequal to the value at idx. */
void kn_lua_trace_find_name(lua_State *L, int idx, char *buf, size_t size);
/* Build the parameter-name map of the call about to be traced: from the
 * module at module_idx (its named_parameters and named_buffers), or, when
 * module_idx is 0, from the modules the function at fn_idx reaches through
 * its upvalues and globals ("fc1.weight", "layers.3.bias"). */
void kn_lua_trace_param_map(lua_State *L, int module_idx, int fn_idx);
/* dst:copy_(src) while cap traces (Tensor.copy_): the graph computes src
 * and writes it into dst once it ran; returns 1 (dst on the stack). */
int kn_lua_traced_copy(lua_State *L, kn_capture *cap, kn_tensor *dst, kn_tensor *src);
/* Whether the compiled call runs a module in train mode: the module at
 * module_idx (0: none), else a module the function at fn_idx holds in an
 * upvalue or a global (directly or in a plain table of modules); its name
 * ("model", "layers.2") into what. */
bool kn_lua_trace_training(lua_State *L, int module_idx, int fn_idx, char *what, size_t size);

/* The debug hook that was set before kn_lua_trace_watch. */
typedef struct {
    lua_Hook hook;
    int mask, count;
} kn_lua_trace_hook;
/* Watch the calls of the trace about to run (the capture is set) for
 * impure ones, clearing the state's impure mark; kn_lua_trace_unwatch
 * restores the hook saved. */
void kn_lua_trace_watch(lua_State *L, kn_lua_trace_hook *saved);
void kn_lua_trace_unwatch(lua_State *L, const kn_lua_trace_hook *saved);

#endif
