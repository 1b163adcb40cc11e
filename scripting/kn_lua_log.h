/* kn_lua_log: kiln.log and KILN_LOGS. Private to scripting/. */
#ifndef KN_LUA_LOG_H
#define KN_LUA_LOG_H

#include <lua.h>

/* Logs printed by kiln's Lua side, not by a compiled call: their flags lie
 * above core's KN_LOG_* bits, which a compiled call's log copies. */
enum { KN_LOG_ONNX = 1 << 16 };

/* Read KILN_LOGS into the state's log flags and add kiln.log and kiln.log_enabled to
 * the kiln table at kiln. */
void kn_lua_open_log(lua_State *L, int kiln);

#endif
