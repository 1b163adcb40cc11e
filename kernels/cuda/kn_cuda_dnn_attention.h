/* kn_cuda_dnn_attention: bf16/f16 attention through cuDNN's fused
 * flash-attention engines (the graph API's composite SDPA), for the
 * problems kiln's attention op describes (kn_cuda_attention.h). */
#ifndef KN_CUDA_DNN_ATTENTION_H
#define KN_CUDA_DNN_ATTENTION_H

#include <stdbool.h>

#include "kn_cuda_attention.h"

/* One GPU's plans (kn_cuda_dev.dnn_sdpa), kept for the process's life as
 * the conv plans are. */
struct kn_cuda_sdpa_plans;

/* Whether the problem's kind (dtype, head dims, mask kind, alignment) is
 * one cuDNN's engines may take; cuDNN can still refuse it at its first
 * call, which kn_cuda_dnn_attention then says. */
bool kn_cuda_dnn_attention_covers(const kn_attention_problem *a);
/* Enqueue the attention on the current stream; KN_ERR_UNSUPPORTED (with
 * why) for a problem cuDNN does not take, or without cuDNN. */
kn_status kn_cuda_dnn_attention(const kn_attention_problem *a);

#endif
