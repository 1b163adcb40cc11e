/* kn_lua_replay: the direct replay of a compiled callable. After a traced
 * call that made exactly one clean graph, kn_lua_replay_record keeps what a
 * later call must match (arguments, upvalues, a snapshot of every Lua
 * value the function can read, the tensors it read found through that
 * snapshot, parameters it did not see by path); kn_lua_replay_try
 * checks it and runs the cached graph without running the Lua function
 * again.
 *
 * Called by the compiled callable's call path (kn_lua_compile.c); the
 * state it keeps is the replay_t of kn_lua_compiled_ud.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_clock.h"
#include "kn_capture.h"
#include "kn_lua_compiled_ud.h"
#include "kn_lua_replay.h"
#include "kn_lua_replay_tape.h"
#include "kn_lua_state.h"
#include "kn_lua_tensor_ud.h"
#include "kn_lua_trace.h"
#include "kn_lua_util.h"

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
    int versioned; /* flat list: versioned table, its metatable, its version, ... (snap_versioned) */
    int seen;   /* set of tables and functions walked (or not to walk) */
    int globals;  /* the globals table (absolute index) */
    int keep_ids; /* tensor id -> true: the tensors the graph reads (0: none known) */
    int libs;     /* set of Lua's and kiln's library tables */
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

/* Whether the table at idx asks not to be walked: its metatable's
 * __kiln_replay_opaque (a parsed ONNX file, which its module versions
 * itself). The field that holds it is still compared by identity. */
static bool snap_opaque(lua_State *L, int idx)
{
    if (!lua_getmetatable(L, idx)) return false;
    lua_getfield(L, -1, "__kiln_replay_opaque");
    bool opaque = lua_toboolean(L, -1);
    lua_pop(L, 2);
    return opaque;
}

/* Whether the value at idx is one of the libraries the snapshot does not
 * walk (Lua's, kiln's: marked seen before the walk starts). */
static bool snap_is_library(lua_State *L, snapshot *sn, int idx)
{
    if (lua_type(L, idx) != LUA_TTABLE) return false;
    lua_pushvalue(L, idx);
    bool lib = lua_rawget(L, sn->libs) != LUA_TNIL;
    lua_pop(L, 1);
    return lib;
}

static void snap_table_entries(lua_State *L, snapshot *sn, int idx, int depth, bool versioned);

/* A versioned table (kiln.nn.param_table: an ONNX module's parameters) keeps
 * its entries in a store behind its metatable, whose __newindex counts every
 * write in __kiln_replay_version. The store's entries are walked here, so
 * the tensors the graph reads are found in the snapshot, but a replay
 * compares only the version: one compare, where the entries (168 of ViT's
 * parameters) had cost 19-65 us a call on the H200's host. The table itself
 * is walked raw as any other (empty: a rawset on it shows as an entry). */
static void snap_versioned(lua_State *L, snapshot *sn, int idx, int depth)
{
    if (!lua_getmetatable(L, idx)) return;
    int mt = lua_gettop(L);
    int is_int = 0;
    lua_getfield(L, mt, "__kiln_replay_version");
    lua_Integer version = lua_tointegerx(L, -1, &is_int);
    lua_pop(L, 1);
    if (lua_getfield(L, mt, "__kiln_replay_store") != LUA_TTABLE || !is_int) {
        lua_pop(L, 2);
        return;
    }
    int store = lua_gettop(L);
    lua_Integer n = (lua_Integer)lua_rawlen(L, sn->versioned);
    lua_pushvalue(L, idx);
    lua_rawseti(L, sn->versioned, n + 1);
    lua_pushvalue(L, mt);
    lua_rawseti(L, sn->versioned, n + 2);
    lua_pushinteger(L, version);
    lua_rawseti(L, sn->versioned, n + 3);
    sn->n++;
    if (snap_first_visit(L, sn, store)) snap_table_entries(L, sn, store, depth + 1, true);
    lua_pop(L, 2);
}

static void snap_table(lua_State *L, snapshot *sn, int idx, int depth)
{
    if (snap_opaque(L, idx)) return;
    snap_versioned(L, sn, idx, depth);
    snap_table_entries(L, sn, idx, depth, false);
}

/* The entries of the table at idx: each a field (fields), the values walked;
 * the table with its count in tables, unless it is a versioned table's
 * store (snap_versioned: its version stands for them at a replay). */
static void snap_table_entries(lua_State *L, snapshot *sn, int idx, int depth, bool versioned)
{
    int count = 0;
    bool globals = lua_rawequal(L, idx, sn->globals);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        /* a global tensor the graph does not read (a REPL's y = cm(x) from
         * the last call) changes with every call and is not the function's
         * input: counted, not compared, so assigning it does not stop the
         * replay; the graph's own inputs are compared by identity */
        kn_tensor *gt = globals ? kn_lua_totensor(L, -1) : NULL;
        if (gt) {
            bool read = false;
            if (sn->keep_ids) {
                read = lua_rawgeti(L, sn->keep_ids, (lua_Integer)gt->id) != LUA_TNIL;
                lua_pop(L, 1);
            }
            if (!read) {
                count++;
                lua_pop(L, 1);
                continue;
            }
        }
        /* the globals' C functions and libraries (print, math, kiln, ...)
         * are counted, not compared: the trace baked no value of theirs
         * that a rebinding to another builtin would change, and comparing
         * them at every replay made script globals' replays 14% slower
         * than nn.Sequential's (a rebinding to a Lua function is not seen
         * either; docs/guards.md says so) */
        if (globals && (lua_iscfunction(L, -1) || snap_is_library(L, sn, lua_gettop(L)))) {
            count++;
            lua_pop(L, 1);
            continue;
        }
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
    if (versioned) return;
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
/* ---- the globals' watch ----
 * A replay must see a global added since the trace (the function may read
 * it: nil then, a value now). Counting the globals table's entries at
 * every replay found it, at about a microsecond and a half for a script's
 * sixty globals: the one cost that kept README's global style 12% behind
 * nn.Sequential on the CPU. Instead, while the globals table has no
 * metatable of the user's, kiln gives it one whose __newindex (which Lua
 * calls for new keys only) counts additions; a replay compares the count.
 * rawset(_G, k, v) passes it by, and a user's own metatable replaces it:
 * the replay then counts the entries as before. */
#define KN_GLOBALS_WATCH "kiln.globals_watch"

static int globals_newindex(lua_State *L)
{
    if (lua_getmetatable(L, 1)) {
        lua_rawgeti(L, -1, 1);
        lua_Integer n = lua_tointeger(L, -1);
        lua_pop(L, 1);
        lua_pushinteger(L, n + 1);
        lua_rawseti(L, -2, 1);
        lua_pop(L, 1);
    }
    lua_settop(L, 3);
    lua_rawset(L, 1);
    return 0;
}

/* The additions counted on the table at idx, when its metatable is kiln's
 * watch (false: none, or the user's). */
static bool watched_additions(lua_State *L, int idx, lua_Integer *n)
{
    if (!lua_getmetatable(L, idx)) return false;
    lua_getfield(L, LUA_REGISTRYINDEX, KN_GLOBALS_WATCH);
    bool ours = lua_rawequal(L, -1, -2);
    if (ours) {
        lua_rawgeti(L, -2, 1);
        *n = lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    return ours;
}

/* Give the globals table (at idx) the watch, unless it has a metatable. */
static void watch_globals(lua_State *L, int idx)
{
    if (lua_getmetatable(L, idx)) {
        lua_pop(L, 1);
        return;
    }
    lua_createtable(L, 1, 1);
    lua_pushinteger(L, 0);
    lua_rawseti(L, -2, 1);
    lua_pushcfunction(L, globals_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, KN_GLOBALS_WATCH);
    lua_setmetatable(L, idx);
}

bool kn_lua_replay_snapshot(lua_State *L, int rt, int fn_idx, int module_idx, int keep_ids)
{
    int top = lua_gettop(L);
    snapshot sn = {0};
    if (keep_ids) sn.keep_ids = lua_absindex(L, keep_ids);
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    sn.globals = lua_gettop(L);
    watch_globals(L, sn.globals);
    lua_Integer added = 0;
    if (watched_additions(L, sn.globals, &added)) {
        lua_pushinteger(L, added);
        lua_setfield(L, rt, "globals_added");
    } else {
        lua_pushnil(L);
        lua_setfield(L, rt, "globals_added");
    }
    lua_newtable(L);
    sn.fields = lua_gettop(L);
    lua_newtable(L);
    sn.upvals = lua_gettop(L);
    lua_newtable(L);
    sn.tables = lua_gettop(L);
    lua_newtable(L);
    sn.versioned = lua_gettop(L);
    lua_newtable(L);
    sn.seen = lua_gettop(L);
    lua_newtable(L);
    sn.libs = lua_gettop(L);
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
            lua_pushvalue(L, -1);
            lua_pushboolean(L, 1);
            lua_rawset(L, sn.libs); /* libs[module] = true */
            lua_pushboolean(L, 1);
            lua_rawset(L, sn.seen); /* seen[module] = true, pops it */
        } else {
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    if (lua_getglobal(L, "kiln") == LUA_TTABLE) {
        lua_pushvalue(L, -1);
        lua_pushboolean(L, 1);
        lua_rawset(L, sn.libs);
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
        lua_pushvalue(L, sn.versioned);
        lua_setfield(L, rt, "versioned");
    }
    lua_settop(L, top);
    return !sn.over;
}

/* ---- the snapshot as a replay checks it ----------------------------------
 * Checked by its lists, a snapshot cost a replay seven Lua API calls a
 * field (three list reads, the lookup, the compare, and a walk that counts
 * entries): most of a transformer's host time a call. A table that nothing
 * changed walks in the same order, so a replay walks each table once with
 * lua_next and compares every key and value, in order, with what the walk
 * saw after the trace: any difference (a changed value, a key added, the
 * order moved by a rehash) traces the call, as a failed field did. The
 * globals keep the keyed check: a global tensor the graph does not read
 * (the REPL's y = cm(x)) changes freely there, and kiln's watch counts
 * their additions. */
typedef struct {
    int type;
    bool integer;
    const char *chars; /* a string's (a long string may come back as an equal copy) */
    size_t len;
    union {
        const void *p; /* identity (lua_topointer): a string's, table's, function's, userdata's */
        lua_Integer i;
        lua_Number n;
        int b;
    } u;
} snap_val;

struct kn_snap_entry {
    snap_val k, v;
};

static void snap_val_of(lua_State *L, int idx, snap_val *o)
{
    memset(o, 0, sizeof *o);
    o->type = lua_type(L, idx);
    switch (o->type) {
    case LUA_TNUMBER:
        o->integer = lua_isinteger(L, idx);
        if (o->integer) o->u.i = lua_tointeger(L, idx);
        else o->u.n = lua_tonumber(L, idx);
        break;
    case LUA_TSTRING:
        o->chars = lua_tolstring(L, idx, &o->len);
        o->u.p = lua_topointer(L, idx);
        break;
    case LUA_TBOOLEAN: o->u.b = lua_toboolean(L, idx); break;
    default: o->u.p = lua_topointer(L, idx); break;
    }
}

/* Whether the value at idx is the one o saw (raw equality; an integer
 * against a float counts as a change, which only traces the call). */
static bool snap_val_same(lua_State *L, int idx, const snap_val *o)
{
    switch (o->type) {
    case LUA_TNUMBER:
        if (o->integer) return lua_isinteger(L, idx) && lua_tointeger(L, idx) == o->u.i;
        return lua_type(L, idx) == LUA_TNUMBER && !lua_isinteger(L, idx) && lua_tonumber(L, idx) == o->u.n;
    case LUA_TBOOLEAN: return lua_type(L, idx) == LUA_TBOOLEAN && lua_toboolean(L, idx) == o->u.b;
    case LUA_TNIL: return lua_isnil(L, idx);
    default:
        /* an object (table, function, userdata, string, thread) is itself
         * wherever its identity is: one call, where most entries are */
        if (lua_topointer(L, idx) == o->u.p) return true;
        /* short strings are interned (one object for equal contents); a
         * long one may be an equal copy (the recorded one is alive: the
         * replay table's fields hold it) */
        if (o->type != LUA_TSTRING || lua_type(L, idx) != LUA_TSTRING) return false;
        size_t len;
        const char *p = lua_tolstring(L, idx, &len);
        return len == o->len && memcmp(p, o->chars, len) == 0;
    }
}

static void walk_free(replay_t *rp)
{
    free(rp->walk);
    free(rp->walk_end);
    rp->walk = NULL;
    rp->walk_end = NULL;
    rp->n_walk_tables = rp->n_walk = 0;
}

/* The walk a replay checks (rp->walk, the replay table's walk_tables and
 * gfields), from the snapshot just taken into rt; false when out of host
 * memory. */
static bool walk_record(lua_State *L, replay_t *rp, int rt)
{
    walk_free(rp);
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    int globals = lua_gettop(L);
    lua_getfield(L, rt, "tables");
    int tables = lua_gettop(L);
    lua_Integer n_tables = (lua_Integer)lua_rawlen(L, tables) / 2, n_entries = 0;
    for (lua_Integer i = 1; i <= n_tables; i++) {
        lua_rawgeti(L, tables, 2 * i);
        n_entries += lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    rp->walk = malloc(sizeof *rp->walk * (size_t)(n_entries + 1));
    rp->walk_end = malloc(sizeof *rp->walk_end * (size_t)(n_tables + 1));
    if (!rp->walk || !rp->walk_end) {
        walk_free(rp);
        lua_settop(L, top);
        return false;
    }
    lua_newtable(L);
    int walk_tables = lua_gettop(L);
    int e = 0;
    for (lua_Integer i = 1; i <= n_tables; i++) {
        lua_rawgeti(L, tables, 2 * i - 1);
        int t = lua_gettop(L);
        if (lua_rawequal(L, t, globals)) {
            lua_pop(L, 1);
            continue;
        }
        lua_pushnil(L);
        while (lua_next(L, t)) {
            if (e == n_entries) { /* more than the snapshot counted: cannot be */
                walk_free(rp);
                lua_settop(L, top);
                return false;
            }
            snap_val_of(L, -2, &rp->walk[e].k);
            snap_val_of(L, -1, &rp->walk[e].v);
            e++;
            lua_pop(L, 1);
        }
        lua_rawseti(L, walk_tables, ++rp->n_walk_tables);
        rp->walk_end[rp->n_walk_tables - 1] = e;
    }
    lua_setfield(L, rt, "walk_tables");
    rp->n_walk = e;
    /* the globals' fields, compared by key */
    lua_newtable(L);
    int gfields = lua_gettop(L);
    lua_getfield(L, rt, "fields");
    int fields = lua_gettop(L);
    lua_Integer n = (lua_Integer)lua_rawlen(L, fields), g = 0;
    for (lua_Integer i = 1; i <= n; i += 3) {
        lua_rawgeti(L, fields, i);
        bool in_globals = lua_rawequal(L, -1, globals);
        lua_pop(L, 1);
        for (int j = 0; j < 3 && in_globals; j++) {
            lua_rawgeti(L, fields, i + j);
            lua_rawseti(L, gfields, ++g);
        }
    }
    lua_pop(L, 1);
    lua_setfield(L, rt, "gfields");
    lua_settop(L, top);
    return true;
}

/* Whether every table of the walk holds (walk_record's tables, in order). */
static bool walk_holds(lua_State *L, const replay_t *rp, int rt)
{
    int top = lua_gettop(L);
    lua_getfield(L, rt, "walk_tables");
    int list = lua_gettop(L);
    int e = 0;
    for (int t = 0; t < rp->n_walk_tables; t++) {
        lua_rawgeti(L, list, t + 1);
        int tbl = lua_gettop(L), end = rp->walk_end[t];
        lua_pushnil(L);
        while (lua_next(L, tbl)) {
            if (e == end || !snap_val_same(L, -2, &rp->walk[e].k) || !snap_val_same(L, -1, &rp->walk[e].v)) {
                lua_settop(L, top);
                return false;
            }
            e++;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        if (e != end) {
            lua_settop(L, top);
            return false;
        }
    }
    lua_settop(L, top);
    return true;
}

/* Whether every versioned table of the snapshot at rt (snap_versioned) has
 * its metatable and version still. */
static bool versioned_hold(lua_State *L, int rt)
{
    int top = lua_gettop(L);
    bool same = true;
    if (lua_getfield(L, rt, "versioned") == LUA_TTABLE) {
        int list = lua_gettop(L);
        lua_Integer n = (lua_Integer)lua_rawlen(L, list);
        for (lua_Integer i = 1; i <= n && same; i += 3) {
            lua_rawgeti(L, list, i);
            same = lua_getmetatable(L, -1);
            if (!same) break;
            lua_rawgeti(L, list, i + 1);
            same = lua_rawequal(L, -1, -2);
            lua_pushliteral(L, "__kiln_replay_version");
            lua_rawget(L, -3);
            lua_rawgeti(L, list, i + 2);
            same = same && lua_rawequal(L, -1, -2);
            lua_settop(L, list);
        }
    }
    lua_settop(L, top);
    return same;
}

/* Whether every value of the snapshot in the replay table at rt holds;
 * with rp (a recorded replay's walk), the walk checks every table but the
 * globals, whose fields are its gfields. */
static bool snapshot_holds_walk(lua_State *L, const replay_t *rp, int rt)
{
    bool walked = rp && rp->walk;
    bool same = true;
    lua_getfield(L, rt, walked ? "gfields" : "fields");
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
    /* the globals: no key added since the snapshot (the watch's count),
     * or, unwatched, the same number of entries */
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    int globals = lua_gettop(L);
    lua_getfield(L, rt, "globals_added");
    lua_Integer added = 0;
    bool globals_same = !lua_isnil(L, -1) && watched_additions(L, globals, &added) && added == lua_tointeger(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, rt, "tables");
    list = lua_gettop(L);
    n = (lua_Integer)lua_rawlen(L, list);
    for (lua_Integer i = 1; i <= n && same; i += 2) {
        lua_rawgeti(L, list, i);
        int t = lua_gettop(L);
        bool is_globals = lua_rawequal(L, t, globals);
        if ((globals_same && is_globals) || (walked && !is_globals)) {
            lua_pop(L, 1);
            continue;
        }
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
    lua_pop(L, 4);
    return same && versioned_hold(L, rt) && (!walked || walk_holds(L, rp, rt));
}

static bool snapshot_holds(lua_State *L, int rt)
{
    return snapshot_holds_walk(L, NULL, rt);
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

/* Whether every guard of a replay holds for this call: the arguments, the
 * module's parameters, the dynamic numbers, the other tensors, the
 * function's upvalues and the snapshot of what it can read. Fills bound
 * (the tensor of each graph input of v). Leaves values on the stack: the
 * caller restores its top. */
static bool replay_guards_hold(lua_State *L, const compiled_ud *u, int uv, int rt, const kn_version *v, int nargs,
                               int module_idx, kn_tensor **bound)
{
    const replay_t *rp = &u->rp;
    /* arguments */
    lua_getfield(L, rt, "args");
    for (int i = 0; i < nargs; i++) {
        int k = rp->arg_input[i];
        if (k == -2) {
            lua_rawgeti(L, -1, i + 1);
            bool same = lua_rawequal(L, -1, 2 + i);
            lua_pop(L, 1);
            if (!same) return false;
            continue;
        }
        kn_tensor *t = kn_lua_totensor(L, 2 + i);
        if (!t || (k >= 0 && !kn_version_input_matches(v, k, t))) return false;
        if (k >= 0) bound[k] = t;
    }
    lua_pop(L, 1);
    /* parameters the snapshot did not see: the module still holds the same tensors at their paths */
    if (rp->n_params) {
        lua_getfield(L, rt, "params");
        for (int i = 0; i < rp->n_params; i++) {
            lua_rawgeti(L, -1, i + 1);
            push_path(L, module_idx, lua_tostring(L, -1));
            kn_tensor *t = kn_lua_totensor(L, -1);
            int k = rp->param_input[i];
            lua_pop(L, 2);
            if (!t || t->id != v->g.inputs[k].tensor_id || !kn_version_input_matches(v, k, t)) return false;
            bound[k] = t;
        }
        lua_pop(L, 1);
    }
    /* dynamic numbers: the values of the trace, which every guard above
     * holding means the Lua code would compute again */
    for (int k = 0; k < v->g.n_inputs; k++)
        if (kn_input_is_number(&v->g.inputs[k]) &&
            !(bound[k] = kn_compiled_number_value(u->cm, 0, v->g.inputs[k].name)))
            return false;
    /* other tensors the function used (upvalues, globals): kept alive here */
    lua_getfield(L, rt, "tensors");
    for (int k = 0; k < v->g.n_inputs; k++) {
        if (bound[k]) continue;
        if (rp->tensor_ud && rp->tensor_ud[k]) {
            bound[k] = kn_lua_tensor_of(L, rp->tensor_ud[k]);
        } else {
            lua_rawgeti(L, -1, k + 1);
            bound[k] = kn_lua_totensor(L, -1);
            lua_pop(L, 1);
        }
        if (!bound[k]) return false;
        /* a placeholder an earlier call made: its value is the input */
        if (bound[k]->lazy) bound[k] = bound[k]->lazy->value;
        /* the same tensor, as the snapshot guarded; its shape still the traced one */
        if (!bound[k] || !kn_version_input_matches(v, k, bound[k])) return false;
    }
    lua_pop(L, 1);
    /* whether each tensor requires grad, as at the trace: its gradient is
     * traced or not (a replayed tape's edge to an argument) */
    for (int k = 0; k < v->g.n_inputs; k++)
        if (kn_autograd_requires_grad(bound[k]) != v->g.inputs[k].requires_grad) return false;
    /* upvalues of the function and scalar fields of the module */
    lua_getfield(L, rt, "upvalues");
    lua_getfield(L, uv, "fn");
    for (int i = 1;; i++) {
        if (!lua_getupvalue(L, -1, i)) break;
        lua_rawgeti(L, -3, i);
        bool same = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
        if (!same) return false;
    }
    lua_pop(L, 2);
    /* what the function can read: fields of its tables, globals, the module's fields */
    return snapshot_holds_walk(L, rp, rt);
}

/* The graph values a replay without a tape hands back, into out: the
 * results that are graph values, then the values the call wrote in place
 * (no tape when there are writes: record_writes), then the gradients it
 * left in .grad. Returns their count; *n_results: how many are results. */
static int replay_values(const replay_t *rp, kn_plan_value *out, int *n_results)
{
    int n = 0;
    for (int i = 0; i < rp->n_results; i++)
        if (rp->res_node[i] >= 0) out[n++] = (kn_plan_value){rp->res_node[i], rp->res_out[i]};
    *n_results = n;
    for (int i = 0; i < rp->n_writes; i++) out[n++] = (kn_plan_value){rp->write_node[i], rp->write_out[i]};
    for (int i = 0; i < rp->n_grads; i++)
        if (rp->grad_node[i] >= 0) out[n++] = (kn_plan_value){rp->grad_node[i], rp->grad_out[i]};
    return n;
}

/* The graph input each wanted value should end up in (into, n entries,
 * -1: none): the in-place writes a replay repeats, by their positions in
 * want (replay_values' order) or, with pos (want_pos), in the trace's
 * list. A value wanted twice (also a result, a gradient or another write)
 * is left to the copies after the run: the input's tensor cannot stand in
 * for both. */
static void write_targets(const replay_t *rp, int n_results_want, int n_want, const int *pos, int *into, int n)
{
    for (int j = 0; j < n; j++) into[j] = -1;
    for (int i = 0; i < rp->n_writes; i++) {
        int k = n_results_want + i, at = pos ? pos[k] : k;
        bool alone = true;
        for (int k2 = 0; k2 < n_want && alone; k2++) alone = k2 == k || (pos ? pos[k2] : k2) != at;
        if (alone && at >= 0 && at < n) into[at] = rp->write_input[i];
    }
}

/* Every guard holds: run version v's graph on the inputs bound, set the
 * stack back to top and push the results as the traced call returned them
 * (graph values, and the constants kept in the replay table); returns
 * their count. */
static int run_replay(lua_State *L, compiled_ud *u, int uv, kn_version *v, kn_tensor **bound, int top)
{
    replay_t *rp = &u->rp;
    kn_compiled *cm = u->cm;
    /* every guard holds: run the cached graph on these inputs */
    for (int k = 0; k < v->g.n_inputs; k++) v->g.inputs[k].tensor = bound[k];
    if (rp->rng_used) replay_draw(L, v, rp->rng_used);
    /* running the graph: allocating, computing and freeing its values */
    double t0 = kn_clock_s();
    kn_plan_value own_want[3 * KN_REPLAY_MAX]; /* results, writes, gradients */
    const kn_plan_value *want = own_want;
    kn_tensor *outs[KN_REPLAY_TAPE_MAX + 3 * KN_REPLAY_MAX];
    int n_want = 0, n_results_want = 0;
    if (rp->tape) want = kn_replay_tape_want(rp->tape, &n_want); /* the trace's: results and kept values */
    else n_want = replay_values(rp, own_want, &n_results_want);
    kn_status st;
    if (!rp->tape && rp->n_trace_want > 0) {
        /* in the trace's order (its plan), each value needed taken by position */
        kn_tensor *trace_outs[KN_REPLAY_TAPE_MAX];
        st = kn_compiled_run_into(cm, v, &v->g, rp->trace_want, rp->n_trace_want, trace_outs, rp->write_into);
        if (st == KN_OK) {
            for (int i = 0; i < n_want; i++) {
                outs[i] = trace_outs[rp->want_pos[i]];
                kn_tensor_retain(outs[i]);
            }
            for (int j = 0; j < rp->n_trace_want; j++) kn_tensor_release(trace_outs[j]);
        }
    } else {
        st = kn_compiled_run_into(cm, v, &v->g, want, n_want, outs, rp->tape ? NULL : rp->write_into);
    }
    /* the writes, once the graph ran (a failed run writes nothing); one a
     * recording wrote itself is the tensor already (no copy: write_targets) */
    bool ran = st == KN_OK;
    for (int i = 0; i < rp->n_writes && st == KN_OK; i++)
        st = kn_capture_copy_value(bound[rp->write_input[i]], outs[n_results_want + i]);
    /* the gradients, as the call's backward (or zero_grad) left them */
    for (int i = 0, o = n_results_want + rp->n_writes; i < rp->n_grads && st == KN_OK; i++)
        st = kn_autograd_set_grad(bound[rp->grad_input[i]], rp->grad_node[i] >= 0 ? outs[o++] : NULL);
    for (int i = 0; i < rp->n_clear_extra && st == KN_OK; i++) st = kn_autograd_set_grad(rp->clear_extra[i], NULL);
    if (ran) {
        /* the writes' and gradients' values (none with a tape: record_writes, record_grads) */
        for (int i = n_results_want; i < n_want && !rp->tape; i++) kn_tensor_release(outs[i]);
        if (st != KN_OK)
            for (int i = 0; i < n_results_want; i++) kn_tensor_release(outs[i]);
    }
    for (int k = 0; k < v->g.n_inputs; k++) v->g.inputs[k].tensor = NULL;
    kn_tensor *results[KN_REPLAY_MAX];
    if (st == KN_OK && rp->tape) {
        /* the history a traced call attaches, from this run's values */
        kn_tensor *args[KN_REPLAY_MAX];
        for (int i = 0; i < rp->nargs; i++) args[i] = kn_lua_totensor(L, 2 + i);
        st = kn_replay_tape_attach(rp->tape, &kn_lua_state_get(L)->grad, outs, bound, args, results);
        for (int i = 0; i < n_want; i++) kn_tensor_release(outs[i]);
    } else if (st == KN_OK)
        for (int i = 0, w = 0; i < rp->n_results; i++) results[i] = rp->res_node[i] < 0 ? NULL : outs[w++];
    if (st != KN_OK) {
        kn_lua_trace_flush_log(cm);
        lua_settop(L, top);
        return kn_lua_fail(L, st);
    }
    u->replay_run_s += kn_clock_s() - t0;
    lua_settop(L, top);
    lua_getfield(L, uv, "replay");
    lua_getfield(L, -1, "results");
    lua_remove(L, -2);
    int rtab = lua_gettop(L);
    luaL_checkstack(L, rp->n_results, "replay");
    for (int i = 0; i < rp->n_results; i++) {
        /* a training step's loss: spent by its backward, as the trace's was */
        if (results[i] && rp->res_spent[i]) kn_autograd_mark(results[i], KN_GRAD_ORIGIN_SPENT);
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

/* Try a direct replay; pushes the results and returns their count, or -1
 * when a guard does not hold (then nothing is pushed and the call traces). */
int kn_lua_replay_try(lua_State *L, compiled_ud *u, int uv, int nargs, int module_idx)
{
    replay_t *rp = &u->rp;
    kn_compiled *cm = u->cm;
    if (!rp->valid || rp->nargs != nargs || strcmp(rp->mode, cm->id.mode) != 0 || cm->cache.n_graphs < 1 ||
        rp->version >= cm->cache.graphs[0].n_versions || cm->cache.graphs[0].eager)
        return -1;
    kn_version *v = &cm->cache.graphs[0].versions[rp->version];
    /* a training graph traced in one grad mode gives history, or not, as
     * that mode did */
    if ((rp->tape || v->training) && rp->grad_enabled != kn_lua_state_get(L)->grad.enabled) return -1;
    /* a trace under kiln.autocast has its casts in the graph; without them, none */
    const kn_lua_state *ls = kn_lua_state_get(L);
    if (rp->autocast_on != ls->autocast_on || (ls->autocast_on && rp->autocast_dtype != ls->autocast_dtype))
        return -1;
    int top = lua_gettop(L);
    lua_getfield(L, uv, "replay");
    int rt = lua_gettop(L);
    kn_tensor *bound[256] = {NULL};
    double t0 = kn_clock_s();
    bool hold = v->g.n_inputs <= 256 && replay_guards_hold(L, u, uv, rt, v, nargs, module_idx, bound);
    u->replay_guard_s += kn_clock_s() - t0;
    if (!hold) {
        lua_settop(L, top);
        return -1;
    }
    for (int i = 0; i < rp->n_grads; i++)
        if (rp->grad_needs_none[i] && kn_autograd_grad(bound[rp->grad_input[i]])) {
            lua_settop(L, top);
            return -1;
        }
    return run_replay(L, u, uv, v, bound, top);
}

/* Why the traced call that just ended cannot be replayed (NULL when it
 * may be): breaks, an impure call, a change to what it reads (the snapshot
 * at before), not exactly one graph of a fixed shape, too many values. */
static const char *why_no_replay(lua_State *L, const kn_compiled *cm, int nargs, int nres, int before)
{
    const kn_capture *cap = &cm->cap;
    const kn_lua_state *s = kn_lua_state_get(L);
    const char *why = NULL;
    if (cap->n_breaks) why = "graph breaks";
    /* a replay runs the graph, repeats the call's in-place writes
     * (record_writes) and sets the .grad its backward set (record_grads);
     * a gradient assigned by hand it cannot repeat */
    else if (cap->call_grad_assigns) why = "it assigns a tensor's .grad by hand";
    else if (s->impure) why = s->impure_what;
    /* a step counter kept in an upvalue (lr = lr * 0.9) or a table: a replay
     * would skip the write, and every later call would see the same value */
    else if (!snapshot_holds(L, before)) why = "it changes Lua values it reads (an upvalue, a table field or a global)";
    else if (cap->n_graphs != 1) why = cap->n_graphs ? "more than one graph" : "no graph";
    else if (cap->graph_version[0] < 0) why = "the graph runs eagerly (cache limit)";
    else if (nargs > KN_REPLAY_MAX || nres > KN_REPLAY_MAX) why = "too many arguments or results";
    else if (cm->cache.graphs[0].versions[cap->graph_version[0]].dynamic) why = "dynamic shapes";
    return why;
}

/* The results at [first, first + nres): which graph value each is, or the
 * constant itself, into a new table on the stack; false for a result a
 * replay cannot give back (a tensor from outside the graph, a table, a
 * function ...). */
static bool record_results(lua_State *L, replay_t *rp, int first, int nres, bool *history, char *why,
                           size_t why_size)
{
    *history = false;
    /* results: values of the graph, or constants */
    lua_createtable(L, nres, 0);
    for (int i = 0; i < nres; i++) {
        int idx = first + i;
        void *ud = luaL_testudata(L, idx, KN_TENSOR_MT);
        rp->res_node[i] = -1;
        rp->res_spent[i] = false;
        if (ud) {
            kn_tensor *t = *(kn_tensor **)ud;
            if (!t->lazy || t->lazy->segment != 0) { /* a tensor from outside the graph */
                snprintf(why, why_size, "it returns a tensor (result %d) that is not a value of its graph", i + 1);
                return false;
            }
            if (t->ag && t->ag->fn) *history = true; /* a replay rebuilds its tape (kn_lua_replay_tape.h) */
            rp->res_spent[i] = t->ag && t->ag->origin == KN_GRAD_ORIGIN_SPENT;
            rp->res_node[i] = t->lazy->node;
            rp->res_out[i] = t->lazy->out;
        } else if (lua_istable(L, idx) || lua_isuserdata(L, idx) || lua_isfunction(L, idx) || lua_isthread(L, idx)) {
            snprintf(why, why_size, "it returns a %s (result %d), which may hold tensors or state", luaL_typename(L, idx),
                     i + 1);
            return false; /* may hold tensors or state */
        } else {
            lua_pushvalue(L, idx);
            lua_rawseti(L, -2, i + 1);
        }
    }
    rp->n_results = nres;
    return true;
}

/* The arguments: each tensor to the graph input its parameter names, each
 * other value kept (in a new table on the stack) to compare; false for a
 * table, userdata or coroutine, which may hold what a replay cannot see. */
static bool record_args(lua_State *L, replay_t *rp, int uv, int nargs, bool is_module, const kn_version *v,
                        char *why, size_t why_size)
{
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
            snprintf(why, why_size, "it takes a %s (argument %d), which may hold tensors or state",
                     luaL_typename(L, idx), i + 1);
            return false;
        } else {
            rp->arg_input[i] = -2;
            lua_pushvalue(L, idx);
            lua_rawseti(L, -3, i + 1);
        }
    }
    lua_pop(L, 1);
    rp->nargs = nargs;
    return true;
}

/* Push the tensor with this id that the snapshot at rt saw in a field
 * (a module's weight, a global's) or an upvalue; false when none holds it.
 * The snapshot guards that field by identity, so a replay that passes it
 * reads the same tensor the trace read. */
static bool push_snapshot_tensor(lua_State *L, int rt, uint64_t id)
{
    static const char *const lists[] = {"fields", "upvals"};
    for (int li = 0; li < 2; li++) {
        lua_getfield(L, rt, lists[li]);
        int list = lua_gettop(L);
        lua_Integer n = (lua_Integer)lua_rawlen(L, list);
        for (lua_Integer i = 3; i <= n; i += 3) {
            lua_rawgeti(L, list, i);
            kn_tensor *t = kn_lua_totensor(L, -1);
            /* a placeholder an earlier call made stands for its value, the input */
            if (t && (t->id == id || (t->lazy && t->lazy->value && t->lazy->value->id == id))) {
                lua_remove(L, list);
                return true;
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    return false;
}

/* The graph inputs that are neither arguments nor dynamic numbers, pushed
 * as two tables (params, then tensors): the tensors found in the snapshot
 * at rt (a module's parameters, the weights a function reached through
 * upvalues and globals) by graph input, and a module's parameters the
 * snapshot did not see by path. False, with why, when an input comes from
 * somewhere a replay cannot check. */
static bool record_inputs(lua_State *L, replay_t *rp, const kn_compiled *cm, const kn_version *v, int nargs,
                          bool is_module, int rt, char *why, size_t why_size)
{
    /* tensors kept alive by reference; parameters not found, by path */
    lua_newtable(L);
    lua_newtable(L);
    rp->n_params = 0;
    for (int k = 0; k < v->g.n_inputs; k++) {
        const kn_graph_input *in = &v->g.inputs[k];
        if (in->kind == KN_IN_ARG) {
            bool from_arg = false;
            for (int i = 0; i < nargs; i++) from_arg = from_arg || rp->arg_input[i] == k;
            if (!from_arg) {
                snprintf(why, why_size, "its graph reads argument '%s', which no argument of this call names", in->name);
                return false;
            }
            continue;
        }
        if (kn_input_is_number(in)) {
            /* a dynamic number: the replay binds this trace's value */
            if (!kn_compiled_number_value(cm, 0, in->name)) {
                snprintf(why, why_size, "its graph reads number '%s', which a replay cannot compute", in->name);
                return false;
            }
            continue;
        }
        /* a tensor the first call made (a value the code caches after
         * making it: an ONNX model's index constants) is found like any
         * other, when a table the function reaches still holds it */
        if (in->kind != KN_IN_TENSOR && in->kind != KN_IN_PARAM && in->kind != KN_IN_VALUE) {
            snprintf(why, why_size, "its graph reads '%s', a value (not an argument, parameter or tensor) a replay "
                                    "cannot find again", in->name);
            return false;
        }
        /* found in the snapshot: guarded by that field's identity, one
         * lookup a replay (a module's parameters too: ViT-B's 150 walked
         * by path were most of a replay's host time) */
        if (push_snapshot_tensor(L, rt, in->tensor_id)) {
            lua_rawseti(L, -2, k + 1);
            continue;
        }
        /* a module's parameter the snapshot did not see (an opaque table
         * holds it): by path */
        if (in->kind == KN_IN_PARAM && is_module && rp->n_params < 64) {
            lua_pushstring(L, in->name);
            lua_rawseti(L, -3, ++rp->n_params);
            rp->param_input[rp->n_params - 1] = k;
            continue;
        }
        snprintf(why, why_size,
                 "it reads tensor '%s', which no upvalue, global or table it can reach holds after the "
                 "call (made or swapped inside it?): pass it as an argument, or keep it in a module",
                 in->name);
        return false;
    }
    return true;
}

/* The tape of the results at [first, first + nres), which carry autograd
 * history, into u->rp.tape; false (with why in u->no_replay) when a
 * replay cannot build it again. */
static bool record_tape(lua_State *L, compiled_ud *u, const kn_version *v, int first, int nres)
{
    replay_t *rp = &u->rp;
    const kn_capture *cap = &u->cm->cap;
    if (cap->n_last_want > KN_REPLAY_TAPE_MAX) {
        snprintf(u->no_replay, sizeof u->no_replay,
                 "it returns tensors with autograd history and its graph keeps more than %d values for backward",
                 KN_REPLAY_TAPE_MAX);
        return false;
    }
    kn_tensor *results[KN_REPLAY_MAX], *args[KN_REPLAY_MAX];
    for (int i = 0; i < nres; i++) { /* the placeholders themselves: they name their graph values */
        void *ud = luaL_testudata(L, first + i, KN_TENSOR_MT);
        results[i] = ud ? *(kn_tensor **)ud : NULL;
    }
    for (int i = 0; i < rp->nargs; i++) args[i] = kn_lua_totensor(L, 2 + i);
    rp->tape = kn_replay_tape_record(cap, v, u->trace_seq0, results, nres, args, rp->nargs, u->no_replay,
                                     sizeof u->no_replay);
    return rp->tape != NULL;
}

/* The traced call's in-place writes (kn_capture.last_writes), which a
 * replay repeats: each into a tensor its graph reads (an argument, a
 * parameter, an upvalue's tensor), which the replay binds again. False,
 * with why, when one cannot be repeated. */
static bool record_writes(replay_t *rp, const kn_capture *cap, char *why, size_t why_size)
{
    rp->n_writes = 0;
    if (!cap->call_writes) return true;
    if (cap->n_last_writes < 0 || cap->n_last_writes > KN_REPLAY_MAX) {
        snprintf(why, why_size, "it writes more tensors in place than a replay repeats (%d)", KN_REPLAY_MAX);
        return false;
    }
    if (rp->tape) {
        snprintf(why, why_size, "it writes tensors in place and returns tensors with autograd history");
        return false;
    }
    for (int i = 0; i < cap->n_last_writes; i++) {
        const struct kn_applied_write *w = &cap->last_writes[i];
        if (w->input < 0 || w->graph != 0) {
            snprintf(why, why_size, "it writes in place a tensor its graph does not read, which a replay cannot find");
            return false;
        }
        rp->write_input[i] = w->input;
        rp->write_node[i] = w->node;
        rp->write_out[i] = w->out;
    }
    rp->n_writes = cap->n_last_writes;
    return true;
}

/* The gradients the traced call left on the tensors its graph reads
 * (bound: each input's tensor), which a replay sets again: a value of
 * the graph (its backward's), or none where the call cleared it
 * (zero_grad). A gradient from outside the graph is left as it is (the
 * call did not touch it: an assignment stops the replay, why_no_replay).
 * False, with why, when there are more than a replay sets. */
static bool record_grads(replay_t *rp, const kn_capture *cap, const kn_version *v, kn_tensor *const *bound,
                         char *why, size_t why_size)
{
    rp->n_grads = 0;
    if (!cap->call_backwards && !cap->n_grad_cleared) return true;
    if (rp->tape) {
        snprintf(why, why_size, "it runs backward and returns tensors with autograd history it did not spend");
        return false;
    }
    for (int k = 0; k < v->g.n_inputs; k++) {
        kn_tensor *t = bound[k];
        if (!t || kn_input_is_number(&v->g.inputs[k])) continue;
        kn_tensor *g = kn_autograd_grad(t);
        bool cleared = kn_capture_grad_cleared(cap, t->id);
        int node = -1, out = 0;
        if (g && g->lazy && g->lazy->segment == 0 && g->lazy->node >= 0) {
            node = g->lazy->node;
            out = g->lazy->out;
        } else if (g || !cleared) {
            continue;
        }
        if (rp->n_grads == KN_REPLAY_MAX) {
            snprintf(why, why_size, "it sets more gradients than a replay sets (%d)", KN_REPLAY_MAX);
            return false;
        }
        rp->grad_input[rp->n_grads] = k;
        rp->grad_needs_none[rp->n_grads] = node >= 0 && !cleared;
        rp->grad_node[rp->n_grads] = node;
        rp->grad_out[rp->n_grads] = out;
        rp->n_grads++;
    }
    for (int i = 0; i < cap->n_grad_cleared; i++) {
        kn_tensor *t = cap->grad_cleared[i];
        bool read = false;
        for (int k = 0; k < v->g.n_inputs && !read; k++) read = bound[k] && bound[k]->id == t->id;
        if (read || kn_autograd_grad(t)) continue;
        if (rp->n_clear_extra == KN_REPLAY_MAX) {
            snprintf(why, why_size, "it clears more gradients than a replay clears (%d)", KN_REPLAY_MAX);
            return false;
        }
        kn_tensor_retain(t);
        rp->clear_extra[rp->n_clear_extra++] = t;
    }
    return true;
}

void kn_lua_replay_forget(replay_t *rp)
{
    rp->valid = false;
    kn_replay_tape_free(rp->tape);
    rp->tape = NULL;
    for (int i = 0; i < rp->n_clear_extra; i++) kn_tensor_release(rp->clear_extra[i]);
    rp->n_clear_extra = 0;
    rp->n_grads = 0;
    free(rp->trace_want);
    rp->trace_want = NULL;
    rp->n_trace_want = 0;
    walk_free(rp);
    free(rp->tensor_ud);
    rp->tensor_ud = NULL;
}

/* rp->trace_want and want_pos (replay_t), for a replay without a tape,
 * want_pos in replay_values' order: left empty (the replay asks in that
 * order) when a value it needs is not among the trace's. */
static void record_trace_want(replay_t *rp, const kn_capture *cap)
{
    if (rp->tape || cap->n_last_want < 1 || cap->n_last_want > KN_REPLAY_TAPE_MAX) return;
    kn_plan_value need[3 * KN_REPLAY_MAX];
    int n_results, n = replay_values(rp, need, &n_results);
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < cap->n_last_want &&
               (cap->last_want[j].node != need[i].node || cap->last_want[j].out != need[i].out))
            j++;
        if (j == cap->n_last_want) return;
        rp->want_pos[i] = j;
    }
    rp->trace_want = malloc(sizeof *rp->trace_want * (size_t)cap->n_last_want);
    if (!rp->trace_want) return;
    memcpy(rp->trace_want, cap->last_want, sizeof *rp->trace_want * (size_t)cap->n_last_want);
    rp->n_trace_want = cap->n_last_want;
}

/* After a traced call: record what a replay needs, when the call allows it.
 * Results are at [first, top]. */
void kn_lua_replay_record(lua_State *L, compiled_ud *u, int uv, int nargs, bool is_module, int module_idx,
                          int first, int before)
{
    replay_t *rp = &u->rp;
    kn_compiled *cm = u->cm;
    const kn_capture *cap = &cm->cap;
    kn_lua_replay_forget(rp);
    int nres = lua_gettop(L) - first + 1;
    const kn_lua_state *s = kn_lua_state_get(L);
    const char *why = why_no_replay(L, cm, nargs, nres, before);
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
    bool history;
    if (!record_results(L, rp, first, nres, &history, u->no_replay, sizeof u->no_replay)) goto fail;
    lua_setfield(L, rt, "results");
    if (!record_args(L, rp, uv, nargs, is_module, v, u->no_replay, sizeof u->no_replay)) goto fail;
    lua_setfield(L, rt, "args");
    /* upvalues of the function, and what it can read (before the inputs:
     * the tensors it reached through them are found in the snapshot) */
    lua_newtable(L);
    lua_getfield(L, uv, "fn");
    for (int i = 1; lua_getupvalue(L, -1, i); i++) lua_rawseti(L, -3, i);
    lua_pop(L, 1);
    lua_setfield(L, rt, "upvalues");
    lua_getfield(L, uv, "fn");
    int fn = lua_gettop(L);
    /* the tensors the graph reads, by id: the global ones among them are compared */
    lua_newtable(L);
    for (int k = 0; k < v->g.n_inputs; k++) {
        lua_pushboolean(L, 1);
        lua_rawseti(L, -2, (lua_Integer)v->g.inputs[k].tensor_id);
    }
    bool small = kn_lua_replay_snapshot(L, rt, fn, is_module ? module_idx : 0, lua_gettop(L));
    lua_pop(L, 2);
    if (!small) {
        snprintf(u->no_replay, sizeof u->no_replay,
                 "it can read more Lua values than a replay checks (%d): keep large tables out of its upvalues "
                 "and globals, or make it a module", KN_SNAPSHOT_MAX);
        goto fail;
    }
    if (!walk_record(L, rp, rt)) {
        snprintf(u->no_replay, sizeof u->no_replay, "out of host memory recording what a replay checks");
        goto fail;
    }
    if (!record_inputs(L, rp, cm, v, nargs, is_module, rt, u->no_replay, sizeof u->no_replay)) goto fail;
    if (history && !record_tape(L, u, v, first, nres)) goto fail;
    if (!record_writes(rp, cap, u->no_replay, sizeof u->no_replay)) goto fail;
    /* the userdata of each tensor the tensors list holds (a ViT-B replay
     * looked 150 of them up by list and metatable) */
    free(rp->tensor_ud);
    if ((rp->tensor_ud = calloc((size_t)v->g.n_inputs + 1, sizeof *rp->tensor_ud)))
        for (int k = 0; k < v->g.n_inputs; k++) {
            lua_rawgeti(L, -1, k + 1);
            if (luaL_testudata(L, -1, KN_TENSOR_MT)) rp->tensor_ud[k] = lua_touserdata(L, -1);
            lua_pop(L, 1);
        }
    lua_setfield(L, rt, "tensors");
    lua_setfield(L, rt, "params");
    /* the tensors a replay would bind now, found the way it finds them:
     * their gradients are the call's */
    if (cap->call_backwards || cap->n_grad_cleared) {
        kn_tensor *bound[256] = {NULL};
        int mark = lua_gettop(L);
        bool holds = replay_guards_hold(L, u, uv, rt, v, nargs, module_idx, bound);
        lua_settop(L, mark);
        if (!holds) {
            snprintf(u->no_replay, sizeof u->no_replay, "its guards do not hold right after the call");
            goto fail;
        }
        if (!record_grads(rp, cap, v, bound, u->no_replay, sizeof u->no_replay)) goto fail;
    }
    lua_setfield(L, uv, "replay");
    record_trace_want(rp, cap);
    if (!rp->tape) { /* where the writes go, in the order a replay asks */
        kn_plan_value need[3 * KN_REPLAY_MAX];
        int n_results_want, n_want = replay_values(rp, need, &n_results_want);
        write_targets(rp, n_results_want, n_want, rp->n_trace_want > 0 ? rp->want_pos : NULL, rp->write_into,
                      rp->n_trace_want > 0 ? rp->n_trace_want : n_want);
    }
    rp->grad_enabled = s->grad.enabled;
    rp->autocast_on = s->autocast_on;
    rp->autocast_dtype = s->autocast_dtype;
    snprintf(rp->mode, sizeof rp->mode, "%s", cm->id.mode);
    rp->version = cap->graph_version[0];
    rp->valid = true;
    u->no_replay[0] = 0;
    lua_settop(L, top);
    return;
fail:
    lua_settop(L, top);
}
