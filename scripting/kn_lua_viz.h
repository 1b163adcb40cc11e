/* kn_lua_viz: kiln.viz, the C half of kiln.render and :graph. Private to
 * scripting/. */
#ifndef KN_LUA_VIZ_H
#define KN_LUA_VIZ_H

#include <lua.h>

/* Add kiln.viz to the kiln table on the stack top. */
void kn_lua_open_viz(lua_State *L);

#endif
