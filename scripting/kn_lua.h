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

int luaopen_kiln(lua_State *L);

#endif
