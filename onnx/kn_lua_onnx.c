/* kn_lua_onnx: the C half of kiln.onnx (the Lua half, the graph
 * interpreter, is onnx/lua/import.lua with its ops in onnx/lua/ops_*.lua).
 *
 *   kiln.onnx.read(path)          -- the validated model as Lua tables
 *   kiln.onnx.read_tensor(path)   -- tensor, name of a serialized TensorProto
 *   kiln.onnx.where(str | nil)    -- the source location ops captured now carry
 *   kiln.onnx.available, kiln.onnx.max_opset
 *   kiln.onnx.write(path, M)      -- write model table M as an ONNX file
 *   kiln.onnx.captured(out...)    -- while tracing: the graph captured so far
 *   kiln.onnx.wrapped(cm)         -- the function and module a compiled callable wraps
 *   kiln.onnx.is_placeholder(t)   -- whether t is a traced value without data
 *   kiln.onnx.tracing()           -- whether a compiled call is being traced
 * (the last five serve kiln.onnx.save, onnx/lua/export.lua)
 *
 * A model table: {path, opset, opsets = {domain = version}, ir_version,
 * producer, graph = G}; G = {name, nodes = {in topological order},
 * initializers = {name = tensor}, initializer_names = {...}, inputs =
 * {{name, dtype | onnx_type, shape = {n | "sym" | false}}}, outputs = {...}};
 * a node {name, op, domain, inputs, outputs, attrs = {name = value}} where
 * a value is a number, integer, string, tensor, G, or a list of those.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kn_capture.h"
#include "kn_lua_compiled_ud.h"
#include "kn_lua_onnx.h"
#include "kn_lua_state.h"
#include "kn_lua_tensor_ud.h"
#include "kn_lua_util.h"

#ifdef KILN_HAVE_ONNX
#include "kn_onnx.h"

#define KN_ONNX_MODEL_MT "kiln.OnnxModel"

typedef struct {
    kn_onnx_model *m;
} model_box;

static int box_gc(lua_State *L)
{
    model_box *b = luaL_checkudata(L, 1, KN_ONNX_MODEL_MT);
    kn_onnx_free(b->m);
    b->m = NULL;
    return 0;
}

static void push_value_info(lua_State *L, const Onnx__ValueInfoProto *vi)
{
    lua_createtable(L, 0, 4);
    lua_pushstring(L, vi->name);
    lua_setfield(L, -2, "name");
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) {
        lua_pushstring(L, "not a tensor");
        lua_setfield(L, -2, "unsupported_type");
        return;
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    kn_dtype dt;
    if (kn_onnx_dtype(tt->elem_type, &dt)) {
        lua_pushstring(L, kn_dtype_name(dt));
        lua_setfield(L, -2, "dtype");
    } else {
        lua_pushstring(L, kn_onnx_type_name(tt->elem_type));
        lua_setfield(L, -2, "unsupported_type");
    }
    if (tt->shape) {
        lua_createtable(L, (int)tt->shape->n_dim, 0);
        for (size_t i = 0; i < tt->shape->n_dim; i++) {
            const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
            if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
                lua_pushinteger(L, d->dim_value);
            else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param)
                lua_pushstring(L, d->dim_param);
            else
                lua_pushboolean(L, 0);
            lua_seti(L, -2, (lua_Integer)i + 1);
        }
        lua_setfield(L, -2, "shape");
    }
}

static void push_graph(lua_State *L, const char *file, const kn_onnx_graph *g);

/* A tensor attribute: a kiln tensor, or a string saying why not (the
 * interpreter reports it when the node runs, as an unsupported attribute). */
static void push_attr_tensor(lua_State *L, const char *file, const Onnx__TensorProto *tp)
{
    kn_tensor *t;
    if (kn_onnx_tensor(tp, file, NULL, &t) == KN_OK) {
        kn_lua_pushtensor(L, t);
    } else {
        lua_createtable(L, 0, 1);
        lua_pushstring(L, kn_last_error());
        lua_setfield(L, -2, "unsupported");
    }
}

static void push_attr(lua_State *L, const char *file, const Onnx__AttributeProto *a, const kn_onnx_graph *sub)
{
    switch (a->type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: lua_pushnumber(L, a->f); return;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: lua_pushinteger(L, a->i); return;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: lua_pushlstring(L, (const char *)a->s.data, a->s.len); return;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
        if (a->t) push_attr_tensor(L, file, a->t);
        else lua_pushnil(L);
        return;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
        if (sub) push_graph(L, file, sub);
        else lua_pushnil(L);
        return;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        lua_createtable(L, (int)a->n_floats, 0);
        for (size_t i = 0; i < a->n_floats; i++) lua_pushnumber(L, a->floats[i]), lua_seti(L, -2, (lua_Integer)i + 1);
        return;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        lua_createtable(L, (int)a->n_ints, 0);
        for (size_t i = 0; i < a->n_ints; i++) lua_pushinteger(L, a->ints[i]), lua_seti(L, -2, (lua_Integer)i + 1);
        return;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
        lua_createtable(L, (int)a->n_strings, 0);
        for (size_t i = 0; i < a->n_strings; i++)
            lua_pushlstring(L, (const char *)a->strings[i].data, a->strings[i].len), lua_seti(L, -2, (lua_Integer)i + 1);
        return;
    default:
        /* older writers leave `type` unset: take whichever field is there */
        if (a->has_f) lua_pushnumber(L, a->f);
        else if (a->has_i) lua_pushinteger(L, a->i);
        else if (a->has_s) lua_pushlstring(L, (const char *)a->s.data, a->s.len);
        else if (a->t) push_attr_tensor(L, file, a->t);
        else {
            lua_createtable(L, 0, 1);
            lua_pushstring(L, "an attribute kind kiln does not read (sparse tensor, type or graph list)");
            lua_setfield(L, -2, "unsupported");
        }
        return;
    }
}

static void push_strings(lua_State *L, char **s, size_t n)
{
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) lua_pushstring(L, s[i]), lua_seti(L, -2, (lua_Integer)i + 1);
}

static void push_graph(lua_State *L, const char *file, const kn_onnx_graph *g)
{
    luaL_checkstack(L, 16, "onnx: graph too deep");
    const Onnx__GraphProto *gp = g->proto;
    lua_createtable(L, 0, 8);
    lua_pushstring(L, gp->name ? gp->name : "");
    lua_setfield(L, -2, "name");
    lua_createtable(L, (int)gp->n_node, 0);
    for (size_t k = 0; k < gp->n_node; k++) {
        size_t i = g->order[k];
        const Onnx__NodeProto *nd = gp->node[i];
        lua_createtable(L, 0, 6);
        lua_pushstring(L, nd->name ? nd->name : "");
        lua_setfield(L, -2, "name");
        lua_pushstring(L, nd->op_type);
        lua_setfield(L, -2, "op");
        lua_pushstring(L, nd->domain ? nd->domain : "");
        lua_setfield(L, -2, "domain");
        push_strings(L, nd->input, nd->n_input);
        lua_setfield(L, -2, "inputs");
        push_strings(L, nd->output, nd->n_output);
        lua_setfield(L, -2, "outputs");
        lua_createtable(L, 0, (int)nd->n_attribute);
        for (size_t a = 0; a < nd->n_attribute; a++) {
            push_attr(L, file, nd->attribute[a], g->subgraphs[i] ? g->subgraphs[i][a] : NULL);
            lua_setfield(L, -2, nd->attribute[a]->name ? nd->attribute[a]->name : "");
        }
        lua_setfield(L, -2, "attrs");
        lua_seti(L, -2, (lua_Integer)k + 1);
    }
    lua_setfield(L, -2, "nodes");
    lua_createtable(L, 0, (int)gp->n_initializer);
    lua_createtable(L, (int)gp->n_initializer, 0);
    for (size_t i = 0; i < gp->n_initializer; i++) {
        kn_tensor_retain(g->initializers[i]);
        kn_lua_pushtensor(L, g->initializers[i]);
        lua_setfield(L, -3, gp->initializer[i]->name);
        lua_pushstring(L, gp->initializer[i]->name);
        lua_seti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -3, "initializer_names");
    lua_setfield(L, -2, "initializers");
    lua_createtable(L, (int)gp->n_input, 0);
    for (size_t i = 0; i < gp->n_input; i++) push_value_info(L, gp->input[i]), lua_seti(L, -2, (lua_Integer)i + 1);
    lua_setfield(L, -2, "inputs");
    lua_createtable(L, (int)gp->n_output, 0);
    for (size_t i = 0; i < gp->n_output; i++) push_value_info(L, gp->output[i]), lua_seti(L, -2, (lua_Integer)i + 1);
    lua_setfield(L, -2, "outputs");
}

static int l_read(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    model_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->m = NULL;
    luaL_setmetatable(L, KN_ONNX_MODEL_MT);
    kn_status st = kn_onnx_load(path, &b->m);
    if (st != KN_OK) return kn_lua_fail(L, st);
    const kn_onnx_model *m = b->m;
    lua_createtable(L, 0, 8);
    lua_pushstring(L, path);
    lua_setfield(L, -2, "path");
    lua_pushinteger(L, m->opset);
    lua_setfield(L, -2, "opset");
    lua_pushinteger(L, m->proto->has_ir_version ? m->proto->ir_version : 0);
    lua_setfield(L, -2, "ir_version");
    lua_pushstring(L, m->proto->producer_name ? m->proto->producer_name : "");
    lua_setfield(L, -2, "producer");
    lua_createtable(L, 0, (int)m->proto->n_opset_import);
    for (size_t i = 0; i < m->proto->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->proto->opset_import[i];
        lua_pushinteger(L, o->version);
        lua_setfield(L, -2, o->domain ? o->domain : "");
    }
    lua_setfield(L, -2, "opsets");
    push_graph(L, path, m->graph);
    lua_setfield(L, -2, "graph");
    /* the tables hold their own references to the tensors: free the model now */
    kn_onnx_free(b->m);
    b->m = NULL;
    return 1;
}

static int l_read_tensor(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    kn_tensor *t;
    char *name;
    kn_status st = kn_onnx_read_tensor_file(path, &t, &name);
    if (st != KN_OK) return kn_lua_fail(L, st);
    kn_lua_pushtensor(L, t);
    lua_pushstring(L, name);
    free(name);
    return 2;
}

/* ---- writing: a model table to protobuf-c structs ---------------------------
 *
 * M = {ir_version, opset, opsets = {domain = version} (optional), producer,
 * graph = {name, nodes = {{op, name, domain, inputs = {..}, outputs = {..},
 * attrs = {{name, kind = "int"|"float"|"string"|"ints"|"floats"|"tensor",
 * value}}}}, initializers = {{name, tensor}}, inputs = {{name, dtype, shape
 * = {n, ...}}}, outputs = {...}}}. Tensors are contiguous CPU tensors.
 * Every struct and array is allocated in one arena freed after the write;
 * strings point into the Lua table, which stays on the stack meanwhile. */
typedef struct {
    void **p;
    size_t n, cap;
    bool oom;
} arena;

static void *arena_alloc(arena *a, size_t size)
{
    if (a->oom) return NULL;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        void **np = realloc(a->p, cap * sizeof *np);
        if (!np) return a->oom = true, NULL;
        a->p = np, a->cap = cap;
    }
    void *q = calloc(1, size ? size : 1);
    if (!q) return a->oom = true, NULL;
    return a->p[a->n++] = q;
}

static void arena_free(arena *a)
{
    for (size_t i = 0; i < a->n; i++) free(a->p[i]);
    free(a->p);
}

#define ARENA_NEW(L, a, type, count) ((type *)arena_checked(L, a, sizeof(type) * (size_t)(count)))
static void *arena_checked(lua_State *L, arena *a, size_t size)
{
    void *q = arena_alloc(a, size);
    if (!q) luaL_error(L, "kiln.onnx.write: out of memory");
    return q;
}

/* The string at idx, which must be a Lua string (not a number converted on
 * the stack): its table keeps it alive after the stack slot is popped. */
static const char *str_at(lua_State *L, int idx, size_t *len, const char *what)
{
    if (lua_type(L, idx) != LUA_TSTRING)
        luaL_error(L, "kiln.onnx.write: %s must be a string, got %s", what, luaL_typename(L, idx));
    return lua_tolstring(L, idx, len);
}

/* The string field `key` of the table on top (def when absent). */
static const char *field_str(lua_State *L, const char *key, const char *def)
{
    lua_getfield(L, -1, key);
    const char *v = lua_isnil(L, -1) ? def : str_at(L, -1, NULL, key);
    lua_pop(L, 1);
    return v;
}

/* The strings of list `key` of the table on top. */
static char **field_strings(lua_State *L, arena *a, const char *key, size_t *n)
{
    lua_getfield(L, -1, key);
    size_t len = lua_istable(L, -1) ? (size_t)luaL_len(L, -1) : 0;
    char **out = ARENA_NEW(L, a, char *, len);
    for (size_t i = 0; i < len; i++) {
        lua_geti(L, -1, (lua_Integer)i + 1);
        out[i] = (char *)str_at(L, -1, NULL, key);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    *n = len;
    return out;
}

static Onnx__TensorProto *tensor_at(lua_State *L, arena *a, int idx, const char *name)
{
    kn_tensor *t = kn_lua_totensor(L, idx);
    if (!t) luaL_error(L, "kiln.onnx.write: '%s' is not a tensor", name);
    Onnx__TensorProto *tp = ARENA_NEW(L, a, Onnx__TensorProto, 1);
    kn_status st = kn_onnx_tensor_proto(tp, name, t);
    if (st != KN_OK) kn_lua_fail(L, st);
    return tp;
}

static Onnx__AttributeProto *build_attr(lua_State *L, arena *a)
{
    Onnx__AttributeProto *at = ARENA_NEW(L, a, Onnx__AttributeProto, 1);
    onnx__attribute_proto__init(at);
    at->name = (char *)field_str(L, "name", "");
    const char *kind = field_str(L, "kind", "");
    at->has_type = 1;
    lua_getfield(L, -1, "value");
    if (strcmp(kind, "int") == 0) {
        at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        at->has_i = 1;
        at->i = (int64_t)luaL_checkinteger(L, -1);
    } else if (strcmp(kind, "float") == 0) {
        at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        at->has_f = 1;
        at->f = (float)luaL_checknumber(L, -1);
    } else if (strcmp(kind, "string") == 0) {
        at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        size_t len;
        const char *v = str_at(L, -1, &len, "a string attribute");
        at->has_s = 1;
        at->s.data = (uint8_t *)v;
        at->s.len = len;
    } else if (strcmp(kind, "ints") == 0 || strcmp(kind, "floats") == 0) {
        bool ints = kind[0] == 'i';
        luaL_checktype(L, -1, LUA_TTABLE);
        size_t n = (size_t)luaL_len(L, -1);
        if (ints) {
            at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
            at->ints = ARENA_NEW(L, a, int64_t, n);
            at->n_ints = n;
        } else {
            at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
            at->floats = ARENA_NEW(L, a, float, n);
            at->n_floats = n;
        }
        for (size_t i = 0; i < n; i++) {
            lua_geti(L, -1, (lua_Integer)i + 1);
            if (ints) at->ints[i] = (int64_t)luaL_checkinteger(L, -1);
            else at->floats[i] = (float)luaL_checknumber(L, -1);
            lua_pop(L, 1);
        }
    } else if (strcmp(kind, "tensor") == 0) {
        at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        at->t = tensor_at(L, a, -1, at->name);
    } else {
        luaL_error(L, "kiln.onnx.write: attribute '%s' has unknown kind '%s'", at->name, kind);
    }
    lua_pop(L, 1);
    return at;
}

static Onnx__NodeProto *build_node(lua_State *L, arena *a)
{
    Onnx__NodeProto *nd = ARENA_NEW(L, a, Onnx__NodeProto, 1);
    onnx__node_proto__init(nd);
    nd->op_type = (char *)field_str(L, "op", "");
    nd->name = (char *)field_str(L, "name", "");
    const char *doc = field_str(L, "doc", NULL);
    if (doc) nd->doc_string = (char *)doc;
    const char *domain = field_str(L, "domain", NULL);
    if (domain) nd->domain = (char *)domain;
    nd->input = field_strings(L, a, "inputs", &nd->n_input);
    nd->output = field_strings(L, a, "outputs", &nd->n_output);
    lua_getfield(L, -1, "attrs");
    size_t n = lua_istable(L, -1) ? (size_t)luaL_len(L, -1) : 0;
    nd->attribute = ARENA_NEW(L, a, Onnx__AttributeProto *, n);
    nd->n_attribute = n;
    for (size_t i = 0; i < n; i++) {
        lua_geti(L, -1, (lua_Integer)i + 1);
        nd->attribute[i] = build_attr(L, a);
        /* a Constant's tensor carries the name of the value it defines */
        if (nd->attribute[i]->t && nd->n_output == 1 && strcmp(nd->op_type, "Constant") == 0)
            nd->attribute[i]->t->name = nd->output[0];
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return nd;
}

static Onnx__ValueInfoProto *build_value_info(lua_State *L, arena *a)
{
    Onnx__ValueInfoProto *vi = ARENA_NEW(L, a, Onnx__ValueInfoProto, 1);
    onnx__value_info_proto__init(vi);
    vi->name = (char *)field_str(L, "name", "");
    kn_dtype dt;
    if (kn_dtype_parse(field_str(L, "dtype", "f32"), &dt) != KN_OK) kn_lua_fail(L, KN_ERR_DTYPE);
    Onnx__TypeProto *tp = ARENA_NEW(L, a, Onnx__TypeProto, 1);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = ARENA_NEW(L, a, Onnx__TypeProto__Tensor, 1);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = kn_onnx_elem_type(dt);
    Onnx__TensorShapeProto *sp = ARENA_NEW(L, a, Onnx__TensorShapeProto, 1);
    onnx__tensor_shape_proto__init(sp);
    lua_getfield(L, -1, "shape");
    size_t n = lua_istable(L, -1) ? (size_t)luaL_len(L, -1) : 0;
    sp->dim = ARENA_NEW(L, a, Onnx__TensorShapeProto__Dimension *, n);
    sp->n_dim = n;
    for (size_t i = 0; i < n; i++) {
        Onnx__TensorShapeProto__Dimension *d = ARENA_NEW(L, a, Onnx__TensorShapeProto__Dimension, 1);
        onnx__tensor_shape_proto__dimension__init(d);
        lua_geti(L, -1, (lua_Integer)i + 1);
        if (lua_isinteger(L, -1)) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = (int64_t)lua_tointeger(L, -1);
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = (char *)str_at(L, -1, NULL, "a dim (an integer or a name)");
        }
        lua_pop(L, 1);
        sp->dim[i] = d;
    }
    lua_pop(L, 1);
    tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    return vi;
}

static Onnx__ValueInfoProto **build_value_infos(lua_State *L, arena *a, const char *key, size_t *n)
{
    lua_getfield(L, -1, key);
    luaL_checktype(L, -1, LUA_TTABLE);
    *n = (size_t)luaL_len(L, -1);
    Onnx__ValueInfoProto **out = ARENA_NEW(L, a, Onnx__ValueInfoProto *, *n);
    for (size_t i = 0; i < *n; i++) {
        lua_geti(L, -1, (lua_Integer)i + 1);
        out[i] = build_value_info(L, a);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return out;
}

static Onnx__GraphProto *build_graph(lua_State *L, arena *a)
{
    Onnx__GraphProto *g = ARENA_NEW(L, a, Onnx__GraphProto, 1);
    onnx__graph_proto__init(g);
    g->name = (char *)field_str(L, "name", "kiln");
    lua_getfield(L, -1, "nodes");
    luaL_checktype(L, -1, LUA_TTABLE);
    g->n_node = (size_t)luaL_len(L, -1);
    g->node = ARENA_NEW(L, a, Onnx__NodeProto *, g->n_node);
    for (size_t i = 0; i < g->n_node; i++) {
        lua_geti(L, -1, (lua_Integer)i + 1);
        g->node[i] = build_node(L, a);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, -1, "initializers");
    size_t ni = lua_istable(L, -1) ? (size_t)luaL_len(L, -1) : 0;
    g->initializer = ARENA_NEW(L, a, Onnx__TensorProto *, ni);
    g->n_initializer = ni;
    for (size_t i = 0; i < ni; i++) {
        lua_geti(L, -1, (lua_Integer)i + 1);
        const char *name = field_str(L, "name", "");
        lua_getfield(L, -1, "tensor");
        g->initializer[i] = tensor_at(L, a, -1, name);
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    g->input = build_value_infos(L, a, "inputs", &g->n_input);
    g->output = build_value_infos(L, a, "outputs", &g->n_output);
    return g;
}

/* kiln.onnx.write(path, M): M as an ONNX file (see above). */
static int l_write(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    /* the arena is a userdata's so that an error in the middle frees it */
    arena *a = lua_newuserdatauv(L, sizeof *a, 0);
    memset(a, 0, sizeof *a);
    luaL_setmetatable(L, "kiln.OnnxArena");
    lua_pushvalue(L, 2);
    Onnx__ModelProto *m = ARENA_NEW(L, a, Onnx__ModelProto, 1);
    onnx__model_proto__init(m);
    lua_getfield(L, -1, "ir_version");
    m->has_ir_version = 1;
    m->ir_version = (int64_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    m->producer_name = (char *)field_str(L, "producer", "kiln");
    lua_getfield(L, -1, "opsets");
    luaL_checktype(L, -1, LUA_TTABLE);
    size_t n_ops = 0;
    for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) n_ops++;
    m->opset_import = ARENA_NEW(L, a, Onnx__OperatorSetIdProto *, n_ops);
    for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) {
        Onnx__OperatorSetIdProto *o = ARENA_NEW(L, a, Onnx__OperatorSetIdProto, 1);
        onnx__operator_set_id_proto__init(o);
        o->domain = (char *)str_at(L, -2, NULL, "an opset's domain");
        o->has_version = 1;
        o->version = (int64_t)luaL_checkinteger(L, -1);
        m->opset_import[m->n_opset_import++] = o;
    }
    lua_pop(L, 1);
    lua_getfield(L, -1, "graph");
    luaL_checktype(L, -1, LUA_TTABLE);
    m->graph = build_graph(L, a);
    lua_pop(L, 1);
    kn_status st = kn_onnx_save_model(m, path);
    if (st != KN_OK) return kn_lua_fail(L, st);
    return 0;
}

static int arena_gc(lua_State *L)
{
    arena *a = luaL_checkudata(L, 1, "kiln.OnnxArena");
    arena_free(a);
    memset(a, 0, sizeof *a);
    return 0;
}
#endif

/* ---- the captured graph, for kiln.onnx.save ---------------------------------- */

static void push_int_list(lua_State *L, const int *v, int n)
{
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) lua_pushinteger(L, v[i]), lua_seti(L, -2, i + 1);
}

static void push_i64_list(lua_State *L, const int64_t *v, int n)
{
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) lua_pushinteger(L, v[i]), lua_seti(L, -2, i + 1);
}

/* A node's attributes as they are stored (dims 0-based). */
static void push_node_attrs(lua_State *L, const kn_attrs *a)
{
    lua_createtable(L, 0, 24);
    push_int_list(L, a->dims, a->ndims);
    lua_setfield(L, -2, "dims");
    push_i64_list(L, a->shape, a->nshape);
    lua_setfield(L, -2, "shape");
    static const struct {
        const char *name;
        size_t off;
    } ints[] = {{"dim", offsetof(kn_attrs, dim)},           {"keepdim", offsetof(kn_attrs, keepdim)},
                {"correction", offsetof(kn_attrs, correction)}, {"groups", offsetof(kn_attrs, groups)},
                {"ceil_mode", offsetof(kn_attrs, ceil_mode)}, {"count_include_pad", offsetof(kn_attrs, count_include_pad)},
                {"causal", offsetof(kn_attrs, causal)},     {"ndims", offsetof(kn_attrs, ndims)},
                {"nshape", offsetof(kn_attrs, nshape)},     {"rng_fresh", offsetof(kn_attrs, rng_fresh)}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        lua_pushinteger(L, *(const int *)((const char *)a + ints[i].off));
        lua_setfield(L, -2, ints[i].name);
    }
    lua_pushinteger(L, a->diagonal), lua_setfield(L, -2, "diagonal");
    lua_pushinteger(L, a->start), lua_setfield(L, -2, "start");
    lua_pushinteger(L, a->stop), lua_setfield(L, -2, "stop");
    lua_pushinteger(L, a->step), lua_setfield(L, -2, "step");
    push_int_list(L, a->kernel, 2), lua_setfield(L, -2, "kernel");
    push_int_list(L, a->stride, 2), lua_setfield(L, -2, "stride");
    push_int_list(L, a->padding, 2), lua_setfield(L, -2, "padding");
    push_int_list(L, a->dilation, 2), lua_setfield(L, -2, "dilation");
    lua_pushnumber(L, a->eps), lua_setfield(L, -2, "eps");
    lua_pushnumber(L, a->value), lua_setfield(L, -2, "value");
    lua_pushnumber(L, a->value2), lua_setfield(L, -2, "value2");
    lua_pushnumber(L, a->scale), lua_setfield(L, -2, "scale");
    lua_pushstring(L, kn_dtype_name(a->dtype)), lua_setfield(L, -2, "dtype");
}

static const char *input_kind_name(kn_input_kind k)
{
    switch (k) {
    case KN_IN_ARG: return "arg";
    case KN_IN_PARAM: return "param";
    case KN_IN_GRAPH_OUTPUT: return "graph_output";
    case KN_IN_TENSOR: return "tensor";
    default: return "value";
    }
}

/* kiln.onnx.captured(out...): called inside a traced call (kiln.onnx.save's
 * wrapper), the graph captured so far, inputs bound: {nodes = {{op, inputs =
 * {{node, out}}, outs = {{dtype, shape}}, where, a = attrs, value (a
 * constant), input (an input node's index into inputs)}}, inputs = {{kind,
 * name, tensor}}, outputs = {{node, out}} (the arguments' values), segment}.
 * Node numbers are 1-based. */
static int l_captured(lua_State *L)
{
    kn_capture *cap = kn_lua_state_get(L)->cap;
    if (!cap || !cap->active) return luaL_error(L, "kiln.onnx.captured: no traced call is running");
    const kn_graph *g = &cap->g;
    int nres = lua_gettop(L);
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, cap->segment);
    lua_setfield(L, -2, "segment");
    lua_createtable(L, g->n_inputs, 0);
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_graph_input *in = &g->inputs[i];
        lua_createtable(L, 0, 3);
        lua_pushstring(L, input_kind_name(in->kind));
        lua_setfield(L, -2, "kind");
        lua_pushstring(L, in->name);
        lua_setfield(L, -2, "name");
        if (in->tensor) {
            kn_tensor_retain(in->tensor);
            kn_lua_pushtensor(L, in->tensor);
            lua_setfield(L, -2, "tensor");
        }
        lua_seti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "inputs");
    lua_createtable(L, g->n_nodes, 0);
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *nd = &g->nodes[i];
        lua_createtable(L, 0, 8);
        lua_pushstring(L, kn_node_op_name(nd));
        lua_setfield(L, -2, "op");
        lua_createtable(L, nd->n_in, 0);
        for (int j = 0; j < nd->n_in; j++) {
            lua_createtable(L, 2, 0);
            lua_pushinteger(L, nd->in_node[j] + 1);
            lua_seti(L, -2, 1);
            lua_pushinteger(L, nd->in_out[j] + 1);
            lua_seti(L, -2, 2);
            lua_seti(L, -2, j + 1);
        }
        lua_setfield(L, -2, "inputs");
        lua_createtable(L, nd->n_out, 0);
        for (int j = 0; j < nd->n_out; j++) {
            lua_createtable(L, 0, 2);
            lua_pushstring(L, kn_dtype_name(nd->out[j].dtype));
            lua_setfield(L, -2, "dtype");
            push_i64_list(L, nd->out[j].shape, nd->out[j].ndim);
            lua_setfield(L, -2, "shape");
            lua_seti(L, -2, j + 1);
        }
        lua_setfield(L, -2, "outs");
        lua_pushstring(L, nd->where);
        lua_setfield(L, -2, "where");
        if (nd->op == KN_NODE_CONST) {
            lua_pushnumber(L, nd->value);
            lua_setfield(L, -2, "value");
        } else if (nd->op == KN_NODE_INPUT) {
            lua_pushinteger(L, nd->input + 1);
            lua_setfield(L, -2, "input");
        } else {
            push_node_attrs(L, &nd->a);
            lua_setfield(L, -2, "a");
        }
        lua_seti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "nodes");
    lua_createtable(L, nres, 0);
    for (int k = 1; k <= nres; k++) {
        kn_tensor *t = kn_lua_totensor(L, k);
        if (!t) return luaL_error(L, "result %d is a %s, not a tensor (an ONNX graph's outputs are tensors)", k,
                                  luaL_typename(L, k));
        if (!t->lazy || t->lazy->cap != cap || t->lazy->segment != cap->segment)
            return luaL_error(L, "result %d is not a value of the traced graph (a tensor computed outside it)", k);
        lua_createtable(L, 2, 0);
        lua_pushinteger(L, t->lazy->node + 1);
        lua_seti(L, -2, 1);
        lua_pushinteger(L, t->lazy->out + 1);
        lua_seti(L, -2, 2);
        lua_seti(L, -2, k);
    }
    lua_setfield(L, -2, "outputs");
    return 1;
}

/* kiln.onnx.is_placeholder(t): whether t is a traced value (no data yet)
 * rather than a real tensor; false for anything else. */
static int l_is_placeholder(lua_State *L)
{
    kn_tensor *t = kn_lua_totensor(L, 1);
    lua_pushboolean(L, t && t->lazy && !t->storage);
    return 1;
}

/* kiln.onnx.tracing(): whether a compiled call is being traced now (ops
 * record into a graph instead of running). */
static int l_tracing(lua_State *L)
{
    kn_capture *cap = kn_lua_state_get(L)->cap;
    lua_pushboolean(L, cap && cap->active);
    return 1;
}

/* kiln.onnx.wrapped(cm): the function and the module (nil for a plain
 * function) a compiled callable wraps; nothing for any other value. */
static int l_wrapped(lua_State *L)
{
    if (!luaL_testudata(L, 1, KN_COMPILED_MT)) return 0;
    lua_getiuservalue(L, 1, 1);
    lua_getfield(L, -1, "fn");
    lua_getfield(L, -2, "module");
    return 2;
}

/* kiln.onnx.where(str | nil): while set, captured ops, breaks and eager
 * errors name this location (the ONNX node) instead of a Lua line. */
static int l_where(lua_State *L)
{
    kn_lua_state *s = kn_lua_state_get(L);
    const char *w = luaL_optstring(L, 1, "");
    snprintf(s->where_override, sizeof s->where_override, "%s", w);
    return 0;
}

void kn_lua_open_onnx(lua_State *L)
{
    int kiln = lua_gettop(L);
    lua_newtable(L);
    lua_pushcfunction(L, l_where);
    lua_setfield(L, -2, "where");
    lua_pushcfunction(L, l_captured);
    lua_setfield(L, -2, "captured");
    lua_pushcfunction(L, l_wrapped);
    lua_setfield(L, -2, "wrapped");
    lua_pushcfunction(L, l_is_placeholder);
    lua_setfield(L, -2, "is_placeholder");
    lua_pushcfunction(L, l_tracing);
    lua_setfield(L, -2, "tracing");
#ifdef KILN_HAVE_ONNX
    luaL_newmetatable(L, KN_ONNX_MODEL_MT);
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, "kiln.OnnxArena");
    lua_pushcfunction(L, arena_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"read", l_read}, {"read_tensor", l_read_tensor}, {"write", l_write}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "available");
    lua_pushinteger(L, KN_ONNX_MAX_OPSET);
    lua_setfield(L, -2, "max_opset");
#else
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "available");
#endif
    lua_setfield(L, kiln, "onnx");
    lua_settop(L, kiln);
}
