/* kn_shape: shape inference for every op (kn_op_infer).
 *
 * This is the guard between user input and the kernels: every kernel may
 * assume that the call it gets passed kn_op_infer, so each rule here checks
 * input counts, NULL inputs, dtypes, dims, shapes and attributes, and names
 * the op, what it expected and what came when something is off. Dims in
 * attributes are 0-based; messages print them 1-based, as the Lua user wrote
 * them. The matmul / conv / pool rules live in kn_shape_linalg.c.
 */
#include "kn_shape.h"

#include <math.h>
#include <string.h>

#include "kn_shape_linalg.h"
#include "kn_view_meta.h"

#define SHAPE_BUF 128

static const char *op_name(const kn_opcall *c)
{
    return kn_op_name(c->op);
}

/* A shape as "{2,3}" for messages; each call site passes its own buffer. */
static const char *shp(const kn_tensor *t, char *buf)
{
    return kn_shape_str(t->ndim, t->shape, buf, SHAPE_BUF);
}

static void meta_set(kn_meta *m, kn_dtype dt, int ndim, const int64_t *shape)
{
    memset(m, 0, sizeof *m);
    m->dtype = dt;
    m->ndim = ndim;
    if (ndim > 0) memcpy(m->shape, shape, sizeof(int64_t) * (size_t)ndim);
}

/* Tensors come from the library, but a corrupt header must not make a rule
 * index past its arrays, so the fields every rule relies on are checked. */
static kn_status check_tensor(const kn_opcall *c, int i)
{
    const kn_tensor *t = c->in[i];
    if (!t) return kn_error(KN_ERR_ARG, "%s: input %d is missing (NULL)", op_name(c), i + 1);
    if ((unsigned)t->dtype >= KN_DTYPE_COUNT)
        return kn_error(KN_ERR_DTYPE, "%s: input %d has an invalid dtype (%d)", op_name(c), i + 1,
                        (int)t->dtype);
    if (t->ndim < 0 || t->ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_SHAPE, "%s: input %d has %d dims, expected 0 to %d", op_name(c),
                        i + 1, t->ndim, KN_MAX_DIMS);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0)
            return kn_error(KN_ERR_SHAPE, "%s: input %d has a negative size %lld at dim %d",
                            op_name(c), i + 1, (long long)t->shape[d], d + 1);
    return KN_OK;
}

/* Check that the call has lo..hi inputs, all present and sane. `sig` says
 * what the inputs are, for the message. */
static kn_status check_count(const kn_opcall *c, int lo, int hi, const char *sig)
{
    if (c->n_in < lo || c->n_in > hi) {
        if (lo == hi)
            return kn_error(KN_ERR_ARG, "%s: expects %d input%s (%s), got %d", op_name(c), lo,
                            lo == 1 ? "" : "s", sig, c->n_in);
        return kn_error(KN_ERR_ARG, "%s: expects %d to %d inputs (%s), got %d", op_name(c), lo,
                        hi, sig, c->n_in);
    }
    for (int i = 0; i < c->n_in; i++) KN_TRY(check_tensor(c, i));
    return KN_OK;
}

kn_status kn_shape_check_inputs(const kn_opcall *c, int n)
{
    if (n < 0 || n > KN_MAX_INPUTS)
        return kn_error(KN_ERR_ARG, "%s: bad input count %d", op_name(c), n);
    return check_count(c, n, n, n == 1 ? "a tensor" : "tensors");
}

kn_status kn_shape_broadcast(const char *what, int na, const int64_t *a, int nb,
                             const int64_t *b, int *nout, int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int ia = na - n + i, ib = nb - n + i;
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da == db || db == 1) out[i] = da;
        else if (da == 1) out[i] = db;
        else {
            char sa[SHAPE_BUF], sb[SHAPE_BUF];
            return kn_error(KN_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast", what,
                            kn_shape_str(na, a, sa, SHAPE_BUF), kn_shape_str(nb, b, sb, SHAPE_BUF));
        }
    }
    *nout = n;
    return KN_OK;
}

/* A dim attribute against a tensor of `ndim` dims (a scalar accepts dim 0,
 * as PyTorch's dim=-1 on a scalar). */
static kn_status check_dim(const kn_opcall *c, int dim, int ndim)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < 0 || dim >= n)
        return kn_error(KN_ERR_ARG, "%s: dim %d out of range for a tensor with %d dims",
                        op_name(c), dim >= 0 ? dim + 1 : dim, ndim);
    return KN_OK;
}

static kn_status need_float(const kn_opcall *c, const kn_tensor *t, const char *which)
{
    if (!kn_dtype_is_float(t->dtype))
        return kn_error(KN_ERR_DTYPE, "%s: needs a float %s, got %s", op_name(c), which,
                        kn_dtype_name(t->dtype));
    return KN_OK;
}

static kn_status need_index_dtype(const kn_opcall *c, const kn_tensor *t)
{
    if (t->dtype != KN_I32 && t->dtype != KN_I64)
        return kn_error(KN_ERR_DTYPE, "%s: index must be i32 or i64, got %s", op_name(c),
                        kn_dtype_name(t->dtype));
    return KN_OK;
}

static kn_status need_dims(const kn_opcall *c, const kn_tensor *t, int min, const char *which)
{
    if (t->ndim < min)
        return kn_error(KN_ERR_SHAPE, "%s: %s needs at least %d dim%s, got %d", op_name(c), which,
                        min, min == 1 ? "" : "s", t->ndim);
    return KN_OK;
}

/* A number bound for a tensor of dtype dt: into an integer dtype it must be
 * finite and, truncated toward zero as stores do, within the dtype's range
 * (it used to saturate silently: arange past 2^31 in i32 repeated
 * 2147483647). */
static kn_status check_value(const kn_opcall *c, double v, kn_dtype dt, const char *which)
{
    return kn_dtype_check_value(op_name(c), which, v, dt);
}

/* ---- elementwise ---- */

static kn_status infer_unary(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 1, 1, "a tensor"));
    const kn_tensor *x = c->in[0];
    kn_dtype dt = x->dtype;
    switch (c->op) {
    case KN_OP_NEG:
        if (dt == KN_BOOL)
            return kn_error(KN_ERR_DTYPE, "neg: not defined for a bool tensor, use logical_not");
        break;
    case KN_OP_ABS:
    case KN_OP_RELU: break;
    case KN_OP_LOGICAL_NOT: dt = KN_BOOL; break;
    case KN_OP_CAST:
        if ((unsigned)c->a.dtype >= KN_DTYPE_COUNT)
            return kn_error(KN_ERR_DTYPE, "cast: invalid target dtype (%d)", (int)c->a.dtype);
        dt = c->a.dtype;
        break;
    default: /* exp, sqrt, gelu, ...: integers compute in f32, as PyTorch */
        if (!kn_dtype_is_float(dt)) dt = KN_F32;
        break;
    }
    meta_set(out, dt, x->ndim, x->shape);
    return KN_OK;
}

static kn_status infer_binary(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 2, 2, "two tensors"));
    const kn_tensor *a = c->in[0], *b = c->in[1];
    int64_t shape[KN_MAX_DIMS];
    int n;
    KN_TRY(kn_shape_broadcast(op_name(c), a->ndim, a->shape, b->ndim, b->shape, &n, shape));
    kn_dtype dt = kn_dtype_promote(a->dtype, b->dtype);
    if (kn_op_kind_of(c->op) == KN_K_COMPARE) dt = KN_BOOL;
    else if (c->op == KN_OP_DIV && !kn_dtype_is_float(dt)) dt = KN_F32; /* true division */
    else if (c->op == KN_OP_SUB && dt == KN_BOOL)
        return kn_error(KN_ERR_DTYPE, "sub: not defined for two bool tensors, use logical ops");
    meta_set(out, dt, n, shape);
    return KN_OK;
}

static kn_status infer_where(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 3, 3, "condition, x, y"));
    const kn_tensor *cond = c->in[0], *x = c->in[1], *y = c->in[2];
    if (cond->dtype != KN_BOOL)
        return kn_error(KN_ERR_DTYPE, "where: condition must be bool, got %s",
                        kn_dtype_name(cond->dtype));
    int64_t s1[KN_MAX_DIMS], s2[KN_MAX_DIMS];
    int n1, n2;
    KN_TRY(kn_shape_broadcast("where", cond->ndim, cond->shape, x->ndim, x->shape, &n1, s1));
    KN_TRY(kn_shape_broadcast("where", n1, s1, y->ndim, y->shape, &n2, s2));
    meta_set(out, kn_dtype_promote(x->dtype, y->dtype), n2, s2);
    return KN_OK;
}

static kn_status infer_masked(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 2, 2, "x, mask"));
    const kn_tensor *x = c->in[0], *m = c->in[1];
    char sx[SHAPE_BUF], sm[SHAPE_BUF];
    if (m->dtype != KN_BOOL)
        return kn_error(KN_ERR_DTYPE, "masked_fill: mask must be bool, got %s",
                        kn_dtype_name(m->dtype));
    int64_t s[KN_MAX_DIMS];
    int n;
    kn_status st = kn_shape_broadcast("masked_fill", x->ndim, x->shape, m->ndim, m->shape, &n, s);
    if (st != KN_OK || n != x->ndim || memcmp(s, x->shape, sizeof(int64_t) * (size_t)n) != 0)
        return kn_error(KN_ERR_SHAPE, "masked_fill: mask of shape %s cannot be broadcast to x's shape %s",
                        shp(m, sm), shp(x, sx));
    KN_TRY(check_value(c, c->a.value, x->dtype, "value"));
    meta_set(out, x->dtype, x->ndim, x->shape);
    return KN_OK;
}

/* ---- reductions ---- */

int kn_shape_leading_reduced(int ndim, const bool *red)
{
    int k = 0;
    while (k < ndim && red[k]) k++;
    if (k == 0 || k == ndim) return 0;
    for (int d = k; d < ndim; d++)
        if (red[d]) return 0;
    return k;
}

static kn_status infer_reduce(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 1, 1, "a tensor"));
    const kn_tensor *x = c->in[0];
    if ((c->op == KN_OP_MEAN || c->op == KN_OP_VAR) && !kn_dtype_is_float(x->dtype))
        return kn_error(KN_ERR_DTYPE, "%s: needs a float tensor, got %s", op_name(c),
                        kn_dtype_name(x->dtype));
    if (c->a.ndims < 0 || c->a.ndims > KN_MAX_DIMS)
        return kn_error(KN_ERR_ARG, "%s: %d dims given, expected 0 to %d", op_name(c),
                        c->a.ndims, KN_MAX_DIMS);
    bool red[KN_MAX_DIMS] = {false};
    for (int i = 0; i < c->a.ndims; i++) {
        int d = c->a.dims[i];
        KN_TRY(check_dim(c, d, x->ndim));
        if (x->ndim == 0) continue; /* dim 1 of a scalar reduces nothing */
        if (red[d])
            return kn_error(KN_ERR_ARG, "%s: dim %d appears twice in the reduced dims", op_name(c),
                            d + 1);
        red[d] = true;
    }
    if (c->a.ndims == 0)
        for (int d = 0; d < x->ndim; d++) red[d] = true;
    if (c->op == KN_OP_AMAX || c->op == KN_OP_AMIN)
        for (int d = 0; d < x->ndim; d++)
            if (red[d] && x->shape[d] == 0)
                return kn_error(KN_ERR_SHAPE, "%s: cannot reduce a zero-size dim (dim %d)",
                                op_name(c), d + 1);
    int64_t s[KN_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!red[d]) s[n++] = x->shape[d];
        else if (c->a.keepdim) s[n++] = 1;
    }
    kn_dtype dt = x->dtype;
    if (c->op == KN_OP_SUM && !kn_dtype_is_float(dt)) dt = KN_I64;
    if (c->a.widen) {
        if (c->op != KN_OP_SUM && c->op != KN_OP_MEAN && c->op != KN_OP_VAR)
            return kn_error(KN_ERR_ARG, "%s: only sum, mean and var widen their result", op_name(c));
        if (!kn_dtype_is_float(dt) || !kn_dtype_is_float(c->a.dtype) ||
            kn_dtype_size(c->a.dtype) <= kn_dtype_size(dt))
            return kn_error(KN_ERR_DTYPE, "%s: cannot widen a %s result to %s", op_name(c), kn_dtype_name(dt),
                            kn_dtype_name(c->a.dtype));
        dt = c->a.dtype;
    }
    meta_set(out, dt, n, s);
    return KN_OK;
}

static kn_status infer_argreduce(const kn_opcall *c, kn_meta out[KN_MAX_OUTPUTS], int *n_out)
{
    KN_TRY(check_count(c, 1, 1, "a tensor"));
    const kn_tensor *x = c->in[0];
    int dim = c->a.dim;
    KN_TRY(check_dim(c, dim, x->ndim));
    int64_t s[KN_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d != dim) s[n++] = x->shape[d];
        else if (c->a.keepdim) s[n++] = 1;
    }
    if (x->ndim > 0 && x->shape[dim] == 0)
        return kn_error(KN_ERR_SHAPE, "%s: cannot reduce a zero-size dim (dim %d)", op_name(c),
                        dim + 1);
    meta_set(&out[0], x->dtype, n, s);
    meta_set(&out[1], KN_I64, n, s);
    *n_out = 2;
    return KN_OK;
}

static kn_status infer_softmax(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 1, 1, "a tensor"));
    const kn_tensor *x = c->in[0];
    KN_TRY(need_float(c, x, "tensor"));
    KN_TRY(check_dim(c, c->a.dim, x->ndim));
    meta_set(out, x->dtype, x->ndim, x->shape);
    return KN_OK;
}

/* ---- normalizations ---- */

static kn_status check_eps(const kn_opcall *c)
{
    if (!(c->a.eps >= 0) || isinf(c->a.eps))
        return kn_error(KN_ERR_ARG, "%s: eps must be a finite number >= 0, got %g", op_name(c),
                        c->a.eps);
    return KN_OK;
}

static kn_status infer_layer_norm(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 1, 3, "x [, weight [, bias]]"));
    const kn_tensor *x = c->in[0];
    char sx[SHAPE_BUF], sn[SHAPE_BUF], sw[SHAPE_BUF];
    KN_TRY(need_float(c, x, "input"));
    KN_TRY(check_eps(c));
    int k = c->a.nshape;
    if (k < 1 || k > x->ndim)
        return kn_error(KN_ERR_SHAPE,
                        "layer_norm: normalized shape must have 1 to %d dims for an input of shape %s, got %d",
                        x->ndim, shp(x, sx), k);
    kn_shape_str(k, c->a.shape, sn, SHAPE_BUF);
    for (int i = 0; i < k; i++)
        if (c->a.shape[i] != x->shape[x->ndim - k + i])
            return kn_error(KN_ERR_SHAPE,
                            "layer_norm: normalized shape %s does not match the last dims of the input's shape %s",
                            sn, shp(x, sx));
    for (int i = 1; i < c->n_in; i++) {
        const kn_tensor *w = c->in[i];
        const char *which = i == 1 ? "weight" : "bias";
        KN_TRY(need_float(c, w, which));
        if (w->ndim != k || memcmp(w->shape, c->a.shape, sizeof(int64_t) * (size_t)k) != 0)
            return kn_error(KN_ERR_SHAPE, "layer_norm: %s must have the normalized shape %s, got %s",
                            which, sn, shp(w, sw));
    }
    meta_set(out, x->dtype, x->ndim, x->shape);
    return KN_OK;
}

static kn_status infer_batch_norm(const kn_opcall *c, kn_meta *out)
{
    static const char *const names[] = {"input", "running mean", "running var", "weight", "bias"};
    KN_TRY(check_count(c, 3, 5, "x, mean, var [, weight [, bias]]"));
    const kn_tensor *x = c->in[0];
    char sx[SHAPE_BUF], sw[SHAPE_BUF];
    KN_TRY(need_float(c, x, "input"));
    KN_TRY(check_eps(c));
    if (x->ndim < 2)
        return kn_error(KN_ERR_SHAPE, "batch_norm: input must have at least 2 dims (N, C, ...), got shape %s",
                        shp(x, sx));
    /* channels-last (the layout pass's form): the channels are the last dim */
    int64_t channels = c->a.in_layout == KN_LAYOUT_NHWC ? x->shape[x->ndim - 1] : x->shape[1];
    for (int i = 1; i < c->n_in; i++) {
        const kn_tensor *p = c->in[i];
        KN_TRY(need_float(c, p, names[i]));
        if (p->ndim != 1 || p->shape[0] != channels)
            return kn_error(KN_ERR_SHAPE, "batch_norm: %s must have shape {%lld} (the channels of input %s), got %s",
                            names[i], (long long)channels, shp(x, sx), shp(p, sw));
    }
    meta_set(out, x->dtype, x->ndim, x->shape);
    return KN_OK;
}

/* ---- data movement ---- */

static kn_status infer_cat(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 1, KN_MAX_INPUTS, "tensors"));
    const kn_tensor *x0 = c->in[0];
    int dim = c->a.dim;
    if (x0->ndim == 0)
        return kn_error(KN_ERR_SHAPE, "cat: cannot concatenate 0-dim tensors (input 1 is a scalar)");
    KN_TRY(check_dim(c, dim, x0->ndim));
    int64_t s[KN_MAX_DIMS];
    memcpy(s, x0->shape, sizeof s);
    kn_dtype dt = x0->dtype;
    for (int i = 1; i < c->n_in; i++) {
        const kn_tensor *x = c->in[i];
        if (x->ndim != x0->ndim)
            return kn_error(KN_ERR_SHAPE, "cat: input %d has %d dims but input 1 has %d", i + 1,
                            x->ndim, x0->ndim);
        for (int d = 0; d < x->ndim; d++)
            if (d != dim && x->shape[d] != x0->shape[d])
                return kn_error(KN_ERR_SHAPE,
                                "cat: input %d has size %lld at dim %d but input 1 has %lld (only dim %d may differ)",
                                i + 1, (long long)x->shape[d], d + 1, (long long)x0->shape[d],
                                dim + 1);
        s[dim] += x->shape[dim]; /* each size is bounded by KN_MAX_BYTES: no overflow */
        dt = kn_dtype_promote(dt, x->dtype);
    }
    meta_set(out, dt, x0->ndim, s);
    return KN_OK;
}

static kn_status infer_index_select(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 2, 2, "x, index"));
    const kn_tensor *x = c->in[0], *idx = c->in[1];
    char si[SHAPE_BUF];
    KN_TRY(need_dims(c, x, 1, "x"));
    KN_TRY(check_dim(c, c->a.dim, x->ndim));
    KN_TRY(need_index_dtype(c, idx));
    if (idx->ndim != 1)
        return kn_error(KN_ERR_SHAPE, "index_select: index must be 1-D, got shape %s", shp(idx, si));
    int64_t s[KN_MAX_DIMS];
    memcpy(s, x->shape, sizeof s);
    s[c->a.dim] = idx->shape[0];
    meta_set(out, x->dtype, x->ndim, s);
    return KN_OK;
}

static kn_status infer_gather(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 2, 2, "x, index"));
    const kn_tensor *x = c->in[0], *idx = c->in[1];
    char sx[SHAPE_BUF], si[SHAPE_BUF];
    KN_TRY(need_dims(c, x, 1, "x"));
    KN_TRY(check_dim(c, c->a.dim, x->ndim));
    KN_TRY(need_index_dtype(c, idx));
    if (idx->ndim != x->ndim)
        return kn_error(KN_ERR_SHAPE, "gather: index must have as many dims as x (%d), got shape %s",
                        x->ndim, shp(idx, si));
    for (int d = 0; d < x->ndim; d++)
        if (d != c->a.dim && idx->shape[d] > x->shape[d])
            return kn_error(KN_ERR_SHAPE,
                            "gather: index of shape %s is larger than x of shape %s at dim %d",
                            shp(idx, si), shp(x, sx), d + 1);
    meta_set(out, x->dtype, idx->ndim, idx->shape);
    return KN_OK;
}

static kn_status infer_index_add(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 3, 3, "x, index, source"));
    const kn_tensor *x = c->in[0], *idx = c->in[1], *src = c->in[2];
    char sx[SHAPE_BUF], si[SHAPE_BUF], ss[SHAPE_BUF];
    int dim = c->a.dim;
    KN_TRY(need_dims(c, x, 1, "x"));
    KN_TRY(check_dim(c, dim, x->ndim));
    KN_TRY(need_index_dtype(c, idx));
    if (idx->ndim != 1)
        return kn_error(KN_ERR_SHAPE, "index_add: index must be 1-D, got shape %s", shp(idx, si));
    if (src->dtype != x->dtype)
        return kn_error(KN_ERR_DTYPE, "index_add: source must have x's dtype %s, got %s",
                        kn_dtype_name(x->dtype), kn_dtype_name(src->dtype));
    bool okshape = src->ndim == x->ndim;
    for (int d = 0; okshape && d < x->ndim; d++)
        okshape = src->shape[d] == (d == dim ? idx->shape[0] : x->shape[d]);
    if (!okshape)
        return kn_error(KN_ERR_SHAPE,
                        "index_add: source must have x's shape %s with %lld at dim %d (the index length), got %s",
                        shp(x, sx), (long long)idx->shape[0], dim + 1, shp(src, ss));
    meta_set(out, x->dtype, x->ndim, x->shape);
    return KN_OK;
}

/* gather_scatter(h, src, dst [, weight] [, base]): out = base, or zeros of
 * attr.shape[0] rows (attr.nshape == 1: the zero fill folded into the op);
 * out[dst[e], ...] += h[src[e], ...] * weight[e]. Rows are dim 0; weight
 * is one number per edge ({E} or {E, 1, ...}). */
static kn_status infer_gather_scatter(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 3, 5, "h, src, dst [, weight] [, base]"));
    const kn_tensor *h = c->in[0], *src = c->in[1], *dst = c->in[2];
    char s1[SHAPE_BUF], s2[SHAPE_BUF];
    KN_TRY(need_dims(c, h, 1, "h"));
    KN_TRY(need_float(c, h, "h"));
    if (c->a.dim != 0)
        return kn_error(KN_ERR_ARG, "gather_scatter: gathers and scatters rows (dim 1), got dim %d", c->a.dim + 1);
    KN_TRY(need_index_dtype(c, src));
    KN_TRY(need_index_dtype(c, dst));
    if (src->ndim != 1 || dst->ndim != 1 || src->shape[0] != dst->shape[0])
        return kn_error(KN_ERR_SHAPE, "gather_scatter: src and dst must be 1-D of one length (one per edge), got %s and %s",
                        shp(src, s1), shp(dst, s2));
    int64_t edges = src->shape[0];
    bool has_base = c->a.nshape == 0;
    if (!has_base && (c->a.nshape != 1 || c->a.shape[0] < 0))
        return kn_error(KN_ERR_ARG, "gather_scatter: without a base, attr shape must be {rows}, got %d dims",
                        c->a.nshape);
    int n_w = c->n_in - 3 - (has_base ? 1 : 0);
    if (n_w < 0 || n_w > 1)
        return kn_error(KN_ERR_ARG, "gather_scatter: %d inputs do not fit h, src, dst [, weight]%s", c->n_in,
                        has_base ? ", base (a base was asked for: attr shape is empty)" : " (no base: rows given)");
    if (n_w) {
        const kn_tensor *w = c->in[3];
        bool per_edge = w->ndim >= 1 && w->shape[0] == edges && w->ndim <= h->ndim;
        for (int d = 1; per_edge && d < w->ndim; d++) per_edge = w->shape[d] == 1;
        if (!per_edge)
            return kn_error(KN_ERR_SHAPE,
                            "gather_scatter: weight must hold one number per edge ({%lld} or {%lld, 1, ...}), got %s",
                            (long long)edges, (long long)edges, shp(w, s1));
        if (w->dtype != h->dtype)
            return kn_error(KN_ERR_DTYPE, "gather_scatter: weight must have h's dtype %s, got %s",
                            kn_dtype_name(h->dtype), kn_dtype_name(w->dtype));
    }
    int64_t s[KN_MAX_DIMS];
    memcpy(s, h->shape, sizeof s);
    if (has_base) {
        const kn_tensor *b = c->in[c->n_in - 1];
        bool fits = b->ndim == h->ndim;
        for (int d = 1; fits && d < h->ndim; d++) fits = b->shape[d] == h->shape[d];
        if (!fits)
            return kn_error(KN_ERR_SHAPE, "gather_scatter: base must have h's shape %s but for dim 1, got %s",
                            shp(h, s1), shp(b, s2));
        if (b->dtype != h->dtype)
            return kn_error(KN_ERR_DTYPE, "gather_scatter: base must have h's dtype %s, got %s",
                            kn_dtype_name(h->dtype), kn_dtype_name(b->dtype));
        s[0] = b->shape[0];
    } else {
        s[0] = c->a.shape[0];
    }
    /* the epilogue (kn_pass_gather_scatter): activations, then a row op last */
    if (c->a.n_epilogue < 0 || c->a.n_epilogue > KN_GATHER_SCATTER_EPILOGUE_MAX)
        return kn_error(KN_ERR_ARG, "gather_scatter: an epilogue of %d ops (at most %d)", c->a.n_epilogue,
                        KN_GATHER_SCATTER_EPILOGUE_MAX);
    for (int i = 0; i < c->a.n_epilogue; i++) {
        int op = c->a.epilogue[i];
        bool row = op == KN_OP_SOFTMAX || op == KN_OP_LOG_SOFTMAX;
        if (!row && op != KN_OP_RELU && op != KN_OP_GELU && op != KN_OP_SILU && op != KN_OP_SIGMOID && op != KN_OP_TANH)
            return kn_error(KN_ERR_ARG, "gather_scatter: epilogue op %d is %s, not relu, gelu, silu, sigmoid, tanh, "
                            "softmax or log_softmax", i + 1, kn_op_name((kn_op)op));
        if (row && (i != c->a.n_epilogue - 1 || h->ndim != 2 || h->shape[1] > KN_GATHER_SCATTER_ROW_MAX))
            return kn_error(KN_ERR_ARG, "gather_scatter: a %s epilogue comes last, on a 2-D result of at most %d "
                            "columns, got op %d of %d on %s", kn_op_name((kn_op)op), KN_GATHER_SCATTER_ROW_MAX, i + 1,
                            c->a.n_epilogue, shp(h, s1));
    }
    meta_set(out, h->dtype, h->ndim, s);
    return KN_OK;
}

static kn_status infer_tri(const kn_opcall *c, kn_meta *out)
{
    KN_TRY(check_count(c, 1, 1, "a tensor"));
    const kn_tensor *x = c->in[0];
    KN_TRY(need_dims(c, x, 2, "the input"));
    meta_set(out, x->dtype, x->ndim, x->shape);
    return KN_OK;
}

/* ---- creation ---- */

static kn_status infer_create(const kn_opcall *c, kn_meta *out)
{
    const kn_attrs *a = &c->a;
    if (c->n_in != 0)
        return kn_error(KN_ERR_ARG, "%s: takes no input tensors, got %d", op_name(c), c->n_in);
    if ((unsigned)a->dtype >= KN_DTYPE_COUNT)
        return kn_error(KN_ERR_DTYPE, "%s: invalid dtype (%d)", op_name(c), (int)a->dtype);
    if (a->nshape < 0 || a->nshape > KN_MAX_DIMS)
        return kn_error(KN_ERR_SHAPE, "%s: a tensor has at most %d dims, got %d", op_name(c),
                        KN_MAX_DIMS, a->nshape);
    KN_TRY(kn_shape_check(op_name(c), a->nshape, a->shape, a->dtype));
    switch (c->op) {
    case KN_OP_FULL: KN_TRY(check_value(c, a->value, a->dtype, "value")); break;
    case KN_OP_ARANGE:
        if (a->nshape != 1)
            return kn_error(KN_ERR_SHAPE, "arange: makes a 1-D tensor, got %d dims", a->nshape);
        if (!isfinite(a->value) || !isfinite(a->value2))
            return kn_error(KN_ERR_ARG, "arange: start and step must be finite, got %g and %g",
                            a->value, a->value2);
        KN_TRY(check_value(c, a->value, a->dtype, "start"));
        if (a->shape[0] > 0) /* the last value, start + (n - 1) * step */
            KN_TRY(check_value(c, a->value + (double)(a->shape[0] - 1) * a->value2, a->dtype,
                               "last value"));
        break;
    case KN_OP_RANDN:
    case KN_OP_RAND:
        if (!kn_dtype_is_float(a->dtype))
            return kn_error(KN_ERR_DTYPE, "%s: needs a float dtype, got %s", op_name(c),
                            kn_dtype_name(a->dtype));
        if (c->op == KN_OP_RAND && (!isfinite(a->value) || !isfinite(a->value2)))
            return kn_error(KN_ERR_ARG, "rand: bounds must be finite, got %g and %g", a->value,
                            a->value2);
        break;
    case KN_OP_RANDINT:
        if (!isfinite(a->value) || !isfinite(a->value2) || !(a->value2 > a->value))
            return kn_error(KN_ERR_ARG, "randint: high (%g) must be greater than low (%g)",
                            a->value2, a->value);
        if (!kn_dtype_is_float(a->dtype) && a->dtype != KN_BOOL) { /* draws are in [low, high) */
            KN_TRY(check_value(c, a->value, a->dtype, "low"));
            KN_TRY(check_value(c, ceil(a->value2) - 1, a->dtype, "high - 1"));
        }
        break;
    default: break;
    }
    meta_set(out, a->dtype, a->nshape, a->shape);
    return KN_OK;
}

/* ---- dispatch ---- */

static kn_status infer_one(const kn_opcall *c, kn_meta out[KN_MAX_OUTPUTS], int *n_out)
{
    *n_out = 1;
    switch (kn_op_kind_of(c->op)) {
    case KN_K_UNARY: return infer_unary(c, out);
    case KN_K_BINARY:
    case KN_K_COMPARE: return infer_binary(c, out);
    case KN_K_TERNARY: return infer_where(c, out);
    case KN_K_MASKED: return infer_masked(c, out);
    case KN_K_REDUCE: return infer_reduce(c, out);
    case KN_K_ARGREDUCE: return infer_argreduce(c, out, n_out);
    case KN_K_SOFTMAX: return infer_softmax(c, out);
    case KN_K_NORM:
        return c->op == KN_OP_LAYER_NORM ? infer_layer_norm(c, out) : infer_batch_norm(c, out);
    case KN_K_MATMUL: return kn_infer_matmul(c, out);
    case KN_K_CONV: return c->op == KN_OP_CONV2D ? kn_infer_conv2d(c, out) : kn_infer_conv2d_grad(c, out);
    case KN_K_POOL: return kn_infer_pool2d(c, out);
    case KN_K_ATTENTION: return kn_infer_attention(c, out);
    case KN_K_COPY:
        KN_TRY(check_count(c, 1, 1, "a tensor"));
        meta_set(out, c->in[0]->dtype, c->in[0]->ndim, c->in[0]->shape);
        return KN_OK;
    case KN_K_CAT: return infer_cat(c, out);
    case KN_K_INDEX:
        if (c->op == KN_OP_INDEX_SELECT) return infer_index_select(c, out);
        if (c->op == KN_OP_GATHER) return infer_gather(c, out);
        if (c->op == KN_OP_GATHER_SCATTER) return infer_gather_scatter(c, out);
        return infer_index_add(c, out);
    case KN_K_TRI: return infer_tri(c, out);
    case KN_K_VIEW:
        KN_TRY(check_count(c, 1, 1, "a tensor"));
        return kn_view_infer(c, out);
    case KN_K_CREATE: return infer_create(c, out);
    }
    return kn_error(KN_ERR_ARG, "%s: unknown op kind", op_name(c));
}

kn_status kn_op_infer(const kn_opcall *c, kn_meta out[KN_MAX_OUTPUTS], int *n_out)
{
    *n_out = 0;
    if (!c) return kn_error(KN_ERR_ARG, "op: no call given (NULL)");
    if ((unsigned)c->op >= KN_OP_COUNT)
        return kn_error(KN_ERR_ARG, "op: unknown op %d", (int)c->op);
    if (c->n_in < 0 || c->n_in > KN_MAX_INPUTS)
        return kn_error(KN_ERR_ARG, "%s: %d inputs given, at most %d allowed", op_name(c),
                        c->n_in, KN_MAX_INPUTS);
    int n = 1;
    KN_TRY(infer_one(c, out, &n));
    /* Broadcasting and cat can make a shape larger than any input: bound it. */
    for (int i = 0; i < n; i++)
        KN_TRY(kn_shape_check(op_name(c), out[i].ndim, out[i].shape, out[i].dtype));
    *n_out = n;
    return KN_OK;
}
