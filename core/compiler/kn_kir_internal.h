/* kn_kir_internal: what kn_kir.c (the shared expression renderer),
 * kn_kir_kernel.c (the function around a body) and kn_kir_row.c (the ROW
 * kernel body) share and no one else needs. */
#ifndef KN_KIR_INTERNAL_H
#define KN_KIR_INTERNAL_H

#include <stdbool.h>

#include "kn_kir_target.h"

struct kn_kernel;

typedef kn_kir_rctx rctx;

/* The compute type a value is rendered in (see kn_kir.c's header). */
typedef enum ctype { CT_F32, CT_F64, CT_I64, CT_BOOL } ctype;

/* kn_kir.c's helpers the row body and the function around a body use: */
const char *kn_kir_ctype_name(ctype c);             /* "float", "double", "kn_i64", "int" */
ctype kn_kir_expr_ct(const rctx *r, int i);         /* the type v<i> is rendered in */
/* mark what the marked expressions read, but not through those marked in stop */
void kn_kir_mark_deps_stop(const struct kn_kernel *k, bool *need, const bool *stop);
kn_status kn_kir_render_needed(rctx *r, const bool *need, int upto); /* render every marked expression */
void kn_kir_render_store(rctx *r, int j, int e, int upto);           /* store expression e into argument j */
/* kn_kir_kernel.c's: */
bool kn_kir_has_stores(const struct kn_kernel *k, bool per_row);    /* any store that is (not) per row */
bool kn_kir_costly_op(int op); /* an op whose value costs many instructions (a transcendental, a division) */

#endif
