/* kn_dtype: element types and the bf16/f16 conversions. */
#include "kn_dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} kn_dtypes[KN_DTYPE_COUNT] = {
    [KN_F32] = {"f32", 4}, [KN_F64] = {"f64", 8}, [KN_BF16] = {"bf16", 2},
    [KN_F16] = {"f16", 2}, [KN_I32] = {"i32", 4}, [KN_I64] = {"i64", 8},
    [KN_BOOL] = {"bool", 1},
};

size_t kn_dtype_size(kn_dtype dt)
{
    return (unsigned)dt < KN_DTYPE_COUNT ? kn_dtypes[dt].size : 0;
}

const char *kn_dtype_name(kn_dtype dt)
{
    return (unsigned)dt < KN_DTYPE_COUNT ? kn_dtypes[dt].name : "?";
}

kn_status kn_dtype_parse(const char *name, kn_dtype *out)
{
    static const struct {
        const char *alias;
        kn_dtype dt;
    } aliases[] = {
        {"float32", KN_F32}, {"float", KN_F32},    {"float64", KN_F64},
        {"double", KN_F64},  {"bfloat16", KN_BF16}, {"float16", KN_F16},
        {"half", KN_F16},    {"int32", KN_I32},    {"int", KN_I32},
        {"int64", KN_I64},   {"long", KN_I64},
    };
    for (int i = 0; i < KN_DTYPE_COUNT; i++)
        if (strcmp(name, kn_dtypes[i].name) == 0) {
            *out = (kn_dtype)i;
            return KN_OK;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(name, aliases[i].alias) == 0) {
            *out = aliases[i].dt;
            return KN_OK;
        }
    return kn_error(KN_ERR_DTYPE,
                    "unknown dtype '%s' (expected f32, f64, bf16, f16, i32, i64 or bool)",
                    name);
}

bool kn_dtype_is_float(kn_dtype dt)
{
    return dt == KN_F32 || dt == KN_F64 || dt == KN_BF16 || dt == KN_F16;
}

kn_dtype kn_dtype_promote(kn_dtype a, kn_dtype b)
{
    if (a == b) return a;
    bool fa = kn_dtype_is_float(a), fb = kn_dtype_is_float(b);
    if (fa && fb) {
        if (a == KN_F64 || b == KN_F64) return KN_F64;
        return KN_F32; /* f32 with a half type, or bf16 with f16 */
    }
    if (fa) return a;
    if (fb) return b;
    if (a == KN_BOOL) return b;
    if (b == KN_BOOL) return a;
    return KN_I64; /* i32 with i64 */
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float kn_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t kn_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                         /* nearest even */
    return (uint16_t)(u >> 16);
}

float kn_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: man * 2^-24 is exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t kn_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;              /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;             /* rounds to inf */
    if (a < 0x38800000u) {                                   /* subnormal or zero */
        float v = bits_f32(a) * 0x1p24f;                     /* exact scaling */
        return sign | (uint16_t)lrintf(v);                   /* nearest even */
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

double kn_load_f64(const void *p, kn_dtype dt)
{
    switch (dt) {
    case KN_F32: { float v; memcpy(&v, p, 4); return v; }
    case KN_F64: { double v; memcpy(&v, p, 8); return v; }
    case KN_BF16: { uint16_t v; memcpy(&v, p, 2); return kn_bf16_to_f32(v); }
    case KN_F16: { uint16_t v; memcpy(&v, p, 2); return kn_f16_to_f32(v); }
    case KN_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case KN_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case KN_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return 0.0;
    }
}

static int64_t saturate_i64(double v, double lo, double hi)
{
    if (isnan(v)) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

void kn_store_f64(void *p, kn_dtype dt, double v)
{
    switch (dt) {
    case KN_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case KN_F64: memcpy(p, &v, 8); break;
    case KN_BF16: { uint16_t h = kn_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case KN_F16: { uint16_t h = kn_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case KN_I32: {
        int32_t i = (int32_t)saturate_i64(v, -2147483648.0, 2147483647.0);
        memcpy(p, &i, 4);
        break;
    }
    case KN_I64: {
        int64_t i = saturate_i64(v, -9223372036854775808.0, 9223372036854774784.0);
        memcpy(p, &i, 8);
        break;
    }
    case KN_BOOL: *(uint8_t *)p = (v != 0.0) ? 1 : 0; break; /* NaN is true, as in C */
    default: break;
    }
}

void kn_format_double(char *buf, size_t size, double v)
{
    if (isnan(v)) { /* glibc prints a sign on NaN ("-nan"), which means nothing to a user */
        snprintf(buf, size, "nan");
        return;
    }
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

kn_status kn_dtype_check_value(const char *op, const char *which, double v, kn_dtype dt)
{
    double lo, hi_excl;
    if (dt == KN_I32) {
        lo = -2147483648.0;
        hi_excl = 2147483648.0;
    } else if (dt == KN_I64) {
        lo = -9223372036854775808.0;
        hi_excl = 9223372036854775808.0; /* 2^63: the largest i64 is not a double */
    } else {
        return KN_OK;
    }
    double t = trunc(v);
    if (t == t && t >= lo && t < hi_excl) return KN_OK;
    char s[40];
    kn_format_double(s, sizeof s, v);
    long long min = dt == KN_I32 ? INT32_MIN : INT64_MIN, max = dt == KN_I32 ? INT32_MAX : INT64_MAX;
    return kn_error(KN_ERR_ARG, "%s: %s %s cannot be stored in an %s tensor (range %lld to %lld)", op,
                    which, s, kn_dtype_name(dt), min, max);
}
