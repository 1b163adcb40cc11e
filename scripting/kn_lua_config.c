/* kn_lua_config: kiln.config, written through to the state's settings
 * (see kn_lua_config.h). */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "kn_clock.h"
#include "kn_fs.h"
#include "kn_lua_config.h"
#include "kn_lua_state.h"
#include "kn_lua_util.h"
#include "kn_passes.h"
#include "kn_settings.h"

/* The bar, on stderr when it is a terminal, at most ten times a second:
 *   autotune [########------------]  12/40 kernels  85 candidates  6.2 s of 20 s  k13_softmax_f32_... */
static void progress_bar(const kn_autotune_progress *p, void *ud)
{
    (void)ud;
    /* process-wide on purpose: there is one stderr, whichever state searches */
    static double last;
    static bool shown;
    if (!isatty(2)) return;
    double t = kn_clock_s();
    if (p->done) {
        if (shown) fprintf(stderr, "\r\033[K");
        shown = false;
        return;
    }
    if (t - last < 0.1) return;
    last = t;
    shown = true;
    enum { W = 20 };
    int fill = p->kernels_total ? (int)((double)W * p->kernels_done / p->kernels_total) : 0;
    char bar[W + 1];
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : '-';
    bar[W] = 0;
    double left = p->budget_s - p->elapsed_s;
    char resuming[64] = "";
    if (p->resume_total)
        snprintf(resuming, sizeof resuming, "resuming: %d of %d kernels left to tune  ", p->resume_left,
                 p->resume_total);
    fprintf(stderr, "\r\033[Kautotune %s[%s] %3d/%d kernels  %d candidates  %.1f s, at most %.0f s left  %.40s",
            resuming, bar, p->kernels_done, p->kernels_total, p->candidates, p->elapsed_s, left > 0 ? left : 0,
            p->kernel);
    fflush(stderr);
}

/* KILN_AUTOTUNE_FAULT (testing the rejection path) is read once per
 * process, as the environment is the process's; each state's settings
 * take it when kiln opens there. */
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static int fault_candidate;

static void read_fault_env(void)
{
    const char *fault = getenv("KILN_AUTOTUNE_FAULT");
    fault_candidate = fault ? atoi(fault) : 0;
}

/* kiln.config.f32_precision's words, in kn_f32_precision's order */
static const char *const f32_precisions[] = {"ieee", "tf32", "fastest", NULL};

/* The setting behind kiln.config[key] = the value at v, in s's settings:
 * a value they cannot take leaves them as they were (a cache dir: as
 * kn_settings_set_cache_dir keeps it) and marks the key bad, for the next
 * compiled call to raise the error it raised when it read the table. */
static void apply_setting(lua_State *L, kn_lua_state *s, const char *key, int v)
{
    if (strcmp(key, "allow_tf32") == 0) {
        s->settings.f32_precision = lua_toboolean(L, v) ? KN_F32_TF32 : KN_F32_IEEE;
    } else if (strcmp(key, "f32_precision") == 0) {
        int which = KN_F32_IEEE; /* config_newindex checked the word */
        for (int i = 0; f32_precisions[i]; i++)
            if (lua_type(L, v) == LUA_TSTRING && strcmp(lua_tostring(L, v), f32_precisions[i]) == 0) which = i;
        s->settings.f32_precision = (kn_f32_precision)which;
    } else if (strcmp(key, "cache_dir") == 0) {
        bool ok = true;
        if (lua_type(L, v) == LUA_TSTRING || lua_type(L, v) == LUA_TNUMBER) {
            size_t len = 0;
            lua_pushvalue(L, v); /* a number becomes its text on the copy, not in the table */
            const char *dir = lua_tolstring(L, -1, &len);
            ok = kn_settings_set_cache_dir(&s->settings, dir, len);
            lua_pop(L, 1);
        } else {
            s->settings.cache_dir[0] = 0; /* no path (nil too): no persistent cache */
        }
        s->config_bad = (s->config_bad & ~KN_LUA_CONFIG_BAD_CACHE_DIR) | (ok ? 0 : KN_LUA_CONFIG_BAD_CACHE_DIR);
    } else if (strcmp(key, "activation_memory_budget") == 0) {
        bool ok = true;
        if (lua_type(L, v) == LUA_TNUMBER && lua_tonumber(L, v) >= 0 && lua_tonumber(L, v) <= 1)
            s->settings.activation_memory_budget = lua_tonumber(L, v);
        else if (lua_isnil(L, v)) s->settings.activation_memory_budget = 1.0;
        else ok = false;
        s->config_bad = (s->config_bad & ~KN_LUA_CONFIG_BAD_MEMORY) | (ok ? 0 : KN_LUA_CONFIG_BAD_MEMORY);
    } else if (strcmp(key, "autotune_budget_s") == 0) {
        bool ok = true;
        if (lua_type(L, v) == LUA_TNUMBER && lua_tonumber(L, v) >= 0) s->settings.autotune.budget_s = lua_tonumber(L, v);
        else ok = lua_isnil(L, v); /* nil: the budget stays */
        s->config_bad = (s->config_bad & ~KN_LUA_CONFIG_BAD_BUDGET) | (ok ? 0 : KN_LUA_CONFIG_BAD_BUDGET);
    }
}

/* kiln.config[key] = value: kept in the table behind kiln.config (what
 * reads of kiln.config and the compiled calls' options see), and written
 * through to the state's settings. Upvalue 1: that table. */
static int config_newindex(lua_State *L)
{
    /* the keys of push_defaults: a misspelt setting must not be stored
     * where nothing reads it */
    static const char *const keys[] = {"cache_size_limit", "error_on_recompile", "allow_tf32", "f32_precision",
                                       "replay", "dynamic_numbers", "compiler", "check_numerics",
                                       "fold_epilogues", "channels_last", "autotune_budget_s", "cache_dir",
                                       "activation_memory_budget", NULL};
    lua_settop(L, 3);
    if (lua_type(L, 2) != LUA_TSTRING)
        return luaL_error(L, "kiln.config: settings are named (kiln.config.compiler = false), got a %s key",
                          luaL_typename(L, 2));
    /* fault_kernel: testing the numerics checker, not a user's setting */
    if (strcmp(lua_tostring(L, 2), "fault_kernel") != 0) kn_lua_check_name(L, 2, "kiln.config", "setting", keys);
    /* f32_precision's word is checked here, where the user assigns it (a
     * bad one stores nothing); allow_tf32 is its alias, so the table
     * shows the pair as one setting */
    const char *key = lua_tostring(L, 2);
    if (strcmp(key, "f32_precision") == 0) {
        if (lua_isnil(L, 3)) {
            lua_pushliteral(L, "ieee");
            lua_replace(L, 3);
        }
        int which = kn_lua_check_name(L, 3, "kiln.config.f32_precision", "precision", f32_precisions);
        lua_pushboolean(L, which != KN_F32_IEEE);
        lua_setfield(L, lua_upvalueindex(1), "allow_tf32");
    } else if (strcmp(key, "allow_tf32") == 0) {
        lua_pushstring(L, lua_toboolean(L, 3) ? "tf32" : "ieee");
        lua_setfield(L, lua_upvalueindex(1), "f32_precision");
    }
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_rawset(L, lua_upvalueindex(1));
    apply_setting(L, kn_lua_state_get(L), key, 3);
    return 0;
}

/* next over the table behind kiln.config (pairs(kiln.config)). */
static int config_next(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 2);
    if (lua_next(L, 1)) return 2;
    lua_pushnil(L);
    return 1;
}

static int config_pairs(lua_State *L)
{
    lua_pushcfunction(L, config_next);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushnil(L);
    return 3;
}

/* The table behind kiln.config, with its defaults. */
static void push_defaults(lua_State *L, const kn_lua_state *s)
{
    lua_createtable(L, 0, 14);
    lua_pushinteger(L, 8);
    lua_setfield(L, -2, "cache_size_limit");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "error_on_recompile");
    lua_pushboolean(L, kn_settings_allow_tf32(&s->settings));
    lua_setfield(L, -2, "allow_tf32"); /* an alias: true is f32_precision "tf32", false "ieee" */
    lua_pushstring(L, f32_precisions[s->settings.f32_precision]);
    lua_setfield(L, -2, "f32_precision"); /* "ieee", "tf32" or "fastest" */
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "replay"); /* direct replay of pure traces (see README) */
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "dynamic_numbers"); /* a Lua number that changed once is read at every call */
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "compiler"); /* false: compiled graphs run op by op (the reference) */
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "check_numerics"); /* compare every compiled run with the reference */
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "fold_epilogues"); /* bias/ReLU/residual in the matmul or conv library call */
    /* conv chains channels-last: "auto" (where the device runs them faster), true, false;
     * KILN_CHANNELS_LAST=0/1 sets the default (benchmarks compare both) */
    const char *cl = getenv("KILN_CHANNELS_LAST");
    if (cl && strcmp(cl, "1") == 0) lua_pushboolean(L, 1);
    else if (cl && strcmp(cl, "0") == 0) lua_pushboolean(L, 0);
    else lua_pushstring(L, "auto");
    lua_setfield(L, -2, "channels_last");
    lua_pushnumber(L, s->settings.autotune.budget_s);
    lua_setfield(L, -2, "autotune_budget_s"); /* max-autotune's search time per compiled function */
    /* $KILN_CACHE_DIR as it is (even ""), else ~/.cache/kiln */
    const char *cache = getenv("KILN_CACHE_DIR");
    const char *home = getenv("HOME");
    if (cache) lua_pushstring(L, cache);
    else lua_pushfstring(L, "%s/.cache/kiln", home ? home : ".");
    lua_setfield(L, -2, "cache_dir");
    lua_pushnumber(L, s->settings.activation_memory_budget);
    lua_setfield(L, -2, "activation_memory_budget"); /* 1: a training step keeps every value its backward reads */
}

void kn_lua_open_config(lua_State *L, int kiln)
{
    kn_lua_state *s = kn_lua_state_get(L);
    pthread_once(&fault_once, read_fault_env);
    s->settings.autotune.fault_candidate = fault_candidate;
    s->settings.autotune.progress = progress_bar; /* an embedder may set its own (kn_lua_settings) */
    s->settings.autotune.progress_ud = NULL;
    push_defaults(L, s);
    int table = lua_gettop(L);
    static const char *const settings_keys[] = {"allow_tf32", "cache_dir", "autotune_budget_s"};
    for (size_t i = 0; i < sizeof settings_keys / sizeof settings_keys[0]; i++) {
        lua_getfield(L, table, settings_keys[i]);
        apply_setting(L, s, settings_keys[i], lua_gettop(L));
        lua_pop(L, 1);
    }
    lua_pushvalue(L, table);
    lua_setfield(L, LUA_REGISTRYINDEX, "kiln.config");
    /* kiln.config itself: an empty proxy, so that every assignment reaches
     * config_newindex */
    lua_createtable(L, 0, 0);
    lua_createtable(L, 0, 3);
    lua_pushvalue(L, table);
    lua_setfield(L, -2, "__index");
    lua_pushvalue(L, table);
    lua_pushcclosure(L, config_newindex, 1);
    lua_setfield(L, -2, "__newindex");
    lua_pushvalue(L, table);
    lua_pushcclosure(L, config_pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lua_setmetatable(L, -2);
    lua_setfield(L, kiln, "config");
    lua_pop(L, 1);
}

/* The errors a bad kiln.config.cache_dir (at idx) raises at a compiled
 * call: a cut or NUL-shortened dir would put the entries somewhere else. */
static void check_cache_dir(lua_State *L, int idx)
{
    size_t dir_len = 0;
    const char *dir = lua_isstring(L, idx) ? lua_tolstring(L, idx, &dir_len) : "";
    if (dir_len > KN_CACHE_DIR_MAX)
        luaL_error(L, "kiln.config.cache_dir is %d bytes long; kiln supports at most %d", (int)dir_len,
                   KN_CACHE_DIR_MAX);
    if (strlen(dir) != dir_len)
        luaL_error(L, "kiln.config.cache_dir contains a NUL byte (at byte %d): not a valid path",
                   (int)strlen(dir) + 1);
}

/* The error a bad kiln.config.autotune_budget_s (at idx) raises at a
 * compiled call. */
static void check_budget(lua_State *L, int idx)
{
    if ((lua_type(L, idx) == LUA_TNUMBER && lua_tonumber(L, idx) >= 0) || lua_isnil(L, idx)) return;
    char got[64];
    if (lua_type(L, idx) == LUA_TNUMBER) snprintf(got, sizeof got, "number %g", lua_tonumber(L, idx));
    else snprintf(got, sizeof got, "%s", luaL_typename(L, idx));
    luaL_error(L, "kiln.config.autotune_budget_s must be a number of seconds >= 0, got %s", got);
}

/* kiln.config's compiled-call options (the table behind it at cfg) into
 * cm; *fold and *channels_last get fold_epilogues and channels_last (-1:
 * "auto"). */
static void read_options(lua_State *L, int cfg, kn_compiled *cm, bool *fold, int *channels_last)
{
    const kn_lua_state *s = kn_lua_state_get(L);
    lua_getfield(L, cfg, "cache_size_limit");
    if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0)
        cm->opt.cache_size_limit = (int)kn_lua_int_in(L, -1, 0, INT_MAX, "kiln.config.cache_size_limit");
    lua_getfield(L, cfg, "error_on_recompile");
    cm->opt.error_on_recompile = lua_toboolean(L, -1);
    lua_getfield(L, cfg, "compiler");
    cm->opt.compiler = lua_isnil(L, -1) || lua_toboolean(L, -1);
    if (s->config_bad & KN_LUA_CONFIG_BAD_CACHE_DIR) {
        lua_getfield(L, cfg, "cache_dir");
        check_cache_dir(L, -1);
        lua_pop(L, 1);
    }
    lua_getfield(L, cfg, "check_numerics");
    cm->opt.check_numerics = lua_toboolean(L, -1);
    lua_getfield(L, cfg, "fault_kernel"); /* testing the checker: corrupt this kernel's output */
    cm->check.fault_kernel = lua_isinteger(L, -1) ? (int)kn_lua_int_in(L, -1, -1, INT_MAX, "kiln.config.fault_kernel") : -1;
    lua_getfield(L, cfg, "fold_epilogues");
    *fold = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_getfield(L, cfg, "dynamic_numbers");
    cm->opt.dynamic_numbers = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_getfield(L, cfg, "channels_last");
    if (lua_isboolean(L, -1)) *channels_last = lua_toboolean(L, -1) ? 1 : 0;
    else if (!lua_isnil(L, -1) && !(lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "auto") == 0))
        luaL_error(L, "kiln.config.channels_last must be true, false or \"auto\" (got %s)", luaL_tolstring(L, -1, NULL));
    lua_settop(L, cfg);
}

void kn_lua_config_compiled(lua_State *L, kn_compiled *cm)
{
    kn_lua_state *s = kn_lua_state_get(L);
    bool fold = true;
    int channels_last = -1; /* -1: auto */
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.config");
    int cfg = lua_gettop(L);
    if (lua_istable(L, cfg)) {
        read_options(L, cfg, cm, &fold, &channels_last);
        if (s->config_bad & KN_LUA_CONFIG_BAD_BUDGET) {
            lua_getfield(L, cfg, "autotune_budget_s");
            check_budget(L, -1);
            lua_pop(L, 1);
        }
        if (s->config_bad & KN_LUA_CONFIG_BAD_MEMORY) {
            lua_getfield(L, cfg, "activation_memory_budget");
            luaL_error(L, "kiln.config.activation_memory_budget must be a number from 0 to 1 (1 keeps every value "
                          "the backward reads), got %s", luaL_tolstring(L, -1, NULL));
        }
    }
    lua_pop(L, 1);
    cm->opt.settings = &s->settings;
    int log_flags = s->log_flags;
    cm->log.flags = log_flags;
    cm->opt.pass_flags = (log_flags & KN_LOG_PASSES) ? KN_PASSES_LOG : 0;
    if (!fold) cm->opt.pass_flags |= KN_PLAN_NO_EPILOGUES;
    if (channels_last < 0) cm->opt.pass_flags |= KN_PLAN_NHWC_AUTO;
    else if (channels_last) cm->opt.pass_flags |= KN_PASSES_NHWC_HALF | KN_PASSES_NHWC_F32;
#ifndef NDEBUG
    cm->opt.pass_flags |= KN_PASSES_VERIFY; /* debug builds check the graph after every pass */
#endif
}
