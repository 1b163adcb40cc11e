/* kn_cuda_dnn: conv2d on the GPU through cuDNN's graph API, with kiln's
 * own kernels (kn_cuda_linalg.h) for whatever cuDNN refuses (kernels/cuda).
 */
#ifndef KN_CUDA_DNN_H
#define KN_CUDA_DNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_op.h"
#include "kn_status.h"

/* KN_ERR_UNSUPPORTED for a call it does not cover. */
kn_status kn_cuda_conv2d(const kn_opcall *c);
/* Whether kn_cuda_conv2d runs conv2d's gradient ops (conv2d_input_grad,
 * conv2d_weight_grad) for c: float tensors, NCHW, through cuDNN. */
bool kn_cuda_conv2d_grad_supports(const kn_opcall *c);
/* Whether kn_cuda_conv2d has a kernel for c (cuDNN, or kiln's for what it
 * refuses, in either layout): float tensors, as conv_run checks. Without
 * tensors: the op alone. */
static inline bool kn_cuda_conv2d_supports(const kn_opcall *c)
{
    if (c && (c->op == KN_OP_CONV2D_INPUT_GRAD || c->op == KN_OP_CONV2D_WEIGHT_GRAD))
        return kn_cuda_conv2d_grad_supports(c);
    if (!c || c->op != KN_OP_CONV2D) return false;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i] && !kn_dtype_is_float(c->in[i]->dtype)) return false;
    return true;
}
/* conv2d (its own bias input, if any) with act (0 none, 1 relu) in cuDNN's
 * graph: conv -> bias add -> ReLU as one plan. */
kn_status kn_cuda_conv2d_fused(const kn_opcall *c, int act);
/* act(conv + its bias + residual), residual contiguous like the output. */
kn_status kn_cuda_conv2d_fused_residual(const kn_opcall *c, int act, const struct kn_tensor *residual);
/* Whether conv2d of dtype dt should run channels-last on the current GPU
 * (the layout pass's "auto"): cuDNN present, a half type, sm_80 or later. */
bool kn_cuda_conv_prefers_nhwc(kn_dtype dt);
/* Whether conv2d call c (headers will do: shapes, strides, dtypes, attrs)
 * runs in a kernel of kiln's whose epilogue adds a bias and ReLU at no
 * cost (kn_backend.conv_epilogue_free): the split-precision convolution
 * (a residual too), the stem kernels. */
bool kn_cuda_conv_epilogue_free(const kn_opcall *c);

/* The current GPU's cuDNN handle (a cudnnHandle_t), started on first use,
 * and cuDNN's version in *version; NULL when cuDNN is missing or cannot
 * start. For the other cuDNN callers (kn_cuda_dnn_attention.c). */
void *kn_cuda_dnn_handle(size_t *version);
/* The first engine config that heuristics mode A (then FALLBACK) ranks
 * for graph (a finalized operation graph, cudnnBackendDescriptor_t) whose
 * plan finalizes with a workspace of at most max_ws: *plan, the config it
 * was built from (*cfg, which the caller keeps as long as the plan), *ws
 * and its label ("cudnn eng 2 knobs(...)"). Returns cuDNN's status (0:
 * success). */
int kn_cuda_dnn_first_plan(void *graph, int64_t max_ws, void **plan, void **cfg, int64_t *ws, char *label,
                           size_t label_size);
/* A plan's last variant pack and the pointers it holds: building one
 * (create, three attributes, finalize) costs host time at every call, and
 * a plan's calls mostly see the same pointers again. Zeroed to start. */
#define KN_CUDA_DNN_PACK_MAX 8
typedef struct kn_cuda_dnn_pack {
    void *vp; /* a cudnnBackendDescriptor_t, or NULL */
    void *ptrs[KN_CUDA_DNN_PACK_MAX];
    void *ws; /* the workspace it was built with */
    int n;
} kn_cuda_dnn_pack;
/* Execute plan (a cudnnBackendDescriptor_t) on the current stream with
 * tensor uids[i] at ptrs[i] (n <= KN_CUDA_DNN_PACK_MAX) and ws_size bytes
 * of the GPU's one cuDNN workspace (grown when a plan needs more), through
 * *pack (rebuilt when the pointers differ). Returns cuDNN's status (0:
 * success) for the caller's message. */
int kn_cuda_dnn_execute(void *plan, int64_t ws_size, const int64_t *uids, void *const *ptrs, int n,
                        kn_cuda_dnn_pack *pack);
void kn_cuda_dnn_pack_release(kn_cuda_dnn_pack *pack);
/* Execution plans across processes (cache_dir/cudnn-plans/): the plan (a
 * cudnnBackendDescriptor_t) kept for key (of kind "conv", "attention")
 * by an earlier process, with its workspace size (at most max_ws) and
 * label; false when there is none or it does not load. _save keeps a
 * plan chosen now (best effort). */
bool kn_cuda_dnn_plan_load(const char *kind, const void *key, size_t key_size, int64_t max_ws, void **plan,
                           int64_t *ws, char *label, size_t label_size);
void kn_cuda_dnn_plan_save(const char *kind, const void *key, size_t key_size, void *plan, const char *label);

#endif
