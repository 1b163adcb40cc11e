/* kn_lua: luaopen_kiln, the entry of the `kiln` Lua module.
 *
 * Builds the kiln table from the C parts (tensor, ops, io, system, and
 * kiln.onnx's binding, onnx/kn_lua_onnx.c) and then runs the embedded Lua
 * parts (the files of scripting/lua, in file-name order, then those of
 * onnx/lua, in the order CMakeLists.txt lists them), each called with the
 * kiln table as its argument, so nn modules, REPL commands and the ONNX
 * interpreter are plain Lua on top of the C API. The same code serves the
 * `kiln` program and `require "kiln"` from the stock lua5.4.
 *
 * This file is the top of the Lua side (scripts/check_layers.lua gives it a
 * layer of its own): it alone opens both scripting's parts and onnx's
 * binding, which itself uses scripting's parts, so neither calls the other
 * back.
 */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "kn_kernels.h"
#include "kn_lua.h"
#include "kn_lua_autograd.h"
#include "kn_lua_compile.h"
#include "kn_lua_io.h"
#include "kn_lua_onnx.h"
#include "kn_lua_ops.h"
#include "kn_lua_state.h"
#include "kn_lua_system.h"
#include "kn_lua_tensor.h"
#include "kn_lua_timing.h"
#include "kn_lua_util.h"
#include "kn_lua_viz.h"

typedef struct {
    const char *name;
    const unsigned char *data;
    size_t size;
} kn_embedded_file;

extern const kn_embedded_file kn_lua_embedded[];      /* scripting/lua */
extern const kn_embedded_file kn_onnx_lua_embedded[]; /* onnx/lua */

/* Run each of `files` with the kiln table as its argument. Chunk names start
 * "@kiln/" (then `dir`), which is how kiln tells its own Lua from the user's
 * when it names the user's line. */
static void run_embedded(lua_State *L, int kiln_idx, const kn_embedded_file *files, const char *dir)
{
    for (const kn_embedded_file *f = files; f->name; f++) {
        char chunkname[128];
        snprintf(chunkname, sizeof chunkname, "@kiln/%s%s", dir, f->name);
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
    kn_lua_open_util(L, kiln_idx); /* the option checker, first: every other part may use it */
    kn_lua_open_tensor(L);
    kn_lua_open_ops(L);
    kn_lua_open_autograd(L);
    kn_lua_open_io(L);
    kn_lua_open_system(L);
    kn_lua_open_compile(L);
    kn_lua_open_timing(L);
    kn_lua_open_viz(L);
    kn_lua_open_onnx(L);
    run_embedded(L, kiln_idx, kn_lua_embedded, "");
    run_embedded(L, kiln_idx, kn_onnx_lua_embedded, "onnx/");
    return 1;
}

kn_settings *kn_lua_settings(lua_State *L)
{
    return &kn_lua_state_get(L)->settings;
}
