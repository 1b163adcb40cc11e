/* t/rng.c: the counter-based generator of core/base/kn_rng.h.
 *
 * kn_philox is checked against the published Random123 known answers for
 * Philox4x32-10 through a reference written here from the paper (full 128-bit
 * counter, so all three official vectors apply), then on random counters and
 * keys; the uniform and normal transforms for range, moments, the exactness
 * of their libm-free log and cos, and reproducibility.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kn_rng.h"
#include "tap.h"

/* Philox4x32-10 from Salmon et al. (SC'11) / Random123: ten rounds of two
 * 32x32->64 multiplies, the key bumped by the Weyl constants between rounds. */
static void ref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k[0] += 0x9E3779B9u;
            k[1] += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n[4] = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
        for (int i = 0; i < 4; i++) c[i] = n[i];
    }
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

static uint64_t rs;
static uint64_t rnd(void)
{
    uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int same4(const uint32_t *a, const uint32_t *b)
{
    return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

static void test_kat(void)
{
    /* Random123 tests/kat_vectors: philox4x32 10 <ctr[4]> <key[2]> -> <out[4]> */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        ref_philox(kat[i], kat[i] + 4, out);
        if (!ok(same4(out, kat[i] + 6), "the test's reference Philox matches Random123 KAT %d", i + 1))
            printf("#   got %08x %08x %08x %08x\n", out[0], out[1], out[2], out[3]);
    }
    kn_u32 w[4];
    kn_philox(0, 0, w);
    if (!ok(w[0] == 0x6627e8d5 && w[1] == 0xe169c58d && w[2] == 0xbc57ac4c && w[3] == 0x9b00dbd8,
            "kn_philox(counter 0, key 0) = 6627e8d5 e169c58d bc57ac4c 9b00dbd8 (Random123 KAT)"))
        printf("#   got %08x %08x %08x %08x\n", w[0], w[1], w[2], w[3]);

    /* kn_philox's 64-bit counter is ctr words 0 and 1 (words 2 and 3 zero);
     * the key is key words 0 and 1. */
    int good = 1;
    for (int i = 0; i < 2000 && good; i++) {
        uint64_t ctr = rnd(), key = rnd();
        if (i % 3 == 0) ctr &= 0xffffffffu; /* small counters, as tensors use */
        uint32_t c4[4] = {(uint32_t)ctr, (uint32_t)(ctr >> 32), 0, 0};
        uint32_t k2[2] = {(uint32_t)key, (uint32_t)(key >> 32)}, want[4];
        ref_philox(c4, k2, want);
        kn_philox(ctr, key, w);
        good = same4(w, want);
        if (!good)
            printf("#   counter %016llx key %016llx: got %08x.. expected %08x..\n",
                   (unsigned long long)ctr, (unsigned long long)key, w[0], want[0]);
    }
    ok(good, "kn_philox matches the reference on 2000 random counters and keys");
}

static void test_transforms(void)
{
    ok(kn_u32_to_unit(0) > 0 && kn_u32_to_unit(0xffffffffu) < 1, "u32 -> (0, 1) excludes both ends");

    double worst = 0;
    for (int i = 0; i < 100000; i++) {
        double x = i < 20 ? ldexp(1.0, -i * 50) : kn_u32_to_unit((kn_u32)rnd());
        if (i == 20) x = 1.0;
        double e = fabs(kn_rng_log(x) - log(x)) / fmax(1e-300, fabs(log(x)));
        if (x == 1.0) e = fabs(kn_rng_log(x));
        if (e > worst) worst = e;
    }
    ok(worst < 2e-15, "kn_rng_log agrees with log to %.2g relative on (0, 1]", worst);

    worst = 0;
    for (int i = 0; i < 100000; i++) {
        double u = i < 8 ? i / 8.0 : kn_u32_to_unit((kn_u32)rnd());
        double e = fabs(kn_rng_cos2pi(u) - cos(2 * M_PI * u));
        if (e > worst) worst = e;
    }
    /* What matters is that CPU and GPU compute the same bits; accuracy only
     * needs to be far below anything a sample could notice. (The sine series
     * stops at r^13: about 2e-14 near r = pi/4; one more term gives 1e-16.) */
    ok(worst < 1e-15, "kn_rng_cos2pi agrees with cos(2 pi u) to %.2g on [0, 1)", worst);
}

static void test_streams(uint64_t seed)
{
    const int n = 100000;
    double su = 0, sn = 0, sn2 = 0;
    int inside = 1, within1 = 0;
    for (int i = 0; i < n; i++) {
        double u = kn_rng_uniform(seed, (kn_u64)i), z = kn_rng_normal(seed, (kn_u64)i);
        inside &= u > 0 && u < 1;
        su += u;
        sn += z;
        sn2 += z * z;
        within1 += fabs(z) < 1;
    }
    double mu = su / n, mn = sn / n, var = sn2 / n - mn * mn, f1 = (double)within1 / n;
    ok(inside, "1e5 uniforms lie in (0, 1)");
    ok(fabs(mu - 0.5) < 5 * sqrt(1.0 / 12 / n), "uniform mean %.5f is about 1/2", mu);
    ok(fabs(mn) < 5 / sqrt((double)n), "normal mean %.5f is about 0", mn);
    ok(fabs(var - 1) < 5 * sqrt(2.0 / n), "normal variance %.5f is about 1", var);
    ok(fabs(f1 - 0.682689) < 5 * sqrt(0.2166 / n), "normal: %.4f within one sigma (0.6827)", f1);

    int rep = 1, diff_seed = 0, diff_stream = 0;
    for (int i = 0; i < 1000; i++) {
        kn_u64 k = rnd() >> 1;
        rep &= kn_rng_normal(seed, k) == kn_rng_normal(seed, k) &&
               kn_rng_uniform(seed, k) == kn_rng_uniform(seed, k);
        diff_seed += kn_rng_uniform(seed, k) != kn_rng_uniform(seed + 1, k);
        /* Box-Muller on the uniform stream's own block would correlate the
         * two streams; the normal one must use another key. */
        kn_u32 w[4];
        kn_philox(k, seed, w);
        double bm = sqrt(-2 * kn_rng_log(kn_u32_to_unit(w[0]))) * kn_rng_cos2pi(kn_u32_to_unit(w[1]));
        diff_stream += bm != kn_rng_normal(seed, k);
    }
    ok(rep, "the same (seed, index) gives the same value");
    ok(diff_seed > 990, "another seed gives another stream (%d of 1000 differ)", diff_seed);
    ok(diff_stream > 990, "the normal stream does not reuse the uniform stream's blocks");
    /* Element i of the uniform stream is word i % 4 of Philox block i / 4. */
    kn_u32 w[4];
    kn_philox(5, seed, w);
    ok(kn_rng_uniform(seed, 22) == kn_u32_to_unit(w[2]), "uniform element 22 is word 2 of block 5");
}

int main(void)
{
    const char *env = getenv("KILN_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10)
                        : ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20)) % 1000000007ull;
    printf("# seed %llu (rerun with KILN_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    rs = seed;
    test_kat();
    test_transforms();
    test_streams(seed);
    return done_testing();
}
