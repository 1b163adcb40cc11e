/* kn_lua_inspect: the inspection methods of a compiled callable:
 * cm:breaks(), cm:recompiles(), cm:guards(), cm:graphs(), cm:kernels(),
 * cm:stats() and cm:last_call() (what kiln.explain reports), as the tables
 * docs/lua-api.md describes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kn_cpu_jit.h"
#include "kn_kernels.h"
#include "kn_lua_compiled_ud.h"
#include "kn_lua_inspect.h"
#include "kn_lua_util.h"
#include "kn_profile.h"

/* The latest version of graph k, or NULL when it has none. */
static const kn_version *latest_version(const kn_compiled *cm, int k)
{
    const kn_graph_cache *gc = &cm->cache.graphs[k];
    return gc->n_versions ? &gc->versions[gc->n_versions - 1] : NULL;
}

static void push_break(lua_State *L, const kn_break *b)
{
    lua_createtable(L, 0, 6);
    lua_pushstring(L, b->category);
    lua_setfield(L, -2, "category");
    lua_pushstring(L, b->reason);
    lua_setfield(L, -2, "reason");
    lua_pushstring(L, b->hint);
    lua_setfield(L, -2, "hint");
    lua_pushstring(L, b->where);
    lua_setfield(L, -2, "where");
    lua_pushinteger(L, b->graph);
    lua_setfield(L, -2, "graph");
    lua_createtable(L, b->n_frames, 0);
    lua_createtable(L, b->n_frames, 0);
    for (int i = 0; i < b->n_frames; i++) {
        lua_pushstring(L, b->frame_where[i]);
        lua_seti(L, -3, i + 1);
        lua_pushstring(L, b->frame_fn[i]);
        lua_seti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "functions"); /* stack.functions, as docs/lua-api.md has it */
    lua_setfield(L, -2, "stack");
    char text[4096];
    kn_break_format(b, text, sizeof text);
    lua_pushstring(L, text);
    lua_setfield(L, -2, "message");
}

static int cm_breaks(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    lua_createtable(L, cm->cache.n_breaks, 0);
    for (int i = 0; i < cm->cache.n_breaks; i++) {
        push_break(L, &cm->cache.breaks[i]);
        lua_seti(L, -2, i + 1);
    }
    return 1;
}

static int cm_recompiles(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    lua_createtable(L, cm->cache.n_recompiles, 0);
    for (int i = 0; i < cm->cache.n_recompiles; i++) {
        const kn_recompile *r = &cm->cache.recompiles[i];
        lua_createtable(L, 0, 4);
        lua_pushinteger(L, r->graph);
        lua_setfield(L, -2, "graph");
        lua_pushinteger(L, r->version);
        lua_setfield(L, -2, "version");
        lua_pushstring(L, r->where);
        lua_setfield(L, -2, "where");
        lua_pushstring(L, cm->id.name);
        lua_setfield(L, -2, "fn");
        lua_createtable(L, r->n_reasons, 0);
        for (int k = 0; k < r->n_reasons; k++) {
            lua_pushstring(L, r->reasons[k]);
            lua_seti(L, -2, k + 1);
        }
        lua_setfield(L, -2, "reasons");
        lua_createtable(L, r->n_dynamic, 0);
        for (int k = 0; k < r->n_dynamic; k++) {
            lua_pushstring(L, r->dynamic[k]);
            lua_seti(L, -2, k + 1);
        }
        lua_setfield(L, -2, "dynamic"); /* numbers made dynamic: {"number 's' at f.lua:5", ...} */
        lua_seti(L, -2, i + 1);
    }
    return 1;
}

/* {{graph = 0, version = 0, guards = {...}}, ...} */
static int cm_guards(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    lua_newtable(L);
    int n = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++)
        for (int v = 0; v < cm->cache.graphs[k].n_versions; v++) {
            const kn_version *ver = &cm->cache.graphs[k].versions[v];
            lua_createtable(L, 0, 3);
            lua_pushinteger(L, k);
            lua_setfield(L, -2, "graph");
            lua_pushinteger(L, v);
            lua_setfield(L, -2, "version");
            lua_createtable(L, ver->n_guards, 0);
            for (int i = 0; i < ver->n_guards; i++) {
                lua_pushstring(L, ver->guards[i]);
                lua_seti(L, -2, i + 1);
            }
            lua_setfield(L, -2, "guards");
            lua_seti(L, -2, ++n);
        }
    return 1;
}

static void push_shape_list(lua_State *L, const kn_meta *m)
{
    lua_createtable(L, m->ndim, 0);
    for (int d = 0; d < m->ndim; d++) {
        lua_pushinteger(L, m->shape[d]);
        lua_seti(L, -2, d + 1);
    }
}

/* The latest version of each graph: {{graph =, version =, nodes = {{op =, inputs =, shape =, dtype =, where =}}}} */
static int cm_graphs(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    lua_newtable(L);
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_version *ver = latest_version(cm, k);
        if (!ver) continue;
        const kn_graph *g = &ver->g;
        lua_createtable(L, 0, 4);
        lua_pushinteger(L, k);
        lua_setfield(L, -2, "graph");
        lua_pushinteger(L, cm->cache.graphs[k].n_versions - 1);
        lua_setfield(L, -2, "version");
        lua_pushinteger(L, kn_graph_op_count(g));
        lua_setfield(L, -2, "op_count");
        lua_createtable(L, g->n_nodes, 0);
        for (int i = 0; i < g->n_nodes; i++) {
            const kn_node *nd = &g->nodes[i];
            lua_createtable(L, 0, 6);
            lua_pushstring(L, kn_node_op_name(nd));
            lua_setfield(L, -2, "op");
            if (nd->name[0]) {
                lua_pushstring(L, nd->name);
                lua_setfield(L, -2, "name");
            }
            lua_createtable(L, nd->n_in, 0);
            for (int j = 0; j < nd->n_in; j++) {
                lua_pushinteger(L, nd->in_node[j]);
                lua_seti(L, -2, j + 1);
            }
            lua_setfield(L, -2, "inputs");
            push_shape_list(L, &nd->out[0]);
            lua_setfield(L, -2, "shape");
            {
                luaL_Buffer b;
                luaL_buffinit(L, &b);
                luaL_addchar(&b, '{');
                for (int d = 0; d < nd->out[0].ndim; d++) {
                    char t[64];
                    kn_version_size_text(ver, i, 0, d, t, sizeof t);
                    if (d) luaL_addstring(&b, ", ");
                    luaL_addstring(&b, t);
                }
                luaL_addchar(&b, '}');
                luaL_pushresult(&b);
                lua_setfield(L, -2, "shape_text");
            }
            lua_pushstring(L, kn_dtype_name(nd->out[0].dtype));
            lua_setfield(L, -2, "dtype");
            lua_pushstring(L, nd->where[0] ? nd->where : "");
            lua_setfield(L, -2, "where");
            lua_pushstring(L, kn_part_name(nd->part));
            lua_setfield(L, -2, "part");
            lua_seti(L, -2, i + 1);
        }
        lua_setfield(L, -2, "nodes");
        lua_seti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    }
    return 1;
}

/* Until the compiler lands, each op node of a graph runs as one CPU kernel. */
/* The kernels of a compiled plan: name, kind, the op nodes it covers and,
 * for generated ones, the source. */
static void push_plan_kernels(lua_State *L, const kn_plan *p, int graph, int *n)
{
    for (int k = 0; k < p->code.fusion.prog.n_kernels; k++) {
        const kn_kernel *kn = &p->code.fusion.prog.kernels[k];
        bool gen = kn->kind == KN_KERNEL_POINTWISE || kn->kind == KN_KERNEL_ROW;
        lua_createtable(L, 0, 6);
        lua_pushstring(L, kn->name);
        lua_setfield(L, -2, "name");
        /* library and reference kernels: what runs them on this device
         * (cublaslt, cudnn, cuda templates, or the cpu) */
        lua_pushstring(L, gen ? "generated" : kn_profile_op_kind(p->device, (kn_op)p->g.nodes[kn->lib_node].op));
        lua_setfield(L, -2, "kind");
        if (kn_plan_epi_active(p, k)) { /* the next kernel runs in this one's library epilogue */
            lua_pushstring(L, p->code.fusion.prog.kernels[p->epi.kernel[k].into].name);
            lua_setfield(L, -2, "epilogue");
        }
        lua_pushstring(L, kn->kind == KN_KERNEL_POINTWISE ? "pointwise"
                          : kn->kind == KN_KERNEL_ROW     ? "row"
                          : kn->kind == KN_KERNEL_LIBRARY ? "library"
                                                          : "reference");
        lua_setfield(L, -2, "shape_kind");
        lua_createtable(L, kn->n_nodes, 0);
        int m = 0;
        for (int i = 0; i < kn->n_nodes; i++) {
            const kn_node *nd = &p->g.nodes[kn->nodes[i]];
            if (nd->op >= KN_OP_COUNT) continue;
            lua_pushstring(L, kn_node_op_name(nd));
            lua_seti(L, -2, ++m);
        }
        lua_setfield(L, -2, "ops");
        /* each op's source location, parallel to ops (an imported model's
         * node names: "model.onnx:node 'Conv_3' (Conv)") */
        lua_createtable(L, kn->n_nodes, 0);
        m = 0;
        for (int i = 0; i < kn->n_nodes; i++) {
            const kn_node *nd = &p->g.nodes[kn->nodes[i]];
            if (nd->op >= KN_OP_COUNT) continue;
            lua_pushstring(L, nd->where);
            lua_seti(L, -2, ++m);
        }
        lua_setfield(L, -2, "wheres");
        /* the part of a training step its first op belongs to */
        if (kn->n_nodes > 0) {
            lua_pushstring(L, kn_part_name(p->g.nodes[kn->nodes[0]].part));
            lua_setfield(L, -2, "part");
        }
        if (!gen && p->g.nodes[kn->lib_node].covers[0]) { /* a node a pass made from several ops */
            lua_pushstring(L, p->g.nodes[kn->lib_node].covers);
            lua_setfield(L, -2, "covers");
        }
        lua_pushinteger(L, graph);
        lua_setfield(L, -2, "graph");
        /* what timing rows (kiln.time) name this kernel by */
        lua_pushfstring(L, "%p#%d", (const void *)p, k);
        lua_setfield(L, -2, "key");
        if (gen) {
            char *src = NULL;
            if (kn_kernel_render(kn, KN_TARGET_C, &src) == KN_OK) {
                lua_pushstring(L, src);
                lua_setfield(L, -2, "source");
            }
            free(src);
        }
        lua_seti(L, -2, ++*n);
    }
}

/* The values plan p computed once, at its build (fold_once: inputs the
 * graph owns, named KN_ONCE_PREFIX...), appended to the table on top. */
static void push_plan_once(lua_State *L, const kn_plan *p, int graph, int *n)
{
    size_t len = strlen(KN_ONCE_PREFIX);
    for (int i = p->n_orig_inputs; i < p->g.n_inputs; i++) {
        const kn_graph_input *in = &p->g.inputs[i];
        if (strncmp(in->name, KN_ONCE_PREFIX, len) != 0) continue;
        lua_createtable(L, 0, 5);
        lua_pushstring(L, in->name + len);
        lua_setfield(L, -2, "ops");
        push_shape_list(L, &in->meta);
        lua_setfield(L, -2, "shape");
        lua_pushstring(L, kn_dtype_name(in->meta.dtype));
        lua_setfield(L, -2, "dtype");
        for (int j = 0; j < p->g.n_nodes; j++)
            if (p->g.nodes[j].op == KN_NODE_INPUT && p->g.nodes[j].input == i) {
                lua_pushstring(L, p->g.nodes[j].where);
                lua_setfield(L, -2, "where");
            }
        lua_pushinteger(L, graph);
        lua_setfield(L, -2, "graph");
        lua_seti(L, -2, ++*n);
    }
}

/* cm:kernels(): the kernels of the latest version of each graph, the ones
 * each call runs; a graph that runs op by op lists one reference kernel per
 * op. Its field `once` lists what the plans computed once at their build
 * instead (values of shapes and constants: a causal mask). */
static int cm_kernels(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    lua_newtable(L);
    lua_newtable(L);
    int n_once = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_plan *plan = kn_version_plan(latest_version(cm, k));
        if (plan) push_plan_once(L, plan, k, &n_once);
    }
    lua_setfield(L, -2, "once");
    int n = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_version *ver = latest_version(cm, k);
        if (!ver) continue;
        const kn_plan *plan = kn_version_plan(ver);
        if (plan) {
            push_plan_kernels(L, plan, k, &n);
            continue;
        }
        const kn_graph *g = &ver->g;
        for (int i = 0; i < g->n_nodes; i++) {
            const kn_node *nd = &g->nodes[i];
            if (nd->op >= KN_OP_COUNT || kn_op_kind_of((kn_op)nd->op) == KN_K_VIEW) continue;
            lua_createtable(L, 0, 4);
            lua_pushfstring(L, "k%d_%s", n + 1, kn_node_op_name(nd)); /* kN_: its number, as no compiler named it */
            lua_setfield(L, -2, "name");
            lua_pushstring(L, "cpu");
            lua_setfield(L, -2, "kind");
            lua_createtable(L, 1, 0);
            lua_pushstring(L, kn_node_op_name(nd));
            lua_seti(L, -2, 1);
            lua_setfield(L, -2, "ops");
            lua_pushinteger(L, k);
            lua_setfield(L, -2, "graph");
            lua_seti(L, -2, ++n);
        }
    }
    return 1;
}

/* cm:fusion(): every edge between two kernels of the latest versions'
 * plans, with the reason fusion kept them apart: {graph, from, to (kernel
 * names), producer, producer_where, consumer, consumer_where, view (the
 * view op read through, or nil), reason}. */
static int cm_fusion(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    lua_newtable(L);
    int n = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_plan *plan = kn_version_plan(latest_version(cm, k));
        if (!plan) continue;
        const kn_fusion *f = &plan->code.fusion;
        for (int e = 0; e < f->n_edges; e++) {
            const kn_fuse_edge *ed = &f->edges[e];
            const kn_node *pn = &plan->g.nodes[ed->producer], *cn = &plan->g.nodes[ed->consumer];
            char reason[KN_FUSE_REASON_MAX + 160];
            kn_plan_edge_reason(plan, ed, reason, sizeof reason);
            lua_createtable(L, 0, 9);
            lua_pushinteger(L, k);
            lua_setfield(L, -2, "graph");
            lua_pushstring(L, f->prog.kernels[ed->from_kernel].name);
            lua_setfield(L, -2, "from");
            lua_pushstring(L, f->prog.kernels[ed->to_kernel].name);
            lua_setfield(L, -2, "to");
            lua_pushstring(L, kn_node_op_name(pn));
            lua_setfield(L, -2, "producer");
            lua_pushstring(L, pn->where);
            lua_setfield(L, -2, "producer_where");
            lua_pushstring(L, kn_node_op_name(cn));
            lua_setfield(L, -2, "consumer");
            lua_pushstring(L, cn->where);
            lua_setfield(L, -2, "consumer_where");
            if (ed->view >= 0) {
                lua_pushstring(L, kn_node_op_name(&plan->g.nodes[ed->view]));
                lua_setfield(L, -2, "view");
            }
            lua_pushstring(L, reason);
            lua_setfield(L, -2, "reason");
            lua_seti(L, -2, ++n);
        }
    }
    return 1;
}

/* cm:stats() fields about the plans of the latest versions: kernels,
 * library epilogues, values computed once, copies outside the kernels,
 * and the peak memory of the plans and of running op by op. */
static void set_plan_stats(lua_State *L, const kn_compiled *cm, const kn_compile_stats *s)
{
    int kernels = 0, folded = 0;
    int64_t eager_peak = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_version *ver = latest_version(cm, k);
        if (!ver) continue;
        const kn_plan *plan = kn_version_plan(ver);
        if (plan) {
            kernels += plan->code.fusion.prog.n_kernels;
            folded += plan->epi.n_folded;
        }
        else /* op by op: one reference kernel per op, views aside (as cm:kernels) */
            for (int i = 0; i < ver->g.n_nodes; i++)
                kernels += ver->g.nodes[i].op < KN_OP_COUNT && kn_op_kind_of((kn_op)ver->g.nodes[i].op) != KN_K_VIEW;
        /* op by op, every value of a graph is alive until the graph ends */
        int64_t bytes = 0;
        for (int i = 0; i < ver->g.n_nodes; i++)
            if (ver->g.nodes[i].op < KN_OP_COUNT && kn_op_kind_of((kn_op)ver->g.nodes[i].op) != KN_K_VIEW)
                bytes += kn_numel_of(ver->g.nodes[i].out[0].ndim, ver->g.nodes[i].out[0].shape) *
                         (int64_t)kn_dtype_size(ver->g.nodes[i].out[0].dtype);
        if (bytes > eager_peak) eager_peak = bytes;
    }
    lua_pushinteger(L, (lua_Integer)s->peak_bytes);
    lua_setfield(L, -2, "peak_bytes");
    lua_pushinteger(L, (lua_Integer)eager_peak);
    lua_setfield(L, -2, "eager_peak_bytes");
    lua_pushinteger(L, s->plans_built);
    lua_setfield(L, -2, "plans");
    lua_pushinteger(L, kernels);
    lua_setfield(L, -2, "kernels");
    /* pointwise kernels (bias, relu, residual) run in a matmul's library epilogue */
    lua_pushinteger(L, folded);
    lua_setfield(L, -2, "library_epilogues");
    int once = 0; /* values computed once at a plan's build (fold_once) */
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_plan *plan = kn_version_plan(latest_version(cm, k));
        for (int i = plan ? plan->n_orig_inputs : 0; plan && i < plan->g.n_inputs; i++)
            once += strncmp(plan->g.inputs[i].name, KN_ONCE_PREFIX, strlen(KN_ONCE_PREFIX)) == 0;
    }
    lua_pushinteger(L, once);
    lua_setfield(L, -2, "computed_once");
    /* copies outside the kernels: reshapes of layouts their strides cannot
     * express; and library calls that write their value permuted instead */
    int view_copies = 0, permuted = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_plan *plan = kn_version_plan(latest_version(cm, k));
        view_copies += plan ? plan->code.fusion.n_view_copies : 0;
        permuted += plan ? plan->code.fusion.n_permuted : 0;
    }
    lua_pushinteger(L, view_copies);
    lua_setfield(L, -2, "view_copies");
    lua_pushinteger(L, permuted);
    lua_setfield(L, -2, "permuted_outputs");
}

/* cm:stats().compile_s: where compile time went, and the kernels it
 * generated and found cached. */
static void push_compile_times(lua_State *L, const kn_compile_stats *s)
{
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, s->capture_s);
    lua_setfield(L, -2, "capture");
    lua_pushnumber(L, s->passes_s);
    lua_setfield(L, -2, "passes");
    lua_pushnumber(L, s->codegen_s);
    lua_setfield(L, -2, "codegen");
    lua_pushnumber(L, s->backend_s);
    lua_setfield(L, -2, "backend");
    lua_pushinteger(L, s->kernels_generated);
    lua_setfield(L, -2, "kernels");
    lua_pushinteger(L, s->kernels_cached);
    lua_setfield(L, -2, "kernels_cached");
}

/* {total = seconds, startup = ..., capture = ..., ...}: a call phase by
 * phase (kn_phase.h), the phases adding up to total. */
static void push_phases(lua_State *L, const double *phase_s, double total)
{
    lua_createtable(L, 0, KN_PHASE_COUNT + 1);
    for (int i = 0; i < KN_PHASE_COUNT; i++) {
        lua_pushnumber(L, phase_s[i]);
        lua_setfield(L, -2, kn_phase_key((kn_phase)i));
    }
    lua_pushnumber(L, total);
    lua_setfield(L, -2, "total");
}

static int cm_stats(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    const kn_compile_stats *s = &cm->stats;
    lua_createtable(L, 0, 16);
    int versions = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) versions += cm->cache.graphs[k].n_versions;
    lua_pushinteger(L, cm->cache.n_graphs);
    lua_setfield(L, -2, "graphs");
    lua_pushinteger(L, versions);
    lua_setfield(L, -2, "versions");
    lua_pushinteger(L, s->calls);
    lua_setfield(L, -2, "calls");
    lua_pushinteger(L, s->graphs_run);
    lua_setfield(L, -2, "graphs_run");
    set_plan_stats(L, cm, s);
    push_compile_times(L, s);
    lua_setfield(L, -2, "compile_s");
    lua_pushinteger(L, (lua_Integer)s->device_peak_bytes);
    lua_setfield(L, -2, "device_peak_bytes");
    if (s->first_call_s > 0) {
        push_phases(L, s->first_call_phase_s, s->first_call_s);
        lua_setfield(L, -2, "first_call");
    }
    /* the graph-version cache; the persistent kernel cache arrives with the compiler */
    lua_pushinteger(L, s->cache_hits);
    lua_setfield(L, -2, "version_hits");
    lua_pushinteger(L, s->cache_misses);
    lua_setfield(L, -2, "version_misses");
    kn_jit_stats js; /* the persistent kernel cache is shared by the process */
    kn_jit_stats_get(&js);
    lua_pushinteger(L, js.hits);
    lua_setfield(L, -2, "cache_hits");
    lua_pushinteger(L, js.misses);
    lua_setfield(L, -2, "cache_misses");
    lua_pushnumber(L, s->autotune_s);
    lua_setfield(L, -2, "autotune_s");
    lua_pushinteger(L, s->autotune_cache_hits);
    lua_setfield(L, -2, "autotune_cache_hits");
    lua_pushinteger(L, s->autotune_kernels);
    lua_setfield(L, -2, "autotune_kernels");
    lua_pushinteger(L, s->autotune_candidates);
    lua_setfield(L, -2, "autotune_candidates");
    if (s->autotune_interrupted || s->autotune_out_of_budget) {
        lua_pushstring(L, s->autotune_interrupted ? "interrupted" : "budget");
        lua_setfield(L, -2, "autotune_stopped");
    }
    lua_pushinteger(L, (lua_Integer)s->replays);
    lua_setfield(L, -2, "replays");
    lua_pushnumber(L, s->replay_launch_s);
    lua_setfield(L, -2, "replay_launch_s");
    lua_pushnumber(L, s->replay_copy_in_s);
    lua_setfield(L, -2, "replay_copy_in_s");
    lua_pushnumber(L, s->replay_copy_out_s);
    lua_setfield(L, -2, "replay_copy_out_s");
    lua_pushnumber(L, s->replay_out_alloc_s);
    lua_setfield(L, -2, "replay_out_alloc_s");
    lua_pushinteger(L, s->recorded_writes);
    lua_setfield(L, -2, "recorded_writes");
    /* "yes" once a call replayed a recording; else why not (or not yet) */
    if (s->cuda_graph_why[0]) lua_pushfstring(L, "no: %s", s->cuda_graph_why);
    else if (s->replays) lua_pushstring(L, "yes");
    else if (kn_mode_records(cm->id.mode)) lua_pushstring(L, "not recorded yet");
    else lua_pushfstring(L, "no: mode %s does not record", cm->id.mode);
    lua_setfield(L, -2, "cuda_graph");
    lua_pushinteger(L, s->eager_fallbacks);
    lua_setfield(L, -2, "eager_fallbacks");
    compiled_ud *u = kn_lua_check_compiled(L, 1);
    lua_pushinteger(L, u->direct_replays);
    lua_setfield(L, -2, "direct_replays");
    lua_pushnumber(L, u->replay_run_s);
    lua_setfield(L, -2, "replay_run_s");
    lua_pushnumber(L, u->replay_guard_s);
    lua_setfield(L, -2, "replay_guard_s");
    lua_pushinteger(L, (lua_Integer)u->rp.n_walk);
    lua_setfield(L, -2, "replay_guard_entries");
    lua_pushstring(L, u->rp.valid ? "yes" : u->no_replay[0] ? u->no_replay : "not called yet");
    lua_setfield(L, -2, "replayable");
    lua_pushinteger(L, (lua_Integer)cm->cache.n_breaks);
    lua_setfield(L, -2, "breaks");
    lua_pushstring(L, cm->id.name); /* "forward": how messages name the function */
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, (lua_Integer)cm->cache.n_recompiles);
    lua_setfield(L, -2, "recompiles");
    return 1;
}

/* Whether graph g has an op node of this part. */
static bool has_part(const kn_graph *g, int part)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op < KN_OP_COUNT && g->nodes[i].part == part) return true;
    return false;
}

/* last_call's forward_graphs and backward_graphs: the graphs of the
 * latest call with forward ops, and with backward ops (a joint graph of a
 * training step counts in both). */
static void push_part_counts(lua_State *L, const kn_compiled *cm)
{
    const kn_capture *cap = &cm->cap;
    int fwd = 0, bwd = 0, n = cap->n_graphs < 256 ? cap->n_graphs : 256;
    for (int k = 0; k < n && k < cm->cache.n_graphs; k++) {
        int v = cap->graph_version[k];
        if (v < 0 || v >= cm->cache.graphs[k].n_versions) continue;
        const kn_graph *g = &cm->cache.graphs[k].versions[v].g;
        fwd += has_part(g, KN_PART_FORWARD);
        bwd += has_part(g, KN_PART_BACKWARD);
    }
    lua_pushinteger(L, fwd);
    lua_setfield(L, -2, "forward_graphs");
    lua_pushinteger(L, bwd);
    lua_setfield(L, -2, "backward_graphs");
}

/* One entry of cm:saved(): output `out` of node i of graph k, which a
 * backward node reads. */
static int64_t push_saved(lua_State *L, int k, const kn_graph *g, int i, int out)
{
    const kn_node *nd = &g->nodes[i];
    const kn_meta *m = &nd->out[out];
    int64_t numel = 1;
    for (int d = 0; d < m->ndim; d++) numel *= m->shape[d];
    int64_t bytes = numel * (int64_t)kn_dtype_size(m->dtype);
    lua_createtable(L, 0, 7);
    lua_pushinteger(L, k);
    lua_setfield(L, -2, "graph");
    lua_pushstring(L, kn_node_op_name(nd));
    lua_setfield(L, -2, "op");
    if (nd->op == KN_NODE_INPUT) {
        lua_pushstring(L, g->inputs[nd->input].name);
        lua_setfield(L, -2, "name");
    }
    push_shape_list(L, m);
    lua_setfield(L, -2, "shape");
    lua_pushstring(L, kn_dtype_name(m->dtype));
    lua_setfield(L, -2, "dtype");
    lua_pushinteger(L, bytes);
    lua_setfield(L, -2, "bytes");
    lua_pushstring(L, nd->where);
    lua_setfield(L, -2, "where");
    return bytes;
}

/* Whether output o of node i of graph g is read by a backward op of g. */
static bool read_by_backward(const kn_graph *g, int i, int o)
{
    return kn_graph_first_backward_reader(g, i, o, g->n_nodes, NULL) >= 0;
}

/* cm:saved(): the partitioner's ledger: every forward value a backward op
 * of the same graph reads (an op's output, or an input: a parameter, an
 * argument), and every output of a graph of the latest call that a tape
 * node saved, kept for a backward in a later graph or after the call
 * (`kept` set; a later graph reads it as an input, not listed again),
 * with op, shape, dtype, bytes and source line; `bytes`, their sum; and
 * `recomputed`, the forward ops the recompute pass computes again in the
 * backward instead of keeping (kiln.config.activation_memory_budget below
 * 1, or a widening cast of a value kept anyway), each with its reason. */
/* The graph cm:saved() reads for graph k's version: its plan's, when the
 * recompute pass copied forward ops into its backward (the values it
 * keeps are then the plan's), else the captured one. */
static const kn_graph *ledger_graph(const kn_version *ver)
{
    const kn_plan *p = kn_version_plan(ver);
    if (p)
        for (int i = 0; i < p->g.n_nodes; i++)
            if (p->g.nodes[i].recomputed) return &p->g;
    return &ver->g;
}

static int cm_saved(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    const kn_capture *cap = &cm->cap;
    lua_createtable(L, 0, 3);
    lua_newtable(L);
    int64_t total = 0;
    int n = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_version *ver = latest_version(cm, k);
        if (!ver) continue;
        const kn_graph *g = ledger_graph(ver);
        for (int i = 0; i < g->n_nodes; i++) {
            const kn_node *nd = &g->nodes[i];
            if (nd->part != KN_PART_FORWARD || nd->op == KN_NODE_CONST) continue;
            /* a value an earlier graph kept is listed there, below */
            if (nd->op == KN_NODE_INPUT && g->inputs[nd->input].kind == KN_IN_GRAPH_OUTPUT) continue;
            for (int o = 0; o < nd->n_out; o++) {
                if (!read_by_backward(g, i, o)) continue;
                total += push_saved(L, k, g, i, o);
                lua_seti(L, -2, ++n);
            }
        }
    }
    for (int i = 0; i < cap->n_kept; i++) {
        const struct kn_kept_value *kv = &cap->kept[i];
        int v = kv->graph < 256 && kv->graph < cap->n_graphs ? cap->graph_version[kv->graph] : -1;
        if (v < 0 || kv->graph >= cm->cache.n_graphs || v >= cm->cache.graphs[kv->graph].n_versions) continue;
        const kn_graph *g = &cm->cache.graphs[kv->graph].versions[v].g;
        if (kv->node >= g->n_nodes) continue;
        total += push_saved(L, kv->graph, g, kv->node, kv->out);
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "kept");
        lua_seti(L, -2, ++n);
    }
    lua_setfield(L, -2, "values");
    lua_pushinteger(L, total);
    lua_setfield(L, -2, "bytes");
    /* the forward ops the recompute pass computes again in the backward
     * (kiln.config.activation_memory_budget below 1), with the reason */
    lua_newtable(L);
    int nr = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_version *ver = latest_version(cm, k);
        if (!ver) continue;
        const kn_graph *g = ledger_graph(ver);
        for (int i = 0; i < g->n_nodes; i++) {
            if (!g->nodes[i].recomputed) continue;
            push_saved(L, k, g, i, 0);
            if (g->nodes[i].recomputed == KN_RECOMPUTED_WIDENING_CAST)
                lua_pushfstring(L, "a widening cast of a value the backward keeps anyway: computed again before "
                                   "its first backward reader, not kept from the forward (at any "
                                   "kiln.config.activation_memory_budget: the narrow value is kept already)");
            else
                lua_pushfstring(L, "a pointwise %s of values the backward keeps anyway: computed again before its "
                                   "first backward reader, not kept from the forward (kiln.config."
                                   "activation_memory_budget below 1 when the plan was built)",
                                kn_node_op_name(&g->nodes[i]));
            lua_setfield(L, -2, "reason");
            lua_seti(L, -2, ++nr);
        }
    }
    lua_setfield(L, -2, "recomputed");
    return 1;
}

/* cm:last_call(): what the latest call did, for kiln.explain:
 * {graph_count, graph_break_count, op_count, forward_graphs, backward_graphs, ops_per_graph,
 * break_reasons, compile_s = {...}} */
static int cm_last_call(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    const kn_capture *cap = &cm->cap;
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, cap->n_graphs);
    lua_setfield(L, -2, "graph_count");
    lua_pushinteger(L, cap->n_breaks);
    lua_setfield(L, -2, "graph_break_count");
    int ops = 0, n = cap->n_graphs < 256 ? cap->n_graphs : 256;
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        ops += cap->ops_per_graph[i];
        lua_pushinteger(L, cap->ops_per_graph[i]);
        lua_seti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "ops_per_graph");
    lua_pushinteger(L, ops);
    lua_setfield(L, -2, "op_count");
    push_part_counts(L, cm);
    lua_createtable(L, cap->n_breaks, 0);
    for (int i = 0; i < cap->n_breaks; i++) {
        push_break(L, &cap->call_breaks[i]);
        lua_seti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "break_reasons");
    lua_createtable(L, 0, 8);
    lua_pushnumber(L, cap->capture_s);
    lua_setfield(L, -2, "capture");
    lua_pushnumber(L, cap->passes_s);
    lua_setfield(L, -2, "passes");
    lua_pushnumber(L, cap->codegen_s);
    lua_setfield(L, -2, "codegen");
    lua_pushnumber(L, cap->backend_s);
    lua_setfield(L, -2, "backend");
    /* capture plus everything compiling took (guards, version lookup,
     * plan builds): the phases above add up to at most this */
    lua_pushnumber(L, cap->capture_s + cap->compile_s);
    lua_setfield(L, -2, "total");
    lua_pushinteger(L, cap->kernels_generated);
    lua_setfield(L, -2, "kernels");
    lua_pushinteger(L, cap->kernels_cached);
    lua_setfield(L, -2, "kernels_cached");
    lua_setfield(L, -2, "compile_s");
    if (cap->call_s > 0) {
        push_phases(L, cap->call_phase_s, cap->call_s);
        lua_setfield(L, -2, "phases");
    }
    return 1;
}

/* cm:source([target]): the generated program of the latest plans of all
 * graphs as one translation unit, "c" (default) or "cuda". Kernel names
 * restart at k0 in each graph, so kernels of graph K > 0 are renamed gK_... */
static int cm_source(lua_State *L)
{
    kn_compiled *cm = kn_lua_check_compiled(L, 1)->cm;
    static const char *const targets[] = {"c", "cuda", NULL};
    int t = lua_isnoneornil(L, 2) ? 0 : kn_lua_check_name(L, 2, "source", "target", targets);
    int total = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_plan *plan = latest_version(cm, k) ? kn_version_plan(latest_version(cm, k)) : NULL;
        if (plan) total += plan->code.fusion.prog.n_kernels;
    }
    kn_kprogram all = {0, calloc((size_t)total + 1, sizeof(kn_kernel))};
    if (!all.kernels) return luaL_error(L, "out of host memory");
    for (int k = 0; k < cm->cache.n_graphs; k++) {
        const kn_plan *plan = latest_version(cm, k) ? kn_version_plan(latest_version(cm, k)) : NULL;
        for (int i = 0; plan && i < plan->code.fusion.prog.n_kernels; i++) {
            kn_kernel *kn = &all.kernels[all.n_kernels++];
            *kn = plan->code.fusion.prog.kernels[i];
            if (k > 0) {
                char name[sizeof kn->name];
                snprintf(name, sizeof name, "g%d_%.60s", k % 1000, kn->name);
                snprintf(kn->name, sizeof kn->name, "%s", name);
            }
        }
    }
    char *src = NULL;
    kn_status st = kn_kprogram_render(&all, t ? KN_TARGET_CUDA : KN_TARGET_C, &src);
    free(all.kernels);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_pushstring(L, src);
    free(src);
    return 1;
}

void kn_lua_compiled_inspect_methods(lua_State *L)
{
    static const luaL_Reg methods[] = {{"breaks", cm_breaks},   {"recompiles", cm_recompiles},
                                       {"guards", cm_guards},   {"graphs", cm_graphs},
                                       {"kernels", cm_kernels}, {"stats", cm_stats},
                                       {"last_call", cm_last_call}, {"source", cm_source},
                                       {"fusion", cm_fusion},   {"saved", cm_saved},
                                       {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
}
