/* kn_symbolic: symbolic sizes for dynamic shapes.
 *
 * A version compiled with dynamic dims names those input dims s0, s1, ...
 * (equal sizes share a symbol, as PyTorch's duck sizing). Every other size
 * in the graph (node shapes, reshape targets, slice bounds) is an affine
 * expression of one symbol, floor((num * s + off) / den), fitted from two
 * traces of the same graph at different sizes: the Lua code computes sizes
 * with plain numbers, so two observations are how kiln learns which sizes
 * follow a symbol. A later trace matches the version when every expression
 * evaluates to the size it traced.
 */
#ifndef KN_SYMBOLIC_H
#define KN_SYMBOLIC_H

#include <stdbool.h>

#include "kn_graph.h"

#define KN_MAX_SYMS 16
/* Size slots per node: output dims, attr shape, slice start and stop. */
#define KN_SLOTS (KN_MAX_OUTPUTS * KN_MAX_DIMS + KN_MAX_DIMS + 2)

typedef struct kn_dimexpr {
    signed char sym; /* -1: the constant off */
    int64_t num, den, off;
} kn_dimexpr;

typedef struct kn_symbols {
    int nsyms;
    int64_t value[KN_MAX_SYMS];            /* at the trace the version was made from */
    signed char (*input_sym)[KN_MAX_DIMS]; /* per input, per dim: symbol or -1 */
    kn_dimexpr (*expr)[KN_SLOTS];          /* per node, per slot */
    bool fitted;                           /* expressions known (two traces seen) */
} kn_symbols;

/* Is input dim (name, dim) to be symbolic? Callback for kn_sym_assign. */
typedef bool (*kn_sym_dynamic_fn)(void *ctx, const kn_graph_input *in, int dim);

/* Choose the symbols of a new version of g. Returns false when no dim is
 * dynamic (the version is static and s is left empty). */
kn_status kn_sym_assign(const kn_graph *g, kn_sym_dynamic_fn is_dynamic, void *ctx, kn_symbols *s,
                        bool *any);
void kn_sym_free(kn_symbols *s);
kn_status kn_sym_copy(const kn_symbols *src, int n_inputs, int n_nodes, kn_symbols *dst);

/* Check a traced input against the version's input `i`; the symbol values
 * it implies go to vals (filled on first sight, else checked). A failure
 * is written to buf and returns true. */
bool kn_sym_input_failure(const kn_symbols *s, int i, const kn_graph_input *want,
                          const kn_graph_input *got, int64_t *vals, bool *seen, char *buf,
                          size_t size);

/* Fit the expressions from the version's own trace (vg, s->value) and a
 * second trace g at symbol values vals. Slots that fit no affine form keep
 * the version's size (a later different size then fails the check). */
kn_status kn_sym_fit(kn_symbols *s, const kn_graph *vg, const kn_graph *g, const int64_t *vals);

/* First node whose sizes differ from the expressions at vals, or -1. */
int kn_sym_sizes_differ(const kn_symbols *s, const kn_graph *vg, const kn_graph *g,
                        const int64_t *vals);

/* Whether two nodes are the same op with the same inputs and attributes,
 * sizes aside (they are checked by the expressions). */
bool kn_sym_same_node_modulo_sizes(const kn_node *a, const kn_node *b);

/* "s0", "s0*8", "s0//2", "(s0*3 + 1)//2", or the number. */
void kn_dimexpr_text(const kn_dimexpr *e, char *buf, size_t size);

/* Pointer to size slot k of node n, or NULL where the node has none. */
int64_t *kn_node_slot(kn_node *n, int k);

#endif
