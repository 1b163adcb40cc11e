/* kn_cuda: what the CUDA side offers the rest of kiln. Only built when the
 * CUDA toolkit is found (KILN_HAVE_CUDA); callers check that macro. */
#ifndef KN_CUDA_H
#define KN_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include "kn_status.h"

typedef struct kn_cuda_device_info {
    char name[256];
    int64_t memory_bytes;
    int64_t free_bytes;
    int sm_count;
    int cc_major, cc_minor;
    int l2_bytes;
    int driver_version, runtime_version;
} kn_cuda_device_info;

/* Up to `max` devices into out; *count gets how many exist. KN_ERR_DEVICE
 * with the CUDA error text when the driver or device is missing. */
kn_status kn_cuda_query_devices(kn_cuda_device_info *out, int max, int *count);

/* Whether the CUDA backend can run: a device is present and the driver is
 * new enough (checked once; KILN_DEVICE=cpu in the environment says no).
 * When it says no, kn_cuda_unavailable_reason() gives the one-line why. */
bool kn_cuda_available(void);
const char *kn_cuda_unavailable_reason(void);

/* Register the cuda kind (kernels/kn_kernels.c does, at start-up): cuda:N
 * is present when CUDA is available and the driver reports more than N
 * GPUs, probed the first time kiln asks for a cuda device. */
void kn_cuda_register(void);
/* Whether the CUDA backend's run has a kernel for call c (its vtable's
 * supports_op: each op family's answer, see kn_backend.h). Needs no GPU:
 * it reads the op, attrs and the inputs' dtypes (and shapes, where they
 * decide), which may be headers without storage, or absent. */
struct kn_opcall;
bool kn_cuda_supports_op(const struct kn_opcall *c);

#endif
