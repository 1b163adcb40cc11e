/* kn_lua_log: kiln.log and KILN_LOGS. Private to scripting/. */
#ifndef KN_LUA_LOG_H
#define KN_LUA_LOG_H

#include <lua.h>

/* Read KILN_LOGS into the state's log flags and add kiln.log to the kiln
 * table at kiln. */
void kn_lua_open_log(lua_State *L, int kiln);

#endif
