/* kn_lua_autograd: autograd's Lua binding (see kn_lua_autograd.h). The
 * tape, the rules and the backward pass are core/autograd; this file
 * turns Lua arguments into its calls, through the same executor the ops
 * use (kn_lua_exec), so backward's ops run as eager ops of this state. */
#include <string.h>

#include <lauxlib.h>

#include "kn_autograd.h"
#include "kn_capture.h"
#include "kn_lua_autograd.h"
#include "kn_lua_state.h"
#include "kn_lua_tensor_ud.h"
#include "kn_lua_trace.h"
#include "kn_lua_util.h"

#define KN_GRAD_LIST_MAX 4096 /* tensors one kiln.grad call takes */

static kn_autograd *grad_state(lua_State *L)
{
    return &kn_lua_state_get(L)->grad;
}

/* Run a backward pass (backward, kiln.grad) through the state's executor.
 * Inside a compiled function's trace its ops (the gradient rules) become
 * nodes of the graph, marked as its backward part: the forward, the
 * backward and what follows (an optimizer's step) make one joint graph.
 * The capture counts the passes; a direct replay of the call sets the
 * .grad the pass set from its graph's values (kn_lua_replay.c). */
static kn_status traced_backward(lua_State *L, const kn_backward_args *a)
{
    kn_capture *cap = kn_lua_active_capture(L);
    kn_lua_exec ex;
    kn_lua_exec_init(&ex, L);
    if (!cap) return kn_autograd_backward(grad_state(L), &ex.base, a);
    cap->call_backwards++;
    cap->in_backward = true; /* its ops are the backward part of the graph */
    kn_status st = kn_autograd_backward(grad_state(L), &ex.base, a);
    cap->in_backward = false;
    return st;
}

/* A .grad set by hand while a compiled call traces: the capture notes it,
 * so that a direct replay of a training step clears the same gradients
 * (zero_grad) and a call that assigns one is not replayed. */
static void note_grad_set(lua_State *L, kn_tensor *t, bool cleared, kn_status st)
{
    kn_capture *cap = kn_lua_active_capture(L);
    if (cap && st == KN_OK) kn_capture_note_grad_set(cap, t, cleared);
}

/* ---- properties -------------------------------------------------------- */

bool kn_lua_autograd_property(lua_State *L, const char *key)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    if (strcmp(key, "requires_grad") == 0) {
        lua_pushboolean(L, kn_autograd_requires_grad(t));
    } else if (strcmp(key, "grad") == 0) {
        kn_tensor *g = kn_autograd_grad(t);
        if (!g) {
            lua_pushnil(L);
        } else {
            kn_tensor_retain(g);
            kn_lua_pushtensor(L, g);
        }
    } else if (strcmp(key, "is_leaf") == 0) {
        lua_pushboolean(L, kn_autograd_fn_name(t) == NULL);
    } else if (strcmp(key, "grad_fn") == 0) {
        const char *fn = kn_autograd_fn_name(t);
        if (fn) lua_pushstring(L, fn);
        else lua_pushnil(L);
    } else {
        return false;
    }
    return true;
}

bool kn_lua_autograd_assign(lua_State *L, const char *key)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    kn_status st;
    if (strcmp(key, "requires_grad") == 0) {
        if (!lua_isboolean(L, 3))
            return luaL_error(L, "requires_grad: expected a boolean, got %s", luaL_typename(L, 3)), true;
        st = kn_autograd_set_requires_grad(t, lua_toboolean(L, 3));
    } else if (strcmp(key, "grad") == 0) {
        kn_tensor *g = lua_isnil(L, 3) ? NULL : kn_lua_totensor(L, 3);
        if (!g && !lua_isnil(L, 3))
            return luaL_error(L, "grad: expected a tensor or nil, got %s", luaL_typename(L, 3)), true;
        st = kn_autograd_set_grad(t, g);
        note_grad_set(L, t, g == NULL, st);
    } else {
        return false;
    }
    if (st != KN_OK) kn_lua_fail(L, st);
    return true;
}

void kn_lua_apply_requires_grad(lua_State *L, int opts_idx, const char *what)
{
    if (!lua_istable(L, opts_idx)) return;
    lua_getfield(L, opts_idx, "requires_grad");
    int on = lua_toboolean(L, -1), given = !lua_isnil(L, -1);
    if (given && !lua_isboolean(L, -1))
        luaL_error(L, "%s: requires_grad must be a boolean, got %s", what, luaL_typename(L, -1));
    lua_pop(L, 1);
    if (!on) return;
    kn_status st = kn_autograd_set_requires_grad(kn_lua_checktensor(L, -1), true);
    if (st != KN_OK) kn_lua_fail(L, st);
}

/* ---- tensor methods ---------------------------------------------------- */

/* x:requires_grad_([on = true]) -> x */
static int m_requires_grad_(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    bool on = lua_isnone(L, 2) ? true : lua_toboolean(L, 2);
    kn_status st = kn_autograd_set_requires_grad(t, on);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_settop(L, 1);
    return 1;
}

/* x:detach(): the same data, no history, not requiring grad */
static int m_detach(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1), *d;
    kn_status st = kn_tensor_alias(t, &d);
    if (st != KN_OK) return kn_lua_fail(L, st);
    kn_lua_pushtensor(L, d);
    return 1;
}

/* x:zero_grad(): forget x's gradient (x.grad becomes nil, as PyTorch's
 * set_to_none): the next backward sets it afresh */
static int m_zero_grad(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    kn_status st = kn_autograd_set_grad(t, NULL);
    note_grad_set(L, t, true, st);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_settop(L, 1);
    return 1;
}

static bool opt_bool(lua_State *L, int idx, const char *key)
{
    if (!lua_istable(L, idx)) return false;
    lua_getfield(L, idx, key);
    bool v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* y:backward([grad] [, {retain_graph = false}]) */
static int m_backward(lua_State *L)
{
    static const char *const keys[] = {"retain_graph", NULL};
    kn_tensor *t = kn_lua_checktensor(L, 1), *g = NULL;
    int opts = 3;
    if (lua_istable(L, 2) && !kn_lua_totensor(L, 2)) opts = 2;
    else if (!lua_isnoneornil(L, 2)) g = kn_lua_checktensor(L, 2);
    kn_lua_check_options(L, opts, "backward", keys);
    kn_backward_args a = {
        .what = "backward", .n_roots = 1, .roots = &t, .grads = &g, .retain_graph = opt_bool(L, opts, "retain_graph")};
    kn_status st = traced_backward(L, &a);
    if (st != KN_OK) return kn_lua_fail(L, st);
    return 0;
}

/* ---- kiln functions ---------------------------------------------------- */

/* A tensor or a list of tensors at idx into a new array (the tensors stay
 * referenced by the Lua values); *single tells which it was. */
static kn_tensor **tensor_list(lua_State *L, int idx, const char *what, int *n, bool *single)
{
    kn_tensor *one = kn_lua_totensor(L, idx);
    *single = one != NULL;
    int count = one ? 1 : (luaL_checktype(L, idx, LUA_TTABLE), (int)kn_lua_list_len(L, idx, KN_GRAD_LIST_MAX, what));
    kn_tensor **list = lua_newuserdatauv(L, sizeof *list * (size_t)(count + 1), 0); /* freed by Lua */
    for (int i = 0; i < count; i++) {
        if (one) {
            list[i] = one;
            continue;
        }
        lua_geti(L, idx, i + 1);
        list[i] = kn_lua_totensor(L, -1);
        if (!list[i]) luaL_error(L, "%s: entry %d is a %s, not a tensor", what, i + 1, luaL_typename(L, -1));
        lua_pop(L, 1); /* still referenced from the list */
    }
    *n = count;
    return list;
}

/* kiln.grad(outputs, inputs [, {grad_outputs =, retain_graph =, allow_unused =}]):
 * the gradients of the outputs with respect to the inputs (a tensor for a
 * tensor, a list for a list), leaving every .grad as it is. */
static int l_grad(lua_State *L)
{
    static const char *const keys[] = {"grad_outputs", "retain_graph", "allow_unused", NULL};
    lua_settop(L, 3);
    kn_lua_check_options(L, 3, "grad", keys);
    int n_out, n_in, n_g = 0;
    bool single_out, single_in, single_g;
    kn_tensor **outs = tensor_list(L, 1, "grad: outputs", &n_out, &single_out);
    kn_tensor **ins = tensor_list(L, 2, "grad: inputs", &n_in, &single_in);
    kn_tensor **gs = NULL;
    if (lua_istable(L, 3) && lua_getfield(L, 3, "grad_outputs") != LUA_TNIL) {
        gs = tensor_list(L, lua_gettop(L), "grad: grad_outputs", &n_g, &single_g);
        if (n_g != n_out)
            return luaL_error(L, "grad: %d grad_outputs for %d outputs (one per output)", n_g, n_out);
    }
    if (n_in == 0) return luaL_error(L, "grad: no inputs to differentiate with respect to");
    kn_tensor **res = lua_newuserdatauv(L, sizeof *res * (size_t)(n_in + 1), 0);
    memset(res, 0, sizeof *res * (size_t)(n_in + 1));
    kn_backward_args a = {.what = "grad",
                          .n_roots = n_out,
                          .roots = outs,
                          .grads = gs,
                          .retain_graph = opt_bool(L, 3, "retain_graph"),
                          .n_inputs = n_in,
                          .inputs = ins,
                          .results = res,
                          .allow_unused = opt_bool(L, 3, "allow_unused")};
    kn_status st = traced_backward(L, &a);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_createtable(L, n_in, 0);
    for (int i = 0; i < n_in; i++) {
        if (!res[i]) continue; /* allow_unused: a hole, nil */
        kn_lua_pushtensor(L, res[i]);
        lua_seti(L, -2, i + 1);
    }
    if (single_in) lua_geti(L, -1, 1);
    return 1;
}

/* Run fn(...) with grad mode set to `on`, restoring it however fn ends;
 * fn may be anything callable (a module). */
static int with_grad_mode(lua_State *L, bool on)
{
    if (!lua_isfunction(L, 1)) {
        if (luaL_getmetafield(L, 1, "__call") == LUA_TNIL)
            return luaL_argerror(L, 1, lua_pushfstring(L, "function expected, got %s", luaL_typename(L, 1)));
        lua_pop(L, 1); /* the __call field: lua_pcall finds it again */
    }
    kn_autograd *ag = grad_state(L);
    bool was = ag->enabled;
    ag->enabled = on;
    int st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    ag->enabled = was;
    if (st != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

/* kiln.no_grad(fn, ...): fn(...) without recording gradients */
static int l_no_grad(lua_State *L)
{
    return with_grad_mode(L, false);
}

/* kiln.enable_grad(fn, ...): fn(...) recording them (inside a no_grad) */
static int l_enable_grad(lua_State *L)
{
    return with_grad_mode(L, true);
}

/* kiln.autocast(dtype, fn, ...): fn(...) with matmul, conv2d and attention
 * computing in dtype ("bf16" or "f16"; false: autocast off inside) and
 * softmax, the norms and the reductions in f32 (kn_lua_run), restored
 * however fn ends. */
static int l_autocast(lua_State *L)
{
    kn_lua_state *s = kn_lua_state_get(L);
    bool on = true;
    kn_dtype dt = KN_BF16;
    if (lua_isboolean(L, 1) && !lua_toboolean(L, 1)) {
        on = false;
    } else {
        static const char *const dtypes[] = {"bf16", "f16", NULL};
        if (lua_type(L, 1) != LUA_TSTRING)
            return luaL_error(L, "kiln.autocast: argument 1 must be \"bf16\", \"f16\" or false, got %s",
                              luaL_typename(L, 1));
        dt = kn_lua_check_name(L, 1, "kiln.autocast", "dtype", dtypes) == 0 ? KN_BF16 : KN_F16;
    }
    lua_remove(L, 1);
    if (!lua_isfunction(L, 1)) {
        if (luaL_getmetafield(L, 1, "__call") == LUA_TNIL)
            return luaL_argerror(L, 2, lua_pushfstring(L, "function expected, got %s", luaL_typename(L, 1)));
        lua_pop(L, 1);
    }
    bool was_on = s->autocast_on;
    kn_dtype was = s->autocast_dtype;
    s->autocast_on = on;
    s->autocast_dtype = dt;
    int st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    s->autocast_on = was_on;
    s->autocast_dtype = was;
    if (st != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

/* kiln.autocast_dtype(): "bf16" or "f16" inside kiln.autocast, else nil */
static int l_autocast_dtype(lua_State *L)
{
    kn_lua_state *s = kn_lua_state_get(L);
    if (!s->autocast_on) return 0;
    lua_pushstring(L, kn_dtype_name(s->autocast_dtype));
    return 1;
}

static int l_is_grad_enabled(lua_State *L)
{
    lua_pushboolean(L, grad_state(L)->enabled);
    return 1;
}

/* kiln._autograd_rules(): op name -> true (a gradient rule) or the reason
 * it has none; the tests check every op against it. */
static int l_autograd_rules(lua_State *L)
{
    lua_createtable(L, 0, KN_OP_COUNT);
    for (int op = 0; op < KN_OP_COUNT; op++) {
        const char *why = NULL;
        if (kn_autograd_has_rule((kn_op)op, &why)) lua_pushboolean(L, 1);
        else lua_pushstring(L, why ? why : "no rule");
        lua_setfield(L, -2, kn_op_name((kn_op)op));
    }
    return 1;
}

void kn_lua_open_autograd(lua_State *L)
{
    int kiln = lua_gettop(L);
    static const luaL_Reg fns[] = {{"grad", l_grad},
                                   {"no_grad", l_no_grad},
                                   {"enable_grad", l_enable_grad},
                                   {"is_grad_enabled", l_is_grad_enabled},
                                   {"autocast", l_autocast},
                                   {"autocast_dtype", l_autocast_dtype},
                                   {"_autograd_rules", l_autograd_rules},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
    lua_getfield(L, kiln, "Tensor");
    static const luaL_Reg methods[] = {{"backward", m_backward},
                                       {"requires_grad_", m_requires_grad_},
                                       {"detach", m_detach},
                                       {"zero_grad", m_zero_grad},
                                       {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
    lua_settop(L, kiln);
}
