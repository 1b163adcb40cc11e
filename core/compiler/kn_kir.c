/* kn_kir: builders, the text dump and the one source renderer of the kernel
 * IR (see kn_kir.h), for the render targets the backends own (kernels/cpu:
 * C compiled at run time for the CPU; kernels/cuda: CUDA C++ for NVRTC).
 * This file renders expressions; the function around a body (preludes,
 * parameters, stores, launch choices) is in kn_kir_kernel.c, and a ROW
 * kernel's body (its stages, the row held in registers) in kn_kir_row.c,
 * both using the expression helpers of kn_kir_internal.h.
 *
 * The renderer is shared and never asks which target it writes for: it
 * reads the target's descriptor (kn_render_target): its prelude (types,
 * KN_FN), the function's signature, how the body reaches its buffers, the
 * unroll pragma and the precision switches as data, and the loop nest (C:
 * nested loops; CUDA: a grid-stride loop over the flattened space, or a
 * block or warp per row) and the combining of a row's partial sums across
 * threads as overrides, which the target writes with kn_kir_target.h. Scalar expressions come from the op table
 * (kn_ops.def) as text: a small token rewrite turns its `a`, `b`, `c` into
 * the operand variables, `kn_exp` and friends into the function of the
 * compute type (expf for f32, exp for f64) and floating literals into f32
 * literals where the compute type is f32, so f32 math stays in f32.
 *
 * Precision choices (the tests hold them to the reference's tolerances):
 *  - f32, bf16 and f16 values compute in float, f64 in double, integers in
 *    int64, bool as 0/1 int.
 *  - Every op's result is brought back to its dtype right after the op, as
 *    the eager op stores it (put_fitted; docs/dtypes.md): bf16/f16 rounded,
 *    i32 wrapped (or saturated from a float), i64 wrapping, bool 0/1. Steps
 *    inside one op's decomposition (kn_kexpr.internal) are not results and
 *    stay in the math type.
 *  - Row sums of float values accumulate in double where the target asks
 *    (C: serial loops anyway, without -ffast-math the compiler cannot
 *    reassociate) and in float elsewhere (CUDA, where the tree reduction
 *    is already pairwise).
 *  - max / min reductions propagate NaN: once NaN, the accumulator stays NaN.
 */
#include "kn_kir.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_kir_internal.h"
#include "kn_kir_target.h"
#include "kn_strbuf.h"

/* ---- builders ---- */

void kn_kprogram_free(kn_kprogram *p)
{
    if (!p) return;
    free(p->kernels);
    p->kernels = NULL;
    p->n_kernels = 0;
}

kn_status kn_kernel_add_expr(kn_kernel *k, const kn_kexpr *e, int *out)
{
    if (k->n_exprs >= KN_KIR_MAX_EXPRS)
        return kn_error(KN_ERR_ARG, "kernel %s: more than %d expressions", k->name,
                        KN_KIR_MAX_EXPRS);
    k->exprs[k->n_exprs] = *e;
    if (out) *out = k->n_exprs;
    k->n_exprs++;
    return KN_OK;
}

kn_status kn_kernel_add_arg(kn_kernel *k, const kn_karg *a, int *out)
{
    if (k->n_args >= KN_KIR_MAX_ARGS)
        return kn_error(KN_ERR_ARG, "kernel %s: more than %d arguments", k->name,
                        KN_KIR_MAX_ARGS);
    k->args[k->n_args] = *a;
    if (out) *out = k->n_args;
    k->n_args++;
    return KN_OK;
}

/* ---- compute types ---- */

static ctype ctype_of(kn_dtype dt)
{
    switch (dt) {
    case KN_F64: return CT_F64;
    case KN_I32:
    case KN_I64: return CT_I64;
    case KN_BOOL: return CT_BOOL;
    default: return CT_F32;
    }
}

const char *kn_kir_ctype_name(ctype c)
{
    static const char *names[] = {"float", "double", "kn_i64", "int"};
    return names[c];
}

const char *kn_kir_storage_name(kn_dtype dt)
{
    switch (dt) {
    case KN_F32: return "float";
    case KN_F64: return "double";
    case KN_BF16:
    case KN_F16: return "kn_u16";
    case KN_I32: return "kn_i32";
    case KN_I64: return "kn_i64";
    default: return "kn_u8";
    }
}

/* A literal of compute type c for the number v. Integers saturate and NaN
 * becomes 0, as the reference's integer stores do. */
static void put_literal(kn_strbuf *s, ctype c, double v)
{
    if (c == CT_BOOL) {
        kn_strbuf_printf(s, "%d", v != 0.0);
        return;
    }
    if (c == CT_I64) {
        if (isnan(v)) v = 0;
        if (v <= -9223372036854775808.0) kn_strbuf_printf(s, "(-9223372036854775807LL - 1)");
        else if (v >= 9223372036854774784.0) kn_strbuf_printf(s, "9223372036854774784LL");
        else kn_strbuf_printf(s, "%lldLL", (long long)v);
        return;
    }
    if (isnan(v)) {
        kn_strbuf_printf(s, c == CT_F32 ? "NAN" : "((double)NAN)");
        return;
    }
    if (isinf(v)) {
        kn_strbuf_printf(s, "%s%s", v < 0 ? "-" : "", c == CT_F32 ? "INFINITY" : "((double)INFINITY)");
        return;
    }
    char num[64];
    snprintf(num, sizeof num, c == CT_F32 ? "%.9g" : "%.17g", c == CT_F32 ? (double)(float)v : v);
    bool has_point = strpbrk(num, ".e") != NULL;
    kn_strbuf_printf(s, "%s%s%s", num, has_point ? "" : ".0", c == CT_F32 ? "f" : "");
}

/* ---- the render context ---- */

void kn_kir_line(rctx *r, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    kn_strbuf_printf(r->s, "%*s%s\n", r->indent * 4, "", text);
}

void kn_kir_put_unroll(rctx *r)
{
    if (r->t->unroll_pragma && r->k->cfg.unroll > 0) kn_kir_line(r, "%s %d", r->t->unroll_pragma, r->k->cfg.unroll);
}

/* The type v<i> is rendered in: its dtype's compute type, except that a
 * decomposition's internal f32 step stays in double where the target
 * evaluates f32 math in double (the eager kernel keeps it in a double: a
 * log_softmax whose row sum was rounded to 1.0f gave log 0 where eager had
 * -1e-9, and an amax of 0 then turned into NaN downstream). */
ctype kn_kir_expr_ct(const rctx *r, int i)
{
    const kn_kexpr *e = &r->k->exprs[i];
    ctype c = ctype_of(e->dtype);
    if (e->internal && c == CT_F32 && r->t->f32_math_in_f64) return CT_F64;
    return c;
}

/* "v<i>" converted from its compute type to `to`. */
static void put_conv(kn_strbuf *s, ctype from, ctype to, const char *val)
{
    if (from == to) kn_strbuf_printf(s, "%s", val);
    else if (to == CT_BOOL) kn_strbuf_printf(s, "((%s) != 0)", val);
    else if (to == CT_I64 && (from == CT_F32 || from == CT_F64))
        kn_strbuf_printf(s, "kn_f2i((double)(%s))", val);
    else kn_strbuf_printf(s, "((%s)(%s))", kn_kir_ctype_name(to), val);
}

/* The math function an op-table helper (kn_exp, ...) names in compute type c. */
static const char *math_name(const char *helper, ctype c)
{
    static const char *const table[][3] = {
        /* helper    f32       f64 */
        {"kn_exp", "expf", "exp"},    {"kn_log", "logf", "log"},
        {"kn_tanh", "tanhf", "tanh"}, {"kn_erf", "erff", "erf"},
        {"kn_sqrt", "sqrtf", "sqrt"}, {"kn_abs", "fabsf", "fabs"},
        {"kn_pow", "powf", "pow"},    {"kn_floor", "floorf", "floor"},
        {"kn_ceil", "ceilf", "ceil"}, {"kn_rint", "rintf", "rint"},
        {"kn_sin", "sinf", "sin"},    {"kn_cos", "cosf", "cos"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i][0], helper) != 0) continue;
        if (c == CT_F32) return table[i][1];
        if (c == CT_F64) return table[i][2];
        /* integers: exact abs, the rest in double through prelude wrappers
         * (shape inference gives float outputs for them; this is a guard). */
        if (strcmp(helper, "kn_abs") == 0) return "kn_iabs";
        if (strcmp(helper, "kn_pow") == 0) return "kn_ipow";
        return table[i][2];
    }
    return NULL;
}

/* The op table's formula text for each op. */
static const char *const op_formula[KN_OP_COUNT] = {
#define KN_OP(id, name, kind, nin, expr) [KN_OP_##id] = #expr,
#include "kn_ops.def"
#undef KN_OP
};

/* Rewrite formula text for compute type c with operands ops[0..2] (already
 * converted text) and the fill value v. */
static kn_status put_formula(rctx *r, const char *f, ctype c, char ops[3][96], double v)
{
    const char *p = f;
    while (*p) {
        if (isalpha((unsigned char)*p) || *p == '_') {
            const char *q = p;
            while (isalnum((unsigned char)*q) || *q == '_') q++;
            char id[48];
            size_t n = (size_t)(q - p) < sizeof id - 1 ? (size_t)(q - p) : sizeof id - 1;
            memcpy(id, p, n);
            id[n] = 0;
            if (n == 1 && (id[0] == 'a' || id[0] == 'b' || id[0] == 'c')) {
                kn_strbuf_printf(r->s, "%s", ops[id[0] - 'a']);
            } else if (strcmp(id, "kn_attr_value") == 0) {
                kn_strbuf_printf(r->s, "(");
                put_literal(r->s, c, v);
                kn_strbuf_printf(r->s, ")");
            } else if (strncmp(id, "kn_", 3) == 0) {
                const char *m = math_name(id, c);
                if (!m)
                    return kn_error(KN_ERR_UNSUPPORTED, "kernel %s: no rendering for %s",
                                    r->k->name, id);
                kn_strbuf_printf(r->s, "%s", m);
            } else {
                kn_strbuf_printf(r->s, "%s", id);
            }
            p = q;
        } else if (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1]))) {
            const char *q = p;
            bool is_float = false;
            while (isalnum((unsigned char)*q) || *q == '.' ||
                   ((*q == '+' || *q == '-') && (q[-1] == 'e' || q[-1] == 'E'))) {
                if (*q == '.' || *q == 'e' || *q == 'E') is_float = true;
                q++;
            }
            kn_strbuf_printf(r->s, "%.*s%s", (int)(q - p), p, is_float && c == CT_F32 ? "f" : "");
            p = q;
        } else {
            kn_strbuf_put(r->s, p, 1);
            p++;
        }
    }
    return KN_OK;
}

/* The text of argument j's element at the loop indices i<d>: "p<j>[offset]"
 * where offset sums i<d> * stride over dims d < upto (strides are baked
 * constants), or its register copy in the lane and vector bodies. */
/* Where argument j's element lives in a vector held in registers (the
 * register copy of a row, or of a pointwise thread's vectors): that
 * vector's text and the element's index in it. */
static bool vec_reg_elem(const rctx *r, int j, int upto, char vec[32], char idx[16])
{
    const kn_karg *a = &r->k->args[j];
    /* a 0-d kernel (one element) has no inner dim: no vectors, no lanes */
    int64_t inner = r->k->ndim > 0 ? a->strides[r->k->ndim - 1] : 0;
    if (inner != 1) return false;
    if (r->in_regs && r->regs_v > 1 && (!a->is_output || upto == r->k->ndim)) {
        /* the lane's copy of its elements, in vectors: loaded (c) or to store (d) */
        snprintf(vec, 32, "%c%d[u / %d]", a->is_output ? 'd' : 'c', j, r->regs_v);
        snprintf(idx, 16, "u %% %d", r->regs_v);
        return true;
    }
    if (r->vec_body && !(r->in_regs && !a->is_output)) { /* the register copy of this thread's vector */
        if (a->is_output) snprintf(vec, 32, "s%d", j);
        else snprintf(vec, 32, "l%d[g]", j);
        snprintf(idx, 16, "e");
        return true;
    }
    return false;
}

void kn_kir_put_elem(rctx *r, int j, int upto)
{
    const kn_karg *a = &r->k->args[j];
    int64_t inner = r->k->ndim > 0 ? a->strides[r->k->ndim - 1] : 0;
    char vec[32], idx[16];
    if (vec_reg_elem(r, j, upto, vec, idx)) {
        kn_strbuf_printf(r->s, "%s.x[%s]", vec, idx);
        return;
    }
    if (r->in_regs && !a->is_output && inner != 0) { /* the lane's copy of its elements */
        kn_strbuf_printf(r->s, "c%d[u]", j);
        return;
    }
    kn_strbuf_printf(r->s, "p%d[0", j);
    for (int d = 0; d < upto; d++) {
        if (a->strides[d] == 0) continue;
        if (a->strides[d] == 1) kn_strbuf_printf(r->s, " + i%d", d);
        else kn_strbuf_printf(r->s, " + i%d * %lldLL", d, (long long)a->strides[d]);
    }
    if (a->gather_by > 0) { /* the row its index names, read from memory where the position is */
        bool regs = r->in_regs;
        r->in_regs = false;
        kn_strbuf_printf(r->s, " + %s((kn_i64)", a->gather_from_end ? "kn_gather_row_from_end" : "kn_gather_row");
        kn_kir_put_elem(r, a->gather_by - 1, upto);
        kn_strbuf_printf(r->s, ", %lldLL) * %lldLL", (long long)a->gather_size, (long long)a->gather_stride);
        r->in_regs = regs;
    }
    kn_strbuf_printf(r->s, "]");
}

/* The store of a whole vector `value` (V elements) of output j at the
 * loop indices: the target's 16-byte store where it has one and the
 * vector is 16 bytes, else an assignment through the vector type. */
void kn_kir_put_vec_store(rctx *r, int j, int V, const char *value)
{
    bool wide = r->t->store16 && (size_t)V * kn_dtype_size(r->k->args[j].dtype) == 16;
    kn_strbuf_printf(r->s, "%*s", r->indent * 4, "");
    if (wide) kn_strbuf_printf(r->s, "%s(&", r->t->store16);
    else kn_strbuf_printf(r->s, "*(v%d_t *)&", j);
    kn_kir_put_elem(r, j, r->k->ndim);
    if (wide) kn_strbuf_printf(r->s, ", %s);\n", value);
    else kn_strbuf_printf(r->s, " = %s;\n", value);
}

/* A load of argument j (at dims < upto) as a value of compute type `to`. */
static void put_load(rctx *r, int j, int upto, ctype to)
{
    kn_dtype dt = r->k->args[j].dtype;
    kn_strbuf tmp = {0};
    kn_strbuf *keep = r->s;
    r->s = &tmp;
    char vec[32], idx[16];
    if (dt == KN_BF16 && r->t->ld_bf16_in_vec && vec_reg_elem(r, j, upto, vec, idx))
        kn_strbuf_printf(r->s, "%s(%s, %s)", r->t->ld_bf16_in_vec, vec, idx);
    else {
        kn_strbuf_printf(r->s, dt == KN_BF16 ? "kn_ld_bf16(" : dt == KN_F16 ? "kn_ld_f16(" : "(");
        kn_kir_put_elem(r, j, upto);
        kn_strbuf_printf(r->s, dt == KN_BOOL ? " != 0)" : ")");
    }
    r->s = keep;
    if (tmp.oom || !tmp.p) r->s->oom = true;
    else put_conv(r->s, ctype_of(dt), to, tmp.p);
    free(tmp.p);
}

/* What the marked expressions read, but not through the expressions marked in stop (their values
 * are at hand: kept by an earlier loop of a row in registers). */
void kn_kir_mark_deps_stop(const kn_kernel *k, bool *need, const bool *stop)
{
    for (int i = k->n_exprs - 1; i >= 0; i--) {
        if (!need[i] || (stop && stop[i])) continue;
        const kn_kexpr *e = &k->exprs[i];
        if (e->kind != KN_KX_OP) continue;
        if (e->a >= 0) need[e->a] = true;
        if (e->b >= 0) need[e->b] = true;
        if (e->c >= 0) need[e->c] = true;
    }
}

/* The compute type each operand of op expression i is evaluated in. */
static void operand_types(const rctx *r, int i, ctype ct[3])
{
    const kn_kexpr *e = &r->k->exprs[i];
    ctype self = kn_kir_expr_ct(r, i);
    kn_op_kind kind = kn_op_kind_of((kn_op)e->op);
    ct[0] = ct[1] = ct[2] = self;
    if (kind == KN_K_COMPARE) {
        ct[0] = ct[1] = ctype_of(kn_dtype_promote(r->k->exprs[e->a].dtype, r->k->exprs[e->b].dtype));
    } else if (e->op == KN_OP_CAST || e->op == KN_OP_LOGICAL_NOT) {
        ct[0] = kn_kir_expr_ct(r, e->a);
    } else if (kind == KN_K_TERNARY) {
        ct[0] = kn_kir_expr_ct(r, e->a); /* the condition keeps its type */
    } else if (kind == KN_K_MASKED) {
        ct[1] = kn_kir_expr_ct(r, e->b); /* the mask */
    }
}

/* MASKED_FILL's fill value as the eager op converts it to an integer
 * output: truncated, saturated at the dtype's range, NaN as 0 (kn_store_f64's
 * rule; put_literal saturates at i64's). */
static double fill_value(const kn_kexpr *e)
{
    double v = e->value;
    if (e->op != KN_OP_MASKED_FILL || e->dtype != KN_I32 || v != v) return v;
    return v < -2147483648.0 ? -2147483648.0 : v > 2147483647.0 ? 2147483647.0 : v;
}

/* Whether put_fitted rounds op e's value to its half dtype: an op's result
 * (not a step inside a decomposition) of dtype bf16 or f16. */
static bool rounds_to_half(const kn_kexpr *e)
{
    return !e->internal && (e->dtype == KN_BF16 || e->dtype == KN_F16);
}

/* The value `body`, computed in type `from`, as a value of op expression e's
 * dtype in compute type `to`. This is the one place the dtype semantics
 * live: every op's result is its dtype's value, as the eager op stores it
 * into a tensor of that dtype (and as PyTorch):
 *  - bf16 / f16: rounded to nearest even, overflow to inf, here and not only
 *    at the store (f16 `x * 1e5 / 1e5` is inf, as eager);
 *  - i32: integer arithmetic keeps the low 32 bits (wraps), a float converted
 *    to i32 saturates at i32's range (kn_store_f64's rule), NaN is 0;
 *  - i64: wraps (kn_iadd & co.), a float saturates (kn_f2i);
 *  - bool: 0 or 1 (bool + bool is `or`, as eager's int path and PyTorch).
 * f32 and f64 results need nothing: the compute type is the dtype (on the
 * CPU an f32 formula computed in double was rounded to float already).
 * Internal steps of a decomposition are no op's result and stay as they
 * are (see kn_kexpr.internal). */
static void put_fitted(rctx *r, const kn_kexpr *e, ctype from, ctype to, const char *body)
{
    /* ops that cannot leave an integer or bool range when their operands are
     * in it (constants are: scripting refuses an integer that does not fit
     * an i32 tensor, and fill values are saturated above) */
    kn_op_kind kind = kn_op_kind_of((kn_op)e->op);
    bool closed = kind == KN_K_COMPARE || kind == KN_K_TERNARY || kind == KN_K_MASKED ||
                  e->op == KN_OP_LOGICAL_NOT || e->op == KN_OP_MAXIMUM || e->op == KN_OP_MINIMUM ||
                  e->op == KN_OP_RELU || (e->op == KN_OP_CAST && from == CT_BOOL);
    bool fit = !e->internal;
    bool fit_int = fit && !closed;
    if (rounds_to_half(e)) {
        kn_strbuf_printf(r->s, "%s(", e->dtype == KN_BF16 ? "kn_round_bf16" : "kn_round_f16");
        put_conv(r->s, from, CT_F32, body);
        kn_strbuf_printf(r->s, ")");
    } else if (fit && e->dtype == KN_I32 && (from == CT_F32 || from == CT_F64)) {
        kn_strbuf_printf(r->s, "kn_sat_i32(");
        put_conv(r->s, from, CT_I64, body);
        kn_strbuf_printf(r->s, ")");
    } else if (fit_int && e->dtype == KN_I32) {
        kn_strbuf_printf(r->s, "kn_wrap_i32(");
        put_conv(r->s, from, CT_I64, body);
        kn_strbuf_printf(r->s, ")");
    } else if (fit_int && e->dtype == KN_BOOL && from == CT_BOOL) {
        kn_strbuf_printf(r->s, "((%s) != 0)", body);
    } else {
        put_conv(r->s, from, to, body);
    }
}

/* Expression i as the target's pair op, where it has one and i is a
 * bf16/f16 add, sub or mul of two of the vector body's loads in its own
 * dtype (each vector's elements e and e ^ 1 in one instruction, the value
 * its rounding gives; see the CUDA prelude). False: render it as usual. */
static bool put_pair_op(rctx *r, int i)
{
    const kn_kexpr *e = &r->k->exprs[i];
    /* the vector body's vectors hold an even number of elements (2, 4, 8 or
     * 16), so element e's neighbour e ^ 1 is in the same vector */
    if (!r->t->pair_op || !r->vec_body || r->in_regs || e->internal) return false;
    if ((e->dtype != KN_BF16 && e->dtype != KN_F16) || kn_kir_expr_ct(r, i) != CT_F32) return false;
    const char *op = e->op == KN_OP_ADD ? "add" : e->op == KN_OP_SUB ? "sub" : e->op == KN_OP_MUL ? "mul" : NULL;
    if (!op) return false;
    int bufs[2], opnd[2] = {e->a, e->b};
    for (int j = 0; j < 2; j++) {
        if (opnd[j] < 0) return false;
        const kn_kexpr *x = &r->k->exprs[opnd[j]];
        if (x->kind != KN_KX_LOAD) return false;
        const kn_karg *a = &r->k->args[x->buf];
        /* kn_kir_put_elem's vector register copy: an input, contiguous */
        if (a->dtype != e->dtype || a->is_output || a->strides[r->k->ndim - 1] != 1) return false;
        bufs[j] = x->buf;
    }
    kn_strbuf_printf(r->s, "%s%s_%s(l%d[g].x, l%d[g].x, e)", r->t->pair_op, op, kn_dtype_name(e->dtype), bufs[0],
                     bufs[1]);
    return true;
}

/* `const T v<i> = ...;` for one expression; `upto` dims index loads. */
/* 2 or 3 when expression e is that constant (a pow's exponent), else 0. */
static int small_int_exponent(const rctx *r, int e)
{
    if (e < 0) return 0;
    const kn_kexpr *x = &r->k->exprs[e];
    if (x->kind != KN_KX_CONST) return 0;
    return x->value == 2.0 ? 2 : x->value == 3.0 ? 3 : 0;
}

static kn_status render_expr(rctx *r, int i, int upto)
{
    const kn_kexpr *e = &r->k->exprs[i];
    ctype c = kn_kir_expr_ct(r, i);
    kn_strbuf_printf(r->s, "%*sconst %s v%d = ", r->indent * 4, "", kn_kir_ctype_name(c), i);
    switch (e->kind) {
    case KN_KX_LOAD: put_load(r, e->buf, upto, c); break;
    case KN_KX_CONST: put_literal(r->s, c, e->value); break;
    case KN_KX_ACC: {
        char v[16];
        snprintf(v, sizeof v, "acc%d", e->acc);
        put_conv(r->s, kn_kir_expr_ct(r, r->k->stages[e->acc].expr), c, v);
        break;
    }
    case KN_KX_INDEX: {
        char v[32];
        /* the vector path's i<last> is its chunk's first element */
        if (r->vec_body && e->dim == r->k->ndim - 1) snprintf(v, sizeof v, "(i%d + e)", e->dim);
        else snprintf(v, sizeof v, "i%d", e->dim);
        put_conv(r->s, CT_I64, c, v);
        break;
    }
    case KN_KX_OP: {
        if (put_pair_op(r, i)) break;
        ctype oct[3];
        operand_types(r, i, oct);
        char ops[3][96] = {"0", "0", "0"};
        int opnd[3] = {e->a, e->b, e->c};
        for (int j = 0; j < 3; j++) {
            if (opnd[j] < 0) continue;
            char v[16];
            snprintf(v, sizeof v, "v%d", opnd[j]);
            kn_strbuf tmp = {0};
            put_conv(&tmp, kn_kir_expr_ct(r, opnd[j]), oct[j], v);
            if (!tmp.p) return kn_error(KN_ERR_OOM, "kernel %s: out of memory", r->k->name);
            snprintf(ops[j], sizeof ops[j], "%s", tmp.p);
            free(tmp.p);
        }
        ctype fc = oct[0]; /* the type the formula computes in */
        if (kn_op_kind_of((kn_op)e->op) == KN_K_TERNARY) fc = oct[1];
        bool int_div = fc == CT_I64 || fc == CT_BOOL;
        /* Where the target asks (the CPU), an f32 formula is evaluated in
         * double and rounded once, as the reference does: +, -, *, / and
         * sqrt round the same either way, and exp, erf, tanh, pow then agree
         * with the reference to the last bit (a float expf can differ, and
         * 0/underflow turns that into NaN against a finite reference). */
        ctype eval = fc;
        if (r->t->f32_math_in_f64 && fc == CT_F32 && kn_op_kind_of((kn_op)e->op) != KN_K_COMPARE &&
            e->op != KN_OP_LOGICAL_NOT && e->op != KN_OP_CAST) {
            eval = CT_F64;
            for (int j = 0; j < 3; j++) {
                if (opnd[j] < 0 || oct[j] != CT_F32) continue;
                char w[96];
                snprintf(w, sizeof w, "((double)%.80s)", ops[j]);
                snprintf(ops[j], sizeof ops[j], "%s", w);
            }
        }
        kn_strbuf body = {0};
        kn_strbuf *keep = r->s;
        r->s = &body;
        kn_status st = KN_OK;
        const char *wrapping = fc != CT_I64 ? NULL : e->op == KN_OP_ADD ? "kn_iadd"
                             : e->op == KN_OP_SUB ? "kn_isub" : e->op == KN_OP_MUL ? "kn_imul"
                             : e->op == KN_OP_NEG ? "kn_ineg" : NULL;
        if (int_div && e->op == KN_OP_DIV) kn_strbuf_printf(r->s, "kn_idiv(%s, %s)", ops[0], ops[1]);
        else if (wrapping) /* two's complement, defined in C and CUDA C++ alike */
            kn_strbuf_printf(r->s, "%s(%s%s%s)", wrapping, ops[0], e->op == KN_OP_NEG ? "" : ", ",
                             e->op == KN_OP_NEG ? "" : ops[1]);
        else if (e->op == KN_OP_GELU && r->t->half_gelu && fc == CT_F32 && (e->dtype == KN_BF16 || e->dtype == KN_F16))
            kn_strbuf_printf(r->s, "%s%s(%s)", r->t->half_gelu, kn_dtype_name(e->dtype), ops[0]);
        else if (e->op == KN_OP_POW && eval == CT_F32 && small_int_exponent(r, opnd[1]))
            /* x^2, x^3 as products, as PyTorch computes them (GELU-tanh's
             * x^3: powf's general path made GPT-2's GELU kernel 15 us at
             * 17% of its roofline); a target that evaluates f32 in double
             * keeps pow, to agree with the reference to the last bit */
            kn_strbuf_printf(r->s, small_int_exponent(r, opnd[1]) == 2 ? "(%s * %s)" : "(%s * %s * %s)", ops[0],
                             ops[0], ops[0]);
        else if (e->op == KN_OP_RSQRT && r->t->rsqrt_f32 && eval == CT_F32)
            kn_strbuf_printf(r->s, "%s(%s)", r->t->rsqrt_f32, ops[0]);
        else st = put_formula(r, op_formula[e->op], eval, ops, fill_value(e));
        r->s = keep;
        if (st != KN_OK || !body.p) {
            free(body.p);
            return st != KN_OK ? st : kn_error(KN_ERR_OOM, "kernel %s: out of memory", r->k->name);
        }
        if (eval != fc) { /* round the double result to f32 once, here */
            kn_strbuf rounded = {0};
            kn_strbuf_printf(&rounded, "((float)(%s))", body.p);
            free(body.p);
            body = rounded;
            if (!body.p) return kn_error(KN_ERR_OOM, "kernel %s: out of memory", r->k->name);
        }
        kn_op_kind kind = kn_op_kind_of((kn_op)e->op);
        ctype rt = kind == KN_K_COMPARE || e->op == KN_OP_LOGICAL_NOT ? CT_BOOL : fc;
        put_fitted(r, e, rt, c, body.p);
        free(body.p);
        break;
    }
    }
    kn_strbuf_printf(r->s, ";\n");
    return KN_OK;
}

/* Render every marked expression in order. */
kn_status kn_kir_render_needed(rctx *r, const bool *need, int upto)
{
    for (int i = 0; i < r->k->n_exprs; i++) {
        if (!need[i]) continue;
        if (r->in_regs && r->folded) {
            if (r->fold_inner[i]) continue; /* read by the folded ops alone */
            if (i == r->fold_expr) { /* its value, from the registers it replaced */
                kn_strbuf_printf(r->s, "%*sconst %s v%d = ", r->indent * 4, "", kn_kir_ctype_name(kn_kir_expr_ct(r, i)), i);
                put_load(r, r->fold_arg, upto, kn_kir_expr_ct(r, i));
                kn_strbuf_printf(r->s, ";\n");
                continue;
            }
        }
        if (r->in_regs && r->kept_avail && r->kept_avail[i]) {
            const char *t = kn_kir_ctype_name(kn_kir_expr_ct(r, i));
            kn_kir_line(r, "const %s v%d = x%d[u];", t, i, i);
            continue;
        }
        KN_TRY(render_expr(r, i, upto));
        if (r->in_regs && r->kept_now && r->kept_now[i]) kn_kir_line(r, "x%d[u] = v%d;", i, i);
    }
    return KN_OK;
}

/* Whether v<e> is a float that holds a bf16 value exactly: a bf16 load, or
 * an op's bf16 result (put_fitted rounds every one, NaN included, to a
 * bf16 value). Accumulators and internal steps are not rounded. */
static bool holds_bf16_exactly(const rctx *r, int e)
{
    const kn_kexpr *x = &r->k->exprs[e];
    if (x->dtype != KN_BF16 || kn_kir_expr_ct(r, e) != CT_F32) return false;
    if (x->kind == KN_KX_LOAD) return r->k->args[x->buf].dtype == KN_BF16;
    return x->kind == KN_KX_OP && rounds_to_half(x);
}

/* The store of expression e into argument j (element at dims < upto). */
void kn_kir_render_store(rctx *r, int j, int e, int upto)
{
    kn_dtype dt = r->k->args[j].dtype;
    char v[16];
    snprintf(v, sizeof v, "v%d", e);
    kn_strbuf_printf(r->s, "%*s", r->indent * 4, "");
    kn_kir_put_elem(r, j, upto);
    kn_strbuf_printf(r->s, " = ");
    ctype from = kn_kir_expr_ct(r, e);
    switch (dt) {
    case KN_BF16:
        if (holds_bf16_exactly(r, e)) { /* rounded already: its upper half is the value */
            kn_strbuf_printf(r->s, "kn_bits_bf16(%s)", v);
            break;
        }
        /* fall through */
    case KN_F16:
        kn_strbuf_printf(r->s, "%s(", dt == KN_BF16 ? "kn_st_bf16" : "kn_st_f16");
        put_conv(r->s, from, CT_F32, v);
        kn_strbuf_printf(r->s, ")");
        break;
    case KN_I32:
        /* integer arithmetic wraps to the low 32 bits (as PyTorch's int32 and
         * the CPU reference); a float converted to i32 saturates */
        if (from == CT_I64 || from == CT_BOOL) {
            kn_strbuf_printf(r->s, "(kn_i32)");
            put_conv(r->s, from, CT_I64, v);
            break;
        }
        kn_strbuf_printf(r->s, "kn_sat_i32(");
        put_conv(r->s, from, CT_I64, v);
        kn_strbuf_printf(r->s, ")");
        break;
    case KN_BOOL:
        kn_strbuf_printf(r->s, "(kn_u8)");
        put_conv(r->s, from, CT_BOOL, v);
        break;
    default:
        put_conv(r->s, from, ctype_of(dt), v);
        break;
    }
    kn_strbuf_printf(r->s, ";\n");
}

/* ---- dump ---- */

static const char *kind_name(kn_kernel_kind k)
{
    static const char *names[] = {"pointwise", "row", "library", "fallback"};
    return (unsigned)k < 4 ? names[k] : "?";
}

static void dump_ints(kn_strbuf *s, int n, const int64_t *v)
{
    kn_strbuf_printf(s, "{");
    for (int i = 0; i < n; i++) kn_strbuf_printf(s, "%s%lld", i ? "," : "", (long long)v[i]);
    kn_strbuf_printf(s, "}");
}

static void dump_expr(kn_strbuf *s, const kn_kexpr *e)
{
    switch (e->kind) {
    case KN_KX_LOAD: kn_strbuf_printf(s, "load arg%d", e->buf); break;
    case KN_KX_CONST: kn_strbuf_printf(s, "const %.17g", e->value); break;
    case KN_KX_ACC: kn_strbuf_printf(s, "acc%d", e->acc); break;
    case KN_KX_INDEX: kn_strbuf_printf(s, "index dim%d", e->dim); break;
    case KN_KX_OP: {
        const char *name = (unsigned)e->op < KN_OP_COUNT ? kn_op_name((kn_op)e->op) : "?";
        kn_strbuf_printf(s, "%s(", name);
        int opnd[3] = {e->a, e->b, e->c};
        bool first = true;
        for (int j = 0; j < 3; j++) {
            if (opnd[j] < 0) continue;
            kn_strbuf_printf(s, "%se%d", first ? "" : ", ", opnd[j]);
            first = false;
        }
        if (e->op == KN_OP_MASKED_FILL) kn_strbuf_printf(s, ", value=%.17g", e->value);
        kn_strbuf_printf(s, ")");
        break;
    }
    default: kn_strbuf_printf(s, "?"); break;
    }
    kn_strbuf_printf(s, " : %s\n", kn_dtype_name(e->dtype));
}

kn_status kn_kernel_dump(const kn_kernel *k, char **text)
{
    kn_strbuf s = {0};
    kn_strbuf_printf(&s, "kernel %s: %s, shape ", k->name, kind_name(k->kind));
    dump_ints(&s, k->ndim, k->shape);
    kn_strbuf_printf(&s, "\n");
    if (k->kind == KN_KERNEL_LIBRARY || k->kind == KN_KERNEL_FALLBACK)
        kn_strbuf_printf(&s, "  runs node %d\n", k->lib_node);
    for (int j = 0; j < k->n_args; j++) {
        const kn_karg *a = &k->args[j];
        kn_strbuf_printf(&s, "  arg%d: %s %s node %d.%d offset %lld strides ", j, kn_dtype_name(a->dtype),
                  a->is_output ? "out" : "in ", a->node, a->out, (long long)a->offset);
        dump_ints(&s, k->ndim, a->strides);
        kn_strbuf_printf(&s, "\n");
    }
    for (int i = 0; i < k->n_exprs; i++) {
        kn_strbuf_printf(&s, "  e%d = ", i);
        dump_expr(&s, &k->exprs[i]);
    }
    for (int i = 0; i < k->n_stages; i++) {
        const kn_kstage *st = &k->stages[i];
        kn_strbuf_printf(&s, "  stage%d = %s over the row of e%d\n", i,
                  (unsigned)st->op < KN_OP_COUNT ? kn_op_name((kn_op)st->op) : "?", st->expr);
    }
    for (int i = 0; i < k->n_stores; i++) {
        const kn_kstore *st = &k->stores[i];
        kn_strbuf_printf(&s, "  store arg%d = e%d%s\n", st->arg, st->expr, st->per_row ? " (per row)" : "");
    }
    if (k->n_nodes) {
        kn_strbuf_printf(&s, "  nodes:");
        for (int i = 0; i < k->n_nodes; i++) kn_strbuf_printf(&s, " %d", k->nodes[i]);
        kn_strbuf_printf(&s, "\n");
    }
    return kn_strbuf_finish(&s, text, k->name);
}
