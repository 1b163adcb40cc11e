/* kn_lua_util: errors at the user's line and argument helpers shared by
 * the binding files. The lowest part of scripting/: it uses no other. */
#ifndef KN_LUA_UTIL_H
#define KN_LUA_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "kn_tensor.h"

/* Raise a Lua error with kn_last_error() (the status names the kind). Never returns. */
int kn_lua_fail(lua_State *L, kn_status st);
/* Is this frame the user's code (not C, not kiln's own Lua)? */
bool kn_lua_user_frame(const lua_Debug *ar);
/* Push "file:line: " of the innermost user code (not kiln's own Lua). */
void kn_lua_where(lua_State *L);
/* "file.lua:LINE" of the innermost user code ("?" when there is none). */
void kn_lua_where_str(lua_State *L, char *buf, size_t size);
/* The length of the list (table) at idx, __len honoured, checked to lie in
 * 0..max: a __len returning -1 or 2^40 must never size an array or a loop.
 * `what` names the op and argument ("cat: tensors"). */
int64_t kn_lua_list_len(lua_State *L, int idx, int64_t max, const char *what);
/* The integer at idx, checked to lie in lo..hi (at most the C type it is
 * stored in, so 2^32 + 2 is an error and not 2). `what` names the op and
 * argument ("conv2d: groups"). */
int64_t kn_lua_int_in(lua_State *L, int idx, int64_t lo, int64_t hi, const char *what);
/* A 1-based Lua dim at idx as a core dim: 0-based, negatives kept. */
int kn_lua_dim(lua_State *L, int idx, const char *what);
/* A shape from a table at idx, or from the numbers starting at idx; returns ndim. */
int kn_lua_shape(lua_State *L, int idx, int64_t *shape, const char *what);
/* Read {dtype=, device=, seed=} at idx (nil is fine); seed may be NULL. */
void kn_lua_opts(lua_State *L, int idx, kn_dtype *dt, kn_device *dev, int64_t *seed, int *has_seed);
kn_device kn_lua_default_device(void);

#endif
