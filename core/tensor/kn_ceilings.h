/* kn_ceilings: the measured ceilings of a device's roofline (:device,
 * kiln.time's and kiln.profile's percentages).
 *
 * Copy bandwidth: a device-to-device copy of a large buffer, read + write
 * bytes (memcpy on the CPU). Matmul rates for f32 and bf16: the backend's
 * library_matmul_rate where it has one (the library's own GEMM peak), else
 * square matmuls through kn_op_eager; 0 where the device has no such
 * matmul. Takes a few hundred milliseconds; refused while profiling.
 */
#ifndef KN_CEILINGS_H
#define KN_CEILINGS_H

#include "kn_device.h"
#include "kn_status.h"

typedef struct kn_ceilings {
    double copy_gbps;
    double f32_gflops;
    double bf16_gflops;
} kn_ceilings;

kn_status kn_ceilings_measure(kn_device dev, kn_ceilings *c);

#endif
