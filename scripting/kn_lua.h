/* kn_lua: the `kiln` Lua module, the top of scripting/ (kn_lua.c). The
 * scripting layer is the only C (with repl/ and kiln.onnx's binding,
 * onnx/kn_lua_onnx.c) that includes lua.h; its parts turn kn_status codes
 * into Lua errors at the user's line. Each part has its own header, private
 * to scripting/ and the bindings kn_lua.c opens. */
#ifndef KN_LUA_H
#define KN_LUA_H

#include <lua.h>

/* Open kiln in L: returns the kiln table (as require "kiln" does). Every
 * Lua state has its own kiln: random stream, compiled call in progress and
 * settings are per state (kn_lua_state.h). */
int luaopen_kiln(lua_State *L);

#endif
