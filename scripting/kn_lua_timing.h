/* kn_lua_timing: kiln.profiler, the C half of kiln.time, kiln.profile and
 * the roofline. Private to scripting/. */
#ifndef KN_LUA_TIMING_H
#define KN_LUA_TIMING_H

#include <lua.h>

/* Add kiln.profiler to the kiln table on the stack top. */
void kn_lua_open_timing(lua_State *L);

#endif
