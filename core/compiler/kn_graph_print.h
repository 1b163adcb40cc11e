/* kn_graph_print: a graph as text (KILN_LOGS=passes, test failures). */
#ifndef KN_GRAPH_PRINT_H
#define KN_GRAPH_PRINT_H

#include "kn_graph.h"

/* The graph as text, one line per node:
 *   "  5  add          (3, 4:1)           f32{2,3}  at model.lua:12"
 * index, op, inputs (node or node:output), out dtype and shape (each output),
 * the attributes worth showing, and the source line. *text is malloc'd; the
 * caller frees it. */
kn_status kn_graph_format(const kn_graph *g, char **text);

#endif
