/* kn_lua_autotune: max-autotune from Lua: cm:autotune() (what the search
 * measured per kernel), cm:autotune_pin(kernel, choice) and
 * kiln._autotune_cache_path(); its options and progress bar come with
 * kiln.config (kn_lua_config.c). The search itself is
 * core/compiler/kn_plan_tune.c; scripting/lua/45_autotune.lua builds
 * kiln.autotune and the :autotune command on these. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_autotune.h"
#include "kn_fs.h"
#include "kn_lua_autotune.h"
#include "kn_lua_compiled_ud.h"
#include "kn_lua_util.h"

static const char *source_name(int s)
{
    switch (s) {
    case KN_TUNED_MEASURED: return "measured";
    case KN_TUNED_CACHED: return "cached";
    case KN_TUNED_PINNED: return "pinned";
    case KN_TUNED_SKIPPED: return "skipped";
    default: return "none";
    }
}

static void set_num(lua_State *L, const char *k, double v)
{
    if (v < 0) return; /* not measured: absent */
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static void set_str(lua_State *L, const char *k, const char *v)
{
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}

/* cm:autotune(): per kernel of the latest plan of each graph,
 * {graph, index, name, source, choice, label, us, default_us,
 *  candidates = {{choice, label, us, reps, status}}} (tunable kernels only);
 * index is the kernel's place in cm:kernels(), from 1 as Lua counts. */
static int cm_autotune(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    lua_newtable(L);
    int n = 0, index = 0;
    for (int g = 0; g < cm->cache.n_graphs; g++) {
        const kn_graph_cache *gc = &cm->cache.graphs[g];
        const kn_plan *p = gc->n_versions ? kn_version_plan(&gc->versions[gc->n_versions - 1]) : NULL;
        for (int k = 0; p && k < p->code.fusion.prog.n_kernels; k++, index++) {
            if (!p->tune.result || !kn_plan_tunable(p, k)) continue;
            const kn_tune_result *tr = &p->tune.result[k];
            lua_createtable(L, 0, 10);
            lua_pushinteger(L, g);
            lua_setfield(L, -2, "graph");
            lua_pushinteger(L, index + 1);
            lua_setfield(L, -2, "index");
            set_str(L, "name", p->code.fusion.prog.kernels[k].name);
            set_str(L, "source", source_name(tr->source));
            set_str(L, "choice", tr->choice[0] ? tr->choice : "default");
            set_str(L, "label", tr->label[0] ? tr->label : "default");
            set_num(L, "us", tr->us);
            set_num(L, "default_us", tr->default_us);
            lua_createtable(L, tr->n_cands, 0);
            for (int c = 0; c < tr->n_cands; c++) {
                const kn_tune_cand *cd = &tr->cands[c];
                lua_createtable(L, 0, 5);
                set_str(L, "choice", cd->choice);
                set_str(L, "label", cd->label);
                set_num(L, "us", cd->us);
                lua_pushinteger(L, cd->reps);
                lua_setfield(L, -2, "reps");
                if (cd->status[0]) set_str(L, "status", cd->status);
                lua_seti(L, -2, c + 1);
            }
            lua_setfield(L, -2, "candidates");
            lua_seti(L, -2, ++n);
        }
    }
    return 1;
}

/* cm:autotune_pin(kernel, choice): kernel is a name ("k3_add_f32_64") or
 * its place in cm:kernels(), from 1; choice as cm:autotune() shows it.
 * Compiles it now, saves it as pinned; the next call runs it. */
static int cm_autotune_pin(lua_State *L)
{
    compiled_ud *u = kn_lua_check_compiled(L, 1);
    kn_compiled *cm = u->cm;
    const char *choice = luaL_checkstring(L, 3);
    lua_Integer number = 0; /* its place in cm:kernels(), from 1, when given a number */
    const char *name = NULL;
    if (lua_isinteger(L, 2)) number = lua_tointeger(L, 2);
    else if (lua_type(L, 2) == LUA_TSTRING) name = lua_tostring(L, 2);
    else
        return luaL_error(L, "autotune pin: the kernel must be its number in cm:kernels() or its name, got %s",
                          lua_type(L, 2) == LUA_TNUMBER ? "a fraction" : luaL_typename(L, 2));
    int index = 0, found_graph = -1, found_k = -1, matches = 0;
    for (int g = 0; g < cm->cache.n_graphs; g++) {
        const kn_graph_cache *gc = &cm->cache.graphs[g];
        const kn_plan *p = gc->n_versions ? kn_version_plan(&gc->versions[gc->n_versions - 1]) : NULL;
        for (int k = 0; p && k < p->code.fusion.prog.n_kernels; k++, index++)
            if ((!name && index + 1 == number) || (name && strcmp(p->code.fusion.prog.kernels[k].name, name) == 0)) {
                found_graph = g;
                found_k = k;
                matches++;
            }
    }
    if (matches == 0 && name)
        return luaL_error(L, "autotune pin: no kernel named '%s' in this compiled callable (cm:kernels() lists "
                             "them; call it once first)", name);
    if (matches == 0 && index == 0)
        return luaL_error(L, "autotune pin: this compiled callable has no compiled kernels yet (call it once first)");
    if (matches == 0)
        return luaL_error(L, "autotune pin: no kernel %I: this compiled callable has %s %d (cm:kernels() lists them)",
                          number, index == 1 ? "only kernel" : "kernels 1 to", index);
    if (matches > 1)
        return luaL_error(L, "autotune pin: kernel name '%s' is in several graphs: give its number", name);
    const kn_graph_cache *gc = &cm->cache.graphs[found_graph];
    kn_plan *p = kn_version_plan(&gc->versions[gc->n_versions - 1]);
    kn_status st = kn_plan_tune_pin(p, found_k, choice, kn_settings_cache_dir(cm->opt.settings));
    if (st != KN_OK) return kn_lua_fail(L, st);
    u->rp.valid = false; /* a direct replay would skip the new kernel */
    lua_pushstring(L, p->code.fusion.prog.kernels[found_k].name);
    return 1;
}

static int l_autotune_cache_path(lua_State *L)
{
    char path[KN_CACHE_PATH_MAX];
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.config");
    lua_getfield(L, -1, "cache_dir");
    if (kn_autotune_cache_path(lua_tostring(L, -1), path, sizeof path) != KN_OK) return luaL_error(L, "%s", kn_last_error());
    lua_pushstring(L, path);
    return 1;
}

/* The process's copy of the cache is dropped: the next search reads the file. */
static int l_autotune_reload(lua_State *L)
{
    (void)L;
    kn_autotune_cache_reset();
    return 0;
}

void kn_lua_compiled_autotune_methods(lua_State *L)
{
    static const luaL_Reg methods[] = {{"autotune", cm_autotune}, {"autotune_pin", cm_autotune_pin}, {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
}

void kn_lua_autotune_functions(lua_State *L, int kiln)
{
    lua_pushcfunction(L, l_autotune_cache_path);
    lua_setfield(L, kiln, "_autotune_cache_path");
    lua_pushcfunction(L, l_autotune_reload);
    lua_setfield(L, kiln, "_autotune_reload");
}
