/* kn_cuda_gemm_x3: kiln's split-precision f32 GEMM (kn_la_gemm_x3.cu):
 * f32 products on the TF32 tensor cores at about f32's accuracy. Whether a
 * call may use it is the caller's decision (kn_cuda_blas.c: the "ieee"
 * contract, max-autotune's measurements); this file launches it.
 */
#ifndef KN_CUDA_GEMM_X3_H
#define KN_CUDA_GEMM_X3_H

#include <stdbool.h>
#include <stdint.h>

#include "kn_cuda_la_args.h"
#include "kn_status.h"

/* Tile shapes (kn_cuda_gemm_x3.c's table; kn_cuda_linalg.c has a module
 * for each and layout, in this order). */
#define KN_CUDA_X3_TILES 12
/* the wgmma tiles matmul's default picks from (kn_cuda_blas.c) */
#define KN_CUDA_X3_TILE_WG128 5
#define KN_CUDA_X3_TILE_WG64X128 6
#define KN_CUDA_X3_TILE_WG64 7
#define KN_CUDA_X3_TILE_WG128X192 8
#define KN_CUDA_X3_TILE_WG128X64 9
/* the swapped form's (y^T = b a^T, both operands k-contiguous): 64 rows
 * of y by 128 or 64 columns */
#define KN_CUDA_X3_TILE_WGS64X128 10
#define KN_CUDA_X3_TILE_WGS64X64 11

/* One call: p's pointers, sizes and leading dims, a_kmajor (a is [m, k]
 * k-contiguous, else [k, m] m-contiguous), b_kmajor (b is [n, k], else
 * [k, n]), count batches at p's batch strides. */
typedef struct kn_cuda_x3_call {
    kn_la_gemm_args p;
    bool a_kmajor, b_kmajor;
    int64_t count;
} kn_cuda_x3_call;

/* Whether the kernel can take c: 16-byte aligned operands and leading
 * dims (its 16-byte copies), sizes within its 32-bit tile counts. */
bool kn_cuda_gemm_x3_fits(const kn_cuda_x3_call *c);
/* The same without the pointers: sizes, leading dims and batch strides. */
bool kn_cuda_gemm_x3_shape_fits(const kn_cuda_x3_call *c);
/* Run c with tile shape `tile` (0 .. KN_CUDA_X3_TILES-1); a call with
 * fewer tiles than SMs and a long sum is split along k (kn_la_gemm_x3_sum
 * adds the splits in order). */
kn_status kn_cuda_gemm_x3(const kn_cuda_x3_call *c, int tile);
/* Whether tile shape `tile` runs on the calling thread's GPU (the wgmma
 * tiles, "wg...", need compute capability 9.0). */
bool kn_cuda_gemm_x3_tile_runs_here(int tile);
/* "128x128" */
const char *kn_cuda_gemm_x3_tile_name(int tile);
/* Whether tile shape `tile` runs here with operands of these layouts (the
 * 192-column tile's stages do not fit in shared memory with both operands
 * m- or n-contiguous; the swapped tiles take both k-contiguous only). */
bool kn_cuda_gemm_x3_tile_takes(int tile, bool a_kmajor, bool b_kmajor);
/* matmul's default for c on a Hopper GPU of `sms` SMs: a wgmma tile
 * (split *splits ways, as the launcher splits it; 0: the 64x64 tile,
 * which the launcher splits by its own rule), or -1 for cuBLASLt's
 * strict GEMM; by the wave model of kn_cuda_gemm_x3.c, which needs no
 * GPU (the caller checks that the tile runs on its own). */
int kn_cuda_gemm_x3_default_pick(const kn_cuda_x3_call *c, int sms, int *splits);

/* The convolution form (KN_X3_CONV in kn_la_gemm_x3.cu): c->p as for the
 * GEMM with a the channels-last input x {N, h, w, c} (contiguous), b the
 * weight {n, r, s, c} (ldb = k = r s c), y {N, p, q, n} (m = N p q rows,
 * ldy apart), and the geometry in c->p.cv; one call (count 1), both
 * operands k-contiguous. Whether it can take c: c a multiple of 4 (a
 * window's 4 channels are one 16-byte copy), 16-byte aligned x and
 * weight, sizes within its 32-bit index math. */
bool kn_cuda_conv_x3_fits(const kn_cuda_x3_call *c);
/* Whether `tile` is one of the convolution form's tiles. */
bool kn_cuda_conv_x3_tile_ok(int tile);
/* The default's tile for c: 128x64 for 64 output channels or fewer,
 * 128x128 from there (bench/split_conv.c, H200: 64x64 never won). */
int kn_cuda_conv_x3_default_pick(const kn_cuda_x3_call *c);
/* Run c with tile shape `tile` (split along k as the GEMM is). c->p.ys
 * may scatter y's rows (an input gradient's class of pixels). */
kn_status kn_cuda_conv_x3(const kn_cuda_x3_call *c, int tile);

/* The weight-gradient form (KN_X3_CONV 2): y {m, r, s, c} (ldy = n = r s
 * c) = the sum over the k = N p q output pixels of a (the output's
 * gradient {N, p, q, m}, m-contiguous: lda = m, a_kmajor false) times x's
 * windows (x {N, h, w, c} channels-last, contiguous, at c->p.b; b_kmajor
 * false), the geometry in c->p.cv. Whether it can take c: c a multiple
 * of 4, 16-byte aligned operands and lda. */
bool kn_cuda_conv_x3w_fits(const kn_cuda_x3_call *c);
/* Run c in its one tile, 64 rows (output channels) by 128 taps and
 * channels on two warpgroups (KN_CUDA_X3_TILE_WG64X128), split along its
 * pixels into as many blocks as fill the GPU (kn_la_gemm_x3_sum adds the
 * splits in order). */
kn_status kn_cuda_conv_x3w(const kn_cuda_x3_call *c);

#endif
