/* kn_pass_ctx: what the pass files (kn_passes.c, kn_passes_fold.c) share
 * and nobody else needs: the rewrite context every pass works in.
 *
 * A pass does not move nodes itself. It marks nodes dead, redirects a
 * node's uses to another value (repl), or appends nodes and says where
 * they go (before); commit() in kn_passes.c then builds the new node
 * array, points every input and every caller output at the surviving
 * values and renumbers.
 * Values are encoded as node * KN_MAX_OUTPUTS + output ("refs"). A
 * replacement always points at an earlier node, so chains end.
 */
#ifndef KN_PASS_CTX_H
#define KN_PASS_CTX_H

#include <stdbool.h>

#include "kn_graph.h"

typedef struct kn_pass_ctx {
    kn_graph *g;
    int *outputs, n_outputs;
    int n_orig;           /* nodes before the pass appended any */
    int cap;              /* entries of the arrays below (nodes) */
    int *repl;            /* cap * KN_MAX_OUTPUTS refs: where uses of each value go */
    unsigned char *dead;  /* cap: remove this node */
    int *before;          /* cap: an appended node goes before this original node (-1: at the end) */
    int flags;            /* the caller's KN_PASSES_* flags (the layout pass reads KN_PASSES_NHWC_*) */
    char **notes;         /* where a pass explains what it left alone (KILN_LOGS=fusion), or NULL:
                             lines appended to a malloc'd string the caller frees */
    const struct kn_settings *settings; /* the ops a pass runs (folding) run with these; NULL: defaults */
} kn_pass_ctx;

#define KN_REF(node, out) ((node) * KN_MAX_OUTPUTS + (out))
#define KN_REF_NODE(r) ((r) / KN_MAX_OUTPUTS)
#define KN_REF_OUT(r) ((r) % KN_MAX_OUTPUTS)

/* Grow the arrays to g->n_nodes after a pass appended nodes. */
kn_status kn_pass_sync(kn_pass_ctx *x);
/* The value uses of r go to now. */
int kn_pass_resolve(const kn_pass_ctx *x, int r);
/* Rewrite node i's inputs to their resolved values (done before a pass
 * looks at the node, so comparisons see the values that will remain). */
void kn_pass_resolve_inputs(kn_pass_ctx *x, int i);
/* Whether two values have the same dtype and shape. */
bool kn_pass_meta_equal(const kn_meta *a, const kn_meta *b);
/* Whether node i is one of the caller's outputs. */
bool kn_pass_is_output(const kn_pass_ctx *x, int i);
/* Redirect every use of node i's output 0 to value r and drop node i. False
 * (nothing done) when i is a caller output and r is not an output 0, which
 * the caller's list of node indices cannot express. */
bool kn_pass_replace(kn_pass_ctx *x, int i, int r);

/* The CONST node's value as its op sees it: as its dtype stores it (an i32
 * constant 1.5 is 1), in f32 for an f16 or bf16 one (their math type). */
double kn_pass_const_value(const kn_node *n);

/* The tensor behind an input node whose values stay until the plan is
 * built again (a parameter, a captured tensor, or a pass's fold), which a
 * pass may compute from once (laid out, merged): the plan notices when one
 * is written later and builds again (kn_plan_stale). NULL for anything
 * else, and for every value of a training step, which writes its
 * parameters at every call: a weight computed from once would build the
 * plan again at every step. */
kn_tensor *kn_pass_fixed_value(const kn_graph *g, int node, int out);
/* The same without the training-step check, for a pass that made it once
 * for the whole graph (kn_pass_graph_trains walks every node). */
kn_tensor *kn_pass_fixed_input(const kn_graph *g, int node, int out);
/* t's elements as float64, row-major, in *out (malloc'd; the caller frees
 * it): from any device and any layout (a copy to make it contiguous runs
 * with settings). */
kn_status kn_pass_load_doubles(kn_tensor *t, const struct kn_settings *settings, double **out);
/* The values of the fixed input behind node (kn_pass_fixed_value), read by
 * a pass that decides something from them (an attention mask found to be
 * the causal one): the input is marked (kn_graph_input.values_read), so the
 * plan builds again when it is written. NULL and *out NULL where node is
 * no such input or reading fails. */
kn_tensor *kn_pass_read_fixed_value(kn_pass_ctx *x, int node, double **out);
/* A new graph input holding t (the caller keeps its own reference), a
 * value the pass computed now from fixed values (a folded, laid-out or
 * merged weight): the plan counts as having folded parameter values in,
 * so it builds again when one is written (kn_plan_stale). Placed before
 * node `before`; its node in *node. where: the location its node shows
 * (copied first: adding the input may move the node array). */
kn_status kn_pass_add_folded_value(kn_pass_ctx *x, const char *name, kn_tensor *t, const char *where, int before,
                                   int *node);
/* Whether g is (part of) a training step: a node of a backward or update part. */
bool kn_pass_graph_trains(const kn_graph *g);

/* For the pattern passes (kn_pass_attention, kn_pass_gather_scatter): */
/* Append one printf-formatted line to x->notes (KILN_LOGS=fusion); best
 * effort, a note that cannot be kept is dropped. */
void kn_pass_note(kn_pass_ctx *x, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* "matmul (f.lua:3)": how a note names node i (written into buf). */
const char *kn_pass_who(const kn_graph *g, int i, char *buf, size_t size);
/* What a fused node covers, for :kernels: "matmul f.lua:27, mul :27,
 * softmax :28" (nodes order[0..n) each once with its line, the file named
 * on the first only when all share it), then `folded` (" (causal mask
 * folded)") when not NULL. */
void kn_pass_covers_text(const kn_graph *g, const int *order, int n, const char *folded, char *buf, size_t size);
/* One user and not a value the caller needs: the node can disappear. */
bool kn_pass_private_value(const kn_pass_ctx *x, int node);
/* Append a node of op `op` on inputs refs[0..n) with attrs a (NULL: the
 * op's defaults), placed before node `before`, its shape inferred. Not
 * kept when it does not infer (the error is returned); its index in *out. */
kn_status kn_pass_append_node(kn_pass_ctx *x, int op, const int *refs, int n, const kn_attrs *a, int before,
                              const char *where, int *out);

#endif
