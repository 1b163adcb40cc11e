/* kn_lua_autotune: max-autotune from Lua: cm:autotune(), cm:autotune_pin()
 * and kiln._autotune_*. Private to scripting/. */
#ifndef KN_LUA_AUTOTUNE_H
#define KN_LUA_AUTOTUNE_H

#include <lua.h>

/* Add cm:autotune() and cm:autotune_pin() to the methods table on the stack top. */
void kn_lua_compiled_autotune_methods(lua_State *L);
/* Add kiln._autotune_cache_path and kiln._autotune_reload to the kiln table at kiln. */
void kn_lua_autotune_functions(lua_State *L, int kiln);

#endif
