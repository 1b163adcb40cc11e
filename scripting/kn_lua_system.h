/* kn_lua_system: kiln.clock, kiln.device_info, kiln.default_device and the
 * op list. Private to scripting/. */
#ifndef KN_LUA_SYSTEM_H
#define KN_LUA_SYSTEM_H

#include <lua.h>

/* Add them to the kiln table on the stack top. */
void kn_lua_open_system(lua_State *L);

#endif
