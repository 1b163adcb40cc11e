/* kn_viz_dot: a view (kn_viz_model) as a Graphviz graph: where each thing
 * goes (clusters, nodes, edges, breaks), built with cgraph;
 * kn_viz_label.c says what each one says, and kn_viz_gv.c writes the graph
 * as DOT or lays it out and renders SVG.
 *
 * Names in the graph are stable, for tests and for linking into the SVG:
 * graph K is cluster_gK, kernel J of it cluster_gK_kJ, the repeated run
 * that {collapse = true} keeps is cluster_gK_rep, node I of graph K is gK_nI
 * and break B is breakB; the title of cluster_X is the node X_title.
 *
 * Cluster titles are nodes. dot draws a cluster's label in a band at its
 * top and routes the edges that come into the cluster straight through
 * it; nodes are obstacles its router goes around. So each cluster's title
 * is a node inside it, kept above the cluster's nodes by an invisible edge
 * to each one that no edge reaches from inside the cluster, and an edge
 * that comes into a cluster from outside spans two ranks (minlen 2), so
 * the title has its own rank between the edge's ends and the edge passes
 * beside it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <graphviz/cgraph.h>

#include "kn_fs.h"
#include "kn_interrupt.h"
#include "kn_viz_gv.h"
#include "kn_viz_label.h"

static void set(void *obj, const char *name, const char *value) { kn_viz_set(obj, name, value); }

typedef struct builder {
    const kn_viz_model *m;
    const kn_viz_opts *o;
    Agraph_t *g;
    Agnode_t ***nodes; /* per graph, per drawn node (NULL: hidden) */
    Agraph_t ***homes; /* per graph, per drawn node: the innermost cluster it is drawn in */
    kn_strbuf b;
} builder;

static void graph_defaults(builder *bd)
{
    Agraph_t *g = bd->g;
    const kn_viz_opts *o = bd->o;
    set(g, "rankdir", o->rankdir && o->rankdir[0] ? o->rankdir : "TB");
    set(g, "compound", "true");
    set(g, "newrank", "true");
    set(g, "fontname", KN_VIZ_FONT);
    set(g, "fontsize", "12");
    set(g, "labelloc", "t");
    set(g, "labeljust", "l");
    set(g, "nodesep", "0.25");
    set(g, "ranksep", "0.35");
    agattr(g, AGNODE, "fontname", KN_VIZ_FONT);
    agattr(g, AGNODE, "fontsize", "10");
    agattr(g, AGNODE, "shape", "box");
    agattr(g, AGNODE, "style", "rounded,filled");
    agattr(g, AGNODE, "fillcolor", "white");
    agattr(g, AGNODE, "height", "0.3");
    agattr(g, AGNODE, "margin", "0.08,0.03");
    agattr(g, AGEDGE, "fontname", KN_VIZ_FONT);
    agattr(g, AGEDGE, "fontsize", "8");
    agattr(g, AGEDGE, "color", "#555555");
    agattr(g, AGEDGE, "arrowsize", "0.6");
    kn_viz_label_drawing(g, bd->m, o, &bd->b);
}

/* ---- cluster titles ---- */

/* The name of cluster_X's title node, X_title. */
static void title_name(Agraph_t *cluster, char *buf, size_t size)
{
    const char *name = agnameof(cluster);
    snprintf(buf, size, "%s_title", strncmp(name, "cluster_", 8) == 0 ? name + 8 : name);
}

/* A new cluster's title node, left for kn_viz_label to fill. */
static Agnode_t *title_node(Agraph_t *cluster)
{
    kn_viz_set(cluster, "label", ""); /* not the drawing's title, which a subgraph inherits */
    char name[96];
    title_name(cluster, name, sizeof name);
    Agnode_t *t = agnode(cluster, name, 1);
    set(t, "shape", "plaintext");
    set(t, "style", "");
    set(t, "margin", "0.06,0.03");
    return t;
}

static Agnode_t *title_of(builder *bd, Agraph_t *cluster)
{
    char name[96];
    title_name(cluster, name, sizeof name);
    return agnode(bd->g, name, 0);
}

/* Whether cluster `inner` is `outer` or drawn inside it. */
static bool inside(Agraph_t *inner, Agraph_t *outer)
{
    for (Agraph_t *c = inner; c; c = c == agroot(c) ? NULL : agparent(c))
        if (c == outer) return true;
    return false;
}

/* An invisible edge from a title down to n (once): the title above n,
 * held there with `weight` (0: not held). */
static void title_edge(builder *bd, Agnode_t *title, Agnode_t *n, const char *weight)
{
    if (!title || !n || agedge(bd->g, title, n, NULL, 0)) return;
    Agedge_t *e = agedge(bd->g, title, n, NULL, 1);
    set(e, "style", "invis");
    set(e, "weight", weight);
}

/* ---- graphs, kernels and their nodes ---- */

/* The drawn node (index in graph gi) standing for node i after collapsing, or -1. */
static int visible(builder *bd, int gi, int i)
{
    const kn_viz_vgraph *vg = &bd->m->graphs[gi];
    for (int hops = 0; i >= 0 && hops < 4; hops++) {
        if (!vg->nodes[i].hidden) return bd->nodes[gi][i] ? i : -1;
        i = vg->nodes[i].alias;
    }
    return -1;
}

/* The cluster of graph vg, with its title node. */
static Agraph_t *graph_cluster(builder *bd, const kn_viz_vgraph *vg)
{
    char name[64];
    snprintf(name, sizeof name, "cluster_g%d", vg->index);
    Agraph_t *sg = agsubg(bd->g, name, 1);
    set(sg, "style", "rounded");
    set(sg, "color", "#9e9e9e");
    kn_viz_label_graph_title(title_node(sg), bd->m, vg, &bd->b);
    return sg;
}

/* The cluster of kernel k of graph vg inside parent, with its title node. */
static Agraph_t *kernel_cluster(builder *bd, Agraph_t *parent, const kn_viz_vgraph *vg, int k)
{
    char name[64];
    snprintf(name, sizeof name, "cluster_g%d_k%d", vg->index, k);
    Agraph_t *c = agsubg(parent, name, 1);
    kn_viz_label_kernel(title_node(c), c, bd->m, vg, k, &bd->b);
    return c;
}

/* The dashed cluster inside sg around the first of vg's repeated kernels
 * (or nodes), titled with the repeat count; NULL when nothing repeats. */
static Agraph_t *repeat_cluster(builder *bd, Agraph_t *sg, const kn_viz_vgraph *vg)
{
    if (!vg->rep_count) return NULL;
    char name[64];
    snprintf(name, sizeof name, "cluster_g%d_rep", vg->index);
    Agraph_t *rep = agsubg(sg, name, 1);
    set(rep, "style", "rounded,dashed");
    set(rep, "penwidth", "2");
    set(rep, "color", "#3182bd");
    kn_viz_label_repeat_title(title_node(rep), bd->m, vg, &bd->b);
    return rep;
}

/* The edges into the drawn nodes of graph gi, each from the drawn node
 * that stands for its input; fused, an edge between two kernels carries
 * the bytes it moves and, on hover, why it is not fused. */
static void draw_edges(builder *bd, int gi)
{
    const kn_viz_model *m = bd->m;
    const kn_viz_vgraph *vg = &m->graphs[gi];
    kn_strbuf *b = &bd->b;
    for (int i = 0; i < vg->n_nodes; i++) {
        const kn_viz_vnode *v = &vg->nodes[i];
        if (v->hidden || !bd->nodes[gi][i]) continue;
        for (int q = 0; q < v->n_in; q++) {
            int from = v->in[q] >= 0 ? visible(bd, gi, v->in[q]) : -1;
            if (from < 0) continue;
            Agedge_t *e = agedge(bd->g, bd->nodes[gi][from], bd->nodes[gi][i], NULL, 1);
            /* into a cluster from outside: a rank for its title between the ends */
            if (!inside(bd->homes[gi][from], bd->homes[gi][i])) set(e, "minlen", "2");
            const kn_viz_vnode *s = &vg->nodes[v->in[q]];
            /* fused: what a kernel reads from outside goes through memory
             * (a view is only strides: its reader's edge carries the bytes) */
            bool crosses = m->view == KN_VIZ_FUSED && v->kind == KN_VN_OP && s->kernel != v->kernel &&
                           s->kind != KN_VN_CONST;
            if (crosses) {
                char bytes[32];
                kn_viz_fmt_bytes(s->bytes, bytes, sizeof bytes);
                if (s->kind == KN_VN_OP || s->kind == KN_VN_VIEW) kn_strbuf_printf(b, "%s %s\\n%s", s->shape, s->dtype, bytes);
                else kn_strbuf_printf(b, "%s", bytes);
                kn_viz_set_buf(e, "label", b, false);
            }
            /* fused: why this edge is between two kernels, on hover */
            if (m->view == KN_VIZ_FUSED && v->in_reason[q] >= 0) {
                kn_viz_esc(b, vg->reasons[v->in_reason[q]].text);
                set(e, "tooltip", b->p ? b->p : "");
                kn_viz_set_buf(e, "labeltooltip", b, false);
            }
        }
    }
}

/* Each cluster's title above the nodes of graph gi that no edge reaches
 * from inside the node's cluster; above a node no edge reaches at all,
 * the titles of every cluster around it, outermost first. A kernel's (or
 * a repeated run's) title is held close above it; a graph's is held by the
 * function's arguments and earlier graphs' values only, which come first
 * anyway: parameters and constants stay beside the ops that read them,
 * wherever those are, instead of all under the title. */
static void place_titles(builder *bd, int gi, Agraph_t *sg)
{
    const kn_viz_vgraph *vg = &bd->m->graphs[gi];
    for (int i = 0; i < vg->n_nodes; i++) {
        const kn_viz_vnode *v = &vg->nodes[i];
        Agraph_t *home = bd->homes[gi][i];
        if (v->hidden || !bd->nodes[gi][i]) continue;
        bool fed = false, fed_inside = false;
        for (int q = 0; q < v->n_in; q++) {
            int from = v->in[q] >= 0 ? visible(bd, gi, v->in[q]) : -1;
            if (from < 0) continue;
            fed = true;
            fed_inside = fed_inside || inside(bd->homes[gi][from], home);
        }
        bool first = v->kind == KN_VN_ARG || v->kind == KN_VN_PREV;
        if (!fed_inside) title_edge(bd, title_of(bd, home), bd->nodes[gi][i], home != sg ? "4" : first ? "1" : "0");
        for (Agraph_t *c = home; !fed && c != sg; c = agparent(c))
            title_edge(bd, title_of(bd, agparent(c)), title_of(bd, c), agparent(c) != sg ? "4" : "0");
    }
}

/* Graph gi as a cluster: its title, the repeat cluster, in the fused view
 * a cluster per kernel, its nodes inside them, and its edges. */
static void build_graph(builder *bd, int gi)
{
    const kn_viz_model *m = bd->m;
    const kn_viz_vgraph *vg = &m->graphs[gi];
    char name[64];
    Agraph_t *sg = graph_cluster(bd, vg);
    Agraph_t *rep = repeat_cluster(bd, sg, vg);
    Agraph_t **kc = NULL;
    if (m->view == KN_VIZ_FUSED && vg->n_kernels) {
        kc = calloc((size_t)vg->n_kernels, sizeof *kc);
        if (!kc) bd->b.oom = true;
        for (int k = 0; kc && k < vg->n_kernels; k++) {
            if (vg->kernels[k].hidden) continue;
            bool first_rep = rep && k >= vg->rep_start && k < vg->rep_start + vg->rep_len;
            kc[k] = kernel_cluster(bd, first_rep ? rep : sg, vg, k);
        }
    }
    for (int i = 0; i < vg->n_nodes; i++) {
        const kn_viz_vnode *v = &vg->nodes[i];
        if (v->hidden) continue;
        Agraph_t *home = sg;
        if (m->view == KN_VIZ_CAPTURED && rep && i >= vg->rep_start && i < vg->rep_start + vg->rep_len) home = rep;
        if (kc && v->kernel >= 0 && v->kernel < vg->n_kernels && kc[v->kernel]) home = kc[v->kernel];
        snprintf(name, sizeof name, "g%d_n%d", vg->index, i);
        bd->nodes[gi][i] = agnode(home, name, 1);
        bd->homes[gi][i] = home;
        kn_viz_label_node(bd->nodes[gi][i], v, bd->o->labels, &bd->b);
    }
    free(kc);
    draw_edges(bd, gi);
    place_titles(bd, gi, sg);
}

/* ---- between graphs ---- */

/* The last drawn node of graph gi (a break's edge leaves its cluster from it). */
static Agnode_t *last_node(builder *bd, int gi)
{
    const kn_viz_vgraph *vg = &bd->m->graphs[gi];
    Agnode_t *found = NULL;
    for (int i = 0; i < vg->n_nodes; i++)
        if (!vg->nodes[i].hidden && bd->nodes[gi][i]) found = bd->nodes[gi][i]; /* outputs come last: the break sits below them */
    return found;
}

static int graph_at(const kn_viz_model *m, int index)
{
    for (int gi = 0; gi < m->n_graphs; gi++)
        if (m->graphs[gi].index == index) return gi;
    return -1;
}

static void cluster_edge(builder *bd, Agnode_t *t, Agnode_t *h, int tail_graph, int head_graph)
{
    if (!t || !h) return;
    Agedge_t *e = agedge(bd->g, t, h, NULL, 1);
    char name[32];
    if (tail_graph >= 0) {
        snprintf(name, sizeof name, "cluster_g%d", tail_graph);
        set(e, "ltail", name);
    }
    if (head_graph >= 0) {
        snprintf(name, sizeof name, "cluster_g%d", head_graph);
        set(e, "lhead", name);
    }
    set(e, "color", "#cb181d");
    set(e, "penwidth", "2");
    set(e, "minlen", "2"); /* the break below its graph, not beside its last node */
}

/* A red node per break, between the graph it ended and the next one: from
 * the ended graph's last node, to the next graph's title. */
static void build_breaks(builder *bd)
{
    const kn_viz_model *m = bd->m;
    Agnode_t *prev = NULL;
    int prev_graph = -1;
    for (int i = 0; i < m->n_breaks; i++) {
        const kn_break *br = &m->breaks[i];
        char name[32];
        snprintf(name, sizeof name, "break%d", i);
        Agnode_t *n = agnode(bd->g, name, 1);
        kn_viz_label_break(n, br, i, bd->o->labels, &bd->b);
        int tail = graph_at(m, br->graph);
        /* several breaks with no op between them end the same graph: chain them */
        if (prev && prev_graph == br->graph) cluster_edge(bd, prev, n, -1, -1);
        else if (tail >= 0) cluster_edge(bd, last_node(bd, tail), n, br->graph, -1);
        int head = -1;
        bool next_same = i + 1 < m->n_breaks && m->breaks[i + 1].graph == br->graph;
        if (!next_same) head = graph_at(m, br->graph + 1);
        if (head >= 0) {
            snprintf(name, sizeof name, "g%d_title", br->graph + 1);
            cluster_edge(bd, n, agnode(bd->g, name, 0), -1, br->graph + 1);
        }
        prev = n;
        prev_graph = br->graph;
    }
}

/* Dashed edges from an output of graph K to where a later graph reads it
 * as its input "graph K output N". */
static void build_handoffs(builder *bd)
{
    const kn_viz_model *m = bd->m;
    for (int gi = 0; gi < m->n_graphs; gi++) {
        const kn_viz_vgraph *vg = &m->graphs[gi];
        for (int i = 0; i < vg->n_nodes; i++) {
            int k, n;
            if (vg->nodes[i].kind != KN_VN_PREV || !bd->nodes[gi][i] ||
                sscanf(vg->nodes[i].name, "graph %d output %d", &k, &n) != 2)
                continue;
            int src = graph_at(m, k);
            if (src < 0) continue;
            const kn_viz_vgraph *sg = &m->graphs[src];
            for (int j = 0; j < sg->n_nodes; j++) {
                if (sg->nodes[j].kind != KN_VN_OUTPUT || sg->nodes[j].out_number != n || !bd->nodes[src][j]) continue;
                Agedge_t *e = agedge(bd->g, bd->nodes[src][j], bd->nodes[gi][i], NULL, 1);
                set(e, "style", "dashed");
                set(e, "color", "#9e9e9e");
                set(e, "constraint", "false");
                break;
            }
        }
    }
}

static kn_status build(const kn_viz_model *m, const kn_viz_opts *o, Agraph_t **out)
{
    builder bd = {m, o, NULL, NULL, NULL, {0}};
    bd.nodes = calloc((size_t)m->n_graphs + 1, sizeof *bd.nodes);
    bd.homes = calloc((size_t)m->n_graphs + 1, sizeof *bd.homes);
    bool oom = !bd.nodes || !bd.homes;
    for (int gi = 0; !oom && gi < m->n_graphs; gi++) {
        bd.nodes[gi] = calloc((size_t)m->graphs[gi].n_nodes + 1, sizeof **bd.nodes);
        bd.homes[gi] = calloc((size_t)m->graphs[gi].n_nodes + 1, sizeof **bd.homes);
        oom = !bd.nodes[gi] || !bd.homes[gi];
    }
    if (!oom) {
        bd.g = kn_viz_gv_open("kiln");
        oom = !bd.g;
    }
    if (!oom) {
        graph_defaults(&bd);
        for (int gi = 0; gi < m->n_graphs; gi++) build_graph(&bd, gi);
        build_breaks(&bd);
        build_handoffs(&bd);
        oom = bd.b.oom;
    }
    for (int gi = 0; gi < m->n_graphs; gi++) {
        if (bd.nodes) free(bd.nodes[gi]);
        if (bd.homes) free(bd.homes[gi]);
    }
    free(bd.nodes);
    free(bd.homes);
    free(bd.b.p);
    if (oom) {
        if (bd.g) agclose(bd.g);
        return kn_error(KN_ERR_OOM, "out of host memory drawing a graph");
    }
    *out = bd.g;
    return KN_OK;
}

kn_status kn_viz_render(const kn_compiled *cm, const kn_viz_opts *o, kn_viz_format fmt, char **out, size_t *len)
{
    kn_viz_model m;
    KN_TRY(kn_viz_model_build(cm, o, &m));
    long drawn = 0;
    for (int gi = 0; gi < m.n_graphs; gi++) drawn += m.graphs[gi].n_nodes;
    if (fmt == KN_VIZ_SVG && drawn > KN_VIZ_LAYOUT_MAX_NODES) {
        kn_viz_model_free(&m);
        return kn_error(KN_ERR_UNSUPPORTED,
                        "the drawing has %ld nodes, more than the %d Graphviz can lay out in reasonable time: "
                        "draw it as DOT (format \"dot\" or a .dot file), collapse it, or see kiln.outline",
                        drawn, KN_VIZ_LAYOUT_MAX_NODES);
    }
    if (drawn > KN_VIZ_DOT_MAX_NODES) {
        kn_viz_model_free(&m);
        return kn_error(KN_ERR_UNSUPPORTED,
                        "the drawing has %ld nodes, more than the %d kiln draws: collapse it, or see kiln.outline",
                        drawn, KN_VIZ_DOT_MAX_NODES);
    }
    if (kn_interrupt_pending()) {
        kn_viz_model_free(&m);
        return kn_error(KN_ERR_INTERRUPTED, "drawing interrupted");
    }
    kn_viz_gv_errors saved;
    kn_viz_gv_catch(&saved);
    Agraph_t *g = NULL;
    kn_status st = build(&m, o, &g);
    if (st == KN_OK) st = fmt == KN_VIZ_DOT ? kn_viz_gv_dot(g, out, len) : kn_viz_gv_svg(g, out, len);
    if (g) agclose(g);
    kn_viz_gv_release(&saved);
    kn_viz_model_free(&m);
    return st;
}

kn_status kn_viz_render_file(const kn_compiled *cm, const kn_viz_opts *o, kn_viz_format fmt, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    KN_TRY(kn_viz_render(cm, o, fmt, &text, &len));
    bool not_regular = false;
    FILE *f = kn_fopen_write_regular(path, &not_regular);
    kn_status st = KN_OK;
    if (!f && not_regular) st = kn_error(KN_ERR_IO, "cannot write '%s': not a regular file (a FIFO, a device or a directory)", path);
    else if (!f || fwrite(text, 1, len, f) != len) st = kn_error(KN_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    if (f && fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    free(text);
    return st;
}
