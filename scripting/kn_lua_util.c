/* kn_lua_util: errors at the user's line and the argument helpers of the
 * binding files (see kn_lua_util.h). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_lua_state.h"
#include "kn_lua_util.h"

/* ---- errors and where the user is -------------------------------------- */

int kn_lua_fail(lua_State *L, kn_status st)
{
    (void)st;
    kn_lua_where(L); /* the user's file:line, skipping kiln's own Lua */
    lua_pushstring(L, kn_last_error());
    lua_concat(L, 2);
    return lua_error(L);
}

bool kn_lua_user_frame(const lua_Debug *ar)
{
    /* C functions have no line; kiln's nn and commands come from @kiln/ */
    return ar->currentline > 0 && strncmp(ar->source, "@kiln/", 6) != 0;
}

/* The user's file:line into buf: the innermost frame outside kiln's Lua;
 * but where a frame of kiln's was reached by a tail call (`return
 * self.head(y)` in the user's forward), the user's frame that made it is
 * gone and the next one down is its caller's: then the line the trace's
 * line hook saw last. False when there is none. */
static bool user_where(lua_State *L, char *buf, size_t size)
{
    lua_Debug ar;
    bool tail = false;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "Slt", &ar);
        if (!kn_lua_user_frame(&ar)) {
            tail = tail || ar.istailcall;
            continue;
        }
        const char *last = kn_lua_state_get(L)->last_user_line;
        if (tail && last[0]) snprintf(buf, size, "%s", last);
        else snprintf(buf, size, "%s:%d", ar.short_src, ar.currentline);
        return true;
    }
    const char *last = kn_lua_state_get(L)->last_user_line;
    if (tail && last[0]) {
        snprintf(buf, size, "%s", last);
        return true;
    }
    return false;
}

void kn_lua_where(lua_State *L)
{
    char buf[200];
    if (user_where(L, buf, sizeof buf)) lua_pushfstring(L, "%s: ", buf);
    else lua_pushliteral(L, "");
}

void kn_lua_where_str(lua_State *L, char *buf, size_t size)
{
    const char *override = kn_lua_state_get(L)->where_override;
    if (override[0]) { /* an ONNX node being interpreted names itself */
        snprintf(buf, size, "%s", override);
        return;
    }
    if (!user_where(L, buf, size)) snprintf(buf, size, "?");
}

/* ---- names and options: one checker, with "did you mean" ---------------- */

enum { NAME_CMP_MAX = 64 }; /* longer words are no one's typo of a name */

static int fold(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }

static int min3(int a, int b, int c) { return a < b ? (a < c ? a : c) : (b < c ? b : c); }

/* The optimal-string-alignment distance of a and b, case folded: an
 * insertion, a deletion, a change or a swap of two neighbours (the typos a
 * hand makes: "fullgrpah") each cost 1. -1 when either is too long. */
static int typo_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > NAME_CMP_MAX || m > NAME_CMP_MAX) return -1;
    int d[NAME_CMP_MAX + 1][NAME_CMP_MAX + 1];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int cost = fold(a[i - 1]) != fold(b[j - 1]);
            d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && fold(a[i - 1]) == fold(b[j - 2]) && fold(a[i - 2]) == fold(b[j - 1]) &&
                d[i - 2][j - 2] + 1 < d[i][j])
                d[i][j] = d[i - 2][j - 2] + 1;
        }
    }
    return d[n][m];
}

static bool starts_with_folded(const char *name, const char *prefix)
{
    for (; *prefix; name++, prefix++)
        if (fold(*name) != fold(*prefix)) return false;
    return true;
}

const char *kn_lua_nearest(const char *word, const char *const *names)
{
    size_t len = strlen(word);
    /* a slip per four letters or so: "iter" -> iters, "fullgrpah" ->
     * fullgraph, never "x" -> y */
    int allowed = len >= 8 ? 3 : len >= 5 ? 2 : 1;
    if ((size_t)allowed >= len) allowed = (int)len - 1;
    const char *best = NULL;
    int best_d = allowed + 1;
    for (int i = 0; names[i]; i++) {
        int d = typo_distance(word, names[i]);
        if (d >= 0 && d < best_d) {
            best = names[i];
            best_d = d;
        }
    }
    if (best || len < 3) return best;
    /* the start of one name only (":ker" -> :kernels) */
    for (int i = 0; names[i]; i++) {
        if (!starts_with_folded(names[i], word)) continue;
        if (best) return NULL; /* two names start so: neither is meant more */
        best = names[i];
    }
    return best;
}

void kn_lua_push_unknown(lua_State *L, const char *noun, const char *word, const char *const *names)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    /* a word is shown whole up to 80 bytes: a 1 MB key must not make a 1 MB message */
    if (strlen(word) > 80) lua_pushfstring(L, "unknown %s of %d bytes (known: ", noun, (int)strlen(word));
    else lua_pushfstring(L, "unknown %s '%s' (known: ", noun, word);
    luaL_addvalue(&b);
    for (int i = 0; names[i]; i++) {
        if (i) luaL_addstring(&b, ", ");
        luaL_addstring(&b, names[i]);
    }
    luaL_addchar(&b, ')');
    const char *near = kn_lua_nearest(word, names);
    if (near) {
        lua_pushfstring(L, "; did you mean '%s'?", near);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
}

int kn_lua_unknown(lua_State *L, const char *what, const char *noun, const char *word, const char *const *names)
{
    kn_lua_where(L);
    lua_pushfstring(L, "%s%s", what ? what : "", what && what[0] ? ": " : "");
    kn_lua_push_unknown(L, noun, word, names);
    lua_concat(L, 3);
    return lua_error(L);
}

/* Raise "WHAT: MESSAGE" at the user's line. */
static int fail_at_user(lua_State *L, const char *what, const char *message)
{
    kn_lua_where(L);
    lua_pushfstring(L, "%s%s%s", what ? what : "", what && what[0] ? ": " : "", message);
    lua_concat(L, 2);
    return lua_error(L);
}

bool kn_lua_check_options(lua_State *L, int idx, const char *what, const char *const *known)
{
    if (lua_isnoneornil(L, idx)) return false;
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        fail_at_user(L, what, lua_pushfstring(L, "options must be a table, got %s", luaL_typename(L, idx)));
    /* the unknown key that sorts first: the same message every run,
     * whatever order pairs() takes */
    const char *unknown = NULL;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) /* {"default"} for {mode = "default"} */
            fail_at_user(L, what,
                         lua_pushfstring(L, "options are named ({%s = ...}), got %s", known[0] ? known[0] : "name",
                                         lua_isinteger(L, -1) ? "a list entry" : "a key that is no name"));
        const char *key = lua_tostring(L, -1);
        bool found = false;
        for (int i = 0; known[i] && !found; i++) found = strcmp(key, known[i]) == 0;
        if (!found && (!unknown || strcmp(key, unknown) < 0)) unknown = key; /* the table keeps it alive */
    }
    if (unknown) kn_lua_unknown(L, what, "option", unknown, known);
    return true;
}

int kn_lua_check_name(lua_State *L, int idx, const char *what, const char *noun, const char *const *names)
{
    if (lua_type(L, idx) != LUA_TSTRING) {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        lua_pushfstring(L, "%s must be a string, one of ", noun);
        luaL_addvalue(&b);
        for (int i = 0; names[i]; i++) {
            if (i) luaL_addstring(&b, ", ");
            luaL_addstring(&b, names[i]);
        }
        lua_pushfstring(L, "; got %s", luaL_typename(L, idx));
        luaL_addvalue(&b);
        luaL_pushresult(&b);
        return fail_at_user(L, what, lua_tostring(L, -1));
    }
    const char *word = lua_tostring(L, idx);
    for (int i = 0; names[i]; i++)
        if (strcmp(word, names[i]) == 0) return i;
    return kn_lua_unknown(L, what, noun, word, names);
}

void kn_lua_parse_dtype(lua_State *L, int idx, const char *what, kn_dtype *dt)
{
    if (lua_type(L, idx) != LUA_TSTRING)
        fail_at_user(L, what,
                     lua_pushfstring(L, "dtype must be a string such as \"f32\", got %s", luaL_typename(L, idx)));
    const char *name = lua_tostring(L, idx);
    if (kn_dtype_parse(name, dt) == KN_OK) return;
    const char *names[KN_DTYPE_COUNT + 1];
    for (int i = 0; i < KN_DTYPE_COUNT; i++) names[i] = kn_dtype_name((kn_dtype)i);
    names[KN_DTYPE_COUNT] = NULL;
    const char *near = kn_lua_nearest(name, names);
    kn_lua_where(L);
    lua_pushstring(L, kn_last_error());
    if (near) lua_pushfstring(L, "; did you mean '%s'?", near);
    else lua_pushliteral(L, "");
    lua_concat(L, 3);
    lua_error(L);
}

void kn_lua_parse_device(lua_State *L, int idx, const char *what, kn_device *dev)
{
    if (lua_type(L, idx) != LUA_TSTRING)
        fail_at_user(L, what,
                     lua_pushfstring(L, "device must be a string such as \"cpu\", got %s", luaL_typename(L, idx)));
    const char *name = lua_tostring(L, idx);
    if (kn_device_parse(name, dev) == KN_OK) return;
    static const char *const kinds[] = {"cpu", "cuda", NULL};
    /* the kind before any ":N": "cdua:1" is near cuda:1 as "cdua" is cuda;
     * in "cuda:x" the kind is right and the number is what is wrong */
    char kind[NAME_CMP_MAX + 1];
    snprintf(kind, sizeof kind, "%.*s", (int)strcspn(name, ":"), name);
    const char *near = kn_lua_nearest(kind, kinds);
    if (near && strcmp(near, kind) == 0) near = NULL;
    kn_lua_where(L);
    lua_pushstring(L, kn_last_error());
    if (near) lua_pushfstring(L, "; did you mean '%s%s'?", near, name + strlen(kind));
    else lua_pushliteral(L, "");
    lua_concat(L, 3);
    lua_error(L);
}

/* ---- the same checker for kiln's Lua files ------------------------------ */

/* The strings of the list at idx as a NULL-ended array, kept in a userdata
 * pushed on the stack (the list holds the strings, so they live as long). */
static const char **names_arg(lua_State *L, int idx, const char *fname)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    int64_t n = kn_lua_list_len(L, idx, 4096, fname);
    const char **names = lua_newuserdatauv(L, sizeof *names * (size_t)(n + 1), 0);
    for (int64_t i = 0; i < n; i++) {
        if (lua_rawgeti(L, idx, i + 1) != LUA_TSTRING) luaL_error(L, "%s: the names must be strings", fname);
        names[i] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    names[n] = NULL;
    return names;
}

/* kiln._check_options(opts, what, {known keys}): opts, or a new empty
 * table for nil; raises as kn_lua_check_options does. */
static int l_check_options(lua_State *L)
{
    const char *what = luaL_checkstring(L, 2);
    const char **known = names_arg(L, 3, "kiln._check_options");
    if (!kn_lua_check_options(L, 1, what, known)) lua_newtable(L);
    else lua_pushvalue(L, 1);
    return 1;
}

/* kiln._check_name(value, what, noun, {names}): value, when it is one of
 * names; raises as kn_lua_check_name does. */
static int l_check_name(lua_State *L)
{
    const char *what = luaL_checkstring(L, 2);
    const char *noun = luaL_checkstring(L, 3);
    const char **names = names_arg(L, 4, "kiln._check_name");
    kn_lua_check_name(L, 1, what, noun, names);
    lua_pushvalue(L, 1);
    return 1;
}

/* kiln._did_you_mean(word, {names}): the name word is a likely typo of, or nil. */
static int l_did_you_mean(lua_State *L)
{
    const char *word = luaL_checkstring(L, 1);
    const char *near = kn_lua_nearest(word, names_arg(L, 2, "kiln._did_you_mean"));
    if (near) lua_pushstring(L, near);
    else lua_pushnil(L);
    return 1;
}

/* kiln._unknown_message(noun, word, {names}): "unknown NOUN 'word' (known:
 * ...); did you mean 'x'?", for messages raised some other way (the REPL's
 * usage errors). */
static int l_unknown_message(lua_State *L)
{
    const char *noun = luaL_checkstring(L, 1);
    const char *word = luaL_checkstring(L, 2);
    kn_lua_push_unknown(L, noun, word, names_arg(L, 3, "kiln._unknown_message"));
    return 1;
}

void kn_lua_open_util(lua_State *L, int kiln)
{
    static const luaL_Reg fns[] = {{"_check_options", l_check_options},
                                   {"_check_name", l_check_name},
                                   {"_did_you_mean", l_did_you_mean},
                                   {"_unknown_message", l_unknown_message},
                                   {NULL, NULL}};
    for (const luaL_Reg *f = fns; f->name; f++) {
        lua_pushcfunction(L, f->func);
        lua_setfield(L, kiln, f->name);
    }
}

/* ---- arguments --------------------------------------------------------- */

int64_t kn_lua_list_len(lua_State *L, int idx, int64_t max, const char *what)
{
    lua_Integer n = luaL_len(L, idx); /* raises if __len gives a non-integer */
    if (n < 0 || n > max)
        return luaL_error(L, "%s: list length must be in 0..%I, got %I (from its __len)", what,
                          (lua_Integer)max, n);
    return n;
}

int64_t kn_lua_int_in(lua_State *L, int idx, int64_t lo, int64_t hi, const char *what)
{
    int isnum;
    lua_Integer v = lua_tointegerx(L, idx, &isnum);
    if (!isnum) {
        if (lua_type(L, idx) == LUA_TNUMBER)
            return luaL_error(L, "%s: expected an integer, got %f", what, lua_tonumber(L, idx));
        return luaL_error(L, "%s: expected an integer, got %s", what, luaL_typename(L, idx));
    }
    if (v < lo || v > hi)
        return luaL_error(L, "%s: expected an integer in %I..%I, got %I", what, (lua_Integer)lo,
                          (lua_Integer)hi, v);
    return v;
}

int kn_lua_dim(lua_State *L, int idx, const char *what)
{
    lua_Integer d = luaL_checkinteger(L, idx);
    if (d == 0)
        return luaL_error(L, "%s: dim 0 is not a dim: dims are 1-based (1 is the first, -1 the last)",
                          what);
    /* the message shows the value as the user wrote it: a cast first
     * would turn 2^40 into 0 */
    if (d > 64 || d < -64) /* small enough dims go on to core, which names the tensor's ndim */
        return luaL_error(L, "%s: dim %I out of range (a tensor has at most %d dims)", what,
                          (LUAI_UACINT)d, KN_MAX_DIMS);
    return (int)(d > 0 ? d - 1 : d); /* core normalizes negatives */
}

int kn_lua_shape(lua_State *L, int idx, int64_t *shape, const char *what)
{
    int n = 0;
    if (lua_istable(L, idx)) {
        char list_what[96];
        snprintf(list_what, sizeof list_what, "%s: shape", what);
        n = (int)kn_lua_list_len(L, idx, KN_MAX_DIMS, list_what);
        for (int i = 0; i < n; i++) {
            lua_geti(L, idx, i + 1);
            int isnum;
            lua_Integer v = lua_tointegerx(L, -1, &isnum);
            if (!isnum)
                return luaL_error(L, "%s: shape entry %d must be an integer, got %s", what, i + 1,
                                  luaL_typename(L, -1));
            shape[i] = v;
            lua_pop(L, 1);
        }
        return n;
    }
    /* varargs: f(2, 3, 4) */
    int top = lua_gettop(L);
    for (int i = idx; i <= top && lua_type(L, i) == LUA_TNUMBER; i++) {
        if (n >= KN_MAX_DIMS)
            return luaL_error(L, "%s: a shape has at most %d dims", what, KN_MAX_DIMS);
        int isnum;
        lua_Integer v = lua_tointegerx(L, i, &isnum);
        if (!isnum) return luaL_error(L, "%s: shape entry %d must be an integer", what, n + 1);
        shape[n++] = v;
    }
    if (n == 0 && !lua_isnoneornil(L, idx))
        return luaL_error(L, "%s: shape expected (a table like {2, 3}), got %s", what,
                          luaL_typename(L, idx));
    return n;
}

const char *const KN_LUA_TENSOR_OPTS[] = {"dtype", "device", NULL};
const char *const KN_LUA_CREATE_OPTS[] = {"dtype", "device", "requires_grad", NULL};
const char *const KN_LUA_RANDOM_OPTS[] = {"dtype", "device", "seed", "requires_grad", NULL};

/* Options table at idx (or nil): dtype, device, seed, and no key outside
 * `known`. */
void kn_lua_opts(lua_State *L, int idx, const char *what, const char *const *known, kn_dtype *dt,
                 kn_device *dev, int64_t *seed, int *has_seed)
{
    if (!kn_lua_check_options(L, idx, what, known)) return;
    if (lua_getfield(L, idx, "dtype") != LUA_TNIL) kn_lua_parse_dtype(L, -1, what, dt);
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "device") != LUA_TNIL) kn_lua_parse_device(L, -1, what, dev);
    lua_pop(L, 1);
    if (seed && lua_getfield(L, idx, "seed") != LUA_TNIL) {
        int isnum;
        *seed = lua_tointegerx(L, -1, &isnum);
        if (!isnum) luaL_error(L, "seed must be an integer, got %s", luaL_typename(L, -1));
        *has_seed = 1;
    }
    if (seed) lua_pop(L, 1);
}

kn_device kn_lua_default_device(void)
{
    /* docs/lua-api.md: cuda when a GPU is present, else cpu. Process-wide
     * on purpose: it is a fact about the machine, the same for every state. */
    static int cached = -1;
    if (cached < 0) cached = kn_backend_get(KN_CUDA) ? KN_CUDA : KN_CPU;
    return (kn_device)cached;
}
