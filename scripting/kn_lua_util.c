/* kn_lua_util: errors at the user's line and the argument helpers of the
 * binding files (see kn_lua_util.h). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_lua_state.h"
#include "kn_lua_util.h"

/* ---- errors and where the user is -------------------------------------- */

int kn_lua_fail(lua_State *L, kn_status st)
{
    (void)st;
    kn_lua_where(L); /* the user's file:line, skipping kiln's own Lua */
    lua_pushstring(L, kn_last_error());
    lua_concat(L, 2);
    return lua_error(L);
}

bool kn_lua_user_frame(const lua_Debug *ar)
{
    /* C functions have no line; kiln's nn and commands come from @kiln/ */
    return ar->currentline > 0 && strncmp(ar->source, "@kiln/", 6) != 0;
}

/* The user's file:line into buf: the innermost frame outside kiln's Lua;
 * but where a frame of kiln's was reached by a tail call (`return
 * self.head(y)` in the user's forward), the user's frame that made it is
 * gone and the next one down is its caller's: then the line the trace's
 * line hook saw last. False when there is none. */
static bool user_where(lua_State *L, char *buf, size_t size)
{
    lua_Debug ar;
    bool tail = false;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "Slt", &ar);
        if (!kn_lua_user_frame(&ar)) {
            tail = tail || ar.istailcall;
            continue;
        }
        const char *last = kn_lua_state_get(L)->last_user_line;
        if (tail && last[0]) snprintf(buf, size, "%s", last);
        else snprintf(buf, size, "%s:%d", ar.short_src, ar.currentline);
        return true;
    }
    const char *last = kn_lua_state_get(L)->last_user_line;
    if (tail && last[0]) {
        snprintf(buf, size, "%s", last);
        return true;
    }
    return false;
}

void kn_lua_where(lua_State *L)
{
    char buf[200];
    if (user_where(L, buf, sizeof buf)) lua_pushfstring(L, "%s: ", buf);
    else lua_pushliteral(L, "");
}

void kn_lua_where_str(lua_State *L, char *buf, size_t size)
{
    const char *override = kn_lua_state_get(L)->where_override;
    if (override[0]) { /* an ONNX node being interpreted names itself */
        snprintf(buf, size, "%s", override);
        return;
    }
    if (!user_where(L, buf, size)) snprintf(buf, size, "?");
}

/* ---- arguments --------------------------------------------------------- */

int64_t kn_lua_list_len(lua_State *L, int idx, int64_t max, const char *what)
{
    lua_Integer n = luaL_len(L, idx); /* raises if __len gives a non-integer */
    if (n < 0 || n > max)
        return luaL_error(L, "%s: list length must be in 0..%I, got %I (from its __len)", what,
                          (lua_Integer)max, n);
    return n;
}

int64_t kn_lua_int_in(lua_State *L, int idx, int64_t lo, int64_t hi, const char *what)
{
    int isnum;
    lua_Integer v = lua_tointegerx(L, idx, &isnum);
    if (!isnum) {
        if (lua_type(L, idx) == LUA_TNUMBER)
            return luaL_error(L, "%s: expected an integer, got %f", what, lua_tonumber(L, idx));
        return luaL_error(L, "%s: expected an integer, got %s", what, luaL_typename(L, idx));
    }
    if (v < lo || v > hi)
        return luaL_error(L, "%s: expected an integer in %I..%I, got %I", what, (lua_Integer)lo,
                          (lua_Integer)hi, v);
    return v;
}

int kn_lua_dim(lua_State *L, int idx, const char *what)
{
    lua_Integer d = luaL_checkinteger(L, idx);
    if (d == 0)
        return luaL_error(L, "%s: dim 0 is not a dim: dims are 1-based (1 is the first, -1 the last)",
                          what);
    /* the message shows the value as the user wrote it: a cast first
     * would turn 2^40 into 0 */
    if (d > 64 || d < -64) /* small enough dims go on to core, which names the tensor's ndim */
        return luaL_error(L, "%s: dim %I out of range (a tensor has at most %d dims)", what,
                          (LUAI_UACINT)d, KN_MAX_DIMS);
    return (int)(d > 0 ? d - 1 : d); /* core normalizes negatives */
}

int kn_lua_shape(lua_State *L, int idx, int64_t *shape, const char *what)
{
    int n = 0;
    if (lua_istable(L, idx)) {
        char list_what[96];
        snprintf(list_what, sizeof list_what, "%s: shape", what);
        n = (int)kn_lua_list_len(L, idx, KN_MAX_DIMS, list_what);
        for (int i = 0; i < n; i++) {
            lua_geti(L, idx, i + 1);
            int isnum;
            lua_Integer v = lua_tointegerx(L, -1, &isnum);
            if (!isnum)
                return luaL_error(L, "%s: shape entry %d must be an integer, got %s", what, i + 1,
                                  luaL_typename(L, -1));
            shape[i] = v;
            lua_pop(L, 1);
        }
        return n;
    }
    /* varargs: f(2, 3, 4) */
    int top = lua_gettop(L);
    for (int i = idx; i <= top && lua_type(L, i) == LUA_TNUMBER; i++) {
        if (n >= KN_MAX_DIMS)
            return luaL_error(L, "%s: a shape has at most %d dims", what, KN_MAX_DIMS);
        int isnum;
        lua_Integer v = lua_tointegerx(L, i, &isnum);
        if (!isnum) return luaL_error(L, "%s: shape entry %d must be an integer", what, n + 1);
        shape[n++] = v;
    }
    if (n == 0 && !lua_isnoneornil(L, idx))
        return luaL_error(L, "%s: shape expected (a table like {2, 3}), got %s", what,
                          luaL_typename(L, idx));
    return n;
}

/* Options table at idx (or nil): dtype, device, seed. */
void kn_lua_opts(lua_State *L, int idx, kn_dtype *dt, kn_device *dev, int64_t *seed, int *has_seed)
{
    if (lua_isnoneornil(L, idx)) return;
    luaL_checktype(L, idx, LUA_TTABLE);
    if (lua_getfield(L, idx, "dtype") != LUA_TNIL) {
        kn_status st = kn_dtype_parse(luaL_checkstring(L, -1), dt);
        if (st != KN_OK) kn_lua_fail(L, st);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "device") != LUA_TNIL) {
        kn_status st = kn_device_parse(luaL_checkstring(L, -1), dev);
        if (st != KN_OK) kn_lua_fail(L, st);
    }
    lua_pop(L, 1);
    if (seed && lua_getfield(L, idx, "seed") != LUA_TNIL) {
        int isnum;
        *seed = lua_tointegerx(L, -1, &isnum);
        if (!isnum) luaL_error(L, "seed must be an integer, got %s", luaL_typename(L, -1));
        *has_seed = 1;
    }
    if (seed) lua_pop(L, 1);
}

kn_device kn_lua_default_device(void)
{
    /* docs/lua-api.md: cuda when a GPU is present, else cpu. Process-wide
     * on purpose: it is a fact about the machine, the same for every state. */
    static int cached = -1;
    if (cached < 0) cached = kn_backend_get(KN_CUDA) ? KN_CUDA : KN_CPU;
    return (kn_device)cached;
}
