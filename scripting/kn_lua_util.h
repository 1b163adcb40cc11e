/* kn_lua_util: argument helpers shared by the binding files. */
#ifndef KN_LUA_UTIL_H
#define KN_LUA_UTIL_H

#include "kn_lua.h"

/* Push "file:line: " of the innermost user code (not kiln's own Lua). */
void kn_lua_where(lua_State *L);
/* A 1-based Lua dim at idx as a core dim: 0-based, negatives kept. */
int kn_lua_dim(lua_State *L, int idx, const char *what);
/* A shape from a table at idx, or from the numbers starting at idx; returns ndim. */
int kn_lua_shape(lua_State *L, int idx, int64_t *shape, const char *what);
/* Read {dtype=, device=, seed=} at idx (nil is fine); seed may be NULL. */
void kn_lua_opts(lua_State *L, int idx, kn_dtype *dt, kn_device *dev, int64_t *seed, int *has_seed);
kn_device kn_lua_default_device(void);
/* Push kiln.config's backend switches (allow_tf32, cache_dir) to core. */
void kn_lua_sync_config(lua_State *L);

#endif
