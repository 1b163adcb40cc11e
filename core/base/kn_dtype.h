/* kn_dtype: element types, their sizes and names, and the scalar conversions
 * every backend shares (bf16 and f16 are stored as such, computed in f32). */
#ifndef KN_DTYPE_H
#define KN_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kn_status.h"

typedef enum kn_dtype {
    KN_F32 = 0,
    KN_F64, /* the internal reference type */
    KN_BF16,
    KN_F16,
    KN_I32,
    KN_I64,
    KN_BOOL,
    KN_DTYPE_COUNT
} kn_dtype;

size_t kn_dtype_size(kn_dtype dt);
const char *kn_dtype_name(kn_dtype dt);
/* Parse "f32", "float32", "bf16", ... ; KN_ERR_DTYPE with a message if unknown. */
kn_status kn_dtype_parse(const char *name, kn_dtype *out);
bool kn_dtype_is_float(kn_dtype dt);
/* The type both operands of a binary op are promoted to (as PyTorch:
 * float beats int beats bool; among floats the wider; bf16+f16 -> f32). */
kn_dtype kn_dtype_promote(kn_dtype a, kn_dtype b);

/* Bit-exact conversions (round to nearest even, NaN kept NaN). */
float kn_bf16_to_f32(uint16_t h);
uint16_t kn_f32_to_bf16(float f);
float kn_f16_to_f32(uint16_t h);
uint16_t kn_f32_to_f16(float f);

/* Read / write one element of type dt at p as a double. Integer stores
 * truncate toward zero and saturate; NaN stores as 0 into integers. */
double kn_load_f64(const void *p, kn_dtype dt);
void kn_store_f64(void *p, kn_dtype dt, double v);

/* The one rule for a Lua/user number that a creation op (full, tensor,
 * masked_fill, arange...) stores into an integer dtype: NaN, infinities and
 * values outside the dtype's range (after truncation toward zero) are
 * KN_ERR_ARG naming op, which value, the value and the dtype; float and bool
 * dtypes take any number. kn_store_f64's saturation is for computed data. */
kn_status kn_dtype_check_value(const char *op, const char *which, double v, kn_dtype dt);
/* v as the shortest decimal that reads back as v ("nan", "inf", "1e+300"). */
void kn_format_double(char *buf, size_t size, double v);

#endif
