/* kn_cost: the bytes a kernel must move and the floating-point operations
 * it must do, for the roofline of kiln.time / kiln.profile.
 *
 * Both are model figures, not counters read from the hardware:
 *   bytes  every argument read once and every result written once (the
 *          unique-traffic lower bound): a broadcast operand counts the
 *          elements it really has, a view counts the elements the kernel
 *          reaches, never more than its source holds;
 *   flops  matmul 2*M*N*K (times the batch), conv2d 2*N*K*P*Q*(C/groups)*R*S,
 *          elementwise ops one per output element, reductions and pools one
 *          per input element (pools: per window element), softmax 4 and the
 *          norms 6 per element; generated kernels: elements of the iteration
 *          space times (op expressions + reduction stages), casts not
 *          counted (core/compiler/kn_kernel_cost); copies, index ops,
 *          concatenation and creation 0.
 * A kernel with 0 flops is judged against bandwidth alone.
 *   write_bytes  the part of bytes that is results written: with it the
 *          roofline holds a kernel against the bandwidth of its own mix of
 *          reads and writes (a copy's one read a write, an add's two).
 */
#ifndef KN_COST_H
#define KN_COST_H

#include "kn_op.h"

typedef struct kn_cost {
    double bytes;
    double flops;
    double write_bytes; /* of bytes: the results' */
} kn_cost;

/* One op on values of these shapes (in: its inputs, out: its outputs). */
kn_cost kn_cost_op(kn_op op, const kn_attrs *a, int n_in, const kn_meta *in, int n_out, const kn_meta *out);
/* One eager call whose inputs and outputs are filled (strided inputs count
 * the elements they reach). */
kn_cost kn_cost_opcall(const kn_opcall *c);

#endif
