/* kn_device: which executor a tensor's memory lives on.
 *
 * Its own module, below both kn_tensor and kn_backend: the backend vtable
 * names a device without knowing tensors, and a tensor frees its storage
 * through the vtable without the vtable knowing ops.
 */
#ifndef KN_DEVICE_H
#define KN_DEVICE_H

#include "kn_status.h"

typedef enum kn_device { KN_CPU = 0, KN_CUDA = 1, KN_DEVICE_COUNT } kn_device;

const char *kn_device_name(kn_device d);
kn_status kn_device_parse(const char *name, kn_device *out);

#endif
