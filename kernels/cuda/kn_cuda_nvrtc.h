/* kn_cuda_nvrtc: compile kiln's generated CUDA C++ with NVRTC into a CUBIN
 * (arch "sm_90") or PTX (arch "compute_90"). Needs no GPU; loads nothing.
 * Only built when the CUDA toolkit is found (KILN_HAVE_CUDA). */
#ifndef KN_CUDA_NVRTC_H
#define KN_CUDA_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_status.h"

/* Compile src for arch. On success *image is the CUBIN for "sm_XX" (PTX,
 * NUL-terminated, for "compute_XX") of *size bytes; the caller frees it.
 * *log (may be NULL to ignore) gets NVRTC's program log (warnings), caller
 * frees; on a compile error the status is KN_ERR_UNSUPPORTED and the
 * message carries the log. Options: --fmad=false (results match the
 * reference's separate rounding), -default-device, --std=c++17. */
kn_status kn_nvrtc_compile(const char *src, const char *arch, char **image, size_t *size,
                           char **log);

/* NVRTC's version as "13.0" (static storage): part of CUDA cache keys. */
const char *kn_nvrtc_version(void);

#endif
