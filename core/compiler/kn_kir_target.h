/* kn_kir_target.h: the part of the kernel-IR renderer (kn_kir.c, kn_kir_kernel.c) a render
 * target's overrides write with (kn_render_target in kn_kir.h). Only the
 * backends' targets include it: everyone else renders through kn_kir.h.
 *
 * A target's loop nest opens its loops, declares the loop indices i<d>
 * (and n<d>, the sizes, which the shared code has already declared), then
 * hands the body back to the shared code: kn_kir_render_stores for a
 * POINTWISE element, kn_kir_row_body for a ROW kernel's row.
 */
#ifndef KN_KIR_TARGET_H
#define KN_KIR_TARGET_H

#include <stdbool.h>

#include "kn_dtype.h"
#include "kn_status.h"
#include "kn_strbuf.h"

/* The types are kn_kir.h's; named by tag so that kn_kir.c, which includes
 * this header, and this header do not include each other. */
struct kn_kernel;
struct kn_render_target;
typedef struct kn_kir_rctx kn_kir_rctx;

/* One function being rendered. */
struct kn_kir_rctx {
    const struct kn_kernel *k;
    const struct kn_render_target *t;
    kn_strbuf *s;
    int indent;     /* in steps of four spaces */
    bool warp_rows; /* set by a ROW loop nest whose rows are one warp each: row_partials
                       then needs no shared memory */
    bool vec_body;  /* the CUDA vector path: contiguous args are read from l<j>[g].x[e], stored
                       to s<j>.x[e] */
    int regs_k;     /* ROW, one warp per row: each lane keeps its regs_k elements of the row in
                       registers (0: it reads memory) */
    int regs_v;     /* ... in groups of regs_v consecutive elements, moved with one vector load
                       or store where the row allows (1: element by element) */
    bool in_regs;   /* inside such a loop: row-varying loads read the registers c<j>[u] */
    bool folded;    /* ... and expression fold_expr (elementwise ops of such rows, as a bias
                       and a residual add) has replaced input fold_arg's registers: it reads
                       them, and the expressions under it (fold_inner) are not computed */
    int fold_expr, fold_arg;
    const bool *fold_inner;
    /* ROW in registers: expressions whose per-element values an earlier
     * stage's loop kept in an array x<i>[u] (kept_avail: read them there,
     * not recomputed), and those the current loop computes and keeps
     * (kept_now). NULL outside such a row. */
    const bool *kept_avail, *kept_now;
};

/* A line at the current indent. */
void kn_kir_line(kn_kir_rctx *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The element type of a buffer of dt, as the generated code declares it. */
const char *kn_kir_storage_name(kn_dtype dt);

/* The target's unroll pragma (before an innermost loop) when cfg.unroll asks for one. */
void kn_kir_put_unroll(kn_kir_rctx *r);

/* The text of argument j's element at the loop indices of dims < upto. */
void kn_kir_put_elem(kn_kir_rctx *r, int j, int upto);

/* The store of a whole vector `value` of output j at the loop indices (a
 * line of its own). */
void kn_kir_put_vec_store(kn_kir_rctx *r, int j, int V, const char *value);

/* The stores (and the expressions they need) with per_row == want_per_row
 * (every store outside ROW kernels), indexed by the dims < upto. */
kn_status kn_kir_render_stores(kn_kir_rctx *r, bool want_per_row, int upto);

/* The stages of one row, then its stores. `lo`, `step`: the row loop's
 * start and step (one thread: 0 and 1); `per_row_open`: the line that opens
 * the block writing the per-row values ("{", or a guard choosing one
 * thread of the row). */
kn_status kn_kir_row_body(kn_kir_rctx *r, const char *lo, const char *step, const char *per_row_open);

/* Stage s's accumulator type, and acc = combine(acc, val) for it. */
/* For a row held in registers in vectors (r->regs_k, r->regs_v > 1): the
 * condition under which this row can move in whole vectors, as C text
 * (its length a multiple of regs_v, every vector argument's row start
 * aligned to its vector; a view's offset or a dynamic size may break it).
 * The target takes the register path only where it holds, so that path
 * has no element-by-element copy of the row (which cost ~50 registers). */
void kn_kir_put_row_vec_ok(kn_kir_rctx *r);
/* ROW kernel k: the bytes per row element of the inputs a row held in
 * registers keeps through its stages (the others load right before the
 * stores; a folded input pair counts once), for a target's register budget. */
size_t kn_kir_row_early_bytes(const struct kn_kernel *k);
const char *kn_kir_acc_type(const kn_kir_rctx *r, int s);
void kn_kir_combine(kn_kir_rctx *r, int s, const char *acc, const char *val);

#endif
