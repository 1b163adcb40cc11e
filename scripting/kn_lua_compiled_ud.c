/* kn_lua_compiled_ud: the kiln.Compiled userdata (see kn_lua_compiled_ud.h). */
#include "kn_lua_compiled_ud.h"

compiled_ud *kn_lua_check_compiled(lua_State *L, int idx)
{
    compiled_ud *u = luaL_checkudata(L, idx, KN_COMPILED_MT);
    if (!u->cm) luaL_error(L, "this compiled callable was freed");
    return u;
}
