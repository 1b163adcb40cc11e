/* kn_lua_compile: kiln.compile, the compiled callable (calling, direct
 * replay, modes), kiln.graph_break, kiln.eager, kiln.log and
 * kiln.mark_dynamic.
 *
 * A call traces the function through kn_lua_trace (the Lua side of capture)
 * and core/capture/kn_capture; its inspection methods are kn_lua_inspect.c
 * and kn_lua_autotune.c.
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "kn_clock.h"
#include "kn_capture.h"
#include "kn_fs.h"
#include "kn_lua_autotune.h"
#include "kn_lua_compile.h"
#include "kn_lua_compiled_ud.h"
#include "kn_lua_config.h"
#include "kn_lua_inspect.h"
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

/* Resolve a dotted parameter path ("layers.1.weight") from the module at
 * idx; pushes the value (nil when a step is missing). */
static void push_path(lua_State *L, int idx, const char *path)
{
    lua_pushvalue(L, idx);
    const char *p = path;
    while (*p && lua_istable(L, -1)) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        char *end;
        long long k = strtoll(p, &end, 10);
        if (end == p + len && len > 0) lua_rawgeti(L, -1, k);
        else {
            lua_pushlstring(L, p, len);
            lua_rawget(L, -2);
        }
        lua_remove(L, -2);
        p += len + (dot ? 1 : 0);
        if (!dot) break;
    }
    if (*p && !lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
    /* a module that keeps its parameters flat under dotted names in a
     * `params` table (an ONNX model's initializers: "ln1.weight") */
    if (lua_isnil(L, -1) && lua_istable(L, idx)) {
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "params") == LUA_TTABLE) lua_getfield(L, -1, path);
        else lua_pushnil(L);
        lua_remove(L, -2);
    }
}

/* ---- the Lua values a replay re-reads ------------------------------------ */

/* A replay skips the Lua function, so every Lua value the trace may have
 * read must still hold: a number read from an upvalue's table (cfg.scale)
 * or a global is baked into the graph, a flag (model.training) chose its
 * shape. The trace cannot say which fields it read, so the snapshot takes
 * every value reachable from the function's upvalues, its globals (_ENV)
 * and the compiled module: fields of tables and upvalues of the user's Lua
 * functions (tables, functions and userdata by identity), with each
 * table's field count
 * (a field added later, nil before, shows as a new count). Lua's and
 * kiln's own libraries are not walked (they are not the user's state).
 * A replay compares each entry raw; any difference traces the call, whose
 * guards then explain a changed number as a recompile. */
#define KN_SNAPSHOT_MAX 4096 /* entries; a larger state is traced at every call */
#define KN_SNAPSHOT_DEPTH 16 /* tables within tables; deeper state is traced at every call */

typedef struct {
    int fields; /* flat list: table, key, value, table, key, value, ... */
    int upvals; /* flat list: function, upvalue index, value, ... */
    int tables; /* flat list: table, field count, ... */
    int seen;   /* set of tables and functions walked (or not to walk) */
    int n;
    bool over;
} snapshot;

static void snap_push3(lua_State *L, int list, int a, int b, int c)
{
    lua_Integer n = (lua_Integer)lua_rawlen(L, list);
    lua_pushvalue(L, a);
    lua_rawseti(L, list, n + 1);
    lua_pushvalue(L, b);
    lua_rawseti(L, list, n + 2);
    lua_pushvalue(L, c);
    lua_rawseti(L, list, n + 3);
}

/* Mark the value at idx walked; false when it was already. */
static bool snap_first_visit(lua_State *L, snapshot *sn, int idx)
{
    lua_pushvalue(L, idx);
    bool seen = lua_rawget(L, sn->seen) != LUA_TNIL;
    lua_pop(L, 1);
    if (seen) return false;
    lua_pushvalue(L, idx);
    lua_pushboolean(L, 1);
    lua_rawset(L, sn->seen);
    return true;
}

static void snap_value(lua_State *L, snapshot *sn, int idx, int depth);

static void snap_table(lua_State *L, snapshot *sn, int idx, int depth)
{
    int count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (sn->over || sn->n > KN_SNAPSHOT_MAX) { /* a huge table: stop walking, no replay */
            sn->over = true;
            lua_pop(L, 2);
            return;
        }
        count++;
        int top = lua_gettop(L);
        /* every field by raw equality (a table put in place of another is
         * seen too), and the tables and functions it holds walked */
        snap_push3(L, sn->fields, idx, top - 1, top);
        sn->n++;
        snap_value(L, sn, top, depth + 1);
        lua_pop(L, 1);
    }
    lua_Integer n = (lua_Integer)lua_rawlen(L, sn->tables);
    lua_pushvalue(L, idx);
    lua_rawseti(L, sn->tables, n + 1);
    lua_pushinteger(L, count);
    lua_rawseti(L, sn->tables, n + 2);
    sn->n++;
}

static void snap_function(lua_State *L, snapshot *sn, int idx, int depth)
{
    lua_Debug ar;
    lua_pushvalue(L, idx);
    lua_getinfo(L, ">S", &ar);
    /* C functions hold kiln's own state; kiln's Lua (@kiln/) is not the user's */
    if (strcmp(ar.what, "C") == 0 || strncmp(ar.source, "@kiln/", 6) == 0) return;
    for (int i = 1; lua_getupvalue(L, idx, i); i++) {
        int top = lua_gettop(L);
        lua_pushinteger(L, i);
        snap_push3(L, sn->upvals, idx, top + 1, top);
        lua_pop(L, 1);
        sn->n++;
        snap_value(L, sn, top, depth + 1);
        lua_pop(L, 1);
    }
}

/* Walk the table or Lua function at idx (anything else holds nothing to snapshot). */
static void snap_value(lua_State *L, snapshot *sn, int idx, int depth)
{
    int t = lua_type(L, idx);
    if ((t != LUA_TTABLE && t != LUA_TFUNCTION) || sn->over) return;
    if (depth > KN_SNAPSHOT_DEPTH || sn->n > KN_SNAPSHOT_MAX || !lua_checkstack(L, 16)) {
        sn->over = true;
        return;
    }
    idx = lua_absindex(L, idx);
    if (!snap_first_visit(L, sn, idx)) return;
    if (t == LUA_TTABLE) snap_table(L, sn, idx, depth);
    else snap_function(L, sn, idx, depth);
}

/* Snapshot what the function at fn_idx (and the module at module_idx, 0:
 * none) can read into the table at rt (fields, upvals, tables); false when
 * there is too much to check at every call. */
static bool snapshot_state(lua_State *L, int rt, int fn_idx, int module_idx)
{
    int top = lua_gettop(L);
    snapshot sn = {0};
    lua_newtable(L);
    sn.fields = lua_gettop(L);
    lua_newtable(L);
    sn.upvals = lua_gettop(L);
    lua_newtable(L);
    sn.tables = lua_gettop(L);
    lua_newtable(L);
    sn.seen = lua_gettop(L);
    /* Lua's and kiln's libraries, and the loaded-modules table, are not walked */
    static const char *const libs[] = {"string", "table", "math", "io", "os", "coroutine", "utf8", "debug",
                                       "package", NULL};
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    int loaded = lua_gettop(L);
    lua_pushvalue(L, loaded);
    lua_pushboolean(L, 1);
    lua_rawset(L, sn.seen);
    lua_pushnil(L);
    while (lua_next(L, loaded)) {
        bool lib = lua_type(L, -2) == LUA_TSTRING && strncmp(lua_tostring(L, -2), "kiln", 4) == 0;
        for (const char *const *l = libs; *l && !lib && lua_type(L, -2) == LUA_TSTRING; l++)
            lib = strcmp(lua_tostring(L, -2), *l) == 0;
        if (lib) {
            lua_pushboolean(L, 1);
            lua_rawset(L, sn.seen); /* seen[module] = true, pops it */
        } else {
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    if (lua_getglobal(L, "kiln") == LUA_TTABLE) {
        lua_pushboolean(L, 1);
        lua_rawset(L, sn.seen);
    } else {
        lua_pop(L, 1);
    }
    snap_value(L, &sn, fn_idx, 0);
    if (module_idx) snap_value(L, &sn, module_idx, 0);
    if (!sn.over) {
        lua_pushvalue(L, sn.fields);
        lua_setfield(L, rt, "fields");
        lua_pushvalue(L, sn.upvals);
        lua_setfield(L, rt, "upvals");
        lua_pushvalue(L, sn.tables);
        lua_setfield(L, rt, "tables");
    }
    lua_settop(L, top);
    return !sn.over;
}

/* Whether every value of the snapshot in the replay table at rt holds. */
static bool snapshot_holds(lua_State *L, int rt)
{
    bool same = true;
    lua_getfield(L, rt, "fields");
    int list = lua_gettop(L);
    lua_Integer n = (lua_Integer)lua_rawlen(L, list);
    for (lua_Integer i = 1; i <= n && same; i += 3) {
        lua_rawgeti(L, list, i);
        lua_rawgeti(L, list, i + 1);
        lua_rawget(L, -2);
        lua_rawgeti(L, list, i + 2);
        same = lua_rawequal(L, -1, -2);
        lua_pop(L, 3);
    }
    lua_getfield(L, rt, "upvals");
    list = lua_gettop(L);
    n = (lua_Integer)lua_rawlen(L, list);
    for (lua_Integer i = 1; i <= n && same; i += 3) {
        lua_rawgeti(L, list, i);
        lua_rawgeti(L, list, i + 1);
        int k = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
        if (!lua_getupvalue(L, -1, k)) lua_pushnil(L);
        lua_rawgeti(L, list, i + 2);
        same = lua_rawequal(L, -1, -2);
        lua_pop(L, 3);
    }
    lua_getfield(L, rt, "tables");
    list = lua_gettop(L);
    n = (lua_Integer)lua_rawlen(L, list);
    for (lua_Integer i = 1; i <= n && same; i += 2) {
        lua_rawgeti(L, list, i);
        int t = lua_gettop(L);
        lua_Integer count = 0;
        lua_pushnil(L);
        while (lua_next(L, t)) {
            count++;
            lua_pop(L, 1);
        }
        lua_rawgeti(L, list, i + 1);
        same = lua_tointeger(L, -1) == count;
        lua_pop(L, 2);
    }
    lua_pop(L, 3);
    return same;
}

/* A replay's random numbers: the fresh random nodes of v's graph move to
 * the state's stream as it is now (same seed, counters from its current
 * offset, in the order the trace drew them), and the stream advances by
 * what the trace drew. kn_compiled_run hands them to the plan. */
static void replay_draw(lua_State *L, kn_version *v, uint64_t used)
{
    kn_lua_state *s = kn_lua_state_get(L);
    uint64_t first = UINT64_MAX;
    for (int i = 0; i < v->g.n_nodes; i++)
        if (v->g.nodes[i].a.rng_fresh && v->g.nodes[i].a.rng_offset < first) first = v->g.nodes[i].a.rng_offset;
    for (int i = 0; i < v->g.n_nodes; i++) {
        kn_attrs *a = &v->g.nodes[i].a;
        if (!a->rng_fresh) continue;
        a->rng_offset = s->rng_offset + (a->rng_offset - first);
        a->seed = s->seed;
    }
    s->rng_offset += used;
}

/* Try a direct replay; pushes the results and returns their count, or -1
 * when a guard does not hold (then nothing is pushed and the call traces). */
static int try_replay(lua_State *L, compiled_ud *u, int uv, int nargs, int module_idx)
{
    replay_t *rp = &u->rp;
    kn_compiled *cm = u->cm;
    if (!rp->valid || rp->nargs != nargs || strcmp(rp->mode, cm->id.mode) != 0 || cm->cache.n_graphs < 1 ||
        rp->version >= cm->cache.graphs[0].n_versions || cm->cache.graphs[0].eager)
        return -1;
    kn_version *v = &cm->cache.graphs[0].versions[rp->version];
    int top = lua_gettop(L);
    lua_getfield(L, uv, "replay");
    int rt = lua_gettop(L);
    kn_tensor *bound[256] = {NULL};
    if (v->g.n_inputs > 256) goto miss;
    /* arguments */
    lua_getfield(L, rt, "args");
    for (int i = 0; i < nargs; i++) {
        int k = rp->arg_input[i];
        if (k == -2) {
            lua_rawgeti(L, -1, i + 1);
            bool same = lua_rawequal(L, -1, 2 + i);
            lua_pop(L, 1);
            if (!same) goto miss;
            continue;
        }
        kn_tensor *t = kn_lua_totensor(L, 2 + i);
        if (!t || (k >= 0 && !kn_version_input_matches(v, k, t))) goto miss;
        if (k >= 0) bound[k] = t;
    }
    lua_pop(L, 1);
    /* parameters: the module still holds the same tensors */
    if (rp->n_params) {
        lua_getfield(L, rt, "params");
        for (int i = 0; i < rp->n_params; i++) {
            lua_rawgeti(L, -1, i + 1);
            push_path(L, module_idx, lua_tostring(L, -1));
            kn_tensor *t = kn_lua_totensor(L, -1);
            int k = rp->param_input[i];
            lua_pop(L, 2);
            if (!t || t->id != v->g.inputs[k].tensor_id || !kn_version_input_matches(v, k, t)) goto miss;
            bound[k] = t;
        }
        lua_pop(L, 1);
    }
    /* dynamic numbers: the values of the trace, which every guard above
     * holding means the Lua code would compute again */
    for (int k = 0; k < v->g.n_inputs; k++)
        if (kn_input_is_number(&v->g.inputs[k]) && !(bound[k] = kn_compiled_number_value(cm, 0, v->g.inputs[k].name)))
            goto miss;
    /* other tensors the function used (upvalues, globals): kept alive here */
    lua_getfield(L, rt, "tensors");
    for (int k = 0; k < v->g.n_inputs; k++) {
        if (bound[k]) continue;
        lua_rawgeti(L, -1, k + 1);
        bound[k] = kn_lua_totensor(L, -1);
        lua_pop(L, 1);
        if (!bound[k]) goto miss;
    }
    lua_pop(L, 1);
    /* upvalues of the function and scalar fields of the module */
    lua_getfield(L, rt, "upvalues");
    lua_getfield(L, uv, "fn");
    for (int i = 1;; i++) {
        if (!lua_getupvalue(L, -1, i)) break;
        lua_rawgeti(L, -3, i);
        bool same = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
        if (!same) goto miss;
    }
    lua_pop(L, 2);
    /* what the function can read: fields of its tables, globals, the module's fields */
    if (!snapshot_holds(L, rt)) goto miss;
    {
        /* every guard holds: run the cached graph on these inputs */
        for (int k = 0; k < v->g.n_inputs; k++) v->g.inputs[k].tensor = bound[k];
        if (rp->rng_used) replay_draw(L, v, rp->rng_used);
        /* running the graph: allocating, computing and freeing its values */
        double t0 = kn_clock_s();
        kn_plan_value want[KN_REPLAY_MAX];
        kn_tensor *outs[KN_REPLAY_MAX];
        int n_want = 0;
        for (int i = 0; i < rp->n_results; i++)
            if (rp->res_node[i] >= 0) want[n_want++] = (kn_plan_value){rp->res_node[i], rp->res_out[i]};
        kn_status st = kn_compiled_run(cm, v, &v->g, want, n_want, outs);
        for (int k = 0; k < v->g.n_inputs; k++) v->g.inputs[k].tensor = NULL;
        if (st != KN_OK) {
            kn_lua_trace_flush_log(cm);
            lua_settop(L, top);
            return kn_lua_fail(L, st);
        }
        kn_tensor *results[KN_REPLAY_MAX];
        for (int i = 0, w = 0; i < rp->n_results; i++) results[i] = rp->res_node[i] < 0 ? NULL : outs[w++];
        u->replay_run_s += kn_clock_s() - t0;
        lua_settop(L, top);
        lua_getfield(L, uv, "replay");
        lua_getfield(L, -1, "results");
        lua_remove(L, -2);
        int rtab = lua_gettop(L);
        luaL_checkstack(L, rp->n_results, "replay");
        for (int i = 0; i < rp->n_results; i++) {
            if (results[i]) kn_lua_pushtensor(L, results[i]);
            else lua_rawgeti(L, rtab, i + 1);
        }
        lua_remove(L, rtab);
        kn_lua_trace_flush_log(cm);
        u->direct_replays++;
        cm->stats.calls++;
        cm->stats.cache_hits++;
        return rp->n_results;
    }
miss:
    lua_settop(L, top);
    return -1;
}

/* After a traced call: record what a replay needs, when the call allows it.
 * Results are at [first, top]. */
static void record_replay(lua_State *L, compiled_ud *u, int uv, int nargs, bool is_module, int module_idx,
                          int first, int before)
{
    replay_t *rp = &u->rp;
    kn_compiled *cm = u->cm;
    const kn_capture *cap = &cm->cap;
    rp->valid = false;
    int nres = lua_gettop(L) - first + 1;
    const kn_lua_state *s = kn_lua_state_get(L);
    const char *why = NULL;
    if (cap->n_breaks) why = "graph breaks";
    else if (s->impure) why = s->impure_what;
    /* a step counter kept in an upvalue (lr = lr * 0.9) or a table: a replay
     * would skip the write, and every later call would see the same value */
    else if (!snapshot_holds(L, before)) why = "it changes Lua values it reads (an upvalue, a table field or a global)";
    else if (cap->n_graphs != 1) why = cap->n_graphs ? "more than one graph" : "no graph";
    else if (cap->graph_version[0] < 0) why = "the graph runs eagerly (cache limit)";
    else if (nargs > KN_REPLAY_MAX || nres > KN_REPLAY_MAX) why = "too many arguments or results";
    else if (cm->cache.graphs[0].versions[cap->graph_version[0]].dynamic) why = "dynamic shapes";
    if (why) {
        bool called = s->impure && !cap->n_breaks && strncmp(why, "a ", 2) != 0;
        snprintf(u->no_replay, sizeof u->no_replay, "%s%s", called ? "called " : "", why);
        return;
    }
    snprintf(u->no_replay, sizeof u->no_replay, "returns or takes values a replay cannot reproduce");
    const kn_version *v = &cm->cache.graphs[0].versions[cap->graph_version[0]];
    if (v->g.n_inputs > 256) return;
    int top = lua_gettop(L);
    lua_createtable(L, 0, 6);
    int rt = lua_gettop(L);
    /* results: values of the graph, or constants */
    lua_createtable(L, nres, 0);
    for (int i = 0; i < nres; i++) {
        int idx = first + i;
        void *ud = luaL_testudata(L, idx, KN_TENSOR_MT);
        rp->res_node[i] = -1;
        if (ud) {
            kn_tensor *t = *(kn_tensor **)ud;
            if (!t->lazy || t->lazy->segment != 0) goto fail; /* a tensor from outside the graph */
            rp->res_node[i] = t->lazy->node;
            rp->res_out[i] = t->lazy->out;
        } else if (lua_istable(L, idx) || lua_isuserdata(L, idx) || lua_isfunction(L, idx) || lua_isthread(L, idx)) {
            goto fail; /* may hold tensors or state */
        } else {
            lua_pushvalue(L, idx);
            lua_rawseti(L, -2, i + 1);
        }
    }
    rp->n_results = nres;
    lua_setfield(L, rt, "results");
    /* arguments: tensors map to graph inputs by name; other values are kept */
    lua_createtable(L, nargs, 0);
    lua_getfield(L, uv, "fn");
    for (int i = 0; i < nargs; i++) {
        int idx = 2 + i;
        kn_tensor *t = kn_lua_totensor(L, idx);
        if (t) {
            const char *pname = lua_getlocal(L, NULL, (is_module ? 2 : 1) + i);
            char name[KN_NAME_MAX];
            snprintf(name, sizeof name, "%s", pname ? pname : "");
            if (!name[0]) snprintf(name, sizeof name, "arg %d", i + 1);
            rp->arg_input[i] = -1;
            for (int k = 0; k < v->g.n_inputs; k++)
                if (v->g.inputs[k].kind == KN_IN_ARG && strcmp(v->g.inputs[k].name, name) == 0) rp->arg_input[i] = k;
        } else if (lua_istable(L, idx) || lua_isuserdata(L, idx) || lua_isthread(L, idx)) {
            lua_pop(L, 1);
            goto fail;
        } else {
            rp->arg_input[i] = -2;
            lua_pushvalue(L, idx);
            lua_rawseti(L, -3, i + 1);
        }
    }
    lua_pop(L, 1);
    rp->nargs = nargs;
    lua_setfield(L, rt, "args");
    /* parameters by path; other tensor inputs kept alive by reference */
    lua_newtable(L);
    lua_newtable(L);
    rp->n_params = 0;
    for (int k = 0; k < v->g.n_inputs; k++) {
        const kn_graph_input *in = &v->g.inputs[k];
        if (in->kind == KN_IN_ARG) {
            bool from_arg = false;
            for (int i = 0; i < nargs; i++) from_arg = from_arg || rp->arg_input[i] == k;
            if (!from_arg) goto fail2;
            continue;
        }
        if (kn_input_is_number(in)) {
            /* a dynamic number: the replay binds this trace's value */
            if (!kn_compiled_number_value(cm, 0, in->name)) goto fail2;
            continue;
        }
        if (in->kind == KN_IN_PARAM && is_module && rp->n_params < 64) {
            lua_pushstring(L, in->name);
            lua_rawseti(L, -3, ++rp->n_params);
            rp->param_input[rp->n_params - 1] = k;
            continue;
        }
        if (in->kind != KN_IN_TENSOR) goto fail2;
        /* find the tensor by identity among the values the trace saw: the
         * graph's inputs were bound to them; keep a reference for replays */
        goto fail2; /* (tensors from upvalues or globals: traced each call for now) */
    }
    lua_setfield(L, rt, "tensors");
    lua_setfield(L, rt, "params");
    /* upvalues of the function, and the module's scalar fields */
    lua_newtable(L);
    lua_getfield(L, uv, "fn");
    for (int i = 1; lua_getupvalue(L, -1, i); i++) lua_rawseti(L, -3, i);
    lua_pop(L, 1);
    lua_setfield(L, rt, "upvalues");
    lua_getfield(L, uv, "fn");
    bool small = snapshot_state(L, rt, lua_gettop(L), is_module ? module_idx : 0);
    lua_pop(L, 1);
    if (!small) {
        snprintf(u->no_replay, sizeof u->no_replay, "more Lua values than a replay checks (%d)", KN_SNAPSHOT_MAX);
        goto fail;
    }
    lua_setfield(L, uv, "replay");
    snprintf(rp->mode, sizeof rp->mode, "%s", cm->id.mode);
    rp->version = cap->graph_version[0];
    rp->valid = true;
    u->no_replay[0] = 0;
    lua_settop(L, top);
    return;
fail2:
fail:
    lua_settop(L, top);
}

/* The uservalue table of a compiled callable: {fn =, module =, replay =}. */
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
} traced_call_guard;

static int traced_call_close(lua_State *L)
{
    traced_call_guard *g = lua_touserdata(L, 1);
    if (!g || !g->armed) return 0;
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
    if (luaL_newmetatable(L, "kiln.traced_call_guard")) {
        lua_pushcfunction(L, traced_call_close);
        lua_setfield(L, -2, "__close");
    }
    lua_setmetatable(L, -2);
    lua_toclose(L, -1);
    return g;
}

static int cm_call(lua_State *L)
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
    if (s->cap || cm->cap.active) { /* nested: trace the inner function into the outer graph */
        int fn_idx = uv + 1;
        if (!is_module) lua_pop(L, 1);
        for (int i = 2; i <= nargs + 1; i++) lua_pushvalue(L, i);
        lua_call(L, nargs + (is_module ? 1 : 0), LUA_MULTRET);
        return lua_gettop(L) - fn_idx + 1;
    }

    if (strcmp(cm->id.mode, "eager") == 0) { /* no capture: the function as written */
        int fn_idx = uv + 1;
        if (!is_module) lua_pop(L, 1);
        for (int i = 2; i <= nargs + 1; i++) lua_pushvalue(L, i);
        lua_call(L, nargs + (is_module ? 1 : 0), LUA_MULTRET);
        return lua_gettop(L) - fn_idx + 1;
    }
    kn_lua_config_compiled(L, cm);
    if (u->rp.valid) {
        int n = try_replay(L, u, uv, nargs, module_idx);
        if (n >= 0) return n;
    }
    /* parameter names of the module, by tensor id */
    kn_lua_trace_param_map(L, is_module ? module_idx : 0);

    /* what the function can read, before it runs: a trace that changes it
     * must not be replayed (record_replay) */
    lua_createtable(L, 0, 3);
    int before = lua_gettop(L);
    snapshot_state(L, before, uv + 1, is_module ? module_idx : 0);

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
            return kn_lua_fail(L, st);
        }
        kn_lua_pushtensor(L, p);
    }
    int n = lua_gettop(L) - call_base;
    lua_pushvalue(L, fn_idx);
    lua_setfield(L, LUA_REGISTRYINDEX, "kiln.compiling"); /* for naming its frame in break stacks */
    /* watch the calls for impure ones (see purity_hook) */
    kn_lua_trace_watch(L, &guard->hook);
    uint64_t rng_before = s->rng_offset;
    guard->armed = true; /* an error from here on: traced_call_close undoes the call */
    lua_call(L, n, LUA_MULTRET);
    guard->armed = false;
    kn_lua_trace_unwatch(L, &guard->hook);
    s->cap = NULL;
    /* the last graph computes what is still referenced: collect first, so
     * that set (and so the compiled plan) does not depend on the collector */
    lua_gc(L, LUA_GCCOLLECT);
    st = kn_capture_end(&cm->cap, true);
    kn_lua_trace_flush_log(cm);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.config");
    lua_getfield(L, -1, "replay");
    bool replay_on = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_pop(L, 2);
    u->rp.valid = false;
    u->rp.rng_used = s->rng_offset - rng_before;
    if (replay_on) record_replay(L, u, uv, nargs, is_module, module_idx, call_base, before);
    return lua_gettop(L) - call_base + 1;
}

static int cm_gc(lua_State *L)
{
    compiled_ud *u = luaL_checkudata(L, 1, KN_COMPILED_MT);
    kn_compiled_free(u->cm);
    u->cm = NULL;
    return 0;
}

static const char *const kn_modes[] = {"default", "reduce-overhead", "max-autotune",
                                       "max-autotune-no-cudagraphs", "eager", NULL};

/* cm:check(...): one call with the numerics check on. Returns {ok =,
 * message =, checks =} and the call's results after it. */
static int cm_check(lua_State *L)
{
    compiled_ud *u = kn_lua_check_compiled(L, 1);
    kn_compiled *cm = u->cm;
    cm->check.report[0] = 0;
    int before = cm->check.runs;
    cm->check.once = true;
    lua_pushcfunction(L, cm_call);
    lua_insert(L, 1);
    int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    cm->check.once = false;
    if (rc != LUA_OK) return lua_error(L);
    int nres = lua_gettop(L);
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

static int cm_set_mode(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    int m = luaL_checkoption(L, 2, NULL, kn_modes);
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

/* A name for the function or module being compiled, and where it is defined. */
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
    } else {
        lua_pop(L, 1);
        snprintf(where, wsize, "?");
    }
    if (!name[0]) snprintf(name, nsize, "function");
}

/* kiln.compile(fn_or_module [, {mode =, fullgraph =, dynamic =, backend =}]) */
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
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        if (lua_getfield(L, 2, "mode") != LUA_TNIL) mode = kn_modes[luaL_checkoption(L, -1, NULL, kn_modes)];
        lua_pop(L, 1);
        lua_getfield(L, 2, "fullgraph");
        fullgraph = lua_toboolean(L, -1);
        lua_pop(L, 1);
        lua_getfield(L, 2, "dynamic");
        dynamic = lua_isnil(L, -1) ? -1 : lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (lua_getfield(L, 2, "backend") != LUA_TNIL) {
            const char *b = luaL_checkstring(L, -1);
            if (strcmp(b, "cpu") != 0 && strcmp(b, "cuda") != 0)
                return luaL_error(L, "kiln.compile: unknown backend '%s' (cpu or cuda)", b);
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

/* The log names of kiln.log and KILN_LOGS, one line each (KILN_LOGS=help,
 * kiln.log{"help"}). flag 0: read from KILN_LOGS by a backend when the
 * process starts, not a compiled call's flag. */
static const struct {
    const char *name;
    int flag;
    const char *what;
} LOG_NAMES[] = {
    {"graph_breaks", KN_LOG_GRAPH_BREAKS, "each graph break: where, the reason, a hint and the user's stack"},
    {"recompiles", KN_LOG_RECOMPILES, "each recompile: the function, graph and new version, and the guard that failed"},
    {"guards", KN_LOG_GUARDS, "the guards of each new version of a graph"},
    {"fusion", KN_LOG_FUSION, "why two kernels are two: every edge between kernels, naming both ops and lines"},
    {"kernels", KN_LOG_KERNELS, "each kernel a plan compiles, with its node count"},
    {"passes", KN_LOG_PASSES, "the graph after each compiler pass"},
    {"cudagraphs", KN_LOG_CUDAGRAPHS, "why a graph runs without a CUDA graph (reduce-overhead)"},
    {"autotune", KN_LOG_AUTOTUNE, "each kernel's candidates and timings as max-autotune measures them"},
    {"library", 0, "KILN_LOGS only, on the GPU: each new cuBLASLt or cuDNN call and the algorithm it got"},
    {"all", -1, "every log above"},
    {"help", -2, "this list"},
};
enum { N_LOG_NAMES = sizeof LOG_NAMES / sizeof LOG_NAMES[0] };

/* The flags of log name w; -1 for an unknown name, 0 for a name a
 * backend reads from KILN_LOGS itself, -2 for "help". */
static int parse_log_word(const char *w)
{
    for (int i = 0; i < N_LOG_NAMES; i++) {
        if (strcmp(w, LOG_NAMES[i].name) != 0) continue;
        if (LOG_NAMES[i].flag == -1) {
            int all = 0;
            for (int j = 0; j < N_LOG_NAMES; j++) all |= LOG_NAMES[j].flag > 0 ? LOG_NAMES[j].flag : 0;
            return all;
        }
        return LOG_NAMES[i].flag;
    }
    return -1;
}

/* "graph_breaks, recompiles, ..., help": for the unknown-name messages. */
static void log_name_list(char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < N_LOG_NAMES && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", LOG_NAMES[i].name);
}

/* KILN_LOGS=help and kiln.log{"help"}: every name with its line. */
static void log_help(FILE *f)
{
    fprintf(f, "kiln logs (KILN_LOGS=name,name or kiln.log{\"name\", ...}):\n");
    for (int i = 0; i < N_LOG_NAMES; i++) fprintf(f, "  %-13s %s\n", LOG_NAMES[i].name, LOG_NAMES[i].what);
    fflush(f);
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

static int l_log(lua_State *L)
{
    int flags = KN_LOG_WARN;
    bool help = false;
    if (lua_istable(L, 1)) {
        lua_Integer n = kn_lua_list_len(L, 1, 64, "kiln.log: names");
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, 1, i);
            const char *w = luaL_checkstring(L, -1);
            int f = parse_log_word(w);
            if (f == -1) {
                char names[400];
                log_name_list(names, sizeof names);
                return luaL_error(L, "kiln.log: unknown log '%s' (the logs: %s)", w, names);
            }
            if (f == 0)
                return luaL_error(L, "kiln.log: '%s' is read from KILN_LOGS when the process starts: run with "
                                     "KILN_LOGS=%s",
                                  w, w);
            if (f == -2) help = true;
            else flags |= f;
            lua_pop(L, 1);
        }
    } else if (!lua_isnoneornil(L, 1)) {
        return luaL_argerror(L, 1, "a list of log names expected");
    }
    if (help) { /* a question, not a setting: the logs stay as they are */
        fflush(stdout);
        log_help(stdout);
        return 0;
    }
    kn_lua_state_get(L)->log_flags = flags;
    return 0;
}

/* KILN_LOGS: comma- or space-separated names; help prints the list, an
 * unknown name a warning naming the valid ones (once per process: every
 * Lua state reads it). */
static void log_from_env(lua_State *L)
{
    const char *env = getenv("KILN_LOGS");
    if (!env) return;
    static atomic_flag told = ATOMIC_FLAG_INIT;
    bool tell = !atomic_flag_test_and_set(&told);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *w = strtok_r(buf, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
        int f = parse_log_word(w);
        if (f > 0) kn_lua_state_get(L)->log_flags |= f;
        else if (f == -2 && tell) log_help(stderr);
        else if (f == -1 && tell) {
            char names[400];
            log_name_list(names, sizeof names);
            fprintf(stderr, "kiln: KILN_LOGS: unknown log '%s' (the logs: %s)\n", w, names);
        }
    }
}

void kn_lua_open_compile(lua_State *L)
{
    int kiln = lua_gettop(L);
    if (luaL_newmetatable(L, KN_COMPILED_MT)) {
        static const luaL_Reg mm[] = {{"__call", cm_call}, {"__gc", cm_gc}, {"__tostring", cm_tostring}, {NULL, NULL}};
        luaL_setfuncs(L, mm, 0);
        static const luaL_Reg methods[] = {{"set_mode", cm_set_mode}, {"mode", cm_mode}, {"check", cm_check}, {NULL, NULL}};
        luaL_newlib(L, methods);
        kn_lua_compiled_inspect_methods(L); /* breaks, recompiles, guards, graphs, ... */
        kn_lua_compiled_autotune_methods(L);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    kn_lua_open_config(L, kiln);
    log_from_env(L);
    kn_lua_autotune_functions(L, kiln);
    static const luaL_Reg fns[] = {{"compile", l_compile}, {"graph_break", l_graph_break},
                                   {"eager", l_eager},     {"log", l_log},
                                   {"mark_dynamic", l_mark_dynamic},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
