/* kn_lua_replay_tape: the autograd history of a directly replayed call.
 *
 * A compiled call of a module in train mode (grad on) returns results
 * that carry autograd history: the tape its trace recorded, whose saved
 * values are outputs of the graph. A direct replay runs the graph without
 * the Lua function, so no tape is recorded; instead, after the trace,
 * kn_replay_tape_record keeps the tape's shape (each node's op,
 * attributes, edges and which graph value, graph input or outside tensor
 * it saved), and kn_replay_tape_attach builds the same nodes at every
 * replay from that run's values, as a traced call would have attached
 * them. Backward from a replayed result then gives the traced call's
 * gradients. Private to scripting/ (kn_lua_replay.c).
 */
#ifndef KN_LUA_REPLAY_TAPE_H
#define KN_LUA_REPLAY_TAPE_H

#include <stddef.h>
#include <stdint.h>

#include "kn_autograd.h"
#include "kn_capture.h"

typedef struct kn_replay_tape kn_replay_tape;

/* The tape of the results (placeholders of graph 0 of version v) of the
 * traced call that just ended, whose graph computed the values of
 * cap->last_want; the call's tape nodes are those numbered seq0 or later,
 * and args its tensor arguments (NULL for a non-tensor one). NULL, with
 * why, when a replay cannot rebuild it (a saved value the graph did not
 * compute, a node of another graph). */
kn_replay_tape *kn_replay_tape_record(const kn_capture *cap, const kn_version *v, uint64_t seq0,
                                      kn_tensor *const *results, int n_results, kn_tensor *const *args, int nargs,
                                      char *why, size_t why_size);
void kn_replay_tape_free(kn_replay_tape *tp);

/* The values a replay asks the graph for (the traced call's, in order). */
const kn_plan_value *kn_replay_tape_want(const kn_replay_tape *tp, int *n_want);
/* Which of them result i is (-1: a constant Lua value). */
int kn_replay_tape_result_value(const kn_replay_tape *tp, int i);

/* Build the tape's nodes from a replay's values: outs (one per wanted
 * value), bound (the graph's inputs) and args (this call's tensor
 * arguments, NULL for others); results[i] gets a new reference to result
 * i's value, with its history when it had one (NULL for a constant). */
kn_status kn_replay_tape_attach(const kn_replay_tape *tp, kn_autograd *ag, kn_tensor *const *outs,
                                kn_tensor *const *bound, kn_tensor *const *args, kn_tensor **results);

#endif
