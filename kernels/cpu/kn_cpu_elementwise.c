/* kn_cpu_elementwise: the CPU reference for unary, binary, compare, where,
 * masked_fill, cast and contiguous copies.
 *
 * How it is fast enough without one loop per (op, dtype) pair: operands are
 * walked with an N-d odometer whose dims were first simplified (size-1 dims
 * dropped, dims that are contiguous with each other merged), so a
 * same-shape contiguous op is one long row and a row broadcast is a few long
 * rows. Each row is processed in chunks: every operand is loaded into a
 * double buffer by a loop specialized for its dtype (a fill for a broadcast
 * stride 0), the op's expression from kn_ops.def runs over the buffers in a
 * tight loop with no per-element dispatch, and the result is stored by a loop
 * specialized for the output dtype. Computing in double and rounding once is
 * the reference precision; f32 +-* / computed this way are exactly rounded.
 * Copies (contiguous, same-dtype cast) move bytes and never go through double.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kn_cpu.h"

#define CHUNK 512
#define MAX_OPS 4 /* output + up to three inputs */

/* The math helpers kn_ops.def's expressions use, for the CPU in double. */
#define kn_exp exp
#define kn_log log
#define kn_tanh tanh
#define kn_erf erf
#define kn_floor floor
#define kn_ceil ceil
#define kn_rint rint /* the default rounding mode: half to even */
#define kn_sin sin
#define kn_cos cos
#define kn_sqrt sqrt
#define kn_abs fabs
#define kn_pow pow
#define kn_attr_value v

typedef void (*ew_fn)(int64_t n, double *restrict o, const double *restrict A,
                      const double *restrict B, const double *restrict C, double v);

/* One loop per op over the chunk buffers, computing in EW_T; its functions
 * are named EW_PREFIX_<op>. Instantiated twice: in double (ew_*) and, for
 * the integer path below, in int64_t (iw_*). Ops whose expression is 0 (not
 * elementwise) get a function too; the tables never call them. */
#define EW_NAME2(prefix, id) prefix##_##id
#define EW_NAME(prefix, id) EW_NAME2(prefix, id)
#define EW_LOOP(id, expr)                                                                    \
    static void EW_NAME(EW_PREFIX, id)(int64_t n, EW_T *restrict o, const EW_T *restrict A,  \
                                       const EW_T *restrict B, const EW_T *restrict C, EW_T v) \
    {                                                                                        \
        (void)A; (void)B; (void)C; (void)v;                                                  \
        for (int64_t i = 0; i < n; i++) {                                                    \
            const EW_T a = A[i], b = B[i], c = C[i];                                         \
            (void)a; (void)b; (void)c;                                                       \
            o[i] = (EW_T)(expr);                                                             \
        }                                                                                    \
    }
#define KN_OP(id, name, kind, nin, expr) EW_LOOP(id, expr)
#define EW_PREFIX ew
#define EW_T double
#include "kn_ops.def"
#undef EW_T
#undef EW_PREFIX
#undef KN_OP

static const ew_fn ew_table[KN_OP_COUNT] = {
#define KN_OP(id, name, kind, nin, expr) ew_##id,
#include "kn_ops.def"
#undef KN_OP
};

/* The integer path: when the output and every input are integers or bool,
 * the op computes in int64_t (a double holds integers exactly only up to
 * 2^53: (2^60 + 1) - 2^60 came out 0). Overflow wraps in two's complement,
 * as PyTorch's integer tensors and the generated kernels (-fwrapv) do: +, -,
 * * and negation go through uint64_t, where wrapping is defined C; so does
 * pow, by squaring (the generated kn_ipow is the same). */
static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static int64_t wrap_neg(int64_t a) { return (int64_t)(0u - (uint64_t)a); }
static int64_t wrap_abs(int64_t a) { return a < 0 ? wrap_neg(a) : a; }
/* A negative exponent: 1 or -1 for a base of 1 or -1, else 0 (PyTorch's). */
static int64_t wrap_pow(int64_t a, int64_t b)
{
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)a;
    for (; b; b >>= 1) {
        if (b & 1) r *= x;
        if (b > 1) x *= x;
    }
    return (int64_t)r;
}

typedef void (*iw_fn)(int64_t n, int64_t *restrict o, const int64_t *restrict A,
                      const int64_t *restrict B, const int64_t *restrict C, int64_t v);

#undef kn_abs
#undef kn_pow
#define kn_abs wrap_abs
#define kn_pow wrap_pow
#define KN_OP(id, name, kind, nin, expr) EW_LOOP(id, expr)
#define EW_PREFIX iw
#define EW_T int64_t
#include "kn_ops.def"
#undef EW_T
#undef EW_PREFIX
#undef KN_OP
#undef EW_LOOP
#undef EW_NAME
#undef EW_NAME2
#undef kn_abs
#undef kn_pow
#define kn_abs fabs
#define kn_pow pow

/* The ops whose formula can overflow in int64_t, written with wrapping. */
#define IW_WRAPPED(id, body)                                                                 \
    static void iw_wrapped_##id(int64_t n, int64_t *restrict o, const int64_t *restrict A,   \
                                const int64_t *restrict B, const int64_t *restrict C,        \
                                int64_t v)                                                   \
    {                                                                                        \
        (void)B; (void)C; (void)v;                                                           \
        for (int64_t i = 0; i < n; i++) o[i] = (body);                                       \
    }
IW_WRAPPED(ADD, wrap_add(A[i], B[i]))
IW_WRAPPED(SUB, wrap_sub(A[i], B[i]))
IW_WRAPPED(MUL, wrap_mul(A[i], B[i]))
IW_WRAPPED(NEG, wrap_neg(A[i]))
#undef IW_WRAPPED

static const iw_fn iw_table[KN_OP_COUNT] = {
#define KN_OP(id, name, kind, nin, expr) [KN_OP_##id] = iw_##id,
#include "kn_ops.def"
#undef KN_OP
};

static iw_fn iw_for(kn_op op)
{
    switch (op) {
    case KN_OP_ADD: return iw_wrapped_ADD;
    case KN_OP_SUB: return iw_wrapped_SUB;
    case KN_OP_MUL: return iw_wrapped_MUL;
    case KN_OP_NEG: return iw_wrapped_NEG;
    default: return iw_table[op];
    }
}

/* Whether run_expr computes this call in int64_t (see above). */
static bool int_path_ok(const kn_opcall *c, const kn_tensor *out, int nin)
{
    if (kn_dtype_is_float(out->dtype) || c->op == KN_OP_DIV) return false;
    for (int i = 0; i < nin; i++)
        if (kn_dtype_is_float(c->in[i]->dtype)) return false;
    return true;
}

/* The f32 fast path: when the output and every input are f32 and the output
 * row is contiguous, each op runs straight from the f32 inputs to the f32
 * output (still computing in double), with the common stride patterns
 * (both contiguous, a broadcast scalar on either side) as loops of their own
 * so the compiler sees simple indexing. */
typedef void (*f32_fn)(int64_t n, float *restrict o, const float *A, int64_t sa, const float *B,
                       int64_t sb, double v);

#define F32_BODY(expr, EA, EB)                                                               \
    for (int64_t i = 0; i < n; i++) {                                                        \
        const double a = (EA), b = (EB), c = 0;                                              \
        (void)a; (void)b; (void)c;                                                           \
        o[i] = (float)(expr);                                                                \
    }
#define KN_OP(id, name, kind, nin, expr)                                                     \
    static void f32_##id(int64_t n, float *restrict o, const float *A, int64_t sa,           \
                         const float *B, int64_t sb, double v)                               \
    {                                                                                        \
        (void)v;                                                                             \
        if (sa == 1 && sb == 1) F32_BODY(expr, A[i], B[i])                                   \
        else if (sa == 1 && sb == 0) F32_BODY(expr, A[i], B[0])                              \
        else if (sa == 0 && sb == 1) F32_BODY(expr, A[0], B[i])                              \
        else F32_BODY(expr, A[i * sa], B[i * sb])                                            \
    }
#include "kn_ops.def"
#undef KN_OP
#undef F32_BODY

static const f32_fn f32_table[KN_OP_COUNT] = {
#define KN_OP(id, name, kind, nin, expr) f32_##id,
#include "kn_ops.def"
#undef KN_OP
};

/* Whether run_expr may take the f32 fast path for this call. */
static bool f32_path_ok(const kn_opcall *c, const kn_tensor *out, int nin)
{
    kn_op_kind k = kn_op_kind_of(c->op);
    if (out->dtype != KN_F32 || (k != KN_K_UNARY && k != KN_K_BINARY) || nin > 2) return false;
    for (int i = 0; i < nin; i++)
        if (c->in[i]->dtype != KN_F32) return false;
    return true;
}

/* ---- the strided walk ---- */

typedef struct ew_iter {
    int nd, nops;
    int64_t shape[KN_MAX_DIMS];
    int64_t st[MAX_OPS][KN_MAX_DIMS]; /* element strides per operand, 0 where broadcast */
} ew_iter;

/* Operand k's strides aligned to the output shape (trailing dims aligned;
 * a missing or size-1 dim broadcasts with stride 0). */
static void iter_operand(ew_iter *it, int k, const kn_tensor *t, int64_t *off)
{
    int lead = it->nd - t->ndim;
    for (int d = 0; d < it->nd; d++) {
        int id = d - lead;
        it->st[k][d] = (id < 0 || t->shape[id] == 1) ? 0 : t->strides[id];
    }
    off[k] = t->offset;
}

/* Drop size-1 dims and merge dims that every operand walks contiguously, so
 * the innermost dim is as long as possible. Leaves nd >= 1. */
static void iter_simplify(ew_iter *it)
{
    int n = 0;
    for (int d = 0; d < it->nd; d++) {
        if (it->shape[d] == 1) continue;
        it->shape[n] = it->shape[d];
        for (int k = 0; k < it->nops; k++) it->st[k][n] = it->st[k][d];
        n++;
    }
    if (n == 0) {
        it->shape[0] = 1;
        for (int k = 0; k < it->nops; k++) it->st[k][0] = 0;
        n = 1;
    }
    int m = 0; /* merged dims so far, dim m is the one being grown */
    for (int d = 1; d < n; d++) {
        bool can = true;
        for (int k = 0; k < it->nops && can; k++)
            can = it->st[k][m] == it->st[k][d] * it->shape[d];
        if (can) {
            it->shape[m] *= it->shape[d];
            for (int k = 0; k < it->nops; k++) it->st[k][m] = it->st[k][d];
        } else {
            m++;
            it->shape[m] = it->shape[d];
            for (int k = 0; k < it->nops; k++) it->st[k][m] = it->st[k][d];
        }
    }
    it->nd = m + 1;
}

/* Advance the odometer over all dims but the innermost, moving each
 * operand's element offset off[k]. The offsets live outside ew_iter on
 * purpose: GCC 12.2 at -O2 (ipa-modref) miscompiles a caller's loop when
 * this function updates an array inside the struct it also reads strides
 * from, hoisting the offsets out of the loop as if they never changed. */
static void iter_next(const ew_iter *it, int64_t *idx, int64_t *off)
{
    for (int d = it->nd - 2; d >= 0; d--) {
        if (++idx[d] < it->shape[d]) {
            for (int k = 0; k < it->nops; k++) off[k] += it->st[k][d];
            return;
        }
        idx[d] = 0;
        for (int k = 0; k < it->nops; k++) off[k] -= it->st[k][d] * (it->shape[d] - 1);
    }
}

static int64_t iter_rows(const ew_iter *it)
{
    int64_t rows = 1;
    for (int d = 0; d < it->nd - 1; d++) rows *= it->shape[d];
    return rows;
}

/* ---- typed row loads and stores ---- */

static void load_row(double *dst, const kn_tensor *t, int64_t off, int64_t st, int64_t n)
{
    const char *base = t->storage->data;
    if (st == 0) { /* broadcast: one load, then a fill */
        double v = kn_load_f64(base + off * (int64_t)kn_dtype_size(t->dtype), t->dtype);
        for (int64_t i = 0; i < n; i++) dst[i] = v;
        return;
    }
    switch (t->dtype) {
    case KN_F32: {
        const float *p = (const float *)base + off;
        if (st == 1)
            for (int64_t i = 0; i < n; i++) dst[i] = p[i];
        else
            for (int64_t i = 0; i < n; i++) dst[i] = p[i * st];
        break;
    }
    case KN_F64: {
        const double *p = (const double *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i * st];
        break;
    }
    case KN_BF16: {
        const uint16_t *p = (const uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = kn_bf16_to_f32(p[i * st]);
        break;
    }
    case KN_F16: {
        const uint16_t *p = (const uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = kn_f16_to_f32(p[i * st]);
        break;
    }
    case KN_I32: {
        const int32_t *p = (const int32_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i * st];
        break;
    }
    case KN_I64: {
        const int64_t *p = (const int64_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = (double)p[i * st];
        break;
    }
    case KN_BOOL: {
        const uint8_t *p = (const uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i * st] ? 1.0 : 0.0;
        break;
    }
    default: memset(dst, 0, sizeof(double) * (size_t)n); break;
    }
}

static void store_row(const kn_tensor *t, int64_t off, int64_t st, const double *src, int64_t n)
{
    char *base = t->storage->data;
    switch (t->dtype) {
    case KN_F32: {
        float *p = (float *)base + off;
        if (st == 1)
            for (int64_t i = 0; i < n; i++) p[i] = (float)src[i];
        else
            for (int64_t i = 0; i < n; i++) p[i * st] = (float)src[i];
        break;
    }
    case KN_F64: {
        double *p = (double *)base + off;
        for (int64_t i = 0; i < n; i++) p[i * st] = src[i];
        break;
    }
    case KN_BF16: {
        uint16_t *p = (uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i * st] = kn_f32_to_bf16((float)src[i]);
        break;
    }
    case KN_F16: {
        uint16_t *p = (uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i * st] = kn_f32_to_f16((float)src[i]);
        break;
    }
    case KN_BOOL: { /* NaN is true, as kn_store_f64 and C */
        uint8_t *p = (uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i * st] = src[i] != 0.0;
        break;
    }
    default: { /* integers: kn_store_f64's truncation and saturation */
        size_t es = kn_dtype_size(t->dtype);
        for (int64_t i = 0; i < n; i++) kn_store_f64(base + (off + i * st) * (int64_t)es, t->dtype, src[i]);
        break;
    }
    }
}

/* The dtype operand k of the op is converted to before the op computes, as
 * PyTorch's kernels and the generated code (fusion casts operands to it):
 * the result dtype, except a comparison's (the promoted dtype of its
 * operands), the condition of where, the mask of masked_fill and the input
 * of cast and logical_not, which keep theirs. */
static kn_dtype operand_dtype(const kn_opcall *c, const kn_tensor *out, int k)
{
    kn_op_kind kind = kn_op_kind_of(c->op);
    if (kind == KN_K_COMPARE) return kn_dtype_promote(c->in[0]->dtype, c->in[1]->dtype);
    if (c->op == KN_OP_CAST || c->op == KN_OP_LOGICAL_NOT || (kind == KN_K_TERNARY && k == 0) ||
        (kind == KN_K_MASKED && k == 1))
        return c->in[k]->dtype;
    return out->dtype;
}

/* load_row, then each value as dtype `to` holds it, where converting to it
 * rounds: an i64 or i32 beyond 2^24, or an f64, next to an f32 becomes that
 * f32 (16777217 + 0.5f is 16777216 in f32, not 16777218), and anything next
 * to a half type becomes that half (2049 + f16 0.5 is 2048). An i64 converts
 * to f32 directly, not through double, which could round twice. */
static void load_row_as(double *dst, const kn_tensor *t, int64_t off, int64_t st, int64_t n,
                        kn_dtype to)
{
    kn_dtype from = t->dtype;
    load_row(dst, t, off, st, n);
    bool half_to = to == KN_BF16 || to == KN_F16;
    bool rounds = from != to && from != KN_BOOL &&
                  (half_to || (to == KN_F32 && from != KN_BF16 && from != KN_F16));
    if (!rounds) return;
    if (from == KN_I64) {
        const int64_t *p = (const int64_t *)t->storage->data + off;
        for (int64_t i = 0; i < n; i++) dst[i] = (float)p[i * st];
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = (float)dst[i];
    }
    if (to == KN_BF16)
        for (int64_t i = 0; i < n; i++) dst[i] = kn_bf16_to_f32(kn_f32_to_bf16((float)dst[i]));
    else if (to == KN_F16)
        for (int64_t i = 0; i < n; i++) dst[i] = kn_f16_to_f32(kn_f32_to_f16((float)dst[i]));
}

/* Exact integer rows for the integer path (bool loads as 0 or 1). */
static void load_irow(int64_t *dst, const kn_tensor *t, int64_t off, int64_t st, int64_t n)
{
    const char *base = t->storage->data;
    switch (t->dtype) {
    case KN_I32: {
        const int32_t *p = (const int32_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i * st];
        break;
    }
    case KN_I64: {
        const int64_t *p = (const int64_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i * st];
        break;
    }
    case KN_BOOL: {
        const uint8_t *p = (const uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i * st] != 0;
        break;
    }
    default: memset(dst, 0, sizeof(int64_t) * (size_t)n); break;
    }
}

/* i32 keeps the low 32 bits: an int32 sum that overflows wraps, as PyTorch. */
static void store_irow(const kn_tensor *t, int64_t off, int64_t st, const int64_t *src, int64_t n)
{
    char *base = t->storage->data;
    switch (t->dtype) {
    case KN_I32: {
        int32_t *p = (int32_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i * st] = (int32_t)(uint32_t)(uint64_t)src[i];
        break;
    }
    case KN_I64: {
        int64_t *p = (int64_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i * st] = src[i];
        break;
    }
    case KN_BOOL: {
        uint8_t *p = (uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i * st] = src[i] != 0;
        break;
    }
    default: break;
    }
}

/* A fill value for an integer or bool output dt: the value a tensor of dt
 * holds after kn_store_f64 (truncated toward zero, saturated at dt's range,
 * NaN 0 for integers and true for bool), as full() and the generated
 * kernels convert it. Saturating at i64's range and then keeping i32's low
 * 32 bits gave -1 for masked_fill(1e300) on an i32 tensor. */
static int64_t int_attr_value(double v, kn_dtype dt)
{
    unsigned char b[8];
    kn_store_f64(b, dt, v);
    switch (dt) {
    case KN_I32: { int32_t i; memcpy(&i, b, 4); return i; }
    case KN_I64: { int64_t i; memcpy(&i, b, 8); return i; }
    default: return b[0] != 0;
    }
}

/* ---- the drivers ---- */

/* The integer path's driver: run_expr's walk with int64_t buffers. */
static void run_int_expr(const kn_opcall *c, kn_tensor *out, int nin, ew_iter *it, int64_t *off)
{
    int64_t obuf[CHUNK], buf[3][CHUNK];
    static const int64_t zeros[CHUNK];
    const int64_t *arg[3] = {zeros, zeros, zeros};
    for (int k = 0; k < nin; k++) arg[k] = buf[k];
    iw_fn fn = iw_for(c->op);
    int64_t v = int_attr_value(c->a.value, out->dtype);
    int64_t inner = it->shape[it->nd - 1], rows = iter_rows(it);
    int64_t idx[KN_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < inner; j += CHUNK) {
            int64_t m = inner - j < CHUNK ? inner - j : CHUNK;
            for (int k = 0; k < nin; k++) {
                int64_t s = it->st[k + 1][it->nd - 1];
                load_irow(buf[k], c->in[k], off[k + 1] + j * s, s, m);
            }
            fn(m, obuf, arg[0], arg[1], arg[2], v);
            int64_t so = it->st[0][it->nd - 1];
            store_irow(out, off[0] + j * so, so, obuf, m);
        }
        iter_next(it, idx, off);
    }
}

/* out[...] = expr(in[0], in[1], in[2]) with broadcasting. */
static kn_status run_expr(const kn_opcall *c, kn_tensor *out, int nin)
{
    ew_iter it;
    it.nd = out->ndim;
    it.nops = 1 + nin;
    memcpy(it.shape, out->shape, sizeof it.shape);
    if (kn_tensor_numel(out) == 0) return KN_OK;
    int64_t off[MAX_OPS];
    for (int d = 0; d < it.nd; d++) it.st[0][d] = out->strides[d];
    off[0] = out->offset;
    for (int k = 0; k < nin; k++) iter_operand(&it, k + 1, c->in[k], off);
    iter_simplify(&it);
    if (int_path_ok(c, out, nin)) {
        run_int_expr(c, out, nin, &it, off);
        return KN_OK;
    }

    double obuf[CHUNK], buf[3][CHUNK];
    static const double zeros[CHUNK];
    const double *arg[3] = {zeros, zeros, zeros};
    for (int k = 0; k < nin; k++) arg[k] = buf[k];
    ew_fn fn = ew_table[c->op];
    int64_t inner = it.shape[it.nd - 1], rows = iter_rows(&it);
    int64_t idx[KN_MAX_DIMS] = {0};
    if (it.st[0][it.nd - 1] == 1 && f32_path_ok(c, out, nin)) {
        f32_fn f = f32_table[c->op];
        float *ob = out->storage->data;
        const float *ab = c->in[0]->storage->data;
        const float *bb = nin > 1 ? (const float *)c->in[1]->storage->data : ab;
        int64_t sa = it.st[1][it.nd - 1], sb = nin > 1 ? it.st[2][it.nd - 1] : sa;
        for (int64_t r = 0; r < rows; r++) {
            f(inner, ob + off[0], ab + off[1], sa, bb + off[nin > 1 ? 2 : 1], sb, c->a.value);
            iter_next(&it, idx, off);
        }
        return KN_OK;
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < inner; j += CHUNK) {
            int64_t m = inner - j < CHUNK ? inner - j : CHUNK;
            for (int k = 0; k < nin; k++) {
                int64_t s = it.st[k + 1][it.nd - 1];
                load_row_as(buf[k], c->in[k], off[k + 1] + j * s, s, m, operand_dtype(c, out, k));
            }
            fn(m, obuf, arg[0], arg[1], arg[2], c->a.value);
            int64_t so = it.st[0][it.nd - 1];
            store_row(out, off[0] + j * so, so, obuf, m);
        }
        iter_next(&it, idx, off);
    }
    return KN_OK;
}

/* Copy n elements of es bytes between strided rows, with typed loops so a
 * transpose does not call memcpy per element. */
static void copy_row(char *o, int64_t so, const char *p, int64_t si, int64_t n, int64_t es)
{
    if (so == 1 && si == 1) {
        memcpy(o, p, (size_t)(n * es));
        return;
    }
#define COPY_AS(T)                                                                  \
    do {                                                                            \
        T *to = (T *)(void *)o;                                                     \
        const T *from = (const T *)(const void *)p;                                 \
        for (int64_t j = 0; j < n; j++) to[j * so] = from[j * si];                  \
    } while (0)
    switch (es) {
    case 1: COPY_AS(uint8_t); break;
    case 2: COPY_AS(uint16_t); break;
    case 4: COPY_AS(uint32_t); break;
    case 8: COPY_AS(uint64_t); break;
    default:
        for (int64_t j = 0; j < n; j++) memcpy(o + j * so * es, p + j * si * es, (size_t)es);
    }
#undef COPY_AS
}

/* Copy the view `in` into `out` (same shape and dtype), byte-exact. */
static kn_status run_copy(const kn_tensor *in, kn_tensor *out)
{
    ew_iter it;
    it.nd = out->ndim;
    it.nops = 2;
    memcpy(it.shape, out->shape, sizeof it.shape);
    if (kn_tensor_numel(out) == 0) return KN_OK;
    int64_t off[MAX_OPS];
    for (int d = 0; d < it.nd; d++) it.st[0][d] = out->strides[d];
    off[0] = out->offset;
    iter_operand(&it, 1, in, off);
    iter_simplify(&it);

    int64_t es = (int64_t)kn_dtype_size(out->dtype);
    char *ob = out->storage->data;
    const char *ib = in->storage->data;
    int64_t inner = it.shape[it.nd - 1], rows = iter_rows(&it);
    int64_t so = it.st[0][it.nd - 1], si = it.st[1][it.nd - 1];
    int64_t idx[KN_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; r++) {
        char *o = ob + off[0] * es;
        const char *p = ib + off[1] * es;
        copy_row(o, so, p, si, inner, es);
        iter_next(&it, idx, off);
    }
    return KN_OK;
}

kn_status kn_cpu_elementwise(const kn_opcall *c)
{
    if ((unsigned)c->op >= KN_OP_COUNT || c->n_out < 1 || !c->out[0])
        return kn_error(KN_ERR_ARG, "cpu elementwise: bad call");
    kn_tensor *out = c->out[0];
    switch (kn_op_kind_of(c->op)) {
    case KN_K_COPY: return run_copy(c->in[0], out);
    case KN_K_UNARY:
        if (c->op == KN_OP_CAST && c->in[0]->dtype == out->dtype) return run_copy(c->in[0], out);
        return run_expr(c, out, 1);
    case KN_K_BINARY:
    case KN_K_COMPARE:
    case KN_K_MASKED: return run_expr(c, out, 2);
    case KN_K_TERNARY: return run_expr(c, out, 3);
    default:
        return kn_error(KN_ERR_UNSUPPORTED, "%s: not an elementwise op", kn_op_name(c->op));
    }
}
