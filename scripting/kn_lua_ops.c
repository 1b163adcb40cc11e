/* kn_lua_ops: every op of the op table as a kiln.* function and a tensor
 * method, plus the arithmetic and comparison metamethods.
 *
 * Each binding parses Lua arguments into a kn_opcall (1-based dims become
 * 0-based here), runs it through kn_op_eager and pushes the outputs. Lua
 * numbers given where a tensor is expected become 0-dim tensors of the other
 * operand's dtype (ints stay ints only for integer numbers), as PyTorch.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kn_capture.h"
#include "kn_lua_ops.h"
#include "kn_lua_tensor_ud.h"
#include "kn_lua_state.h"
#include "kn_lua_trace.h"
#include "kn_lua_util.h"
#include "kn_view.h"

/* Run a prepared call (eagerly or into the graph being captured) and push
 * its outputs; raises on error. */
static int run_call(lua_State *L, kn_opcall *c, kn_device dev)
{
    return kn_lua_run(L, c, dev);
}

/* A 0-dim tensor holding the Lua number at idx, with a dtype that fits next
 * to `like`, for op `op` (named in errors). Pushed on the stack (so Lua owns
 * it) and returned.
 *
 * As PyTorch, a number does not widen a tensor's dtype, but it is not rounded
 * to that dtype either: an op on an f16 or bf16 tensor computes in f32 (its
 * math type), and the number enters it as an f32 (x / 1e5 on an f16 x was 0,
 * and x * 1e5 / 1e5 NaN, when 1e5 was first rounded to f16's inf). Where the
 * caller passes math_scalar, an eager number next to a half tensor is made
 * f32 and *math_scalar is set to the dtype the result is rounded back to
 * (binary_call does that). A traced number keeps the tensor's dtype: the
 * graph's constant holds its value exactly and the generated kernel computes
 * half ops in f32 with it. An integer number next to an integer tensor must
 * fit that dtype (PyTorch refuses one that overflows it). */
static kn_tensor *scalar_tensor(lua_State *L, int idx, const kn_tensor *like, const char *op,
                                kn_dtype *math_scalar)
{
    kn_dtype dt;
    double v;
    if (lua_isboolean(L, idx)) {
        v = lua_toboolean(L, idx);
        dt = like ? like->dtype : KN_BOOL;
    } else {
        int isnum;
        v = lua_tonumberx(L, idx, &isnum);
        if (!isnum)
            luaL_argerror(L, idx, lua_pushfstring(L, "tensor or number expected, got %s",
                                                   luaL_typename(L, idx)));
        if (!like) dt = lua_isinteger(L, idx) ? KN_I64 : KN_F32;
        else if (kn_dtype_is_float(like->dtype)) dt = like->dtype;
        else if (lua_isinteger(L, idx)) dt = like->dtype == KN_BOOL ? KN_I64 : like->dtype;
        else dt = KN_F32;
        if (dt == KN_I32 && lua_isinteger(L, idx)) {
            lua_Integer iv = lua_tointeger(L, idx);
            if (iv < INT32_MIN || iv > INT32_MAX)
                luaL_error(L, "%s: the number %I does not fit the tensor's dtype i32 "
                              "(expected %d to %d); convert the tensor with :to('i64') first",
                           op, iv, (int)INT32_MIN, (int)INT32_MAX);
        }
    }
    if (kn_lua_active_capture(L)) return kn_lua_capture_number(L, idx, dt, like);
    if (math_scalar && (dt == KN_F16 || dt == KN_BF16) && !lua_isboolean(L, idx)) {
        *math_scalar = dt;
        dt = KN_F32;
    }
    kn_tensor *t;
    kn_device dev = like ? kn_tensor_device(like) : kn_lua_default_device();
    kn_status st = kn_tensor_new(dt, 0, NULL, KN_CPU, &t);
    if (st != KN_OK) kn_lua_fail(L, st);
    if (dt == KN_I64 && lua_isinteger(L, idx)) {
        int64_t iv = lua_tointeger(L, idx);
        memcpy(t->storage->data, &iv, 8);
    } else {
        kn_store_f64(t->storage->data, dt, v);
    }
    kn_lua_pushtensor(L, t);
    if (dev != KN_CPU) {
        kn_tensor *d;
        st = kn_tensor_to_device(t, dev, NULL, &d); /* a new scalar: no kernel runs */
        if (st != KN_OK) kn_lua_fail(L, st);
        kn_lua_pushtensor(L, d);
        return d;
    }
    return t;
}

/* Operand at idx: a tensor, or a number turned into one (pushed on the stack). */
static kn_tensor *operand(lua_State *L, int idx, const kn_tensor *like, const char *op,
                          kn_dtype *math_scalar)
{
    kn_tensor *t = kn_lua_totensor(L, idx);
    return t ? t : scalar_tensor(L, idx, like, op, math_scalar);
}

/* A binary op on the values at 1 and 2 (one of them may be a number); pushes
 * the result and returns 1. A number next to a half tensor computes in f32
 * (see scalar_tensor), and a float result is rounded back to the half dtype
 * here, once, as PyTorch's half kernels round their f32 result. */
static int binary_call(lua_State *L, kn_op op)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    kn_tensor *a = kn_lua_totensor(L, 1), *b = kn_lua_totensor(L, 2);
    if (!a && !b)
        return luaL_error(L, "%s: at least one operand must be a tensor, got %s and %s",
                          kn_op_name(op), luaL_typename(L, 1), luaL_typename(L, 2));
    kn_dtype round_to = KN_DTYPE_COUNT;
    c.n_in = 2;
    c.in[0] = a ? a : operand(L, 1, b, kn_op_name(op), &round_to);
    c.in[1] = b ? b : operand(L, 2, a, kn_op_name(op), &round_to);
    run_call(L, &c, KN_CPU);
    kn_tensor *r = kn_lua_totensor(L, -1);
    if (round_to == KN_DTYPE_COUNT || !r || !kn_dtype_is_float(r->dtype) || r->dtype == round_to)
        return 1;
    kn_opcall cast;
    kn_opcall_init(&cast, KN_OP_CAST);
    cast.n_in = 1;
    cast.in[0] = r;
    cast.a.dtype = round_to;
    return run_call(L, &cast, KN_CPU);
}

static kn_op op_upvalue(lua_State *L)
{
    return (kn_op)lua_tointeger(L, lua_upvalueindex(1));
}

/* ---- elementwise ------------------------------------------------------- */

static int l_unary(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, op_upvalue(L));
    c.n_in = 1;
    c.in[0] = kn_lua_checktensor(L, 1);
    return run_call(L, &c, KN_CPU);
}

static int l_binary(lua_State *L)
{
    return binary_call(L, op_upvalue(L));
}

static int l_cast(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CAST);
    c.n_in = 1;
    c.in[0] = kn_lua_checktensor(L, 1);
    kn_status st = kn_dtype_parse(luaL_checkstring(L, 2), &c.a.dtype);
    if (st != KN_OK) return kn_lua_fail(L, st);
    return run_call(L, &c, KN_CPU);
}

/* where(cond, x, y): x and y may be numbers. */
static int l_where(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_WHERE);
    kn_tensor *cond = kn_lua_checktensor(L, 1);
    kn_tensor *x = kn_lua_totensor(L, 2), *y = kn_lua_totensor(L, 3);
    c.n_in = 3;
    c.in[0] = cond;
    c.in[1] = x ? x : operand(L, 2, y, "where", NULL);
    c.in[2] = y ? y : operand(L, 3, c.in[1], "where", NULL);
    return run_call(L, &c, KN_CPU);
}

/* x:masked_fill(mask, value) */
static int l_masked_fill(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_MASKED_FILL);
    c.n_in = 2;
    c.in[0] = kn_lua_checktensor(L, 1);
    c.in[1] = kn_lua_checktensor(L, 2);
    c.a.value = lua_isboolean(L, 3) ? lua_toboolean(L, 3) : luaL_checknumber(L, 3);
    return run_call(L, &c, KN_CPU);
}

/* ---- metamethods ------------------------------------------------------- */

#define KN_MM_BINARY(fname, OP) \
    static int fname(lua_State *L) { return binary_call(L, OP); }

KN_MM_BINARY(mm_add, KN_OP_ADD)
KN_MM_BINARY(mm_sub, KN_OP_SUB)
KN_MM_BINARY(mm_mul, KN_OP_MUL)
KN_MM_BINARY(mm_div, KN_OP_DIV)
KN_MM_BINARY(mm_pow, KN_OP_POW)

static int mm_unm(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_NEG);
    c.n_in = 1;
    c.in[0] = kn_lua_checktensor(L, 1);
    return run_call(L, &c, KN_CPU);
}

/* a < b and a <= b: Lua turns the result into a boolean, so this needs the
 * value: it is defined for one-element tensors only (as PyTorch's bool()). */
static int mm_compare(lua_State *L, kn_op op)
{
    binary_call(L, op);
    kn_tensor *r = kn_lua_need_value(L, kn_lua_totensor(L, -1), op == KN_OP_LT ? "__lt" : "__le");
    if (kn_tensor_numel(r) != 1)
        return luaL_error(L, "%s: the truth value of a tensor with %d elements is ambiguous; "
                             "use x:%s(y) for an elementwise bool tensor",
                          op == KN_OP_LT ? "<" : "<=", (int)kn_tensor_numel(r), kn_op_name(op));
    kn_tensor *h = r;
    if (kn_tensor_device(r) != KN_CPU) { /* the truth value lives on the device */
        kn_status st = kn_tensor_to_device(r, KN_CPU, &kn_lua_state_get(L)->settings, &h);
        if (st != KN_OK) return kn_lua_fail(L, st);
    }
    bool truth = *(const uint8_t *)kn_tensor_data(h) != 0;
    if (h != r) kn_tensor_release(h);
    lua_pushboolean(L, truth);
    return 1;
}

static int mm_lt(lua_State *L) { return mm_compare(L, KN_OP_LT); }
static int mm_le(lua_State *L) { return mm_compare(L, KN_OP_LE); }

/* ---- reductions -------------------------------------------------------- */

/* dims at idx: nil (all), a number, or a table of numbers (1-based). */
static void read_dims(lua_State *L, int idx, kn_opcall *c)
{
    if (lua_isnoneornil(L, idx)) return;
    if (lua_istable(L, idx)) {
        char what[64];
        snprintf(what, sizeof what, "%s: dims", kn_op_name(c->op));
        int n = (int)kn_lua_list_len(L, idx, KN_MAX_DIMS, what);
        for (int i = 0; i < n; i++) {
            lua_geti(L, idx, i + 1);
            c->a.dims[i] = kn_lua_dim(L, lua_gettop(L), kn_op_name(c->op));
            lua_pop(L, 1);
        }
        c->a.ndims = n;
        return;
    }
    c->a.dims[0] = kn_lua_dim(L, idx, kn_op_name(c->op));
    c->a.ndims = 1;
}

/* Normalize negative dims against the input and reject duplicates. */
static void norm_dims(lua_State *L, kn_opcall *c)
{
    const kn_tensor *x = c->in[0];
    for (int i = 0; i < c->a.ndims; i++) {
        int d;
        kn_status st = kn_norm_dim(kn_op_name(c->op), c->a.dims[i], x->ndim, &d);
        if (st != KN_OK) kn_lua_fail(L, st);
        for (int j = 0; j < i; j++)
            if (c->a.dims[j] == d)
                luaL_error(L, "%s: dim %d appears twice", kn_op_name(c->op), d + 1);
        c->a.dims[i] = d;
    }
}

/* Options after the dims: a boolean keepdim or {keepdim=, correction=, unbiased=}. */
static void read_reduce_opts(lua_State *L, int idx, kn_opcall *c)
{
    if (lua_isboolean(L, idx)) {
        c->a.keepdim = lua_toboolean(L, idx);
        return;
    }
    static const char *const keys[] = {"keepdim", "correction", "unbiased", NULL};
    if (!lua_istable(L, idx)) return;
    kn_lua_check_options(L, idx, kn_op_name(c->op), keys);
    if (lua_getfield(L, idx, "keepdim") != LUA_TNIL) c->a.keepdim = lua_toboolean(L, -1);
    if (lua_getfield(L, idx, "correction") != LUA_TNIL) {
        char what[64];
        snprintf(what, sizeof what, "%s: correction", kn_op_name(c->op));
        c->a.correction = (int)kn_lua_int_in(L, -1, INT_MIN, INT_MAX, what);
    }
    if (lua_getfield(L, idx, "unbiased") != LUA_TNIL) c->a.correction = lua_toboolean(L, -1);
    lua_pop(L, 3);
}

static int l_reduce(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, op_upvalue(L));
    c.n_in = 1;
    c.in[0] = kn_lua_checktensor(L, 1);
    read_dims(L, 2, &c);
    norm_dims(L, &c);
    read_reduce_opts(L, 3, &c);
    return run_call(L, &c, KN_CPU);
}

/* x:max() -> 0-dim max; x:max(dim [, keepdim]) -> values, indices (1-based);
 * x:max(other) -> elementwise maximum (as torch.max). */
static int l_max(lua_State *L)
{
    kn_opcall c;
    kn_tensor *x = kn_lua_checktensor(L, 1);
    if (kn_lua_totensor(L, 2)) {
        kn_opcall_init(&c, KN_OP_MAXIMUM);
        c.n_in = 2;
        c.in[0] = x;
        c.in[1] = kn_lua_totensor(L, 2);
        return run_call(L, &c, KN_CPU);
    }
    if (lua_isnoneornil(L, 2)) {
        kn_opcall_init(&c, KN_OP_AMAX);
        c.n_in = 1;
        c.in[0] = x;
        return run_call(L, &c, KN_CPU);
    }
    kn_opcall_init(&c, KN_OP_MAX);
    c.n_in = 1;
    c.in[0] = x;
    int d = kn_lua_dim(L, 2, "max");
    kn_status st = kn_norm_dim("max", d, x->ndim, &c.a.dim);
    if (st != KN_OK) return kn_lua_fail(L, st);
    read_reduce_opts(L, 3, &c);
    return run_call(L, &c, KN_CPU);
}

/* softmax(x [, dim = -1]) */
static int l_softmax(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, op_upvalue(L));
    c.n_in = 1;
    c.in[0] = kn_lua_checktensor(L, 1);
    int d = lua_isnoneornil(L, 2) ? -1 : kn_lua_dim(L, 2, kn_op_name(c.op));
    kn_status st = kn_norm_dim(kn_op_name(c.op), d, c.in[0]->ndim, &c.a.dim);
    if (st != KN_OK) return kn_lua_fail(L, st);
    return run_call(L, &c, KN_CPU);
}

/* ---- normalization ----------------------------------------------------- */

/* Optional tensor argument: nil/none gives NULL. */
static kn_tensor *opt_tensor(lua_State *L, int idx)
{
    return lua_isnoneornil(L, idx) ? NULL : kn_lua_checktensor(L, idx);
}

/* layer_norm(x, normalized_shape, [weight], [bias], [eps]) */
static int l_layer_norm(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_LAYER_NORM);
    c.in[0] = kn_lua_checktensor(L, 1);
    if (lua_isinteger(L, 2)) {
        c.a.nshape = 1;
        c.a.shape[0] = lua_tointeger(L, 2);
    } else {
        c.a.nshape = kn_lua_shape(L, 2, c.a.shape, "layer_norm");
    }
    kn_tensor *w = opt_tensor(L, 3), *b = opt_tensor(L, 4);
    if (b && !w) return luaL_error(L, "layer_norm: a bias needs a weight (pass kiln.ones for it)");
    c.n_in = 1 + (w != NULL) + (b != NULL);
    c.in[1] = w;
    c.in[2] = b;
    c.a.eps = luaL_optnumber(L, 5, 1e-5);
    return run_call(L, &c, KN_CPU);
}

/* batch_norm(x, running_mean, running_var, [weight], [bias], [eps]) (inference form) */
static int l_batch_norm(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_BATCH_NORM);
    c.in[0] = kn_lua_checktensor(L, 1);
    c.in[1] = kn_lua_checktensor(L, 2);
    c.in[2] = kn_lua_checktensor(L, 3);
    kn_tensor *w = opt_tensor(L, 4), *b = opt_tensor(L, 5);
    if (b && !w) return luaL_error(L, "batch_norm: a bias needs a weight (pass kiln.ones for it)");
    c.n_in = 3 + (w != NULL) + (b != NULL);
    c.in[3] = w;
    c.in[4] = b;
    c.a.eps = luaL_optnumber(L, 6, 1e-5);
    return run_call(L, &c, KN_CPU);
}

/* ---- matmul, conv, pools ----------------------------------------------- */

static int l_matmul(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_MATMUL);
    c.n_in = 2;
    c.in[0] = kn_lua_checktensor(L, 1);
    c.in[1] = kn_lua_checktensor(L, 2);
    return run_call(L, &c, KN_CPU);
}

/* scaled_dot_product_attention(q, k, v, [{causal = bool, scale = number, mask = tensor}]):
 * PyTorch's F.scaled_dot_product_attention; scale defaults to 1/sqrt(head size). */
static int l_scaled_dot_product_attention(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ATTENTION);
    c.n_in = 3;
    for (int i = 0; i < 3; i++) c.in[i] = kn_lua_checktensor(L, i + 1);
    const kn_tensor *q = c.in[0];
    int64_t d = q->ndim ? q->shape[q->ndim - 1] : 0;
    c.a.scale = d > 0 ? 1.0 / sqrt((double)d) : 1.0;
    if (!lua_isnoneornil(L, 4)) {
        static const char *const keys[] = {"causal", "scale", "mask", NULL};
        kn_lua_check_options(L, 4, "scaled_dot_product_attention", keys);
        lua_getfield(L, 4, "causal");
        if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
            return kn_lua_fail(L, kn_error(KN_ERR_ARG, "scaled_dot_product_attention: causal must be a boolean, got %s",
                                           luaL_typename(L, -1)));
        c.a.causal = lua_toboolean(L, -1);
        lua_getfield(L, 4, "scale");
        if (!lua_isnil(L, -1)) {
            if (lua_type(L, -1) != LUA_TNUMBER)
                return kn_lua_fail(L, kn_error(KN_ERR_ARG, "scaled_dot_product_attention: scale must be a number, got %s",
                                               luaL_typename(L, -1)));
            c.a.scale = lua_tonumber(L, -1);
        }
        lua_getfield(L, 4, "mask");
        if (!lua_isnil(L, -1)) {
            c.in[3] = kn_lua_checktensor(L, lua_gettop(L));
            c.n_in = 4;
        }
    }
    return run_call(L, &c, KN_CPU);
}

/* A pair attribute: a number n means {n, n}. */
static void read_pair(lua_State *L, int idx, int *out, const char *op, const char *what)
{
    if (lua_isnoneornil(L, idx)) return;
    if (lua_istable(L, idx)) {
        if (luaL_len(L, idx) != 2) luaL_error(L, "%s: %s must be a number or {h, w}", op, what);
        for (int i = 0; i < 2; i++) {
            lua_geti(L, idx, i + 1);
            int isnum;
            lua_Integer v = lua_tointegerx(L, -1, &isnum);
            if (!isnum || v < -(1 << 20) || v > (1 << 20))
                luaL_error(L, "%s: %s must hold integers, got %s", op, what, luaL_typename(L, -1));
            out[i] = (int)v;
            lua_pop(L, 1);
        }
        return;
    }
    int isnum;
    lua_Integer v = lua_tointegerx(L, idx, &isnum);
    if (!isnum || v < -(1 << 20) || v > (1 << 20))
        luaL_error(L, "%s: %s must be an integer or {h, w}, got %s", op, what, luaL_typename(L, idx));
    out[0] = out[1] = (int)v;
}

/* Set one named window attribute from the value at stack index idx (nil
 * keeps the default). */
static void window_attr(lua_State *L, int idx, kn_opcall *c, const char *name)
{
    const char *op = kn_op_name(c->op);
    if (strcmp(name, "groups") == 0) {
        if (!lua_isnoneornil(L, idx)) {
            char what[64];
            snprintf(what, sizeof what, "%s: groups", op);
            c->a.groups = (int)kn_lua_int_in(L, idx, 1, INT_MAX, what);
        }
    } else if (strcmp(name, "ceil_mode") == 0) {
        c->a.ceil_mode = lua_toboolean(L, idx);
    } else if (strcmp(name, "count_include_pad") == 0) {
        if (!lua_isnoneornil(L, idx)) c->a.count_include_pad = lua_toboolean(L, idx);
    } else if (strcmp(name, "stride") == 0) {
        read_pair(L, idx, c->a.stride, op, name);
    } else if (strcmp(name, "padding") == 0) {
        read_pair(L, idx, c->a.padding, op, name);
    } else if (strcmp(name, "dilation") == 0) {
        read_pair(L, idx, c->a.dilation, op, name);
    }
}

/* Read conv/pool attributes: positional args from `first` in the order of
 * `names`, or one options table {stride =, padding =, ...}. */
static void read_window(lua_State *L, int first, kn_opcall *c, const char *const *names, int n)
{
    int table = lua_istable(L, first) && luaL_len(L, first) == 0;
    if (table) kn_lua_check_options(L, first, kn_op_name(c->op), names);
    for (int i = 0; i < n; i++) {
        if (table) {
            lua_getfield(L, first, names[i]);
            window_attr(L, lua_gettop(L), c, names[i]);
            lua_pop(L, 1);
        } else {
            window_attr(L, first + i, c, names[i]);
        }
    }
}

/* conv2d(x, w, [bias], stride, padding, dilation, groups) or (x, w, bias, {stride=, ...}) */
static int l_conv2d(lua_State *L)
{
    static const char *const names[] = {"stride", "padding", "dilation", "groups", NULL};
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_CONV2D);
    c.in[0] = kn_lua_checktensor(L, 1);
    c.in[1] = kn_lua_checktensor(L, 2);
    c.in[2] = opt_tensor(L, 3);
    c.n_in = c.in[2] ? 3 : 2;
    c.a.padding[0] = c.a.padding[1] = 0;
    read_window(L, 4, &c, names, 4);
    return run_call(L, &c, KN_CPU);
}

/* max_pool2d(x, kernel, [stride = kernel], [padding], [dilation unused], ...) */
static int l_pool(lua_State *L)
{
    static const char *const names[] = {"stride", "padding", "ceil_mode", "count_include_pad", NULL};
    kn_opcall c;
    kn_opcall_init(&c, op_upvalue(L));
    c.n_in = 1;
    c.in[0] = kn_lua_checktensor(L, 1);
    read_pair(L, 2, c.a.kernel, kn_op_name(c.op), "kernel size");
    if (lua_isnoneornil(L, 2)) return luaL_error(L, "%s: kernel size expected", kn_op_name(c.op));
    c.a.stride[0] = c.a.kernel[0];
    c.a.stride[1] = c.a.kernel[1];
    read_window(L, 3, &c, names, 4);
    return run_call(L, &c, KN_CPU);
}

static int l_adaptive_avg_pool2d(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ADAPTIVE_AVG_POOL2D);
    c.n_in = 1;
    c.in[0] = kn_lua_checktensor(L, 1);
    int out[2] = {1, 1};
    read_pair(L, 2, out, "adaptive_avg_pool2d", "output size");
    if (lua_isnoneornil(L, 2)) return luaL_error(L, "adaptive_avg_pool2d: output size expected");
    c.a.nshape = 2;
    c.a.shape[0] = out[0];
    c.a.shape[1] = out[1];
    return run_call(L, &c, KN_CPU);
}

/* ---- data movement ----------------------------------------------------- */

/* cat({tensors}, dim): more inputs than one call takes are joined in rounds. */
static int l_cat(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    /* a list longer than this is not a list of tensors in memory */
    int n = (int)kn_lua_list_len(L, 1, INT_MAX / 2, "cat: tensors");
    if (n == 0) return luaL_error(L, "cat: expected a non-empty list of tensors");
    int d = lua_isnoneornil(L, 2) ? 0 : kn_lua_dim(L, 2, "cat");
    /* the list is copied to a scratch table so partial results can replace entries */
    lua_createtable(L, n, 0);
    int list = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        lua_geti(L, 1, i);
        if (!kn_lua_totensor(L, -1))
            return luaL_error(L, "cat: entry %d is a %s, not a tensor", i, luaL_typename(L, -1));
        lua_seti(L, list, i);
    }
    while (n > 1 || lua_gettop(L) == list) {
        int m = 0;
        for (int i = 1; i <= n; i += KN_MAX_INPUTS) {
            kn_opcall c;
            kn_opcall_init(&c, KN_OP_CAT);
            for (int j = i; j <= n && j < i + KN_MAX_INPUTS; j++) {
                lua_geti(L, list, j);
                c.in[c.n_in++] = kn_lua_totensor(L, -1);
                lua_pop(L, 1); /* still referenced from the list */
            }
            kn_status st = kn_norm_dim("cat", d, c.in[0]->ndim, &c.a.dim);
            if (st != KN_OK) return kn_lua_fail(L, st);
            run_call(L, &c, KN_CPU);
            lua_seti(L, list, ++m);
        }
        n = m;
        if (n == 1) break;
    }
    lua_geti(L, list, 1);
    return 1;
}

/* x:index_select(dim, idx) / gather(dim, idx) */
static int l_index2(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, op_upvalue(L));
    c.n_in = 2;
    c.in[0] = kn_lua_checktensor(L, 1);
    int d = kn_lua_dim(L, 2, kn_op_name(c.op));
    c.in[1] = kn_lua_checktensor(L, 3);
    kn_status st = kn_norm_dim(kn_op_name(c.op), d, c.in[0]->ndim, &c.a.dim);
    if (st != KN_OK) return kn_lua_fail(L, st);
    return run_call(L, &c, KN_CPU);
}

/* x:index_add(dim, idx, src): a new tensor, x is not modified */
static int l_index_add(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_INDEX_ADD);
    c.n_in = 3;
    c.in[0] = kn_lua_checktensor(L, 1);
    int d = kn_lua_dim(L, 2, "index_add");
    c.in[1] = kn_lua_checktensor(L, 3);
    c.in[2] = kn_lua_checktensor(L, 4);
    kn_status st = kn_norm_dim("index_add", d, c.in[0]->ndim, &c.a.dim);
    if (st != KN_OK) return kn_lua_fail(L, st);
    return run_call(L, &c, KN_CPU);
}

/* gather_scatter(h, src, dst, [{weight = w, base = b, rows = n}]): message
 * passing in one op, out = b (or zeros of n rows, default h's rows);
 * out[dst[e], ...] += h[src[e], ...] * w[e]. The same as
 * b:index_add(1, dst, h:index_select(1, src) * w:reshape{-1, 1}), which
 * kiln.compile fuses into this op. */
static int l_gather_scatter(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_GATHER_SCATTER);
    c.n_in = 3;
    for (int i = 0; i < 3; i++) c.in[i] = kn_lua_checktensor(L, i + 1);
    kn_tensor *w = NULL, *b = NULL;
    bool rows_given = false;
    lua_Integer rows = c.in[0]->ndim >= 1 ? c.in[0]->shape[0] : 0;
    if (!lua_isnoneornil(L, 4)) {
        static const char *const keys[] = {"weight", "base", "rows", NULL};
        kn_lua_check_options(L, 4, "gather_scatter", keys);
        lua_getfield(L, 4, "weight");
        if (!lua_isnil(L, -1)) w = kn_lua_checktensor(L, lua_gettop(L));
        lua_getfield(L, 4, "base");
        if (!lua_isnil(L, -1)) b = kn_lua_checktensor(L, lua_gettop(L));
        lua_getfield(L, 4, "rows");
        if (!lua_isnil(L, -1)) {
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
                return kn_lua_fail(L, kn_error(KN_ERR_ARG, "gather_scatter: rows must be a whole number >= 0, got %s",
                                               luaL_tolstring(L, -1, NULL)));
            rows = lua_tointeger(L, -1);
            rows_given = true;
        }
    }
    if (b && rows_given)
        return kn_lua_fail(L, kn_error(KN_ERR_ARG, "gather_scatter: give rows or base, not both (base's rows are the "
                                                   "output's)"));
    if (w) c.in[c.n_in++] = w;
    if (b) {
        c.in[c.n_in++] = b;
    } else {
        c.a.nshape = 1;
        c.a.shape[0] = rows;
    }
    return run_call(L, &c, KN_CPU);
}

static int l_tri(lua_State *L)
{
    kn_opcall c;
    kn_opcall_init(&c, op_upvalue(L));
    c.n_in = 1;
    c.in[0] = kn_lua_checktensor(L, 1);
    c.a.diagonal = luaL_optinteger(L, 2, 0);
    return run_call(L, &c, KN_CPU);
}

/* x:nonzero(): the 1-based indices of the nonzero elements, {n, ndim} i64.
 * Its output shape depends on the data, so a graph being captured breaks
 * here and the op runs eagerly. */
static int l_nonzero(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    if (t->lazy && !t->lazy->value)
        kn_lua_graph_break(L, "unsupported op", "Tensor.nonzero has a data-dependent output shape",
                           "compute a mask and use kiln.where or masked_fill instead");
    t = kn_lua_need_value(L, t, "nonzero");
    kn_tensor *h;
    kn_status st = kn_tensor_to_device(t, KN_CPU, &kn_lua_state_get(L)->settings, &h);
    if (st != KN_OK) return kn_lua_fail(L, st);
    int64_t n = kn_tensor_numel(h), count = 0;
    size_t es = kn_dtype_size(h->dtype);
    int64_t idx[KN_MAX_DIMS] = {0};
    for (int pass = 0; pass < 2; pass++) {
        kn_tensor *out = NULL;
        if (pass == 1) {
            int64_t shape[2] = {count, h->ndim};
            st = kn_tensor_new(KN_I64, 2, shape, KN_CPU, &out);
            if (st != KN_OK) {
                kn_tensor_release(h);
                return kn_lua_fail(L, st);
            }
        }
        int64_t row = 0;
        memset(idx, 0, sizeof idx);
        for (int64_t k = 0; k < n; k++) {
            int64_t off = 0;
            for (int d = 0; d < h->ndim; d++) off += idx[d] * h->strides[d];
            if (kn_load_f64((const char *)kn_tensor_data(h) + off * (int64_t)es, h->dtype) != 0) {
                if (pass == 0) count++;
                else
                    for (int d = 0; d < h->ndim; d++)
                        ((int64_t *)out->storage->data)[row * h->ndim + d] = idx[d] + 1;
                row++;
            }
            for (int d = h->ndim - 1; d >= 0; d--) {
                if (++idx[d] < h->shape[d]) break;
                idx[d] = 0;
            }
        }
        if (pass == 1) kn_lua_pushtensor(L, out);
    }
    kn_tensor_release(h);
    return 1;
}

/* ---- registration ------------------------------------------------------ */

static void reg_op(lua_State *L, int kiln, int methods, const char *name, lua_CFunction f, int op)
{
    if (op >= 0) {
        lua_pushinteger(L, op);
        lua_pushcclosure(L, f, 1);
    } else {
        lua_pushcfunction(L, f);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, kiln, name);
    lua_setfield(L, methods, name);
}

void kn_lua_open_ops(lua_State *L)
{
    int kiln = lua_gettop(L);
    lua_getfield(L, kiln, "Tensor");
    int methods = lua_gettop(L);

    for (int op = 0; op < KN_OP_COUNT; op++) {
        const char *name = kn_op_name((kn_op)op);
        switch (kn_op_kind_of((kn_op)op)) {
        case KN_K_UNARY:
            if (op != KN_OP_CAST) reg_op(L, kiln, methods, name, l_unary, op);
            break;
        case KN_K_BINARY:
        case KN_K_COMPARE: reg_op(L, kiln, methods, name, l_binary, op); break;
        case KN_K_REDUCE: reg_op(L, kiln, methods, name, l_reduce, op); break;
        case KN_K_SOFTMAX: reg_op(L, kiln, methods, name, l_softmax, op); break;
        case KN_K_POOL:
            if (op != KN_OP_ADAPTIVE_AVG_POOL2D) reg_op(L, kiln, methods, name, l_pool, op);
            break;
        case KN_K_TRI: reg_op(L, kiln, methods, name, l_tri, op); break;
        default: break;
        }
    }
    reg_op(L, kiln, methods, "cast", l_cast, -1);
    reg_op(L, kiln, methods, "where", l_where, -1);
    reg_op(L, kiln, methods, "masked_fill", l_masked_fill, -1);
    reg_op(L, kiln, methods, "max", l_max, -1);
    reg_op(L, kiln, methods, "layer_norm", l_layer_norm, -1);
    reg_op(L, kiln, methods, "batch_norm", l_batch_norm, -1);
    reg_op(L, kiln, methods, "matmul", l_matmul, -1);
    reg_op(L, kiln, methods, "scaled_dot_product_attention", l_scaled_dot_product_attention, -1);
    reg_op(L, kiln, methods, "conv2d", l_conv2d, -1);
    reg_op(L, kiln, methods, "adaptive_avg_pool2d", l_adaptive_avg_pool2d, -1);
    reg_op(L, kiln, methods, "cat", l_cat, -1);
    reg_op(L, kiln, methods, "index_select", l_index2, KN_OP_INDEX_SELECT);
    reg_op(L, kiln, methods, "gather", l_index2, KN_OP_GATHER);
    reg_op(L, kiln, methods, "index_add", l_index_add, -1);
    reg_op(L, kiln, methods, "gather_scatter", l_gather_scatter, -1);
    reg_op(L, kiln, methods, "nonzero", l_nonzero, -1);

    luaL_getmetatable(L, KN_TENSOR_MT);
    static const luaL_Reg mms[] = {{"__add", mm_add}, {"__sub", mm_sub}, {"__mul", mm_mul},
                                   {"__div", mm_div}, {"__pow", mm_pow}, {"__unm", mm_unm},
                                   {"__lt", mm_lt},   {"__le", mm_le},   {NULL, NULL}};
    luaL_setfuncs(L, mms, 0);
    lua_settop(L, kiln);
}
