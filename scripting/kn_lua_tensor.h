/* kn_lua_tensor: the kiln.Tensor methods and tensor creation (kiln.tensor,
 * zeros, randn, ..., manual_seed). Private to scripting/. */
#ifndef KN_LUA_TENSOR_H
#define KN_LUA_TENSOR_H

#include <lua.h>

/* Add kiln.Tensor (the methods table), the creation functions and the
 * tensor metatable to the kiln table on the stack top. */
void kn_lua_open_tensor(lua_State *L);

#endif
