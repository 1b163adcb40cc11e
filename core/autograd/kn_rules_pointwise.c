/* kn_rules_pointwise: gradient rules of the elementwise ops (unary,
 * binary with broadcasting, where, masked_fill). A binary op's gradient
 * has the broadcast shape; kn_gb_sum_to sums it back to each input's. */
#include "kn_grad_rules.h"

#define G (gout[0])
#define X (n->saved_in[0])
#define Y (n->saved_out[0])

static const double kn_sqrt1_2 = 0.70710678118654752440;     /* 1 / sqrt(2) */
static const double kn_inv_sqrt_2pi = 0.39894228040143267794; /* 1 / sqrt(2 pi) */
static const double kn_two_over_sqrt_pi = 1.12837916709551257390;

/* 1 where x > 0, -1 where x < 0, 0 at 0 (in x's dtype) */
static kn_tensor *sign(kn_gb *b, kn_tensor *x)
{
    if (!x) return NULL;
    kn_tensor *zero = kn_gb_scalar(b, 0, x->dtype);
    kn_tensor *pos = kn_gb_cast(b, kn_gb_binary(b, KN_OP_GT, x, zero), x->dtype);
    kn_tensor *neg = kn_gb_cast(b, kn_gb_binary(b, KN_OP_LT, x, zero), x->dtype);
    return kn_gb_sub(b, pos, neg);
}

/* 1 - x (broadcasting a 0-dim one) */
static kn_tensor *one_minus(kn_gb *b, kn_tensor *x)
{
    return x ? kn_gb_sub(b, kn_gb_scalar(b, 1, x->dtype), x) : NULL;
}

void kn_grad_neg(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    (void)n;
    gin[0] = kn_gb_unary(b, KN_OP_NEG, G);
}

void kn_grad_relu(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* the output is positive exactly where the input is */
    gin[0] = kn_gb_zero_where(b, G, kn_gb_binary(b, KN_OP_LE, Y, kn_gb_scalar(b, 0, Y->dtype)));
}

void kn_grad_gelu(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* d/dx x Phi(x) = Phi(x) + x phi(x) */
    kn_tensor *cdf = kn_gb_muls(b, kn_gb_adds(b, kn_gb_unary(b, KN_OP_ERF, kn_gb_muls(b, X, kn_sqrt1_2)), 1), 0.5);
    kn_tensor *pdf = kn_gb_muls(b, kn_gb_unary(b, KN_OP_EXP, kn_gb_muls(b, kn_gb_mul(b, X, X), -0.5)), kn_inv_sqrt_2pi);
    gin[0] = kn_gb_mul(b, G, kn_gb_add(b, cdf, kn_gb_mul(b, X, pdf)));
}

void kn_grad_gelu_tanh(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* y = x (1 + t) / 2 with t = tanh(c (x + k x^3)):
     * dy/dx = (1 + t) / 2 + x (1 - t^2) c (1 + 3 k x^2) / 2 */
    const double c = 0.79788456080286535588, k = 0.044715;
    kn_tensor *x2 = kn_gb_mul(b, X, X);
    kn_tensor *inner = kn_gb_muls(b, kn_gb_add(b, X, kn_gb_muls(b, kn_gb_mul(b, x2, X), k)), c);
    kn_tensor *t = kn_gb_unary(b, KN_OP_TANH, inner);
    kn_tensor *slope = kn_gb_muls(b, kn_gb_adds(b, kn_gb_muls(b, x2, 3 * k), 1), c);
    kn_tensor *d = kn_gb_add(b, kn_gb_muls(b, kn_gb_adds(b, t, 1), 0.5),
                             kn_gb_muls(b, kn_gb_mul(b, kn_gb_mul(b, X, one_minus(b, kn_gb_mul(b, t, t))), slope), 0.5));
    gin[0] = kn_gb_mul(b, G, d);
}

void kn_grad_silu(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* d/dx x s(x) = s (1 + x (1 - s)) */
    kn_tensor *s = kn_gb_unary(b, KN_OP_SIGMOID, X);
    kn_tensor *d = kn_gb_mul(b, s, kn_gb_adds(b, kn_gb_mul(b, X, one_minus(b, s)), 1));
    gin[0] = kn_gb_mul(b, G, d);
}

void kn_grad_tanh(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_mul(b, G, one_minus(b, kn_gb_mul(b, Y, Y)));
}

void kn_grad_sigmoid(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_mul(b, G, kn_gb_mul(b, Y, one_minus(b, Y)));
}

void kn_grad_exp(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_mul(b, G, Y);
}

void kn_grad_log(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_div(b, G, X);
}

void kn_grad_sqrt(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_div(b, kn_gb_muls(b, G, 0.5), Y);
}

void kn_grad_rsqrt(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3 */
    gin[0] = kn_gb_mul(b, kn_gb_muls(b, G, -0.5), kn_gb_mul(b, Y, kn_gb_mul(b, Y, Y)));
}

void kn_grad_abs(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_mul(b, G, sign(b, X));
}

void kn_grad_erf(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    kn_tensor *d = kn_gb_muls(b, kn_gb_unary(b, KN_OP_EXP, kn_gb_unary(b, KN_OP_NEG, kn_gb_mul(b, X, X))),
                              kn_two_over_sqrt_pi);
    gin[0] = kn_gb_mul(b, G, d);
}

void kn_grad_zero(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    (void)gout;
    gin[0] = kn_gb_zeros_like(b, &n->in_meta[0]);
}

void kn_grad_sin(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_mul(b, G, kn_gb_unary(b, KN_OP_COS, X));
}

void kn_grad_cos(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_mul(b, G, kn_gb_unary(b, KN_OP_NEG, kn_gb_unary(b, KN_OP_SIN, X)));
}

void kn_grad_cast(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    (void)b;
    (void)n;
    gin[0] = G; /* the engine casts it back to the input's dtype */
}

/* ---- binary ---- */

#define IN0 (&n->in_meta[0])
#define IN1 (&n->in_meta[1])
#define A (n->saved_in[0])
#define B (n->saved_in[1])

void kn_grad_add(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    if (KN_NEED(n, 0)) gin[0] = kn_gb_sum_to(b, G, IN0);
    if (KN_NEED(n, 1)) gin[1] = kn_gb_sum_to(b, G, IN1);
}

void kn_grad_sub(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    if (KN_NEED(n, 0)) gin[0] = kn_gb_sum_to(b, G, IN0);
    if (KN_NEED(n, 1)) gin[1] = kn_gb_sum_to(b, kn_gb_unary(b, KN_OP_NEG, G), IN1);
}

void kn_grad_mul(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    if (KN_NEED(n, 0)) gin[0] = kn_gb_sum_to(b, kn_gb_mul(b, G, B), IN0);
    if (KN_NEED(n, 1)) gin[1] = kn_gb_sum_to(b, kn_gb_mul(b, G, A), IN1);
}

void kn_grad_div(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    if (KN_NEED(n, 0)) gin[0] = kn_gb_sum_to(b, kn_gb_div(b, G, B), IN0);
    if (KN_NEED(n, 1)) {
        /* d(a/b)/db = -a / b^2 */
        kn_tensor *d = kn_gb_div(b, kn_gb_mul(b, G, A), kn_gb_mul(b, B, B));
        gin[1] = kn_gb_sum_to(b, kn_gb_unary(b, KN_OP_NEG, d), IN1);
    }
}

void kn_grad_pow(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    if (KN_NEED(n, 0)) {
        /* b a^(b-1); where b is 0 that is 0 (PyTorch's convention, also at a = 0) */
        kn_tensor *bm1 = kn_gb_sub(b, B, kn_gb_scalar(b, 1, B->dtype));
        kn_tensor *d = kn_gb_mul(b, B, kn_gb_binary(b, KN_OP_POW, A, bm1));
        d = kn_gb_zero_where(b, d, kn_gb_binary(b, KN_OP_EQ, B, kn_gb_scalar(b, 0, B->dtype)));
        gin[0] = kn_gb_sum_to(b, kn_gb_mul(b, G, d), IN0);
    }
    if (KN_NEED(n, 1)) {
        /* a^b log a; 0 where a is 0 (the limit for b > 0) */
        kn_tensor *d = kn_gb_mul(b, Y, kn_gb_unary(b, KN_OP_LOG, A));
        d = kn_gb_zero_where(b, d, kn_gb_binary(b, KN_OP_EQ, A, kn_gb_scalar(b, 0, A->dtype)));
        gin[1] = kn_gb_sum_to(b, kn_gb_mul(b, G, d), IN1);
    }
}

void kn_grad_minmax(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    /* the larger (smaller) operand takes the gradient; a tie splits it, as PyTorch */
    kn_op wins = n->call->op == KN_OP_MAXIMUM ? KN_OP_GT : KN_OP_LT;
    kn_dtype dt = G->dtype;
    kn_tensor *wa = kn_gb_add(b, kn_gb_cast(b, kn_gb_binary(b, wins, A, B), dt),
                              kn_gb_muls(b, kn_gb_cast(b, kn_gb_binary(b, KN_OP_EQ, A, B), dt), 0.5));
    if (KN_NEED(n, 0)) gin[0] = kn_gb_sum_to(b, kn_gb_mul(b, G, wa), IN0);
    if (KN_NEED(n, 1)) gin[1] = kn_gb_sum_to(b, kn_gb_mul(b, G, one_minus(b, wa)), IN1);
}

/* ---- ternary ---- */

void kn_grad_where(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    kn_tensor *cond = n->saved_in[0];
    if (KN_NEED(n, 1)) gin[1] = kn_gb_sum_to(b, kn_gb_where(b, cond, G, kn_gb_scalar(b, 0, G->dtype)), IN1);
    if (KN_NEED(n, 2)) gin[2] = kn_gb_sum_to(b, kn_gb_zero_where(b, G, cond), &n->in_meta[2]);
}

void kn_grad_masked_fill(kn_gb *b, const kn_grad_node *n, kn_tensor *const *gout, kn_tensor **gin)
{
    gin[0] = kn_gb_zero_where(b, G, n->saved_in[1]);
}
