/* kn_grad_rules: the gradient rules the op table's autograd column names
 * (kn_grad.def), declared. Private to core/autograd.
 *
 * kn_grad.def has one row per row of kn_ops.def, in the same order (the
 * build checks both), so an op added to the table without a word on its
 * derivative does not compile. A row is one of
 *   KN_GRAD(ID, rule, saves)  the op's gradient rule and what it reads;
 *   KN_NOGRAD(ID, why)        the op has no derivative (its result is bool,
 *                             an index...): its outputs carry no history;
 *   KN_NOINPUT(ID)            a creation op: nothing to differentiate.
 * The rules themselves are in kn_rules_*.c, grouped as the op table is;
 * kn_grad_table.c makes the rows a table.
 */
#ifndef KN_GRAD_RULES_H
#define KN_GRAD_RULES_H

#include "kn_grad_build.h"

#define KN_GRAD(id, rule, saves) void rule(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin);
#define KN_NOGRAD(id, why)
#define KN_NOINPUT(id)
#include "kn_grad.def"
#undef KN_GRAD
#undef KN_NOGRAD
#undef KN_NOINPUT

#endif
