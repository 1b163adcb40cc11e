/* kn_lua_compile: kiln.compile, the compiled callable (calling, modes,
 * the numerics check), kiln.graph_break, kiln.eager and
 * kiln.mark_dynamic; it opens kiln.config (kn_lua_config.c) and kiln.log
 * (kn_lua_log.c) with them.
 *
 * A call traces the function through kn_lua_trace (the Lua side of capture)
 * and core/capture/kn_capture, or replays its last trace (kn_lua_replay.c);
 * its inspection methods are kn_lua_inspect.c and kn_lua_autotune.c.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "kn_autograd.h"
#include "kn_capture.h"
#include "kn_fs.h"
#include "kn_lua_autotune.h"
#include "kn_lua_compile.h"
#include "kn_lua_compiled_ud.h"
#include "kn_lua_config.h"
#include "kn_lua_inspect.h"
#include "kn_lua_log.h"
#include "kn_lua_replay.h"
#include "kn_lua_replay_tape.h"
#include "kn_lua_state.h"
#include "kn_lua_tensor_ud.h"
#include "kn_lua_trace.h"
#include "kn_lua_util.h"

/* ---- kiln.graph_break, kiln.eager -------------------------------------- */

static int l_graph_break(lua_State *L)
{
    kn_lua_graph_break(L, "explicit break", "kiln.graph_break() called",
                       "remove the call to keep this code in one graph");
    return 0;
}

/* kiln.is_compiling(): whether the code runs inside a trace (its ops go
 * into a compiled function's graph, not to the device), as
 * torch.compiler.is_compiling(). Library code picks what it records by it:
 * an optimizer's eager step runs its own compiled update, which a trace
 * would only inline. */
static int l_is_compiling(lua_State *L)
{
    lua_pushboolean(L, kn_lua_state_get(L)->cap != NULL);
    return 1;
}

/* Puts the capture back when a kiln.eager function's call ends, by error
 * too: a to-be-closed value, so that the function runs with lua_call and
 * an error's traceback keeps the user's frames inside it. */
typedef struct {
    kn_lua_state *s;
    kn_capture *cap;
} eager_cap_restore;

static int eager_cap_close(lua_State *L)
{
    eager_cap_restore *r = lua_touserdata(L, 1);
    if (r && r->s) r->s->cap = r->cap;
    return 0;
}

/* The wrapper kiln.eager returns: upvalue 1 is the function, 2 its name. */
static int eager_call(lua_State *L)
{
    kn_lua_state *s = kn_lua_state_get(L);
    kn_capture *cap = s->cap;
    int n = lua_gettop(L);
    if (cap) {
        char reason[256];
        snprintf(reason, sizeof reason, "kiln.eager function '%s' always runs uncompiled",
                 lua_tostring(L, lua_upvalueindex(2)));
        kn_lua_graph_break(L, "eager function", reason,
                           "drop kiln.eager to capture the function into the graph");
    }
    eager_cap_restore *r = lua_newuserdatauv(L, sizeof *r, 0);
    r->s = s;
    r->cap = cap;
    if (luaL_newmetatable(L, "kiln.eager_cap_restore")) {
        lua_pushcfunction(L, eager_cap_close);
        lua_setfield(L, -2, "__close");
    }
    lua_setmetatable(L, -2);
    lua_insert(L, 1);
    lua_toclose(L, 1);
    s->cap = NULL; /* placeholders given as arguments resolve to their values */
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 2);
    lua_call(L, n, LUA_MULTRET);
    s->cap = cap;
    r->s = NULL;
    return lua_gettop(L) - 1;
}

static int l_eager(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    char name[KN_NAME_MAX];
    kn_lua_trace_find_name(L, 1, name, sizeof name);
    lua_pushvalue(L, 1);
    lua_pushstring(L, name[0] ? name : "?");
    lua_pushcclosure(L, eager_call, 2);
    return 1;
}

/* ---- the compiled callable ---------------------------------------------- */

/* A compiled callable is a compiled_ud (kn_lua_compiled_ud.h) whose
 * uservalue table is {fn =, module =, replay =}; its direct replay is
 * kn_lua_replay.c. */

/* What undoes a traced call when the traced function raises: a
 * to-be-closed value under the function's slot. The function runs with
 * lua_call, not lua_pcall, so that the error's traceback (made where it is
 * raised, before the stack unwinds) shows the user's frames inside the
 * compiled function as an eager call's does; this value's __close then
 * ends the capture and restores the debug hook while the stack unwinds. */
typedef struct {
    kn_compiled *cm;
    kn_lua_trace_hook hook;
    bool armed; /* the traced call is running: undo it if closed now */
    int callable_ref; /* the compiled callable (registry reference), for the failure record */
} traced_call_guard;

/* Hand a compiled call's event to the session record (scripting/lua/
 * 61_events.lua, registry[hook]): the callable at callable_idx, and the
 * error at err_idx (0: none). An error there is dropped: the record must
 * never change what a call does. */
static void notify_event(lua_State *L, const char *hook, int callable_idx, int err_idx)
{
    int top = lua_gettop(L);
    if (lua_getfield(L, LUA_REGISTRYINDEX, hook) == LUA_TFUNCTION) {
        lua_pushvalue(L, callable_idx);
        if (err_idx) luaL_tolstring(L, err_idx, NULL);
        if (lua_pcall(L, err_idx ? 2 : 1, 0, 0) != LUA_OK) lua_pop(L, 1);
    }
    lua_settop(L, top);
}

static int traced_call_close(lua_State *L)
{
    traced_call_guard *g = lua_touserdata(L, 1);
    if (!g) return 0;
    if (g->armed && !lua_isnoneornil(L, 2) && g->callable_ref != LUA_NOREF) {
        /* the call failed: its error goes into the session record */
        lua_rawgeti(L, LUA_REGISTRYINDEX, g->callable_ref);
        compiled_ud *u = luaL_testudata(L, -1, KN_COMPILED_MT);
        if (u) snprintf(u->no_replay, sizeof u->no_replay, "its last call failed (the report's Failures has the error)");
        /* a backward that failed (on a value a break did not keep) still
         * says the function trains: the next call keeps the values */
        if (u && g->cm->cap.call_backwards) u->trains = true;
        notify_event(L, "kiln.on_failure", lua_gettop(L), 2);
        lua_pop(L, 1);
    }
    luaL_unref(L, LUA_REGISTRYINDEX, g->callable_ref);
    g->callable_ref = LUA_NOREF;
    if (!g->armed) return 0;
    g->armed = false;
    kn_lua_trace_unwatch(L, &g->hook);
    kn_lua_state_get(L)->cap = NULL;
    kn_capture_end(&g->cm->cap, false);
    kn_lua_trace_flush_log(g->cm);
    return 0;
}

static traced_call_guard *push_traced_call_guard(lua_State *L, kn_compiled *cm)
{
    traced_call_guard *g = lua_newuserdatauv(L, sizeof *g, 0);
    memset(g, 0, sizeof *g);
    g->cm = cm;
    lua_pushvalue(L, 1); /* the compiled callable (cm_call's self) */
    g->callable_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (luaL_newmetatable(L, "kiln.traced_call_guard")) {
        lua_pushcfunction(L, traced_call_close);
        lua_setfield(L, -2, "__close");
    }
    lua_setmetatable(L, -2);
    lua_toclose(L, -1);
    return g;
}

/* A call that runs the function as written, without tracing it: nested in
 * another traced call (its ops go into the outer graph), or in mode eager. */
static int call_untraced(lua_State *L, int uv, int nargs, bool is_module)
{
    int fn_idx = uv + 1;
    if (!is_module) lua_pop(L, 1);
    for (int i = 2; i <= nargs + 1; i++) lua_pushvalue(L, i);
    lua_call(L, nargs + (is_module ? 1 : 0), LUA_MULTRET);
    return lua_gettop(L) - fn_idx + 1;
}

/* Push the call's arguments (at [2, nargs + 1]) for the traced function
 * whose parameters start at first_param: each tensor as a graph input of
 * the capture named by its parameter, other values as they are. On an
 * error the capture is ended. */
static kn_status push_traced_args(lua_State *L, kn_compiled *cm, int fn_idx, int first_param, int nargs)
{
    kn_lua_state *s = kn_lua_state_get(L);
    kn_status st;
    for (int i = 0; i < nargs; i++) {
        kn_tensor *t = kn_lua_totensor(L, 2 + i);
        if (!t) {
            lua_pushvalue(L, 2 + i);
            continue;
        }
        lua_pushvalue(L, fn_idx);
        const char *pname = lua_getlocal(L, NULL, first_param + i);
        char name[KN_NAME_MAX];
        snprintf(name, sizeof name, "%s", pname ? pname : "");
        lua_pop(L, 1);
        if (!name[0]) snprintf(name, sizeof name, "arg %d", i + 1);
        kn_tensor *p;
        st = kn_capture_input(&cm->cap, t, KN_IN_ARG, name, cm->id.where, &p);
        if (st != KN_OK) {
            s->cap = NULL;
            kn_capture_end(&cm->cap, false);
            return st;
        }
        if (t->ag && !p->ag) { /* the function sees the placeholder: it carries the argument's autograd state */
            p->ag = t->ag;
            kn_grad_meta_retain(t->ag);
        }
        kn_lua_pushtensor(L, p);
    }
    return KN_OK;
}

/* This call's train/eval mode (a guard of every version) and whether its
 * graphs keep the values autograd saved: a module in train mode or a
 * function that ran backward before, with grad mode on (as PyTorch makes
 * a training graph when grad is needed). Inference (eval mode, or
 * kiln.no_grad) keeps its graphs as they were. */
static void set_training(lua_State *L, compiled_ud *u, int module_idx, int fn_idx)
{
    kn_compiled *cm = u->cm;
    cm->id.training = kn_lua_trace_training(L, module_idx, fn_idx, cm->id.training_what, sizeof cm->id.training_what);
    cm->cap.keep_saved = kn_lua_state_get(L)->grad.enabled && (cm->id.training || u->trains);
}

/* The results from call_base on of a call that keeps no values for
 * backward lose the history its trace recorded, before its last graph
 * runs: backward from them says why, and the graph computes only what
 * the results and the Lua state refer to. */
static void forget_history(lua_State *L, int call_base)
{
    for (int i = call_base; i <= lua_gettop(L); i++) {
        kn_tensor *t = kn_lua_totensor(L, i);
        if (t) kn_autograd_forget(t, KN_GRAD_ORIGIN_COMPILED);
    }
}

/* The results from call_base on whose history the call's own backward
 * went through (a training step's loss) lose it, marked as spent: a
 * second backward from them says why, whether the call was traced or
 * replayed (a replay gives them the same mark). */
static void forget_spent_history(lua_State *L, int call_base)
{
    for (int i = call_base; i <= lua_gettop(L); i++) {
        kn_tensor *t = kn_lua_totensor(L, i);
        if (t && kn_autograd_history_freed(t)) kn_autograd_forget(t, KN_GRAD_ORIGIN_SPENT);
    }
}

/* A call of a compiled callable: replayed when the last trace allows it
 * and its guards hold, else traced (its graphs compiled or found in the
 * cache and run), then recorded for the next replay. */
static int cm_call_body(lua_State *L)
{
    compiled_ud *u = kn_lua_check_compiled(L, 1);
    kn_compiled *cm = u->cm;
    int nargs = lua_gettop(L) - 1;
    /* every path below pushes a copy of each argument (and a placeholder
     * per tensor) on top of the originals: room for twice the arguments
     * plus the few slots of our own, or a clear error, never a write past
     * the stack */
    luaL_checkstack(L, nargs + 16, "compiled function: too many arguments");
    lua_getiuservalue(L, 1, 1);
    int uv = lua_gettop(L);
    lua_getfield(L, uv, "fn");
    lua_getfield(L, uv, "module");
    bool is_module = !lua_isnil(L, -1);
    int module_idx = lua_gettop(L);

    kn_lua_state *s = kn_lua_state_get(L);
    /* nested: trace the inner function into the outer graph; eager: no
     * capture, the function as written */
    if (s->cap || cm->cap.active || strcmp(cm->id.mode, "eager") == 0) return call_untraced(L, uv, nargs, is_module);
    kn_lua_config_compiled(L, cm);
    if (u->rp.valid) {
        int n = kn_lua_replay_try(L, u, uv, nargs, module_idx);
        if (n >= 0) return n;
    }
    /* parameter names of the module, by tensor id */
    kn_lua_trace_param_map(L, is_module ? module_idx : 0, uv + 1);
    set_training(L, u, is_module ? module_idx : 0, uv + 1);

    /* what the function can read, before it runs: a trace that changes it
     * must not be replayed (kn_lua_replay_record) */
    lua_createtable(L, 0, 3);
    int before = lua_gettop(L);
    kn_lua_replay_snapshot(L, before, uv + 1, is_module ? module_idx : 0, 0);

    /* under the function's slot, so that the results stay on top */
    traced_call_guard *guard = push_traced_call_guard(L, cm);
    kn_status st = kn_capture_begin(cm);
    if (st != KN_OK) return kn_lua_fail(L, st);
    s->cap = &cm->cap;
    /* the function (and self), then the arguments: tensors become inputs
     * named by the function's parameters */
    int fn_idx = uv + 1;
    lua_pushvalue(L, fn_idx);
    int first_param = 1;
    if (is_module) {
        lua_pushvalue(L, module_idx);
        first_param = 2;
    }
    int call_base = lua_gettop(L) - (is_module ? 1 : 0); /* the function's slot */
    st = push_traced_args(L, cm, fn_idx, first_param, nargs);
    if (st != KN_OK) return kn_lua_fail(L, st);
    int n = lua_gettop(L) - call_base;
    lua_pushvalue(L, fn_idx);
    lua_setfield(L, LUA_REGISTRYINDEX, "kiln.compiling"); /* for naming its frame in break stacks */
    /* watch the calls for impure ones (see purity_hook) */
    kn_lua_trace_watch(L, &guard->hook);
    uint64_t rng_before = s->rng_offset;
    u->trace_seq0 = s->grad.seq;
    guard->armed = true; /* an error from here on: traced_call_close undoes the call */
    lua_call(L, n, LUA_MULTRET);
    guard->armed = false;
    kn_lua_trace_unwatch(L, &guard->hook);
    s->cap = NULL;
    /* the last graph computes what is still referenced: collect first, so
     * that set (and so the compiled plan) does not depend on the collector */
    lua_gc(L, LUA_GCCOLLECT);
    if (cm->cap.call_backwards) u->trains = true;
    if (!cm->cap.keep_saved) forget_history(L, call_base);
    else if (cm->cap.call_backwards) forget_spent_history(L, call_base);
    st = kn_capture_end(&cm->cap, true);
    kn_lua_trace_flush_log(cm);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.config");
    lua_getfield(L, -1, "replay");
    bool replay_on = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_pop(L, 2);
    u->rp.valid = false;
    u->rp.rng_used = s->rng_offset - rng_before;
    if (replay_on) kn_lua_replay_record(L, u, uv, nargs, is_module, module_idx, call_base, before);
    notify_event(L, "kiln.on_traced_call", 1, 0);
    return lua_gettop(L) - call_base + 1;
}

static int cm_gc(lua_State *L)
{
    compiled_ud *u = luaL_checkudata(L, 1, KN_COMPILED_MT);
    kn_compiled_free(u->cm);
    u->cm = NULL;
    kn_lua_replay_forget(&u->rp);
    return 0;
}

/* A call of a compiled callable; one compiled with {autocast = dtype}
 * runs under kiln.autocast in that dtype, restored however the call ends
 * (its traces and replays then carry the casts, kn_lua_run). */
static int cm_call(lua_State *L)
{
    compiled_ud *u = kn_lua_check_compiled(L, 1);
    if (!u->has_autocast) return cm_call_body(L);
    kn_lua_state *s = kn_lua_state_get(L);
    bool was_on = s->autocast_on;
    kn_dtype was = s->autocast_dtype;
    s->autocast_on = u->autocast_on;
    s->autocast_dtype = u->autocast_dtype;
    lua_pushcfunction(L, cm_call_body);
    lua_insert(L, 1);
    int st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    s->autocast_on = was_on;
    s->autocast_dtype = was;
    if (st != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

/* In the order the REPL's :mode lists them (scripting/lua/20_repl.lua). */
static const char *const kn_modes[] = {"eager", "default", "reduce-overhead", "max-autotune",
                                       "max-autotune-no-cudagraphs", NULL};

/* cm:check(...): one call with the numerics check on. Returns {ok =,
 * message =, checks =} and the call's results after it. */
/* cm(...) with *flag set for that call only (the numerics check, the
 * ledger): the call's results on the stack; returns how many. */
static int call_flagged(lua_State *L, bool *flag)
{
    *flag = true;
    lua_pushcfunction(L, cm_call);
    lua_insert(L, 1);
    int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    *flag = false;
    if (rc != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

static int cm_check(lua_State *L)
{
    compiled_ud *u = kn_lua_check_compiled(L, 1);
    kn_compiled *cm = u->cm;
    cm->check.report[0] = 0;
    int before = cm->check.runs;
    int nres = call_flagged(L, &cm->check.once);
    lua_createtable(L, 0, 3);
    lua_pushboolean(L, cm->check.report[0] == 0);
    lua_setfield(L, -2, "ok");
    lua_pushstring(L, cm->check.report[0] ? cm->check.report
                                          : cm->check.runs > before ? "every kernel agrees with the reference"
                                                                    : "nothing compiled ran (eager mode or op by op)");
    lua_setfield(L, -2, "message");
    lua_pushinteger(L, cm->check.runs - before);
    lua_setfield(L, -2, "checks");
    lua_insert(L, 1);
    return nres + 1;
}

/* cm:precision(...): one call with the precision ledger on. Returns the
 * ledger (a list of rows, one per f32 library kernel of the graphs that
 * ran compiled; kn_precision_row's fields, kernel 1-based) and the call's
 * results after it. */
static int cm_precision(lua_State *L)
{
    compiled_ud *u = kn_lua_check_compiled(L, 1);
    kn_compiled *cm = u->cm;
    int before = cm->ledger.runs;
    int nres = call_flagged(L, &cm->ledger.once);
    int n = cm->ledger.runs > before ? cm->ledger.n_rows : 0;
    lua_createtable(L, n, 1);
    for (int i = 0; i < n; i++) {
        const kn_precision_row *r = &cm->ledger.rows[i];
        lua_createtable(L, 0, 11);
        lua_pushinteger(L, r->kernel + 1);
        lua_setfield(L, -2, "kernel");
        lua_pushstring(L, r->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, r->op);
        lua_setfield(L, -2, "op");
        lua_pushstring(L, r->where);
        lua_setfield(L, -2, "where");
        lua_pushstring(L, r->engine);
        lua_setfield(L, -2, "engine");
        lua_pushinteger(L, r->variant);
        lua_setfield(L, -2, "variant");
        lua_pushnumber(L, r->max_err);
        lua_setfield(L, -2, "max_err");
        lua_pushnumber(L, r->rms_err);
        lua_setfield(L, -2, "rms_err");
        lua_pushnumber(L, r->f32_max_err);
        lua_setfield(L, -2, "f32_max_err");
        lua_pushnumber(L, r->f32_rms_err);
        lua_setfield(L, -2, "f32_rms_err");
        lua_pushboolean(L, r->meets);
        lua_setfield(L, -2, "meets");
        lua_pushboolean(L, r->by_floor);
        lua_setfield(L, -2, "by_floor");
        lua_seti(L, -2, i + 1);
    }
    lua_pushboolean(L, cm->ledger.runs > before);
    lua_setfield(L, -2, "measured"); /* false: nothing compiled ran (eager mode, op by op) */
    lua_insert(L, 1);
    return nres + 1;
}

static int cm_set_mode(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    int m = kn_lua_check_name(L, 2, "set_mode", "mode", kn_modes);
    kn_compiled_set_mode(cm, kn_modes[m]);
    lua_settop(L, 1);
    return 1;
}

static int cm_mode(lua_State *L)
{
    lua_pushstring(L, kn_lua_check_compiled(L, 1)->cm->id.mode);
    return 1;
}

static int cm_tostring(lua_State *L)
{
    compiled_ud *u = luaL_checkudata(L, 1, KN_COMPILED_MT);
    if (!u->cm) lua_pushliteral(L, "kiln.Compiled (freed)");
    else lua_pushfstring(L, "kiln.Compiled %s (%s), mode %s", u->cm->id.name, u->cm->id.where, u->cm->id.mode);
    return 1;
}

/* The name a function's definition gives it, read from its source line
 * ("local function forward(", "function M.run(", "step = function("), for
 * functions no variable in sight holds. */
static void name_from_source(const lua_Debug *ar, char *name, size_t nsize)
{
    if (ar->source[0] != '@' || ar->linedefined <= 0) return;
    FILE *fp = kn_fopen_regular(ar->source + 1, NULL); /* a script read from a FIFO cannot be read twice */
    if (!fp) return;
    char line[512];
    for (int n = 1; fgets(line, sizeof line, fp); n++) {
        if (n < ar->linedefined) continue;
        char *p = strstr(line, "function");
        if (!p) break;
        char *q = p + 8;
        while (*q == ' ' || *q == '\t') q++;
        size_t len = strspn(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:");
        if (len > 0) { /* function NAME( */
            const char *last = q + len;
            const char *start = q;
            for (const char *c = q; c < last; c++)
                if (*c == '.' || *c == ':') start = c + 1;
            snprintf(name, nsize, "%.*s", (int)(last - start), start);
        } else { /* NAME = function( */
            char *e = p;
            while (e > line && (e[-1] == ' ' || e[-1] == '=' || e[-1] == '\t')) e--;
            char *b = e;
            while (b > line && (isalnum((unsigned char)b[-1]) || b[-1] == '_')) b--;
            if (e > b && memchr(e, '=', (size_t)(p - e)) != NULL) snprintf(name, nsize, "%.*s", (int)(e - b), b);
        }
        break;
    }
    fclose(fp);
}

/* A name for the function or module being compiled, and where it is defined. */
/* The name of a global holding the value at idx ("" if none), as Lua's
 * own tracebacks name a function they reach through _G: a function typed
 * in the REPL (h = function(x) ... end) and compiled in a later chunk. */
static void global_name(lua_State *L, int idx, char *name, size_t nsize)
{
    idx = lua_absindex(L, idx);
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, idx)) {
            snprintf(name, nsize, "%s", lua_tostring(L, -2));
            lua_pop(L, 2);
            break;
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

static void describe(lua_State *L, int idx, bool is_module, char *name, size_t nsize, char *where,
                     size_t wsize)
{
    lua_Debug ar;
    name[0] = 0;
    if (is_module) {
        lua_getfield(L, idx, "forward");
        snprintf(name, nsize, "forward");
    } else {
        lua_pushvalue(L, idx);
    }
    if (lua_isfunction(L, -1)) {
        lua_getinfo(L, ">S", &ar);
        if (ar.linedefined > 0) snprintf(where, wsize, "%s:%d", ar.short_src, ar.linedefined);
        else snprintf(where, wsize, "%s", ar.short_src);
        /* a function is named as its definition names it, else as the
         * caller's variable that holds it */
        if (!name[0]) name_from_source(&ar, name, nsize);
        if (!name[0]) kn_lua_trace_find_name(L, idx, name, nsize);
        if (!name[0] && !is_module) global_name(L, idx, name, nsize);
    } else {
        lua_pop(L, 1);
        snprintf(where, wsize, "?");
    }
    if (!name[0]) snprintf(name, nsize, "function");
}

/* Hands the new compiled callable on the top of the stack to the session
 * report's registry (registry["kiln.on_compiled"], set by
 * scripting/lua/60_report.lua), which keeps a summary of it after it is
 * collected. An error there is dropped: the report must never break a
 * compile. */
static void track_compiled(lua_State *L)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, "kiln.on_compiled") != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return;
    }
    lua_pushvalue(L, -2);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_pop(L, 1);
}

/* kiln.compile(fn_or_module [, {mode =, fullgraph =, dynamic =, backend =, autocast =}]) */
static int l_compile(lua_State *L)
{
    /* Compiling a compiled callable compiles what it wraps, with the new
     * options, as torch.compile accepts a compiled module: a second wrapper
     * would trace the first one's cached plans, not the user's code. */
    if (luaL_testudata(L, 1, KN_COMPILED_MT)) {
        lua_getiuservalue(L, 1, 1);
        if (lua_getfield(L, -1, "module") == LUA_TNIL) {
            lua_pop(L, 1);
            lua_getfield(L, -1, "fn");
        }
        lua_replace(L, 1);
        lua_pop(L, 1);
    }
    bool is_module = lua_istable(L, 1) || lua_isuserdata(L, 1);
    if (!lua_isfunction(L, 1) && !is_module)
        return luaL_error(L, "kiln.compile: argument 1 must be a function or a kiln.nn module, got %s",
                          luaL_typename(L, 1));
    if (is_module && lua_getfield(L, 1, "forward") != LUA_TFUNCTION)
        return luaL_error(L, "kiln.compile: argument 1 is a %s without a forward method: expected a "
                          "function or a kiln.nn module", luaL_typename(L, 1));
    if (is_module) lua_pop(L, 1);
    const char *mode = "default";
    bool fullgraph = false;
    int dynamic = -1;
    static const char *const options[] = {"mode", "fullgraph", "dynamic", "backend", "autocast", NULL};
    int autocast = -1; /* -1: not given; 0: off; else 1 + the kn_dtype */
    if (kn_lua_check_options(L, 2, "kiln.compile", options)) {
        if (lua_getfield(L, 2, "mode") != LUA_TNIL)
            mode = kn_modes[kn_lua_check_name(L, -1, "kiln.compile", "mode", kn_modes)];
        lua_pop(L, 1);
        lua_getfield(L, 2, "fullgraph");
        fullgraph = lua_toboolean(L, -1);
        lua_pop(L, 1);
        lua_getfield(L, 2, "dynamic");
        dynamic = lua_isnil(L, -1) ? -1 : lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (lua_getfield(L, 2, "autocast") != LUA_TNIL) {
            if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) {
                autocast = 0;
            } else {
                static const char *const dtypes[] = {"bf16", "f16", NULL};
                if (lua_type(L, -1) != LUA_TSTRING)
                    return luaL_error(L, "kiln.compile: option 'autocast' must be \"bf16\", \"f16\" or false, got %s",
                                      luaL_typename(L, -1));
                autocast = 1 + (kn_lua_check_name(L, -1, "kiln.compile", "autocast", dtypes) == 0 ? KN_BF16 : KN_F16);
            }
        }
        lua_pop(L, 1);
        if (lua_getfield(L, 2, "backend") != LUA_TNIL) {
            static const char *const backends[] = {"cpu", "cuda", NULL};
            const char *b = backends[kn_lua_check_name(L, -1, "kiln.compile", "backend", backends)];
            if (strcmp(b, "cuda") == 0)
                return luaL_error(L, "kiln.compile: backend 'cuda' is not available in this build yet");
        }
        lua_pop(L, 1);
    }
    char name[64], where[KN_WHERE_MAX];
    describe(L, 1, is_module, name, sizeof name, where, sizeof where);
    compiled_ud *u = lua_newuserdatauv(L, sizeof *u, 1);
    memset(u, 0, sizeof *u);
    luaL_setmetatable(L, KN_COMPILED_MT);
    kn_status st = kn_compiled_new(name, where, &u->cm);
    if (st != KN_OK) return kn_lua_fail(L, st);
    kn_compiled_set_mode(u->cm, mode);
    u->cm->opt.fullgraph = fullgraph;
    u->cm->opt.dynamic = dynamic;
    if (autocast >= 0) {
        u->has_autocast = true;
        u->autocast_on = autocast > 0;
        u->autocast_dtype = autocast > 0 ? (kn_dtype)(autocast - 1) : KN_BF16;
    }
    lua_createtable(L, 0, 2);
    if (is_module) {
        lua_getfield(L, 1, "forward");
        lua_setfield(L, -2, "fn");
        lua_pushvalue(L, 1);
        lua_setfield(L, -2, "module");
    } else {
        lua_pushvalue(L, 1);
        lua_setfield(L, -2, "fn");
    }
    lua_setiuservalue(L, -2, 1);
    track_compiled(L);
    return 1;
}

/* kiln.mark_dynamic(x, dim): that size of x is symbolic in every compiled
 * graph it enters (dims 1-based). */
static int l_mark_dynamic(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    int d = kn_lua_dim(L, 2, "mark_dynamic"), nd;
    kn_status st = kn_norm_dim("mark_dynamic", d, t->ndim, &nd);
    if (st != KN_OK) return kn_lua_fail(L, st);
    kn_mark_dynamic(t->id, nd);
    lua_settop(L, 1);
    return 1;
}

void kn_lua_open_compile(lua_State *L)
{
    int kiln = lua_gettop(L);
    if (luaL_newmetatable(L, KN_COMPILED_MT)) {
        static const luaL_Reg mm[] = {{"__call", cm_call}, {"__gc", cm_gc}, {"__tostring", cm_tostring}, {NULL, NULL}};
        luaL_setfuncs(L, mm, 0);
        static const luaL_Reg methods[] = {{"set_mode", cm_set_mode}, {"mode", cm_mode}, {"check", cm_check}, {"precision", cm_precision}, {NULL, NULL}};
        luaL_newlib(L, methods);
        kn_lua_compiled_inspect_methods(L); /* breaks, recompiles, guards, graphs, ... */
        kn_lua_compiled_autotune_methods(L);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    kn_lua_open_config(L, kiln);
    kn_lua_open_log(L, kiln);
    kn_lua_autotune_functions(L, kiln);
    static const luaL_Reg fns[] = {{"compile", l_compile}, {"graph_break", l_graph_break},
                                   {"eager", l_eager},     {"mark_dynamic", l_mark_dynamic},
                                   {"is_compiling", l_is_compiling}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
