/* kn_viz_gv: the Graphviz plumbing under kn_viz_dot.c, private to viz/:
 * a graph whose object IDs follow creation order (stable DOT text), the
 * DOT writer, the dot layout and SVG renderer with their plugins preloaded,
 * Graphviz's messages caught for our errors, and the font every drawing
 * is laid out and shown with. */
#ifndef KN_VIZ_GV_H
#define KN_VIZ_GV_H

#include <stddef.h>

#include <graphviz/cgraph.h>

#include "kn_status.h"

/* The font of every label. Graphviz's core plugins (no cairo or pango)
 * measure text with built-in width tables, and the only exact one is
 * Courier's: 0.6 em for every byte (lib/common/textspan.c,
 * estimate_textspan_size, taken for any font name starting "cour"). So the
 * layout measures Courier, and the SVG names a list of faces that all
 * advance 0.6 em per character (DejaVu Sans Mono 0.602, Courier New and
 * Liberation Mono 0.600, then any monospace face): whichever the viewer
 * has, a line is as wide as the layout made room for. A character of two
 * or more UTF-8 bytes ('·', '×') is measured as that many, so it gets
 * more room than it takes, never less. */
#define KN_VIZ_FONT "Courier"
#define KN_VIZ_FONT_FAMILY "DejaVu Sans Mono, Courier New, Courier, monospace"

/* A new directed graph named `name` whose object IDs are numbered in
 * creation order; NULL when out of memory. */
Agraph_t *kn_viz_gv_open(const char *name);
/* g as DOT text (caller frees *out). */
kn_status kn_viz_gv_dot(Agraph_t *g, char **out, size_t *len);
/* g laid out with dot and rendered as SVG, its text in KN_VIZ_FONT_FAMILY
 * (caller frees *out). */
kn_status kn_viz_gv_svg(Agraph_t *g, char **out, size_t *len);

/* Graphviz's messages, caught from kn_viz_gv_catch to kn_viz_gv_release
 * (the last ones end up in our errors instead of on stderr mid-session). */
typedef struct kn_viz_gv_errors {
    agusererrf handler;
    agerrlevel_t level;
} kn_viz_gv_errors;
void kn_viz_gv_catch(kn_viz_gv_errors *saved);
void kn_viz_gv_release(const kn_viz_gv_errors *saved);

#endif
