/* kn_cuda_conv_x3: conv2d through kiln's split-precision ("3xTF32")
 * implicit-GEMM convolution (kn_la_gemm_x3.cu's convolution form): f32
 * convolutions on the TF32 tensor cores at about f32's accuracy, with the
 * bias, ReLU and a residual in the kernel's epilogue. The tensor-level
 * side: which calls it takes, and the call from kiln tensors. kn_cuda_conv.c
 * puts it before cuDNN for the calls it takes.
 */
#ifndef KN_CUDA_CONV_X3_H
#define KN_CUDA_CONV_X3_H

#include <stdbool.h>

#include "kn_op.h"

/* Whether the split convolution takes a conv2d of x, w into y with attrs
 * at on this GPU, from the headers alone (shapes, strides, dtypes,
 * layouts; the pointers' alignment is the run's check): f32 outside TF32
 * mode, Hopper (its wgmma form), a channels-last output and weight
 * {K, r, s, C} with C a multiple of 4 (the layout pass pads it so), one
 * group, x channels-last with C channels or NCHW (then laid out first).
 * KILN_CONV_X3=0 turns it off. */
bool kn_cuda_conv_x3_takes(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at);
/* Whether it runs on this GPU at all (Hopper, not turned off): f32
 * convolutions then run channels-last (kn_cuda_conv_prefers_nhwc). */
bool kn_cuda_conv_x3_available(void);
/* Its tile shapes, as conv2d variants: 0 is the default's pick. */
int kn_cuda_conv_x3_variant_count(void);
/* y = act(conv(x, w) + bias + residual) (bias f32 over y's channels or
 * NULL, residual like y or NULL, act 0 none or 1 relu) with variant v's
 * tile; KN_ERR_UNSUPPORTED (nothing written) where the call does not fit
 * after all (alignment). Sets the variant label. */
kn_status kn_cuda_conv_x3_run(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                              const kn_attrs *at, int act, const kn_tensor *residual, int v);

/* The gradients of such a convolution (a training step's backward, laid
 * out channels-last by the layout pass): c is a conv2d_input_grad (dy
 * {N, p, q, K}, w {K, r, s, C} -> dx {N, h, w, C}) or conv2d_weight_grad
 * (x {N, h, w, C}, dy -> dw {K, r, s, C}) with NHWC attrs, every operand
 * f32 and contiguous, one group. The input's gradient wants K a multiple
 * of 4, no dilation, and a stride of at most the kernel (and 4) in each
 * dim; the weight's, C a multiple of 4. From the headers alone (the run
 * checks alignment). */
bool kn_cuda_conv_x3_grad_takes(const kn_opcall *c);
/* Run it: the input's gradient as one stride-1 convolution of dy per
 * class of input pixels (a stride of 2 has four: (even, even) rows and
 * columns, ...), each by its own taps of w (laid out for it by
 * kn_la_conv_dgrad_weight) into its strided subgrid of dx; the weight's as
 * the weight-gradient form (dy^T times x's windows, split over the
 * pixels). KN_ERR_UNSUPPORTED with nothing written where the pointers do
 * not fit after all. Sets the variant label. */
kn_status kn_cuda_conv_x3_grad_run(const kn_opcall *c);

#endif
