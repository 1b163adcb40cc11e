/* kn_passes: graph-to-graph rewrites that run between capture and fusion,
 * and the graph checker that runs between them (the printer is kn_graph_print).
 *
 * The pipeline is a short named list, as tinygrad's: dce, cse,
 * fold_constants, fold_batch_norm, simplify, attention, gather_scatter,
 * channels_last, merge_projections, fold_once, simplify (again: fold_once
 * leaves view chains), sink_views (an elementwise op of one input moves
 * ahead of the view it reads, so fusion joins it to its producer),
 * recompute, dce. Each pass rewrites the
 * graph in place and keeps its invariants (node i reads only nodes before
 * it; every node's out metas are what kn_op_infer says for its inputs), so
 * kn_graph_verify can run after any of them. A pass may remove, merge and
 * renumber nodes; it never changes the value of a node the caller listed as
 * an output (within f32 rounding for fold_batch_norm; bit for bit otherwise,
 * except that x + 0 turns a -0.0 into +0.0).
 *
 * What callers should know:
 * - INPUT nodes are never removed and g->inputs is never reordered (nodes
 *   are renumbered, inputs are not): g->inputs[k] keeps its index, so
 *   binding by input index stays valid. An INPUT node no output depends on
 *   stays in the graph, unused; executors may skip it.
 * - After a pass an output may be an INPUT or CONST node (x * 1 with x an
 *   input; 2 * 3), or the same node as another output (cse). A listed node
 *   with two outputs (max) keeps both: value (outputs[i], k) is what
 *   (old node, k) was. A listed node is never replaced by output 1 of
 *   another node (neg(neg(max indices)) stays when it is an output).
 * - fold_batch_norm adds inputs: g->inputs grows by two per folded conv
 *   (kind KN_IN_VALUE, named "folded conv weight" / "folded conv bias"),
 *   bound to tensors computed from the bound values of the conv's and the
 *   batch norm's parameters at the time of the pass. The graph owns them;
 *   they are not arguments anyone binds again. Their values are those of
 *   the parameters when the pass ran: a parameter changed in place later
 *   (same tensor, new values) needs the graph compiled again, which
 *   kn_plan does from the storages' write versions (kn_plan_stale). It
 *   folds only when every parameter involved is a bound INPUT node of a
 *   kind that is the same tensor at every call (kn_input_keeps_values), so
 *   it does nothing on an unbound copy (kn_graph_copy) of a graph, nor on
 *   arguments: run the passes on the bound graph a capture produced.
 * - fold_once adds inputs too: each value that depends only on shapes,
 *   constants and fixed values (parameters and kept tensors,
 *   kn_pass_fixed_value; no argument, nothing random: a causal mask,
 *   arange position ids, BERT's token-type embeddings gathered by ids the
 *   model holds) and that a value depending on arguments reads is computed
 *   now, node by node on the bound inputs' device, and becomes an input
 *   the graph owns (kind KN_IN_VALUE, named KN_ONCE_PREFIX and its ops;
 *   from_inputs when it read a fixed value, so the plan is built again
 *   when one is written). A plan therefore computes it once per version
 *   of what it reads. An index_select whose folded index is 1..n over its
 *   whole dim is dropped (its input is its value). Not folded: caller
 *   outputs (the caller would share the plan's buffer; a value autograd
 *   saves is one), a lone full (its readers compute it for free), values
 *   over 64 MiB. It runs after the pattern passes, which may want to see
 *   the subgraph.
 * - cse merges constants with the same value and dtype (the first keeps its
 *   name): guards on Lua numbers should be taken from the graph as captured.
 */
#ifndef KN_PASSES_H
#define KN_PASSES_H

#include <stddef.h>

#include "kn_graph.h"
#include "kn_graph_print.h" /* kn_graph_format, for the callers that log graphs */

#include "kn_pass_flags.h" /* KN_PASSES_* and KN_PLAN_* */

/* Run the pass list on g in place. outputs[0..n_outputs) are the node
 * indices whose values the caller needs (output 0, or every output of a
 * multi-output node); they are updated in place to the new indices. On
 * error the graph may be half rewritten (still valid unless VERIFY failed):
 * run the passes on a copy when the original must survive. */
kn_status kn_passes_run(kn_graph *g, int *outputs, int n_outputs, int flags);
/* The same, keeping what the passes say they left alone and why (the
 * attention pass's unmatched chains): *notes, if not NULL on return, is a
 * malloc'd text of lines the caller frees. The ops the passes run (the
 * values they fold) run with settings (NULL: the defaults, as kn_passes_run
 * and kn_pass_run run them). */
kn_status kn_passes_run_noted(kn_graph *g, int *outputs, int n_outputs, int flags, char **notes,
                              const struct kn_settings *settings);

/* Run one pass of the list by name ("cse"); KN_ERR_ARG for an unknown name. */
kn_status kn_pass_run(kn_graph *g, const char *name, int *outputs, int n_outputs, int flags);

/* The pass list, in order, NULL-terminated (static storage). */
const char *const *kn_passes_names(void);

/* Check the invariants: input counts and indices (node i reads only nodes
 * before it, outputs that exist), INPUT nodes pointing at their input with
 * its meta, CONST nodes 0-dim, and kn_op_infer on each op node's input
 * metas reproducing its out metas. On failure returns KN_ERR_ARG, writes a
 * message naming the node into why (and kn_last_error). why may be NULL. */
kn_status kn_graph_verify(const kn_graph *g, char *why, size_t size);

#endif
