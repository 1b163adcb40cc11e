/* kn_lua_ops: every op of the op table as a kiln.* function and a tensor
 * method. Private to scripting/. */
#ifndef KN_LUA_OPS_H
#define KN_LUA_OPS_H

#include <lua.h>

/* Add the ops to the kiln table on the stack top (and to kiln.Tensor). */
void kn_lua_open_ops(lua_State *L);

#endif
