/* kn_lua_io: kiln.load_safetensors and kiln.save_safetensors, the Lua side
 * of core/tensor/kn_safetensors.
 *
 *   local tensors, metadata = kiln.load_safetensors(path)   -- name -> tensor, key -> string
 *   kiln.save_safetensors(path, {name = tensor, ...} [, {key = "value", ...}])
 *
 * Loaded tensors live on the CPU; tensors on another device are copied to the
 * CPU for saving. Errors name the file and the problem (see kn_safetensors.h).
 */
#include <string.h>

#include "kn_lua_io.h"
#include "kn_lua_state.h"
#include "kn_lua_trace.h"
#include "kn_lua_tensor_ud.h"
#include "kn_lua_util.h"
#include "kn_safetensors.h"
#include "kn_view.h"

#define KN_ST_FILE_MT "kiln.SafetensorsFile"

/* Owns a loaded file while its tensors are handed to Lua, so that a Lua
 * error half-way (out of memory) frees it through __gc instead of leaking. */
typedef struct {
    kn_st_file *f;
} st_box;

static int box_gc(lua_State *L)
{
    st_box *b = luaL_checkudata(L, 1, KN_ST_FILE_MT);
    kn_st_file_free(b->f);
    b->f = NULL;
    return 0;
}

/* The string at idx; an argument error when it has a NUL byte, which C
 * would silently cut it at (a name, a key, a path). */
static const char *whole_string(lua_State *L, int idx, int arg, const char *what)
{
    size_t len = 0;
    const char *s = lua_tolstring(L, idx, &len);
    if (s && strlen(s) != len)
        luaL_argerror(L, arg, lua_pushfstring(L, "%s '%s' contains a NUL byte (at byte %d)", what, s,
                                              (int)strlen(s) + 1));
    return s;
}

/* kiln.load_safetensors(path) -> {name = tensor}, {key = value} */
static int l_load(lua_State *L)
{
    luaL_checkstring(L, 1);
    const char *path = whole_string(L, 1, 1, "path");
    st_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->f = NULL;
    luaL_setmetatable(L, KN_ST_FILE_MT);
    kn_status st = kn_safetensors_load(path, &b->f);
    if (st != KN_OK) return kn_lua_fail(L, st);
    const kn_st_file *f = b->f;
    lua_createtable(L, 0, f->n);
    for (int i = 0; i < f->n; i++) {
        kn_tensor_retain(f->entries[i].tensor); /* the file keeps its own until __gc */
        kn_lua_pushtensor(L, f->entries[i].tensor);
        lua_setfield(L, -2, f->entries[i].name);
    }
    lua_createtable(L, 0, f->n_meta);
    for (int i = 0; i < f->n_meta; i++) {
        lua_pushstring(L, f->meta_values[i]);
        lua_setfield(L, -2, f->meta_keys[i]);
    }
    return 2;
}

/* Count the pairs of the table at idx. */
static int count_pairs(lua_State *L, int idx)
{
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        n++;
    }
    return n;
}

/* kiln.save_safetensors(path, {name = tensor, ...} [, {key = value, ...}]) */
static int l_save(lua_State *L)
{
    luaL_checkstring(L, 1);
    const char *path = whole_string(L, 1, 1, "path");
    luaL_checktype(L, 2, LUA_TTABLE);
    int has_meta = !lua_isnoneornil(L, 3);
    if (has_meta) luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);
    int n = count_pairs(L, 2), nm = has_meta ? count_pairs(L, 3) : 0;
    /* Scratch arrays as userdata, so a Lua error cannot leak them; `hold`
     * keeps CPU copies and converted strings alive until the save is done. */
    const char **names = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n + 1), 0);
    kn_tensor **tensors = lua_newuserdatauv(L, sizeof(kn_tensor *) * (size_t)(n + 1), 0);
    const char **mk = lua_newuserdatauv(L, sizeof(char *) * (size_t)(nm + 1), 0);
    const char **mv = lua_newuserdatauv(L, sizeof(char *) * (size_t)(nm + 1), 0);
    lua_newtable(L);
    int hold = lua_gettop(L);

    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            return luaL_argerror(L, 2, lua_pushfstring(L, "tensor names must be strings, got a %s key",
                                                       luaL_typename(L, -2)));
        kn_tensor *t = kn_lua_totensor(L, -1);
        if (!t)
            return luaL_argerror(L, 2, lua_pushfstring(L, "'%s' is a %s, not a tensor",
                                                       lua_tostring(L, -2), luaL_typename(L, -1)));
        /* a traced tensor inside a compiled function: a graph break gives it its value */
        t = kn_lua_need_value(L, t, "kiln.save_safetensors");
        if (kn_tensor_device(t) != KN_CPU) {
            kn_tensor *c;
            kn_status st = kn_tensor_to_device(t, KN_CPU, &kn_lua_state_get(L)->settings, &c);
            if (st != KN_OK) return kn_lua_fail(L, st);
            kn_lua_pushtensor(L, c);
            lua_rawseti(L, hold, (lua_Integer)luaL_len(L, hold) + 1);
            t = c;
        }
        names[i] = whole_string(L, -2, 2, "tensor name"); /* anchored by the argument table */
        tensors[i++] = t;
        lua_pop(L, 1);
    }
    i = 0;
    if (has_meta) {
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                return luaL_argerror(L, 3, lua_pushfstring(L, "metadata keys must be strings, got a %s key",
                                                           luaL_typename(L, -2)));
            if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
                return luaL_argerror(L, 3, lua_pushfstring(L, "metadata value of '%s' must be a string, got %s",
                                                           lua_tostring(L, -2), luaL_typename(L, -1)));
            mk[i] = whole_string(L, -2, 3, "metadata key");
            /* convert a copy: lua_tostring on the table's own value would change it */
            lua_pushvalue(L, -1);
            mv[i++] = whole_string(L, -1, 3, "metadata value");
            lua_rawseti(L, hold, (lua_Integer)luaL_len(L, hold) + 1);
            lua_pop(L, 1);
        }
    }
    kn_status st = kn_safetensors_save(path, n, names, tensors, nm, mk, mv);
    if (st != KN_OK) return kn_lua_fail(L, st);
    return 0;
}

void kn_lua_open_io(lua_State *L)
{
    int kiln = lua_gettop(L);
    luaL_newmetatable(L, KN_ST_FILE_MT);
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_settop(L, kiln);
    static const luaL_Reg fns[] = {
        {"load_safetensors", l_load}, {"save_safetensors", l_save}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
