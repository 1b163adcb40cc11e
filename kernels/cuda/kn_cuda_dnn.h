/* kn_cuda_dnn: cuDNN's graph API for conv2d and its gradients, and what
 * the other cuDNN callers share (kernels/cuda). kn_cuda_conv.h chooses
 * the engine of each conv2d. */
#ifndef KN_CUDA_DNN_H
#define KN_CUDA_DNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_op.h"
#include "kn_status.h"

/* Whether conv2d's gradient ops (conv2d_input_grad, conv2d_weight_grad)
 * run for c: float tensors, NCHW, through cuDNN. */
bool kn_cuda_conv2d_grad_supports(const kn_opcall *c);
/* conv2d through cuDNN: y = act(conv(x0, w0) + bias) (act 0 none, 1 relu),
 * in the call's layouts (at->in_layout, out_layout), with cuDNN's engine
 * `variant` (0 its heuristic's first, KN_VARIANT_STRICT its first strict
 * f32 one). *done stays false where cuDNN refuses the call or a copy it
 * needs is not available (the caller then runs kiln's kernel); a variant
 * past cuDNN's last is KN_ERR_RANGE. Without cuDNN in the build: *done
 * false, and any variant but 0 KN_ERR_RANGE. */
kn_status kn_cuda_dnn_conv(const struct kn_tensor *x0, const struct kn_tensor *w0, const struct kn_tensor *bias,
                           struct kn_tensor *y, const kn_attrs *at, int act, int variant, bool *done);
/* A gradient op of conv2d (kn_cuda_conv2d_grad_supports) through cuDNN's
 * backward-data or backward-filter; without cuDNN, KN_ERR_UNSUPPORTED. */
kn_status kn_cuda_dnn_conv_grad(const kn_opcall *c);

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
