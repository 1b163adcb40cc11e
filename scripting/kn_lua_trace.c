/* kn_lua_trace: the Lua side of capture (see kn_lua_trace.h). This file
 * feeds core/capture/kn_capture with what only Lua knows: the user's source
 * lines and stacks, argument names (debug info), parameter names (the
 * module's named_parameters) and the names of baked-in numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kn_lua_state.h"
#include "kn_lua_tensor_ud.h"
#include "kn_lua_trace.h"
#include "kn_lua_util.h"

kn_capture *kn_lua_active_capture(lua_State *L)
{
    return kn_lua_state_get(L)->cap;
}

/* ---- where the user is ------------------------------------------------- */

/* The name of the function running at this level, for the user stack. */
static void frame_name(lua_State *L, lua_Debug *ar, int level, char *buf, size_t size)
{
    buf[0] = 0;
    if (ar->name) {
        snprintf(buf, size, "%s", ar->name);
        return;
    }
    if (strcmp(ar->what, "main") == 0) return;
    /* called from C: the compiled function itself gets the name kiln.compile
     * gave it; others are named as Lua does, <file:line> */
    kn_capture *cap = kn_lua_state_get(L)->cap;
    if (cap && lua_getstack(L, level, ar) && lua_getinfo(L, "fS", ar)) {
        lua_getfield(L, LUA_REGISTRYINDEX, "kiln.compiling");
        bool is_compiled = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
        if (is_compiled) {
            snprintf(buf, size, "%s", cap->cm->id.name);
            return;
        }
    }
    snprintf(buf, size, "<%s:%d>", ar->short_src, ar->linedefined);
}

static void fill_break(lua_State *L, kn_break *b, const char *category, const char *reason,
                       const char *hint)
{
    memset(b, 0, sizeof *b);
    snprintf(b->category, sizeof b->category, "%s", category);
    snprintf(b->reason, sizeof b->reason, "%s", reason);
    snprintf(b->hint, sizeof b->hint, "%s", hint);
    lua_Debug ar;
    bool tail = false;
    const char *last = kn_lua_state_get(L)->last_user_line;
    for (int level = 1; lua_getstack(L, level, &ar) && b->n_frames < KN_MAX_FRAMES; level++) {
        lua_getinfo(L, "Slnt", &ar);
        if (!kn_lua_user_frame(&ar)) {
            tail = tail || ar.istailcall;
            continue;
        }
        if (tail && b->n_frames == 0 && last[0]) {
            /* the user's frame that tail-called into kiln's Lua is gone
             * from the stack: its line as the trace saw it last */
            snprintf(b->frame_where[b->n_frames++], sizeof b->frame_where[0], "%.*s",
                     (int)sizeof b->frame_where[0] - 1, last);
            if (b->n_frames >= KN_MAX_FRAMES) break;
        }
        tail = false;
        int i = b->n_frames++;
        snprintf(b->frame_where[i], sizeof b->frame_where[i], "%s:%d", ar.short_src, ar.currentline);
        frame_name(L, &ar, level, b->frame_fn[i], sizeof b->frame_fn[i]);
    }
    const char *override = kn_lua_state_get(L)->where_override;
    snprintf(b->where, sizeof b->where, "%s", override[0] ? override : b->n_frames ? b->frame_where[0] : "?");
}

void kn_lua_trace_flush_log(kn_compiled *cm)
{
    if (cm->log.len) {
        fputs(cm->log.text, stderr);
        fflush(stderr);
    }
    free(cm->log.text);
    cm->log.text = NULL;
    cm->log.len = 0;
}

/* Record a break and run what was captured; raises on fullgraph. */
void kn_lua_graph_break(lua_State *L, const char *category, const char *reason, const char *hint)
{
    kn_capture *cap = kn_lua_state_get(L)->cap;
    if (!cap) return;
    kn_break b;
    fill_break(L, &b, category, reason, hint);
    /* Which traced values are still referenced decides the graph's outputs
     * and their numbers ("graph K output N"): collect garbage first so that
     * does not depend on when the collector last ran. */
    lua_gc(L, LUA_GCCOLLECT);
    kn_status st = kn_capture_break(cap, &b);
    kn_lua_trace_flush_log(cap->cm);
    if (st != KN_OK) kn_lua_fail(L, st);
}

/* ---- names ------------------------------------------------------------- */

/* Does the value on the stack top match what a name search looks for? */
typedef bool (*kn_name_match)(lua_State *L, const void *want);

/* Name, into buf ("" if none), the first local (then upvalue) of the
 * innermost user function whose value matches. */
static void find_name_by(lua_State *L, kn_name_match match, const void *want, char *buf, size_t size)
{
    buf[0] = 0;
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "Sl", &ar);
        if (!kn_lua_user_frame(&ar)) continue;
        const char *name;
        for (int i = 1; (name = lua_getlocal(L, &ar, i)) != NULL; i++) {
            bool hit = name[0] != '(' && match(L, want);
            lua_pop(L, 1);
            if (hit) {
                snprintf(buf, size, "%s", name);
                return;
            }
        }
        lua_getinfo(L, "f", &ar);
        for (int i = 1; (name = lua_getupvalue(L, -1, i)) != NULL; i++) {
            bool hit = name[0] && match(L, want);
            lua_pop(L, 1);
            if (hit) {
                lua_pop(L, 1);
                snprintf(buf, size, "%s", name);
                return;
            }
        }
        lua_pop(L, 1);
        return; /* only the innermost user function */
    }
}

static bool same_value(lua_State *L, const void *want)
{
    return lua_rawequal(L, -1, *(const int *)want);
}

void kn_lua_trace_find_name(lua_State *L, int idx, char *buf, size_t size)
{
    int abs = lua_absindex(L, idx);
    find_name_by(L, same_value, &abs, buf, size);
}

/* The tensor held by the userdata at idx (placeholder or value), or NULL. */
static kn_tensor *raw_tensor(lua_State *L, int idx)
{
    kn_tensor **ud = luaL_testudata(L, idx, KN_TENSOR_MT);
    return ud ? *ud : NULL;
}

static bool holds_tensor(lua_State *L, const void *want)
{
    kn_tensor *u = raw_tensor(L, -1);
    return u && (u == want || (u->lazy && u->lazy->value == want));
}

/* Like find_name, for a tensor: a local or upvalue holding t (or a
 * placeholder that stands for it). */
static void find_tensor_name(lua_State *L, const kn_tensor *t, char *buf, size_t size)
{
    find_name_by(L, holds_tensor, t, buf, size);
}

/* The parameter-name map of the call in progress (kn_lua_state's
 * param_map): a table from tensor id to dotted name, built from the module
 * at each traced call. */
static const char *param_name(lua_State *L, const kn_tensor *t)
{
    int map = kn_lua_state_get(L)->param_map;
    if (map == LUA_NOREF) return NULL;
    lua_rawgeti(L, LUA_REGISTRYINDEX, map);
    lua_rawgeti(L, -1, (lua_Integer)t->id);
    const char *name = lua_tostring(L, -1); /* kept alive by the map */
    lua_pop(L, 2);
    return name;
}

/* A placeholder for tensor t, naming it: a module parameter by its dotted
 * name, else the user's variable that holds it. */
static kn_tensor *capture_input(lua_State *L, kn_capture *cap, kn_tensor *t, const char *where)
{
    char name[KN_NAME_MAX];
    kn_input_kind kind = KN_IN_TENSOR;
    const char *pn = t->lazy ? NULL : param_name(L, t);
    if (pn) {
        snprintf(name, sizeof name, "%s", pn);
        /* a function's modules are guarded as any tensor it reads: by
         * identity, found again through its upvalues by a replay */
        if (kn_lua_state_get(L)->param_map_is_module) kind = KN_IN_PARAM;
    } else {
        find_tensor_name(L, t, name, sizeof name);
        if (!name[0]) snprintf(name, sizeof name, "tensor at %.80s", where);
    }
    kn_tensor *p;
    kn_status st = kn_capture_input(cap, t, kind, name, where, &p);
    if (st != KN_OK) kn_lua_fail(L, st);
    kn_lua_pushtensor(L, p); /* Lua owns it from here */
    return p;
}

/* ---- running ops ------------------------------------------------------- */

/* kn_exec.run: eagerly with the state's settings (kiln.config writes them
 * as it is assigned), or into the capture, inputs named as they enter. */
static kn_status exec_run(kn_exec *base, kn_opcall *c, kn_device dev)
{
    lua_State *L = ((kn_lua_exec *)base)->L;
    kn_lua_state *s = kn_lua_state_get(L);
    kn_capture *cap = s->cap;
    if (!cap) {
        /* a placeholder whose call ended stands for its value: a backward
         * outside a compiled call reads the values its graph kept */
        for (int i = 0; i < c->n_in; i++)
            if (c->in[i] && c->in[i]->lazy && c->in[i]->lazy->value) c->in[i] = c->in[i]->lazy->value;
        c->settings = &s->settings;
        return kn_op_eager(c, dev);
    }
    char where[KN_WHERE_MAX];
    kn_lua_where_str(L, where, sizeof where);
    /* an op after a backward with grad mode off is the update (an optimizer's step) */
    cap->part = cap->in_backward                             ? KN_PART_BACKWARD
                : cap->call_backwards && !s->grad.enabled ? KN_PART_UPDATE
                                                          : KN_PART_FORWARD;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i] && kn_capture_needs_input(cap, c->in[i]))
            c->in[i] = capture_input(L, cap, c->in[i], where);
    return kn_capture_op(cap, c, where);
}

/* kn_exec.write: backward accumulating into an existing .grad while it
 * traces (kn_backward.c's commit_leaves) */
static kn_status exec_write(kn_exec *base, kn_tensor *dst, kn_tensor *src)
{
    kn_capture *cap = kn_lua_state_get(((kn_lua_exec *)base)->L)->cap;
    if (!cap) return kn_error(KN_ERR_ARG, "an in-place write outside a capture (a kiln bug)");
    return kn_capture_write(cap, dst, src);
}

static void exec_where(kn_exec *base, char *buf, size_t size)
{
    kn_lua_where_str(((kn_lua_exec *)base)->L, buf, size);
}

/* kn_exec.set_where: through the state's where_override, which the
 * capture and the messages read (as an imported ONNX node's name) */
static void exec_set_where(kn_exec *base, const char *where)
{
    kn_lua_exec *ex = (kn_lua_exec *)base;
    kn_lua_state *s = kn_lua_state_get(ex->L);
    if (where && where[0]) {
        if (!ex->overriding) snprintf(ex->saved_where, sizeof ex->saved_where, "%s", s->where_override);
        ex->overriding = true;
        snprintf(s->where_override, sizeof s->where_override, "%s", where);
    } else if (ex->overriding) {
        snprintf(s->where_override, sizeof s->where_override, "%s", ex->saved_where);
        ex->overriding = false;
    }
}

void kn_lua_exec_init(kn_lua_exec *ex, lua_State *L)
{
    memset(ex, 0, sizeof *ex);
    ex->base.run = exec_run;
    ex->base.where = exec_where;
    ex->base.set_where = exec_set_where;
    ex->base.write = exec_write;
    ex->base.traces = kn_lua_state_get(L)->cap != NULL;
    ex->L = L;
}

/* What kiln.autocast does to op's float inputs, as torch.autocast's lists:
 * 1: the GEMM-like ops take f32 inputs in the autocast dtype (tensor
 * cores); 2: the ops whose accuracy needs range, softmax, layer_norm and
 * the reductions, take half inputs in f32; 0: inputs as they are (other
 * ops promote mixed dtypes as always). batch_norm is not on the f32 list,
 * as in torch.autocast: a half x is normalized with the f32 statistics
 * (the reductions' f32) into a half result. Cast to f32, its output and
 * what the backward saves of it were f32 too: a bf16 convnet training step
 * cast each BatchNorm's input up and its output back down (36 us for the
 * first layer on the H200) and held twice the bytes. */
static int autocast_list(int op)
{
    switch (op) {
    case KN_OP_MATMUL:
    case KN_OP_CONV2D:
    case KN_OP_ATTENTION: return 1;
    case KN_OP_SOFTMAX:
    case KN_OP_LOG_SOFTMAX:
    case KN_OP_LAYER_NORM:
    case KN_OP_SUM:
    case KN_OP_MEAN:
    case KN_OP_VAR: return 2;
    default: return 0;
    }
}

/* Cast c's inputs as kiln.autocast says (each cast an op of its own, on the
 * tape and in a traced graph, so gradients come back in the input's
 * dtype); the casts made go to made[] for the caller to release once the
 * op ran. */
static kn_status autocast_inputs(kn_lua_state *s, kn_lua_exec *ex, kn_opcall *c, kn_device dev, kn_tensor **made,
                                 int *n_made)
{
    *n_made = 0;
    int list = s->autocast_on ? autocast_list(c->op) : 0;
    if (!list) return KN_OK;
    kn_dtype want = list == 1 ? s->autocast_dtype : KN_F32;
    for (int i = 0; i < c->n_in; i++) {
        kn_tensor *t = c->in[i];
        if (!t || t->dtype == want) continue;
        bool half = t->dtype == KN_BF16 || t->dtype == KN_F16;
        if (list == 1 ? t->dtype != KN_F32 : !half) continue; /* f64 and integers stay */
        kn_opcall cc;
        kn_opcall_init(&cc, KN_OP_CAST);
        cc.n_in = 1;
        cc.in[0] = t;
        cc.a.dtype = want;
        cc.settings = c->settings;
        KN_TRY(kn_autograd_run(&s->grad, &ex->base, &cc, dev));
        made[(*n_made)++] = cc.out[0];
        c->in[i] = cc.out[0];
    }
    return KN_OK;
}

int kn_lua_run(lua_State *L, kn_opcall *c, kn_device dev)
{
    kn_lua_exec ex;
    kn_lua_exec_init(&ex, L);
    kn_lua_state *s = kn_lua_state_get(L);
    kn_tensor *made[KN_MAX_INPUTS];
    int n_made = 0;
    kn_status st = autocast_inputs(s, &ex, c, dev, made, &n_made);
    if (st == KN_OK) st = kn_autograd_run(&s->grad, &ex.base, c, dev);
    for (int i = 0; i < n_made; i++) kn_tensor_release(made[i]); /* the op and the tape hold what they need */
    if (st != KN_OK) return kn_lua_fail(L, st);
    for (int i = 0; i < c->n_out; i++) kn_lua_pushtensor(L, c->out[i]);
    return c->n_out;
}

/* x:copy_(src) inside a compiled function: the graph computes src and
 * writes it into x once it ran (kn_capture_write); a source of another
 * device or dtype than x's is refused above, as eagerly. */
int kn_lua_traced_copy(lua_State *L, kn_capture *cap, kn_tensor *dst, kn_tensor *src)
{
    if (kn_tensor_device(src) != kn_tensor_device(dst))
        return luaL_error(L, "copy_: inside a compiled function the source must be on the destination's device "
                             "(%s), got %s", kn_device_name(kn_tensor_device(dst)),
                          kn_device_name(kn_tensor_device(src)));
    kn_tensor *s = src;
    if (kn_capture_needs_input(cap, src)) {
        /* a tensor from outside the graph: an input of it, as an op would take it */
        kn_lua_exec ex;
        kn_lua_exec_init(&ex, L);
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_CONTIGUOUS);
        c.n_in = 1;
        c.in[0] = src;
        kn_status st = ex.base.run(&ex.base, &c, kn_tensor_device(src));
        if (st != KN_OK) return kn_lua_fail(L, st);
        kn_lua_pushtensor(L, c.out[0]); /* Lua owns it */
        s = c.out[0];
    }
    kn_status st = kn_capture_write(cap, dst, s);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_settop(L, 1);
    return 1;
}

/* Search the table at t for a string key whose value is rawequal to the
 * value at want: "prefix.key" (or "key" without a prefix) into buf; one
 * level deeper into its tables when depth > 0, skipping loaded modules
 * (kiln, math, ...), which are not the user's settings. */
static bool search_fields(lua_State *L, int t, const char *prefix, int want, int depth, char *buf, size_t size)
{
    if (!lua_checkstack(L, 8)) return false;
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    int loaded = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, t)) {
        if (lua_type(L, -2) == LUA_TSTRING) {
            const char *key = lua_tostring(L, -2);
            bool hit = lua_rawequal(L, -1, want);
            if (hit) {
                snprintf(buf, size, "%s%s%s", prefix, prefix[0] ? "." : "", key);
                lua_pop(L, 3);
                return true;
            }
            if (depth > 0 && lua_istable(L, -1) && lua_getfield(L, loaded, key) >= 0) {
                bool module = lua_rawequal(L, -1, -2);
                lua_pop(L, 1);
                char sub[KN_NAME_MAX];
                snprintf(sub, sizeof sub, "%s%s%s", prefix, prefix[0] ? "." : "", key);
                if (!module && search_fields(L, lua_gettop(L), sub, want, depth - 1, buf, size)) {
                    lua_pop(L, 3);
                    return true;
                }
            }
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return false;
}

/* The name of a number no local or upvalue holds, as the innermost user
 * function reads it: a field of one of its upvalue tables ("cfg.scale"),
 * else a global ("SCALE") or a global table's field ("CFG.scale"). */
static void find_field_name(lua_State *L, int want, char *buf, size_t size)
{
    buf[0] = 0;
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "Sl", &ar);
        if (!kn_lua_user_frame(&ar)) continue;
        lua_getinfo(L, "f", &ar);
        int fn = lua_gettop(L);
        int env = 0;
        const char *name;
        for (int i = 1; !buf[0] && (name = lua_getupvalue(L, fn, i)) != NULL; i++) {
            if (strcmp(name, "_ENV") == 0 && lua_istable(L, -1)) {
                env = i;
            } else if (lua_istable(L, -1)) {
                char prefix[KN_NAME_MAX];
                snprintf(prefix, sizeof prefix, "%s", name);
                search_fields(L, lua_gettop(L), prefix, want, 0, buf, size);
            }
            lua_pop(L, 1);
        }
        /* a global itself before a global table's field */
        for (int depth = 0; depth <= 1 && !buf[0] && env && lua_getupvalue(L, fn, env); depth++) {
            search_fields(L, lua_gettop(L), "", want, depth, buf, size);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        return; /* only the innermost user function */
    }
}

kn_tensor *kn_lua_capture_number(lua_State *L, int idx, kn_dtype dt, const kn_tensor *like)
{
    kn_capture *cap = kn_lua_state_get(L)->cap;
    char name[KN_NAME_MAX], where[KN_WHERE_MAX];
    kn_lua_trace_find_name(L, idx, name, sizeof name);
    if (!name[0]) find_field_name(L, lua_absindex(L, idx), name, sizeof name);
    kn_lua_where_str(L, where, sizeof where);
    double v = lua_isboolean(L, idx) ? lua_toboolean(L, idx) : lua_tonumber(L, idx);
    kn_tensor *p;
    kn_device dev = like ? kn_tensor_device(like) : kn_lua_default_device();
    kn_status st = kn_capture_number(cap, v, dt, dev, name, where, &p);
    if (st != KN_OK) kn_lua_fail(L, st);
    kn_lua_pushtensor(L, p);
    return p;
}

kn_tensor *kn_lua_need_value(lua_State *L, kn_tensor *t, const char *method)
{
    kn_capture *wcap = kn_lua_state_get(L)->cap;
    if (wcap && kn_capture_pending_write(wcap, t)) {
        /* its data changes only when the graph runs: run it first */
        char reason[256];
        snprintf(reason, sizeof reason, "%s%s reads a tensor written in place (copy_) earlier in this graph",
                 strchr(method, '.') ? "" : "Tensor.", method);
        kn_lua_graph_break(L, "data-dependent control flow", reason,
                           "read the tensor after the compiled call, or before the write");
    }
    if (!t->lazy) return t;
    if (!t->lazy->value) {
        /* a method name ("item") is the tensor's; a dotted one ("kiln.save_safetensors") is whole */
        const char *owner = strchr(method, '.') ? "" : "Tensor.";
        kn_capture *cap = kn_lua_state_get(L)->cap;
        if (!cap || t->lazy->cap != cap)
            luaL_error(L, "%s%s: this traced tensor has no value (its compiled call failed)", owner, method);
        char reason[256];
        snprintf(reason, sizeof reason, "%s%s needs the value of a traced tensor", owner, method);
        const char *hint = strcmp(method, "__lt") == 0 || strcmp(method, "__le") == 0
                               ? "keep the branch inside the graph with kiln.where, or move it out of the compiled function"
                               : "keep the computation in tensor ops, or move the read out of the compiled function";
        kn_lua_graph_break(L, "data-dependent control flow", reason, hint);
    }
    return t->lazy->value;
}

/* ---- purity: which calls a replay may skip ------------------------------ */

/* While a trace runs, a call hook watches every C function called: kiln's
 * ops and Lua's pure library functions keep the trace replayable; anything
 * else (print, io, os, math.random, kiln.clock, ...) may depend on or change
 * the world, so such a function is traced again on every call. */
void kn_lua_mark_impure(lua_State *L, const char *what)
{
    kn_lua_state *s = kn_lua_state_get(L);
    if (s->cap && !s->impure) {
        s->impure = true;
        snprintf(s->impure_what, sizeof s->impure_what, "%s", what);
    }
}

/* The trace's debug hook: at each new line of the user's Lua, that line
 * (kn_lua_state.last_user_line); at each call, whether the trace called a C
 * function a replay cannot repeat. */
static void purity_hook(lua_State *L, lua_Debug *ar)
{
    if (ar->event == LUA_HOOKLINE) {
        if (lua_getinfo(L, "S", ar) && kn_lua_user_frame(ar)) {
            kn_lua_state *s = kn_lua_state_get(L);
            snprintf(s->last_user_line, sizeof s->last_user_line, "%s:%d", ar->short_src, ar->currentline);
        }
        return;
    }
    if (kn_lua_state_get(L)->impure || !lua_getinfo(L, "Sf", ar)) return;
    if (strcmp(ar->what, "C") != 0) {
        lua_pop(L, 1);
        return;
    }
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.pure");
    lua_pushvalue(L, -2);
    bool pure = lua_rawget(L, -2) != LUA_TNIL;
    lua_pop(L, 3);
    if (!pure) {
        lua_getinfo(L, "n", ar);
        kn_lua_mark_impure(L, ar->name ? ar->name : "a C function");
    }
}

/* Add every C function of the table at idx to the pure set at set. */
static void add_pure_functions(lua_State *L, int set, int idx, const char *const *except)
{
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        bool skip = false;
        if (lua_type(L, -2) == LUA_TSTRING)
            for (const char *const *e = except; *e && !skip; e++) skip = strcmp(lua_tostring(L, -2), *e) == 0;
        if (!skip && lua_iscfunction(L, -1)) {
            lua_pushvalue(L, -1);
            lua_pushboolean(L, 1);
            lua_rawset(L, set);
        }
        lua_pop(L, 1);
    }
}

/* The set of C functions a replayable trace may call (built once). */
static void build_pure_set(lua_State *L)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, "kiln.pure") == LUA_TTABLE) {
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_newtable(L);
    int set = lua_gettop(L);
    static const char *const none[] = {NULL};
    static const char *const kiln_impure[] = {"clock", "manual_seed", "load_safetensors", "save_safetensors",
                                              "device_info", "eager", "graph_break", "log", "explain", "load", NULL};
    static const char *const math_impure[] = {"random", "randomseed", NULL};
    lua_getglobal(L, "kiln");
    if (lua_istable(L, -1)) {
        add_pure_functions(L, set, -1, kiln_impure);
        lua_getfield(L, -1, "Tensor");
        if (lua_istable(L, -1)) add_pure_functions(L, set, -1, none);
        lua_pop(L, 1);
        /* kiln.onnx: the interpreter names each node's ops (where) and asks
         * whether a value is traced at every node; without these a loaded
         * ONNX model traced again at every call (1.2-1.9 ms a call for the
         * transformer block on the H100, against 0.11 for the Lua model).
         * Reading files stays impure. */
        lua_getfield(L, -1, "onnx");
        if (lua_istable(L, -1)) {
            static const char *const onnx_pure[] = {"where", "is_placeholder", NULL};
            for (const char *const *p = onnx_pure; *p; p++) {
                lua_getfield(L, -1, *p);
                if (lua_iscfunction(L, -1)) {
                    lua_pushboolean(L, 1);
                    lua_rawset(L, set);
                } else {
                    lua_pop(L, 1);
                }
            }
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    luaL_getmetatable(L, KN_TENSOR_MT);
    add_pure_functions(L, set, -1, none);
    lua_pop(L, 1);
    static const char *const libs[] = {"math", "string", "table", "utf8", NULL};
    for (const char *const *lib = libs; *lib; lib++) {
        lua_getglobal(L, *lib);
        if (lua_istable(L, -1)) add_pure_functions(L, set, -1, strcmp(*lib, "math") == 0 ? math_impure : none);
        lua_pop(L, 1);
    }
    static const char *const base[] = {"select", "type", "ipairs", "pairs", "next", "rawget", "rawequal",
                                       "rawlen", "tostring", "tonumber", "getmetatable", "setmetatable",
                                       "assert", "error", "pcall", "xpcall", "unpack", NULL};
    for (const char *const *b = base; *b; b++) {
        lua_getglobal(L, *b);
        if (lua_iscfunction(L, -1)) {
            lua_pushboolean(L, 1);
            lua_rawset(L, -3);
        } else {
            lua_pop(L, 1);
        }
    }
    /* the pairs/ipairs iterator functions themselves */
    lua_getglobal(L, "ipairs");
    if (lua_isfunction(L, -1)) {
        lua_newtable(L);
        lua_call(L, 1, 1);
        lua_pushboolean(L, 1);
        lua_rawset(L, -3);
    } else {
        lua_pop(L, 1);
    }
    lua_setfield(L, LUA_REGISTRYINDEX, "kiln.pure");
}

/* ---- around a traced call ----------------------------------------------- */

/* Add the named parameters and buffers of the module at module_idx to the
 * map at map (tensor id -> name), each name after prefix ("" or "fc1."). */
static void map_module(lua_State *L, int map, int module_idx, const char *prefix)
{
    static const char *const lists[] = {"named_parameters", "named_buffers"};
    for (int li = 0; li < 2; li++) {
        if (lua_getfield(L, module_idx, lists[li]) != LUA_TFUNCTION) {
            lua_pop(L, 1);
            continue;
        }
        lua_pushvalue(L, module_idx);
        lua_call(L, 1, 3); /* iterator, state, control */
        for (;;) {
            lua_pushvalue(L, -3);
            lua_pushvalue(L, -3);
            lua_pushvalue(L, -3);
            lua_call(L, 2, 2);
            if (lua_isnil(L, -2)) {
                lua_pop(L, 2);
                break;
            }
            kn_tensor *t = kn_lua_totensor(L, -1);
            if (t && lua_type(L, -2) == LUA_TSTRING) {
                lua_rawgeti(L, map, (lua_Integer)t->id);
                bool named = !lua_isnil(L, -1); /* the first path found names it */
                lua_pop(L, 1);
                if (!named) {
                    lua_pushfstring(L, "%s%s", prefix, lua_tostring(L, -2));
                    lua_rawseti(L, map, (lua_Integer)t->id);
                }
            }
            lua_replace(L, -3); /* control = name */
            lua_pop(L, 1);
        }
        lua_pop(L, 3);
    }
}

/* Whether the value at idx is a kiln.nn module (its class says so). */
static bool is_module_value(lua_State *L, int idx)
{
    if (!lua_istable(L, idx) || !lua_getmetatable(L, idx)) return false;
    bool yes = lua_getfield(L, -1, "__kiln_module") == LUA_TBOOLEAN && lua_toboolean(L, -1);
    lua_pop(L, 2);
    return yes;
}

/* The modules a value named `name` holds: itself, or (a plain table of
 * modules: layers = {...}) its fields one level down, "layers.3.". */
static void map_named_value(lua_State *L, int map, int idx, const char *name, bool look_inside)
{
    idx = lua_absindex(L, idx);
    if (is_module_value(L, idx)) {
        lua_pushfstring(L, "%s.", name);
        map_module(L, map, idx, lua_tostring(L, -1));
        lua_pop(L, 1);
        return;
    }
    if (!look_inside || !lua_istable(L, idx)) return;
    if (lua_getmetatable(L, idx)) { /* a table with a class is not a plain list of modules */
        lua_pop(L, 1);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (is_module_value(L, -1) && (lua_type(L, -2) == LUA_TSTRING || lua_isinteger(L, -2))) {
            if (lua_isinteger(L, -2)) lua_pushfstring(L, "%s.%d.", name, (int)lua_tointeger(L, -2));
            else lua_pushfstring(L, "%s.%s.", name, lua_tostring(L, -2));
            map_module(L, map, lua_gettop(L) - 1, lua_tostring(L, -1));
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
}

/* The user's globals that are modules or tables of modules (not kiln's or
 * Lua's libraries). */
static void map_globals(lua_State *L, int map, int env)
{
    lua_pushnil(L);
    while (lua_next(L, env)) {
        if (lua_type(L, -2) == LUA_TSTRING && lua_istable(L, -1)) {
            const char *key = lua_tostring(L, -2);
            lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
            bool library = lua_getfield(L, -1, key) == LUA_TTABLE && lua_rawequal(L, -1, -3);
            lua_pop(L, 2);
            if (!library && strcmp(key, "kiln") != 0 && strcmp(key, "_G") != 0)
                map_named_value(L, map, -1, key, true);
        }
        lua_pop(L, 1);
    }
}

/* The parameter names of a compiled function: the modules its upvalues hold
 * (by the upvalue's name), and those of its globals. A module used inside
 * the function's own Lua helpers is found too when the helper is an
 * upvalue that holds it. */
static void map_function(lua_State *L, int map, int fn_idx)
{
    lua_Debug ar;
    lua_pushvalue(L, fn_idx);
    lua_getinfo(L, ">S", &ar);
    if (strcmp(ar.what, "C") == 0) return;
    for (int i = 1;; i++) {
        const char *uname = lua_getupvalue(L, fn_idx, i);
        if (!uname) break;
        if (strcmp(uname, "_ENV") == 0 && lua_istable(L, -1)) map_globals(L, map, lua_gettop(L));
        else if (uname[0]) map_named_value(L, map, -1, uname, true);
        lua_pop(L, 1);
    }
}

static bool module_training(lua_State *L, int idx)
{
    lua_getfield(L, idx, "training");
    bool on = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return on;
}

/* The value at idx, named name: a module in train mode, or a plain table
 * holding one (one level down); its name into what. */
static bool value_training(lua_State *L, int idx, const char *name, char *what, size_t size)
{
    idx = lua_absindex(L, idx);
    if (is_module_value(L, idx)) {
        if (!module_training(L, idx)) return false;
        snprintf(what, size, "%s", name);
        return true;
    }
    if (!lua_istable(L, idx)) return false;
    if (lua_getmetatable(L, idx)) { /* a table with a class is not a plain list of modules */
        lua_pop(L, 1);
        return false;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (is_module_value(L, -1) && module_training(L, lua_gettop(L)) &&
            (lua_type(L, -2) == LUA_TSTRING || lua_isinteger(L, -2))) {
            if (lua_isinteger(L, -2)) snprintf(what, size, "%s.%d", name, (int)lua_tointeger(L, -2));
            else snprintf(what, size, "%s.%s", name, lua_tostring(L, -2));
            lua_pop(L, 2);
            return true;
        }
        lua_pop(L, 1);
    }
    return false;
}

static bool globals_training(lua_State *L, int env, char *what, size_t size)
{
    lua_pushnil(L);
    while (lua_next(L, env)) {
        if (lua_type(L, -2) == LUA_TSTRING && lua_istable(L, -1)) {
            const char *key = lua_tostring(L, -2);
            lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
            bool library = lua_getfield(L, -1, key) == LUA_TTABLE && lua_rawequal(L, -1, -3);
            lua_pop(L, 2);
            if (!library && strcmp(key, "kiln") != 0 && strcmp(key, "_G") != 0 &&
                value_training(L, -1, key, what, size)) {
                lua_pop(L, 2);
                return true;
            }
        }
        lua_pop(L, 1);
    }
    return false;
}

bool kn_lua_trace_training(lua_State *L, int module_idx, int fn_idx, char *what, size_t size)
{
    what[0] = 0;
    if (module_idx) {
        bool on = module_training(L, lua_absindex(L, module_idx));
        if (on) snprintf(what, size, "the module");
        return on;
    }
    fn_idx = lua_absindex(L, fn_idx);
    if (!lua_isfunction(L, fn_idx) || lua_iscfunction(L, fn_idx)) return false;
    for (int i = 1;; i++) {
        const char *uname = lua_getupvalue(L, fn_idx, i);
        if (!uname) break;
        bool on = strcmp(uname, "_ENV") == 0 && lua_istable(L, -1) ? globals_training(L, lua_gettop(L), what, size)
                  : uname[0] ? value_training(L, -1, uname, what, size)
                             : false;
        lua_pop(L, 1);
        if (on) return true;
    }
    return false;
}

void kn_lua_trace_param_map(lua_State *L, int module_idx, int fn_idx)
{
    kn_lua_state *s = kn_lua_state_get(L);
    luaL_unref(L, LUA_REGISTRYINDEX, s->param_map);
    s->param_map = LUA_NOREF;
    s->param_map_is_module = module_idx != 0;
    lua_newtable(L);
    int map = lua_gettop(L);
    if (module_idx) map_module(L, map, lua_absindex(L, module_idx), "");
    else if (fn_idx) map_function(L, map, lua_absindex(L, fn_idx));
    s->param_map = luaL_ref(L, LUA_REGISTRYINDEX);
}

void kn_lua_trace_watch(lua_State *L, kn_lua_trace_hook *saved)
{
    build_pure_set(L);
    saved->hook = lua_gethook(L);
    saved->mask = lua_gethookmask(L);
    saved->count = lua_gethookcount(L);
    kn_lua_state_get(L)->impure = false;
    kn_lua_state_get(L)->last_user_line[0] = 0;
    if (!saved->hook) lua_sethook(L, purity_hook, LUA_MASKCALL | LUA_MASKLINE, 0);
    else kn_lua_mark_impure(L, "a debug hook was set"); /* cannot watch: do not replay */
}

void kn_lua_trace_unwatch(lua_State *L, const kn_lua_trace_hook *saved)
{
    kn_lua_state_get(L)->last_user_line[0] = 0; /* eager code has no line hook */
    if (!saved->hook) lua_sethook(L, saved->hook, saved->mask, saved->count);
}
