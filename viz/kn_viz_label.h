/* kn_viz_label: everything the drawings say, private to viz/: the text,
 * tooltip, shape and colours of each node, the titles of the drawing and
 * of its clusters (with the heat legend), and the break nodes. kn_viz_dot.c
 * decides where they go; this file decides what they say. */
#ifndef KN_VIZ_LABEL_H
#define KN_VIZ_LABEL_H

#include <graphviz/cgraph.h>

#include "kn_viz_model.h"

/* How many guards a graph's title lists, and how many frames of a break's
 * user stack its node lists (labels = "lines"); the rest are counted, and
 * are in the tooltip. */
#define KN_VIZ_SHOWN_LINES 6

void kn_viz_set(void *obj, const char *name, const char *value);
/* Set attribute `name` to the buffer's text (HTML-like when html), then
 * empty the buffer. */
void kn_viz_set_buf(void *obj, const char *name, kn_strbuf *b, bool html);
/* s with backslashes and newlines escaped for a Graphviz label or tooltip. */
void kn_viz_esc(kn_strbuf *b, const char *s);

/* The drawing's title, g's label: the function, view, mode, counts,
 * timings and the host's share of a call, and when timed the heat legend
 * under them. */
void kn_viz_label_drawing(Agraph_t *g, const kn_viz_model *m, const kn_viz_opts *o, kn_strbuf *b);
/* Node n drawing v: shape, colours, label and tooltip. */
void kn_viz_label_node(Agnode_t *n, const kn_viz_vnode *v, kn_viz_labels labels, kn_strbuf *b);
/* The title node of graph vg's cluster: counts, the fused view's note,
 * the captured view's first guards, every guard in the tooltip. */
void kn_viz_label_graph_title(Agnode_t *t, const kn_viz_model *m, const kn_viz_vgraph *vg, kn_strbuf *b);
/* Kernel k of vg: the title node t (name, kind, time, share, roof%) and
 * its cluster c's colours (the heat when timed, else the kind's colour). */
void kn_viz_label_kernel(Agnode_t *t, Agraph_t *c, const kn_viz_model *m, const kn_viz_vgraph *vg, int k,
                         kn_strbuf *b);
/* The title node of the repeated run {collapse = true} draws once. */
void kn_viz_label_repeat_title(Agnode_t *t, const kn_viz_model *m, const kn_viz_vgraph *vg, kn_strbuf *b);
/* Break number i (from 0): category, reason, line, with labels = "lines"
 * its user stack; the whole message in the tooltip. */
void kn_viz_label_break(Agnode_t *n, const kn_break *br, int i, kn_viz_labels labels, kn_strbuf *b);

#endif
