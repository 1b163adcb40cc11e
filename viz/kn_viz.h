/* kn_viz: pictures of a compiled function, for kiln.render and :graph.
 *
 * Two views of what capture and the compiler made of a kn_compiled:
 *   captured  the latest version of each graph, one cluster per graph, with
 *             every op node (op, output shape and dtype, source line in the
 *             tooltip), the inputs (arguments, parameters by dotted name,
 *             outputs of an earlier graph) and the outputs, and between two
 *             graphs a red node for the break that split them (category,
 *             reason, line);
 *   fused     the same graphs after the passes, one cluster per kernel
 *             (name and kind), edges between kernels labeled with the
 *             tensor's shape and bytes, and, when timings are given, each
 *             kernel's median time, share and roofline % with a heat colour,
 *             and the host's share of a call beside them.
 * Either view renders to SVG (Graphviz's dot layout, plugins preloaded: no
 * Graphviz config file needed) or to DOT text (no layout, deterministic:
 * no pointers and no timings unless given), or to a compact text outline
 * for the terminal.
 *
 * Depends on core/ and Graphviz only; knows nothing of Lua.
 */
#ifndef KN_VIZ_H
#define KN_VIZ_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_capture.h"

/* The most nodes a drawing may have: Graphviz's dot layout (SVG) takes
 * about a second at 2,000 nodes and grows faster than the square, and
 * building the DOT text grows about as the square; neither can be
 * interrupted, and 100,000 nodes ran for hours. A larger drawing is
 * refused with a message pointing at the outline. */
#define KN_VIZ_LAYOUT_MAX_NODES 2000
#define KN_VIZ_DOT_MAX_NODES 20000

typedef enum kn_viz_view { KN_VIZ_CAPTURED, KN_VIZ_FUSED } kn_viz_view;
typedef enum kn_viz_format { KN_VIZ_SVG, KN_VIZ_DOT } kn_viz_format;

/* The measured time of one kernel (a row of kiln.time's kernel table). */
typedef struct kn_viz_timing {
    char name[96];
    char key[64];     /* "PLAN#INDEX" as kiln.profiler's records have it, or "" */
    double median_us;
    double pct;       /* share of the kernels' time per call, 0..100 */
    double roof_pct;  /* % of the roofline; < 0 when unknown */
    int calls;        /* launches per model call */
} kn_viz_timing;

/* What a node's label says: its op (or name), shape and dtype, or that
 * and the source line (file:line) that made it; a break's label then has
 * its user stack too. */
typedef enum kn_viz_labels { KN_VIZ_LABELS_PLAIN, KN_VIZ_LABELS_LINES } kn_viz_labels;

typedef struct kn_viz_opts {
    kn_viz_view view;
    const char *rankdir;           /* "TB" (NULL: default), "LR", "BT", "RL" */
    bool collapse;                 /* draw a repeated run of ops/kernels once, with its count */
    kn_viz_labels labels;
    const kn_viz_timing *timings;  /* borrowed; NULL: no timings */
    int n_timings;
    /* the host's time per call beside the kernels' (kiln.time's host_us
     * and kernel_us), shown with the timings when host_timed */
    bool host_timed;
    double host_us, kernel_us;
} kn_viz_opts;

/* The view as SVG or DOT text in *out (NUL-terminated, *len bytes; the
 * caller frees it). KN_ERR_ARG when cm has no graph yet (never called). */
kn_status kn_viz_render(const kn_compiled *cm, const kn_viz_opts *o, kn_viz_format fmt, char **out, size_t *len);
/* The same, written to path; KN_ERR_IO names the path and the reason. */
kn_status kn_viz_render_file(const kn_compiled *cm, const kn_viz_opts *o, kn_viz_format fmt, const char *path);
/* A compact text outline of the view for the terminal: per graph its ops
 * (captured) or kernels with their ops and timings (fused), and the breaks
 * between graphs. Caller frees *text. */
kn_status kn_viz_outline(const kn_compiled *cm, const kn_viz_opts *o, char **text);

#endif
