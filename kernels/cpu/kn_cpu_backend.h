/* kn_cpu_backend: how the CPU backend enters the registry.
 *
 * cpu:0 is the host. More CPU devices (cpu:1, ...) are the same host
 * memory and kernels under another device number: tests use one to check
 * that kiln keeps devices apart without needing a second GPU. */
#ifndef KN_CPU_BACKEND_H
#define KN_CPU_BACKEND_H

#include "kn_backend.h"

extern const kn_backend kn_cpu_backend;

/* Register the cpu kind (kernels/kn_kernels.c does, at start-up). */
void kn_cpu_register(void);
/* Add cpu:index now (index 1 .. KN_DEVICE_MAX_INDEX-1). */
kn_status kn_cpu_add_device(int index);

#endif
