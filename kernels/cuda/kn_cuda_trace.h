/* kn_cuda_trace: exact device times of profiled kernels through CUPTI
 * (kernels/cuda): the backend's trace_* slots (kn_backend.h).
 */
#ifndef KN_CUDA_TRACE_H
#define KN_CUDA_TRACE_H

#include <stdint.h>

#include "kn_backend.h"

kn_status kn_cuda_trace_begin(kn_device_ctx *d);
kn_status kn_cuda_trace_push(kn_device_ctx *d, uint64_t id);
kn_status kn_cuda_trace_pop(kn_device_ctx *d);
kn_status kn_cuda_trace_end(kn_device_ctx *d, void (*each)(void *ctx, uint64_t id, double ms), void *ctx);

#endif
