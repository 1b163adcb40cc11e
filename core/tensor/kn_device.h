/* kn_device: which executor a tensor's memory lives on.
 *
 * Its own module, below both kn_tensor and kn_backend: the backend vtable
 * names a device without knowing tensors, and a tensor frees its storage
 * through the vtable without the vtable knowing ops.
 */
#ifndef KN_DEVICE_H
#define KN_DEVICE_H

#include "kn_status.h"

/* A device is a kind (cpu, cuda) and an index within the kind: cuda:1 is
 * the second GPU. KN_CPU and KN_CUDA are device 0 of their kind, so code
 * that means "the GPU kiln uses" keeps comparing against them; code that
 * asks "is this a GPU at all" compares kn_device_kind. */
typedef enum kn_device_kind { KN_DEVICE_CPU = 0, KN_DEVICE_CUDA = 1, KN_DEVICE_KINDS } kn_device_kind;
#define KN_DEVICE_MAX_INDEX 8 /* devices of one kind: indices 0 .. KN_DEVICE_MAX_INDEX-1 */
#define KN_DEVICE_INDEX_SHIFT 4
typedef int kn_device;
enum { KN_CPU = KN_DEVICE_CPU, KN_CUDA = KN_DEVICE_CUDA };

static inline kn_device_kind kn_device_kind_of(kn_device d)
{
    return (kn_device_kind)(d & ((1 << KN_DEVICE_INDEX_SHIFT) - 1));
}
static inline int kn_device_index(kn_device d)
{
    return d >> KN_DEVICE_INDEX_SHIFT;
}
static inline kn_device kn_device_make(kn_device_kind kind, int index)
{
    return (kn_device)kind | index << KN_DEVICE_INDEX_SHIFT;
}

/* "cpu", "cuda", "cuda:1": device 0 prints without its index. */
const char *kn_device_name(kn_device d);
/* "cpu", "cuda", "cpu:N", "cuda:N" (N below KN_DEVICE_MAX_INDEX; "cuda:0"
 * is "cuda"). Whether the device exists is asked of kn_backend_get. */
kn_status kn_device_parse(const char *name, kn_device *out);

#endif
