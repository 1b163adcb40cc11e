/* kn_autograd: reverse-mode automatic differentiation of kiln's ops.
 *
 * Recording: every op a caller runs goes through kn_autograd_run, the one
 * entry where a kn_opcall is dispatched. It runs the op through the
 * caller's executor (kn_exec: eagerly, or into a graph being
 * captured) and, when grad mode is on and an input requires grad, records
 * a tape node on the outputs (their kn_grad_meta, kn_tensor.h): the op,
 * its attributes, what its gradient rule needs saved.
 *
 * Backward (kn_autograd_backward) walks the nodes from the outputs in
 * reverse recording order and calls each op's rule (kn_grad.def: one row
 * per row of kn_ops.def). A rule is written as calls of kiln's own ops,
 * made through the same executor, so a backward that runs while capture
 * traces records its ops as graph nodes like any others: a compiled
 * training step is one joint graph of forward, backward and update. Gradients reach the leaves' .grad only once the whole pass has
 * succeeded, so a failing backward leaves no .grad half updated.
 *
 * Nothing here knows Lua; scripting/kn_lua_autograd.c binds it.
 */
#ifndef KN_AUTOGRAD_H
#define KN_AUTOGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_autograd_types.h"
#include "kn_op.h"

void kn_autograd_init(kn_autograd *ag);

/* Run c through ex and record it when grad mode is on and an input
 * requires grad. On success c->out holds the outputs (new references),
 * their metas set. */
kn_status kn_autograd_run(kn_autograd *ag, kn_exec *ex, kn_opcall *c, kn_device dev);

bool kn_autograd_requires_grad(const kn_tensor *t);
/* x:requires_grad_(on): only a float tensor without history may. */
kn_status kn_autograd_set_requires_grad(kn_tensor *t, bool on);
/* The op that made t (its grad_fn) or NULL for a leaf or a tensor without
 * history. */
const char *kn_autograd_fn_name(const kn_tensor *t);
/* t's accumulated gradient (borrowed) or NULL. */
kn_tensor *kn_autograd_grad(const kn_tensor *t);
/* Replace t's gradient with g (NULL clears it; g must have t's shape and
 * be a tensor without history; it is retained). */
kn_status kn_autograd_set_grad(kn_tensor *t, kn_tensor *g);
/* Whether writing src into dst in place (copy_) is sound now, else the
 * error saying why, `what` naming the call: a tensor that requires grad
 * may be written only with grad mode off (an optimizer's step inside
 * kiln.no_grad), a tensor with history never, and a source that requires
 * grad would lose its gradient. */
kn_status kn_autograd_check_inplace(const kn_autograd *ag, const kn_tensor *dst, const kn_tensor *src,
                                    const char *what);
/* Mark t, a new tensor made from tensors that require grad by something
 * autograd does not record (a copy to another device), with why it has
 * no history: backward from it says so. */
kn_status kn_autograd_mark(kn_tensor *t, kn_grad_origin origin);
/* Drop t's history (its node, if any), marking it with why it has none:
 * the results of a compiled call that kept no values for backward. */
void kn_autograd_forget(kn_tensor *t, kn_grad_origin origin);
/* Why backward cannot start from t (it does not require grad), as the
 * message of an error for `what` ("backward"). */
kn_status kn_autograd_no_history(const kn_tensor *t, const char *what);

typedef struct kn_backward_args {
    const char *what;         /* "backward" or "grad": names the call in messages */
    int n_roots;
    kn_tensor *const *roots;
    kn_tensor *const *grads;  /* per root: its gradient, or NULL (a one-element root gets 1) */
    bool retain_graph;        /* keep the saved tensors for another backward */
    int n_inputs;             /* 0: accumulate into the leaves' .grad (backward) */
    kn_tensor *const *inputs; /* else: differentiate with respect to these (kiln.grad) */
    kn_tensor **results;      /* ...and get their gradients here (new references) */
    bool allow_unused;        /* an input the roots do not depend on gets NULL instead of an error */
} kn_backward_args;

kn_status kn_autograd_backward(kn_autograd *ag, kn_exec *ex, const kn_backward_args *a);

/* Whether a backward without retain_graph has gone through t's history
 * (a node it reaches released its saved tensors): a second backward from
 * t would fail. A compiled training step's loss, once its step ran
 * backward, is such a tensor. */
bool kn_autograd_history_freed(const kn_tensor *t);

/* The op table's autograd column (kn_grad.def): whether op has a gradient
 * rule; else, in *why, why not ("its result is bool", "it takes no
 * inputs"). */
bool kn_autograd_has_rule(kn_op op, const char **why);

#endif
