/* kn_viz_model: reading a kn_compiled into the lists a view draws (see
 * kn_viz_model.h): the latest version of each graph (as cm:graphs() and
 * cm:kernels() show them), its nodes, its kernels with their timings, the
 * breaks between graphs, and the repeated run that {collapse = true} draws
 * once; and the texts the drawing and the outline share (sizes in bytes,
 * the host's share of a call). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_profile.h"
#include "kn_viz_model.h"

void kn_viz_fmt_bytes(double bytes, char *buf, size_t size)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, size, "%.0f B", bytes);
    else snprintf(buf, size, bytes >= 100 ? "%.0f %s" : "%.1f %s", bytes, unit[u]);
}

double kn_viz_host_pct(const kn_viz_model *m)
{
    double call = m->host_us + m->kernel_us;
    return call > 0 ? 100.0 * m->host_us / call : 0;
}

void kn_viz_host_text(kn_strbuf *b, const kn_viz_model *m, const char *newline)
{
    double pct = kn_viz_host_pct(m);
    kn_strbuf_printf(b, "host overhead %.1f us per call (%.0f%% of the call)", m->host_us, pct);
    if (pct >= KN_VIZ_HOST_BOUND_PCT)
        kn_strbuf_printf(b, "%shost-bound: %.0f%% of each call is the host's; the heat shares out the kernels' %.0f%%",
                         newline, pct, 100 - pct);
}

/* FNV-1a, folding in one string (NULL: a separator). */
static unsigned hash_str(unsigned h, const char *s)
{
    if (!s) s = "\x1f";
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return (h ^ 0x1fu) * 16777619u;
}

static const kn_version *latest_version(const kn_compiled *cm, int k)
{
    const kn_graph_cache *gc = &cm->cache.graphs[k];
    return gc->n_versions ? &gc->versions[gc->n_versions - 1] : NULL;
}

static void shape_text(const kn_meta *m, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "{");
    for (int d = 0; d < m->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)m->shape[d]);
    if (n < size) snprintf(buf + n, size - n, "}");
}

/* The version's sizes as text: symbolic dims by their expression ("s0*8"). */
static void version_shape_text(const kn_version *v, int node, int out, char *buf, size_t size)
{
    const kn_meta *m = &v->g.nodes[node].out[out];
    size_t n = (size_t)snprintf(buf, size, "{");
    for (int d = 0; d < m->ndim && n < size; d++) {
        char t[64];
        kn_version_size_text(v, node, out, d, t, sizeof t);
        n += (size_t)snprintf(buf + n, size - n, "%s%s", d ? ", " : "", t);
    }
    if (n < size) snprintf(buf + n, size - n, "}");
}

static double meta_bytes(const kn_meta *m)
{
    return (double)kn_numel_of(m->ndim, m->shape) * (double)kn_dtype_size(m->dtype);
}

static kn_viz_vnode *add_node(kn_viz_vgraph *vg, kn_viz_vkind kind)
{
    if (vg->n_nodes == vg->cap_nodes) {
        int cap = vg->cap_nodes ? vg->cap_nodes * 2 : 32;
        kn_viz_vnode *p = realloc(vg->nodes, sizeof *p * (size_t)cap);
        if (!p) return NULL;
        vg->nodes = p;
        vg->cap_nodes = cap;
    }
    kn_viz_vnode *v = &vg->nodes[vg->n_nodes++];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->kernel = -1;
    v->alias = -1;
    v->out_number = -1;
    for (int q = 0; q < KN_MAX_INPUTS; q++) v->in_reason[q] = -1;
    return v;
}

static kn_viz_vkind input_vkind(kn_input_kind k)
{
    switch (k) {
    case KN_IN_ARG: return KN_VN_ARG;
    case KN_IN_PARAM: return KN_VN_PARAM;
    case KN_IN_GRAPH_OUTPUT: return KN_VN_PREV;
    default: return KN_VN_TENSOR;
    }
}

/* The values the version's latest plan entry hands back (NULL when it has
 * none: it never ran through a plan). */
static const struct kn_plan_entry *latest_entry(const kn_version *v)
{
    return v->n_plans ? &v->plans[v->n_plans - 1] : NULL;
}

/* One node of graph g as a drawn node (op, input or constant); map gives
 * the drawn index of every earlier node (-1: not drawn). */
static kn_viz_vnode *node_common(kn_viz_vgraph *vg, const kn_graph *g, int i, const int *map, kn_viz_vkind kind)
{
    const kn_node *nd = &g->nodes[i];
    kn_viz_vnode *v = add_node(vg, kind);
    if (!v) return NULL;
    if (nd->op == KN_NODE_INPUT) {
        const kn_graph_input *in = &g->inputs[nd->input];
        snprintf(v->op, sizeof v->op, "input");
        snprintf(v->name, sizeof v->name, "%s", in->name);
    }
    else if (nd->op == KN_NODE_CONST) {
        snprintf(v->op, sizeof v->op, "const");
        snprintf(v->name, sizeof v->name, "%s", nd->name);
        v->value = nd->value;
    }
    else {
        kn_node_label(nd, v->op, sizeof v->op); /* "gather_scatter+relu": its epilogue shown */
        v->n_in = nd->n_in;
        for (int j = 0; j < nd->n_in; j++) v->in[j] = map[nd->in_node[j]];
    }
    snprintf(v->dtype, sizeof v->dtype, "%s", kn_dtype_name(nd->out[0].dtype));
    snprintf(v->where, sizeof v->where, "%s", nd->where);
    if (kind == KN_VN_OP || kind == KN_VN_VIEW) v->part = nd->part;
    shape_text(&nd->out[0], v->shape, sizeof v->shape);
    v->bytes = meta_bytes(&nd->out[0]);
    unsigned h = hash_str(2166136261u, v->op);
    h = hash_str(h, v->where);
    h = hash_str(h, v->shape);
    h = hash_str(h, v->dtype);
    v->sig = hash_str(h, kind == KN_VN_CONST ? v->name : NULL) ^ (unsigned)kind;
    return v;
}

/* Output nodes for the values the plan entry hands back: `want` in the
 * numbering of g (the version's graph), `at` the same values in the drawn
 * graph's numbering (map: drawn index per node). Outputs are numbered among
 * op values, as "graph K output N" counts them. */
static kn_status add_outputs(kn_viz_vgraph *vg, const kn_graph *g, const kn_plan_value *want,
                             const kn_plan_value *at, int n, const int *map, const kn_version *ver)
{
    int number = 0;
    for (int i = 0; i < n; i++) {
        if (g->nodes[want[i].node].op >= KN_OP_COUNT) continue; /* an input handed back as it came */
        int src = map[at[i].node];
        int num = number++;
        if (src < 0) continue;
        kn_viz_vnode *v = add_node(vg, KN_VN_OUTPUT);
        if (!v) return kn_error(KN_ERR_OOM, "out of host memory drawing a graph");
        snprintf(v->op, sizeof v->op, "output");
        snprintf(v->name, sizeof v->name, "output %d", num);
        v->out_number = num;
        v->n_in = 1;
        v->in[0] = src;
        const kn_meta *m = &g->nodes[want[i].node].out[want[i].out];
        if (ver) version_shape_text(ver, want[i].node, want[i].out, v->shape, sizeof v->shape);
        else shape_text(m, v->shape, sizeof v->shape);
        snprintf(v->dtype, sizeof v->dtype, "%s", kn_dtype_name(m->dtype));
        v->bytes = meta_bytes(m);
    }
    return KN_OK;
}

/* The captured view of graph k: the version's nodes as traced. */
static kn_status build_captured(const kn_version *ver, kn_viz_vgraph *vg)
{
    const kn_graph *g = &ver->g;
    int *map = malloc(sizeof *map * (size_t)(g->n_nodes + 1));
    if (!map) return kn_error(KN_ERR_OOM, "out of host memory drawing a graph");
    kn_status st = KN_OK;
    for (int i = 0; i < g->n_nodes && st == KN_OK; i++) {
        const kn_node *nd = &g->nodes[i];
        kn_viz_vkind kind = nd->op == KN_NODE_INPUT   ? input_vkind(g->inputs[nd->input].kind)
                            : nd->op == KN_NODE_CONST ? KN_VN_CONST
                                                      : KN_VN_OP;
        map[i] = vg->n_nodes;
        kn_viz_vnode *v = node_common(vg, g, i, map, kind);
        if (!v) st = kn_error(KN_ERR_OOM, "out of host memory drawing a graph");
        else version_shape_text(ver, i, 0, v->shape, sizeof v->shape);
    }
    const struct kn_plan_entry *e = latest_entry(ver);
    if (st == KN_OK && e) st = add_outputs(vg, g, e->want, e->want, e->n_want, map, ver);
    if (st == KN_OK && !e) /* never ran through a plan: the values nothing reads */
        for (int i = 0; i < g->n_nodes && st == KN_OK; i++) {
            if (g->nodes[i].op >= KN_OP_COUNT) continue;
            bool read = false;
            for (int j = i + 1; j < g->n_nodes && !read; j++)
                for (int q = 0; q < g->nodes[j].n_in; q++) read |= g->nodes[j].in_node[q] == i;
            if (!read) {
                kn_plan_value w = {i, 0};
                st = add_outputs(vg, g, &w, &w, 1, map, ver);
            }
        }
    free(map);
    return st;
}

/* Name-and-order match of a kernel with a timing row, for rows without a
 * key of this plan (timings given by hand, or of another process). */
static const kn_viz_timing *find_timing(const kn_viz_opts *o, const kn_plan *p, int k, const char *name, bool *used)
{
    char key[64];
    snprintf(key, sizeof key, "%p#%d", (const void *)p, k);
    for (int i = 0; i < o->n_timings; i++)
        if (!used[i] && strcmp(o->timings[i].key, key) == 0) {
            used[i] = true;
            return &o->timings[i];
        }
    for (int i = 0; i < o->n_timings; i++)
        if (!used[i] && !o->timings[i].key[0] && strcmp(o->timings[i].name, name) == 0) {
            used[i] = true;
            return &o->timings[i];
        }
    return NULL;
}

static kn_status alloc_kernels(kn_viz_vgraph *vg, int n)
{
    vg->kernels = calloc((size_t)n + 1, sizeof *vg->kernels);
    if (!vg->kernels) return kn_error(KN_ERR_OOM, "out of host memory drawing kernels");
    vg->n_kernels = n;
    for (int k = 0; k < n; k++) vg->kernels[k].epilogue_of = -1;
    return KN_OK;
}

/* The fused view of a graph that has a plan: the optimized graph, each
 * computed node in the kernel that computes it. */
static kn_status build_plan(const kn_version *ver, const kn_plan *p, const kn_viz_opts *o, bool *used,
                            kn_viz_vgraph *vg)
{
    const kn_graph *g = &p->g;
    const kn_fusion *f = &p->code.fusion;
    int *map = malloc(sizeof *map * (size_t)(g->n_nodes + 1));
    if (!map) return kn_error(KN_ERR_OOM, "out of host memory drawing a graph");
    kn_status st = alloc_kernels(vg, f->prog.n_kernels);
    for (int i = 0; i < g->n_nodes && st == KN_OK; i++) {
        const kn_node *nd = &g->nodes[i];
        map[i] = -1;
        kn_disp d = i < f->n_nodes ? f->disp[i] : KN_D_DEAD;
        if (d == KN_D_DEAD || d == KN_D_CONST || nd->op == KN_NODE_CONST) continue;
        kn_viz_vkind kind = KN_VN_OP;
        if (nd->op == KN_NODE_INPUT)
            kind = nd->input >= p->n_orig_inputs ? KN_VN_TENSOR : input_vkind(g->inputs[nd->input].kind);
        else if (d == KN_D_VIEW) kind = KN_VN_VIEW;
        map[i] = vg->n_nodes;
        kn_viz_vnode *v = node_common(vg, g, i, map, kind);
        if (!v) {
            st = kn_error(KN_ERR_OOM, "out of host memory drawing a graph");
            break;
        }
        if (nd->op == KN_NODE_INPUT && nd->input >= p->n_orig_inputs) snprintf(v->name, sizeof v->name, "folded constant");
        if (kind == KN_VN_OP) v->kernel = f->kernel[i];
        v->copies = (kind == KN_VN_VIEW && f->copies && f->copies[i]) || (kind == KN_VN_OP && nd->op == KN_OP_CONTIGUOUS && d == KN_D_ROOT);
    }
    /* each edge between kernels: its reason, on the drawn edge into the
     * consumer (from the producer, or from the view the consumer reads) */
    if (st == KN_OK && f->n_edges) {
        vg->reasons = calloc((size_t)f->n_edges, sizeof *vg->reasons);
        if (!vg->reasons) st = kn_error(KN_ERR_OOM, "out of host memory drawing a graph");
    }
    for (int e = 0; st == KN_OK && e < f->n_edges; e++) {
        const kn_fuse_edge *ed = &f->edges[e];
        int from = map[ed->view >= 0 ? ed->view : ed->producer], to = map[ed->consumer];
        if (from < 0 || to < 0) continue;
        struct kn_viz_reason *r = &vg->reasons[vg->n_reasons];
        r->from = ed->from_kernel;
        r->to = ed->to_kernel;
        kn_plan_edge_reason(p, ed, r->text, sizeof r->text);
        kn_viz_vnode *v = &vg->nodes[to];
        for (int q = 0; q < v->n_in; q++)
            if (v->in[q] == from) v->in_reason[q] = vg->n_reasons;
        vg->n_reasons++;
    }
    for (int k = 0; k < f->prog.n_kernels && st == KN_OK; k++) {
        const kn_kernel *kn = &f->prog.kernels[k];
        kn_viz_vkernel *vk = &vg->kernels[k];
        bool gen = kn->kind == KN_KERNEL_POINTWISE || kn->kind == KN_KERNEL_ROW;
        snprintf(vk->name, sizeof vk->name, "%s", kn->name);
        snprintf(vk->kind, sizeof vk->kind, "%s",
                 gen ? "generated" : kn_profile_op_kind(p->device, (kn_op)g->nodes[kn->lib_node].op));
        snprintf(vk->group, sizeof vk->group, "%s",
                 kn->kind == KN_KERNEL_POINTWISE ? "pointwise"
                 : kn->kind == KN_KERNEL_ROW     ? "row"
                 : kn->kind == KN_KERNEL_LIBRARY ? "library"
                                                 : "reference");
        if (kn_plan_epi_active(p, k) && p->epi.kernel[k].into < vg->n_kernels)
            vg->kernels[p->epi.kernel[k].into].epilogue_of = k;
        const kn_viz_timing *t = o->timings ? find_timing(o, p, k, kn->name, used) : NULL;
        if (t) {
            vk->timed = true;
            vk->us = t->median_us;
            vk->pct = t->pct;
            vk->roof = t->roof_pct;
            vk->calls = t->calls;
        }
    }
    const struct kn_plan_entry *e = latest_entry(ver);
    if (st == KN_OK && e && e->plan == p && e->n_want == p->n_outputs)
        st = add_outputs(vg, &ver->g, e->want, p->outputs, p->n_outputs, map, NULL);
    free(map);
    return st;
}

/* The fused view of a graph without a plan: it runs op by op, one cpu
 * kernel per op (views aside), named as cm:kernels() names them (kN_: its
 * number, after the `before` kernels of earlier graphs). */
static kn_status build_op_by_op(const kn_compiled *cm, const kn_version *ver, int before, kn_viz_vgraph *vg)
{
    const kn_graph *g = &ver->g;
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].op < KN_OP_COUNT && kn_op_kind_of((kn_op)g->nodes[i].op) != KN_K_VIEW;
    KN_TRY(build_captured(ver, vg));
    KN_TRY(alloc_kernels(vg, n));
    int k = 0;
    for (int i = 0; i < vg->n_nodes; i++) {
        kn_viz_vnode *v = &vg->nodes[i];
        if (v->kind == KN_VN_CONST) v->hidden = true; /* numbers live inside the ops' kernels */
        if (v->kind != KN_VN_OP) continue;
        if (kn_op_kind_of(kn_op_by_name(v->op)) == KN_K_VIEW) {
            v->kind = KN_VN_VIEW;
            continue;
        }
        kn_viz_vkernel *vk = &vg->kernels[k];
        snprintf(vk->name, sizeof vk->name, "k%d_%s", before + k + 1, v->op); /* its number */
        snprintf(vk->kind, sizeof vk->kind, "cpu");
        snprintf(vk->group, sizeof vk->group, "reference");
        v->kernel = k++;
    }
    snprintf(vg->note, sizeof vg->note, "runs op by op: %s",
             ver->plan_error[0] ? ver->plan_error
             : cm->opt.compiler     ? "no compiled plan yet"
                                : "kiln.config.compiler = false");
    return KN_OK;
}

/* Each kernel's drawn op nodes, in order. */
static kn_status kernel_members(kn_viz_vgraph *vg)
{
    for (int i = 0; i < vg->n_nodes; i++) {
        kn_viz_vnode *v = &vg->nodes[i];
        if (v->kind != KN_VN_OP || v->kernel < 0 || v->kernel >= vg->n_kernels) continue;
        kn_viz_vkernel *vk = &vg->kernels[v->kernel];
        int *p = realloc(vk->nodes, sizeof *p * (size_t)(vk->n_nodes + 1));
        if (!p) return kn_error(KN_ERR_OOM, "out of host memory drawing kernels");
        vk->nodes = p;
        vk->nodes[vk->n_nodes++] = i;
    }
    for (int k = 0; k < vg->n_kernels; k++) {
        kn_viz_vkernel *vk = &vg->kernels[k];
        if (vk->n_nodes) vk->part = vg->nodes[vk->nodes[0]].part;
        /* "k12_matmul_f32_2x16x16": the same kernel in another block differs by its index only */
        const char *s = vk->name;
        if (s[0] == 'k' && s[1] >= '0' && s[1] <= '9')
            for (s++; *s >= '0' && *s <= '9'; s++) {}
        unsigned h = hash_str(hash_str(hash_str(2166136261u, s), vk->kind), vk->group);
        for (int j = 0; j < vk->n_nodes; j++) h = hash_str(h, vg->nodes[vk->nodes[j]].op);
        vk->sig = h;
    }
    return KN_OK;
}

/* ---- collapse: the longest run of equal repetitions, drawn once ---- */

/* The start, length and count of the run of equal consecutive repetitions
 * of sig[0..n) that covers the most items (length * count), each
 * repetition holding at least min_weight by weight[] (NULL: 1 each);
 * count 0 when there is none. */
static void find_repeat(const unsigned *sig, const int *weight, int n, int min_weight, int *start, int *len, int *count)
{
    int best = 0;
    *count = 0;
    for (int p = 1; 2 * p <= n; p++)
        for (int s = 0; s + 2 * p <= n; s++) {
            int k = 1;
            while (s + (k + 1) * p <= n && memcmp(&sig[s], &sig[s + k * p], sizeof *sig * (size_t)p) == 0) k++;
            if (k < 2 || p * k <= best) continue;
            int w = 0;
            for (int i = s; i < s + p; i++) w += weight ? weight[i] : 1;
            if (w < min_weight) continue;
            best = p * k;
            *start = s;
            *len = p;
            *count = k;
        }
}

/* Inputs, views and constants that only hidden nodes read are hidden too. */
static void hide_unread(kn_viz_vgraph *vg)
{
    for (int i = vg->n_nodes - 1; i >= 0; i--) {
        kn_viz_vnode *v = &vg->nodes[i];
        if (v->hidden || v->kind == KN_VN_OP || v->kind == KN_VN_OUTPUT) continue;
        int readers = 0, visible = 0;
        for (int j = i + 1; j < vg->n_nodes; j++)
            for (int q = 0; q < vg->nodes[j].n_in; q++)
                if (vg->nodes[j].in[q] == i) {
                    readers++;
                    visible += !vg->nodes[j].hidden;
                }
        if (readers > 0 && visible == 0) v->hidden = true;
    }
}

static kn_status collapse_captured(kn_viz_vgraph *vg)
{
    int n = 0;
    while (n < vg->n_nodes && vg->nodes[n].kind != KN_VN_OUTPUT) n++;
    unsigned *sig = malloc(sizeof *sig * (size_t)(n + 1));
    int *weight = malloc(sizeof *weight * (size_t)(n + 1));
    if (!sig || !weight) {
        free(sig);
        free(weight);
        return kn_error(KN_ERR_OOM, "out of host memory collapsing a graph");
    }
    for (int i = 0; i < n; i++) {
        sig[i] = vg->nodes[i].sig;
        weight[i] = vg->nodes[i].kind == KN_VN_OP;
    }
    find_repeat(sig, weight, n, 2, &vg->rep_start, &vg->rep_len, &vg->rep_count);
    free(sig);
    free(weight);
    if (!vg->rep_count) return KN_OK;
    for (int i = vg->rep_start + vg->rep_len; i < vg->rep_start + vg->rep_len * vg->rep_count; i++) {
        vg->nodes[i].hidden = true;
        vg->nodes[i].alias = vg->rep_start + (i - vg->rep_start) % vg->rep_len;
    }
    hide_unread(vg);
    return KN_OK;
}

static kn_status collapse_fused(kn_viz_vgraph *vg)
{
    int n = vg->n_kernels;
    unsigned *sig = malloc(sizeof *sig * (size_t)(n + 1));
    if (!sig) return kn_error(KN_ERR_OOM, "out of host memory collapsing a graph");
    for (int k = 0; k < n; k++) sig[k] = vg->kernels[k].sig;
    find_repeat(sig, NULL, n, 1, &vg->rep_start, &vg->rep_len, &vg->rep_count);
    free(sig);
    if (!vg->rep_count) return KN_OK;
    for (int k = vg->rep_start + vg->rep_len; k < vg->rep_start + vg->rep_len * vg->rep_count; k++) {
        kn_viz_vkernel *vk = &vg->kernels[k];
        const kn_viz_vkernel *first = &vg->kernels[vg->rep_start + (k - vg->rep_start) % vg->rep_len];
        vk->hidden = true;
        for (int j = 0; j < vk->n_nodes; j++) {
            vg->nodes[vk->nodes[j]].hidden = true;
            vg->nodes[vk->nodes[j]].alias = j < first->n_nodes ? first->nodes[j] : -1;
        }
    }
    hide_unread(vg);
    return KN_OK;
}

/* ---- the model ---- */

kn_status kn_viz_model_build(const kn_compiled *cm, const kn_viz_opts *o, kn_viz_model *m)
{
    memset(m, 0, sizeof *m);
    m->cm = cm;
    m->view = o->view;
    int n = 0;
    for (int k = 0; k < cm->cache.n_graphs; k++) n += latest_version(cm, k) != NULL;
    if (n == 0)
        return kn_error(KN_ERR_ARG, "%s (%s) has no captured graph yet: call it once before drawing it",
                        cm->id.name, cm->id.where);
    m->graphs = calloc((size_t)n, sizeof *m->graphs);
    bool *used = calloc((size_t)o->n_timings + 1, sizeof *used);
    if (!m->graphs || !used) {
        free(used);
        return kn_error(KN_ERR_OOM, "out of host memory drawing a graph");
    }
    kn_status st = KN_OK;
    for (int k = 0; k < cm->cache.n_graphs && st == KN_OK; k++) {
        const kn_version *ver = latest_version(cm, k);
        if (!ver) continue;
        kn_viz_vgraph *vg = &m->graphs[m->n_graphs++];
        vg->index = k;
        vg->version = cm->cache.graphs[k].n_versions - 1;
        vg->n_ops = kn_graph_op_count(&ver->g);
        vg->n_guards = ver->n_guards;
        vg->guards = (const char (*)[KN_REASON_MAX])ver->guards;
        if (o->view == KN_VIZ_CAPTURED) {
            st = build_captured(ver, vg);
            if (st == KN_OK && o->collapse) st = collapse_captured(vg);
            for (int j = 0; j < vg->n_nodes; j++) m->training = m->training || vg->nodes[j].part != KN_PART_FORWARD;
            continue;
        }
        const kn_plan *p = kn_version_plan(ver);
        st = p ? build_plan(ver, p, o, used, vg) : build_op_by_op(cm, ver, m->n_kernels, vg);
        if (st == KN_OK) st = kernel_members(vg);
        if (st == KN_OK && o->collapse) st = collapse_fused(vg);
        /* numbered as cm:kernels() lists them: every graph's latest version in order */
        for (int j = 0; j < vg->n_kernels; j++) vg->kernels[j].number = m->n_kernels + j + 1;
        for (int j = 0; j < vg->n_nodes; j++) m->training = m->training || vg->nodes[j].part != KN_PART_FORWARD;
        m->n_kernels += vg->n_kernels;
        for (int j = 0; j < vg->n_kernels; j++) {
            const kn_viz_vkernel *vk = &vg->kernels[j];
            if (!vk->timed) continue;
            m->timed = true;
            m->total_us += vk->us * (vk->calls > 0 ? vk->calls : 1);
            if (vk->pct > m->max_pct) m->max_pct = vk->pct;
        }
    }
    free(used);
    if (m->timed && o->host_timed && o->host_us >= 0 && o->kernel_us >= 0) {
        m->host_timed = true;
        m->host_us = o->host_us;
        m->kernel_us = o->kernel_us;
    }
    /* the breaks of the latest call split its graphs in order; a function
     * never called through (an error) shows the distinct ones seen */
    if (cm->cap.n_graphs > 0 || cm->cap.n_breaks > 0) {
        m->breaks = cm->cap.call_breaks;
        m->n_breaks = cm->cap.n_breaks;
    }
    else {
        m->breaks = cm->cache.breaks;
        m->n_breaks = cm->cache.n_breaks;
    }
    if (st != KN_OK) kn_viz_model_free(m);
    return st;
}

void kn_viz_model_free(kn_viz_model *m)
{
    for (int k = 0; k < m->n_graphs; k++) {
        for (int j = 0; j < m->graphs[k].n_kernels; j++) free(m->graphs[k].kernels[j].nodes);
        free(m->graphs[k].kernels);
        free(m->graphs[k].nodes);
        free(m->graphs[k].reasons);
    }
    free(m->graphs);
    memset(m, 0, sizeof *m);
}
