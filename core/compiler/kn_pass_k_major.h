/* kn_pass_k_major: the pass of the pass list (kn_passes.h) that lays fixed
 * [K, N] matmul weights out k-contiguous where the device's matmul runs
 * faster so (flag KN_PASSES_K_MAJOR_WEIGHTS); kn_pass_k_major.c describes
 * the rewrite. */
#ifndef KN_PASS_K_MAJOR_H
#define KN_PASS_K_MAJOR_H

#include <stdbool.h>

#include "kn_pass_ctx.h"

kn_status kn_pass_k_major(kn_pass_ctx *x);

/* Whether a matmul of input meta a (its last dim k) by a fixed [k, n]
 * weight of dtype dt on device dev should read the weight k-contiguous:
 * the flag is set and dev's backend says its matmul of that shape runs
 * faster so. merge_projections asks it for the weight it merges. */
bool kn_pass_wants_k_major(const kn_pass_ctx *x, const kn_meta *a, kn_dtype dt, int64_t k, int64_t n,
                           kn_device dev);

/* w ([r, c]) transposed into a new contiguous [c, r] tensor on its
 * device, with x's settings. */
kn_status kn_pass_transpose_now(const kn_pass_ctx *x, kn_tensor *w, kn_tensor **out);

#endif
