/* t/x3_model.c: matmul's default on Hopper between kiln's split-f32 GEMM
 * and cuBLASLt (kn_cuda_gemm_x3_default_pick, kernels/cuda/kn_cuda_gemm_x3.c),
 * a wave model that needs no GPU. It is held to what bench/split_gemm.c
 * measured on the H200 (132 SMs; session 26 run 4, after the compact
 * epilogue, where a row says so; else bench/results/2026-12-01-h200-s16.md,
 * run 6): on each of these GEMMs it must pick the tile that ran fastest,
 * or cuBLASLt where no tile ran 5% faster, and split k as the
 * measurements favoured (0 ways: the launcher's own rule). A change to the model that moves a pick fails here, with the
 * measured figures beside it. Without the CUDA toolkit it skips. */
#ifndef KILN_HAVE_CUDA
#include "tap.h"

int main(void)
{
    skip_all("built without the CUDA toolkit");
}
#else
#include <string.h>

#include "cuda/kn_cuda_gemm_x3.h"
#include "tap.h"

typedef struct shape {
    const char *name;
    int64_t m, n, k;
    int tile;   /* the fastest measured; -1: none ran 5% faster than cuBLASLt */
    int splits; /* 0: not checked */
    const char *measured;
} shape;

static const shape shapes[] = {
    {"block_qkv", 4096, 1536, 512, KN_CUDA_X3_TILE_WG128X192, 1, "cuBLASLt 164.9, 128x128 98.7, 128x192 87.4 us (s26)"},
    {"block_o", 4096, 512, 512, KN_CUDA_X3_TILE_WG128, 1, "56.6, 39.1, 54.8"},
    {"block_fc1", 4096, 2048, 512, KN_CUDA_X3_TILE_WG128X192, 1, "183.8, 129.8, 128.6 (s26)"},
    {"block_fc2", 4096, 512, 2048, KN_CUDA_X3_TILE_WG128, 1, "182.1, 120.5, 140.2 (s26)"},
    {"vit_qkv", 1576, 2304, 768, KN_CUDA_X3_TILE_WG128, 1, "132.2, 93.9, 124.6 (s26)"},
    {"vit_ffn1", 1576, 3072, 768, KN_CUDA_X3_TILE_WG128X192, 1, "211.9, 155.8, 151.9"},
    {"vit_ffn2", 1576, 768, 3072, KN_CUDA_X3_TILE_WG128X192, 0, "180.3, 148.3, 146.9"},
    {"vit_o", 1576, 768, 768, -1, 0, "55.6, 54.5, 76.9"},
    {"bert_qkv", 1024, 2304, 768, KN_CUDA_X3_TILE_WG128X192, 1, "102.9, 104.8, 77.3"},
    {"bert_ffn1", 1024, 3072, 768, KN_CUDA_X3_TILE_WG128X192, 1, "130.6, 96.4, 63.3 (s26)"},
    {"bert_ffn2", 1024, 768, 3072, KN_CUDA_X3_TILE_WG128X192, 0, "114.6, 87.3, 70.4 (s26)"},
    {"bert_o", 1024, 768, 768, -1, 0, "38.3, 55.6, 76.4"},
    {"large_linear", 64, 4096, 4096, KN_CUDA_X3_TILE_WGS64X128, 0, "65.2, wg64x64: 57.5, wgs64x128: 47.8 (session 19)"},
};

static kn_cuda_x3_call call_of(int64_t m, int64_t n, int64_t k, bool a_kmajor, bool b_kmajor)
{
    kn_cuda_x3_call c;
    memset(&c, 0, sizeof c);
    c.p.m = m, c.p.n = n, c.p.k = k, c.count = 1;
    c.p.lda = a_kmajor ? k : m, c.p.ldb = b_kmajor ? k : n;
    c.a_kmajor = a_kmajor, c.b_kmajor = b_kmajor;
    return c;
}

static const char *tile_name(int tile)
{
    return tile < 0 ? "cuBLASLt" : kn_cuda_gemm_x3_tile_name(tile);
}

int main(void)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        kn_cuda_x3_call c = call_of(s->m, s->n, s->k, true, true);
        int splits = 0, tile = kn_cuda_gemm_x3_default_pick(&c, 132, &splits);
        ok(tile == s->tile && (!s->splits || splits == s->splits),
           "%s %lldx%lldx%lld: %s split %d ways (measured: %s, %s; %s)", s->name, (long long)s->m,
           (long long)s->n, (long long)s->k, tile_name(tile), splits, tile_name(s->tile),
           s->splits ? "that split" : "split not checked", s->measured);
    }
    /* no pick without enough work or with a short sum */
    int splits;
    kn_cuda_x3_call small = call_of(128, 128, 512, true, true), shortk = call_of(4096, 4096, 256, true, true);
    ok(kn_cuda_gemm_x3_default_pick(&small, 132, &splits) < 0, "a product under 2^28 multiply-adds: cuBLASLt");
    ok(kn_cuda_gemm_x3_default_pick(&shortk, 132, &splits) < 0, "k of 256: cuBLASLt");
    /* the 128x192 tile's stages do not fit with both operands m- or
     * n-contiguous: the pick is never it there */
    kn_cuda_x3_call mn = call_of(1024, 2304, 768, false, false);
    ok(kn_cuda_gemm_x3_default_pick(&mn, 132, &splits) != KN_CUDA_X3_TILE_WG128X192,
       "both operands m- or n-contiguous: never the 128x192 tile");
    /* split-K: long sums over few tiles split, and a k of 768 never
     * (each split at least 512 long) */
    kn_cuda_x3_call ffn2 = call_of(1024, 768, 3072, true, true), ffn1 = call_of(1024, 3072, 768, true, true);
    kn_cuda_gemm_x3_default_pick(&ffn2, 132, &splits);
    ok(splits > 1 && splits <= 6, "1024x768x3072 (32 tiles of 128x192) splits k: %d ways", splits);
    kn_cuda_gemm_x3_default_pick(&ffn1, 132, &splits);
    ok(splits == 1, "k of 768 is not split: %d", splits);
    /* an input gradient's b, n-contiguous (dy . w): a split tile
     * (4096x2048x512, s26: wg128x128 136.0 us, cuBLASLt 179.1) */
    kn_cuda_x3_call dx = call_of(4096, 2048, 512, true, false);
    int tdx = kn_cuda_gemm_x3_default_pick(&dx, 132, &splits);
    ok(tdx == KN_CUDA_X3_TILE_WG128, "b n-contiguous, 4096x2048x512: %s (measured: wg128x128)", tile_name(tdx));
    /* half the SMs: a GPU's size moves the waves (BERT's QKV on 66 SMs:
     * 96 tiles of 128x192 are two waves there) */
    kn_cuda_x3_call qkv = call_of(1024, 2304, 768, true, true);
    int t132 = kn_cuda_gemm_x3_default_pick(&qkv, 132, &splits), t66 = kn_cuda_gemm_x3_default_pick(&qkv, 66, &splits);
    ok(t132 == KN_CUDA_X3_TILE_WG128X192 && t66 != t132, "the SM count enters the pick: %s on 132 SMs, %s on 66",
       tile_name(t132), tile_name(t66));
    done_testing();
}
#endif
