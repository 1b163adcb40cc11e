/* kn_cuda_attn_args: the argument struct of kiln's fused attention kernels
 * (kernels/cuda/kn_attention.cu), shared by the host (kn_cuda_attention.c
 * includes this file) and the device (the build embeds this same text and
 * kn_cuda_attention_source puts it before kn_attention.cu), so the two
 * layouts cannot drift apart. Plain C with no includes: NVRTC has no
 * headers.
 */
#ifndef KN_CUDA_ATTN_ARGS_H
#define KN_CUDA_ATTN_ARGS_H

typedef struct kn_attn_args {
    const char *q, *k, *v, *mask;
    char *o;
    long long heads, tq, tk;
    long long qs[3], ks[3], vs[3], os[3]; /* element strides: batch, head, row */
    long long ms[4];                      /* mask strides: batch, head, query, key (0 broadcasts) */
    float scale_log2;                     /* scale * log2(e): scores live in the log2 domain */
    int d, dv;
    int causal;
    int mask_kind; /* 0 none, 1 bool (keep where nonzero), 2 additive in the q dtype, 3 additive f32 */
    int n_qblocks; /* ceil(tq / BM) of the kernel launched */
    int zero_nan;  /* a NaN result is stored as 0 (the exporters' NaN fill after the softmax) */
    int mask_word_pairs; /* mask_kind 2 with keys contiguous, tk even, even strides, a 4-byte aligned
                            base: two keys' entries are one 32-bit load */
} kn_attn_args;

#endif
