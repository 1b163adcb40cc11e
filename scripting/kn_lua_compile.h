/* kn_lua_compile: kiln.compile and the compiled callable, kiln.config,
 * graph_break, eager, log (kn_lua_log.c), mark_dynamic. Private to
 * scripting/. */
#ifndef KN_LUA_COMPILE_H
#define KN_LUA_COMPILE_H

#include <lua.h>

/* Add them to the kiln table on the stack top. */
void kn_lua_open_compile(lua_State *L);

#endif
