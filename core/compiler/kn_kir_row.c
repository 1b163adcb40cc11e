/* kn_kir_row: the ROW kernel's body (kn_kir_row_body, kn_kir_target.h):
 * a row's stages (sums, max / min) and its stores, the row held in
 * registers where it fits (one read from memory, vector loads and stores,
 * the per-element values worth keeping across the stages), split from the
 * shared renderer in kn_kir.c, whose expression helpers it uses through
 * kn_kir_internal.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_kir.h"
#include "kn_kir_internal.h"
#include "kn_kir_target.h"
#include "kn_strbuf.h"

/* Mark the expressions `roots` need (roots already marked in need[]). */
static void mark_deps(const kn_kernel *k, bool *need)
{
    for (int i = k->n_exprs - 1; i >= 0; i--) {
        if (!need[i]) continue;
        const kn_kexpr *e = &k->exprs[i];
        if (e->kind != KN_KX_OP) continue;
        if (e->a >= 0) need[e->a] = true;
        if (e->b >= 0) need[e->b] = true;
        if (e->c >= 0) need[e->c] = true;
    }
}

/* Float sums may accumulate in double (the target says; see top). */
const char *kn_kir_acc_type(const rctx *r, int s)
{
    ctype c = kn_kir_expr_ct(r, r->k->stages[s].expr);
    if (c == CT_BOOL) c = CT_I64;
    if (c == CT_F32 && r->t->f32_row_sum_in_f64 && r->k->stages[s].op == KN_OP_SUM) return "double";
    return kn_kir_ctype_name(c);
}

static void put_acc_init(rctx *r, int s)
{
    ctype c = kn_kir_expr_ct(r, r->k->stages[s].expr);
    int op = r->k->stages[s].op;
    if (op == KN_OP_SUM) kn_strbuf_printf(r->s, "0");
    else if (c == CT_I64 || c == CT_BOOL)
        kn_strbuf_printf(r->s, op == KN_OP_AMAX ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL");
    else kn_strbuf_printf(r->s, "%sINFINITY", op == KN_OP_AMAX ? "-" : "");
}

/* Sum, or max / min that keep NaN. */
void kn_kir_combine(rctx *r, int s, const char *acc, const char *val)
{
    int op = r->k->stages[s].op;
    if (op == KN_OP_SUM) kn_kir_line(r, "%s += %s;", acc, val);
    else
        kn_kir_line(r, "%s = (%s != %s || %s %c %s) ? %s : %s;", acc, val, val, val,
             op == KN_OP_AMAX ? '>' : '<', acc, val, acc);
}

/* A loop over the elements of the row: i<R> from lo by step, or with the
 * row in registers (r->regs_k) the lane's regs_k elements, unrolled. */
/* Register u of a lane's row copy is element i<R>: lo + u * step, or in
 * groups of V consecutive elements, (lo + (u / V) * step) * V + u % V
 * (increasing in u either way, so the first one past the row ends the loop).
 * A row held in registers is short (the target guards n<R> before), so the
 * index is an int: no 64-bit multiply per element. */
static void put_regs_index(rctx *r, const char *lo, const char *step)
{
    int R = r->k->ndim - 1, V = r->regs_v;
    if (V > 1)
        kn_kir_line(r, "const int i%d = (%s + (u / %d) * %s) * %d + u %% %d;", R, lo, V, step, V, V);
    else
        kn_kir_line(r, "const int i%d = %s + u * %s;", R, lo, step);
    kn_kir_line(r, "if (i%d >= n%d) break;", R, R);
}

static void open_row_loop(rctx *r, const char *lo, const char *step)
{
    if (r->regs_k) {
        if (r->t->full_unroll_pragma) kn_kir_line(r, "%s", r->t->full_unroll_pragma);
        kn_kir_line(r, "for (int u = 0; u < %d; u++) {", r->regs_k);
        r->indent++;
        put_regs_index(r, lo, step);
        r->in_regs = true;
        return;
    }
    int R = r->k->ndim - 1;
    kn_kir_put_unroll(r);
    kn_kir_line(r, "for (kn_i64 i%d = %s; i%d < n%d; i%d += %s) {", R, lo, R, R, R, step);
    r->indent++;
}

static void close_row_loop(rctx *r)
{
    r->in_regs = false;
    r->indent--;
    kn_kir_line(r, "}");
}

/* The arguments a row in registers keeps (inputs that vary along the row),
 * and of those the ones some stage reads: those are loaded before the
 * first stage, the others (a layer norm's weight and bias) only right
 * before the stores, so they hold no registers through the reductions. */
static void row_cached(const kn_kernel *k, bool *cached, bool *early)
{
    int R = k->ndim - 1;
    for (int i = 0; i < k->n_exprs; i++)
        if (k->exprs[i].kind == KN_KX_LOAD && !k->args[k->exprs[i].buf].is_output &&
            k->args[k->exprs[i].buf].strides[R] != 0)
            cached[k->exprs[i].buf] = true;
    bool need[KN_KIR_MAX_EXPRS] = {false};
    for (int s = 0; s < k->n_stages; s++) need[k->stages[s].expr] = true;
    mark_deps(k, need);
    for (int i = 0; i < k->n_exprs; i++)
        if (need[i] && k->exprs[i].kind == KN_KX_LOAD && cached[k->exprs[i].buf]) early[k->exprs[i].buf] = true;
}

/* A row's elementwise ops folded into one input's registers (row_fold). */
typedef struct row_fold_t {
    int expr;                      /* the last op: its value replaces arg's registers (-1: none) */
    int arg;                       /* the argument whose registers hold it */
    bool reads[KN_KIR_MAX_ARGS];   /* every argument it reads, arg included */
    bool inner[KN_KIR_MAX_EXPRS];  /* the expressions under it, read by it alone */
} row_fold_t;

static bool row_fold(const rctx *r, const bool *early, row_fold_t *f);
static bool row_vec_arg(const rctx *r, int j);

/* Whether the arguments only the stores read (`late`: a layer norm's
 * weight and bias) load with the others, before the reductions, instead
 * of right before the stores. Loaded late, their latency (an L2 round
 * trip) comes after the reductions' on the row's critical path; loaded
 * early, they hold registers through the reductions. Early where the
 * row moves in vectors and a lane's elements of every argument take at
 * most 8 bytes each (the half types' layer norms, with or without the
 * residual add; an f32 layer norm's 12 would press on registers).
 * KILN_ROW_LATE=early|late overrides, for measuring. */
/* The bytes an element of the row takes in registers, over the arguments
 * in `which`: less the inputs of a fold (row_fold, found among the `early`
 * ones) but the one whose registers the fold's value takes over. */
static size_t row_elem_bytes(const kn_kernel *k, const bool *which, const bool *early)
{
    size_t bytes = 0;
    for (int j = 0; j < k->n_args; j++)
        if (which[j]) bytes += kn_dtype_size(k->args[j].dtype);
    const rctx vec = {.k = k, .regs_v = kn_kernel_row_vec(k)};
    row_fold_t f;
    if (row_fold(&vec, early, &f))
        for (int j = 0; j < k->n_args; j++)
            if (f.reads[j] && j != f.arg) bytes -= kn_dtype_size(k->args[j].dtype);
    return bytes;
}

static bool row_late_loads_early(const kn_kernel *k, const bool *cached, const bool *early)
{
    const char *force = getenv("KILN_ROW_LATE");
    if (force && strcmp(force, "early") == 0) return true;
    if (force && strcmp(force, "late") == 0) return false;
    if (kn_kernel_row_vec(k) <= 1) return false;
    bool any_late = false;
    for (int j = 0; j < k->n_args; j++) any_late |= cached[j] && !early[j];
    return any_late && row_elem_bytes(k, cached, early) <= 8;
}

/* row_cached, with the late arguments counted early where
 * row_late_loads_early says they load with the others. */
static void row_cached_loads(const kn_kernel *k, bool *cached, bool *early)
{
    row_cached(k, cached, early);
    if (!row_late_loads_early(k, cached, early)) return;
    for (int j = 0; j < k->n_args; j++)
        if (cached[j]) early[j] = true;
}

size_t kn_kir_row_early_bytes(const kn_kernel *k)
{
    bool cached[KN_KIR_MAX_ARGS] = {false}, early[KN_KIR_MAX_ARGS] = {false};
    if (k->kind != KN_KERNEL_ROW || k->ndim < 1) return 0;
    row_cached_loads(k, cached, early);
    return row_elem_bytes(k, early, early);
}

/* Whether argument j moves in vectors in a row held in registers. */
static bool row_vec_arg(const rctx *r, int j)
{
    return r->regs_v > 1 && r->k->args[j].strides[r->k->ndim - 1] == 1;
}

/* The outputs a row in registers stages in d<j> and stores in vectors. */
static void row_vec_outputs(const rctx *r, bool *vec_out)
{
    const kn_kernel *k = r->k;
    for (int s = 0; s < k->n_stores; s++)
        if (!k->stores[s].per_row && row_vec_arg(r, k->stores[s].arg)) vec_out[k->stores[s].arg] = true;
}

void kn_kir_put_row_vec_ok(rctx *r)
{
    const kn_kernel *k = r->k;
    int R = k->ndim - 1, V = r->regs_v;
    bool cached[KN_KIR_MAX_ARGS] = {false}, early[KN_KIR_MAX_ARGS] = {false}, vec_out[KN_KIR_MAX_ARGS] = {false};
    row_cached(k, cached, early);
    row_vec_outputs(r, vec_out);
    kn_strbuf_printf(r->s, "n%d %% %d == 0", R, V);
    for (int j = 0; j < k->n_args; j++)
        if ((cached[j] || vec_out[j]) && row_vec_arg(r, j)) {
            kn_strbuf_printf(r->s, " && ((unsigned long long)&");
            kn_kir_put_elem(r, j, R);
            kn_strbuf_printf(r->s, " %% %zu) == 0", V * kn_dtype_size(k->args[j].dtype));
        }
}

/* The lane's elements of the arguments in `which` into registers: whole
 * vectors for those contiguous along the row when regs_v > 1 (the target
 * took this path only where kn_kir_put_row_vec_ok holds), element by
 * element for the others. */
static void regs_loads(rctx *r, const bool *which, const char *lo, const char *step)
{
    const kn_kernel *k = r->k;
    int R = k->ndim - 1, V = r->regs_v;
    bool any_vec = false, any_scalar = false;
    for (int j = 0; j < k->n_args; j++)
        if (which[j]) {
            if (row_vec_arg(r, j)) any_vec = true;
            else any_scalar = true;
        }
    if (any_vec) {
        if (r->t->full_unroll_pragma) kn_kir_line(r, "%s", r->t->full_unroll_pragma);
        kn_kir_line(r, "for (int g = 0; g < %d; g++) {", r->regs_k / V);
        r->indent++;
        kn_kir_line(r, "const int i%d = (%s + g * %s) * %d;", R, lo, step, V);
        kn_kir_line(r, "if (i%d >= n%d) break;", R, R);
        for (int j = 0; j < k->n_args; j++)
            if (which[j] && row_vec_arg(r, j)) {
                kn_strbuf_printf(r->s, "%*sc%d[g] = *(const v%d_t *)&", r->indent * 4, "", j, j);
                kn_kir_put_elem(r, j, k->ndim);
                kn_strbuf_printf(r->s, ";\n");
            }
        r->indent--;
        kn_kir_line(r, "}");
    }
    if (any_scalar) {
        if (r->t->full_unroll_pragma) kn_kir_line(r, "%s", r->t->full_unroll_pragma);
        kn_kir_line(r, "for (int u = 0; u < %d; u++) {", r->regs_k);
        r->indent++;
        put_regs_index(r, lo, step);
        for (int j = 0; j < k->n_args; j++)
            if (which[j] && !row_vec_arg(r, j)) {
                kn_strbuf_printf(r->s, "%*s", r->indent * 4, "");
                r->in_regs = true;
                kn_kir_put_elem(r, j, k->ndim);
                r->in_regs = false;
                kn_strbuf_printf(r->s, " = ");
                kn_kir_put_elem(r, j, k->ndim);
                kn_strbuf_printf(r->s, ";\n");
            }
        r->indent--;
        kn_kir_line(r, "}");
    }
}

/* Whether expression x is read by `by` alone: no other op, stage or store. */
static bool read_only_by(const kn_kernel *k, int x, int by)
{
    for (int o = 0; o < k->n_exprs; o++) {
        const kn_kexpr *e = &k->exprs[o];
        if (o != by && e->kind == KN_KX_OP && (e->a == x || e->b == x || e->c == x)) return false;
    }
    for (int s = 0; s < k->n_stages; s++)
        if (k->stages[s].expr == x) return false;
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].expr == x) return false;
    return true;
}

/* Whether expression x is the only load of an argument that loads before
 * the stages, moves in vectors and has dtype dt. */
static bool foldable_load(const rctx *r, const bool *early, int x, kn_dtype dt)
{
    const kn_kernel *k = r->k;
    if (x < 0 || k->exprs[x].kind != KN_KX_LOAD) return false;
    int j = k->exprs[x].buf;
    if (!early[j] || !row_vec_arg(r, j) || k->args[j].dtype != dt) return false;
    for (int o = 0; o < k->n_exprs; o++)
        if (o != x && k->exprs[o].kind == KN_KX_LOAD && k->exprs[o].buf == j) return false;
    return true;
}

/* A binary elementwise op on a float dtype. */
static bool fold_op(const kn_kexpr *e)
{
    return e->kind == KN_KX_OP && e->a >= 0 && e->b >= 0 && e->c < 0 && e->a != e->b &&
           (e->dtype == KN_F32 || e->dtype == KN_BF16 || e->dtype == KN_F16);
}

/* A row held in vectors may keep, instead of its input rows, the row of
 * elementwise ops of them (x + bias + residual before a layer norm): a
 * binary op of two input rows A and B, then ops of that value and one
 * more input row each. Every op and input shares a float dtype (each op's
 * value is rounded to it, so A's storage holds the last exactly), every
 * input loads before the stages (`early`) and only there, and everything
 * under the last op is read by the next op alone. Without the fold, each
 * of the row's loops computed the ops again (a layer norm's three), and
 * the inputs held registers through all of them. */
static bool row_fold(const rctx *r, const bool *early, row_fold_t *f)
{
    const kn_kernel *k = r->k;
    memset(f, 0, sizeof *f);
    f->expr = -1;
    if (r->regs_v <= 1) return false;
    for (int i = 0; i < k->n_exprs; i++) {
        const kn_kexpr *e = &k->exprs[i];
        if (!fold_op(e) || !foldable_load(r, early, e->a, e->dtype) || !foldable_load(r, early, e->b, e->dtype)) continue;
        int arg_a = k->exprs[e->a].buf, arg_b = k->exprs[e->b].buf;
        if (arg_a == arg_b || !read_only_by(k, e->a, i) || !read_only_by(k, e->b, i)) continue;
        f->expr = i;
        f->arg = arg_a;
        f->reads[arg_a] = f->reads[arg_b] = true;
        f->inner[e->a] = f->inner[e->b] = true;
        for (bool grew = true; grew;) {
            grew = false;
            for (int j = f->expr + 1; j < k->n_exprs && !grew; j++) {
                const kn_kexpr *u = &k->exprs[j];
                if (!fold_op(u) || u->dtype != e->dtype) continue;
                int other = u->a == f->expr ? u->b : u->b == f->expr ? u->a : -1;
                if (!foldable_load(r, early, other, u->dtype) || f->reads[k->exprs[other].buf] ||
                    !read_only_by(k, f->expr, j) || !read_only_by(k, other, j))
                    continue;
                f->inner[f->expr] = f->inner[other] = true;
                f->reads[k->exprs[other].buf] = true;
                f->expr = j;
                grew = true;
            }
        }
        return true;
    }
    return false;
}

/* The name of op e as the target's pair word ops spell it, or NULL where
 * the fold cannot run on packed pairs: only a rounded add, sub or mul of
 * the half types, in a target that has those ops (see the CUDA prelude
 * for why a packed op gives eager's value). */
static const char *pair_word_name(const rctx *r, const kn_kexpr *e)
{
    if (!r->t->pair_word_op || e->internal || (e->dtype != KN_BF16 && e->dtype != KN_F16)) return NULL;
    return e->op == KN_OP_ADD ? "add" : e->op == KN_OP_SUB ? "sub" : e->op == KN_OP_MUL ? "mul" : NULL;
}

/* Whether every op of fold f runs on packed pairs (pair_word_name), two
 * elements a 32-bit word of the vectors that hold them. */
static bool fold_in_pairs(const rctx *r, const row_fold_t *f)
{
    const kn_kernel *k = r->k;
    if (r->regs_v % 2) return false;
    for (int i = 0; i <= f->expr; i++) {
        const kn_kexpr *e = &k->exprs[i];
        if ((i == f->expr || (f->inner[i] && e->kind == KN_KX_OP)) && !pair_word_name(r, e)) return false;
    }
    return true;
}

/* Operand x of a packed fold: a load's word w of its group vector, or the
 * word the ops before it made (f<x>). */
static void put_pair_operand(rctx *r, int x)
{
    const kn_kexpr *e = &r->k->exprs[x];
    if (e->kind == KN_KX_LOAD) kn_strbuf_printf(r->s, "((const kn_u32 *)&c%d[g])[w]", e->buf);
    else kn_strbuf_printf(r->s, "f%d", x);
}

/* The fold's ops, in order, on word w of the group's vectors; the last
 * one's word goes to its argument's registers. */
static void render_fold_pairs(rctx *r, const row_fold_t *f)
{
    const kn_kernel *k = r->k;
    for (int i = 0; i <= f->expr; i++) {
        const kn_kexpr *e = &k->exprs[i];
        if (e->kind != KN_KX_OP || (i != f->expr && !f->inner[i])) continue;
        kn_strbuf_printf(r->s, "%*sconst kn_u32 f%d = %s%s_%s(", r->indent * 4, "", i, r->t->pair_word_op,
                         pair_word_name(r, e), kn_dtype_name(e->dtype));
        put_pair_operand(r, e->a);
        kn_strbuf_printf(r->s, ", ");
        put_pair_operand(r, e->b);
        kn_strbuf_printf(r->s, ");\n");
    }
    kn_kir_line(r, "((kn_u32 *)&c%d[g])[w] = f%d;", f->arg, f->expr);
}

/* The loads of a fold's inputs, and the lane's values of its last op into
 * its argument's registers, one vector group at a time: the other inputs
 * hold registers for one group. */
static kn_status regs_fold(rctx *r, const row_fold_t *f, const char *lo, const char *step)
{
    const kn_kernel *k = r->k;
    int R = k->ndim - 1, V = r->regs_v;
    bool need[KN_KIR_MAX_EXPRS] = {false};
    need[f->expr] = true;
    mark_deps(k, need);
    if (r->t->full_unroll_pragma) kn_kir_line(r, "%s", r->t->full_unroll_pragma);
    kn_kir_line(r, "for (int g = 0; g < %d; g++) {", r->regs_k / V);
    r->indent++;
    kn_kir_line(r, "if ((%s + g * %s) * %d >= n%d) break;", lo, step, V, R);
    kn_kir_line(r, "{");
    r->indent++;
    kn_kir_line(r, "const int i%d = (%s + g * %s) * %d;", R, lo, step, V);
    for (int j = 0; j < k->n_args; j++) {
        if (!f->reads[j]) continue;
        kn_strbuf_printf(r->s, "%*sc%d[g] = *(const v%d_t *)&", r->indent * 4, "", j, j);
        kn_kir_put_elem(r, j, k->ndim);
        kn_strbuf_printf(r->s, ";\n");
    }
    r->indent--;
    kn_kir_line(r, "}");
    if (r->t->full_unroll_pragma) kn_kir_line(r, "%s", r->t->full_unroll_pragma);
    if (fold_in_pairs(r, f)) {
        kn_kir_line(r, "for (int w = 0; w < %d; w++) {", V / 2);
        r->indent++;
        render_fold_pairs(r, f);
    } else {
        kn_kir_line(r, "for (int e = 0; e < %d; e++) {", V);
        r->indent++;
        kn_kir_line(r, "const int u = g * %d + e;", V);
        kn_kir_line(r, "const int i%d = (%s + g * %s) * %d + e;", R, lo, step, V);
        kn_kir_line(r, "(void)i%d;", R);
        r->in_regs = true;
        kn_status st = kn_kir_render_needed(r, need, k->ndim);
        if (st == KN_OK) kn_kir_render_store(r, f->arg, f->expr, k->ndim);
        r->in_regs = false;
        KN_TRY(st);
    }
    r->indent--;
    kn_kir_line(r, "}");
    r->indent--;
    kn_kir_line(r, "}");
    r->folded = true;
    r->fold_expr = f->expr;
    r->fold_arg = f->arg;
    r->fold_inner = f->inner;
    return KN_OK;
}

/* The stores of a row held in vectors, one vector group at a time: the
 * group's vectors of the arguments only the stores read (`late`), its V
 * values, then its vector stores. Only one group of those arguments and
 * of the outputs is live at a time, not the whole row's (an f32 layer
 * norm's weight, bias and output rows took 48 more registers). */
static kn_status regs_group_stores(rctx *r, const bool *late, const bool *vec_out, const char *lo,
                                   const char *step)
{
    const kn_kernel *k = r->k;
    int R = k->ndim - 1, V = r->regs_v;
    bool late_scalar[KN_KIR_MAX_ARGS] = {false};
    for (int j = 0; j < k->n_args; j++) late_scalar[j] = late[j] && !row_vec_arg(r, j);
    regs_loads(r, late_scalar, lo, step);
    if (r->t->full_unroll_pragma) kn_kir_line(r, "%s", r->t->full_unroll_pragma);
    kn_kir_line(r, "for (int g = 0; g < %d; g++) {", r->regs_k / V);
    r->indent++;
    kn_kir_line(r, "if ((%s + g * %s) * %d >= n%d) break;", lo, step, V, R);
    for (int pass = 0; pass < 2; pass++) { /* 0: the group's loads, 1: its stores */
        bool any = false;
        for (int j = 0; j < k->n_args; j++) any |= pass == 0 ? late[j] && row_vec_arg(r, j) : vec_out[j];
        if (pass == 1) { /* the group's values first */
            if (r->t->full_unroll_pragma) kn_kir_line(r, "%s", r->t->full_unroll_pragma);
            kn_kir_line(r, "for (int e = 0; e < %d; e++) {", V);
            r->indent++;
            kn_kir_line(r, "const int u = g * %d + e;", V);
            kn_kir_line(r, "const int i%d = (%s + g * %s) * %d + e;", R, lo, step, V);
            kn_kir_line(r, "(void)u;");
            kn_kir_line(r, "(void)i%d;", R);
            r->in_regs = true;
            kn_status st = kn_kir_render_stores(r, false, k->ndim);
            r->in_regs = false;
            KN_TRY(st);
            r->indent--;
            kn_kir_line(r, "}");
        }
        if (!any) continue;
        kn_kir_line(r, "{");
        r->indent++;
        kn_kir_line(r, "const int i%d = (%s + g * %s) * %d;", R, lo, step, V);
        for (int j = 0; j < k->n_args; j++) {
            if (pass == 0 && late[j] && row_vec_arg(r, j)) {
                kn_strbuf_printf(r->s, "%*sc%d[g] = *(const v%d_t *)&", r->indent * 4, "", j, j);
                kn_kir_put_elem(r, j, k->ndim);
                kn_strbuf_printf(r->s, ";\n");
            } else if (pass == 1 && vec_out[j]) {
                char value[24];
                snprintf(value, sizeof value, "d%d[g]", j);
                kn_kir_put_vec_store(r, j, V, value);
            }
        }
        r->indent--;
        kn_kir_line(r, "}");
    }
    r->indent--;
    kn_kir_line(r, "}");
    return KN_OK;
}

/* Roughly what computing row-varying expression i again costs: its ops
 * (casts free, a transcendental or a division as several), capped. */
static int recompute_cost(const kn_kernel *k, const bool *varies, int i, int depth)
{
    const kn_kexpr *e = &k->exprs[i];
    if (e->kind != KN_KX_OP || !varies[i] || depth > 6) return 0;
    int c = e->op == KN_OP_CAST ? 0 : kn_kir_costly_op(e->op) ? 4 : 1;
    int opnd[3] = {e->a, e->b, e->c};
    for (int j = 0; j < 3 && c < 8; j++)
        if (opnd[j] >= 0) c += recompute_cost(k, varies, opnd[j], depth + 1);
    return c;
}

/* Whether expression i varies along the row: it reads a row-varying
 * argument or the row index (a per-row value, an accumulator's, is one
 * register and the compiler hoists it). */
static void row_varying(const kn_kernel *k, bool *varies)
{
    int R = k->ndim - 1;
    for (int i = 0; i < k->n_exprs; i++) {
        const kn_kexpr *e = &k->exprs[i];
        if (e->kind == KN_KX_LOAD) varies[i] = k->args[e->buf].strides[R] != 0;
        else if (e->kind == KN_KX_INDEX) varies[i] = e->dim == R;
        else if (e->kind == KN_KX_OP)
            varies[i] = (e->a >= 0 && varies[e->a]) || (e->b >= 0 && varies[e->b]) || (e->c >= 0 && varies[e->c]);
        else varies[i] = false;
    }
}

/* A row held in registers runs one loop per stage and one for the stores,
 * and each loop computes what it needs from the row's registers. A value
 * an earlier loop computed and a later one needs again (softmax's
 * masked, scaled input for its max and its sum; exp(x - max) for its sum
 * and its stores) is kept in an array x<i>[regs_k] instead of computed
 * again, where computing it costs more than a register: an op past a
 * cast of a load, or a transcendental (the half types' softmax spent
 * most of its instructions recomputing them). kept[i]: keep i; first[i]:
 * the loop that computes it (stage index; n_stages for the stores). At
 * most budget_bytes a thread of the row's registers: its inputs' and the
 * kept values' (past that, ptxas spills). */
static void plan_kept(const kn_kernel *k, int regs_k, int budget_bytes, bool *kept, int *first)
{
    size_t row_bytes = (size_t)regs_k * kn_kir_row_early_bytes(k);
    bool varies[KN_KIR_MAX_EXPRS];
    row_varying(k, varies);
    for (int i = 0; i < k->n_exprs; i++) first[i] = -1;
    int n_loops = k->n_stages + 1;
    for (int l = 0; l < n_loops; l++) {
        bool need[KN_KIR_MAX_EXPRS] = {false};
        if (l < k->n_stages) need[k->stages[l].expr] = true;
        else
            for (int s = 0; s < k->n_stores; s++)
                if (!k->stores[s].per_row) need[k->stores[s].expr] = true;
        kn_kir_mark_deps_stop(k, need, kept);
        for (int i = 0; i < k->n_exprs; i++) {
            if (!need[i] || first[i] >= 0 || kept[i]) continue;
            first[i] = l;
        }
        /* what this loop needs again from an earlier one: keep the values
         * it reads directly (the frontier), not their operands too */
        for (int i = 0; i < k->n_exprs && l > 0; i++) {
            if (!need[i] || kept[i] || first[i] >= l || !varies[i]) continue;
            const kn_kexpr *e = &k->exprs[i];
            if (e->kind != KN_KX_OP) continue;
            bool costly = recompute_cost(k, varies, i, 0) >= 2;
            bool frontier = false; /* read by an expression this loop computes afresh */
            for (int j = i + 1; j < k->n_exprs && !frontier; j++) {
                const kn_kexpr *u = &k->exprs[j];
                if (need[j] && first[j] == l && u->kind == KN_KX_OP && (u->a == i || u->b == i || u->c == i))
                    frontier = true;
            }
            if (l < k->n_stages && k->stages[l].expr == i) frontier = true;
            for (int s = 0; s < k->n_stores && l == k->n_stages; s++)
                if (!k->stores[s].per_row && k->stores[s].expr == i) frontier = true;
            size_t more = (size_t)regs_k * kn_dtype_size(e->dtype == KN_F64 ? KN_F64 : KN_F32);
            if (costly && frontier && row_bytes + more <= (size_t)budget_bytes) {
                kept[i] = true;
                row_bytes += more;
            }
        }
        /* what this loop computes now that it reads kept values: the
         * operands of those are no longer computed here */
        bool now[KN_KIR_MAX_EXPRS] = {false};
        if (l < k->n_stages) now[k->stages[l].expr] = true;
        else
            for (int s = 0; s < k->n_stores; s++)
                if (!k->stores[s].per_row) now[k->stores[s].expr] = true;
        kn_kir_mark_deps_stop(k, now, kept);
        for (int i = 0; i < k->n_exprs; i++)
            if (first[i] == l && !now[i]) first[i] = -1;
    }
}

/* For loop l (a stage, or n_stages: the stores): the kept values an
 * earlier loop computed, and those this loop computes and keeps. */
static void set_kept_loop(const kn_kernel *k, const bool *kept, const int *first, int l, bool *avail, bool *now)
{
    for (int i = 0; i < k->n_exprs; i++) {
        avail[i] = kept[i] && first[i] >= 0 && first[i] < l;
        now[i] = kept[i] && first[i] == l;
    }
}

kn_status kn_kir_row_body(rctx *r, const char *lo, const char *step, const char *per_row_open)
{
    const kn_kernel *k = r->k;
    int R = k->ndim - 1;
    bool vec_out[KN_KIR_MAX_ARGS] = {false}; /* outputs staged in d<j> and stored in vectors */
    bool late[KN_KIR_MAX_ARGS] = {false};    /* cached arguments only the stores read */
    bool kept[KN_KIR_MAX_EXPRS] = {false}, kept_avail[KN_KIR_MAX_EXPRS], kept_now[KN_KIR_MAX_EXPRS];
    int kept_first[KN_KIR_MAX_EXPRS];
    for (int i = 0; i < KN_KIR_MAX_EXPRS; i++) kept_first[i] = -1;
    row_fold_t r_fold; /* r->fold_inner points here while the row renders */
    r->folded = false;
    bool any_late = false;
    if (r->regs_k) { /* one read of the row from memory: every stage reads the registers */
        bool cached[KN_KIR_MAX_ARGS] = {false}, early[KN_KIR_MAX_ARGS] = {false};
        row_cached_loads(k, cached, early);
        int V = r->regs_v;
        if (V > 1) row_vec_outputs(r, vec_out);
        for (int j = 0; j < k->n_args; j++) {
            if (!cached[j] && !vec_out[j]) continue;
            if (row_vec_arg(r, j)) {
                r->t->vector_type(r, j, V);
                kn_kir_line(r, "v%d_t %c%d[%d];", j, vec_out[j] ? 'd' : 'c', j, r->regs_k / V);
            } else if (cached[j]) {
                kn_kir_line(r, "%s c%d[%d];", kn_kir_storage_name(k->args[j].dtype), j, r->regs_k);
            }
            late[j] = cached[j] && !early[j];
            any_late |= late[j];
        }
        /* every load of the row before any arithmetic on it: the folded
         * pair's loads come last, with their op, so that all of the row's
         * memory requests are in flight at once */
        bool fold = row_fold(r, early, &r_fold);
        for (int j = 0; j < k->n_args && fold; j++)
            if (r_fold.reads[j]) early[j] = false;
        regs_loads(r, early, lo, step);
        if (fold) KN_TRY(regs_fold(r, &r_fold, lo, step));
        if (r->t->kept_bytes > 0) {
            plan_kept(k, r->regs_k, r->t->kept_bytes, kept, kept_first);
            for (int i = 0; i < k->n_exprs; i++)
                if (kept[i]) kn_kir_line(r, "%s x%d[%d];", kn_kir_ctype_name(kn_kir_expr_ct(r, i)), i, r->regs_k);
        }
    }
    for (int s = 0; s < k->n_stages; s++) {
        set_kept_loop(k, kept, kept_first, s, kept_avail, kept_now);
        r->kept_avail = kept_avail;
        r->kept_now = kept_now;
        char acc[16];
        snprintf(acc, sizeof acc, "s%d", s);
        kn_strbuf_printf(r->s, "%*s%s s%d = ", r->indent * 4, "", kn_kir_acc_type(r, s), s);
        put_acc_init(r, s);
        kn_strbuf_printf(r->s, ";\n");
        open_row_loop(r, lo, step);
        bool need[KN_KIR_MAX_EXPRS] = {false};
        need[k->stages[s].expr] = true;
        kn_kir_mark_deps_stop(k, need, kept_avail);
        for (int i = 0; i < k->n_exprs; i++)
            if (need[i] && k->exprs[i].kind == KN_KX_ACC && k->exprs[i].acc >= s)
                return kn_error(KN_ERR_ARG, "kernel %s: stage %d reads its own or a later stage", k->name, s);
        KN_TRY(kn_kir_render_needed(r, need, k->ndim));
        char val[16];
        snprintf(val, sizeof val, "v%d", k->stages[s].expr);
        kn_kir_combine(r, s, acc, val);
        close_row_loop(r);
        if (r->t->row_partials) r->t->row_partials(r, s);
        kn_kir_line(r, "const %s acc%d = (%s)s%d;", kn_kir_ctype_name(kn_kir_expr_ct(r, k->stages[s].expr)), s,
             kn_kir_ctype_name(kn_kir_expr_ct(r, k->stages[s].expr)), s);
    }
    set_kept_loop(k, kept, kept_first, k->n_stages, kept_avail, kept_now);
    if (kn_kir_has_stores(k, false) && r->regs_k && r->regs_v > 1) {
        KN_TRY(regs_group_stores(r, late, vec_out, lo, step));
    } else if (kn_kir_has_stores(k, false)) {
        if (any_late) regs_loads(r, late, lo, step);
        open_row_loop(r, lo, step);
        KN_TRY(kn_kir_render_stores(r, false, k->ndim));
        close_row_loop(r);
    }
    r->folded = false;
    r->kept_avail = r->kept_now = NULL;
    if (kn_kir_has_stores(k, true)) {
        kn_kir_line(r, "%s", per_row_open);
        r->indent++;
        kn_kir_line(r, "const kn_i64 i%d = 0; /* per-row values may load row-broadcast args */", R);
        kn_kir_line(r, "(void)i%d;", R);
        KN_TRY(kn_kir_render_stores(r, true, R));
        r->indent--;
        kn_kir_line(r, "}");
    }
    return KN_OK;
}

