/* kn_fuse: fusion and scheduling, graph -> kernels.
 *
 * Every node gets a disposition: an input, a constant, a view (made at run
 * time from its source's value: no copy), inlined into the one kernel that
 * uses it, the root of a kernel (its value is materialized), or dead.
 * Pointwise chains of one shape fuse into one POINTWISE kernel; a reduction,
 * softmax or layer_norm takes its pointwise producers into one ROW kernel;
 * matmul and convolution are LIBRARY kernels whose consumers (bias,
 * activation, residual) fuse into the pointwise kernel that follows; what
 * no generated kernel covers yet is a FALLBACK run by the reference
 * executor. Views become strides in the kernels that read them.
 *
 * kn_fuse_group.c groups the nodes (kn_fuse_ex); kn_fuse.c builds each
 * group's kernel IR.
 */
#ifndef KN_FUSE_H
#define KN_FUSE_H

#include "kn_kir.h"

typedef enum kn_disp {
    KN_D_DEAD,
    KN_D_INPUT,
    KN_D_CONST,
    KN_D_VIEW,
    KN_D_INLINE,
    KN_D_ROOT
} kn_disp;

/* The layout of a value the plan materializes or binds: strides in
 * elements (the value's data pointer already includes any view offset). */
typedef struct kn_layout {
    int ndim;
    int64_t shape[KN_MAX_DIMS];
    int64_t strides[KN_MAX_DIMS];
} kn_layout;

/* One data edge between two kernels: the consumer's kernel reads the
 * producer's value from memory. reason says why they are not one kernel,
 * naming both ops by op name and source line ("layer_norm (f.lua:21) ..."),
 * so a user can act on it (KILN_LOGS=fusion, the fused drawing's edges). */
#define KN_FUSE_REASON_MAX 400
typedef struct kn_fuse_edge {
    int producer, consumer;      /* op nodes */
    int from_kernel, to_kernel;
    int view;                    /* the view node the consumer reads through (the one nearest it), or -1 */
    char reason[KN_FUSE_REASON_MAX];
} kn_fuse_edge;

typedef struct kn_fusion {
    int n_nodes;
    kn_disp *disp;     /* per node */
    int *kernel;       /* per node: the kernel that computes it (roots and inlined), or -1 */
    int *last_use;     /* per node: the position (node index) of the last kernel or view
                          that reads its value (n_nodes: an output, kept) */
    int *drop_head;    /* per position: the first node whose value dies there, or -1 */
    int *drop_next;    /* per node: the next node that dies at the same position, or -1 */
    kn_layout *layout; /* per node (output 0) */
    kn_kprogram prog;
    int *kernel_at;    /* per kernel: the node at whose position it runs */
    char *why;         /* KILN_LOGS=fusion: the passes' notes and the layout notes (may be NULL) */
    kn_fuse_edge *edges; /* every producer -> consumer edge that crosses kernels, in consumer order */
    int n_edges;
    bool *copies;      /* per node: a view that copies at run time (a reshape its source's strides
                          cannot express): drawn as a copy, not a view */
    int n_permuted;    /* library kernels whose value is laid out permuted (see kn_fuse_ex) */
    int n_view_copies; /* reshapes that copy at run time (kn_view_run): not kernels, but copies per call */
    bool *limit_split; /* per node: it would have been inlined, but its consumer's kernel went past
                          the kernel IR's limits (KN_KIR_MAX_ARGS, _EXPRS), so it ends a kernel */
    bool *stored;      /* per node: inlined into a kernel that also stores the value: the row kernel
                          of its first reader (a layer norm's row: the residual sum before it), for
                          the readers after it, or the one pointwise kernel holding all its readers
                          (an optimizer's new moment, a result) */
    bool *rides;       /* per node: part of a small pointwise value of the graph's inputs with the
                          shape of a row kernel's rows (BERT's padding mask, B x T, beside its
                          embeddings' layer norm over B x T rows), computed and stored once a row
                          by that kernel instead of by a kernel of its own; the value's own node
                          is also stored */
    bool *joins;       /* per node: a one-element pointwise value computed and stored by the kernel
                          of a later one-element value that does not read it (an optimizer's two
                          bias corrections and its step count: one kernel a parameter, not three) */
} kn_fusion;

/* Whether the backend can write library node `node`'s value with the
 * strides of `layout` (not contiguous). */
typedef bool (*kn_fuse_strided_out_fn)(void *ud, const kn_graph *g, int node, const kn_layout *layout);

/* Plan the kernels of g. outputs: the node indices whose values the caller
 * needs (kept materialized). Inputs must be bound or carry strides. */
kn_status kn_fuse(const kn_graph *g, const int *outputs, int n_outputs, kn_fusion *f);
/* kn_fuse, where a library kernel whose value only a permute reads, and a
 * reshape that would copy reads that permute (attention's head merge), may
 * have its value laid out permuted (layout[node] not contiguous) so that
 * the reshape copies nothing; strided_out(ud, ...) says whether the
 * plan's backend can write it so (NULL: never). */
kn_status kn_fuse_ex(const kn_graph *g, const int *outputs, int n_outputs, kn_fuse_strided_out_fn strided_out,
                     void *ud, kn_fusion *f);
/* kn_fuse_ex where, with gather_loads, an index_select of rows (an
 * embedding lookup) whose one reader is a generated kernel, directly or
 * through a reshape that splits its rows, is read in that kernel through
 * its index (a gathered argument, kn_karg.gather_by) instead of running
 * alone. Such a kernel clamps a bad index into range and reports nothing,
 * so only plans whose runs are replays use it (KN_PLAN_GATHER_LOADS). */
kn_status kn_fuse_gathering(const kn_graph *g, const int *outputs, int n_outputs, kn_fuse_strided_out_fn strided_out,
                            void *ud, bool gather_loads, kn_fusion *f);
void kn_fusion_free(kn_fusion *f);

#endif
