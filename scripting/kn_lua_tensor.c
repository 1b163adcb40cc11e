/* kn_lua_tensor: the kiln.Tensor metatable and methods, tensor creation,
 * conversion, printing and view methods (reshape, transpose, slice, ...);
 * the userdata itself is kn_lua_tensor_ud.c.
 *
 * The userdata holds one reference to a kn_tensor; __gc and __close release
 * it. Dims and indices from Lua are 1-based (negative counts from the end);
 * they are converted to core's 0-based dims here, at the boundary.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_autograd.h"
#include "kn_backend.h"
#include "kn_capture.h"
#include "kn_lua_autograd.h"
#include "kn_lua_state.h"
#include "kn_lua_tensor.h"
#include "kn_lua_tensor_ud.h"
#include "kn_lua_trace.h"
#include "kn_lua_util.h"
#include "kn_view.h"

/* ---- userdata ---------------------------------------------------------- */

static int tensor_gc(lua_State *L)
{
    kn_lua_tensor_ud *u = luaL_checkudata(L, 1, KN_TENSOR_MT);
    kn_tensor_release(u->t);
    u->t = NULL;
    return 0;
}

/* ---- creation ---------------------------------------------------------- */

/* A tensor made by op (zeros, randn, ...), called `what` in messages,
 * whose options at opts_idx may hold the keys `known`. */
static int create(lua_State *L, kn_op op, const char *what, const char *const *known, int shape_idx, int opts_idx,
                  double value, double value2)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    c.a.nshape = kn_lua_shape(L, shape_idx, c.a.shape, kn_op_name(op));
    kn_dtype dt = op == KN_OP_RANDINT ? KN_I64 : KN_F32;
    kn_device dev = kn_lua_default_device();
    int64_t seed = 0;
    int has_seed = 0;
    kn_lua_opts(L, opts_idx, what, known, &dt, &dev, &seed, &has_seed);
    c.a.dtype = dt;
    c.a.value = value;
    c.a.value2 = value2;
    kn_status st = kn_shape_check(kn_op_name(op), c.a.nshape, c.a.shape, dt);
    if (st != KN_OK) return kn_lua_fail(L, st);
    if (op == KN_OP_FULL) {
        /* not random: no seed, so the same call traces to the same node */
    } else if (has_seed) {
        c.a.seed = (uint64_t)seed;
        c.a.rng_offset = 0;
    } else {
        /* the state's random stream: calls without a seed draw consecutive
         * counters. Traced, the node is marked fresh: a compiled plan and a
         * replay take its seed and offset from each call (kn_plan_bind_rng) */
        kn_lua_state *s = kn_lua_state_get(L);
        c.a.rng_fresh = 1;
        c.a.seed = s->seed;
        c.a.rng_offset = s->rng_offset;
        s->rng_offset += (uint64_t)kn_numel_of(c.a.nshape, c.a.shape);
    }
    kn_lua_run(L, &c, dev);
    kn_lua_apply_requires_grad(L, opts_idx, what);
    return 1;
}

static int opts_index(lua_State *L, int shape_idx)
{
    /* options come after the shape: after a table, or after the numbers */
    if (lua_istable(L, shape_idx)) return shape_idx + 1;
    int i = shape_idx;
    while (lua_type(L, i) == LUA_TNUMBER) i++;
    return i;
}

static int l_zeros(lua_State *L)
{
    return create(L, KN_OP_FULL, "zeros", KN_LUA_CREATE_OPTS, 1, opts_index(L, 1), 0, 0);
}
static int l_ones(lua_State *L)
{
    return create(L, KN_OP_FULL, "ones", KN_LUA_CREATE_OPTS, 1, opts_index(L, 1), 1, 0);
}
static int l_randn(lua_State *L)
{
    return create(L, KN_OP_RANDN, "randn", KN_LUA_RANDOM_OPTS, 1, opts_index(L, 1), 0, 0);
}

/* kiln.rand(shape [, {low =, high =, ...}]): uniform in [low, high), default (0, 1) */
static int l_rand(lua_State *L)
{
    static const char *const known[] = {"low", "high", "dtype", "device", "seed", "requires_grad", NULL};
    int oi = opts_index(L, 1);
    double lo = 0, hi = 0;
    if (kn_lua_check_options(L, oi, "rand", known)) {
        lua_getfield(L, oi, "low");
        lua_getfield(L, oi, "high");
        if (!lua_isnil(L, -2) || !lua_isnil(L, -1)) {
            lo = luaL_optnumber(L, -2, 0);
            hi = luaL_optnumber(L, -1, 1);
            if (!(hi > lo) || !isfinite(lo) || !isfinite(hi))
                return luaL_error(L, "rand: high (%f) must be greater than low (%f), both finite", hi, lo);
        }
        lua_pop(L, 2);
    }
    return create(L, KN_OP_RAND, "rand", known, 1, oi, lo, hi);
}

static int l_full(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    double v = lua_isboolean(L, 2) ? lua_toboolean(L, 2) : luaL_checknumber(L, 2);
    /* kiln.full(shape, value [, opts]) */
    return create(L, KN_OP_FULL, "full", KN_LUA_CREATE_OPTS, 1, 3, v, 0);
}

/* kiln.randint(low, high, shape [, opts]) -> i64 in [low, high) */
static int l_randint(lua_State *L)
{
    lua_Integer lo = luaL_checkinteger(L, 1), hi = luaL_checkinteger(L, 2);
    if (hi <= lo)
        return luaL_error(L, "randint: high (%I) must be greater than low (%I)", (LUAI_UACINT)hi, (LUAI_UACINT)lo);
    return create(L, KN_OP_RANDINT, "randint", KN_LUA_RANDOM_OPTS, 3, 4, (double)lo, (double)hi);
}

/* The element count of an all-integer arange, in integers: a double
 * rounds 2^60 + 3 to 2^60, which made arange(2^60, 2^60 + 3) empty. Start
 * and step travel to the kernel as doubles, so they must be exact there. */
static bool exact_as_double(lua_Integer v)
{
    double d = (double)v;
    return d < 9223372036854775808.0 && (lua_Integer)d == v;
}

static int64_t integer_range_length(lua_State *L, int nnum)
{
    lua_Integer start = 0, stop, step = 1;
    if (nnum == 1) stop = lua_tointeger(L, 1);
    else {
        start = lua_tointeger(L, 1);
        stop = lua_tointeger(L, 2);
        if (nnum == 3) step = lua_tointeger(L, 3);
    }
    if (!exact_as_double(start) || !exact_as_double(step))
        luaL_error(L, "arange: start %I and step %I must be exact as doubles (kiln passes them "
                      "as such; any integer up to 2^53 is)", start, step);
    if ((step > 0 && stop <= start) || (step < 0 && stop >= start)) return 0;
    /* the distance as unsigned: exact even when stop - start overflows int64 */
    uint64_t dist = step > 0 ? (uint64_t)stop - (uint64_t)start : (uint64_t)start - (uint64_t)stop;
    uint64_t mag = step > 0 ? (uint64_t)step : 0u - (uint64_t)step;
    return (int64_t)(dist / mag + (dist % mag != 0));
}

/* kiln.arange(n) | arange(start, stop [, step]) [, opts]: stop exclusive, as
 * PyTorch (a count is not an index, so nothing 1-based here). */
static int l_arange(lua_State *L)
{
    int nnum = 0;
    while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER) nnum++;
    if (nnum == 0) return luaL_error(L, "arange: expected (n), (start, stop) or (start, stop, step)");
    double start = 0, stop, step = 1;
    if (nnum == 1) stop = lua_tonumber(L, 1);
    else {
        start = lua_tonumber(L, 1);
        stop = lua_tonumber(L, 2);
        if (nnum == 3) step = lua_tonumber(L, 3);
    }
    if (step == 0 || isnan(start) || isnan(stop) || isnan(step) || isinf(start) || isinf(stop))
        return luaL_error(L, "arange: start %f, stop %f, step %f do not make a range", start, stop, step);
    int all_int = 1;
    for (int i = 1; i <= nnum; i++) all_int &= lua_isinteger(L, i);
    double len = all_int ? (double)integer_range_length(L, nnum) : ceil((stop - start) / step);
    if (len < 0) len = 0;
    if (len > 1e12) return luaL_error(L, "arange: %f elements are too many", len);
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ARANGE);
    c.a.nshape = 1;
    c.a.shape[0] = (int64_t)len;
    kn_dtype dt = all_int ? KN_I64 : KN_F32;
    kn_device dev = kn_lua_default_device();
    kn_lua_opts(L, nnum + 1, "arange", KN_LUA_CREATE_OPTS, &dt, &dev, NULL, NULL);
    /* the first and the last element must fit an integer dtype */
    kn_status st = kn_dtype_check_value("arange", "start", start, dt);
    if (st == KN_OK && len >= 1) st = kn_dtype_check_value("arange", "last value", start + (len - 1) * step, dt);
    if (st != KN_OK) return kn_lua_fail(L, st);
    c.a.dtype = dt;
    c.a.value = start;
    c.a.value2 = step;
    kn_lua_run(L, &c, dev);
    kn_lua_apply_requires_grad(L, nnum + 1, "arange");
    return 1;
}

/* Walk a nested Lua table to find its shape (checked rectangular). */
static void nested_shape(lua_State *L, int idx, int depth, int64_t *shape, int *ndim, int *has_float)
{
    if (lua_type(L, idx) != LUA_TTABLE) {
        if (*ndim < 0) *ndim = depth;
        else if (*ndim != depth) luaL_error(L, "tensor: nested table is ragged at depth %d", depth + 1);
        if (lua_type(L, idx) == LUA_TNUMBER) {
            if (!lua_isinteger(L, idx)) *has_float = 1;
        } else if (!lua_isboolean(L, idx)) {
            luaL_error(L, "tensor: expected numbers or booleans, found %s", luaL_typename(L, idx));
        }
        return;
    }
    if (depth >= KN_MAX_DIMS) luaL_error(L, "tensor: more than %d nested levels", KN_MAX_DIMS);
    int64_t n = kn_lua_list_len(L, idx, INT32_MAX, "tensor: nested table");
    if (*ndim >= 0 && depth >= *ndim) luaL_error(L, "tensor: nested table is ragged at depth %d", depth + 1);
    if (shape[depth] < 0) shape[depth] = n;
    else if (shape[depth] != n)
        luaL_error(L, "tensor: nested table is ragged at depth %d (%I vs %I entries)", depth + 1,
                   (LUAI_UACINT)n, (LUAI_UACINT)shape[depth]);
    if (n == 0) {
        if (*ndim < 0) *ndim = depth + 1;
        return;
    }
    luaL_checkstack(L, 4, "tensor");
    for (int64_t i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        nested_shape(L, lua_gettop(L), depth + 1, shape, ndim, has_float);
        lua_pop(L, 1);
    }
}

/* Write the values. The walk follows the shape nested_shape found, and
 * checks each table against it again: a __len or __index that answers
 * differently the second time must not write past the tensor. */
static void nested_fill(lua_State *L, int idx, int depth, int ndim, const int64_t *shape, kn_dtype dt,
                        char **p)
{
    if (depth == ndim) {
        if (lua_type(L, idx) != LUA_TNUMBER && !lua_isboolean(L, idx))
            luaL_error(L, "tensor: expected a number or boolean at depth %d, found %s (the table changed "
                       "while it was read)", depth + 1, luaL_typename(L, idx));
        double v = lua_isboolean(L, idx) ? lua_toboolean(L, idx) : lua_tonumber(L, idx);
        bool exact_i64 = dt == KN_I64 && lua_isinteger(L, idx);
        if (!exact_i64) {
            /* a Lua integer beyond 2^53 checks its double; only i32 can refuse it */
            kn_status st = kn_dtype_check_value("tensor", "value", v, dt);
            if (st != KN_OK) kn_lua_fail(L, st);
        }
        if (exact_i64) {
            int64_t iv = lua_tointeger(L, idx);
            memcpy(*p, &iv, 8);
        } else {
            kn_store_f64(*p, dt, v);
        }
        *p += kn_dtype_size(dt);
        return;
    }
    if (lua_type(L, idx) != LUA_TTABLE ||
        kn_lua_list_len(L, idx, INT32_MAX, "tensor: nested table") != shape[depth])
        luaL_error(L, "tensor: nested table at depth %d changed while it was read (expected %d entries)",
                   depth + 1, (int)shape[depth]);
    for (int64_t i = 1; i <= shape[depth]; i++) {
        lua_geti(L, idx, i);
        nested_fill(L, lua_gettop(L), depth + 1, ndim, shape, dt, p);
        lua_pop(L, 1);
    }
}

/* kiln.tensor(nested_table_or_number [, opts]) */
static int l_tensor(lua_State *L)
{
    luaL_argexpected(L, lua_istable(L, 1) || lua_isnumber(L, 1) || lua_isboolean(L, 1), 1,
                     "table, number or boolean");
    int64_t shape[KN_MAX_DIMS];
    for (int i = 0; i < KN_MAX_DIMS; i++) shape[i] = -1;
    int ndim = -1, has_float = 0;
    nested_shape(L, 1, 0, shape, &ndim, &has_float);
    /* f32 unless told otherwise, as Torch7: {1, 2} in Lua is rarely meant as i64 */
    (void)has_float;
    kn_dtype dt = lua_isboolean(L, 1) ? KN_BOOL : KN_F32;
    kn_device dev = kn_lua_default_device();
    kn_lua_opts(L, 2, "tensor", KN_LUA_CREATE_OPTS, &dt, &dev, NULL, NULL);
    kn_tensor *t;
    kn_status st = kn_tensor_new(dt, ndim, shape, KN_CPU, &t);
    if (st != KN_OK) return kn_lua_fail(L, st);
    kn_lua_pushtensor(L, t); /* owned by Lua now, so an error below cannot leak it */
    char *p = t->storage->data;
    nested_fill(L, 1, 0, ndim, shape, dt, &p);
    if (dev != KN_CPU) {
        kn_tensor *d;
        st = kn_tensor_to_device(t, dev, NULL, &d); /* a new contiguous tensor: no kernel runs */
        if (st != KN_OK) return kn_lua_fail(L, st);
        kn_lua_pushtensor(L, d);
    }
    kn_lua_apply_requires_grad(L, 2, "tensor");
    return 1;
}

/* kiln._keep(t) -> t: the caller promises to hand out t itself, with the
 * same values, at every call that uses it (onnx/lua/import.lua's cached
 * index constants). A compiled call then guards it by identity and may
 * fold what it computes from it, as for a parameter, even in the call
 * that made it; a write into it later builds such a plan again. */
static int l_keep(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    if (t->lazy || !t->storage) return luaL_argerror(L, 1, "a tensor with values (not a traced one)");
    t->kept = true;
    lua_settop(L, 1);
    return 1;
}

/* kiln.manual_seed(n): restart this state's random stream. */
static int l_manual_seed(lua_State *L)
{
    kn_lua_state *s = kn_lua_state_get(L);
    s->seed = (uint64_t)luaL_checkinteger(L, 1);
    s->rng_offset = 0;
    return 0;
}

/* ---- properties and conversion ----------------------------------------- */

static void push_shape(lua_State *L, int ndim, const int64_t *shape)
{
    lua_createtable(L, ndim, 0);
    for (int i = 0; i < ndim; i++) {
        lua_pushinteger(L, shape[i]);
        lua_seti(L, -2, i + 1);
    }
}

static int m_shape(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    push_shape(L, t->ndim, t->shape);
    return 1;
}

static int m_size(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    if (lua_isnoneornil(L, 2)) return m_shape(L);
    int d;
    kn_status st = kn_norm_dim("size", kn_lua_dim(L, 2, "size"), t->ndim, &d);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_pushinteger(L, t->ndim ? t->shape[d] : 1);
    return 1;
}

static int m_strides(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    push_shape(L, t->ndim, t->strides);
    return 1;
}

static int m_dim(lua_State *L)
{
    lua_pushinteger(L, kn_lua_checktensor(L, 1)->ndim);
    return 1;
}

static int m_numel(lua_State *L)
{
    lua_pushinteger(L, kn_tensor_numel(kn_lua_checktensor(L, 1)));
    return 1;
}

static int m_is_contiguous(lua_State *L)
{
    lua_pushboolean(L, kn_tensor_is_contiguous(kn_lua_checktensor(L, 1)));
    return 1;
}

/* A CPU copy of t (a new reference), for reading values. */
static kn_tensor *host_copy(lua_State *L, kn_tensor *t)
{
    kn_tensor *h;
    kn_status st = kn_tensor_to_device(t, KN_CPU, &kn_lua_state_get(L)->settings, &h);
    if (st != KN_OK) kn_lua_fail(L, st);
    return h;
}

static void push_element(lua_State *L, const kn_tensor *t, const char *p)
{
    switch (t->dtype) {
    case KN_BOOL: lua_pushboolean(L, *p != 0); break;
    case KN_I64: { int64_t v; memcpy(&v, p, 8); lua_pushinteger(L, v); break; }
    case KN_I32: { int32_t v; memcpy(&v, p, 4); lua_pushinteger(L, v); break; }
    default: lua_pushnumber(L, kn_load_f64(p, t->dtype));
    }
}

static int m_item(lua_State *L)
{
    kn_tensor *t = kn_lua_need_value(L, kn_lua_checktensor(L, 1), "item");
    if (kn_tensor_numel(t) != 1)
        return luaL_error(L, "item: the tensor has %d elements; item() needs exactly one",
                          (int)kn_tensor_numel(t));
    kn_tensor *h = host_copy(L, t);
    push_element(L, h, kn_tensor_data(h));
    kn_tensor_release(h);
    return 1;
}

static void tolist_rec(lua_State *L, const kn_tensor *t, int d, const char *p)
{
    if (d == t->ndim) {
        push_element(L, t, p);
        return;
    }
    luaL_checkstack(L, 3, "tolist");
    lua_createtable(L, (int)t->shape[d], 0);
    size_t es = kn_dtype_size(t->dtype);
    for (int64_t i = 0; i < t->shape[d]; i++) {
        tolist_rec(L, t, d + 1, p + i * t->strides[d] * (int64_t)es);
        lua_seti(L, -2, i + 1);
    }
}

static int m_tolist(lua_State *L)
{
    kn_tensor *t = kn_lua_need_value(L, kn_lua_checktensor(L, 1), "tolist");
    if (kn_tensor_numel(t) > (1 << 26))
        return luaL_error(L, "tolist: %d elements are too many for a Lua table", (int)kn_tensor_numel(t));
    kn_tensor *h = host_copy(L, t);
    tolist_rec(L, h, 0, kn_tensor_data(h));
    kn_tensor_release(h);
    return 1;
}

/* A view or copy op on t through kn_lua_run (so it is captured when a
 * compiled call is running); pushes the result. */
static int run1(lua_State *L, kn_op op, kn_tensor *t, const kn_attrs *attrs)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    if (attrs) c.a = *attrs;
    c.n_in = 1;
    c.in[0] = t;
    return kn_lua_run(L, &c, KN_CPU);
}

/* x:to("cpu" | "cuda" | dtype name | {device=, dtype=}) */
static int m_to(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    kn_dtype dt = t->dtype;
    kn_device dev = kn_tensor_device(t);
    for (int i = 2; i <= lua_gettop(L); i++) {
        if (lua_istable(L, i)) {
            kn_lua_opts(L, i, "to", KN_LUA_TENSOR_OPTS, &dt, &dev, NULL, NULL);
            continue;
        }
        const char *s = luaL_checkstring(L, i);
        if (kn_device_parse(s, &dev) != KN_OK) {
            /* "cuda:99", "cpu:x": a device name with a bad number, whose
             * own message says what is wrong better than the generic one */
            if (strchr(s, ':')) return luaL_error(L, "to: %s", kn_last_error());
            kn_status st = kn_dtype_parse(s, &dt);
            if (st != KN_OK) {
                static const char *const names[] = {"cpu", "cuda", "f32", "f64", "bf16", "f16", "i32", "i64",
                                                    "bool", NULL};
                const char *near = kn_lua_nearest(s, names);
                return luaL_error(L, "to: '%s' is neither a device (cpu, cuda, cuda:N) nor a dtype "
                                     "(f32, f64, bf16, f16, i32, i64, bool)%s%s%s",
                                  s, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
            }
        }
    }
    lua_settop(L, 1);
    if (dev != kn_tensor_device(t)) {
        if (t->lazy && !t->lazy->value)
            kn_lua_graph_break(L, "unsupported op", "Tensor.to moves a traced tensor between devices",
                               "move inputs to the device before calling the compiled function");
        kn_tensor *d;
        kn_status st = kn_tensor_to_device(kn_lua_need_value(L, t, "to"), dev, &kn_lua_state_get(L)->settings, &d);
        if (st != KN_OK) return kn_lua_fail(L, st);
        kn_lua_pushtensor(L, d);
        /* the copy has no history: a value to read, not to differentiate
         * (autograd records no device moves yet); backward from it says so */
        if (kn_autograd_requires_grad(t) && (st = kn_autograd_mark(d, KN_GRAD_ORIGIN_MOVED)) != KN_OK)
            return kn_lua_fail(L, st);
        t = d;
    }
    if (dt == t->dtype) return 1;
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    return run1(L, KN_OP_CAST, t, &a);
}

/* x:copy_(src): overwrite x's elements with src's (same shape and dtype,
 * any device), in place: what feeds new data to a tensor a recording
 * (reduce-overhead) or a caller holds. Returns x. */
static int m_copy_(lua_State *L)
{
    kn_tensor *dst = kn_lua_checktensor(L, 1), *src = kn_lua_checktensor(L, 2);
    kn_capture *cap = kn_lua_active_capture(L);
    bool traced = cap && (dst->lazy || src->lazy || kn_capture_pending_write(cap, dst) ||
                          kn_capture_pending_write(cap, src));
    if (!traced && ((dst->lazy && !dst->lazy->value) || (src->lazy && !src->lazy->value)))
        return luaL_error(L, "copy_: this traced tensor has no value (its compiled call failed)");
    if (!traced) { /* a placeholder whose call ended stands for its value */
        dst = kn_lua_need_value(L, dst, "copy_");
        src = kn_lua_need_value(L, src, "copy_");
    }
    char a[64], b[64];
    if (dst->ndim != src->ndim || memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)dst->ndim) != 0 ||
        dst->dtype != src->dtype)
        return luaL_error(L, "copy_: source %s %s does not match destination %s %s",
                          kn_shape_str(src->ndim, src->shape, a, sizeof a), kn_dtype_name(src->dtype),
                          kn_shape_str(dst->ndim, dst->shape, b, sizeof b), kn_dtype_name(dst->dtype));
    kn_status ok = kn_autograd_check_inplace(&kn_lua_state_get(L)->grad, dst, src, "copy_");
    if (ok != KN_OK) return kn_lua_fail(L, ok);
    if (traced) return kn_lua_traced_copy(L, cap, dst, src);
    if (!kn_tensor_is_contiguous(dst)) return luaL_error(L, "copy_: the destination must be contiguous");
    kn_device dd = kn_tensor_device(dst);
    const kn_settings *settings = &kn_lua_state_get(L)->settings;
    kn_tensor *s = src, *tmp = NULL;
    kn_status st = KN_OK;
    if (kn_tensor_device(s) != dd) {
        st = kn_tensor_to_device(s, dd, settings, &tmp); /* contiguous on the destination's device */
        s = tmp;
    } else if (!kn_tensor_is_contiguous(s)) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_CONTIGUOUS);
        c.n_in = 1;
        c.in[0] = s;
        c.settings = settings;
        st = kn_op_eager(&c, dd);
        s = tmp = c.out[0];
    }
    if (st == KN_OK && !kn_tensor_is_contiguous(s)) {
        kn_opcall c;
        kn_opcall_init(&c, KN_OP_CONTIGUOUS);
        c.n_in = 1;
        c.in[0] = s;
        c.settings = settings;
        st = kn_op_eager(&c, dd);
        kn_tensor_release(tmp);
        s = tmp = st == KN_OK ? c.out[0] : NULL;
    }
    kn_device_ctx *dc = kn_backend_get(dd);
    if (st == KN_OK && !dc) st = kn_error(KN_ERR_DEVICE, "copy_: device %s is not available", kn_device_name(dd));
    if (st == KN_OK)
        st = dc->be->copy(dc, kn_tensor_data(dst), kn_tensor_data(s), kn_tensor_numel(dst) * (int64_t)kn_dtype_size(dst->dtype));
    if (st == KN_OK) kn_storage_written(dst->storage); /* plans that baked dst's values rebuild */
    kn_tensor_release(tmp);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_settop(L, 1);
    return 1;
}

static int m_clone(lua_State *L)
{
    return run1(L, KN_OP_CONTIGUOUS, kn_lua_checktensor(L, 1), NULL);
}

static int m_contiguous(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    if (!t->lazy && kn_tensor_is_contiguous(t)) {
        lua_settop(L, 1);
        return 1;
    }
    return run1(L, KN_OP_CONTIGUOUS, t, NULL);
}

/* ---- printing ---------------------------------------------------------- */

typedef struct {
    luaL_Buffer *b;
    const kn_tensor *t;
    int sci;
} printer;

static void print_elem(printer *pr, const char *p)
{
    char s[64];
    switch (pr->t->dtype) {
    case KN_BOOL: snprintf(s, sizeof s, "%s", *p ? "true" : "false"); break;
    case KN_I32: case KN_I64:
        snprintf(s, sizeof s, "%lld", (long long)kn_load_f64(p, pr->t->dtype));
        if (pr->t->dtype == KN_I64) { int64_t v; memcpy(&v, p, 8); snprintf(s, sizeof s, "%lld", (long long)v); }
        break;
    default: {
        double v = kn_load_f64(p, pr->t->dtype);
        if (isnan(v)) snprintf(s, sizeof s, "nan");
        else if (isinf(v)) snprintf(s, sizeof s, v > 0 ? "inf" : "-inf");
        else snprintf(s, sizeof s, pr->sci ? "%.4e" : "%.4f", v);
    }
    }
    luaL_addstring(pr->b, s);
}

static void print_rec(printer *pr, int d, const char *p, int indent)
{
    const kn_tensor *t = pr->t;
    if (d == t->ndim) {
        print_elem(pr, p);
        return;
    }
    size_t es = kn_dtype_size(t->dtype);
    int64_t n = t->shape[d];
    int summarize = kn_tensor_numel(t) > 1000 && n > 6;
    luaL_addchar(pr->b, '{');
    for (int64_t i = 0; i < n; i++) {
        if (summarize && i == 3) {
            luaL_addstring(pr->b, d == t->ndim - 1 ? "..., " : "...,\n");
            if (d != t->ndim - 1)
                for (int k = 0; k < indent + 1; k++) luaL_addchar(pr->b, ' ');
            i = n - 3;
        }
        print_rec(pr, d + 1, p + i * t->strides[d] * (int64_t)es, indent + 1);
        if (i + 1 < n) {
            if (d == t->ndim - 1) luaL_addstring(pr->b, ", ");
            else {
                luaL_addstring(pr->b, ",\n");
                for (int k = 0; k < indent + 1; k++) luaL_addchar(pr->b, ' ');
            }
        }
    }
    luaL_addchar(pr->b, '}');
}

static int m_tostring(lua_State *L)
{
    kn_tensor *t = kn_lua_need_value(L, kn_lua_checktensor(L, 1), "__tostring");
    kn_tensor *h = host_copy(L, t);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    printer pr = {&b, h, 0};
    if (kn_dtype_is_float(h->dtype)) {
        /* scientific notation when the magnitudes would not read well in %.4f */
        double lo = INFINITY, hi = 0;
        int64_t n = kn_tensor_numel(h);
        kn_tensor *c = NULL;
        if (n > 0 && n <= (1 << 22) && kn_tensor_contiguous_copy(h, NULL, &c) == KN_OK) {
            for (int64_t i = 0; i < n; i++) {
                double v = fabs(kn_load_f64((char *)c->storage->data + i * (int64_t)kn_dtype_size(c->dtype), c->dtype));
                if (!isfinite(v) || v == 0) continue;
                if (v < lo) lo = v;
                if (v > hi) hi = v;
            }
            kn_tensor_release(c);
        }
        pr.sci = hi >= 1e5 || (lo < 1e-4 && hi > 0);
    }
    luaL_addstring(&b, "tensor(");
    print_rec(&pr, 0, kn_tensor_data(h), 7);
    char tail[128];
    snprintf(tail, sizeof tail, ", dtype=%s, device=%s)", kn_dtype_name(t->dtype),
             kn_device_name(kn_tensor_device(t)));
    if (t->ndim > 1) {
        char shp[96];
        snprintf(tail, sizeof tail, ", shape=%s, dtype=%s, device=%s)",
                 kn_shape_str(t->ndim, t->shape, shp, sizeof shp), kn_dtype_name(t->dtype),
                 kn_device_name(kn_tensor_device(t)));
    }
    luaL_addstring(&b, tail);
    kn_tensor_release(h);
    luaL_pushresult(&b);
    return 1;
}

/* ---- views ----------------------------------------------------------- */

/* Each view is an op of the table (reshape, permute, slice, expand), so a
 * compiled call captures it; eagerly it only makes a new header. */

static int reshape_to(lua_State *L, kn_tensor *t, int n, const int64_t *shape)
{
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.nshape = n;
    memcpy(a.shape, shape, sizeof(int64_t) * (size_t)n);
    return run1(L, KN_OP_RESHAPE, t, &a);
}

static int m_reshape(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    int64_t shape[KN_MAX_DIMS];
    int n = kn_lua_shape(L, 2, shape, "reshape");
    return reshape_to(L, t, n, shape);
}

/* view: as reshape, but eagerly it refuses what the strides cannot express */
static int m_view(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    int64_t shape[KN_MAX_DIMS];
    int n = kn_lua_shape(L, 2, shape, "view");
    if (!t->lazy) {
        kn_tensor *v;
        kn_status st = kn_view_view(t, n, shape, &v);
        if (st != KN_OK) return kn_lua_fail(L, st);
        if (!t->ag) {
            kn_lua_pushtensor(L, v);
            return 1;
        }
        kn_tensor_release(v); /* it is a view: the reshape below makes the same one, recorded */
    }
    return reshape_to(L, t, n, shape);
}

static int m_expand(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.nshape = kn_lua_shape(L, 2, a.shape, "expand");
    return run1(L, KN_OP_EXPAND, t, &a);
}

static int permute_to(lua_State *L, kn_tensor *t, const int *order)
{
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.ndims = t->ndim;
    memcpy(a.dims, order, sizeof(int) * (size_t)t->ndim);
    return run1(L, KN_OP_PERMUTE, t, &a);
}

static int m_transpose(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    if (t->ndim < 2 && lua_isnoneornil(L, 2)) {
        lua_settop(L, 1);
        return 1; /* x:t() of a vector is itself, as PyTorch */
    }
    int a = lua_isnoneornil(L, 2) ? -2 : kn_lua_dim(L, 2, "transpose");
    int b = lua_isnoneornil(L, 3) ? -1 : kn_lua_dim(L, 3, "transpose");
    int da, db;
    kn_status st = kn_norm_dim("transpose", a, t->ndim, &da);
    if (st == KN_OK) st = kn_norm_dim("transpose", b, t->ndim, &db);
    if (st != KN_OK) return kn_lua_fail(L, st);
    if (t->ndim == 0) {
        lua_settop(L, 1);
        return 1;
    }
    int order[KN_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) order[i] = i;
    order[da] = db;
    order[db] = da;
    return permute_to(L, t, order);
}

static int m_permute(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    int64_t raw[KN_MAX_DIMS];
    int n = kn_lua_shape(L, 2, raw, "permute");
    if (n != t->ndim)
        return luaL_error(L, "permute: got %d dims for a tensor with %d dims", n, t->ndim);
    int order[KN_MAX_DIMS], seen[KN_MAX_DIMS] = {0};
    for (int i = 0; i < n; i++) {
        if (raw[i] == 0) return luaL_error(L, "permute: dims are 1-based, got 0");
        kn_status st = kn_norm_dim("permute", raw[i] > 0 ? raw[i] - 1 : raw[i], t->ndim, &order[i]);
        if (st != KN_OK) return kn_lua_fail(L, st);
        if (seen[order[i]]++) return luaL_error(L, "permute: dim %d appears twice", order[i] + 1);
    }
    return permute_to(L, t, order);
}

static int m_unsqueeze(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    lua_Integer d = luaL_checkinteger(L, 2);
    if (d == 0) return luaL_error(L, "unsqueeze: dims are 1-based, got 0");
    if (t->ndim >= KN_MAX_DIMS) return luaL_error(L, "unsqueeze: a tensor has at most %d dims", KN_MAX_DIMS);
    int nd;
    kn_status st = kn_norm_dim("unsqueeze", d > 0 ? d - 1 : d, t->ndim + 1, &nd);
    if (st != KN_OK) return kn_lua_fail(L, st);
    int64_t shape[KN_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) shape[i] = i == nd ? 1 : t->shape[j++];
    return reshape_to(L, t, t->ndim + 1, shape);
}

static int m_squeeze(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    int all = lua_isnoneornil(L, 2), nd = -1;
    if (!all) {
        kn_status st = kn_norm_dim("squeeze", kn_lua_dim(L, 2, "squeeze"), t->ndim, &nd);
        if (st != KN_OK) return kn_lua_fail(L, st);
    }
    int64_t shape[KN_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++)
        if (!(t->shape[i] == 1 && (all || i == nd))) shape[n++] = t->shape[i];
    return reshape_to(L, t, n, shape);
}

static int m_flatten(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    int64_t one = kn_tensor_numel(t);
    if (t->ndim == 0) return reshape_to(L, t, 1, &one);
    int a, b;
    kn_status st = kn_norm_dim("flatten", lua_isnoneornil(L, 2) ? 0 : kn_lua_dim(L, 2, "flatten"), t->ndim, &a);
    if (st == KN_OK) st = kn_norm_dim("flatten", lua_isnoneornil(L, 3) ? -1 : kn_lua_dim(L, 3, "flatten"), t->ndim, &b);
    if (st != KN_OK) return kn_lua_fail(L, st);
    if (a > b) return luaL_error(L, "flatten: start dim %d is after end dim %d", a + 1, b + 1);
    int64_t shape[KN_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i > a && i <= b) shape[n - 1] *= t->shape[i];
        else shape[n++] = t->shape[i];
    }
    return reshape_to(L, t, n, shape);
}

static int slice_to(lua_State *L, kn_tensor *t, int dim, int64_t start, int64_t stop, int64_t step)
{
    kn_attrs a;
    memset(&a, 0, sizeof a);
    a.dim = dim;
    a.start = start;
    a.stop = stop;
    a.step = step;
    return run1(L, KN_OP_SLICE, t, &a);
}

/* Resolve a 1-based inclusive Lua index against size n into 0-based. */
static int64_t lua_index(int64_t i, int64_t n)
{
    return i > 0 ? i - 1 : n + i;
}

/* x:slice(dim, start [, stop [, step]]): elements start..stop (1-based,
 * inclusive, negatives from the end, like string.sub), as a view. */
static int m_slice(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    int d = kn_lua_dim(L, 2, "slice"), nd;
    if (t->ndim == 0) return luaL_error(L, "slice: cannot slice a 0-dim tensor");
    kn_status st = kn_norm_dim("slice", d, t->ndim, &nd);
    if (st != KN_OK) return kn_lua_fail(L, st);
    int64_t n = t->shape[nd];
    lua_Integer start = luaL_optinteger(L, 3, 1), stop = luaL_optinteger(L, 4, -1);
    lua_Integer step = luaL_optinteger(L, 5, 1);
    if (start == 0 || stop == 0)
        return luaL_error(L, "slice: indices are 1-based (1 is the first, -1 the last), got 0");
    if (step < 1) return luaL_error(L, "slice: step must be positive, got %I", step);
    int64_t s0 = lua_index(start, n), s1 = lua_index(stop, n) + 1;
    if (s0 < 0) s0 = 0;
    if (s0 > n) s0 = n;
    if (s1 > n) s1 = n;
    if (s1 < s0) s1 = s0;
    return slice_to(L, t, nd, s0, s1, step);
}

/* x:split(size | {sizes}, dim): views, returned as multiple values. */
static int m_split(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    int d = lua_isnoneornil(L, 3) ? 0 : kn_lua_dim(L, 3, "split"), nd;
    if (t->ndim == 0) return luaL_error(L, "split: cannot split a 0-dim tensor");
    kn_status st = kn_norm_dim("split", d, t->ndim, &nd);
    if (st != KN_OK) return kn_lua_fail(L, st);
    int64_t n = t->shape[nd];
    int top = lua_gettop(L);
    if (lua_istable(L, 2)) {
        int k = (int)kn_lua_list_len(L, 2, INT32_MAX, "split: sizes");
        /* the running total stays <= n, so 2^62-sized entries cannot wrap it
         * (four of them once added up to 0); the second pass checks again
         * because __index may answer differently */
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1) luaL_checkstack(L, k, "split: too many pieces");
            int64_t pos = 0;
            for (int i = 1; i <= k; i++) {
                lua_geti(L, 2, i);
                int isnum;
                lua_Integer sz = lua_tointegerx(L, -1, &isnum);
                lua_pop(L, 1);
                if (!isnum || sz < 0) return luaL_error(L, "split: size %d must be an integer >= 0", i);
                if (sz > n - pos)
                    return luaL_error(L, "split: sizes add up to more than dim %d's size %I (at size %d: %I)",
                                      nd + 1, (lua_Integer)n, i, sz);
                if (pass == 1) slice_to(L, t, nd, pos, pos + sz, 1);
                pos += sz;
            }
            if (pos != n)
                return luaL_error(L, "split: sizes add up to %I but dim %d has size %I", (lua_Integer)pos,
                                  nd + 1, (lua_Integer)n);
        }
        return lua_gettop(L) - top;
    }
    lua_Integer size = luaL_checkinteger(L, 2);
    if (size <= 0) return luaL_error(L, "split: size must be positive, got %I", size);
    if (n / size > 10000) return luaL_error(L, "split: %I pieces are too many", (lua_Integer)(n / size));
    int64_t pos = 0;
    do {
        luaL_checkstack(L, 1, "split");
        slice_to(L, t, nd, pos, pos + size < n ? pos + size : n, 1);
        pos += size;
    } while (pos < n);
    return lua_gettop(L) - top;
}

/* ---- metatable --------------------------------------------------------- */

static const luaL_Reg tensor_methods[] = {
    {"shape", m_shape},         {"size", m_size},         {"strides", m_strides},
    {"dim", m_dim},             {"numel", m_numel},       {"is_contiguous", m_is_contiguous},
    {"item", m_item},           {"tolist", m_tolist},     {"to", m_to},
    {"clone", m_clone},         {"contiguous", m_contiguous}, {"copy_", m_copy_},
    {"reshape", m_reshape},     {"view", m_view},         {"expand", m_expand},
    {"transpose", m_transpose}, {"t", m_transpose},       {"permute", m_permute},
    {"unsqueeze", m_unsqueeze}, {"squeeze", m_squeeze},   {"flatten", m_flatten},
    {"slice", m_slice},         {"split", m_split},
    {NULL, NULL}};

/* __index: properties first (x.dtype, x.device, x.ndim, and autograd's:
 * x.requires_grad, x.grad, x.is_leaf, x.grad_fn), then methods. */
static int tensor_index(lua_State *L)
{
    kn_tensor *t = kn_lua_checktensor(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k && lua_type(L, 2) == LUA_TSTRING) {
        if (strcmp(k, "dtype") == 0) {
            lua_pushstring(L, kn_dtype_name(t->dtype));
            return 1;
        }
        if (strcmp(k, "device") == 0) {
            lua_pushstring(L, kn_device_name(kn_tensor_device(t)));
            return 1;
        }
        if (strcmp(k, "ndim") == 0) {
            lua_pushinteger(L, t->ndim);
            return 1;
        }
        if (kn_lua_autograd_property(L, k)) return 1;
    }
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1)); /* the methods table */
    return 1;
}

/* __newindex: x.requires_grad = bool and x.grad = tensor | nil; a tensor
 * has no other field to set. */
static int tensor_newindex(lua_State *L)
{
    kn_lua_checktensor(L, 1);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (k && kn_lua_autograd_assign(L, k)) return 0;
    return luaL_error(L, "a tensor has no field '%s' to set (settable: requires_grad, grad)",
                      k ? k : luaL_typename(L, 2));
}

void kn_lua_open_tensor(lua_State *L)
{
    int kiln = lua_gettop(L);
    luaL_newmetatable(L, KN_TENSOR_MT);
    int mt = lua_gettop(L);
    lua_pushcfunction(L, tensor_gc);
    lua_setfield(L, mt, "__gc");
    lua_pushcfunction(L, tensor_gc);
    lua_setfield(L, mt, "__close");
    lua_pushcfunction(L, m_tostring);
    lua_setfield(L, mt, "__tostring");
    lua_pushliteral(L, "kiln.Tensor");
    lua_setfield(L, mt, "__name");
    /* the methods table: kiln.Tensor, where ops add their methods too */
    lua_newtable(L);
    luaL_setfuncs(L, tensor_methods, 0);
    lua_pushcfunction(L, m_tostring);
    lua_setfield(L, -2, "tostring");
    lua_pushvalue(L, -1);
    lua_setfield(L, kiln, "Tensor");
    lua_pushcclosure(L, tensor_index, 1);
    lua_setfield(L, mt, "__index");
    lua_pushcfunction(L, tensor_newindex);
    lua_setfield(L, mt, "__newindex");
    lua_settop(L, kiln);

    static const luaL_Reg fns[] = {
        {"tensor", l_tensor}, {"zeros", l_zeros}, {"ones", l_ones},     {"full", l_full},
        {"randn", l_randn},   {"rand", l_rand},   {"randint", l_randint}, {"arange", l_arange},
        {"manual_seed", l_manual_seed},           {"_keep", l_keep}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
