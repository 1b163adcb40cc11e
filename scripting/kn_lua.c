/* kn_lua: luaopen_kiln, the entry of the `kiln` Lua module.
 *
 * Builds the kiln table from the C parts (tensor, ops, io, system) and then
 * runs the embedded Lua parts (the files of scripting/lua, in file-name order), each
 * called with the kiln table as its argument, so nn modules and REPL commands
 * are plain Lua on top of the C API. The same code serves the `kiln` program
 * and `require "kiln"` from the stock lua5.4.
 */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "kn_kernels.h"
#include "kn_lua.h"
#include "kn_lua_compile.h"
#include "kn_lua_io.h"
#include "kn_lua_onnx.h"
#include "kn_lua_ops.h"
#include "kn_lua_state.h"
#include "kn_lua_system.h"
#include "kn_lua_tensor.h"
#include "kn_lua_timing.h"
#include "kn_lua_viz.h"

typedef struct {
    const char *name;
    const unsigned char *data;
    size_t size;
} kn_embedded_file;

extern const kn_embedded_file kn_lua_embedded[];

static void run_embedded(lua_State *L, int kiln_idx)
{
    for (const kn_embedded_file *f = kn_lua_embedded; f->name; f++) {
        char chunkname[128];
        snprintf(chunkname, sizeof chunkname, "@kiln/%s", f->name);
        if (luaL_loadbuffer(L, (const char *)f->data, f->size, chunkname) != LUA_OK)
            lua_error(L); /* a syntax error in kiln's own Lua is a build bug */
        lua_pushvalue(L, kiln_idx);
        lua_call(L, 1, 0);
    }
}

int luaopen_kiln(lua_State *L)
{
    kn_kernels_register(); /* before anything makes a tensor */
    kn_lua_state_get(L);   /* this state's data, before any part needs it */
    lua_newtable(L);
    int kiln_idx = lua_gettop(L);
    lua_pushstring(L, KILN_VERSION);
    lua_setfield(L, kiln_idx, "version");
    kn_lua_open_tensor(L);
    kn_lua_open_ops(L);
    kn_lua_open_io(L);
    kn_lua_open_system(L);
    kn_lua_open_compile(L);
    kn_lua_open_timing(L);
    kn_lua_open_viz(L);
    kn_lua_open_onnx(L);
    run_embedded(L, kiln_idx);
    return 1;
}

kn_settings *kn_lua_settings(lua_State *L)
{
    return &kn_lua_state_get(L)->settings;
}
