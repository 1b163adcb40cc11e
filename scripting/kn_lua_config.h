/* kn_lua_config: kiln.config, a plain Lua table read at each call, and how
 * its switches reach core. Private to scripting/. */
#ifndef KN_LUA_CONFIG_H
#define KN_LUA_CONFIG_H

#include <lua.h>

#include "kn_capture.h"

/* Make kiln.config (defaults, KILN_CACHE_DIR) as the field config of the
 * kiln table at index kiln, and as the registry's "kiln.config". */
void kn_lua_open_config(lua_State *L, int kiln);
/* Push kiln.config's backend switches (allow_tf32, cache_dir) and the
 * autotune search's options to core. */
void kn_lua_sync_config(lua_State *L);
/* Read kiln.config and this state's kiln.log into a compiled function's
 * settings, before its call (and sync the backend switches). */
void kn_lua_config_compiled(lua_State *L, kn_compiled *cm);

#endif
