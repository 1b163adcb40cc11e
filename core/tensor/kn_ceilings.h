/* kn_ceilings: the measured ceilings of a device's roofline (:device,
 * kiln.time's and kiln.profile's percentages).
 *
 * Each copy, add and matmul is timed alone, as kiln.time times a kernel
 * (kn_profile: exact device times where the backend traces them, else
 * events): a kernel and the ceiling it is held against share one clock.
 * Copy bandwidth: a device-to-device copy of a large buffer, read + write
 * bytes (memcpy on the CPU), or an elementwise add of two such buffers
 * (read, read, write) where that moves more bytes a second: the DRAM
 * figure. Bandwidth by working set: the same measured on smaller buffers,
 * which stay in the caches; a kernel that moves B bytes is held against
 * the bandwidth of a working set of B bytes (kiln.time's roof%), since a
 * kernel whose data fits in a cache runs faster than any DRAM ceiling.
 * Each working set also keeps the copy's figure alone: the ceiling of a
 * kernel that reads as much as it writes (kiln.time weighs the two by a
 * kernel's own mix of reads and writes).
 * Matmul rates for f32 and bf16: the backend's
 * library_matmul_rate where it has one (the library's own GEMM peak), else
 * square matmuls through kn_op_eager; 0 where the device has no such
 * matmul. Takes a few hundred milliseconds; refused while profiling.
 */
#ifndef KN_CEILINGS_H
#define KN_CEILINGS_H

#include "kn_device.h"
#include "kn_status.h"

struct kn_settings; /* kn_settings.h */

#define KN_CEIL_BW_POINTS 12

typedef struct kn_ceilings {
    double copy_gbps; /* the largest working set's: DRAM */
    int n_bw;         /* bandwidth by working set, smallest first */
    struct {
        double bytes, gbps; /* bytes moved by one pass (all buffers); the best of both */
        double copy_gbps;   /* the copy's alone: one read a write (0: no copy) */
    } bw[KN_CEIL_BW_POINTS];
    double f32_gflops;
    double bf16_gflops;
} kn_ceilings;

/* settings: the caller's (its TF32 choice is the f32 rate's; NULL: the
 * defaults). */
kn_status kn_ceilings_measure(kn_device dev, const struct kn_settings *settings, kn_ceilings *c);

#endif
