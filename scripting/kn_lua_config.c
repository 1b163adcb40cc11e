/* kn_lua_config: kiln.config and how its switches reach core (see
 * kn_lua_config.h). */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "kn_autotune.h"
#include "kn_backend.h"
#include "kn_clock.h"
#include "kn_fs.h"
#include "kn_lua_config.h"
#include "kn_lua_state.h"
#include "kn_lua_util.h"
#include "kn_passes.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/kn_cuda.h"
#endif

void kn_lua_open_config(lua_State *L, int kiln)
{
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, 8);
    lua_setfield(L, -2, "cache_size_limit");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "error_on_recompile");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "allow_tf32");
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
    lua_pushnumber(L, kn_autotune_get_opts()->budget_s);
    lua_setfield(L, -2, "autotune_budget_s"); /* max-autotune's search time per compiled function */
    const char *cache = getenv("KILN_CACHE_DIR");
    const char *home = getenv("HOME");
    if (cache) lua_pushstring(L, cache);
    else lua_pushfstring(L, "%s/.cache/kiln", home ? home : ".");
    lua_setfield(L, -2, "cache_dir");
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "kiln.config");
    lua_setfield(L, kiln, "config");
}

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

/* KILN_AUTOTUNE_FAULT is read once per process: getenv scans the whole
 * environment, and this runs at every compiled call. */
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static int fault_candidate;

static void read_fault_env(void)
{
    const char *fault = getenv("KILN_AUTOTUNE_FAULT");
    fault_candidate = fault ? atoi(fault) : 0;
}

/* kiln.config.autotune_budget_s (and KILN_AUTOTUNE_FAULT, for the tests
 * of the rejection path) into the search's options; at each call. */
static void sync_autotune(lua_State *L)
{
    kn_autotune_opts o = *kn_autotune_get_opts();
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.config");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "autotune_budget_s");
        if (lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) >= 0) o.budget_s = lua_tonumber(L, -1);
        else if (!lua_isnil(L, -1)) {
            char got[64];
            if (lua_type(L, -1) == LUA_TNUMBER) snprintf(got, sizeof got, "number %g", lua_tonumber(L, -1));
            else snprintf(got, sizeof got, "%s", luaL_typename(L, -1));
            luaL_error(L, "kiln.config.autotune_budget_s must be a number of seconds >= 0, got %s", got);
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    pthread_once(&fault_once, read_fault_env);
    o.fault_candidate = fault_candidate;
    if (!o.progress || o.progress == progress_bar) { /* an embedder's own callback is kept */
        o.progress = progress_bar;
        o.progress_ud = NULL;
    }
    kn_autotune_set_opts(&o);
}

/* The switches are process-wide in core (a backend reads them when it runs
 * a kernel), so they are pushed from the calling state's kiln.config at each
 * call: two states with different settings each get their own for their
 * own calls. */
void kn_lua_sync_config(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.config");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "allow_tf32");
        kn_set_allow_tf32(lua_toboolean(L, -1));
        lua_getfield(L, -2, "cache_dir");
#ifdef KILN_HAVE_CUDA
        if (lua_isstring(L, -1)) {
            const char *dir = lua_tostring(L, -1), *cur = kn_cuda_cache_dir();
            if (!cur || strcmp(cur, dir) != 0) kn_cuda_set_cache_dir(dir);
        }
#endif
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    sync_autotune(L);
}

void kn_lua_config_compiled(lua_State *L, kn_compiled *cm)
{
    bool fold = true;
    int channels_last = -1; /* -1: auto */
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.config");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "cache_size_limit");
        if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0)
            cm->opt.cache_size_limit = (int)kn_lua_int_in(L, -1, 0, INT_MAX, "kiln.config.cache_size_limit");
        lua_getfield(L, -2, "error_on_recompile");
        cm->opt.error_on_recompile = lua_toboolean(L, -1);
        lua_getfield(L, -3, "compiler");
        cm->opt.compiler = lua_isnil(L, -1) || lua_toboolean(L, -1);
        lua_getfield(L, -4, "cache_dir");
        size_t dir_len = 0;
        const char *dir = lua_isstring(L, -1) ? lua_tolstring(L, -1, &dir_len) : "";
        /* a cut or NUL-shortened dir would put the entries somewhere else */
        if (dir_len > KN_CACHE_DIR_MAX)
            luaL_error(L, "kiln.config.cache_dir is %d bytes long; kiln supports at most %d", (int)dir_len,
                       KN_CACHE_DIR_MAX);
        if (strlen(dir) != dir_len)
            luaL_error(L, "kiln.config.cache_dir contains a NUL byte (at byte %d): not a valid path",
                       (int)strlen(dir) + 1);
        memcpy(cm->opt.cache_dir, dir, dir_len + 1);
        lua_getfield(L, -5, "check_numerics");
        cm->opt.check_numerics = lua_toboolean(L, -1);
        lua_getfield(L, -6, "fault_kernel"); /* testing the checker: corrupt this kernel's output */
        cm->check.fault_kernel = lua_isinteger(L, -1) ? (int)kn_lua_int_in(L, -1, -1, INT_MAX, "kiln.config.fault_kernel") : -1;
        lua_getfield(L, -7, "fold_epilogues");
        fold = lua_isnil(L, -1) || lua_toboolean(L, -1);
        lua_getfield(L, -8, "dynamic_numbers");
        cm->opt.dynamic_numbers = lua_isnil(L, -1) || lua_toboolean(L, -1);
        lua_getfield(L, -9, "channels_last");
        if (lua_isboolean(L, -1)) channels_last = lua_toboolean(L, -1) ? 1 : 0;
        else if (!lua_isnil(L, -1) && !(lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "auto") == 0))
            luaL_error(L, "kiln.config.channels_last must be true, false or \"auto\" (got %s)", luaL_tolstring(L, -1, NULL));
        lua_pop(L, 9);
    }
    lua_pop(L, 1);
    kn_lua_sync_config(L);
    int log_flags = kn_lua_state_get(L)->log_flags;
    cm->log.flags = log_flags;
    cm->opt.pass_flags = (log_flags & KN_LOG_PASSES) ? KN_PASSES_LOG : 0;
    if (!fold) cm->opt.pass_flags |= KN_PLAN_NO_EPILOGUES;
    if (channels_last < 0) cm->opt.pass_flags |= KN_PLAN_NHWC_AUTO;
    else if (channels_last) cm->opt.pass_flags |= KN_PASSES_NHWC_HALF | KN_PASSES_NHWC_F32;
#ifndef NDEBUG
    cm->opt.pass_flags |= KN_PASSES_VERIFY; /* debug builds check the graph after every pass */
#endif
}
