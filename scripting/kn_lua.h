/* kn_lua: the scripting layer's shared interface. scripting/ is the only C
 * (with repl/) that includes lua.h; everything here turns kn_status codes
 * into Lua errors at the user's line. */
#ifndef KN_LUA_H
#define KN_LUA_H

#include <lauxlib.h>
#include <lua.h>

#include "kn_op.h"

#define KN_TENSOR_MT "kiln.Tensor"

/* The tensor at idx, or a Lua error "bad argument #idx to 'fn' (tensor expected, got T)". */
kn_tensor *kn_lua_checktensor(lua_State *L, int idx);
/* The tensor at idx, or NULL if the value is not a kiln tensor. */
kn_tensor *kn_lua_totensor(lua_State *L, int idx);
/* Push a tensor userdata; takes over one reference of t (t may not be NULL). */
void kn_lua_pushtensor(lua_State *L, kn_tensor *t);
/* Raise a Lua error with kn_last_error() (the status names the kind). Never returns. */
int kn_lua_fail(lua_State *L, kn_status st);

/* Registration of the parts of the module (each adds fields to the kiln
 * table on the top of the stack). */
void kn_lua_open_tensor(lua_State *L);
void kn_lua_open_ops(lua_State *L);
void kn_lua_open_io(lua_State *L);     /* safetensors */
void kn_lua_open_system(lua_State *L); /* clock, device_info, ... */
void kn_lua_open_compile(lua_State *L); /* compile, explain, graph_break, eager, config, log */
void kn_lua_open_timing(lua_State *L);  /* kiln.profiler: events, ceilings (kn_lua_timing.c) */

/* ---- capture (kn_lua_compile.c) ---- */
struct kn_capture;
/* The capture of the compiled call in progress, or NULL. */
struct kn_capture *kn_lua_active_capture(void);
/* Run an op: eagerly, or appended to the graph being captured. Pushes the
 * outputs and returns their count; raises on error. */
int kn_lua_run(lua_State *L, kn_opcall *c, kn_device dev);
/* A placeholder for the Lua number at idx baked into the graph (pushed). */
kn_tensor *kn_lua_capture_number(lua_State *L, int idx, kn_dtype dt);
/* The value of t, breaking the graph first when t is a traced placeholder
 * whose value does not exist yet; `method` names what needs it. */
kn_tensor *kn_lua_need_value(lua_State *L, kn_tensor *t, const char *method);
/* Record a graph break (category, reason, hint) at the user's line and run
 * what was captured; nothing when no capture is active. */
void kn_lua_graph_break(lua_State *L, const char *category, const char *reason, const char *hint);
/* "file.lua:LINE" of the innermost user code. */
void kn_lua_where_str(lua_State *L, char *buf, size_t size);
/* The trace in progress called something whose result may differ next
 * time (a random op without a seed): replaying it would be wrong. */
void kn_lua_mark_impure(const char *what);

int luaopen_kiln(lua_State *L);

#endif
