/* kn_lua_inspect: the inspection methods of a compiled callable (breaks,
 * recompiles, guards, graphs, kernels, ...). Private to scripting/. */
#ifndef KN_LUA_INSPECT_H
#define KN_LUA_INSPECT_H

#include <lua.h>

/* Add them to the methods table on the stack top. */
void kn_lua_compiled_inspect_methods(lua_State *L);

#endif
