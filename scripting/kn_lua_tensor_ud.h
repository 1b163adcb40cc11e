/* kn_lua_tensor_ud: the kiln.Tensor userdata, as every binding file takes
 * and returns tensors. Its methods and kiln.tensor, kiln.zeros, ... are
 * kn_lua_tensor.c. Private to scripting/. */
#ifndef KN_LUA_TENSOR_UD_H
#define KN_LUA_TENSOR_UD_H

#include <lauxlib.h>
#include <lua.h>

#include "kn_tensor.h"

#define KN_TENSOR_MT "kiln.Tensor"

/* The userdata holds one reference to a kn_tensor; __gc and __close release it. */
typedef struct kn_lua_tensor_ud {
    kn_tensor *t;
} kn_lua_tensor_ud;

/* The tensor at idx, or a Lua error "bad argument #idx to 'fn' (tensor expected, got T)". */
kn_tensor *kn_lua_checktensor(lua_State *L, int idx);
/* The tensor at idx, or NULL if the value is not a kiln tensor. */
kn_tensor *kn_lua_totensor(lua_State *L, int idx);
/* The tensor a kiln.Tensor userdata stands for (kn_lua_totensor, its
 * type already known): for a caller that holds the userdata's block. */
kn_tensor *kn_lua_tensor_of(lua_State *L, kn_lua_tensor_ud *u);
/* Push a tensor userdata; takes over one reference of t (t may not be NULL). */
void kn_lua_pushtensor(lua_State *L, kn_tensor *t);

#endif
