/* kn_viz_label: what the drawings say (see kn_viz_label.h): labels,
 * tooltips, shapes and colours, written into cgraph objects that
 * kn_viz_dot.c has placed.
 *
 * Every label is laid out in KN_VIZ_FONT (kn_viz_gv.h), whose widths
 * Graphviz knows exactly, so a line is never wider in a viewer than the
 * box made for it; labels are kept to lines a reader can take in (reasons
 * wrapped, guards and stacks cut at KN_VIZ_SHOWN_LINES with a count and
 * where to see the rest). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kn_viz_label.h"

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

/* s for an HTML-like label: &, <, > and quotes as entities, and control
 * characters (which XML, and so Graphviz's parser, refuses) as '?'. */
static void esc_html(kn_strbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '&') kn_strbuf_printf(b, "&amp;");
        else if (*s == '<') kn_strbuf_printf(b, "&lt;");
        else if (*s == '>') kn_strbuf_printf(b, "&gt;");
        else if (*s == '"') kn_strbuf_printf(b, "&quot;");
        else if ((unsigned char)*s < 0x20) kn_strbuf_printf(b, "?");
        else kn_strbuf_printf(b, "%c", *s);
    }
}

static void set(void *obj, const char *name, const char *value)
{
    agsafeset(obj, (char *)name, (char *)value, "");
}

void kn_viz_set(void *obj, const char *name, const char *value) { set(obj, name, value); }

void kn_viz_esc(kn_strbuf *b, const char *s) { esc(b, s); }

void kn_viz_set_buf(void *obj, const char *name, kn_strbuf *b, bool html)
{
    const char *text = b->p ? b->p : "";
    if (html) agsafeset(obj, (char *)name, agstrdup_html(agroot(obj), (char *)text), ""); /* Graphviz adds the < > */
    else set(obj, name, text);
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

/* ---- the parts of a training step ---- */

/* A captured op's fill and a fused kernel's border by the part of the step
 * it belongs to (a drawing of a training step only): forward as before,
 * backward blue, the optimizer's update purple. */
static const char *part_fill(int part)
{
    return part == KN_PART_BACKWARD ? "#deebf7" : part == KN_PART_UPDATE ? "#efe3f5" : "white";
}

static const char *part_pen(int part)
{
    return part == KN_PART_BACKWARD ? "#2171b5" : part == KN_PART_UPDATE ? "#7a3b9e" : "#6b6b6b";
}

/* ---- the drawing's title ---- */

/* The heat legend (a timed drawing's): the colour scale and the host's
 * share of a call beside the kernels'. */
static void legend(kn_strbuf *b, const kn_viz_model *m)
{
    kn_strbuf_printf(b, "<TABLE BORDER=\"0\" CELLBORDER=\"1\" CELLSPACING=\"0\" CELLPADDING=\"4\">"
                        "<TR><TD COLSPAN=\"5\">share of the kernels' time (hottest: %.1f%%)</TD></TR><TR>",
                     m->max_pct);
    for (int i = 0; i <= 4; i++) {
        char colour[16];
        heat_colour(i / 4.0, colour, sizeof colour);
        kn_strbuf_printf(b, "<TD BGCOLOR=\"%s\">%.0f%%</TD>", colour, m->max_pct * i / 4.0);
    }
    kn_strbuf_printf(b, "</TR>");
    if (m->host_timed) {
        /* the host's share beside the kernels': the heat is blind to it */
        double pct = kn_viz_host_pct(m);
        kn_strbuf_printf(b, "<TR><TD COLSPAN=\"5\" ALIGN=\"LEFT\">per call: kernels %.1f us (%.0f%%) · host %.1f us "
                            "(%.0f%%)</TD></TR>",
                         m->kernel_us, 100 - pct, m->host_us, pct);
        if (pct >= KN_VIZ_HOST_BOUND_PCT)
            kn_strbuf_printf(b, "<TR><TD COLSPAN=\"5\" ALIGN=\"LEFT\" BGCOLOR=\"#fee0d2\">host-bound: %.0f%% of each "
                                "call is the host's, not in the heat</TD></TR>",
                             pct);
    }
    kn_strbuf_printf(b, "</TABLE>");
}

void kn_viz_label_drawing(Agraph_t *g, const kn_viz_model *m, const kn_viz_opts *o, kn_strbuf *b)
{
    /* an HTML-like label: the title's lines, then the legend under them,
     * out of the ranks of the graph's nodes */
    const kn_compiled *cm = m->cm;
    kn_strbuf_printf(b, "<TABLE BORDER=\"0\" CELLBORDER=\"0\" CELLSPACING=\"0\" CELLPADDING=\"0\">"
                        "<TR><TD ALIGN=\"LEFT\" BALIGN=\"LEFT\">");
    esc_html(b, cm->id.name);
    kn_strbuf_printf(b, " (");
    esc_html(b, cm->id.where);
    kn_strbuf_printf(b, ") · %s graph · mode %s · %d graph%s, %d break%s", o->view == KN_VIZ_FUSED ? "fused" : "captured",
                     cm->id.mode, m->n_graphs, m->n_graphs == 1 ? "" : "s", m->n_breaks, m->n_breaks == 1 ? "" : "s");
    if (o->view == KN_VIZ_FUSED) kn_strbuf_printf(b, ", %d kernel%s", m->n_kernels, m->n_kernels == 1 ? "" : "s");
    if (m->timed) kn_strbuf_printf(b, " · %.1f us per call in kernels", m->total_us);
    if (m->host_timed) {
        kn_strbuf_printf(b, "<BR/>");
        kn_viz_host_text(b, m, "<BR/>");
    }
    kn_strbuf_printf(b, "</TD></TR>");
    if (m->training) { /* which colour is which part of the step */
        bool fused = o->view == KN_VIZ_FUSED;
        kn_strbuf_printf(b, "<TR><TD ALIGN=\"LEFT\" CELLPADDING=\"4\"><TABLE BORDER=\"0\" CELLBORDER=\"1\" "
                            "CELLSPACING=\"2\" CELLPADDING=\"3\"><TR><TD BORDER=\"0\">a training step, %s by part:</TD>",
                         fused ? "kernels outlined" : "ops filled");
        for (int part = KN_PART_FORWARD; part <= KN_PART_UPDATE; part++)
            kn_strbuf_printf(b, fused ? "<TD COLOR=\"%s\">%s</TD>" : "<TD BGCOLOR=\"%s\">%s</TD>",
                             fused ? part_pen(part) : part_fill(part),
                             part == KN_PART_UPDATE ? "optimizer update" : kn_part_name(part));
        kn_strbuf_printf(b, "</TR></TABLE></TD></TR>");
    }
    if (m->timed) {
        kn_strbuf_printf(b, "<TR><TD ALIGN=\"LEFT\" CELLPADDING=\"6\">");
        legend(b, m);
        kn_strbuf_printf(b, "</TD></TR>");
    }
    kn_strbuf_printf(b, "</TABLE>");
    kn_viz_set_buf(g, "label", b, true);
}

/* ---- nodes ---- */

/* "\nfile.lua:12" under a node's text, with labels = "lines". */
static void line_text(kn_strbuf *b, const char *where, kn_viz_labels labels)
{
    if (labels != KN_VIZ_LABELS_LINES || !where[0]) return;
    kn_strbuf_printf(b, "\\n");
    esc(b, where);
}

static void node_text(Agnode_t *n, const kn_viz_vnode *v, kn_viz_labels labels, kn_strbuf *b)
{
    char bytes[32];
    kn_viz_fmt_bytes(v->bytes, bytes, sizeof bytes);
    switch (v->kind) {
    case KN_VN_OP:
    case KN_VN_VIEW:
        if (v->copies) /* a copy the plan makes: a node of its own, so it is seen */
            kn_strbuf_printf(b, "copy · %s\\n%s %s · %s", v->op, v->shape, v->dtype, bytes);
        else kn_strbuf_printf(b, "%s\\n%s %s", v->op, v->shape, v->dtype);
        line_text(b, v->where, labels);
        kn_viz_set_buf(n, "label", b, false);
        if (v->copies) {
            kn_strbuf_printf(b, "%s at ", v->op);
            esc(b, v->where[0] ? v->where : "?");
            kn_strbuf_printf(b, " copies %s every call: %s\\n%s %s", bytes,
                             v->kind == KN_VN_VIEW ? "a reshape of a layout its strides cannot express"
                                                   : "contiguous() materializes its input",
                             v->shape, v->dtype);
            kn_viz_set_buf(n, "tooltip", b, false);
            return;
        }
        kn_strbuf_printf(b, "%s%s at ", v->op, v->kind == KN_VN_VIEW ? " (a view: no copy)" : "");
        esc(b, v->where[0] ? v->where : "?");
        kn_strbuf_printf(b, "\\n%s %s, %s", v->shape, v->dtype, bytes);
        kn_viz_set_buf(n, "tooltip", b, false);
        return;
    case KN_VN_CONST:
        if (v->name[0]) {
            esc(b, v->name);
            kn_strbuf_printf(b, " = ");
        }
        kn_strbuf_printf(b, "%g", v->value);
        line_text(b, v->where, labels);
        kn_viz_set_buf(n, "label", b, false);
        kn_strbuf_printf(b, "a Lua number baked into the graph at ");
        esc(b, v->where[0] ? v->where : "?");
        kn_viz_set_buf(n, "tooltip", b, false);
        return;
    default: break;
    }
    static const char *const what[] = {
        [KN_VN_ARG] = "argument", [KN_VN_PARAM] = "parameter", [KN_VN_PREV] = "value of an earlier graph",
        [KN_VN_TENSOR] = "tensor", [KN_VN_OUTPUT] = "output"};
    esc(b, v->name);
    kn_strbuf_printf(b, "\\n%s %s", v->shape, v->dtype);
    line_text(b, v->where, labels);
    kn_viz_set_buf(n, "label", b, false);
    kn_strbuf_printf(b, "%s '", what[v->kind]);
    esc(b, v->name);
    kn_strbuf_printf(b, "': %s %s, %s", v->shape, v->dtype, bytes);
    if (v->where[0]) {
        kn_strbuf_printf(b, ", first used at ");
        esc(b, v->where);
    }
    kn_viz_set_buf(n, "tooltip", b, false);
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
        if (kn_op_kind_of(kn_op_by_name(v->op)) == KN_K_VIEW)
            set(n, "style", v->part != KN_PART_FORWARD ? "rounded,dashed,filled" : "rounded,dashed");
        if (v->part != KN_PART_FORWARD) set(n, "fillcolor", part_fill(v->part));
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

void kn_viz_label_node(Agnode_t *n, const kn_viz_vnode *v, kn_viz_labels labels, kn_strbuf *b)
{
    node_style(n, v);
    node_text(n, v, labels, b);
}

/* ---- cluster titles ---- */

void kn_viz_label_graph_title(Agnode_t *t, const kn_viz_model *m, const kn_viz_vgraph *vg, kn_strbuf *b)
{
    /* the captured view lists the first guards under the title, small: an
     * HTML-like label, for the two sizes */
    bool list_guards = m->view == KN_VIZ_CAPTURED && vg->n_guards;
    kn_strbuf_printf(b, "graph %d · version %d · %d op%s", vg->index, vg->version, vg->n_ops, vg->n_ops == 1 ? "" : "s");
    if (m->view == KN_VIZ_FUSED) kn_strbuf_printf(b, " · %d kernel%s", vg->n_kernels, vg->n_kernels == 1 ? "" : "s");
    kn_strbuf_printf(b, " · %d guard%s", vg->n_guards, vg->n_guards == 1 ? "" : "s");
    if (list_guards) {
        kn_strbuf_printf(b, "<BR ALIGN=\"LEFT\"/><FONT POINT-SIZE=\"8\">");
        for (int i = 0; i < vg->n_guards && i < KN_VIZ_SHOWN_LINES; i++) {
            kn_strbuf_printf(b, "guard: ");
            esc_html(b, vg->guards[i]);
            kn_strbuf_printf(b, "<BR ALIGN=\"LEFT\"/>");
        }
        if (vg->n_guards > KN_VIZ_SHOWN_LINES)
            kn_strbuf_printf(b, "... %d more guard%s: hover this title, or :guards and cm:guards()<BR ALIGN=\"LEFT\"/>",
                             vg->n_guards - KN_VIZ_SHOWN_LINES, vg->n_guards - KN_VIZ_SHOWN_LINES == 1 ? "" : "s");
        kn_strbuf_printf(b, "</FONT>");
        kn_viz_set_buf(t, "label", b, true);
    } else {
        kn_strbuf_printf(b, "\\l");
        if (vg->note[0]) {
            esc_wrapped(b, vg->note, 60);
            kn_strbuf_printf(b, "\\l");
        }
        kn_viz_set_buf(t, "label", b, false);
    }
    set(t, "fontsize", "11");
    /* every guard in the title's tooltip */
    kn_strbuf_printf(b, "guards of graph %d, version %d (a call runs it when all hold):", vg->index, vg->version);
    for (int i = 0; i < vg->n_guards; i++) {
        kn_strbuf_printf(b, "\\n- ");
        esc(b, vg->guards[i]);
    }
    kn_viz_set_buf(t, "tooltip", b, false);
}

void kn_viz_label_kernel(Agnode_t *t, Agraph_t *c, const kn_viz_model *m, const kn_viz_vgraph *vg, int k,
                         kn_strbuf *b)
{
    const kn_viz_vkernel *vk = &vg->kernels[k];
    char colour[16];
    kn_strbuf_printf(b, "#%d %s · %s", vk->number, vk->name, vk->kind);
    if (m->training) kn_strbuf_printf(b, " · %s", kn_part_name(vk->part));
    kn_strbuf_printf(b, "\\l");
    if (vk->epilogue_of >= 0) kn_strbuf_printf(b, "in the epilogue of %s\\l", vg->kernels[vk->epilogue_of].name);
    if (vk->timed) {
        kn_strbuf_printf(b, "%.1f us · %.1f%%", vk->us, vk->pct);
        if (vk->calls > 1) kn_strbuf_printf(b, " · %d calls", vk->calls);
        if (vk->roof >= 0) kn_strbuf_printf(b, " · roof %.0f%%", vk->roof);
        kn_strbuf_printf(b, "\\l");
    }
    else if (m->timed) kn_strbuf_printf(b, "(not timed%s)\\l", vk->epilogue_of >= 0 ? ": part of that call" : "");
    kn_viz_set_buf(t, "label", b, false);
    set(t, "fontsize", "10");
    kn_strbuf_printf(b, "kernel %d, %s (%s, %s): :src %d shows its source", vk->number, vk->name, vk->kind, vk->group,
                     vk->number);
    kn_viz_set_buf(t, "tooltip", b, false);
    set(c, "style", "rounded,filled");
    if (vk->timed) heat_colour(m->max_pct > 0 ? vk->pct / m->max_pct : 0, colour, sizeof colour);
    set(c, "fillcolor", vk->timed ? colour : m->timed ? "#f7f7f7" : kind_colour(vk->kind));
    set(c, "color", m->training ? part_pen(vk->part) : vk->epilogue_of >= 0 ? "#8c6bb1" : "#6b6b6b");
    if (m->training && vk->part != KN_PART_FORWARD) set(c, "penwidth", "2");
    kn_strbuf_printf(b, "kernel %d, %s (%s, %s)", vk->number, vk->name, vk->kind, vk->group);
    kn_viz_set_buf(c, "tooltip", b, false);
}

void kn_viz_label_repeat_title(Agnode_t *t, const kn_viz_model *m, const kn_viz_vgraph *vg, kn_strbuf *b)
{
    double pct = 0;
    for (int k = vg->rep_start; m->view == KN_VIZ_FUSED && k < vg->rep_start + vg->rep_len * vg->rep_count; k++)
        pct += vg->kernels[k].pct;
    kn_strbuf_printf(b, "× %d: the same %d %s, repeated %d times (drawn once)\\l", vg->rep_count, vg->rep_len,
                     m->view == KN_VIZ_FUSED ? (vg->rep_len == 1 ? "kernel" : "kernels") : "nodes", vg->rep_count);
    if (m->view == KN_VIZ_FUSED && m->timed) kn_strbuf_printf(b, "%.1f%% of the time in all %d\\l", pct, vg->rep_count);
    kn_viz_set_buf(t, "label", b, false);
    set(t, "fontcolor", "#3182bd");
}

/* ---- breaks and the legend ---- */

void kn_viz_label_break(Agnode_t *n, const kn_break *br, int i, kn_viz_labels labels, kn_strbuf *b)
{
    kn_strbuf_printf(b, "graph break %d: ", i + 1);
    esc(b, br->category);
    kn_strbuf_printf(b, "\\n");
    esc_wrapped(b, br->reason, 48);
    kn_strbuf_printf(b, "\\nat ");
    esc(b, br->where);
    if (labels == KN_VIZ_LABELS_LINES && br->n_frames > 0) {
        /* the user stack, innermost first, as the break's message gives it */
        kn_strbuf_printf(b, "\\nuser stack:");
        for (int f = 0; f < br->n_frames && f < KN_VIZ_SHOWN_LINES; f++) {
            kn_strbuf_printf(b, "\\n");
            esc(b, br->frame_where[f]);
            const char *fn = br->frame_fn[f];
            if (!fn[0]) kn_strbuf_printf(b, " in main chunk");
            else {
                kn_strbuf_puts(b, fn[0] == '<' ? " in " : " in '"); /* '<': Lua's name for one it cannot name */
                esc(b, fn);
                if (fn[0] != '<') kn_strbuf_printf(b, "'");
            }
        }
        if (br->n_frames > KN_VIZ_SHOWN_LINES)
            kn_strbuf_printf(b, "\\n... %d more frame%s: hover this node, or :breaks", br->n_frames - KN_VIZ_SHOWN_LINES,
                             br->n_frames - KN_VIZ_SHOWN_LINES == 1 ? "" : "s");
    }
    kn_viz_set_buf(n, "label", b, false);
    char text[4096];
    kn_break_format(br, text, sizeof text);
    esc(b, text);
    kn_viz_set_buf(n, "tooltip", b, false);
    set(n, "shape", "box");
    set(n, "style", "filled,bold");
    set(n, "color", "#cb181d");
    set(n, "penwidth", "2");
    set(n, "fillcolor", "#fee0d2");
    set(n, "fontcolor", "#67000d");
}
