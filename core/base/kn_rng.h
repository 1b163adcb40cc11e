/* kn_rng: the counter-based random generator (Philox4x32-10) and the
 * uniform / normal transforms, written so that the CPU and a CUDA kernel
 * compiled from this same text produce the same bits.
 *
 * Why this shape: element i of a random tensor depends only on (seed, i), so
 * any backend can generate any slice in parallel. The transforms use only
 * +, -, *, / and sqrt in double precision, which IEEE 754 rounds exactly on
 * both CPU and GPU (build with contraction off: -ffp-contract=off, NVRTC
 * --fmad=false), instead of libm's log and cos, whose last bits differ.
 * This header has no includes so that NVRTC can compile it as is.
 */
#ifndef KN_RNG_H
#define KN_RNG_H

#ifdef __CUDACC_RTC__
#define KN_RNG_FN __device__ static inline
typedef unsigned int kn_u32;
typedef unsigned long long kn_u64;
#define KN_SQRT(x) sqrt(x)
#else
#include <math.h>
#include <stdint.h>
#define KN_RNG_FN static inline
typedef uint32_t kn_u32;
typedef uint64_t kn_u64;
#define KN_SQRT(x) sqrt(x)
#endif

/* Philox4x32-10 (Salmon et al., SC'11): 4 x 32-bit words from a 128-bit
 * counter and a 64-bit key. */
KN_RNG_FN void kn_philox(kn_u64 counter, kn_u64 key, kn_u32 out[4])
{
    kn_u32 c0 = (kn_u32)counter, c1 = (kn_u32)(counter >> 32), c2 = 0, c3 = 0;
    kn_u32 k0 = (kn_u32)key, k1 = (kn_u32)(key >> 32);
    for (int r = 0; r < 10; r++) {
        kn_u64 p0 = (kn_u64)0xD2511F53u * c0, p1 = (kn_u64)0xCD9E8D57u * c2;
        kn_u32 n0 = (kn_u32)(p1 >> 32) ^ c1 ^ k0, n2 = (kn_u32)(p0 >> 32) ^ c3 ^ k1;
        c1 = (kn_u32)p1;
        c3 = (kn_u32)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* A uniform double in (0, 1) from 32 random bits: never 0, never 1. */
KN_RNG_FN double kn_u32_to_unit(kn_u32 x)
{
    return ((double)x + 0.5) * (1.0 / 4294967296.0);
}

/* ln(x) for x in (0, 1], from basic operations only: x = m * 2^e with m in
 * [sqrt(1/2), sqrt(2)), then ln m = 2 atanh(z), z = (m-1)/(m+1), |z| < 0.172,
 * whose series converges to double precision in 12 terms. */
KN_RNG_FN double kn_rng_log(double x)
{
    int e = 0;
    while (x < 0.7071067811865476) {
        x *= 2.0;
        e--;
    }
    double z = (x - 1.0) / (x + 1.0), z2 = z * z, term = z, sum = 0.0;
    for (int k = 1; k <= 25; k += 2) {
        sum += term / k;
        term *= z2;
    }
    return 2.0 * sum + e * 0.69314718055994530942;
}

/* cos(2 pi u) for u in [0, 1): reduce to an octant with exact operations,
 * then a Taylor polynomial on [-pi/4, pi/4]. */
KN_RNG_FN double kn_rng_cos2pi(double u)
{
    double q = u * 4.0; /* quadrant position in [0, 4) */
    int k = (int)(q + 0.5);
    double r = (q - k) * 1.5707963267948966; /* in [-pi/4, pi/4] */
    double r2 = r * r;
    double c = 1.0 - r2 / 2 * (1 - r2 / 12 * (1 - r2 / 30 * (1 - r2 / 56 * (1 - r2 / 90 * (1 - r2 / 132 * (1 - r2 / 182 * (1 - r2 / 240)))))));
    double s = r * (1 - r2 / 6 * (1 - r2 / 20 * (1 - r2 / 42 * (1 - r2 / 72 * (1 - r2 / 110 * (1 - r2 / 156 * (1 - r2 / 210)))))));
    switch (k & 3) {
    case 0: return c;
    case 1: return -s;
    case 2: return -c;
    default: return s;
    }
}

/* Element i of the uniform (0, 1) stream of `seed`. */
KN_RNG_FN double kn_rng_uniform(kn_u64 seed, kn_u64 i)
{
    kn_u32 w[4];
    kn_philox(i >> 2, seed, w);
    return kn_u32_to_unit(w[i & 3]);
}

/* Element i of the standard normal stream of `seed` (Box-Muller on the
 * uniforms of Philox block i, words 0 and 1). */
KN_RNG_FN double kn_rng_normal(kn_u64 seed, kn_u64 i)
{
    kn_u32 w[4];
    kn_philox(i, seed ^ 0x6b696c6e00000000ull, w); /* a separate stream from uniform */
    double u1 = kn_u32_to_unit(w[0]), u2 = kn_u32_to_unit(w[1]);
    return KN_SQRT(-2.0 * kn_rng_log(u1)) * kn_rng_cos2pi(u2);
}

#endif
