/* kn_lua_state: per-Lua-state data as a userdata in the registry (see
 * kn_lua_state.h). */
#include <string.h>

#include <lauxlib.h>

#include "kn_capture.h"
#include "kn_lua_state.h"

/* Its address is the registry key: unique in the process, and no string a
 * script could collide with. */
static const char state_key;

kn_lua_state *kn_lua_state_get(lua_State *L)
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &state_key) == LUA_TUSERDATA) {
        kn_lua_state *s = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return s;
    }
    lua_pop(L, 1);
    kn_lua_state *s = lua_newuserdatauv(L, sizeof *s, 0);
    memset(s, 0, sizeof *s);
    s->param_map = LUA_NOREF;
    s->seed = 0x6b696c6e; /* "kiln" */
    s->log_flags = KN_LOG_WARN;
    kn_settings_init(&s->settings); /* kiln.config sets its own defaults (kn_lua_open_config) */
    kn_autograd_init(&s->grad);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &state_key);
    return s;
}
