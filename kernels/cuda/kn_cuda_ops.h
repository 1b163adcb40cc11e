/* kn_cuda_ops: eager ops through the template modules (kn_cuda_tsrc.h)
 * behind kn_cuda_ops_run (kernels/cuda), and the launch of their kernels
 * for kn_cuda_gather_scatter.c.
 */
#ifndef KN_CUDA_OPS_H
#define KN_CUDA_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "kn_dtype.h"
#include "kn_op.h"
#include "kn_status.h"

/* The op families the templates cover (reductions over several dims, max
 * with indices, the pools, cat, the index ops, random creation, strided
 * copies and casts); KN_ERR_UNSUPPORTED for any other op. */
kn_status kn_cuda_ops_run(const kn_opcall *c);
/* Whether kn_cuda_ops_run has a kernel for c: its op is one of those
 * families, whatever the dtypes (needs no GPU, no tensors). */
bool kn_cuda_ops_supports(const kn_opcall *c);

/* Launch template kernel k of dtype dt's module over `work` items (a
 * grid-stride loop: KN_T_BLOCK threads a block, the grid capped). */
struct kn_tensor;
kn_status kn_cuda_ops_launch(kn_dtype dt, int k, int64_t work, void *args);
/* The windows of a patch embedding (a convolution whose kernel kh x kw is
 * its stride) over x, an NCHW view {N, C, H, W}: a new contiguous
 * {N, P, Q, kh, kw, C} tensor, taps in the channels-last weight's order
 * (kn_patches). KN_ERR_UNSUPPORTED where one band (C rows of Q * kw
 * elements) is more than the kernel stages: the caller copies the view. */
kn_status kn_cuda_patches(const struct kn_tensor *x, int64_t kh, int64_t kw, struct kn_tensor **out);
/* The index ops' range check: queue the check of idx against 1..size
 * (*check: whether the host may read it back, not while the stream is
 * recorded), then read the first bad flat position (-1: none) and its
 * value back (a stream synchronization). */
kn_status kn_cuda_index_check_launch(kn_dtype dt, const struct kn_tensor *idx, int64_t size, bool *check);
kn_status kn_cuda_index_check_read(const struct kn_tensor *idx, int64_t *pos, int64_t *value);

#endif
