/* kn_grad_table: the autograd column of the op table (kn_grad.def) as a
 * table indexed by op. Private to core/autograd. */
#ifndef KN_GRAD_TABLE_H
#define KN_GRAD_TABLE_H

#include "kn_grad_build.h"

typedef struct kn_grad_entry {
    kn_grad_rule rule; /* NULL: no rule (why_not says why) */
    unsigned saves;    /* KN_SAVE_*: what the rule reads */
    const char *why_not;
} kn_grad_entry;

const kn_grad_entry *kn_grad_entry_of(kn_op op);

#endif
