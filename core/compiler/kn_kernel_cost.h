/* kn_kernel_cost: the roofline cost (kn_cost.h's rules) of one kernel of a
 * program fused from a graph. Kept in the compiler layer, next to the
 * kernel IR it reads; kn_cost covers single ops. */
#ifndef KN_KERNEL_COST_H
#define KN_KERNEL_COST_H

#include "kn_cost.h"
#include "kn_kir.h"

/* Kernel k of a program fused from g (its LIBRARY and FALLBACK kernels run
 * node `node`, the node at whose position the kernel runs). */
kn_cost kn_kernel_cost(const kn_graph *g, const kn_kernel *k, int node);

#endif
