/* kn_grad_table: kn_grad.def made into a table indexed by op, and the
 * build-time checks that it has exactly one row per op of kn_ops.def, in
 * the same order: an op without a word on its derivative fails the build. */
#include "kn_grad_table.h"

#include "kn_grad_rules.h"

#include <stddef.h>

_Static_assert(KN_GRAD_MAX_IN == KN_MAX_INPUTS, "kn_tensor.h's KN_GRAD_MAX_IN must be kn_op.h's KN_MAX_INPUTS");
_Static_assert(KN_GRAD_MAX_OUT == KN_MAX_OUTPUTS, "kn_tensor.h's KN_GRAD_MAX_OUT must be kn_op.h's KN_MAX_OUTPUTS");

/* Each row's position in kn_grad.def... */
enum {
#define KN_GRAD(id, rule, saves) KN_GRAD_ROW_##id,
#define KN_NOGRAD(id, why) KN_GRAD_ROW_##id,
#define KN_NOINPUT(id) KN_GRAD_ROW_##id,
#include "kn_grad.def"
#undef KN_GRAD
#undef KN_NOGRAD
#undef KN_NOINPUT
    KN_GRAD_ROWS
};

_Static_assert((int)KN_GRAD_ROWS == (int)KN_OP_COUNT, "kn_grad.def needs one row per op of kn_ops.def");

/* ...is the op's position in kn_ops.def (a row naming an op that does not
 * exist fails here too, as an undeclared identifier) */
#define KN_GRAD(id, rule, saves) \
    _Static_assert((int)KN_GRAD_ROW_##id == (int)KN_OP_##id, "kn_grad.def: row " #id " is out of kn_ops.def's order");
#define KN_NOGRAD(id, why) KN_GRAD(id, 0, 0)
#define KN_NOINPUT(id) KN_GRAD(id, 0, 0)
#include "kn_grad.def"
#undef KN_GRAD
#undef KN_NOGRAD
#undef KN_NOINPUT

static const kn_grad_entry kn_grad_table[] = {
#define KN_GRAD(id, rule, saves) {rule, saves, NULL},
#define KN_NOGRAD(id, why) {NULL, 0, why},
#define KN_NOINPUT(id) {NULL, 0, "it takes no inputs"},
#include "kn_grad.def"
#undef KN_GRAD
#undef KN_NOGRAD
#undef KN_NOINPUT
};

const kn_grad_entry *kn_grad_entry_of(kn_op op)
{
    static const kn_grad_entry none = {NULL, 0, "it is not an op of kn_ops.def"};
    return (unsigned)op < KN_OP_COUNT ? &kn_grad_table[op] : &none;
}
