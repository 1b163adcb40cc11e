/* kn_lua_onnx: the C half of kiln.onnx (the Lua half, the graph
 * interpreter, is scripting/lua/60_onnx.lua with its ops in 62..66_onnx_ops_*.lua).
 *
 *   kiln.onnx.read(path)          -- the validated model as Lua tables
 *   kiln.onnx.read_tensor(path)   -- tensor, name of a serialized TensorProto
 *   kiln.onnx.where(str | nil)    -- the source location ops captured now carry
 *   kiln.onnx.available, kiln.onnx.max_opset
 *
 * A model table: {path, opset, opsets = {domain = version}, ir_version,
 * producer, graph = G}; G = {name, nodes = {in topological order},
 * initializers = {name = tensor}, initializer_names = {...}, inputs =
 * {{name, dtype | onnx_type, shape = {n | "sym" | false}}}, outputs = {...}};
 * a node {name, op, domain, inputs, outputs, attrs = {name = value}} where
 * a value is a number, integer, string, tensor, G, or a list of those.
 */
#include <stdlib.h>
#include <string.h>

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
#endif

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
#ifdef KILN_HAVE_ONNX
    luaL_newmetatable(L, KN_ONNX_MODEL_MT);
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"read", l_read}, {"read_tensor", l_read_tensor}, {NULL, NULL}};
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
