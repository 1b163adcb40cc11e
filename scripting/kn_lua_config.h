/* kn_lua_config: kiln.config, a table whose assignments are written
 * through to the state's settings (kn_lua_state.settings: TF32, the cache
 * dir, the autotune budget), so an eager op reads no Lua table; the other
 * keys are compiled calls' options, read at each compiled call. Reads of
 * kiln.config (and pairs) see what was assigned, as from a plain table.
 * Private to scripting/. */
#ifndef KN_LUA_CONFIG_H
#define KN_LUA_CONFIG_H

#include <lua.h>

#include "kn_capture.h"

/* Keys of kiln.config holding a value the settings cannot take
 * (kn_lua_state.config_bad): assigning it is no error, as assigning to a
 * plain table is none; the next compiled call raises it. */
enum { KN_LUA_CONFIG_BAD_CACHE_DIR = 1, KN_LUA_CONFIG_BAD_BUDGET = 2, KN_LUA_CONFIG_BAD_MEMORY = 4 };

/* Make kiln.config (defaults, KILN_CACHE_DIR) as the field config of the
 * kiln table at index kiln; the table behind it is the registry's
 * "kiln.config". Sets the state's settings to match. */
void kn_lua_open_config(lua_State *L, int kiln);
/* Read kiln.config's compiled-call options and this state's kiln.log into
 * a compiled function's options before its call, with the state's
 * settings (raising the error of a bad setting, as a compiled call always
 * did). */
void kn_lua_config_compiled(lua_State *L, kn_compiled *cm);

#endif
