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
/* Names and options, one checker for every API (docs/lua-api.md,
 * "Conventions": unknown option keys are errors). `what` names the API
 * ("kiln.compile", "randn"); `names` and `known` are NULL-ended lists; the
 * errors are raised at the user's line and read "WHAT: unknown NOUN 'word'
 * (known: a, b, c); did you mean 'b'?".
 *
 * The name of names that word is a likely typo of (a swap, a slip, a
 * missing or extra letter, the case, or the start of one name only), else NULL. */
const char *kn_lua_nearest(const char *word, const char *const *names);
/* Push "unknown NOUN 'word' (known: ...)" with "; did you mean 'x'?" when near one. */
void kn_lua_push_unknown(lua_State *L, const char *noun, const char *word, const char *const *names);
/* Raise "WHAT: " and that message at the user's line. Never returns. */
int kn_lua_unknown(lua_State *L, const char *what, const char *noun, const char *word, const char *const *names);
/* The options table at idx holds only string keys in `known`: false for
 * nil or none, true for a table that passes; anything else raises. */
bool kn_lua_check_options(lua_State *L, int idx, const char *what, const char *const *known);
/* The index in names of the string at idx, else raises ("unknown mode 'fast'"). */
int kn_lua_check_name(lua_State *L, int idx, const char *what, const char *noun, const char *const *names);
/* A dtype or device name at idx into *dt / *dev; a name that is neither
 * raises core's message with "did you mean" ("f23" -> f32, "cdua" -> cuda). */
void kn_lua_parse_dtype(lua_State *L, int idx, const char *what, kn_dtype *dt);
void kn_lua_parse_device(lua_State *L, int idx, const char *what, kn_device *dev);
/* The checker for kiln's Lua files: kiln._check_options(opts, what,
 * known), kiln._check_name(value, what, noun, names),
 * kiln._did_you_mean(word, names), kiln._unknown_message(noun, word, names). */
void kn_lua_open_util(lua_State *L, int kiln);
/* Read {dtype=, device=, seed=} at idx (nil is fine), whose keys must be
 * in `known` (KN_LUA_TENSOR_OPTS, KN_LUA_CREATE_OPTS, KN_LUA_RANDOM_OPTS or the
 * caller's; requires_grad is the caller's to apply);
 * seed may be NULL. */
void kn_lua_opts(lua_State *L, int idx, const char *what, const char *const *known, kn_dtype *dt,
                 kn_device *dev, int64_t *seed, int *has_seed);
extern const char *const KN_LUA_TENSOR_OPTS[]; /* dtype, device */
extern const char *const KN_LUA_CREATE_OPTS[]; /* dtype, device, requires_grad */
extern const char *const KN_LUA_RANDOM_OPTS[]; /* dtype, device, seed, requires_grad */
kn_device kn_lua_default_device(void);

#endif
