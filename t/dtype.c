/* t/dtype.c: element types (core/base/kn_dtype.c): names, sizes, parsing,
 * promotion, the bf16 / f16 conversions and kn_load_f64 / kn_store_f64.
 *
 * The conversions are checked exhaustively where the domain is small (every
 * one of the 65536 bf16 and f16 bit patterns decodes to the value their
 * format defines, and encodes back to itself) and, from f32, against a
 * reference that picks the nearest of all representable values by search (ties
 * to the even pattern), on random bit patterns plus exact midpoints, NaN, inf,
 * subnormals, overflow and signed zeros.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kn_dtype.h"
#include "tap.h"

static uint64_t rs;
static uint64_t rnd(void)
{
    uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The value of a half-precision pattern from its format's definition. */
static double f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -24);
    else v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static double bf16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 255) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -133);
    else v = ldexp(128 + m, e - 134);
    return s ? -v : v;
}

/* The non-negative finite patterns of a 16-bit format in increasing order
 * are 0x0000 .. max (value grows with the pattern); nearest by bisection. */
static uint16_t nearest(double (*value)(uint16_t), uint16_t maxfin, double x)
{
    int neg = signbit(x);
    double a = fabs(x);
    uint16_t lo = 0, hi = maxfin;
    if (a >= value(maxfin)) {
        /* Above the largest finite: halfway to the next binade step rounds to inf. */
        double next = value(maxfin) + (value(maxfin) - value((uint16_t)(maxfin - 1)));
        uint16_t inf = (uint16_t)(maxfin + 1);
        uint16_t r = a - value(maxfin) < next - a ? maxfin : inf; /* tie: inf is even */
        return (uint16_t)(r | (neg ? 0x8000 : 0));
    }
    while (hi - lo > 1) { /* value(lo) <= a < value(hi) */
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (value(mid) <= a) lo = mid;
        else hi = mid;
    }
    double dl = a - value(lo), dh = value(hi) - a;
    uint16_t r = dl < dh ? lo : dh < dl ? hi : (lo & 1 ? hi : lo);
    return (uint16_t)(r | (neg ? 0x8000 : 0));
}

/* ---- names, sizes, parsing, promotion ---- */

static void test_names(void)
{
    static const struct {
        kn_dtype dt;
        const char *name;
        size_t size;
    } t[] = {{KN_F32, "f32", 4}, {KN_F64, "f64", 8}, {KN_BF16, "bf16", 2}, {KN_F16, "f16", 2},
             {KN_I32, "i32", 4}, {KN_I64, "i64", 8}, {KN_BOOL, "bool", 1}};
    int good = 1;
    for (int i = 0; i < 7; i++) {
        kn_dtype p = KN_DTYPE_COUNT;
        good &= strcmp(kn_dtype_name(t[i].dt), t[i].name) == 0 && kn_dtype_size(t[i].dt) == t[i].size &&
                kn_dtype_parse(t[i].name, &p) == KN_OK && p == t[i].dt;
    }
    ok(good, "every dtype's name and size, and parsing its name");
    kn_dtype p = KN_DTYPE_COUNT;
    ok(kn_dtype_parse("float32", &p) == KN_OK && p == KN_F32 && kn_dtype_parse("half", &p) == KN_OK &&
           p == KN_F16 && kn_dtype_parse("bfloat16", &p) == KN_OK && p == KN_BF16,
       "aliases float32, half, bfloat16");
    ok(kn_dtype_parse("f8", &p) == KN_ERR_DTYPE, "an unknown dtype is refused");
    like(kn_last_error(), "unknown dtype 'f8'", "... with a message naming it");
    ok(kn_dtype_size((kn_dtype)99) == 0 && strcmp(kn_dtype_name((kn_dtype)99), "?") == 0,
       "an invalid dtype has size 0 and name ?");

    static const kn_dtype pr[][3] = {
        {KN_F32, KN_F32, KN_F32},   {KN_F32, KN_F64, KN_F64},  {KN_BF16, KN_F16, KN_F32},
        {KN_BF16, KN_F32, KN_F32},  {KN_F16, KN_I64, KN_F16},  {KN_I32, KN_I64, KN_I64},
        {KN_BOOL, KN_I32, KN_I32},  {KN_BOOL, KN_BF16, KN_BF16}, {KN_BOOL, KN_BOOL, KN_BOOL},
        {KN_I64, KN_F64, KN_F64},
    };
    good = 1;
    for (size_t i = 0; i < sizeof pr / sizeof pr[0]; i++)
        good &= kn_dtype_promote(pr[i][0], pr[i][1]) == pr[i][2] &&
                kn_dtype_promote(pr[i][1], pr[i][0]) == pr[i][2];
    ok(good, "promotion: float beats int beats bool, wider float wins, bf16+f16 is f32 (both orders)");
}

/* ---- bf16 / f16 ---- */

static void test_exhaustive(void)
{
    int dec16 = 1, rt16 = 1, decb = 1, rtb = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        double v = f16_value((uint16_t)h);
        float f = kn_f16_to_f32((uint16_t)h);
        if (isnan(v)) {
            dec16 &= isnan(f);
            rt16 &= isnan(kn_f16_to_f32(kn_f32_to_f16(f)));
        } else {
            dec16 &= (double)f == v && !signbit(f) == !signbit(v);
            rt16 &= kn_f32_to_f16(f) == h;
        }
        v = bf16_value((uint16_t)h);
        f = kn_bf16_to_f32((uint16_t)h);
        if (isnan(v)) {
            decb &= isnan(f);
            rtb &= isnan(kn_bf16_to_f32(kn_f32_to_bf16(f)));
        } else {
            decb &= (double)f == v && !signbit(f) == !signbit(v);
            rtb &= kn_f32_to_bf16(f) == h;
        }
    }
    ok(dec16, "all 65536 f16 patterns decode to their value (subnormals, inf, NaN, -0)");
    ok(rt16, "all f16 patterns survive f16 -> f32 -> f16 (NaN stays NaN)");
    ok(decb, "all 65536 bf16 patterns decode to their value");
    ok(rtb, "all bf16 patterns survive bf16 -> f32 -> bf16 (NaN stays NaN)");
}

static void test_rounding(void)
{
    int g16 = 1, gb = 1, ties16 = 1, tiesb = 1;
    for (int i = 0; i < 400000 && (g16 || gb); i++) {
        uint32_t u = (uint32_t)rnd();
        if (i % 4 == 1) u = (u & 0x80000000u) | (((u >> 8) % (31u << 23)) + (100u << 23)); /* f16-ish range */
        float f = f32_of_bits(u);
        if (isnan(f)) {
            g16 &= isnan(kn_f16_to_f32(kn_f32_to_f16(f)));
            gb &= isnan(kn_bf16_to_f32(kn_f32_to_bf16(f)));
            continue;
        }
        uint16_t w16 = nearest(f16_value, 0x7bff, f), wb = nearest(bf16_value, 0x7f7f, f);
        if (kn_f32_to_f16(f) != w16) {
            if (g16) printf("#   f16(%a): got %04x, expected %04x\n", f, kn_f32_to_f16(f), w16);
            g16 = 0;
        }
        if (kn_f32_to_bf16(f) != wb) {
            if (gb) printf("#   bf16(%a): got %04x, expected %04x\n", f, kn_f32_to_bf16(f), wb);
            gb = 0;
        }
    }
    ok(g16, "f32 -> f16 is the nearest f16 on 400000 random f32 (nearest by search)");
    ok(gb, "f32 -> bf16 is the nearest bf16 on 400000 random f32");
    /* Exact midpoints between neighbours go to the even pattern. */
    for (uint32_t h = 0; h < 0x7bff; h += 7) {
        float mid = (float)((f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2);
        ties16 &= kn_f32_to_f16(mid) == (h & 1 ? h + 1 : h);
        ties16 &= kn_f32_to_f16(-mid) == ((h & 1 ? h + 1 : h) | 0x8000);
    }
    for (uint32_t h = 0; h < 0x7f7f; h += 5) {
        float mid = (float)((bf16_value((uint16_t)h) + bf16_value((uint16_t)(h + 1))) / 2);
        tiesb &= kn_f32_to_bf16(mid) == (h & 1 ? h + 1 : h);
    }
    ok(ties16, "f16 ties round to even, subnormal midpoints included");
    ok(tiesb, "bf16 ties round to even");
    ok(kn_f32_to_f16(65519.99f) == 0x7bff && kn_f32_to_f16(65520.0f) == 0x7c00 &&
           kn_f32_to_f16(-1e30f) == 0xfc00 && kn_f32_to_f16(INFINITY) == 0x7c00,
       "f16 overflow: 65520 and beyond round to inf, below to 65504");
    ok(kn_f32_to_bf16(f32_of_bits(0x7f7fffffu)) == 0x7f80 && kn_f32_to_bf16(-INFINITY) == 0xff80,
       "bf16: FLT_MAX rounds to inf");
    ok(kn_f32_to_f16(0x1p-25f) == 0 && kn_f32_to_f16(0x1.000002p-25f) == 1 &&
           kn_f32_to_f16(-0x1p-26f) == 0x8000,
       "f16 underflow: half the smallest subnormal ties to 0, just above rounds up, -tiny is -0");
    ok(kn_f32_to_f16(-0.0f) == 0x8000 && kn_f32_to_bf16(-0.0f) == 0x8000, "-0 keeps its sign");
    ok(kn_f32_to_bf16(f32_of_bits(0x00000001u)) == 0 && kn_f32_to_bf16(f32_of_bits(0x00010000u)) == 1,
       "bf16 keeps f32 subnormals to its precision");
    uint16_t qn = kn_f32_to_bf16(f32_of_bits(0x7f800001u)); /* a NaN whose payload is only in the low bits */
    ok((qn & 0x7f80) == 0x7f80 && (qn & 0x7f) != 0, "a low-payload NaN stays NaN in bf16 (not inf)");
    uint16_t qh = kn_f32_to_f16(f32_of_bits(0xffc00001u));
    ok((qh & 0x7c00) == 0x7c00 && (qh & 0x3ff) != 0 && (qh & 0x8000), "NaN stays NaN in f16");
}

/* ---- kn_load_f64 / kn_store_f64 ---- */

static double store_load(kn_dtype dt, double v)
{
    unsigned char buf[8] = {0};
    kn_store_f64(buf, dt, v);
    return kn_load_f64(buf, dt);
}

static void test_load_store(void)
{
    ok(store_load(KN_F64, 0.1) == 0.1 && store_load(KN_F32, 0.1) == (double)0.1f &&
           store_load(KN_BF16, 1.0 / 3) == (double)kn_bf16_to_f32(kn_f32_to_bf16(1.0f / 3)) &&
           store_load(KN_F16, 1.0 / 3) == (double)kn_f16_to_f32(kn_f32_to_f16(1.0f / 3)),
       "floats store rounded to their type and load back exactly");
    ok(store_load(KN_I32, 2.7) == 2 && store_load(KN_I32, -2.7) == -2 && store_load(KN_I64, -0.5) == 0,
       "integers truncate toward zero");
    ok(store_load(KN_I32, 1e10) == 2147483647.0 && store_load(KN_I32, -1e10) == -2147483648.0 &&
           store_load(KN_I32, INFINITY) == 2147483647.0,
       "i32 saturates");
    unsigned char buf[8];
    int64_t i64;
    kn_store_f64(buf, KN_I64, 1e19);
    memcpy(&i64, buf, 8);
    int hi = i64 == INT64_MAX || i64 == INT64_MAX - 1023; /* the largest double below 2^63 */
    kn_store_f64(buf, KN_I64, -1e19);
    memcpy(&i64, buf, 8);
    ok(hi && i64 == INT64_MIN, "i64 saturates (no UB on out-of-range doubles)");
    ok(store_load(KN_I32, NAN) == 0 && store_load(KN_I64, NAN) == 0, "NaN stores as 0 into integers");
    ok(store_load(KN_BOOL, 0) == 0 && store_load(KN_BOOL, -0.0) == 0 && store_load(KN_BOOL, 0.5) == 1 &&
           store_load(KN_BOOL, NAN) == 1 && store_load(KN_BOOL, -3) == 1,
       "bool: zero is false, anything else (NaN too) is true");
    int64_t big = (INT64_C(1) << 53) + 1;
    memcpy(buf, &big, 8);
    ok(kn_load_f64(buf, KN_I64) == 0x1p53, "i64 loads round to the nearest double");
    int32_t m = INT32_MIN;
    memcpy(buf, &m, 4);
    ok(kn_load_f64(buf, KN_I32) == -2147483648.0, "i32 loads exactly");
    buf[0] = 7;
    ok(kn_load_f64(buf, KN_BOOL) == 1.0, "any nonzero byte loads as true");
    ok(bits_of_f32((float)store_load(KN_F32, -0.0)) == 0x80000000u, "-0 survives an f32 store");
    int good = 1;
    for (int i = 0; i < 10000; i++) { /* unaligned addresses are fine (memcpy inside) */
        unsigned char raw[16];
        double v = (double)(int64_t)(rnd() % 2000001) - 1000000.0;
        for (int dt = 0; dt < KN_DTYPE_COUNT; dt++) {
            kn_store_f64(raw + 1, (kn_dtype)dt, v);
            double back = kn_load_f64(raw + 1, (kn_dtype)dt);
            double want = dt == KN_BOOL ? (v != 0)
                        : dt == KN_BF16 ? (double)kn_bf16_to_f32(kn_f32_to_bf16((float)v))
                        : dt == KN_F16  ? (double)kn_f16_to_f32(kn_f32_to_f16((float)v))
                                        : v; /* integers up to 1e6 are exact in f32, i32, ... */
            good &= back == want;
        }
    }
    ok(good, "integers up to 1e6 round-trip through every dtype (bf16/f16 as rounded)");
}

int main(void)
{
    const char *env = getenv("KILN_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10)
                        : ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20)) % 1000000007ull;
    printf("# seed %llu (rerun with KILN_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    rs = seed;
    test_names();
    test_exhaustive();
    test_rounding();
    test_load_store();
    return done_testing();
}
