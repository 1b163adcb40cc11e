/* passes: each pass of core/compiler/kn_passes.c on small hand-built graphs: the node
 * count after it, the rewrite it made, and the outputs' values unchanged;
 * the graph checker's messages; the graph printer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_fuzz.h"
#include "kn_passes.h"
#include "tap.h"

static uint64_t rng = 12345;

static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) * 0x1p-53 * 4 - 2);
}

/* An input node of dtype dt and shape, random values (positive when pos). */
static int input(kn_graph *g, const char *name, kn_dtype dt, bool pos, int nd, const int64_t *shape)
{
    kn_tensor *t;
    if (kn_tensor_new(dt, nd, shape, KN_CPU, &t) != KN_OK) return -1;
    unsigned char *p = t->storage->data;
    for (int64_t i = 0; i < kn_tensor_numel(t); i++) {
        double v = frand();
        kn_store_f64(p + (size_t)i * kn_dtype_size(dt), dt, pos ? fabs(v) + 0.5 : v);
    }
    int node;
    /* x is the argument; the rest stand for parameters, the same tensor at
     * every call, whose values fold_batch_norm may bake */
    kn_input_kind kind = strcmp(name, "x") == 0 ? KN_IN_ARG : KN_IN_PARAM;
    kn_status st = kn_graph_add_input(g, kind, name, t, "passes.lua:1", &node);
    kn_tensor_release(t);
    return st == KN_OK ? node : -1;
}

static int cnst(kn_graph *g, double v, kn_dtype dt)
{
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = KN_NODE_CONST;
    n.value = v;
    n.n_out = 1;
    n.out[0].dtype = dt;
    snprintf(n.where, sizeof n.where, "passes.lua:2");
    int idx;
    return kn_graph_add_node(g, &n, &idx) == KN_OK ? idx : -1;
}

/* An op node reading output 0 of each node in `in` (out 1 when negative:
 * -1 - node); attrs from a (NULL: defaults). */
static int opn(kn_graph *g, kn_op op, const kn_attrs *a, int n_in, const int *in)
{
    kn_fuzz f = {0, g, 0};
    int refs[KN_MAX_INPUTS];
    for (int k = 0; k < n_in; k++)
        refs[k] = in[k] >= 0 ? in[k] * KN_MAX_OUTPUTS : (-1 - in[k]) * KN_MAX_OUTPUTS + 1;
    kn_attrs d = kn_fuzz_attrs(op);
    int idx = kn_fuzz_add(&f, op, a ? a : &d, n_in, refs);
    if (idx < 0) printf("# could not add %s: %s\n", kn_op_name(op), kn_last_error());
    return idx;
}

static int op1(kn_graph *g, kn_op op, int x)
{
    return opn(g, op, NULL, 1, &x);
}

static int op2(kn_graph *g, kn_op op, int x, int y)
{
    int in[2] = {x, y};
    return opn(g, op, NULL, 2, in);
}

static int count_op(const kn_graph *g, int op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].op == op;
    return n;
}

/* Output 0 of each listed node, run by the reference executor (new refs). */
static bool run_outputs(const kn_graph *g, const int *outs, int n, kn_tensor **vals)
{
    kn_tensor **all = calloc((size_t)g->n_nodes * KN_MAX_OUTPUTS, sizeof *all);
    bool okay = all && kn_graph_run(g, NULL, all) == KN_OK;
    if (!okay) printf("# run failed: %s\n", kn_last_error());
    for (int k = 0; k < n; k++) {
        vals[k] = okay ? all[outs[k] * KN_MAX_OUTPUTS] : NULL;
        kn_tensor_retain(vals[k]);
    }
    if (okay)
        for (int i = 0; i < g->n_nodes * KN_MAX_OUTPUTS; i++) kn_tensor_release(all[i]);
    free(all);
    return okay;
}

/* Run pass `pass` ("all": the whole list) on g (verifying), check that the
 * outputs keep their values within tol, and say so as one test. */
static bool run_pass(kn_graph *g, const char *pass, int *outs, int n, double tol, const char *what)
{
    kn_tensor *before[8] = {NULL}, *after[8] = {NULL};
    int old[8];
    memcpy(old, outs, sizeof(int) * (size_t)n);
    bool good = run_outputs(g, outs, n, before);
    kn_status st = strcmp(pass, "all") == 0 ? kn_passes_run(g, outs, n, KN_PASSES_VERIFY)
                                            : kn_pass_run(g, pass, outs, n, KN_PASSES_VERIFY);
    if (st != KN_OK) printf("# %s failed: %s\n", pass, kn_last_error());
    good = good && st == KN_OK && run_outputs(g, outs, n, after);
    char why[512] = "";
    for (int k = 0; k < n && good; k++) {
        good = kn_fuzz_close(after[k], before[k], tol, why, sizeof why);
        if (!good) printf("# output %d (node %d, now %d): %s\n", k + 1, old[k], outs[k], why);
    }
    for (int k = 0; k < n; k++) {
        kn_tensor_release(before[k]);
        kn_tensor_release(after[k]);
    }
    ok(good, "%s: %s, outputs unchanged", pass, what);
    if (!good) {
        char *text = NULL;
        if (kn_graph_format(g, &text) == KN_OK) printf("# graph now:\n%s", text);
        free(text);
    }
    return good;
}

static const int64_t S23[] = {2, 3}, S32[] = {3, 2}, S6[] = {6}, S3[] = {3};

static void test_dce(void)
{
    kn_graph g;
    kn_graph_init(&g);
    int x = input(&g, "x", KN_F32, false, 2, S23);
    int w = input(&g, "w", KN_F32, false, 2, S32);
    int mm = op2(&g, KN_OP_MATMUL, x, w);
    int unused_c = cnst(&g, 4, KN_F32);
    int r = op1(&g, KN_OP_RELU, x);
    (void)mm;
    (void)unused_c;
    int outs[1] = {r};
    run_pass(&g, "dce", outs, 1, 0, "drops an unused matmul and constant");
    is_int(g.n_nodes, 3, "dce: x, w (inputs stay) and relu remain");
    is_int(count_op(&g, KN_OP_MATMUL), 0, "dce: the matmul is gone");
    is_int(g.nodes[outs[0]].op, KN_OP_RELU, "dce: the output index points at the relu");
    is_int(g.n_inputs, 2, "dce: inputs keep their indices");
    kn_graph_free(&g);
}

static void test_cse(void)
{
    kn_graph g;
    kn_graph_init(&g);
    int x = input(&g, "x", KN_F32, false, 2, S23);
    int y = input(&g, "y", KN_F32, false, 1, S3);
    int a1 = op2(&g, KN_OP_ADD, x, y);
    int a2 = op2(&g, KN_OP_ADD, x, y);
    int c1 = cnst(&g, 2, KN_F32), c2 = cnst(&g, 2, KN_F32), c3 = cnst(&g, 2, KN_F64);
    int m1 = op2(&g, KN_OP_MUL, a1, c1);
    int m2 = op2(&g, KN_OP_MUL, a2, c2); /* the same once the adds and constants merge */
    int m3 = op2(&g, KN_OP_MUL, a2, c3); /* an f64 constant: different */
    kn_attrs ra = kn_fuzz_attrs(KN_OP_RANDN);
    ra.nshape = 2;
    ra.shape[0] = 2, ra.shape[1] = 3;
    ra.seed = 9;
    int r1 = opn(&g, KN_OP_RANDN, &ra, 0, NULL), r2 = opn(&g, KN_OP_RANDN, &ra, 0, NULL);
    int s1 = op2(&g, KN_OP_ADD, m1, m2), s2 = op2(&g, KN_OP_ADD, r1, r2);
    int outs[4] = {s1, m3, s2, m2};
    int n_before = g.n_nodes;
    run_pass(&g, "cse", outs, 4, 0, "merges identical adds, muls and constants");
    is_int(g.n_nodes, n_before - 3, "cse: one add, one mul and one constant fewer");
    is_int(count_op(&g, KN_OP_ADD), 3, "cse: add(x, y) once (plus the two sums)");
    is_int(count_op(&g, KN_OP_RANDN), 2, "cse: random ops are never merged");
    is_int(count_op(&g, KN_NODE_CONST), 2, "cse: f32 2 once, the f64 2 kept");
    const kn_node *s = &g.nodes[outs[0]];
    ok(s->in_node[0] == s->in_node[1], "cse: the sum reads the merged mul twice");
    is_int(outs[3], s->in_node[0], "cse: an output of a merged node points at the survivor");
    kn_graph_free(&g);
}

static void test_fold_constants(void)
{
    kn_graph g;
    kn_graph_init(&g);
    int x = input(&g, "x", KN_F32, false, 2, S23);
    int c2 = cnst(&g, 2, KN_F32), c3 = cnst(&g, 3, KN_F32);
    int six = op2(&g, KN_OP_MUL, c2, c3);
    int e = op1(&g, KN_OP_NEG, six);
    int cmp = op2(&g, KN_OP_GT, c3, c2);                 /* true */
    int ci = cnst(&g, 7, KN_I32), cd = op2(&g, KN_OP_DIV, ci, c2); /* i32 / f32: 3.5 f32 */
    int y = op2(&g, KN_OP_MUL, x, e);
    int z = op2(&g, KN_OP_ADD, y, cd);
    int in[3] = {cmp, z, x};
    int w = opn(&g, KN_OP_WHERE, NULL, 3, in);
    int outs[2] = {w, six};
    int n_before = g.n_nodes;
    run_pass(&g, "fold_constants", outs, 2, 0, "evaluates ops on constants");
    is_int(g.n_nodes, n_before, "fold_constants: replaces in place (dce drops the inputs)");
    const kn_node *n6 = &g.nodes[outs[1]];
    ok(n6->op == KN_NODE_CONST && n6->value == 6 && n6->out[0].dtype == KN_F32,
       "fold_constants: 2 * 3 is the f32 constant 6 (got %s %g)", kn_node_op_name(n6), n6->value);
    ok(g.nodes[e].op == KN_NODE_CONST && g.nodes[e].value == -6, "fold_constants: neg(6) is -6");
    ok(g.nodes[cmp].op == KN_NODE_CONST && g.nodes[cmp].out[0].dtype == KN_BOOL &&
           g.nodes[cmp].value == 1, "fold_constants: 3 > 2 is the bool constant true");
    ok(g.nodes[cd].op == KN_NODE_CONST && g.nodes[cd].value == 3.5 && g.nodes[cd].out[0].dtype == KN_F32,
       "fold_constants: i32 7 / f32 2 is f32 3.5");
    ok(g.nodes[y].op == KN_OP_MUL, "fold_constants: x * c stays");
    run_pass(&g, "dce", outs, 2, 0, "after folding");
    is_int(count_op(&g, KN_NODE_CONST), 4, "dce after fold_constants: only the folded constants remain");
    kn_graph_free(&g);
}

/* conv (bias or not) -> batch_norm, the parameters bound inputs. */
static int build_conv_bn(kn_graph *g, bool conv_bias, bool bn_affine, int *conv_out)
{
    static const int64_t xs[] = {2, 3, 6, 6}, ws[] = {4, 3, 3, 3}, cs[] = {4};
    int x = input(g, "x", KN_F32, false, 4, xs);
    int w = input(g, "conv.weight", KN_F32, false, 4, ws);
    int in[5] = {x, w, -1};
    if (conv_bias) in[2] = input(g, "conv.bias", KN_F32, false, 1, cs);
    kn_attrs ca = kn_fuzz_attrs(KN_OP_CONV2D);
    ca.padding[0] = ca.padding[1] = 1;
    int conv = opn(g, KN_OP_CONV2D, &ca, conv_bias ? 3 : 2, in);
    int bn[5] = {conv, input(g, "bn.running_mean", KN_F32, false, 1, cs),
                 input(g, "bn.running_var", KN_F32, true, 1, cs)};
    if (bn_affine) {
        bn[3] = input(g, "bn.weight", KN_F32, false, 1, cs);
        bn[4] = input(g, "bn.bias", KN_F32, false, 1, cs);
    }
    kn_attrs ba = kn_fuzz_attrs(KN_OP_BATCH_NORM);
    ba.eps = 1e-3;
    *conv_out = conv;
    return opn(g, KN_OP_BATCH_NORM, &ba, bn_affine ? 5 : 3, bn);
}

static void test_fold_batch_norm(void)
{
    for (int v = 0; v < 2; v++) {
        kn_graph g;
        kn_graph_init(&g);
        int conv;
        int bn = build_conv_bn(&g, v == 0, v == 0, &conv);
        int r = op1(&g, KN_OP_RELU, bn);
        int outs[1] = {r};
        int n_inputs = g.n_inputs;
        run_pass(&g, "fold_batch_norm", outs, 1, 1e-5,
                 v == 0 ? "folds into a conv with bias" : "folds into a conv without bias, no affine");
        is_int(count_op(&g, KN_OP_BATCH_NORM), 0, "fold_batch_norm: the batch_norm is gone");
        is_int(g.n_inputs, n_inputs + 2, "fold_batch_norm: two new inputs (weight, bias)");
        const kn_node *c = &g.nodes[g.nodes[outs[0]].in_node[0]];
        ok(c->op == KN_OP_CONV2D && c->n_in == 3, "fold_batch_norm: the relu reads a conv with a bias input");
        ok(c->op == KN_OP_CONV2D && g.nodes[c->in_node[1]].op == KN_NODE_INPUT &&
               strcmp(g.inputs[g.nodes[c->in_node[1]].input].name, "folded conv weight") == 0 &&
               g.inputs[g.nodes[c->in_node[2]].input].kind == KN_IN_VALUE,
           "fold_batch_norm: its weight and bias are the folded inputs");
        kn_graph_free(&g);
    }

    /* not folded: the conv output has a second user; the parameters unbound */
    kn_graph g, h;
    kn_graph_init(&g);
    int conv;
    int bn = build_conv_bn(&g, true, true, &conv);
    int s = op2(&g, KN_OP_ADD, bn, conv);
    int outs[1] = {s};
    run_pass(&g, "fold_batch_norm", outs, 1, 0, "leaves a conv that has another user");
    is_int(count_op(&g, KN_OP_BATCH_NORM), 1, "fold_batch_norm: not folded when the conv has two users");
    kn_graph_free(&g);
    kn_graph_init(&g);
    bn = build_conv_bn(&g, true, true, &conv);
    outs[0] = bn;
    kn_graph_copy(&g, &h);
    ok(kn_pass_run(&h, "fold_batch_norm", outs, 1, KN_PASSES_VERIFY) == KN_OK &&
           count_op(&h, KN_OP_BATCH_NORM) == 1 && h.n_inputs == g.n_inputs,
       "fold_batch_norm: not folded when the parameters are unbound");
    kn_graph_free(&h);
    kn_graph_free(&g);

    /* not folded: a running mean passed as an argument is another tensor at
     * each call, so its values cannot be baked */
    kn_graph_init(&g);
    bn = build_conv_bn(&g, true, true, &conv);
    for (int i = 0; i < g.n_inputs; i++)
        if (strcmp(g.inputs[i].name, "bn.running_mean") == 0) g.inputs[i].kind = KN_IN_ARG;
    outs[0] = bn;
    run_pass(&g, "fold_batch_norm", outs, 1, 0, "leaves a batch norm with an argument");
    is_int(count_op(&g, KN_OP_BATCH_NORM), 1, "fold_batch_norm: not folded when a parameter is an argument");
    kn_graph_free(&g);
}

/* x:masked_fill(full({n, n}, 1, bool):tril():logical_not(), -1e9): the
 * mask's nodes; *mask_out the logical_not. */
static int build_masked(kn_graph *g, int x, int64_t n, kn_op creation, int *mask_out)
{
    kn_attrs fa = kn_fuzz_attrs(creation);
    fa.nshape = 2;
    fa.shape[0] = fa.shape[1] = n;
    fa.dtype = creation == KN_OP_FULL ? KN_BOOL : KN_F32;
    fa.value = creation == KN_OP_FULL ? 1 : 0;
    fa.value2 = 1;
    fa.seed = 7;
    int full = opn(g, creation, &fa, 0, NULL);
    int tri = op1(g, KN_OP_TRIL, full);
    int mask = creation == KN_OP_FULL ? op1(g, KN_OP_LOGICAL_NOT, tri) : op2(g, KN_OP_GT, tri, cnst(g, 0.5, KN_F32));
    *mask_out = mask;
    kn_attrs ma = kn_fuzz_attrs(KN_OP_MASKED_FILL);
    ma.value = -1e9;
    int in[2] = {x, mask};
    return opn(g, KN_OP_MASKED_FILL, &ma, 2, in);
}

static void test_fold_once(void)
{
    int64_t xs[2] = {5, 5};
    kn_graph g;
    kn_graph_init(&g);
    int x = input(&g, "x", KN_F32, false, 2, xs), mask;
    int m = build_masked(&g, x, 5, KN_OP_FULL, &mask);
    int outs[1] = {m};
    int n_inputs = g.n_inputs;
    run_pass(&g, "fold_once", outs, 1, 0, "folds a causal mask");
    run_pass(&g, "dce", outs, 1, 0, "after fold_once"); /* the list's last dce drops what nothing reads now */
    is_int(count_op(&g, KN_OP_TRIL) + count_op(&g, KN_OP_FULL) + count_op(&g, KN_OP_LOGICAL_NOT), 0,
           "fold_once: full, tril and logical_not are gone");
    is_int(g.n_inputs, n_inputs + 1, "fold_once: one new input");
    const kn_node *mf = &g.nodes[outs[0]];
    const kn_graph_input *in = mf->op == KN_OP_MASKED_FILL && g.nodes[mf->in_node[1]].op == KN_NODE_INPUT
                                   ? &g.inputs[g.nodes[mf->in_node[1]].input]
                                   : NULL;
    ok(in && in->kind == KN_IN_VALUE && strcmp(in->name, KN_ONCE_PREFIX "full, tril, logical_not") == 0 &&
           in->tensor && in->meta.dtype == KN_BOOL,
       "fold_once: the masked_fill reads a bool input named '%s'", in ? in->name : "?");
    kn_graph_free(&g);

    /* not folded: random creation; an output; an unbound graph; a lone full */
    kn_graph_init(&g);
    x = input(&g, "x", KN_F32, false, 2, xs);
    m = build_masked(&g, x, 5, KN_OP_RAND, &mask);
    outs[0] = m;
    run_pass(&g, "fold_once", outs, 1, 0, "leaves a mask made from rand");
    is_int(count_op(&g, KN_OP_RAND) + count_op(&g, KN_OP_TRIL), 2, "fold_once: rand and its tril stay");
    kn_graph_free(&g);

    kn_graph_init(&g);
    x = input(&g, "x", KN_F32, false, 2, xs);
    m = build_masked(&g, x, 5, KN_OP_FULL, &mask);
    int outs2[2] = {m, mask};
    run_pass(&g, "fold_once", outs2, 2, 0, "leaves a mask that is an output");
    is_int(count_op(&g, KN_OP_LOGICAL_NOT), 1, "fold_once: the mask the caller gets is computed as traced");
    kn_graph_free(&g);

    kn_graph h;
    kn_graph_init(&g);
    x = input(&g, "x", KN_F32, false, 2, xs);
    m = build_masked(&g, x, 5, KN_OP_FULL, &mask);
    outs[0] = m;
    kn_graph_copy(&g, &h);
    ok(kn_pass_run(&h, "fold_once", outs, 1, KN_PASSES_VERIFY) == KN_OK && count_op(&h, KN_OP_TRIL) == 1 &&
           h.n_inputs == g.n_inputs,
       "fold_once: nothing folded on an unbound graph");
    kn_graph_free(&h);
    kn_graph_free(&g);

    kn_graph_init(&g);
    x = input(&g, "x", KN_F32, false, 2, xs);
    kn_attrs fa = kn_fuzz_attrs(KN_OP_FULL);
    fa.nshape = 2;
    fa.shape[0] = fa.shape[1] = 5;
    fa.dtype = KN_F32;
    fa.value = 2.5;
    outs[0] = op2(&g, KN_OP_MUL, x, opn(&g, KN_OP_FULL, &fa, 0, NULL));
    run_pass(&g, "fold_once", outs, 1, 0, "leaves a lone full");
    is_int(count_op(&g, KN_OP_FULL), 1, "fold_once: a lone full stays (its reader computes it for free)");
    kn_graph_free(&g);
}

/* Random conv configurations (stride, padding, dilation, groups, bias,
 * affine or not, f32 or f64) fold to the same values. */
static void test_fold_batch_norm_random(void)
{
    int folded = 0, good = 0, n = 24;
    for (int t = 0; t < n; t++) {
        kn_dtype dt = t % 4 == 3 ? KN_F64 : KN_F32;
        int groups = 1 + (t % 3 == 2), cin = 2 * groups, cout = 2 * groups * (1 + t % 2);
        int64_t xs[] = {1 + t % 2, cin, 5 + t % 3, 5 + t % 4}, ws[] = {cout, cin / groups, 1 + t % 3, 1 + (t / 3) % 3},
                cs[] = {cout};
        kn_graph g;
        kn_graph_init(&g);
        int in[3] = {input(&g, "x", dt, false, 4, xs), input(&g, "w", dt, false, 4, ws), -1};
        bool bias = t % 2 == 0, affine = (t / 2) % 2 == 0;
        if (bias) in[2] = input(&g, "b", dt, false, 1, cs);
        kn_attrs ca = kn_fuzz_attrs(KN_OP_CONV2D);
        ca.groups = groups;
        ca.stride[0] = 1 + t % 2, ca.stride[1] = 1 + (t / 2) % 2;
        ca.padding[0] = t % 2, ca.padding[1] = (t / 4) % 2;
        ca.dilation[1] = 1 + (t / 8) % 2;
        int conv = opn(&g, KN_OP_CONV2D, &ca, bias ? 3 : 2, in);
        int bn[5] = {conv, input(&g, "mean", dt, false, 1, cs), input(&g, "var", dt, true, 1, cs),
                     affine ? input(&g, "gamma", dt, false, 1, cs) : -1,
                     affine ? input(&g, "beta", dt, false, 1, cs) : -1};
        kn_attrs ba = kn_fuzz_attrs(KN_OP_BATCH_NORM);
        int outs[1] = {opn(&g, KN_OP_BATCH_NORM, &ba, affine ? 5 : 3, bn)};
        kn_tensor *before, *after;
        char why[256] = "";
        bool okay = conv >= 0 && outs[0] >= 0 && run_outputs(&g, outs, 1, &before);
        okay = okay && kn_passes_run(&g, outs, 1, KN_PASSES_VERIFY) == KN_OK && run_outputs(&g, outs, 1, &after);
        if (okay) {
            folded += count_op(&g, KN_OP_BATCH_NORM) == 0;
            if (kn_fuzz_close(after, before, 1e-5, why, sizeof why)) good++;
            else printf("# config %d: %s\n", t, why);
            kn_tensor_release(after);
        }
        if (conv >= 0 && outs[0] >= 0) kn_tensor_release(before);
        kn_graph_free(&g);
    }
    is_int(folded, n, "fold_batch_norm: every random conv configuration folds");
    is_int(good, n, "fold_batch_norm: and keeps its values within 1e-5");
}

static void test_simplify_arith(void)
{
    kn_graph g;
    kn_graph_init(&g);
    int x = input(&g, "x", KN_F32, false, 2, S23);
    int xi = input(&g, "xi", KN_I32, false, 2, S23);
    int one = cnst(&g, 1, KN_F32), zero = cnst(&g, 0, KN_F32);
    int a = op2(&g, KN_OP_MUL, x, one);   /* x */
    int b = op2(&g, KN_OP_MUL, one, a);   /* x */
    int c = op2(&g, KN_OP_ADD, b, zero);  /* x */
    int d = op2(&g, KN_OP_SUB, c, zero);  /* x */
    int e = op2(&g, KN_OP_DIV, d, one);   /* x */
    int f = op1(&g, KN_OP_NEG, op1(&g, KN_OP_NEG, e)); /* x */
    int i1 = op2(&g, KN_OP_MUL, xi, one); /* i32 * f32 1 is f32: stays */
    int i2 = op2(&g, KN_OP_ADD, zero, xi); /* stays too */
    kn_attrs ca = kn_fuzz_attrs(KN_OP_CAST);
    ca.dtype = KN_F32;
    int cs = opn(&g, KN_OP_CAST, &ca, 1, &f); /* f32 -> f32 */
    int r = op1(&g, KN_OP_RELU, cs);
    int outs[3] = {r, i1, i2};
    run_pass(&g, "simplify", outs, 3, 0, "identities");
    run_pass(&g, "dce", outs, 3, 0, "after simplify");
    is_int(g.nodes[outs[0]].in_node[0], x, "simplify: x*1, 1*x, +0, -0, /1, neg(neg), cast to f32 are all gone");
    is_int(count_op(&g, KN_OP_NEG) + count_op(&g, KN_OP_CAST) + count_op(&g, KN_OP_DIV) +
               count_op(&g, KN_OP_SUB), 0, "simplify: no neg, cast, div or sub left");
    is_int(count_op(&g, KN_OP_MUL) + count_op(&g, KN_OP_ADD), 2,
           "simplify: i32 * f32 1 and 0 + i32 stay (the dtype would change)");
    kn_graph_free(&g);
}

static void test_simplify_views(void)
{
    static const int64_t s234[] = {2, 3, 4};
    kn_graph g;
    kn_graph_init(&g);
    int x = input(&g, "x", KN_F32, false, 3, s234);
    kn_attrs ra = kn_fuzz_attrs(KN_OP_RESHAPE);
    ra.nshape = 2, ra.shape[0] = 6, ra.shape[1] = 4;
    int r1 = opn(&g, KN_OP_RESHAPE, &ra, 1, &x);
    ra.nshape = 1, ra.shape[0] = 24;
    int r2 = opn(&g, KN_OP_RESHAPE, &ra, 1, &r1);
    int e1 = op1(&g, KN_OP_EXP, r2);
    kn_attrs pa = kn_fuzz_attrs(KN_OP_PERMUTE);
    pa.ndims = 3, pa.dims[0] = 1, pa.dims[1] = 2, pa.dims[2] = 0;
    int p1 = opn(&g, KN_OP_PERMUTE, &pa, 1, &x);
    pa.dims[0] = 2, pa.dims[1] = 0, pa.dims[2] = 1; /* undoes p1 */
    int p2 = opn(&g, KN_OP_PERMUTE, &pa, 1, &p1);
    int e2 = op1(&g, KN_OP_EXP, p2);
    pa.dims[0] = 1, pa.dims[1] = 0, pa.dims[2] = 2;
    int p3 = opn(&g, KN_OP_PERMUTE, &pa, 1, &p1); /* composes to {2,1,0} on x */
    int e3 = op1(&g, KN_OP_EXP, p3);
    int cont = op1(&g, KN_OP_CONTIGUOUS, e3);      /* exp's output is contiguous: gone */
    int cont2 = op1(&g, KN_OP_CONTIGUOUS, p3);     /* a permuted view: stays */
    kn_attrs sa = kn_fuzz_attrs(KN_OP_SLICE);
    sa.dim = 1, sa.start = 0, sa.stop = 3, sa.step = 1;
    int sl = opn(&g, KN_OP_SLICE, &sa, 1, &cont2);  /* the whole dim: gone */
    int e4 = op1(&g, KN_OP_EXP, sl);
    kn_attrs c64 = kn_fuzz_attrs(KN_OP_CAST);
    c64.dtype = KN_F64;
    int up = opn(&g, KN_OP_CAST, &c64, 1, &x);
    c64.dtype = KN_F32;
    int down = opn(&g, KN_OP_CAST, &c64, 1, &up);   /* f32 -> f64 -> f32: x */
    int e5 = op1(&g, KN_OP_EXP, down);
    int outs[5] = {e1, e2, cont, e4, e5};
    run_pass(&g, "all", outs, 5, 0, "the whole list on view chains");
    is_int(count_op(&g, KN_OP_RESHAPE), 1, "simplify: reshape of reshape is one reshape");
    const kn_node *e1n = &g.nodes[outs[0]];
    ok(g.nodes[e1n->in_node[0]].op == KN_OP_RESHAPE && g.nodes[e1n->in_node[0]].in_node[0] == x,
       "simplify: the reshape reads x");
    is_int(g.nodes[outs[1]].in_node[0], x, "simplify: a permute undone by another is gone");
    is_int(count_op(&g, KN_OP_PERMUTE), 1, "simplify: two permutes compose into one");
    int pi = -1;
    for (int i = 0; i < g.n_nodes; i++)
        if (g.nodes[i].op == KN_OP_PERMUTE) pi = i;
    ok(pi >= 0 && g.nodes[pi].a.dims[0] == 2 && g.nodes[pi].a.dims[1] == 1 &&
           g.nodes[pi].a.dims[2] == 0 && g.nodes[pi].in_node[0] == x,
       "simplify: the composed permute reads x with the composed order");
    is_int(g.nodes[outs[2]].op, KN_OP_EXP, "simplify: contiguous of an exp is the exp");
    is_int(count_op(&g, KN_OP_CONTIGUOUS), 1, "simplify: contiguous of a view stays");
    is_int(count_op(&g, KN_OP_SLICE), 0, "simplify: a slice of a whole dim is gone");
    is_int(count_op(&g, KN_OP_CAST), 0, "simplify: a cast to f64 and back is gone");
    kn_graph_free(&g);
}

/* sink_views: an elementwise op of one input moves ahead of the reshape,
 * permute or expand it reads (fusion then puts it in its producer's
 * kernel); not when the view has another reader, nor for a view of an
 * input. */
static void test_sink_views(void)
{
    static const int64_t s234[] = {2, 3, 4}, s214[] = {2, 1, 4};
    kn_graph g;
    kn_graph_init(&g);
    int x = input(&g, "x", KN_F32, false, 3, s234);
    int ex = op1(&g, KN_OP_EXP, x);
    kn_attrs ra = kn_fuzz_attrs(KN_OP_RESHAPE);
    ra.nshape = 2, ra.shape[0] = 6, ra.shape[1] = 4;
    int r = opn(&g, KN_OP_RESHAPE, &ra, 1, &ex);
    int neg = op1(&g, KN_OP_NEG, r); /* sunk: neg(exp(x)), then the reshape */
    int z = input(&g, "z", KN_F32, false, 3, s214);
    int ez = op1(&g, KN_OP_EXP, z);
    kn_attrs ea = kn_fuzz_attrs(KN_OP_EXPAND);
    ea.nshape = 3, ea.shape[0] = 2, ea.shape[1] = 3, ea.shape[2] = 4;
    int e = opn(&g, KN_OP_EXPAND, &ea, 1, &ez);
    int relu = op1(&g, KN_OP_RELU, e); /* sunk: on 8 elements, then expanded to 24 */
    kn_attrs ra2 = ra;
    ra2.shape[0] = 4, ra2.shape[1] = 6; /* not r's shape, which cse would merge with r */
    int r2 = opn(&g, KN_OP_RESHAPE, &ra2, 1, &ex);
    int a = op1(&g, KN_OP_ABS, r2);
    int b = op1(&g, KN_OP_SQRT, r2); /* r2 has two readers: both stay */
    int rx = opn(&g, KN_OP_RESHAPE, &ra, 1, &x);
    int c = op1(&g, KN_OP_ABS, rx); /* a view of an input: stays */
    /* a padding mask's shape: ne(expand(reshape(exp z)), 0) and a where of
     * it between two numbers move, with both views, onto z's 8 elements */
    static const int64_t s24[] = {2, 4};
    int m = input(&g, "m", KN_F32, false, 2, s24);
    int em = op1(&g, KN_OP_EXP, m);
    kn_attrs ma = kn_fuzz_attrs(KN_OP_RESHAPE);
    ma.nshape = 3, ma.shape[0] = 2, ma.shape[1] = 1, ma.shape[2] = 4;
    int mr = opn(&g, KN_OP_RESHAPE, &ma, 1, &em);
    int me = opn(&g, KN_OP_EXPAND, &ea, 1, &mr);
    int ne = op2(&g, KN_OP_NE, me, cnst(&g, 1, KN_F32));
    int wh_in[3] = {ne, cnst(&g, 0, KN_F32), cnst(&g, -1e30, KN_F32)};
    int wh = opn(&g, KN_OP_WHERE, NULL, 3, wh_in);
    kn_attrs sa = kn_fuzz_attrs(KN_OP_SUM);
    sa.ndims = 1, sa.dims[0] = 1, sa.keepdim = true;
    int wz = opn(&g, KN_OP_SUM, &sa, 1, &x); /* {2,1,4}, computed from the argument */
    int we = opn(&g, KN_OP_EXPAND, &ea, 1, &wz);
    int two = op2(&g, KN_OP_ADD, we, x); /* two operands with shapes: stays after the expand */
    int outs[7] = {neg, relu, a, b, c, wh, two};
    run_pass(&g, "all", outs, 7, 0, "sink_views in the whole list");
    const kn_node *o0 = &g.nodes[outs[0]], *o1 = &g.nodes[outs[1]];
    ok(o0->op == KN_OP_RESHAPE && g.nodes[o0->in_node[0]].op == KN_OP_NEG &&
           g.nodes[g.nodes[o0->in_node[0]].in_node[0]].op == KN_OP_EXP,
       "sink_views: neg(reshape(exp x)) is reshape(neg(exp x))");
    ok(o1->op == KN_OP_EXPAND && g.nodes[o1->in_node[0]].op == KN_OP_RELU &&
           g.nodes[o1->in_node[0]].out[0].shape[1] == 1,
       "sink_views: relu(expand(exp z)) is expand(relu(exp z)), the relu on z's shape");
    ok(g.nodes[outs[2]].op == KN_OP_ABS && g.nodes[outs[3]].op == KN_OP_SQRT &&
           g.nodes[g.nodes[outs[2]].in_node[0]].op == KN_OP_RESHAPE,
       "sink_views: a view with two readers stays between them and its source");
    ok(g.nodes[outs[4]].op == KN_OP_ABS && g.nodes[g.nodes[outs[4]].in_node[0]].op == KN_OP_RESHAPE,
       "sink_views: a view of an input stays");
    const kn_node *w = &g.nodes[outs[5]];
    const kn_node *w1 = &g.nodes[w->in_node[0]];
    const kn_node *w2 = w1->n_in ? &g.nodes[w1->in_node[0]] : NULL;
    ok(w->op == KN_OP_EXPAND && w1->op == KN_OP_RESHAPE && w2 && w2->op == KN_OP_WHERE &&
           w2->out[0].ndim == 2 && g.nodes[w2->in_node[0]].op == KN_OP_NE &&
           g.nodes[w2->in_node[0]].out[0].ndim == 2,
       "sink_views: where(ne(expand(reshape(exp m)), 1), 0, -1e30) is expand(reshape(where(ne(exp m, 1), 0, -1e30))),"
       " on m's shape");
    ok(g.nodes[outs[6]].op == KN_OP_ADD && g.nodes[g.nodes[outs[6]].in_node[0]].op == KN_OP_EXPAND,
       "sink_views: an add of two shaped operands stays after the expand");
    kn_graph_free(&g);
}

/* An output whose replacement would be output 1 of a two-output node
 * (which a list of node indices cannot name) stays, with its users. */
static void test_output_rules(void)
{
    kn_graph g;
    kn_graph_init(&g);
    int x = input(&g, "x", KN_F32, false, 2, S23);
    kn_attrs ma = kn_fuzz_attrs(KN_OP_MAX);
    ma.dim = 1;
    int mx = opn(&g, KN_OP_MAX, &ma, 1, &x);
    int idx = -1 - mx;
    int in[1] = {idx};
    int n1 = opn(&g, KN_OP_NEG, NULL, 1, in);
    int n2 = op1(&g, KN_OP_NEG, n1);
    int a = op2(&g, KN_OP_ADD, n2, n2);
    int outs[3] = {n2, a, mx};
    run_pass(&g, "all", outs, 3, 0, "neg(neg(max indices)) as an output");
    is_int(g.nodes[outs[0]].op, KN_OP_NEG, "the output neg(neg(indices)) stays a node");
    is_int(g.nodes[outs[1]].in_node[0], outs[0], "its other user still reads it");
    is_int(g.nodes[outs[2]].op, KN_OP_MAX, "the max output is the max");
    kn_graph_free(&g);
}

static void test_verify_and_format(void)
{
    kn_graph g;
    kn_graph_init(&g);
    int x = input(&g, "x", KN_F32, false, 1, S6);
    int c = cnst(&g, 2, KN_F32);
    int m = op2(&g, KN_OP_MUL, x, c);
    int e = op1(&g, KN_OP_EXP, m);
    kn_attrs sa = kn_fuzz_attrs(KN_OP_SUM);
    sa.keepdim = 1;
    int s = opn(&g, KN_OP_SUM, &sa, 1, &e);
    (void)s;
    char why[512];
    ok(kn_graph_verify(&g, why, sizeof why) == KN_OK, "verify: a good graph checks");
    char *text = NULL;
    ok(kn_graph_format(&g, &text) == KN_OK && text, "format: returns text");
    const char *names[] = {"input", "constant", "mul", "exp", "sum"};
    for (int k = 0; k < 5; k++) like(text, names[k], "format: shows each node's op");
    like(text, "f32{6}", "format: shows dtype and shape");
    like(text, "'x'", "format: shows the input's name");
    like(text, "keepdim", "format: shows the attributes");
    like(text, "passes.lua:1", "format: shows where");
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
        printf("# %s\n", line);
    free(text);

    g.nodes[m].in_node[1] = e; /* mul reads the exp, which comes after it */
    ok(kn_graph_verify(&g, why, sizeof why) != KN_OK, "verify: catches a node reading a later node");
    like(why, "node 2 (mul at", "verify: the message names the node");
    like(why, "reads node 3, which is not before it", "verify: and what is wrong");
    g.nodes[m].in_node[1] = c;
    g.nodes[e].out[0].shape[0] = 5;
    ok(kn_graph_verify(&g, why, sizeof why) != KN_OK, "verify: catches a wrong out meta");
    like(why, "output 1 is f32{5} but shape inference says f32{6}", "verify: names both metas");
    int outs[1] = {e};
    ok(kn_passes_run(&g, outs, 1, KN_PASSES_VERIFY) != KN_OK, "passes refuse a broken graph");
    like(kn_last_error(), "before the passes", "the message says where the check failed");
    g.nodes[e].out[0].shape[0] = 6;
    g.nodes[m].n_in = 1;
    ok(kn_graph_verify(&g, why, sizeof why) != KN_OK, "verify: catches a wrong input count");
    like(why, "has 1 inputs, mul takes 2", "verify: says the count");
    kn_graph_free(&g);
}

static void test_names_and_run(void)
{
    const char *const *names = kn_passes_names();
    char list[256] = "";
    for (int k = 0; names[k]; k++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? "," : "", names[k]);
    is_str(list,
           "dce,cse,fold_constants,fold_batch_norm,simplify,attention,gather_scatter,channels_last,merge_projections,k_major_weights,split_reductions,cse,fold_once,causal_masks,simplify,sink_views,recompute,dce",
           "the pass list in order");
    kn_graph g;
    kn_graph_init(&g);
    int outs[1] = {0};
    input(&g, "x", KN_F32, false, 1, S6);
    ok(kn_pass_run(&g, "nope", outs, 1, 0) != KN_OK, "an unknown pass is an error");
    like(kn_last_error(), "no pass named 'nope'", "which names it");
    outs[0] = 5;
    ok(kn_passes_run(&g, outs, 1, 0) != KN_OK, "an output past the graph is an error");
    kn_graph_free(&g);
}


/* attention: matmul(q, permute(k)) * c [masked_fill] -> softmax -> matmul(v)
 * becomes one node whose value is the chain's (run by the reference
 * executor before and after); a causal tril mask becomes the attribute; a
 * softmax over another dim stays and the noted reason says so. */
static void test_attention(void)
{
    static const int64_t Q[] = {2, 3, 5, 4}, T55[] = {5, 5};
    for (int causal = 0; causal < 2; causal++) {
        kn_graph g;
        kn_graph_init(&g);
        int q = input(&g, "q", KN_F64, false, 4, Q), k = input(&g, "k", KN_F64, false, 4, Q);
        int v = input(&g, "v", KN_F64, false, 4, Q);
        kn_attrs pa = kn_fuzz_attrs(KN_OP_PERMUTE);
        pa.ndims = 4;
        int dims[4] = {0, 1, 3, 2};
        memcpy(pa.dims, dims, sizeof dims);
        int kt = opn(&g, KN_OP_PERMUTE, &pa, 1, &k);
        int s = op2(&g, KN_OP_MUL, op2(&g, KN_OP_MATMUL, q, kt), cnst(&g, 0.25, KN_F64));
        if (causal) {
            kn_attrs fa = kn_fuzz_attrs(KN_OP_FULL);
            fa.dtype = KN_BOOL;
            fa.value = 1;
            fa.nshape = 2;
            memcpy(fa.shape, T55, sizeof T55);
            int ones = opn(&g, KN_OP_FULL, &fa, 0, NULL);
            kn_attrs ta = kn_fuzz_attrs(KN_OP_TRIL);
            ta.diagonal = 0;
            int m = op1(&g, KN_OP_LOGICAL_NOT, opn(&g, KN_OP_TRIL, &ta, 1, &ones));
            kn_attrs ma = kn_fuzz_attrs(KN_OP_MASKED_FILL);
            ma.value = -INFINITY;
            int in[2] = {s, m};
            s = opn(&g, KN_OP_MASKED_FILL, &ma, 2, in);
        }
        kn_attrs sa = kn_fuzz_attrs(KN_OP_SOFTMAX);
        sa.dim = 3;
        int out = op2(&g, KN_OP_MATMUL, opn(&g, KN_OP_SOFTMAX, &sa, 1, &s), v);
        int outs[1] = {out};
        run_pass(&g, "all", outs, 1, 1e-12, causal ? "attention (causal)" : "attention");
        int n_att = count_op(&g, KN_OP_ATTENTION);
        const kn_node *a = &g.nodes[outs[0]];
        ok(n_att == 1 && a->op == KN_OP_ATTENTION && a->a.scale == 0.25 && a->a.causal == causal &&
               a->n_in == 3 && count_op(&g, KN_OP_SOFTMAX) == 0 && count_op(&g, KN_OP_TRIL) == 0,
           "attention%s: one node, scale 0.25, causal %d, no mask input, the chain and mask gone",
           causal ? " (causal)" : "", causal);
        kn_graph_free(&g);
    }
    kn_graph g;
    kn_graph_init(&g);
    int q = input(&g, "q", KN_F64, false, 4, Q), k = input(&g, "k", KN_F64, false, 4, Q);
    int v = input(&g, "v", KN_F64, false, 4, Q);
    kn_attrs pa = kn_fuzz_attrs(KN_OP_PERMUTE);
    pa.ndims = 4;
    int dims[4] = {0, 1, 3, 2};
    memcpy(pa.dims, dims, sizeof dims);
    int s = op2(&g, KN_OP_MATMUL, q, opn(&g, KN_OP_PERMUTE, &pa, 1, &k));
    kn_attrs sa = kn_fuzz_attrs(KN_OP_SOFTMAX);
    sa.dim = 2;
    int outs[1] = {op2(&g, KN_OP_MATMUL, opn(&g, KN_OP_SOFTMAX, &sa, 1, &s), v)};
    char *notes = NULL;
    ok(kn_passes_run_noted(&g, outs, 1, KN_PASSES_VERIFY, &notes, NULL) == KN_OK && count_op(&g, KN_OP_ATTENTION) == 0,
       "attention: a softmax over dim 3 of 4 is left alone");
    ok(notes && strstr(notes, "attention not matched at softmax (fuzz.lua:6): the softmax is over dim 3, not the last (4)"),
       "attention: ... and the note names the softmax, its line and the dims");
    if (notes) printf("# %s", notes);
    free(notes);
    kn_graph_free(&g);
}

int main(void)
{
    test_dce();
    test_cse();
    test_fold_constants();
    test_fold_batch_norm();
    test_fold_batch_norm_random();
    test_fold_once();
    test_simplify_arith();
    test_simplify_views();
    test_sink_views();
    test_output_rules();
    test_verify_and_format();
    test_names_and_run();
    test_attention();
    return done_testing();
}
