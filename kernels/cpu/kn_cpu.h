/* kn_cpu: the CPU reference backend's internal interface. kn_cpu_backend.c
 * dispatches each kn_opcall by kind to the family that implements it. */
#ifndef KN_CPU_H
#define KN_CPU_H

#include "kn_backend.h"
#include "kn_op.h"

/* Each runs one op; outputs are preallocated and contiguous (see kn_backend.h). */
kn_status kn_cpu_elementwise(const kn_opcall *c); /* unary, binary, compare, ternary, masked, copy */
kn_status kn_cpu_reduce(const kn_opcall *c);      /* reduce, argreduce, softmax */
kn_status kn_cpu_norm(const kn_opcall *c);        /* layer_norm, batch_norm */
kn_status kn_cpu_matmul(const kn_opcall *c);
kn_status kn_cpu_conv2d(const kn_opcall *c);
kn_status kn_cpu_attention(const kn_opcall *c);   /* scaled_dot_product_attention: any strides, out too */
kn_status kn_cpu_pool2d(const kn_opcall *c);      /* max, avg, adaptive avg */
kn_status kn_cpu_index(const kn_opcall *c);       /* cat, index_select, gather, index_add, tril, triu */
kn_status kn_cpu_create(const kn_opcall *c);      /* full, arange, randn, rand, randint */

#endif
