/* kn_lua_onnx: kiln.onnx's C functions (reading ONNX files into Lua tables,
 * the node-name hook for captured ops). A Lua binding over scripting's parts
 * (tensor userdata, the state, errors at the user's line), opened only by
 * luaopen_kiln (scripting/kn_lua.c), the top of the Lua side. */
#ifndef KN_LUA_ONNX_H
#define KN_LUA_ONNX_H

#include <lauxlib.h>
#include <lua.h>

/* Adds kiln.onnx to the kiln table at the top of the stack. */
void kn_lua_open_onnx(lua_State *L);

#endif
