/* kn_kir_kernel: a kernel's whole function around the body the target
 * writes: the preludes (types, the half conversions, wrapping integer
 * math), the check of the IR, the parameters, the stores of a POINTWISE
 * element, and the choices a kernel's launch is made of (vector width,
 * elements a thread, a ROW kernel's rows in registers or a warp each, the
 * grid and block). The expressions the body renders are kn_kir.c's (see
 * its header for the precision rules), shared through kn_kir_internal.h. */
#include "kn_kir.h"

#include <ctype.h>
#include <stdlib.h>

#include "kn_kir_internal.h"
#include "kn_kir_target.h"
#include "kn_strbuf.h"

/* ---- checking ---- */

/* Check the expressions, stages and stores reference what exists. */
static kn_status kernel_check(const kn_kernel *k)
{
    const char *n = k->name;
    if (!n[0] || isdigit((unsigned char)n[0])) return kn_error(KN_ERR_ARG, "kernel '%s': bad name", n);
    for (const char *p = n; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_')
            return kn_error(KN_ERR_ARG, "kernel '%s': name is not a C identifier", n);
    if (k->ndim < 0 || k->ndim > KN_MAX_DIMS || k->n_args > KN_KIR_MAX_ARGS ||
        k->n_exprs > KN_KIR_MAX_EXPRS || k->n_stages > KN_KIR_MAX_STAGES ||
        k->n_stores > KN_KIR_MAX_STORES)
        return kn_error(KN_ERR_ARG, "kernel %s: counts out of range", n);
    if (k->kind == KN_KERNEL_ROW && k->ndim < 1)
        return kn_error(KN_ERR_ARG, "kernel %s: a row kernel needs at least one dim", n);
    for (int i = 0; i < k->n_exprs; i++) {
        const kn_kexpr *e = &k->exprs[i];
        if ((unsigned)e->dtype >= KN_DTYPE_COUNT)
            return kn_error(KN_ERR_ARG, "kernel %s: e%d has a bad dtype", n, i);
        switch (e->kind) {
        case KN_KX_LOAD:
            if (e->buf < 0 || e->buf >= k->n_args)
                return kn_error(KN_ERR_ARG, "kernel %s: e%d loads arg %d of %d", n, i, e->buf, k->n_args);
            break;
        case KN_KX_ACC:
            if (k->kind != KN_KERNEL_ROW || e->acc < 0 || e->acc >= k->n_stages)
                return kn_error(KN_ERR_ARG, "kernel %s: e%d reads stage %d of %d", n, i, e->acc, k->n_stages);
            break;
        case KN_KX_INDEX:
            if (e->dim < 0 || e->dim >= k->ndim)
                return kn_error(KN_ERR_ARG, "kernel %s: e%d indexes dim %d of %d", n, i, e->dim, k->ndim);
            break;
        case KN_KX_CONST: break;
        case KN_KX_OP: {
            if (e->op < 0 || e->op >= KN_OP_COUNT)
                return kn_error(KN_ERR_ARG, "kernel %s: e%d has a bad op %d", n, i, e->op);
            kn_op_kind ok = kn_op_kind_of((kn_op)e->op);
            int need = ok == KN_K_UNARY ? 1 : ok == KN_K_TERNARY ? 3
                     : (ok == KN_K_BINARY || ok == KN_K_COMPARE || ok == KN_K_MASKED) ? 2 : 0;
            if (!need)
                return kn_error(KN_ERR_UNSUPPORTED, "kernel %s: e%d: %s is not elementwise", n, i,
                                kn_op_name((kn_op)e->op));
            int opnd[3] = {e->a, e->b, e->c};
            for (int j = 0; j < need; j++)
                if (opnd[j] < 0 || opnd[j] >= i)
                    return kn_error(KN_ERR_ARG, "kernel %s: e%d (%s) operand %d is e%d", n, i,
                                    kn_op_name((kn_op)e->op), j, opnd[j]);
            break;
        }
        default: return kn_error(KN_ERR_ARG, "kernel %s: e%d has a bad kind", n, i);
        }
    }
    for (int j = 0; j < k->n_args; j++) {
        const kn_karg *a = &k->args[j];
        if (a->gather_by == 0) continue;
        const kn_karg *ix = a->gather_by > 0 && a->gather_by <= k->n_args ? &k->args[a->gather_by - 1] : NULL;
        if (!ix || ix == a || ix->is_output || a->is_output || ix->gather_by || a->gather_size < 1 ||
            (ix->dtype != KN_I64 && ix->dtype != KN_I32) ||
            (k->kind == KN_KERNEL_ROW && ix->strides[k->ndim - 1] != 0))
            return kn_error(KN_ERR_ARG, "kernel %s: arg %d is gathered by a bad index argument", n, j);
    }
    for (int s = 0; s < k->n_stages; s++) {
        const kn_kstage *st = &k->stages[s];
        if (st->op != KN_OP_SUM && st->op != KN_OP_AMAX && st->op != KN_OP_AMIN)
            return kn_error(KN_ERR_ARG, "kernel %s: stage %d reduces with op %d", n, s, st->op);
        if (st->expr < 0 || st->expr >= k->n_exprs)
            return kn_error(KN_ERR_ARG, "kernel %s: stage %d reduces e%d", n, s, st->expr);
    }
    for (int s = 0; s < k->n_stores; s++) {
        const kn_kstore *st = &k->stores[s];
        if (st->arg < 0 || st->arg >= k->n_args || st->expr < 0 || st->expr >= k->n_exprs)
            return kn_error(KN_ERR_ARG, "kernel %s: store %d (arg %d, e%d) out of range", n, s,
                            st->arg, st->expr);
        if (!k->args[st->arg].is_output)
            return kn_error(KN_ERR_ARG, "kernel %s: store %d writes arg %d, which is not an output",
                            n, s, st->arg);
    }
    return KN_OK;
}

/* ---- preludes ---- */

/* Code both targets share once the types and KN_FN are defined. */
/* A target may define the four half conversions itself (the CUDA target
 * uses the hardware's instructions); these are the portable integer ones,
 * bit for bit the CPU reference's rounding. */
static const char prelude_common[] =
    "#ifndef KN_HALF_CONVERSIONS_DEFINED\n"
    "KN_FN float kn_ld_bf16(kn_u16 h) { return kn_u2f((kn_u32)h << 16); }\n"
    "KN_FN kn_u16 kn_st_bf16(float f)\n"
    "{\n"
    "    kn_u32 u = kn_f2u(f);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return (kn_u16)((u >> 16) | 0x40u);\n"
    "    u += 0x7fffu + ((u >> 16) & 1u);\n"
    "    return (kn_u16)(u >> 16);\n"
    "}\n"
    "KN_FN float kn_ld_f16(kn_u16 h)\n"
    "{\n"
    "    kn_u32 sign = (kn_u32)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
    "    if (e == 0) { float v = (float)m * 5.9604644775390625e-8f; return sign ? -v : v; }\n"
    "    if (e == 31) return kn_u2f(sign | 0x7f800000u | (m << 13));\n"
    "    return kn_u2f(sign | ((e + 112u) << 23) | (m << 13));\n"
    "}\n"
    "KN_FN kn_u16 kn_st_f16(float f)\n"
    "{\n"
    "    kn_u32 u = kn_f2u(f), a = u & 0x7fffffffu;\n"
    "    kn_u16 sign = (kn_u16)((u >> 16) & 0x8000u);\n"
    "    if (a > 0x7f800000u) return (kn_u16)(sign | 0x7e00u);\n"
    "    if (a >= 0x477ff000u) return (kn_u16)(sign | 0x7c00u);\n"
    "    if (a < 0x38800000u) return (kn_u16)(sign | (kn_u16)rintf(kn_u2f(a) * 16777216.0f));\n"
    "    kn_u32 r = a + 0xfffu + ((a >> 13) & 1u);\n"
    "    return (kn_u16)(sign | (kn_u16)((r - 0x38000000u) >> 13));\n"
    "}\n"
    "KN_FN float kn_round_bf16(float f) { return kn_ld_bf16(kn_st_bf16(f)); }\n"
    "KN_FN float kn_round_f16(float f) { return kn_ld_f16(kn_st_f16(f)); }\n"
    "#endif\n"
    /* a float that holds a bf16 value exactly (a load, or rounded by
     * kn_round_bf16): its upper half, with no second rounding to do */
    "KN_FN kn_u16 kn_bits_bf16(float f) { return (kn_u16)(kn_f2u(f) >> 16); }\n"
    "KN_FN kn_i64 kn_f2i(double v)\n"
    "{\n"
    "    if (v != v) return 0;\n"
    "    if (v <= -9223372036854775808.0) return -9223372036854775807LL - 1;\n"
    "    if (v >= 9223372036854774784.0) return 9223372036854774784LL;\n"
    "    return (kn_i64)v;\n"
    "}\n"
    /* a gathered argument's row: its 1-based index clamped into the table
     * (a bad index reads a row of the table, never past it) */
    "KN_FN kn_i64 kn_gather_row(kn_i64 i, kn_i64 n) { return i < 1 ? 0 : i > n ? n - 1 : i - 1; }\n"
    /* the same for a 0-based index whose negative values count from the
     * end (kn_karg.gather_from_end) */
    "KN_FN kn_i64 kn_gather_row_from_end(kn_i64 i, kn_i64 n) { i = i < 0 ? i + n : i; return i < 0 ? 0 : i >= n ? n - 1 : i; }\n"
    "KN_FN kn_i32 kn_sat_i32(kn_i64 v) { return (kn_i32)(v < -2147483647LL - 1 ? -2147483647LL - 1 : v > 2147483647LL ? 2147483647LL : v); }\n"
    /* integer arithmetic wraps in two's complement, as PyTorch's and the
     * CPU reference's: through unsigned types, where C and CUDA C++ define
     * it (signed overflow is undefined, and NVRTC has no -fwrapv) */
    "KN_FN kn_i64 kn_iadd(kn_i64 a, kn_i64 b) { return (kn_i64)((unsigned long long)a + (unsigned long long)b); }\n"
    "KN_FN kn_i64 kn_isub(kn_i64 a, kn_i64 b) { return (kn_i64)((unsigned long long)a - (unsigned long long)b); }\n"
    "KN_FN kn_i64 kn_imul(kn_i64 a, kn_i64 b) { return (kn_i64)((unsigned long long)a * (unsigned long long)b); }\n"
    "KN_FN kn_i64 kn_ineg(kn_i64 a) { return (kn_i64)(0ull - (unsigned long long)a); }\n"
    "KN_FN kn_i64 kn_iabs(kn_i64 v) { return v < 0 ? kn_ineg(v) : v; }\n"
    /* the low 32 bits as a signed value, without an out-of-range conversion */
    "KN_FN kn_i64 kn_wrap_i32(kn_i64 v)\n"
    "{\n"
    "    kn_u32 u = (kn_u32)((unsigned long long)v & 0xffffffffull);\n"
    "    return u >= 0x80000000u ? (kn_i64)u - 4294967296LL : (kn_i64)u;\n"
    "}\n"
    /* by squaring in integers, wrapping as PyTorch's integer pow (and the
     * CPU reference): a double loses past 2^53, and CUDA's pow(-3.0, 1.0)
     * gave -2.9999999999999996, which truncates to -2. A negative exponent
     * gives 1 or -1 for a base of 1 or -1 and 0 otherwise, as PyTorch's. */
    "KN_FN kn_i64 kn_ipow(kn_i64 a, kn_i64 b)\n"
    "{\n"
    "    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;\n"
    "    unsigned long long r = 1, x = (unsigned long long)a;\n"
    "    for (; b; b >>= 1) {\n"
    "        if (b & 1) r *= x;\n"
    "        if (b > 1) x *= x;\n"
    "    }\n"
    "    return (kn_i64)r;\n"
    "}\n"
    "KN_FN kn_i64 kn_idiv(kn_i64 a, kn_i64 b)\n"
    "{\n"
    "    if (b == 0) return a == 0 ? 0 : a > 0 ? 9223372036854774784LL : -9223372036854775807LL - 1;\n"
    "    if (b == -1) return kn_ineg(a);\n"
    "    return a / b;\n"
    "}\n";

static void render_prelude(kn_strbuf *s, const kn_render_target *t)
{
    kn_strbuf_printf(s, "%s%s\n", t->prelude, prelude_common);
}

/* ---- kernel bodies ---- */

/* Typed pointers for the arguments and n<d> for the sizes. */
static void render_params(rctx *r, const char *bufs, const char *sizes)
{
    const kn_kernel *k = r->k;
    for (int j = 0; j < k->n_args; j++) {
        const kn_karg *a = &k->args[j];
        const char *cq = a->is_output ? "" : "const ";
        kn_kir_line(r, "%s%s *p%d = (%s%s *)%s[%d];", cq, kn_kir_storage_name(a->dtype), j, cq,
             kn_kir_storage_name(a->dtype), bufs, j);
    }
    for (int d = 0; d < k->ndim; d++) {
        if (r->t->sizes_baked) kn_kir_line(r, "const kn_i64 n%d = %lldLL;", d, (long long)k->shape[d]);
        else kn_kir_line(r, "const kn_i64 n%d = %s[%d];", d, sizes, d);
    }
}

kn_status kn_kir_render_stores(rctx *r, bool want_per_row, int upto)
{
    const kn_kernel *k = r->k;
    bool need[KN_KIR_MAX_EXPRS] = {false};
    int n = 0;
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].per_row == want_per_row || k->kind != KN_KERNEL_ROW) {
            need[k->stores[s].expr] = true;
            n++;
        }
    if (!n) return KN_OK;
    kn_kir_mark_deps_stop(k, need, r->in_regs ? r->kept_avail : NULL);
    KN_TRY(kn_kir_render_needed(r, need, upto));
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].per_row == want_per_row || k->kind != KN_KERNEL_ROW)
            kn_kir_render_store(r, k->stores[s].arg, k->stores[s].expr, upto);
    return KN_OK;
}

bool kn_kir_has_stores(const kn_kernel *k, bool per_row)
{
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].per_row == per_row) return true;
    return false;
}

/* Whether a CUDA POINTWISE kernel can take vector width V: along the last
 * dim every argument is contiguous (stride 1) or broadcast (stride 0), a
 * vector (V elements of the last dim, at most 16 bytes) never straddles
 * two rows, and a contiguous argument's other strides keep each row's
 * vectors aligned. */
bool kn_kernel_vec_ok(const kn_kernel *k, int V)
{
    if (k->kind != KN_KERNEL_POINTWISE || k->ndim < 1 || V < 2) return false;
    int L = k->ndim - 1;
    if (k->shape[L] % V != 0) return false;
    for (int j = 0; j < k->n_args; j++) {
        const kn_karg *a = &k->args[j];
        if (a->strides[L] != 0 && a->strides[L] != 1) return false;
        if (a->strides[L] == 0) continue;
        if (V * kn_dtype_size(a->dtype) > 16) return false;
        for (int d = 0; d < L; d++)
            if (a->strides[d] % V != 0) return false;
        if (a->gather_by > 0 && a->gather_stride % V != 0) return false;
    }
    return true;
}

/* The widest element of the arguments contiguous along the last dim. */
static int widest_contiguous(const kn_kernel *k)
{
    int widest = 1, L = k->ndim - 1;
    for (int j = 0; j < k->n_args; j++)
        if (k->args[j].strides[L] == 1 && (int)kn_dtype_size(k->args[j].dtype) > widest)
            widest = (int)kn_dtype_size(k->args[j].dtype);
    return widest;
}

int kn_kernel_vec_width(const kn_kernel *k)
{
    if (k->kind != KN_KERNEL_POINTWISE || k->ndim < 1 || k->cfg.vec == 1) return 0;
    if (k->cfg.vec > 1) return kn_kernel_vec_ok(k, k->cfg.vec) ? k->cfg.vec : 0;
    for (int V = 16 / widest_contiguous(k); V >= 2; V /= 2)
        if (kn_kernel_vec_ok(k, V)) return V;
    return 0;
}

bool kn_kir_costly_op(int op)
{
    switch (op) {
    case KN_OP_EXP: case KN_OP_LOG: case KN_OP_GELU: case KN_OP_GELU_TANH: case KN_OP_SILU: case KN_OP_TANH:
    case KN_OP_SIGMOID: case KN_OP_SQRT: case KN_OP_RSQRT: case KN_OP_DIV: case KN_OP_POW:
        return true;
    default: return false;
    }
}

int kn_kernel_vec_ept(const kn_kernel *k)
{
    if (k->cfg.ept > 0) return k->cfg.ept;
    int V = kn_kernel_vec_width(k);
    if (!V) return 1;
    int64_t n = 1;
    for (int d = 0; d < k->ndim; d++) n *= k->shape[d];
    /* a thread's vectors hold registers through its math: where that is a
     * transcendental, more threads hide its latency better than more
     * vectors a thread (bias+GELU in bf16 on the H100: 12.7 us with two,
     * 13.3 with four) */
    int most = 4;
    for (int i = 0; i < k->n_exprs; i++)
        if (k->exprs[i].kind == KN_KX_OP && kn_kir_costly_op(k->exprs[i].op)) most = 2;
    int64_t per_block = (int64_t)kn_kernel_block(k) * V;
    for (int ept = 1; ept < most; ept *= 2)
        if ((n + per_block * ept - 1) / (per_block * ept) <= KN_KIR_FULL_GRID) return ept;
    return most;
}

bool kn_kernel_row_regs(const kn_kernel *k)
{
    if (k->kind != KN_KERNEL_ROW || k->ndim < 1) return false;
    if (k->cfg.rows != KN_ROWS_AUTO) return k->cfg.rows == KN_ROWS_REGS || k->cfg.rows == KN_ROWS_BLOCK_REGS;
    int64_t n = k->shape[k->ndim - 1];
    return n <= KN_KIR_WARP_ROW_MAX || n <= (int64_t)KN_KIR_REGS_PER_THREAD * kn_kernel_block(k);
}

int kn_kernel_row_vec(const kn_kernel *k)
{
    if (!kn_kernel_row_regs(k) || k->cfg.vec == 1) return 1;
    int R = k->ndim - 1;
    int V = k->cfg.vec > 1 ? k->cfg.vec : 16 / widest_contiguous(k);
    for (; V > 1; V /= 2) {
        bool fits = k->shape[R] % V == 0;
        for (int j = 0; j < k->n_args && fits; j++) {
            const kn_karg *a = &k->args[j];
            if (a->strides[R] != 1) continue;
            if (V * kn_dtype_size(a->dtype) > 16) fits = false;
            for (int d = 0; d < R; d++)
                if (a->strides[d] % V != 0) fits = false;
            if (a->gather_by > 0 && a->gather_stride % V != 0) fits = false;
        }
        if (fits) return V;
    }
    return 1;
}

bool kn_kernel_warp_rows(const kn_kernel *k)
{
    if (k->kind != KN_KERNEL_ROW || k->ndim < 1) return false;
    if (k->cfg.rows != KN_ROWS_AUTO) return k->cfg.rows == KN_ROWS_WARP || k->cfg.rows == KN_ROWS_REGS;
    return k->shape[k->ndim - 1] <= KN_KIR_WARP_ROW_MAX;
}

int kn_kernel_row_lanes_auto(const kn_kernel *k)
{
    if (!kn_kernel_warp_rows(k) || !kn_kernel_row_regs(k)) return 32;
    int R = k->ndim - 1;
    int64_t rows = 1, n = k->shape[R];
    for (int d = 0; d < R; d++) rows *= k->shape[d];
    /* bf16 softmax rows of 256 (16 x 8 x 256 of them) on the H100: 13.1 us
     * with a vector a lane and 32 lanes a row, 11.6 with two vectors and 16
     * lanes, 11.4 with four and 8 */
    int V = kn_kernel_row_vec(k), lanes = 32;
    while (lanes > 8 && n <= (int64_t)lanes * V && rows % (64 / lanes) == 0) lanes /= 2;
    return lanes;
}

int kn_kernel_row_lanes(const kn_kernel *k)
{
    if (!kn_kernel_warp_rows(k)) return 32;
    if (!k->cfg.lanes) return kn_kernel_row_lanes_auto(k);
    int64_t rows = 1;
    for (int d = 0; d + 1 < k->ndim; d++) rows *= k->shape[d];
    bool valid = (k->cfg.lanes == 8 || k->cfg.lanes == 16 || k->cfg.lanes == 32) && rows % (32 / k->cfg.lanes) == 0;
    return valid ? k->cfg.lanes : 32;
}

/* One kernel's function (no prelude). */
static kn_status render_function(const kn_kernel *k, const kn_render_target *t, kn_strbuf *s)
{
    KN_TRY(kernel_check(k));
    if (k->kind == KN_KERNEL_FALLBACK || (k->kind == KN_KERNEL_LIBRARY && k->n_stores == 0))
        return kn_error(KN_ERR_UNSUPPORTED, "kernel %s: %s kernels have no generated source",
                        k->name, k->kind == KN_KERNEL_FALLBACK ? "fallback" : "library");
    rctx r = {.k = k, .t = t, .s = s};
    t->signature(&r);
    kn_kir_line(&r, "{");
    r.indent++;
    render_params(&r, t->bufs, t->sizes);
    if (t->after_params) kn_kir_line(&r, "%s", t->after_params);
    /* POINTWISE, and a LIBRARY kernel's epilogue (run after the library call) */
    KN_TRY(k->kind == KN_KERNEL_ROW ? t->row(&r) : t->pointwise(&r));
    r.indent--;
    kn_kir_line(&r, "}");
    return KN_OK;
}

kn_status kn_kernel_render(const kn_kernel *k, const kn_render_target *t, char **src)
{
    kn_strbuf s = {0};
    render_prelude(&s, t);
    kn_status st = render_function(k, t, &s);
    if (st != KN_OK) {
        free(s.p);
        *src = NULL;
        return st;
    }
    return kn_strbuf_finish(&s, src, k->name);
}

bool kn_kernel_has_source(const kn_kernel *k)
{
    return k->kind == KN_KERNEL_POINTWISE || k->kind == KN_KERNEL_ROW ||
           (k->kind == KN_KERNEL_LIBRARY && k->n_stores > 0);
}

kn_status kn_kprogram_render(const kn_kprogram *p, const kn_render_target *t, char **src)
{
    kn_strbuf s = {0};
    render_prelude(&s, t);
    for (int i = 0; i < p->n_kernels; i++) {
        if (!kn_kernel_has_source(&p->kernels[i])) continue;
        kn_strbuf_printf(&s, "\n");
        kn_status st = render_function(&p->kernels[i], t, &s);
        if (st != KN_OK) {
            free(s.p);
            *src = NULL;
            return st;
        }
    }
    return kn_strbuf_finish(&s, src, "program");
}

kn_status kn_kir_prelude(const kn_render_target *t, char **src)
{
    kn_strbuf s = {0};
    render_prelude(&s, t);
    return kn_strbuf_finish(&s, src, "prelude");
}

/* ---- launch configuration ---- */

int kn_kernel_block(const kn_kernel *k)
{
    return k->cfg.block > 0 ? k->cfg.block : KN_KIR_ROW_BLOCK;
}

void kn_kernel_launch_dims(const kn_kernel *k, const int64_t *sizes, int64_t *grid, int *block)
{
    if (!sizes) sizes = k->shape;
    int64_t n = 1;
    int upto = k->kind == KN_KERNEL_ROW ? k->ndim - 1 : k->ndim;
    for (int d = 0; d < upto; d++) n *= sizes[d];
    if (k->kind == KN_KERNEL_ROW && k->ndim >= 1 && sizes[k->ndim - 1] == 0 && !kn_kir_has_stores(k, true))
        n = 0;
    int b = *block = kn_kernel_block(k);
    if (k->kind == KN_KERNEL_ROW) {
        if (kn_kernel_warp_rows(k)) {
            int per_block = b / kn_kernel_row_lanes(k);
            n = (n + per_block - 1) / per_block;
        }
        *grid = n < KN_KIR_MAX_GRID ? n : KN_KIR_MAX_GRID;
    } else {
        int64_t per = (int64_t)b * (k->cfg.ept > 1 ? k->cfg.ept : 1);
        int V = kn_kernel_vec_width(k);
        if (V) per = (int64_t)b * V * kn_kernel_vec_ept(k); /* the vector path's */
        int64_t g = (n + per - 1) / per;
        *grid = g < KN_KIR_MAX_GRID ? g : KN_KIR_MAX_GRID;
    }
}
