/* kn_lua_autograd: autograd's Lua binding (core/autograd does the work):
 * x:backward(), x:requires_grad_(), x:detach(), x:zero_grad(),
 * kiln.grad, kiln.no_grad, kiln.enable_grad, kiln.is_grad_enabled, and the
 * properties x.requires_grad, x.grad, x.is_leaf, x.grad_fn. Private to
 * scripting/. */
#ifndef KN_LUA_AUTOGRAD_H
#define KN_LUA_AUTOGRAD_H

#include <stdbool.h>

#include <lua.h>

/* kiln.* functions and Tensor methods; the kiln table is on top. */
void kn_lua_open_autograd(lua_State *L);
/* The tensor on top of the stack requires grad when the creation options
 * at opts_idx say {requires_grad = true}. */
void kn_lua_apply_requires_grad(lua_State *L, int opts_idx, const char *what);
/* x.requires_grad, x.grad, x.is_leaf, x.grad_fn for the tensor at 1:
 * pushes the value and returns true when key is one of them. */
bool kn_lua_autograd_property(lua_State *L, const char *key);
/* x.requires_grad = v, x.grad = v (value at 3); true when key is one of
 * them (raises on a bad value). */
bool kn_lua_autograd_assign(lua_State *L, const char *key);

#endif
