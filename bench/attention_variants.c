/* bench/attention_variants.c: every configuration of kiln's fused attention
 * kernel (kn_cuda_attention's variants, and its default pick), and cuDNN's
 * fused attention (kn_cuda_dnn_attention, the op's default for bf16 and
 * f16; also with a causal flag instead of a mask), at the
 * real-model suite's shapes, with the masks those models pass: BERT's
 * padding mask [B,1,1,T], GPT-2's full additive mask [B,1,T,T] with a
 * causal pattern, ViT and the transformer_block sample unmasked. Each
 * figure is the mean of 200 back-to-back launches between two CUDA events,
 * in microseconds, with the TFLOP/s it implies. Needs a GPU; inputs are
 * zeros (finite: timing only, t/cuda_attention.c checks the results).
 *
 *   build/bench/attention_variants [bf16|f16|f32]
 *
 * ATT_SHAPE=K runs only the K-th shape (1-based) and ATT_VARIANT=V only
 * variant V (0 the default pick), ATT_REPS=N launches N times (for ncu).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_attention.h"
#include "cuda/kn_cuda_context.h"
#include "cuda/kn_cuda_dnn_attention.h"

typedef struct shape {
    const char *name;
    int64_t b, h, t, d;
    int mask; /* 0 none, 1 padding [B,1,1,T], 2 full [B,1,T,T], 3 the causal flag (no mask tensor) */
    int fused_qkv; /* q, k, v as GPT-2's views of one [B,T,3,H,D] projection, o as [B,T,H,D] */
} shape;

static const shape SHAPES[] = {
    {"bert 8x12x128x64, padding mask", 8, 12, 128, 64, 1, 0},
    {"gpt2 8x12x128x64, full mask", 8, 12, 128, 64, 2, 0},
    {"gpt2 8x12x128x64, causal", 8, 12, 128, 64, 3, 0},
    {"gpt2 8x12x128x64, causal, views of [B,T,3,H,D]", 8, 12, 128, 64, 3, 1},
    {"vit 8x12x197x64", 8, 12, 197, 64, 0, 0},
    {"block 16x8x256x64", 16, 8, 256, 64, 0, 0},
    {"long 4x8x1024x64", 4, 8, 1024, 64, 0, 0},
    {"llm 4x16x512x128, full mask", 4, 16, 512, 128, 2, 0},
};

/* variant -1: cuDNN's */
static kn_status run_variant(kn_attention_problem *p)
{
    return p->variant < 0 ? kn_cuda_dnn_attention(p) : kn_cuda_attention(p);
}

static float time_variant(kn_attention_problem *p, int variant, cudaEvent_t e0, cudaEvent_t e1)
{
    const int reps = getenv("ATT_REPS") ? atoi(getenv("ATT_REPS")) : 200;
    p->variant = variant;
    kn_status st = KN_OK;
    for (int i = 0; i < (reps < 5 ? 1 : 5) && st == KN_OK; i++) st = run_variant(p);
    cudaEventRecord(e0, kn_cuda_stream());
    for (int i = 0; i < reps && st == KN_OK; i++) st = run_variant(p);
    cudaEventRecord(e1, kn_cuda_stream());
    float ms = 0;
    if (st != KN_OK || cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
        printf("  failed: %s\n", kn_last_error());
        return -1;
    }
    return 1e3f * ms / reps;
}

int main(int argc, char **argv)
{
    kn_dtype dt = argc > 1 && strcmp(argv[1], "f16") == 0 ? KN_F16 : argc > 1 && strcmp(argv[1], "f32") == 0 ? KN_F32 : KN_BF16;
    const int64_t es = (int64_t)kn_dtype_size(dt);
    if (!kn_cuda_available() || kn_cuda_init() != KN_OK) {
        printf("no CUDA device: %s\n", kn_cuda_available() ? kn_last_error() : kn_cuda_unavailable_reason());
        return 1;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    printf("# %s, %d SMs, us per call (mean of 200) and TFLOP/s\n", kn_dtype_name(dt), kn_cuda_current()->sm_count);
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        const shape *s = &SHAPES[si];
        if (getenv("ATT_SHAPE") && atoi(getenv("ATT_SHAPE")) != (int)si + 1) continue;
        int64_t n = s->b * s->h * s->t * s->d, nm = s->mask == 1 ? s->b * s->t : s->b * s->t * s->t;
        void *buf[5] = {0};
        kn_status st = KN_OK;
        for (int i = 0; i < 4 && st == KN_OK; i++) st = kn_cuda_malloc((i == 0 && s->fused_qkv ? 3 : 1) * n * es, &buf[i]);
        const bool has_mask = s->mask == 1 || s->mask == 2;
        if (st == KN_OK && has_mask) st = kn_cuda_malloc(nm * es, &buf[4]);
        if (st != KN_OK) {
            printf("%s: no GPU memory\n", s->name);
            return 1;
        }
        for (int i = 0; i < 5; i++)
            if (buf[i])
                cudaMemsetAsync(buf[i], 0, (size_t)((i == 4 ? nm : i == 0 && s->fused_qkv ? 3 * n : n) * es), kn_cuda_stream());
        kn_attention_problem p = {.dtype = dt, .batch = s->b, .heads = s->h, .tq = s->t, .tk = s->t, .d = s->d,
                                  .dv = s->d, .q = buf[0], .k = buf[1], .v = buf[2], .o = buf[3],
                                  .scale = 1.0 / sqrt((double)s->d)};
        int64_t st3[3] = {s->h * s->t * s->d, s->t * s->d, s->d};
        memcpy(p.q_stride, st3, sizeof st3);
        memcpy(p.k_stride, st3, sizeof st3);
        memcpy(p.v_stride, st3, sizeof st3);
        memcpy(p.o_stride, st3, sizeof st3);
        if (s->fused_qkv) { /* buf[0] holds [B,T,3,H,D]: q, k, v at offsets 0, H*D, 2*H*D of a row */
            int64_t hd = s->h * s->d, qkv[3] = {s->t * 3 * hd, s->d, 3 * hd}, o3[3] = {s->t * hd, s->d, hd};
            memcpy(p.q_stride, qkv, sizeof qkv);
            memcpy(p.k_stride, qkv, sizeof qkv);
            memcpy(p.v_stride, qkv, sizeof qkv);
            memcpy(p.o_stride, o3, sizeof o3);
            p.k = (char *)buf[0] + hd * es;
            p.v = (char *)buf[0] + 2 * hd * es;
        }
        p.causal = s->mask == 3;
        if (has_mask) {
            p.mask = buf[4];
            p.mask_dtype = dt;
            int64_t ms[4] = {s->mask == 1 ? s->t : s->t * s->t, 0, s->mask == 1 ? 0 : s->t, 1};
            memcpy(p.mask_stride, ms, sizeof ms);
        }
        double flops = 4.0 * (double)(s->b * s->h) * (double)s->t * (double)s->t * (double)s->d;
        const char *labels[KN_ATTENTION_MAX_VARIANTS];
        int nvar = kn_cuda_attention_variants(&p, labels);
        printf("%s\n", s->name);
        for (int v = 0; v <= nvar; v++) {
            if (getenv("ATT_VARIANT") && atoi(getenv("ATT_VARIANT")) != v) continue;
            float us = time_variant(&p, v, e0, e1);
            if (us > 0)
                printf("  %-20s %8.2f us %7.1f TFLOP/s\n", v ? labels[v - 1] : "default", us, flops / us / 1e6);
        }
        if (kn_cuda_dnn_attention_covers(&p) && !getenv("ATT_VARIANT")) {
            float us = time_variant(&p, -1, e0, e1);
            if (us > 0) printf("  %-20s %8.2f us %7.1f TFLOP/s\n", "cudnn", us, flops / us / 1e6);
            if (s->mask == 2) { /* GPT-2's mask is causal: cuDNN's own causal pattern instead of loading it */
                kn_attention_problem c = p;
                c.mask = NULL;
                c.causal = 1;
                us = time_variant(&c, -1, e0, e1);
                if (us > 0) printf("  %-20s %8.2f us %7.1f TFLOP/s\n", "cudnn causal flag", us, flops / us / 1e6);
            }
        }
        for (int i = 0; i < 5; i++)
            if (buf[i]) kn_cuda_free(buf[i]);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}
