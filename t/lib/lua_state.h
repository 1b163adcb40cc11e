/* t/lib/lua_state.h: what the t/lua_*.c tests (several Lua states in one
 * process) share: a state with the standard libraries and kiln loaded, and
 * running a chunk in it for its first result. Static inline: each test
 * takes what it uses. */
#ifndef KN_TEST_LUA_STATE_H
#define KN_TEST_LUA_STATE_H

#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "kn_lua.h"

/* A new state with kiln required as the global `kiln`; bails out of the
 * test when Lua cannot make one. */
static inline lua_State *new_state(void)
{
    lua_State *L = luaL_newstate();
    if (!L) {
        printf("Bail out! luaL_newstate failed\n");
        exit(1);
    }
    luaL_openlibs(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 1);
    lua_pop(L, 1);
    return L;
}

/* Run code in L; its first result (or the error) as a string, kept in buf. */
static inline const char *eval(lua_State *L, const char *code, char *buf, size_t size)
{
    int base = lua_gettop(L);
    int rc = luaL_loadstring(L, code);
    if (rc == LUA_OK) rc = lua_pcall(L, 0, 1, 0);
    const char *s = luaL_tolstring(L, -1, NULL);
    snprintf(buf, size, "%s%s", rc == LUA_OK ? "" : "error: ", s);
    lua_settop(L, base);
    return buf;
}

#endif
