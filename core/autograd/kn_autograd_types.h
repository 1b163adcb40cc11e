/* kn_autograd_types: the two structs autograd's parts share: how a caller
 * runs an op (kn_exec) and its grad mode and tape counters (kn_autograd).
 * Apart from kn_autograd.h so that the rules' builder, below the recording
 * entry, can name them without depending on it. */
#ifndef KN_AUTOGRAD_TYPES_H
#define KN_AUTOGRAD_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_op.h"

/* How the caller runs an op: kn_op_eager with its settings, or a capture. */
typedef struct kn_exec {
    /* run call c (creation ops on dev); fills c->out[0..c->n_out) with new
     * references owned by the caller */
    kn_status (*run)(struct kn_exec *ex, kn_opcall *c, kn_device dev);
    /* optional: the user's line running now ("file.lua:12"), kept on each
     * node so that messages about it can name where the op ran */
    void (*where)(struct kn_exec *ex, char *buf, size_t size);
    /* optional: the location the ops run from now on carry, in place of
     * the user's line (backward runs each node's rule at its forward op's
     * line, so its kernels name that line); NULL or "": the user's again */
    void (*set_where)(struct kn_exec *ex, const char *where);
    /* optional, while tracing: write src into dst in place when the graph
     * runs (a compiled training step accumulates into an existing .grad
     * this way, so the tensor a later call's guards hold stays the same) */
    kn_status (*write)(struct kn_exec *ex, kn_tensor *dst, kn_tensor *src);
    bool traces; /* run appends to a graph being captured instead of computing */
} kn_exec;

/* Per caller (per Lua state): grad mode and the counters of the tape. */
typedef struct kn_autograd {
    bool enabled;    /* grad mode: off inside kiln.no_grad and while backward runs */
    uint64_t seq;    /* the number the next node gets */
} kn_autograd;

#endif
