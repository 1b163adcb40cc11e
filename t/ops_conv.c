/* ops_conv: conv2d, max_pool2d, avg_pool2d and adaptive_avg_pool2d against
 * float64 references computed here with naive loops, on fresh random inputs
 * (the seed is printed; KILN_TEST_SEED=N repeats a run).
 *
 * conv: stride, padding, dilation (also per-axis), groups and depthwise,
 * bias or none, unbatched input, 1x1, im2col bands and gemm blocks crossed,
 * strided inputs and weights, zero-size dims, all float dtypes and a mixed
 * pair, NaN. conv2d's gradient ops (conv2d_input_grad, conv2d_weight_grad)
 * on the same kinds of shapes. Pools: padding, dilation, ceil_mode (with PyTorch's rule that
 * the last window starts inside the input), count_include_pad both ways,
 * adaptive windows that do not divide evenly, NaN in max. Errors by
 * message. Tolerances as in ops_matmul: (terms+3)u * sum|terms| plus the
 * output's rounding.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kn_op.h"
#include "kn_tensor.h"
#include "tap.h"
#include "kn_clock.h"

#define SHAPE(...) (int64_t[]){__VA_ARGS__}

/* ---- random inputs and element access (test-side, no kernel code) ---- */

static uint64_t rng_state;

static uint64_t rnd_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rnd_uniform(void) /* [-1, 1) */
{
    return (double)(rnd_u64() >> 11) * 0x1p-52 - 1.0;
}

static void seed_rng(void)
{
    const char *s = getenv("KILN_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 10)
                      : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    rng_state = seed;
    printf("# seed %llu\n", (unsigned long long)seed);
}

/* A view with the given shape, strides and offset over fresh random storage. */
static kn_tensor *rand_view(kn_dtype dt, int nd, const int64_t *shape, const int64_t *strides,
                            int64_t offset)
{
    int64_t span = offset + 1; /* one past the furthest element */
    for (int i = 0; i < nd; i++) span += shape[i] > 0 ? (shape[i] - 1) * strides[i] : 0;
    kn_tensor *base = NULL, *v = NULL;
    if (kn_tensor_new(dt, 1, &span, KN_CPU, &base) != KN_OK) return NULL;
    char *p = kn_tensor_data(base);
    size_t esz = kn_dtype_size(dt);
    for (int64_t i = 0; i < span; i++) kn_store_f64(p + (size_t)i * esz, dt, rnd_uniform());
    kn_tensor_view_of(base, nd, shape, strides, offset, &v);
    kn_tensor_release(base);
    return v;
}

static kn_tensor *rand_tensor(kn_dtype dt, int nd, const int64_t *shape)
{
    int64_t st[KN_MAX_DIMS];
    kn_contiguous_strides(nd, shape, st);
    return rand_view(dt, nd, shape, st, 0);
}

/* The view of t with dims d0 and d1 swapped (shares storage). */
static kn_tensor *swapped(kn_tensor *t, int d0, int d1)
{
    int64_t sh[KN_MAX_DIMS], st[KN_MAX_DIMS];
    kn_tensor *v = NULL;
    memcpy(sh, t->shape, sizeof sh);
    memcpy(st, t->strides, sizeof st);
    sh[d0] = t->shape[d1], sh[d1] = t->shape[d0];
    st[d0] = t->strides[d1], st[d1] = t->strides[d0];
    kn_tensor_view_of(t, t->ndim, sh, st, t->offset, &v);
    return v;
}

/* A contiguous random tensor of logical shape `shape`, handed back as the
 * (strided) view that swaps its dims d0, d1: the data lies transposed. */
static kn_tensor *rand_transposed(kn_dtype dt, int nd, const int64_t *shape, int d0, int d1)
{
    int64_t sh[KN_MAX_DIMS];
    memcpy(sh, shape, sizeof(int64_t) * (size_t)nd);
    sh[d0] = shape[d1], sh[d1] = shape[d0];
    kn_tensor *t = rand_tensor(dt, nd, sh), *v = swapped(t, d0, d1);
    kn_tensor_release(t);
    return v;
}

static double at4(const kn_tensor *t, int64_t n, int64_t c, int64_t y, int64_t x)
{
    int64_t idx[4] = {n, c, y, x}, off = t->offset;
    const int64_t *i = t->ndim == 4 ? idx : idx + 1; /* unbatched: drop n */
    for (int d = 0; d < t->ndim; d++) off += i[d] * t->strides[d];
    return kn_load_f64((char *)t->storage->data + off * (int64_t)kn_dtype_size(t->dtype), t->dtype);
}

static void set4(kn_tensor *t, int64_t n, int64_t c, int64_t y, int64_t x, double v)
{
    int64_t idx[4] = {n, c, y, x}, off = t->offset;
    const int64_t *i = t->ndim == 4 ? idx : idx + 1;
    for (int d = 0; d < t->ndim; d++) off += i[d] * t->strides[d];
    kn_store_f64((char *)t->storage->data + off * (int64_t)kn_dtype_size(t->dtype), t->dtype, v);
}

/* NaN matches only NaN; written so that a NaN fails `<=`. */
static int close_enough(double got, double want, double bound)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= bound;
}

static void tolerances(kn_dtype out, double *u_acc, double *u_out, double *u_abs)
{
    *u_acc = out == KN_F64 ? 0x1p-53 : 0x1p-24;
    *u_out = out == KN_BF16 ? 0x1p-8 : out == KN_F16 ? 0x1p-11 : 0.0;
    *u_abs = out == KN_F16 ? 0x1p-24 : 0x1p-1000;
}

/* ---- running an op, comparing its output ---- */

typedef struct expect {
    int ndim;
    int64_t shape[4];
    double *ref, *mag; /* per output element, (n, c, y, x) row-major */
    int64_t terms;     /* most terms in one output's sum */
} expect;

static kn_tensor *run(kn_opcall *c, const char *name)
{
    kn_status st = kn_op_eager(c, KN_CPU);
    if (!ok(st == KN_OK, "%s: runs", name)) {
        printf("#   %s\n", kn_last_error());
        return NULL;
    }
    return c->out[0];
}

/* Compare out with e (freed here); out is released. */
static void compare(const char *name, kn_tensor *out, kn_dtype want_dt, expect *e)
{
    char gs[96], ws[96];
    if (!out) goto done;
    int shape_ok = out->ndim == e->ndim &&
                   memcmp(out->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim) == 0;
    ok(shape_ok, "%s: shape %s (want %s)", name, kn_shape_str(out->ndim, out->shape, gs, sizeof gs),
       kn_shape_str(e->ndim, e->shape, ws, sizeof ws));
    is_int(out->dtype, want_dt, "dtype");
    if (shape_ok && out->dtype == want_dt) {
        double ua, uo, uabs;
        tolerances(out->dtype, &ua, &uo, &uabs);
        int64_t n = kn_tensor_numel(out), bad = -1;
        const char *od = kn_tensor_data(out);
        for (int64_t i = 0; i < n && bad < 0; i++) {
            double got = kn_load_f64(od + i * (int64_t)kn_dtype_size(out->dtype), out->dtype);
            double bound = (double)(e->terms + 3) * ua * e->mag[i] + uo * fabs(e->ref[i]) + uabs;
            if (!close_enough(got, e->ref[i], bound)) bad = i;
        }
        if (!ok(bad < 0, "%s: %lld elements match the f64 reference", name, (long long)n))
            printf("#   element %lld: got %.17g want %.17g\n", (long long)bad,
                   kn_load_f64(od + bad * (int64_t)kn_dtype_size(out->dtype), out->dtype),
                   e->ref[bad]);
    }
done:
    kn_tensor_release(out);
    free(e->ref);
    free(e->mag);
}

static void expect_alloc(expect *e, int nd, const int64_t *shape)
{
    int64_t n = 1;
    e->ndim = nd;
    for (int i = 0; i < nd; i++) n *= e->shape[i] = shape[i];
    e->ref = calloc((size_t)n + 1, sizeof(double));
    e->mag = calloc((size_t)n + 1, sizeof(double));
    e->terms = 0;
}

/* PyTorch's sliding-window size, written out separately from the library's. */
static int64_t out_size(int64_t in, int k, int s, int p, int d, int ceil_mode)
{
    double q = (double)(in + 2 * p - d * (k - 1) - 1) / s;
    int64_t o = (int64_t)(ceil_mode ? ceil(q) : floor(q)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}

/* ---- conv2d ---- */

typedef struct conv_cfg {
    int s[2], p[2], d[2], groups;
} conv_cfg;

static void ref_conv(const kn_tensor *x, const kn_tensor *w, const kn_tensor *b,
                     const conv_cfg *k, expect *e)
{
    int batched = x->ndim == 4;
    int64_t N = batched ? x->shape[0] : 1, C = x->shape[batched], H = x->shape[batched + 1];
    int64_t W = x->shape[batched + 2], O = w->shape[0], cg = w->shape[1];
    int64_t kh = w->shape[2], kw = w->shape[3];
    int64_t oh = out_size(H, (int)kh, k->s[0], k->p[0], k->d[0], 0);
    int64_t ow = out_size(W, (int)kw, k->s[1], k->p[1], k->d[1], 0);
    (void)C;
    if (batched) expect_alloc(e, 4, SHAPE(N, O, oh, ow));
    else expect_alloc(e, 3, SHAPE(O, oh, ow));
    e->terms = cg * kh * kw + 1;
    int64_t i = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++, i++) {
                    int64_t g = o / (O / k->groups);
                    double s = b ? kn_load_f64((char *)b->storage->data +
                                                   (b->offset + o * b->strides[0]) *
                                                       (int64_t)kn_dtype_size(b->dtype),
                                               b->dtype)
                                 : 0.0;
                    double m = fabs(s);
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t ky = 0; ky < kh; ky++)
                            for (int64_t kx = 0; kx < kw; kx++) {
                                int64_t iy = oy * k->s[0] - k->p[0] + ky * k->d[0];
                                int64_t ix = ox * k->s[1] - k->p[1] + kx * k->d[1];
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                double t = at4(x, n, g * cg + ci, iy, ix) * at4(w, o, ci, ky, kx);
                                s += t;
                                m += fabs(t);
                            }
                    e->ref[i] = s;
                    e->mag[i] = m;
                }
}

static kn_attrs conv_attrs(kn_opcall *c, const conv_cfg *k)
{
    kn_opcall_init(c, KN_OP_CONV2D);
    for (int i = 0; i < 2; i++) {
        c->a.stride[i] = k->s[i];
        c->a.padding[i] = k->p[i];
        c->a.dilation[i] = k->d[i];
    }
    c->a.groups = k->groups;
    return c->a;
}

/* conv2d(x, w, b) against the reference; x, w, b are released. */
static void check_conv(const char *name, kn_tensor *x, kn_tensor *w, kn_tensor *b, conv_cfg k)
{
    kn_opcall c;
    expect e;
    conv_attrs(&c, &k);
    c.n_in = b ? 3 : 2;
    c.in[0] = x, c.in[1] = w, c.in[2] = b;
    kn_dtype dt = kn_dtype_promote(x->dtype, w->dtype);
    if (b) dt = kn_dtype_promote(dt, b->dtype);
    ref_conv(x, w, b, &k, &e);
    compare(name, run(&c, name), dt, &e);
    kn_tensor_release(x);
    kn_tensor_release(w);
    kn_tensor_release(b);
}

static const conv_cfg plain = {{1, 1}, {0, 0}, {1, 1}, 1};

static void test_conv(kn_dtype dt)
{
    printf("# conv2d, %s\n", kn_dtype_name(dt));
    check_conv("3x3 with bias", rand_tensor(dt, 4, SHAPE(2, 3, 9, 11)),
               rand_tensor(dt, 4, SHAPE(4, 3, 3, 3)), rand_tensor(dt, 1, SHAPE(4)), plain);
    check_conv("stride 2, padding 1, no bias", rand_tensor(dt, 4, SHAPE(2, 3, 9, 10)),
               rand_tensor(dt, 4, SHAPE(5, 3, 3, 3)), NULL, (conv_cfg){{2, 2}, {1, 1}, {1, 1}, 1});
    check_conv("dilation 2, padding 2", rand_tensor(dt, 4, SHAPE(1, 2, 10, 9)),
               rand_tensor(dt, 4, SHAPE(3, 2, 3, 3)), rand_tensor(dt, 1, SHAPE(3)),
               (conv_cfg){{1, 1}, {2, 2}, {2, 2}, 1});
    check_conv("groups 2", rand_tensor(dt, 4, SHAPE(2, 4, 8, 8)),
               rand_tensor(dt, 4, SHAPE(6, 2, 3, 3)), rand_tensor(dt, 1, SHAPE(6)),
               (conv_cfg){{1, 1}, {1, 1}, {1, 1}, 2});
    check_conv("depthwise, stride 2", rand_tensor(dt, 4, SHAPE(1, 6, 7, 7)),
               rand_tensor(dt, 4, SHAPE(6, 1, 3, 3)), NULL, (conv_cfg){{2, 2}, {1, 1}, {1, 1}, 6});
    check_conv("unbatched {C,H,W}", rand_tensor(dt, 3, SHAPE(3, 8, 8)),
               rand_tensor(dt, 4, SHAPE(5, 3, 3, 3)), rand_tensor(dt, 1, SHAPE(5)), plain);
    check_conv("1x1", rand_tensor(dt, 4, SHAPE(2, 16, 5, 5)), rand_tensor(dt, 4, SHAPE(8, 16, 1, 1)),
               NULL, plain);
    check_conv("kernel 3x2, stride {2,1}, padding {1,0}, dilation {1,2}",
               rand_tensor(dt, 4, SHAPE(1, 3, 10, 9)), rand_tensor(dt, 4, SHAPE(4, 3, 3, 2)),
               rand_tensor(dt, 1, SHAPE(4)), (conv_cfg){{2, 1}, {1, 0}, {1, 2}, 1});
    check_conv("input transposed in H, W; weight with O innermost",
               rand_transposed(dt, 4, SHAPE(2, 3, 7, 9), 2, 3),
               rand_transposed(dt, 4, SHAPE(4, 3, 3, 3), 0, 3), rand_tensor(dt, 1, SHAPE(4)),
               (conv_cfg){{1, 2}, {1, 1}, {1, 1}, 1});
    check_conv("channel slice of a wider input (offset, strides)",
               rand_view(dt, 4, SHAPE(2, 3, 6, 6), SHAPE(5 * 36, 72, 6, 1), 36), rand_tensor(dt, 4, SHAPE(2, 3, 3, 3)),
               rand_view(dt, 1, SHAPE(2), SHAPE(3), 1), plain);
}

static kn_status infer(kn_opcall *c);

/* conv2d's gradients (autograd's ops): the input's from (g, w), the
 * weight's from (x, g), against naive f64 sums over the forward's taps. */
static void ref_conv_grad(bool input_grad, const kn_tensor *x_or_g, const kn_tensor *w_or_g, const int64_t *other,
                          const conv_cfg *k, expect *e)
{
    const kn_tensor *g = input_grad ? x_or_g : w_or_g;
    const int64_t *xs = input_grad ? other : x_or_g->shape, *ws = input_grad ? w_or_g->shape : other;
    int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], O = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
    int64_t oh = g->shape[2], ow = g->shape[3], og = O / k->groups;
    expect_alloc(e, 4, input_grad ? xs : ws);
    e->terms = input_grad ? og * kh * kw : N * oh * ow;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++)
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t ky = 0; ky < kh; ky++)
                            for (int64_t kx = 0; kx < kw; kx++) {
                                int64_t iy = oy * k->s[0] - k->p[0] + ky * k->d[0];
                                int64_t ix = ox * k->s[1] - k->p[1] + kx * k->d[1];
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                int64_t c = o / og * cg + ci, i;
                                double t;
                                if (input_grad) {
                                    t = at4(g, n, o, oy, ox) * at4(w_or_g, o, ci, ky, kx);
                                    i = ((n * C + c) * H + iy) * W + ix;
                                } else {
                                    t = at4(g, n, o, oy, ox) * at4(x_or_g, n, c, iy, ix);
                                    i = ((o * cg + ci) * kh + ky) * kw + kx;
                                }
                                e->ref[i] += t;
                                e->mag[i] += fabs(t);
                            }
}

static void check_conv_grad(const char *name, bool input_grad, kn_tensor *a, kn_tensor *b, const int64_t *other,
                            conv_cfg k)
{
    kn_opcall c;
    expect e;
    conv_attrs(&c, &k);
    c.op = input_grad ? KN_OP_CONV2D_INPUT_GRAD : KN_OP_CONV2D_WEIGHT_GRAD;
    c.n_in = 2;
    c.in[0] = a, c.in[1] = b;
    c.a.nshape = 4;
    memcpy(c.a.shape, other, sizeof(int64_t) * 4);
    ref_conv_grad(input_grad, a, b, other, &k, &e);
    compare(name, run(&c, name), kn_dtype_promote(a->dtype, b->dtype), &e);
    kn_tensor_release(a);
    kn_tensor_release(b);
}

static void test_conv_grads(kn_dtype dt)
{
    printf("# conv2d_input_grad and conv2d_weight_grad, %s\n", kn_dtype_name(dt));
    struct {
        const char *name;
        int64_t x[4], w[4];
        conv_cfg k;
    } cases[] = {
        {"3x3", {2, 3, 9, 11}, {4, 3, 3, 3}, {{1, 1}, {0, 0}, {1, 1}, 1}},
        {"stride 2, padding 1", {2, 3, 9, 10}, {5, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}},
        {"dilation 2, padding {2,1}, groups 2", {1, 4, 10, 9}, {6, 2, 3, 3}, {{1, 1}, {2, 1}, {2, 2}, 2}},
        {"depthwise, stride {2,1}", {2, 6, 7, 8}, {6, 1, 3, 3}, {{2, 1}, {1, 1}, {1, 1}, 6}},
        {"7x7 stride 2 padding 3 (a stem)", {1, 3, 15, 13}, {4, 3, 7, 7}, {{2, 2}, {3, 3}, {1, 1}, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t *xs = cases[i].x, *ws = cases[i].w;
        const conv_cfg *k = &cases[i].k;
        int64_t oh = out_size(xs[2], (int)ws[2], k->s[0], k->p[0], k->d[0], 0);
        int64_t ow = out_size(xs[3], (int)ws[3], k->s[1], k->p[1], k->d[1], 0);
        char name[128];
        snprintf(name, sizeof name, "input's gradient, %s", cases[i].name);
        check_conv_grad(name, true, rand_tensor(dt, 4, SHAPE(xs[0], ws[0], oh, ow)), rand_tensor(dt, 4, ws), xs, *k);
        snprintf(name, sizeof name, "weight's gradient, %s", cases[i].name);
        check_conv_grad(name, false, rand_tensor(dt, 4, xs), rand_tensor(dt, 4, SHAPE(xs[0], ws[0], oh, ow)), ws, *k);
    }
    /* a transposed output gradient (a view) */
    check_conv_grad("input's gradient of a transposed grad_output", true,
                    rand_transposed(dt, 4, SHAPE(2, 4, 7, 9), 2, 3), rand_tensor(dt, 4, SHAPE(4, 3, 3, 3)),
                    SHAPE(2, 3, 9, 11), plain);
}

static void test_conv_grad_errors(void)
{
    printf("# conv2d's gradient ops: errors\n");
    kn_tensor *g = rand_tensor(KN_F32, 4, SHAPE(2, 4, 7, 8)), *w = rand_tensor(KN_F32, 4, SHAPE(4, 3, 3, 3));
    kn_opcall c;
    conv_attrs(&c, &plain);
    c.op = KN_OP_CONV2D_INPUT_GRAD;
    c.n_in = 2;
    c.in[0] = g, c.in[1] = w;
    c.a.nshape = 4;
    memcpy(c.a.shape, SHAPE(2, 3, 9, 11), sizeof(int64_t) * 4);
    is_int(infer(&c), KN_ERR_SHAPE, "grad_output not the forward's output: shape error");
    is_str(kn_last_error(),
           "conv2d_input_grad: grad_output {2,4,7,8} is not the shape of the forward's output {2,4,7,9}",
           "its message names both shapes");
    c.a.nshape = 0;
    is_int(infer(&c), KN_ERR_ARG, "no input shape in the attributes");
    like(kn_last_error(), "conv2d_input_grad: attr shape must be the input's 4 dims, got 0", "its message");
    c.op = KN_OP_CONV2D_WEIGHT_GRAD;
    c.a.nshape = 4;
    memcpy(c.a.shape, SHAPE(4, 5, 3, 3), sizeof(int64_t) * 4);
    c.in[0] = rand_tensor(KN_F32, 4, SHAPE(2, 3, 9, 10)), c.in[1] = g;
    is_int(infer(&c), KN_ERR_SHAPE, "a weight shape the input does not fit");
    like(kn_last_error(), "conv2d: input has 3 channels but weight expects 5", "the forward's message says why");
    kn_tensor_release((kn_tensor *)c.in[0]);
    kn_tensor_release(g);
    kn_tensor_release(w);
}

static void test_conv_big(void)
{
    printf("# conv2d across gemm blocks and im2col bands\n");
    /* cg*kh*kw = 288 > KC, 100 output channels > MC */
    check_conv("32 -> 100 channels, 3x3", rand_tensor(KN_F32, 4, SHAPE(1, 32, 12, 12)),
               rand_tensor(KN_F32, 4, SHAPE(100, 32, 3, 3)), rand_tensor(KN_F32, 1, SHAPE(100)),
               (conv_cfg){{1, 1}, {1, 1}, {1, 1}, 1});
    /* cg*kh*kw = 144, 298 columns per output row: the 2^18-element im2col
     * scratch holds 6 rows, so 50 bands */
    check_conv("300x300 image in several bands", rand_tensor(KN_F32, 4, SHAPE(1, 16, 300, 300)),
               rand_tensor(KN_F32, 4, SHAPE(2, 16, 3, 3)), rand_tensor(KN_F32, 1, SHAPE(2)), plain);
    check_conv("f64, groups 2, crossing KC", rand_tensor(KN_F64, 4, SHAPE(1, 64, 6, 6)),
               rand_tensor(KN_F64, 4, SHAPE(10, 32, 3, 3)), NULL, (conv_cfg){{1, 1}, {1, 1}, {1, 1}, 2});
}

static void test_conv_edge(void)
{
    printf("# conv2d: zero sizes, mixed dtypes, NaN\n");
    check_conv("batch 0", rand_tensor(KN_F32, 4, SHAPE(0, 3, 5, 5)),
               rand_tensor(KN_F32, 4, SHAPE(4, 3, 3, 3)), NULL, plain);
    check_conv("0 output channels", rand_tensor(KN_F32, 4, SHAPE(2, 3, 5, 5)),
               rand_tensor(KN_F32, 4, SHAPE(0, 3, 3, 3)), rand_tensor(KN_F32, 1, SHAPE(0)), plain);
    check_conv("0 input channels: the bias alone", rand_tensor(KN_F32, 4, SHAPE(2, 0, 5, 5)),
               rand_tensor(KN_F32, 4, SHAPE(4, 0, 3, 3)), rand_tensor(KN_F32, 1, SHAPE(4)), plain);
    check_conv("f16 input, f32 weight -> f32", rand_tensor(KN_F16, 4, SHAPE(1, 3, 6, 6)),
               rand_tensor(KN_F32, 4, SHAPE(2, 3, 3, 3)), rand_tensor(KN_BF16, 1, SHAPE(2)), plain);
    kn_tensor *x = rand_tensor(KN_F32, 4, SHAPE(1, 2, 6, 6));
    set4(x, 0, 1, 2, 3, NAN);
    check_conv("a NaN reaches the outputs whose window covers it", x,
               rand_tensor(KN_F32, 4, SHAPE(3, 2, 3, 3)), NULL, plain);
}

/* ---- pools ---- */

typedef struct pool_cfg {
    int k[2], s[2], p[2], d[2], ceil_mode, cip;
} pool_cfg;

static void ref_pool(kn_op op, const kn_tensor *x, const pool_cfg *q, const int64_t *adapt,
                     expect *e)
{
    int batched = x->ndim == 4;
    int64_t N = batched ? x->shape[0] : 1, C = x->shape[batched];
    int64_t H = x->shape[batched + 1], W = x->shape[batched + 2], oh, ow;
    if (op == KN_OP_ADAPTIVE_AVG_POOL2D) {
        oh = adapt[0], ow = adapt[1];
    } else {
        oh = out_size(H, q->k[0], q->s[0], q->p[0], q->d[0], q->ceil_mode);
        ow = out_size(W, q->k[1], q->s[1], q->p[1], q->d[1], q->ceil_mode);
    }
    if (batched) expect_alloc(e, 4, SHAPE(N, C, oh, ow));
    else expect_alloc(e, 3, SHAPE(C, oh, ow));
    e->terms = op == KN_OP_ADAPTIVE_AVG_POOL2D ? H * W : q->k[0] * q->k[1];
    int64_t i = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++, i++) {
                    double m = -INFINITY, s = 0, mag = 0;
                    int64_t in_pad = 0, inside = 0, nan = 0;
                    if (op == KN_OP_ADAPTIVE_AVG_POOL2D) {
                        int64_t y0 = (int64_t)floor((double)(oy * H) / (double)oh);
                        int64_t y1 = (int64_t)ceil((double)((oy + 1) * H) / (double)oh);
                        int64_t x0 = (int64_t)floor((double)(ox * W) / (double)ow);
                        int64_t x1 = (int64_t)ceil((double)((ox + 1) * W) / (double)ow);
                        for (int64_t y = y0; y < y1; y++)
                            for (int64_t xx = x0; xx < x1; xx++, inside++) {
                                s += at4(x, n, c, y, xx);
                                mag += fabs(at4(x, n, c, y, xx));
                            }
                        e->ref[i] = s / (double)inside;
                        e->mag[i] = mag / (double)inside;
                        continue;
                    }
                    for (int ky = 0; ky < q->k[0]; ky++)
                        for (int kx = 0; kx < q->k[1]; kx++) {
                            int64_t y = oy * q->s[0] - q->p[0] + ky * q->d[0];
                            int64_t xx = ox * q->s[1] - q->p[1] + kx * q->d[1];
                            in_pad += y < H + q->p[0] && xx < W + q->p[1];
                            if (y < 0 || y >= H || xx < 0 || xx >= W) continue;
                            double v = at4(x, n, c, y, xx);
                            inside++;
                            nan += isnan(v);
                            if (v > m) m = v;
                            s += v;
                            mag += fabs(v);
                        }
                    if (op == KN_OP_MAX_POOL2D) {
                        e->ref[i] = nan ? NAN : m;
                    } else {
                        double div = (double)(q->cip ? in_pad : inside);
                        e->ref[i] = s / div;
                        e->mag[i] = mag / div;
                    }
                }
}

static void check_pool(const char *name, kn_op op, kn_tensor *x, pool_cfg q, const int64_t *adapt,
                       const int64_t *want_hw)
{
    kn_opcall c;
    expect e;
    kn_opcall_init(&c, op);
    for (int i = 0; i < 2; i++) {
        c.a.kernel[i] = q.k[i];
        c.a.stride[i] = q.s[i];
        c.a.padding[i] = q.p[i];
        c.a.dilation[i] = q.d[i];
    }
    c.a.ceil_mode = q.ceil_mode;
    c.a.count_include_pad = q.cip;
    if (adapt) {
        c.a.nshape = 2;
        c.a.shape[0] = adapt[0], c.a.shape[1] = adapt[1];
    }
    c.n_in = 1;
    c.in[0] = x;
    ref_pool(op, x, &q, adapt, &e);
    if (want_hw) /* the size PyTorch gives, written down */
        ok(e.shape[e.ndim - 2] == want_hw[0] && e.shape[e.ndim - 1] == want_hw[1],
           "%s: output is %lldx%lld", name, (long long)want_hw[0], (long long)want_hw[1]);
    compare(name, run(&c, name), x->dtype, &e);
    kn_tensor_release(x);
}

#define POOL(k0, k1, s0, s1, p0, p1, d0, d1, ceil, cip) \
    ((pool_cfg){{k0, k1}, {s0, s1}, {p0, p1}, {d0, d1}, ceil, cip})

static void test_pools(kn_dtype dt)
{
    printf("# pools, %s\n", kn_dtype_name(dt));
    const kn_op MAXP = KN_OP_MAX_POOL2D, AVGP = KN_OP_AVG_POOL2D, ADAP = KN_OP_ADAPTIVE_AVG_POOL2D;
    check_pool("max 3x3 stride 2 padding 1", MAXP, rand_tensor(dt, 4, SHAPE(2, 3, 9, 9)),
               POOL(3, 3, 2, 2, 1, 1, 1, 1, 0, 1), NULL, SHAPE(5, 5));
    check_pool("max ceil_mode, last window dropped", MAXP, rand_tensor(dt, 4, SHAPE(1, 2, 5, 5)),
               POOL(2, 2, 2, 2, 1, 1, 1, 1, 1, 1), NULL, SHAPE(3, 3));
    check_pool("max ceil_mode, last window kept", MAXP, rand_tensor(dt, 4, SHAPE(1, 2, 8, 8)),
               POOL(3, 3, 2, 2, 0, 0, 1, 1, 1, 1), NULL, SHAPE(4, 4));
    check_pool("max dilation 2", MAXP, rand_tensor(dt, 4, SHAPE(1, 2, 9, 9)),
               POOL(3, 3, 1, 1, 1, 1, 2, 2, 0, 1), NULL, SHAPE(7, 7));
    check_pool("max 3x2 stride {1,2} padding {1,0}, unbatched", MAXP,
               rand_tensor(dt, 3, SHAPE(3, 6, 7)), POOL(3, 2, 1, 2, 1, 0, 1, 1, 0, 1), NULL,
               SHAPE(6, 3));
    check_pool("max on a transposed view", MAXP, rand_transposed(dt, 4, SHAPE(2, 2, 6, 7), 2, 3),
               POOL(2, 2, 2, 2, 0, 0, 1, 1, 0, 1), NULL, SHAPE(3, 3));
    check_pool("avg 3x3 stride 2 padding 1, count_include_pad", AVGP,
               rand_tensor(dt, 4, SHAPE(2, 3, 9, 9)), POOL(3, 3, 2, 2, 1, 1, 1, 1, 0, 1), NULL,
               SHAPE(5, 5));
    check_pool("avg 3x3 stride 2 padding 1, without pad", AVGP,
               rand_tensor(dt, 4, SHAPE(2, 3, 9, 9)), POOL(3, 3, 2, 2, 1, 1, 1, 1, 0, 0), NULL,
               SHAPE(5, 5));
    check_pool("avg ceil_mode + padding, count_include_pad", AVGP,
               rand_tensor(dt, 4, SHAPE(1, 2, 6, 6)), POOL(3, 3, 2, 2, 1, 1, 1, 1, 1, 1), NULL,
               SHAPE(4, 4));
    check_pool("avg ceil_mode + padding, without pad", AVGP, rand_tensor(dt, 4, SHAPE(1, 2, 6, 6)),
               POOL(3, 3, 2, 2, 1, 1, 1, 1, 1, 0), NULL, SHAPE(4, 4));
    check_pool("avg ceil_mode past the edge, no padding", AVGP,
               rand_tensor(dt, 3, SHAPE(2, 8, 8)), POOL(3, 3, 2, 2, 0, 0, 1, 1, 1, 1), NULL,
               SHAPE(4, 4));
    check_pool("adaptive 7x9 -> 3x4", ADAP, rand_tensor(dt, 4, SHAPE(2, 3, 7, 9)),
               POOL(0, 0, 1, 1, 0, 0, 1, 1, 0, 1), SHAPE(3, 4), NULL);
    check_pool("adaptive 3x3 -> 5x4 (overlapping windows)", ADAP,
               rand_tensor(dt, 4, SHAPE(1, 2, 3, 3)), POOL(0, 0, 1, 1, 0, 0, 1, 1, 0, 1),
               SHAPE(5, 4), NULL);
    check_pool("adaptive global 10x10 -> 1x1, unbatched", ADAP, rand_tensor(dt, 3, SHAPE(3, 10, 10)),
               POOL(0, 0, 1, 1, 0, 0, 1, 1, 0, 1), SHAPE(1, 1), NULL);
    check_pool("adaptive on a strided view", ADAP, rand_transposed(dt, 4, SHAPE(1, 3, 5, 11), 1, 2),
               POOL(0, 0, 1, 1, 0, 0, 1, 1, 0, 1), SHAPE(2, 3), NULL);
}

static void test_pool_nan(void)
{
    printf("# pools: NaN and zero sizes\n");
    kn_tensor *x = rand_tensor(KN_F32, 4, SHAPE(1, 1, 6, 6));
    set4(x, 0, 0, 2, 3, NAN);
    check_pool("max: a NaN wins its windows", KN_OP_MAX_POOL2D, x,
               POOL(3, 3, 1, 1, 1, 1, 1, 1, 0, 1), NULL, SHAPE(6, 6));
    x = rand_tensor(KN_BF16, 4, SHAPE(1, 1, 6, 6));
    set4(x, 0, 0, 0, 0, NAN);
    check_pool("max: a NaN in the corner, bf16", KN_OP_MAX_POOL2D, x,
               POOL(2, 2, 2, 2, 0, 0, 1, 1, 0, 1), NULL, SHAPE(3, 3));
    check_pool("max: batch 0", KN_OP_MAX_POOL2D, rand_tensor(KN_F32, 4, SHAPE(0, 2, 4, 4)),
               POOL(2, 2, 2, 2, 0, 0, 1, 1, 0, 1), NULL, SHAPE(2, 2));
    check_pool("avg: 0 channels", KN_OP_AVG_POOL2D, rand_tensor(KN_F32, 4, SHAPE(2, 0, 4, 4)),
               POOL(2, 2, 2, 2, 0, 0, 1, 1, 0, 1), NULL, SHAPE(2, 2));
}

/* ---- errors ---- */

static kn_status infer(kn_opcall *c)
{
    kn_meta m[KN_MAX_OUTPUTS];
    int n = 0;
    return kn_op_infer(c, m, &n);
}

static kn_status infer_conv(kn_tensor *x, kn_tensor *w, kn_tensor *b, conv_cfg k)
{
    kn_opcall c;
    conv_attrs(&c, &k);
    c.n_in = b ? 3 : 2;
    c.in[0] = x, c.in[1] = w, c.in[2] = b;
    return infer(&c);
}

static kn_status infer_pool(kn_op op, kn_tensor *x, pool_cfg q)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    for (int i = 0; i < 2; i++) {
        c.a.kernel[i] = q.k[i];
        c.a.stride[i] = q.s[i];
        c.a.padding[i] = q.p[i];
        c.a.dilation[i] = q.d[i];
    }
    c.a.ceil_mode = q.ceil_mode;
    c.n_in = 1;
    c.in[0] = x;
    return infer(&c);
}

static void test_conv_errors(void)
{
    printf("# conv2d errors\n");
    kn_tensor *x = rand_tensor(KN_F32, 4, SHAPE(1, 3, 5, 5)), *x5 = rand_tensor(KN_F32, 4, SHAPE(1, 5, 5, 5));
    kn_tensor *w = rand_tensor(KN_F32, 4, SHAPE(4, 3, 3, 3)), *w2 = rand_tensor(KN_F32, 2, SHAPE(3, 3));
    kn_tensor *x4 = rand_tensor(KN_F32, 4, SHAPE(1, 4, 5, 5)), *w52 = rand_tensor(KN_F32, 4, SHAPE(5, 2, 3, 3));
    kn_tensor *b3 = rand_tensor(KN_F32, 1, SHAPE(3)), *small = rand_tensor(KN_F32, 4, SHAPE(1, 3, 2, 2));
    kn_tensor *xi = NULL, *huge = NULL, *x2d = rand_tensor(KN_F32, 2, SHAPE(5, 5));
    kn_tensor_new(KN_I32, 4, SHAPE(1, 3, 5, 5), KN_CPU, &xi);
    const int64_t big = (int64_t)1 << 40;
    kn_tensor_view_of(x, 4, SHAPE(0, 3, big, big), SHAPE(0, 0, 0, 0), 0, &huge);

    is_int(infer_conv(x, w2, NULL, plain), KN_ERR_SHAPE, "2-D weight: shape error");
    is_str(kn_last_error(), "conv2d: weight must have 4 dims {out, in/groups, kh, kw}, got {3,3}",
           "its message");
    is_int(infer_conv(x5, w, NULL, plain), KN_ERR_SHAPE, "channel mismatch: shape error");
    like(kn_last_error(), "conv2d: input has 5 channels but weight expects 3 (groups 1)",
         "its message");
    is_int(infer_conv(x4, w52, NULL, (conv_cfg){{1, 1}, {0, 0}, {1, 1}, 2}), KN_ERR_SHAPE,
           "output channels not divisible by groups: shape error");
    like(kn_last_error(), "conv2d: weight has 5 output channels, not divisible by groups 2",
         "its message");
    is_int(infer_conv(x, w, NULL, (conv_cfg){{1, 1}, {0, 0}, {1, 1}, 0}), KN_ERR_ARG, "groups 0");
    like(kn_last_error(), "conv2d: groups must be positive, got 0", "its message");
    is_int(infer_conv(x, w, b3, plain), KN_ERR_SHAPE, "bias of the wrong size");
    like(kn_last_error(), "conv2d: bias must have shape {4}", "its message");
    like(kn_last_error(), "got {3}", "it says what came");
    is_int(infer_conv(x, w, NULL, (conv_cfg){{0, 1}, {0, 0}, {1, 1}, 1}), KN_ERR_ARG, "stride 0");
    like(kn_last_error(), "conv2d: stride must be positive, got {0,1}", "its message");
    is_int(infer_conv(x, w, NULL, (conv_cfg){{1, 1}, {0, -1}, {1, 1}, 1}), KN_ERR_ARG, "padding -1");
    like(kn_last_error(), "conv2d: padding must be non-negative, got {0,-1}", "its message");
    is_int(infer_conv(x, w, NULL, (conv_cfg){{1, 1}, {0, 0}, {0, 1}, 1}), KN_ERR_ARG, "dilation 0");
    like(kn_last_error(), "conv2d: dilation must be positive, got {0,1}", "its message");
    is_int(infer_conv(small, w, NULL, plain), KN_ERR_SHAPE, "input smaller than the kernel");
    like(kn_last_error(), "conv2d: input {1,3,2,2}", "its message names the input");
    like(kn_last_error(), "kernel 3x3", "and the kernel");
    is_int(infer_conv(xi, w, NULL, plain), KN_ERR_DTYPE, "i32 input: dtype error");
    like(kn_last_error(), "conv2d: input must be a float tensor", "its message");
    like(kn_last_error(), "got i32", "it says what came");
    is_int(infer_conv(x2d, w, NULL, plain), KN_ERR_SHAPE, "2-D input");
    like(kn_last_error(), "conv2d: input must have 4 dims {N, C, H, W} or 3 dims {C, H, W}, got {5,5}",
         "its message");
    kn_opcall c;
    conv_attrs(&c, &plain);
    c.n_in = 1;
    c.in[0] = x;
    is_int(infer(&c), KN_ERR_ARG, "one input: argument error");
    like(kn_last_error(), "conv2d: expects 2 to 3 inputs", "its message");
    ok(infer_conv(huge, w, NULL, plain) != KN_OK, "a 2^80-element result is refused");
    like(kn_last_error(), "conv2d", "its message names the op");
    ok(infer_conv(x, w, NULL, (conv_cfg){{1, 1}, {0, 0}, {2147483647, 2147483647}, 1}) != KN_OK,
       "an overflowing dilation is refused");
    like(kn_last_error(), "conv2d: input {1,3,5,5}", "its message");
    kn_tensor *t[] = {x, x5, w, w2, x4, w52, b3, small, xi, huge, x2d};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) kn_tensor_release(t[i]);
}

static void test_pool_errors(void)
{
    printf("# pool errors\n");
    const kn_op MAXP = KN_OP_MAX_POOL2D;
    kn_tensor *x = rand_tensor(KN_F32, 4, SHAPE(1, 1, 4, 4)), *x2 = rand_tensor(KN_F32, 2, SHAPE(4, 4));
    kn_tensor *e = rand_tensor(KN_F32, 4, SHAPE(1, 1, 0, 4)), *xi = NULL;
    kn_tensor_new(KN_I64, 4, SHAPE(1, 1, 4, 4), KN_CPU, &xi);
    is_int(infer_pool(MAXP, x, POOL(0, 2, 1, 1, 0, 0, 1, 1, 0, 1)), KN_ERR_ARG, "kernel 0");
    is_str(kn_last_error(), "max_pool2d: kernel size must be positive, got {0,2}", "its message");
    is_int(infer_pool(MAXP, x, POOL(3, 3, 1, 1, 2, 2, 1, 1, 0, 1)), KN_ERR_ARG,
           "padding over half the kernel");
    is_str(kn_last_error(),
           "max_pool2d: padding must be between 0 and half the kernel {3,3}, got {2,2}",
           "its message");
    is_int(infer_pool(KN_OP_AVG_POOL2D, x, POOL(2, 2, 0, 1, 0, 0, 1, 1, 0, 1)), KN_ERR_ARG, "stride 0");
    like(kn_last_error(), "avg_pool2d: stride must be positive, got {0,1}", "its message");
    is_int(infer_pool(KN_OP_AVG_POOL2D, x, POOL(2, 2, 2, 2, 0, 0, 2, 2, 0, 1)), KN_ERR_ARG,
           "avg with dilation");
    like(kn_last_error(), "avg_pool2d: dilation must be 1, got {2,2}", "its message");
    is_int(infer_pool(MAXP, x, POOL(5, 5, 1, 1, 0, 0, 1, 1, 0, 1)), KN_ERR_SHAPE,
           "input smaller than the kernel");
    like(kn_last_error(), "max_pool2d: input {1,1,4,4}", "its message names the input");
    is_int(infer_pool(MAXP, x2, POOL(2, 2, 2, 2, 0, 0, 1, 1, 0, 1)), KN_ERR_SHAPE, "2-D input");
    like(kn_last_error(), "max_pool2d: input must have 4 dims {N, C, H, W} or 3 dims {C, H, W}, got {4,4}",
         "its message");
    is_int(infer_pool(MAXP, e, POOL(1, 1, 1, 1, 0, 0, 1, 1, 0, 1)), KN_ERR_SHAPE, "height 0");
    like(kn_last_error(), "max_pool2d: input must have non-zero height and width, got {1,1,0,4}",
         "its message");
    is_int(infer_pool(MAXP, xi, POOL(2, 2, 2, 2, 0, 0, 1, 1, 0, 1)), KN_ERR_DTYPE, "i64 input");
    like(kn_last_error(), "max_pool2d: input must be a float tensor", "its message");
    ok(infer_pool(MAXP, x, POOL(2147483647, 2, 1, 1, 0, 0, 2147483647, 1, 0, 1)) != KN_OK,
       "an overflowing kernel x dilation is refused");
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ADAPTIVE_AVG_POOL2D);
    c.n_in = 1;
    c.in[0] = x;
    c.a.nshape = 1;
    c.a.shape[0] = 3;
    is_int(infer(&c), KN_ERR_ARG, "adaptive with one size");
    is_str(kn_last_error(), "adaptive_avg_pool2d: output size must be 2 positive sizes {oh, ow}, got {3}",
           "its message");
    c.a.nshape = 2;
    c.a.shape[1] = 0;
    is_int(infer(&c), KN_ERR_ARG, "adaptive to size 0");
    like(kn_last_error(), "got {3,0}", "its message");
    kn_tensor *t[] = {x, x2, e, xi};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) kn_tensor_release(t[i]);
}

/* ---- speed (a comment, not a test) ---- */

static void time_conv(int64_t n, int64_t ci, int64_t hw, int64_t co)
{
    kn_tensor *x = rand_tensor(KN_F32, 4, SHAPE(n, ci, hw, hw));
    kn_tensor *w = rand_tensor(KN_F32, 4, SHAPE(co, ci, 3, 3));
    double best = 1e30;
    int64_t o = 0;
    for (int r = 0; r < 2; r++) { /* best of 2 */
        kn_opcall c;
        conv_attrs(&c, &(conv_cfg){{2, 2}, {1, 1}, {1, 1}, 1});
        c.n_in = 2;
        c.in[0] = x, c.in[1] = w;
        double t = kn_clock_s();
        if (kn_op_eager(&c, KN_CPU) != KN_OK) break;
        t = kn_clock_s() - t;
        best = t < best ? t : best;
        o = c.out[0]->shape[2];
        kn_tensor_release(c.out[0]);
    }
    if (o > 0)
        printf("# conv2d {%lld,%lld,%lld,%lld} -> %lld, 3x3 stride 2: %.1f ms, %.1f GFLOP/s\n",
               (long long)n, (long long)ci, (long long)hw, (long long)hw, (long long)co,
               best * 1e3, 2.0 * (double)(n * co * o * o * ci * 9) / best * 1e-9);
    kn_tensor_release(x);
    kn_tensor_release(w);
}

int main(void)
{
    seed_rng();
    const kn_dtype dts[] = {KN_F32, KN_F64, KN_BF16, KN_F16};
    for (int d = 0; d < 4; d++) test_conv(dts[d]);
    test_conv_big();
    test_conv_edge();
    for (int d = 0; d < 4; d++) test_pools(dts[d]);
    test_pool_nan();
    test_conv_errors();
    for (int d = 0; d < 4; d++) test_conv_grads(dts[d]);
    test_conv_grad_errors();
    test_pool_errors();
    time_conv(4, 3, 224, 32);
    time_conv(4, 32, 112, 64);
    return done_testing();
}
