/* t/backend_supports.c: a backend's supports_op is asked before a call
 * runs, by eager execution and by a plan's build. A fake backend on cpu:2
 * (the CPU kernels, with a supports_op that says no to matmul in f64, to
 * index_select and to exp) gets neither an eager call nor a plan it has no
 * kernel for: both fail before anything runs, in one message naming the
 * op, the device and the dtypes (the plan's adds the node). A plan asks
 * about the kernels that run through `run` (library and fallback ones),
 * with the node's dtypes and attrs and no outputs, as eager does; a
 * generated kernel is the compile's, not asked. The CPU backend itself
 * says yes to every op but the views.
 */
#include <stdio.h>
#include <string.h>

#include "cpu/kn_cpu_backend.h"
#include "cpu/kn_cpu_jit.h"
#include "kn_backend.h"
#include "kn_plan.h"
#include "kn_view.h"
#include "ops_testlib.h"
#include "tap.h"

static const kn_device CPU2 = KN_CPU | 2 << KN_DEVICE_INDEX_SHIFT;

/* What the fake was last asked: the call's op, input count, first input's
 * dtype, output count and whether the inputs had storage. */
static struct {
    int op, n_in, n_out;
    kn_dtype dt0;
    bool storage;
} asked;

static bool fake_supports(kn_device_ctx *d, const kn_opcall *c)
{
    asked.op = c->op;
    asked.n_in = c->n_in;
    asked.n_out = c->n_out;
    asked.dt0 = c->n_in > 0 && c->in[0] ? c->in[0]->dtype : KN_DTYPE_COUNT;
    asked.storage = c->n_in > 0 && c->in[0] && c->in[0]->storage;
    if (c->op == KN_OP_MATMUL && c->n_in > 0 && c->in[0] && c->in[0]->dtype == KN_F64) return false;
    if (c->op == KN_OP_INDEX_SELECT || c->op == KN_OP_EXP) return false;
    return kn_cpu_backend.supports_op(d, c);
}

static kn_backend fake;

static void test_cpu_truth(void)
{
    kn_device_ctx *d = kn_backend_get(KN_CPU);
    int wrong = 0;
    for (int op = 0; op < KN_OP_COUNT; op++) {
        kn_opcall c;
        kn_opcall_init(&c, (kn_op)op);
        bool want = kn_op_kind_of((kn_op)op) != KN_K_VIEW;
        if (d->be->supports_op(d, &c) != want) {
            printf("#   cpu supports_op says %s to %s\n", want ? "no" : "yes", kn_op_name((kn_op)op));
            wrong++;
        }
    }
    ok(wrong == 0, "the cpu backend runs every op but the views (asked about the op alone)");
}

static kn_status eager2(kn_op op, kn_tensor *a, kn_tensor *b, kn_opcall *c)
{
    kn_opcall_init(c, op);
    c->n_in = b ? 2 : 1;
    c->in[0] = a;
    c->in[1] = b;
    return kn_op_eager(c, kn_tensor_device(a));
}

static void test_eager(void)
{
    int64_t sa[2] = {3, 4}, sb[2] = {4, 5}, si[1] = {2};
    kn_tensor *a = tl_rand(KN_F32, 2, sa, TL_CONTIG, -2, 2, 0), *b = tl_rand(KN_F32, 2, sb, TL_CONTIG, -2, 2, 0);
    kn_tensor *a64 = tl_rand(KN_F64, 2, sa, TL_CONTIG, -2, 2, 0), *b64 = tl_rand(KN_F64, 2, sb, TL_CONTIG, -2, 2, 0);
    kn_tensor *idx = tl_new(KN_I64, 1, si);
    kn_tensor *a2 = NULL, *b2 = NULL, *a642 = NULL, *b642 = NULL, *idx2 = NULL;
    ok(kn_tensor_to_device(a, CPU2, NULL, &a2) == KN_OK && kn_tensor_to_device(b, CPU2, NULL, &b2) == KN_OK &&
           kn_tensor_to_device(a64, CPU2, NULL, &a642) == KN_OK && kn_tensor_to_device(b64, CPU2, NULL, &b642) == KN_OK &&
           kn_tensor_to_device(idx, CPU2, NULL, &idx2) == KN_OK,
       "tensors copied to cpu:2");

    kn_opcall c;
    ok(eager2(KN_OP_MATMUL, a2, b2, &c) == KN_OK && c.n_out == 1 && kn_tensor_device(c.out[0]) == CPU2,
       "matmul in f32 runs on cpu:2");
    ok(asked.op == KN_OP_MATMUL && asked.n_in == 2 && asked.dt0 == KN_F32 && asked.n_out == 0 && asked.storage,
       "... asked first, with its inputs and before its outputs exist");
    tl_release_outputs(&c);

    ok(eager2(KN_OP_MATMUL, a642, b642, &c) == KN_ERR_UNSUPPORTED && c.n_out == 0 && !c.out[0],
       "matmul in f64 is refused on cpu:2, with no output made");
    is_str(kn_last_error(), "matmul: not supported on cpu:2 for these dtypes (f64, f64)",
           "... naming the op, the device and the dtypes");
    ok(eager2(KN_OP_MATMUL, a64, b64, &c) == KN_OK, "... while cpu:0 runs it");
    tl_release_outputs(&c);

    ok(eager2(KN_OP_EXP, a2, NULL, &c) == KN_ERR_UNSUPPORTED, "exp is refused on cpu:2");
    is_str(kn_last_error(), "exp: not supported on cpu:2 for these dtypes (f32)", "... in the same words");
    ok(eager2(KN_OP_INDEX_SELECT, a2, idx2, &c) == KN_ERR_UNSUPPORTED, "index_select is refused on cpu:2");
    is_str(kn_last_error(), "index_select: not supported on cpu:2 for these dtypes (f32, i64)",
           "... naming both dtypes");

    kn_opcall_init(&c, KN_OP_CAST);
    c.n_in = 1;
    c.in[0] = a2;
    c.a.dtype = KN_BF16;
    ok(kn_op_check_supported(kn_backend_get(CPU2), &c) == KN_OK, "a cast is supported on cpu:2");

    kn_tensor *ts[] = {a, b, a64, b64, idx, a2, b2, a642, b642, idx2};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) kn_tensor_release(ts[i]);
}

/* A graph reading inputs of dtype dt on dev: x {3, 4}, then w {4, 5}
 * (matmul), idx {2} (index_select) or nothing (exp); its one op traced at
 * "model.lua:7". *out: the op's node. */
static kn_status graph_of(kn_op op, kn_dtype dt, kn_device dev, kn_graph *g, int *out)
{
    int64_t sx[2] = {3, 4}, sw[2] = {4, 5}, si[1] = {2};
    kn_graph_init(g);
    kn_tensor *x = tl_rand(dt, 2, sx, TL_CONTIG, -2, 2, 0), *second = NULL, *t = NULL;
    if (op == KN_OP_MATMUL) second = tl_rand(dt, 2, sw, TL_CONTIG, -2, 2, 0);
    if (op == KN_OP_INDEX_SELECT) second = tl_new(KN_I64, 1, si);
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.n_in = second ? 2 : 1;
    kn_status st = kn_tensor_to_device(x, dev, NULL, &t);
    if (st == KN_OK) st = kn_graph_add_input(g, KN_IN_ARG, "x", t, "model.lua:1", &n.in_node[0]);
    kn_tensor_release(t);
    t = NULL;
    if (st == KN_OK && second) st = kn_tensor_to_device(second, dev, NULL, &t);
    if (st == KN_OK && second) st = kn_graph_add_input(g, KN_IN_ARG, "y", t, "model.lua:2", &n.in_node[1]);
    kn_tensor_release(t);
    kn_tensor_release(x);
    kn_tensor_release(second);
    snprintf(n.where, sizeof n.where, "model.lua:7");
    if (st == KN_OK) st = kn_graph_add_node(g, &n, out);
    if (st == KN_OK) st = kn_node_infer(g, *out, g->nodes[*out].out, &g->nodes[*out].n_out);
    return st;
}

/* The status of building a plan of g's op node on its inputs' device
 * (no plan is left when it fails). */
static kn_status build_only(kn_graph *g, int node)
{
    kn_plan_value want = {node, 0};
    kn_plan *p = NULL;
    kn_status st = kn_plan_build(g, &want, 1, NULL, 0, &p);
    if (st != KN_OK && p) printf("#   a failed build left a plan\n");
    kn_plan_free(p);
    return st;
}

/* Build a plan of g's op node on its inputs' device, run it and compare
 * its value with eager execution on cpu:0. */
static kn_status build_and_run(kn_graph *g, int node, bool *same)
{
    kn_plan_value want = {node, 0};
    kn_plan *p = NULL;
    *same = false;
    kn_status st = kn_plan_build(g, &want, 1, NULL, 0, &p);
    if (st != KN_OK) return st;
    kn_tensor *ins[2] = {g->inputs[0].tensor, g->n_inputs > 1 ? g->inputs[1].tensor : NULL}, *got = NULL;
    st = kn_plan_run(p, ins, &got);
    if (st == KN_OK) {
        kn_tensor *h[2] = {NULL, NULL}, *ref = NULL;
        kn_opcall c;
        kn_opcall_init(&c, (kn_op)g->nodes[node].op);
        c.n_in = g->n_inputs;
        for (int i = 0; i < c.n_in; i++) {
            kn_tensor_to_device(ins[i], KN_CPU, NULL, &h[i]);
            c.in[i] = h[i];
        }
        kn_tensor *got0 = NULL;
        if (kn_op_eager(&c, KN_CPU) == KN_OK) ref = c.out[0];
        if (ref && kn_tensor_to_device(got, KN_CPU, NULL, &got0) == KN_OK && tl_meta_is(got0, ref->dtype, ref->ndim, ref->shape)) {
            *same = true;
            for (int64_t i = 0; i < kn_tensor_numel(ref) && *same; i++) *same = tl_get(got0, i) == tl_get(ref, i);
        }
        kn_tensor_release(got0);
        kn_tensor_release(ref);
        kn_tensor_release(h[0]);
        kn_tensor_release(h[1]);
    }
    kn_tensor_release(got);
    kn_plan_free(p);
    return st;
}

static void test_plans(void)
{
    kn_graph g;
    int node = -1;
    bool same = false;

    ok(graph_of(KN_OP_MATMUL, KN_F64, CPU2, &g, &node) == KN_OK, "a graph of one f64 matmul on cpu:2");
    memset(&asked, 0, sizeof asked);
    ok(build_only(&g, node) == KN_ERR_UNSUPPORTED, "its plan fails at build");
    is_str(kn_last_error(), "matmul: not supported on cpu:2 for these dtypes (f64, f64) (node 2, traced at model.lua:7)",
           "... in eager's words, with the node and its line");
    ok(asked.op == KN_OP_MATMUL && asked.n_in == 2 && asked.dt0 == KN_F64 && asked.n_out == 0 && !asked.storage,
       "... asked with the node's input dtypes as headers without storage, and no outputs");
    kn_graph_free(&g);

    ok(graph_of(KN_OP_MATMUL, KN_F64, KN_CPU, &g, &node) == KN_OK, "the same graph on cpu:0");
    ok(build_and_run(&g, node, &same) == KN_OK && same, "... builds and runs, as eager computes it");
    kn_graph_free(&g);

    ok(graph_of(KN_OP_MATMUL, KN_F32, CPU2, &g, &node) == KN_OK, "a graph of one f32 matmul on cpu:2");
    ok(build_and_run(&g, node, &same) == KN_OK && same, "... builds and runs there, as eager computes it");
    kn_graph_free(&g);

    ok(graph_of(KN_OP_INDEX_SELECT, KN_F32, CPU2, &g, &node) == KN_OK, "a graph of one index_select on cpu:2");
    ok(build_only(&g, node) == KN_ERR_UNSUPPORTED, "its plan (a fallback kernel) fails at build");
    is_str(kn_last_error(),
           "index_select: not supported on cpu:2 for these dtypes (f32, i64) (node 2, traced at model.lua:7)",
           "... naming it");
    kn_graph_free(&g);

    if (!kn_jit_available()) {
        printf("# no C compiler for generated kernels: the exp plan is not built\n");
        return;
    }
    ok(graph_of(KN_OP_EXP, KN_F32, CPU2, &g, &node) == KN_OK, "a graph of one exp on cpu:2");
    memset(&asked, 0, sizeof asked);
    ok(build_and_run(&g, node, &same) == KN_OK && same, "... builds and runs: a generated kernel, not run's");
    ok(asked.op != KN_OP_EXP, "... and the backend was not asked about it");
    kn_graph_free(&g);
}

int main(void)
{
    tl_seed();
    fake = kn_cpu_backend;
    fake.supports_op = fake_supports;
    ok(kn_backend_add_device(&fake, 2, NULL) == KN_OK, "a fake cpu backend as cpu:2");
    test_cpu_truth();
    test_eager();
    test_plans();
    return done_testing();
}
