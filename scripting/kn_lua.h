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

/* L's settings (kn_settings.h), which its ops and compiled calls run with.
 * kiln.config writes its keys into them; an embedder sets here what has no
 * key there (autotune.progress, the search's progress callback, in place of
 * kiln's bar on stderr). Valid until L is closed. */
struct kn_settings *kn_lua_settings(lua_State *L);

#endif
