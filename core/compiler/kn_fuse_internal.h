/* kn_fuse_internal: what kn_fuse_group.c (which nodes share a kernel) and
 * kn_fuse.c (the kernel IR of one group) share and no one else needs. The
 * grouping uses the builder, never the other way round. */
#ifndef KN_FUSE_INTERNAL_H
#define KN_FUSE_INTERNAL_H

#include "kn_graph.h"
#include "kn_kir.h"

/* kn_fuse.h's type, by its tag: including it here would make this header
 * and kn_fuse.c, which includes both, a circle of modules. */
struct kn_fusion;

/* Whether node n is an op (not an input or a constant). */
static inline bool kn_fuse_is_op(const kn_node *n)
{
    return n->op < KN_OP_COUNT;
}

/* Build kernel f->kernel[root] of the grouping in f, whose root is node
 * `root`, as a kernel of `kind` (ROW: reducing dim row_dim of its row
 * input): its name, its IR, the list of its nodes. memo_expr and memo_arg
 * are scratch of g->n_nodes ints each. */
kn_status kn_fuse_build_kernel(const kn_graph *g, struct kn_fusion *f, int root, kn_kernel_kind kind, int row_dim,
                               int *memo_expr, int *memo_arg);

/* The index I when `node` is where(I < 0, I + rows, I) + 1: ONNX's Gather
 * (0-based, a negative index counting from the end) as the importer writes
 * it for kiln's 1-based index_select, over a table of `rows` rows; else -1.
 * A gathered load that reads I itself wraps it (kn_karg.gather_from_end).
 * chain (when not NULL) gets the arithmetic's nodes: the + 1, the where,
 * the < 0 and the + rows. */
int kn_fuse_wrapped_index(const kn_graph *g, int node, int64_t rows, int chain[4]);

#endif
