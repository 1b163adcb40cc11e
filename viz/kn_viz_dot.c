/* kn_viz_dot: a view (kn_viz_model) as a Graphviz graph: cgraph builds it,
 * agwrite gives the DOT text, and gvc lays it out with dot and renders SVG.
 *
 * The layout and SVG plugins are linked in and preloaded (gvContextPlugins
 * with demand loading off), so rendering reads no Graphviz config file and
 * works where Graphviz is not installed (../shared/device.md).
 *
 * Names in the graph are stable, for tests and for linking into the SVG:
 * graph K is cluster_gK, kernel J of it cluster_gK_kJ, the repeated run
 * that {collapse = true} keeps is cluster_gK_rep, node I of graph K is gK_nI
 * and break B is breakB.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include "kn_fs.h"
#include "kn_interrupt.h"
#include "kn_viz_model.h"

extern gvplugin_library_t gvplugin_dot_layout_LTX_library;
extern gvplugin_library_t gvplugin_core_LTX_library;

static lt_symlist_t kn_viz_builtins[] = {
    {"gvplugin_dot_layout_LTX_library", &gvplugin_dot_layout_LTX_library},
    {"gvplugin_core_LTX_library", &gvplugin_core_LTX_library},
    {0, 0},
};

/* Graphviz reports through agerr; keep its last message for our error
 * instead of letting it print to stderr in the middle of a REPL session. */
static char gv_message[512];

static int gv_error_handler(char *msg)
{
    size_t n = strlen(gv_message);
    if (n < sizeof gv_message - 1) snprintf(gv_message + n, sizeof gv_message - n, "%s", msg);
    return 0;
}

/* ---- object IDs in creation order ----
 * cgraph's default ID discipline makes a named object's ID the address of
 * its interned name, and agwrite orders subgraphs by ID: the DOT text (and
 * the layout, which visits clusters in that order) would change from run
 * to run. This one numbers names in the order they are first seen. */

typedef struct id_state {
    Agraph_t *g;
    char **names; /* interned in g (agwrite reads cgraph's header before a name) */
    IDTYPE n, cap;
    IDTYPE anon; /* anonymous objects (edges) get odd IDs, as cgraph's own discipline */
} id_state;

static void *id_open(Agraph_t *g, Agdisc_t *disc)
{
    (void)disc;
    id_state *s = calloc(1, sizeof *s);
    if (s) {
        s->g = g;
        s->anon = 1;
    }
    return s;
}

static long id_map(void *state, int objtype, char *str, IDTYPE *id, int createflag)
{
    (void)objtype;
    id_state *s = state;
    if (!str) {
        *id = s->anon;
        s->anon += 2;
        return 1;
    }
    for (IDTYPE i = 0; i < s->n; i++)
        if (strcmp(s->names[i], str) == 0) {
            *id = 2 * (i + 1);
            return 1;
        }
    if (!createflag) return 0;
    if (s->n == s->cap) {
        IDTYPE cap = s->cap ? s->cap * 2 : 256;
        char **p = realloc(s->names, sizeof *p * cap);
        if (!p) return 0;
        s->names = p;
        s->cap = cap;
    }
    char *copy = agstrdup(s->g, str);
    if (!copy) return 0;
    s->names[s->n++] = copy;
    *id = 2 * s->n;
    return 1;
}

static long id_alloc(void *state, int objtype, IDTYPE request)
{
    (void)state;
    (void)objtype;
    (void)request;
    return 0;
}

static void id_free(void *state, int objtype, IDTYPE id)
{
    (void)state; /* names stay until the graph closes: an ID is never reused */
    (void)objtype;
    (void)id;
}

static char *id_print(void *state, int objtype, IDTYPE id)
{
    (void)objtype;
    id_state *s = state;
    return id % 2 == 0 && id / 2 >= 1 && id / 2 <= s->n ? s->names[id / 2 - 1] : NULL;
}

static void id_close(void *state)
{
    id_state *s = state; /* the names go with the graph's string dictionary */
    free(s->names);
    free(s);
}

static void id_register(void *state, int objtype, void *obj)
{
    (void)state;
    (void)objtype;
    (void)obj;
}

static Agiddisc_t id_disc = {id_open, id_map, id_alloc, id_free, id_print, id_close, id_register};

/* ---- text helpers ---- */

/* s with backslashes doubled: Graphviz reads \n, \l, \N ... in labels and
 * tooltips as escapes, and user text (reasons, file names) is not that. */
static void esc(kn_strbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\') kn_strbuf_printf(b, "\\\\");
        else if (*s == '\n') kn_strbuf_printf(b, "\\n");
        else kn_strbuf_printf(b, "%c", *s);
    }
}

/* s escaped as esc does, broken into lines of about `width` at spaces. */
static void esc_wrapped(kn_strbuf *b, const char *s, int width)
{
    int col = 0;
    for (; *s; s++) {
        if (*s == ' ' && col >= width) {
            kn_strbuf_printf(b, "\\n");
            col = 0;
            continue;
        }
        char c[2] = {*s, 0};
        esc(b, c);
        col++;
    }
}

static void set(void *obj, const char *name, const char *value)
{
    agsafeset(obj, (char *)name, (char *)value, "");
}

/* s for an HTML-like label: &, <, > and quotes as entities. */
static void esc_html(kn_strbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '&') kn_strbuf_printf(b, "&amp;");
        else if (*s == '<') kn_strbuf_printf(b, "&lt;");
        else if (*s == '>') kn_strbuf_printf(b, "&gt;");
        else if (*s == '"') kn_strbuf_printf(b, "&quot;");
        else kn_strbuf_printf(b, "%c", *s);
    }
}

/* Set attribute `name` to the buffer's text, then empty the buffer. */
static void set_buf(void *obj, const char *name, kn_strbuf *b)
{
    set(obj, name, b->p ? b->p : "");
    b->len = 0;
    if (b->p) b->p[0] = 0;
}

/* The heat colour of a share t in [0, 1]: pale blue, yellow, orange. */
static void heat_colour(double t, char *buf, size_t size)
{
    static const double stop[3][3] = {{222, 235, 247}, {254, 227, 145}, {241, 105, 19}};
    if (!(t > 0)) t = 0;
    if (t > 1) t = 1;
    int seg = t < 0.5 ? 0 : 1;
    double u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
    int rgb[3];
    for (int c = 0; c < 3; c++) rgb[c] = (int)lround(stop[seg][c] + (stop[seg + 1][c] - stop[seg][c]) * u);
    snprintf(buf, size, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

static const char *kind_colour(const char *kind)
{
    if (strcmp(kind, "generated") == 0) return "#e3eefc";
    if (strcmp(kind, "cublaslt") == 0 || strcmp(kind, "cudnn") == 0) return "#ece3f5";
    if (strcmp(kind, "cuda") == 0) return "#e0f2ef";
    return "#eeeeee";
}

/* ---- the graph ---- */

typedef struct builder {
    const kn_viz_model *m;
    Agraph_t *g;
    Agnode_t ***nodes; /* per graph, per drawn node (NULL: hidden) */
    kn_strbuf b;
} builder;

static void title(builder *bd, const kn_viz_opts *o)
{
    const kn_viz_model *m = bd->m;
    const kn_compiled *cm = m->cm;
    kn_strbuf *b = &bd->b;
    esc(b, cm->id.name);
    kn_strbuf_printf(b, " (");
    esc(b, cm->id.where);
    kn_strbuf_printf(b, ") · %s graph · mode %s · %d graph%s, %d break%s", o->view == KN_VIZ_FUSED ? "fused" : "captured",
                  cm->id.mode, m->n_graphs, m->n_graphs == 1 ? "" : "s", m->n_breaks, m->n_breaks == 1 ? "" : "s");
    if (o->view == KN_VIZ_FUSED) kn_strbuf_printf(b, ", %d kernel%s", m->n_kernels, m->n_kernels == 1 ? "" : "s");
    if (m->timed) kn_strbuf_printf(b, " · %.1f us per call in kernels", m->total_us);
    kn_strbuf_printf(b, "\\l");
}

static void graph_defaults(builder *bd, const kn_viz_opts *o)
{
    Agraph_t *g = bd->g;
    set(g, "rankdir", o->rankdir && o->rankdir[0] ? o->rankdir : "TB");
    set(g, "compound", "true");
    set(g, "newrank", "true");
    set(g, "fontname", "Helvetica");
    set(g, "fontsize", "12");
    set(g, "labelloc", "t");
    set(g, "labeljust", "l");
    set(g, "nodesep", "0.25");
    set(g, "ranksep", "0.35");
    agattr(g, AGNODE, "fontname", "Helvetica");
    agattr(g, AGNODE, "fontsize", "10");
    agattr(g, AGNODE, "shape", "box");
    agattr(g, AGNODE, "style", "rounded,filled");
    agattr(g, AGNODE, "fillcolor", "white");
    agattr(g, AGNODE, "height", "0.3");
    agattr(g, AGNODE, "margin", "0.08,0.03");
    agattr(g, AGEDGE, "fontname", "Helvetica");
    agattr(g, AGEDGE, "fontsize", "8");
    agattr(g, AGEDGE, "color", "#555555");
    agattr(g, AGEDGE, "arrowsize", "0.6");
    title(bd, o);
    set_buf(g, "label", &bd->b);
}

static void node_text(builder *bd, Agnode_t *n, const kn_viz_vnode *v)
{
    kn_strbuf *b = &bd->b;
    char bytes[32];
    kn_viz_fmt_bytes(v->bytes, bytes, sizeof bytes);
    switch (v->kind) {
    case KN_VN_OP:
    case KN_VN_VIEW:
        kn_strbuf_printf(b, "%s\\n%s %s", v->op, v->shape, v->dtype);
        set_buf(n, "label", b);
        if (v->copies) { /* a copy the plan makes: a node of its own, so it is seen */
            kn_strbuf_printf(b, "copy · %s\\n%s %s · %s", v->op, v->shape, v->dtype, bytes);
            set_buf(n, "label", b);
            kn_strbuf_printf(b, "%s at ", v->op);
            esc(b, v->where[0] ? v->where : "?");
            kn_strbuf_printf(b, " copies %s every call: %s\\n%s %s", bytes,
                             v->kind == KN_VN_VIEW ? "a reshape of a layout its strides cannot express"
                                                   : "contiguous() materializes its input",
                             v->shape, v->dtype);
            set_buf(n, "tooltip", b);
            return;
        }
        kn_strbuf_printf(b, "%s%s at ", v->op, v->kind == KN_VN_VIEW ? " (a view: no copy)" : "");
        esc(b, v->where[0] ? v->where : "?");
        kn_strbuf_printf(b, "\\n%s %s, %s", v->shape, v->dtype, bytes);
        set_buf(n, "tooltip", b);
        return;
    case KN_VN_CONST:
        if (v->name[0]) {
            esc(b, v->name);
            kn_strbuf_printf(b, " = ");
        }
        kn_strbuf_printf(b, "%g", v->value);
        set_buf(n, "label", b);
        kn_strbuf_printf(b, "a Lua number baked into the graph at ");
        esc(b, v->where[0] ? v->where : "?");
        set_buf(n, "tooltip", b);
        return;
    default: break;
    }
    static const char *const what[] = {
        [KN_VN_ARG] = "argument", [KN_VN_PARAM] = "parameter", [KN_VN_PREV] = "value of an earlier graph",
        [KN_VN_TENSOR] = "tensor", [KN_VN_OUTPUT] = "output"};
    esc(b, v->name);
    kn_strbuf_printf(b, "\\n%s %s", v->shape, v->dtype);
    set_buf(n, "label", b);
    kn_strbuf_printf(b, "%s '", what[v->kind]);
    esc(b, v->name);
    kn_strbuf_printf(b, "': %s %s, %s", v->shape, v->dtype, bytes);
    if (v->where[0]) {
        kn_strbuf_printf(b, ", first used at ");
        esc(b, v->where);
    }
    set_buf(n, "tooltip", b);
}

static void node_style(Agnode_t *n, const kn_viz_vnode *v)
{
    if (v->copies) {
        set(n, "shape", "box");
        set(n, "style", "filled,bold");
        set(n, "fillcolor", "#fdd0a2");
        set(n, "color", "#d94801");
        return;
    }
    switch (v->kind) {
    case KN_VN_OP: /* captured: a view op, dashed as the fused view draws views */
        if (kn_op_kind_of(kn_op_by_name(v->op)) == KN_K_VIEW) set(n, "style", "rounded,dashed");
        break;
    case KN_VN_ARG:
        set(n, "shape", "ellipse");
        set(n, "fillcolor", "#c7e9c0");
        break;
    case KN_VN_PARAM:
        set(n, "style", "filled");
        set(n, "fillcolor", "#fdf3d0");
        set(n, "fontsize", "9");
        break;
    case KN_VN_PREV:
        set(n, "shape", "ellipse");
        set(n, "style", "filled,dashed");
        set(n, "fillcolor", "#e6e6e6");
        break;
    case KN_VN_TENSOR:
        set(n, "style", "filled");
        set(n, "fillcolor", "#eeeeee");
        set(n, "fontsize", "9");
        break;
    case KN_VN_CONST:
        set(n, "shape", "plaintext");
        set(n, "style", "");
        set(n, "fontsize", "9");
        break;
    case KN_VN_VIEW:
        set(n, "style", "rounded,dashed");
        set(n, "fontsize", "9");
        break;
    case KN_VN_OUTPUT:
        set(n, "shape", "ellipse");
        set(n, "style", "filled,bold");
        set(n, "fillcolor", "#a1d99b");
        break;
    }
}

/* The cluster of kernel k of graph vg, labeled and coloured. */
static Agraph_t *kernel_cluster(builder *bd, Agraph_t *parent, const kn_viz_vgraph *vg, int k)
{
    const kn_viz_vkernel *vk = &vg->kernels[k];
    char name[64], colour[16];
    snprintf(name, sizeof name, "cluster_g%d_k%d", vg->index, k);
    Agraph_t *c = agsubg(parent, name, 1);
    kn_strbuf *b = &bd->b;
    kn_strbuf_printf(b, "%s · %s\\l", vk->name, vk->kind);
    if (vk->epilogue_of >= 0) kn_strbuf_printf(b, "in the epilogue of %s\\l", vg->kernels[vk->epilogue_of].name);
    if (vk->timed) {
        kn_strbuf_printf(b, "%.1f us · %.1f%%", vk->us, vk->pct);
        if (vk->calls > 1) kn_strbuf_printf(b, " · %d calls", vk->calls);
        if (vk->roof >= 0) kn_strbuf_printf(b, " · roof %.0f%%", vk->roof);
        kn_strbuf_printf(b, "\\l");
    }
    else if (bd->m->timed) kn_strbuf_printf(b, "(not timed%s)\\l", vk->epilogue_of >= 0 ? ": part of that call" : "");
    set_buf(c, "label", b);
    set(c, "style", "rounded,filled");
    if (vk->timed) heat_colour(bd->m->max_pct > 0 ? vk->pct / bd->m->max_pct : 0, colour, sizeof colour);
    set(c, "fillcolor", vk->timed ? colour : bd->m->timed ? "#f7f7f7" : kind_colour(vk->kind));
    set(c, "color", vk->epilogue_of >= 0 ? "#8c6bb1" : "#6b6b6b");
    set(c, "fontsize", "10");
    set(c, "labeljust", "l"); /* left-justified lines: off the middle, where edges come in */
    kn_strbuf_printf(b, "kernel %s (%s, %s)", vk->name, vk->kind, vk->group);
    set_buf(c, "tooltip", b);
    return c;
}

/* The drawn node standing for node i of graph gi after collapsing, or NULL. */
static Agnode_t *visible(builder *bd, int gi, int i)
{
    const kn_viz_vgraph *vg = &bd->m->graphs[gi];
    for (int hops = 0; i >= 0 && hops < 4; hops++) {
        if (!vg->nodes[i].hidden) return bd->nodes[gi][i];
        i = vg->nodes[i].alias;
    }
    return NULL;
}

/* The cluster of graph vg: its title (graph, version, ops, kernels,
 * guards, the note), in the captured view the first guards under it, and
 * every guard in its tooltip. */
static Agraph_t *graph_cluster(builder *bd, const kn_viz_vgraph *vg)
{
    const kn_viz_model *m = bd->m;
    char name[64];
    snprintf(name, sizeof name, "cluster_g%d", vg->index);
    Agraph_t *sg = agsubg(bd->g, name, 1);
    kn_strbuf *b = &bd->b;
    bool list_guards = m->view == KN_VIZ_CAPTURED && vg->n_guards;
    kn_strbuf_printf(b, "graph %d · version %d · %d op%s", vg->index, vg->version, vg->n_ops, vg->n_ops == 1 ? "" : "s");
    if (m->view == KN_VIZ_FUSED) kn_strbuf_printf(b, " · %d kernel%s", vg->n_kernels, vg->n_kernels == 1 ? "" : "s");
    kn_strbuf_printf(b, " · %d guard%s", vg->n_guards, vg->n_guards == 1 ? "" : "s");
    if (vg->note[0]) {
        kn_strbuf_printf(b, "\\n");
        esc_wrapped(b, vg->note, 60);
    }
    if (list_guards) {
        /* the captured view lists the first guards under the cluster's
         * title, small (a label, not a node: a node would change the
         * ranks and put the graphs side by side) */
        enum { SHOWN = 6 };
        kn_strbuf_printf(b, "<BR ALIGN=\"LEFT\"/><FONT POINT-SIZE=\"8\">");
        for (int i = 0; i < vg->n_guards && i < SHOWN; i++) {
            kn_strbuf_printf(b, "guard: ");
            esc_html(b, vg->guards[i]);
            kn_strbuf_printf(b, "<BR ALIGN=\"LEFT\"/>");
        }
        if (vg->n_guards > SHOWN) kn_strbuf_printf(b, "... %d more (in the tooltip)<BR ALIGN=\"LEFT\"/>", vg->n_guards - SHOWN);
        kn_strbuf_printf(b, "</FONT>"); /* an HTML-like label: Graphviz adds the < > */
        agsafeset(sg, "label", agstrdup_html(agroot(sg), b->p ? b->p : ""), "");
        b->len = 0;
        if (b->p) b->p[0] = 0;
    } else {
        set_buf(sg, "label", b);
    }
    set(sg, "style", "rounded");
    set(sg, "color", "#9e9e9e");
    set(sg, "fontsize", "11");
    /* every guard in the cluster's tooltip */
    kn_strbuf_printf(b, "guards of graph %d, version %d (a call runs it when all hold):", vg->index, vg->version);
    for (int i = 0; i < vg->n_guards; i++) {
        kn_strbuf_printf(b, "\\n- ");
        esc(b, vg->guards[i]);
    }
    set_buf(sg, "tooltip", b);
    return sg;
}

/* The dashed cluster inside sg around the first of vg's repeated kernels
 * (or nodes), labelled with the repeat count; NULL when nothing repeats. */
static Agraph_t *repeat_cluster(builder *bd, Agraph_t *sg, const kn_viz_vgraph *vg)
{
    const kn_viz_model *m = bd->m;
    kn_strbuf *b = &bd->b;
    if (!vg->rep_count) return NULL;
    char name[64];
    snprintf(name, sizeof name, "cluster_g%d_rep", vg->index);
    Agraph_t *rep = agsubg(sg, name, 1);
    double pct = 0;
    for (int k = vg->rep_start; m->view == KN_VIZ_FUSED && k < vg->rep_start + vg->rep_len * vg->rep_count; k++)
        pct += vg->kernels[k].pct;
    kn_strbuf_printf(b, "× %d: the same %d %s, repeated %d times (drawn once)\\l", vg->rep_count, vg->rep_len,
                  m->view == KN_VIZ_FUSED ? (vg->rep_len == 1 ? "kernel" : "kernels") : "nodes", vg->rep_count);
    if (m->view == KN_VIZ_FUSED && m->timed) kn_strbuf_printf(b, "%.1f%% of the time in all %d\\l", pct, vg->rep_count);
    set_buf(rep, "label", b);
    set(rep, "style", "rounded,dashed");
    set(rep, "penwidth", "2");
    set(rep, "color", "#3182bd");
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
        if (v->hidden) continue;
        for (int q = 0; q < v->n_in; q++) {
            Agnode_t *t = v->in[q] >= 0 ? visible(bd, gi, v->in[q]) : NULL;
            if (!t) continue;
            Agedge_t *e = agedge(bd->g, t, bd->nodes[gi][i], NULL, 1);
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
                set_buf(e, "label", b);
            }
            /* fused: why this edge is between two kernels, on hover */
            if (m->view == KN_VIZ_FUSED && v->in_reason[q] >= 0) {
                esc(b, vg->reasons[v->in_reason[q]].text);
                set(e, "tooltip", b->p ? b->p : "");
                set_buf(e, "labeltooltip", b);
            }
        }
    }
}

/* Graph gi as a cluster: its title and guards, the repeat cluster, in the
 * fused view a cluster per kernel, its nodes inside them, and its edges. */
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
        Agraph_t *parent = sg;
        if (m->view == KN_VIZ_CAPTURED && rep && i >= vg->rep_start && i < vg->rep_start + vg->rep_len) parent = rep;
        if (kc && v->kernel >= 0 && v->kernel < vg->n_kernels && kc[v->kernel]) parent = kc[v->kernel];
        snprintf(name, sizeof name, "g%d_n%d", vg->index, i);
        Agnode_t *n = agnode(parent, name, 1);
        bd->nodes[gi][i] = n;
        node_style(n, v);
        node_text(bd, n, v);
    }
    free(kc);
    draw_edges(bd, gi);
}

/* The first or last drawn node of graph gi (the ends of a break's edges). */
static Agnode_t *end_node(builder *bd, int gi, bool last)
{
    const kn_viz_vgraph *vg = &bd->m->graphs[gi];
    Agnode_t *found = NULL;
    for (int i = 0; i < vg->n_nodes; i++) {
        if (vg->nodes[i].hidden || !bd->nodes[gi][i]) continue;
        if (!last) return bd->nodes[gi][i];
        found = bd->nodes[gi][i]; /* outputs come last: the break then sits below them */
    }
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

/* A red node per break, between the graph it ended and the next one. */
static void build_breaks(builder *bd)
{
    const kn_viz_model *m = bd->m;
    kn_strbuf *b = &bd->b;
    Agnode_t *prev = NULL;
    int prev_graph = -1;
    for (int i = 0; i < m->n_breaks; i++) {
        const kn_break *br = &m->breaks[i];
        char name[32];
        snprintf(name, sizeof name, "break%d", i);
        Agnode_t *n = agnode(bd->g, name, 1);
        kn_strbuf_printf(b, "graph break %d: ", i + 1);
        esc(b, br->category);
        kn_strbuf_printf(b, "\\n");
        esc_wrapped(b, br->reason, 48);
        kn_strbuf_printf(b, "\\nat ");
        esc(b, br->where);
        set_buf(n, "label", b);
        char text[4096];
        kn_break_format(br, text, sizeof text);
        esc(b, text);
        set_buf(n, "tooltip", b);
        set(n, "shape", "box");
        set(n, "style", "filled,bold");
        set(n, "color", "#cb181d");
        set(n, "penwidth", "2");
        set(n, "fillcolor", "#fee0d2");
        set(n, "fontcolor", "#67000d");
        int tail = graph_at(m, br->graph);
        /* several breaks with no op between them end the same graph: chain them */
        if (prev && prev_graph == br->graph) cluster_edge(bd, prev, n, -1, -1);
        else if (tail >= 0) cluster_edge(bd, end_node(bd, tail, true), n, br->graph, -1);
        int head = -1;
        bool next_same = i + 1 < m->n_breaks && m->breaks[i + 1].graph == br->graph;
        if (!next_same) head = graph_at(m, br->graph + 1);
        if (head >= 0) cluster_edge(bd, n, end_node(bd, head, false), -1, br->graph + 1);
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

static void build_legend(builder *bd)
{
    if (!bd->m->timed) return;
    kn_strbuf *b = &bd->b;
    kn_strbuf_printf(b, "<table border=\"0\" cellborder=\"1\" cellspacing=\"0\" cellpadding=\"4\">"
                     "<tr><td colspan=\"5\">share of the kernels' time (hottest: %.1f%%)</td></tr><tr>",
                  bd->m->max_pct);
    for (int i = 0; i <= 4; i++) {
        char colour[16];
        heat_colour(i / 4.0, colour, sizeof colour);
        kn_strbuf_printf(b, "<td bgcolor=\"%s\">%.0f%%</td>", colour, bd->m->max_pct * i / 4.0);
    }
    kn_strbuf_printf(b, "</tr></table>");
    Agnode_t *n = agnode(bd->g, "legend", 1);
    set(n, "shape", "plaintext");
    set(n, "style", "");
    agsafeset(n, "label", agstrdup_html(bd->g, bd->b.p), "");
    bd->b.len = 0;
    set(n, "tooltip", "heat: each kernel's share of the time per call, from the latest kiln.time or :time");
}

static kn_status build(const kn_viz_model *m, const kn_viz_opts *o, Agraph_t **out)
{
    builder bd = {m, NULL, NULL, {0}};
    bd.nodes = calloc((size_t)m->n_graphs + 1, sizeof *bd.nodes);
    bool oom = !bd.nodes;
    for (int gi = 0; !oom && gi < m->n_graphs; gi++) {
        bd.nodes[gi] = calloc((size_t)m->graphs[gi].n_nodes + 1, sizeof **bd.nodes);
        oom = !bd.nodes[gi];
    }
    if (!oom) {
        static Agdisc_t disc;
        disc = (Agdisc_t){&AgMemDisc, &id_disc, &AgIoDisc};
        bd.g = agopen("kiln", Agdirected, &disc);
        oom = !bd.g;
    }
    if (!oom) {
        graph_defaults(&bd, o);
        for (int gi = 0; gi < m->n_graphs; gi++) build_graph(&bd, gi);
        build_breaks(&bd);
        build_handoffs(&bd);
        build_legend(&bd);
        oom = bd.b.oom;
    }
    for (int gi = 0; bd.nodes && gi < m->n_graphs; gi++) free(bd.nodes[gi]);
    free(bd.nodes);
    free(bd.b.p);
    if (oom) {
        if (bd.g) agclose(bd.g);
        return kn_error(KN_ERR_OOM, "out of host memory drawing a graph");
    }
    *out = bd.g;
    return KN_OK;
}

static kn_status write_dot(Agraph_t *g, char **out, size_t *len)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return kn_error(KN_ERR_OOM, "out of host memory writing DOT");
    int rc = agwrite(g, f);
    fclose(f);
    if (rc != 0) {
        free(text);
        return kn_error(KN_ERR_OOM, "Graphviz could not write the DOT text");
    }
    *out = text;
    *len = n;
    return KN_OK;
}

static kn_status layout_svg(Agraph_t *g, char **out, size_t *len)
{
    GVC_t *gvc = gvContextPlugins(kn_viz_builtins, 0);
    if (!gvc) return kn_error(KN_ERR_OOM, "Graphviz could not start (out of memory?)");
    kn_status st = KN_OK;
    char *data = NULL;
    unsigned n = 0;
    if (gvLayout(gvc, g, "dot") != 0) st = kn_error(KN_ERR_UNSUPPORTED, "Graphviz's dot layout failed: %s", gv_message);
    else {
        if (gvRenderData(gvc, g, "svg", &data, &n) != 0 || !data)
            st = kn_error(KN_ERR_UNSUPPORTED, "Graphviz could not render SVG: %s", gv_message);
        else if (!(*out = malloc((size_t)n + 1))) st = kn_error(KN_ERR_OOM, "out of host memory for the SVG");
        else {
            memcpy(*out, data, n);
            (*out)[n] = 0;
            *len = n;
        }
        if (data) gvFreeRenderData(data);
        gvFreeLayout(gvc, g);
    }
    gvFreeContext(gvc);
    return st;
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
    gv_message[0] = 0;
    agusererrf old = agseterrf(gv_error_handler);
    agerrlevel_t old_level = agseterr(AGERR);
    Agraph_t *g = NULL;
    kn_status st = build(&m, o, &g);
    if (st == KN_OK) st = fmt == KN_VIZ_DOT ? write_dot(g, out, len) : layout_svg(g, out, len);
    if (g) agclose(g);
    agseterrf(old);
    agseterr(old_level);
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
