/* kn_lua_viz: the C half of kiln.render and :graph (viz/, Graphviz), as
 * the table kiln.viz; scripting/lua/50_graph.lua checks the user's
 * arguments, finds the timings and raises errors at the user's line:
 *   render(cm, path|nil, view, format, rankdir, collapse, timings, labels, host)
 *       path: write the file and return the path; nil: return the text.
 *       view "captured" | "fused", format "svg" | "dot", rankdir "TB" |
 *       "LR" | "BT" | "RL", timings nil or a list of kiln.time kernel rows
 *       {name, key, median_us, pct, roof_pct, calls}, labels "plain" |
 *       "lines", host nil or {host_us, kernel_us} (a kiln.time result's).
 *   outline(cm, view, collapse, timings, host)  the text outline
 * A failure (nothing captured yet, a file that cannot be written) returns
 * nil and the message, so the Lua side can name the user's line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_lua_compiled_ud.h"
#include "kn_lua_viz.h"
#include "kn_viz.h"

static double num_field(lua_State *L, int idx, const char *key, double dflt)
{
    lua_getfield(L, idx, key);
    double v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : dflt;
    lua_pop(L, 1);
    return v;
}

/* The timing rows of the list at idx (nil: none) in a userdata kept on the
 * stack, so that a Lua error cannot leak them. */
static kn_viz_timing *check_timings(lua_State *L, int idx, int *n)
{
    *n = 0;
    if (lua_isnoneornil(L, idx)) return NULL;
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_Integer len = luaL_len(L, idx);
    if (len <= 0) return NULL;
    if (len > 1000000) luaL_argerror(L, idx, "too many timing rows");
    kn_viz_timing *t = lua_newuserdatauv(L, sizeof *t * (size_t)len, 0);
    memset(t, 0, sizeof *t * (size_t)len);
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, idx, i);
        int row = lua_gettop(L);
        if (lua_istable(L, row)) {
            kn_viz_timing *r = &t[*n];
            lua_getfield(L, row, "name");
            const char *name = lua_tostring(L, -1);
            if (name) snprintf(r->name, sizeof r->name, "%s", name);
            lua_getfield(L, row, "key");
            const char *key = lua_tostring(L, -1);
            if (key) snprintf(r->key, sizeof r->key, "%s", key);
            lua_pop(L, 2);
            r->median_us = num_field(L, row, "median_us", 0);
            r->pct = num_field(L, row, "pct", 0);
            r->roof_pct = num_field(L, row, "roof_pct", -1);
            r->calls = (int)num_field(L, row, "calls", 1);
            if (name) (*n)++;
        }
        lua_pop(L, 1);
    }
    return t;
}

/* The host's and the kernels' time per call from the table at idx (nil:
 * unknown), as kiln.time's result has them. */
static void check_host(lua_State *L, int idx, kn_viz_opts *o)
{
    if (lua_isnoneornil(L, idx)) return;
    luaL_checktype(L, idx, LUA_TTABLE);
    o->host_us = num_field(L, idx, "host_us", -1);
    o->kernel_us = num_field(L, idx, "kernel_us", -1);
    o->host_timed = o->host_us >= 0 && o->kernel_us >= 0;
}

static kn_viz_view check_view(lua_State *L, int idx)
{
    static const char *const views[] = {"captured", "fused", NULL};
    return luaL_checkoption(L, idx, "fused", views) ? KN_VIZ_FUSED : KN_VIZ_CAPTURED;
}

static int push_failure(lua_State *L)
{
    lua_pushnil(L);
    lua_pushstring(L, kn_last_error());
    return 2;
}

static int l_render(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    const char *path = luaL_optstring(L, 2, NULL);
    static const char *const formats[] = {"svg", "dot", NULL};
    static const char *const rankdirs[] = {"TB", "LR", "BT", "RL", NULL};
    static const char *const labels[] = {"plain", "lines", NULL};
    kn_viz_opts o = {0};
    o.view = check_view(L, 3);
    kn_viz_format fmt = luaL_checkoption(L, 4, "svg", formats) ? KN_VIZ_DOT : KN_VIZ_SVG;
    o.rankdir = rankdirs[luaL_checkoption(L, 5, "TB", rankdirs)];
    o.collapse = lua_toboolean(L, 6);
    o.timings = check_timings(L, 7, &o.n_timings);
    o.labels = luaL_checkoption(L, 8, "plain", labels) ? KN_VIZ_LABELS_LINES : KN_VIZ_LABELS_PLAIN;
    check_host(L, 9, &o);
    if (path) {
        if (kn_viz_render_file(cm, &o, fmt, path) != KN_OK) return push_failure(L);
        lua_pushstring(L, path);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    if (kn_viz_render(cm, &o, fmt, &text, &len) != KN_OK) return push_failure(L);
    lua_pushlstring(L, text, len);
    free(text);
    return 1;
}

static int l_outline(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    kn_viz_opts o = {0};
    o.view = check_view(L, 2);
    o.collapse = lua_toboolean(L, 3);
    o.timings = check_timings(L, 4, &o.n_timings);
    check_host(L, 5, &o);
    char *text = NULL;
    if (kn_viz_outline(cm, &o, &text) != KN_OK) return push_failure(L);
    lua_pushstring(L, text);
    free(text);
    return 1;
}

void kn_lua_open_viz(lua_State *L)
{
    static const luaL_Reg fns[] = {{"render", l_render}, {"outline", l_outline}, {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "viz");
}
