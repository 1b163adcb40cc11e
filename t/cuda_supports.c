/* t/cuda_supports.c: the CUDA backend's supports_op (kn_cuda_supports_op,
 * each op family's answer) tells the truth, asked with header tensors (no
 * storage), as a plan's build asks; it needs no GPU, so this runs wherever
 * the toolkit is. For each op and dtype, on a call of usual shapes and
 * attrs: where kn_op_infer accepts the call, every op but the views has a
 * CUDA kernel; where it refuses, the library ops (matmul, conv2d,
 * attention, gather_scatter) say no too. Asked about the op alone (no
 * inputs), every op but the views runs in some dtype. Which family takes
 * a call: a reduction over one dim is the kernel IR's, over several the
 * templates'; gather_scatter's epilogue decides (attrs). With a GPU, each
 * call the predicate accepts also runs through the vtable's run.
 */
#include "tap.h"

#ifndef KILN_HAVE_CUDA
int main(void)
{
    skip_all("built without the CUDA toolkit");
}
#else
#include <string.h>

#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_eager.h"
#include "cuda/kn_cuda_gather_scatter.h"
#include "cuda/kn_cuda_ops.h"
#include "kn_backend.h"
#include "kn_op.h"
#include "kn_view.h"

/* A header of dtype dt and shape, contiguous, without storage. */
static kn_tensor *hdr(kn_tensor *t, kn_dtype dt, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    t->refcount = 1;
    t->dtype = dt;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    kn_contiguous_strides(ndim, shape, t->strides);
    return t;
}

static const int64_t S23[] = {2, 3}, S33[] = {3, 3}, S34[] = {3, 4}, S43[] = {4, 3}, S2[] = {2},
                     S5[] = {5}, S1244[] = {1, 2, 4, 4}, S4233[] = {4, 2, 3, 3}, S1248[] = {1, 2, 4, 8};

/* A call of op whose data has dtype dt (index inputs i64, masks bool),
 * with usual shapes and attrs, its inputs headers in t. */
static void sample_call(kn_op op, kn_dtype dt, kn_tensor t[KN_MAX_INPUTS], kn_opcall *c)
{
    kn_opcall_init(c, op);
    c->n_in = kn_op_arity(op) > 0 ? kn_op_arity(op) : 0;
    for (int i = 0; i < KN_MAX_INPUTS; i++) c->in[i] = hdr(&t[i], dt, 2, S23); /* read up to n_in */
    switch (kn_op_kind_of(op)) {
    case KN_K_UNARY: c->a.dtype = KN_BF16; break; /* a cast's target */
    case KN_K_TERNARY: hdr(&t[0], KN_BOOL, 2, S23); break;
    case KN_K_MASKED: hdr(&t[1], KN_BOOL, 2, S23); break;
    case KN_K_REDUCE:
        c->a.ndims = 1;
        c->a.dims[0] = 1;
        break;
    case KN_K_ARGREDUCE:
    case KN_K_SOFTMAX: c->a.dim = 1; break;
    case KN_K_NORM:
        if (op == KN_OP_LAYER_NORM) {
            c->n_in = 1;
            c->a.nshape = 1;
            c->a.shape[0] = 3;
        } else { /* batch_norm: x, mean, var */
            c->n_in = 3;
            c->in[0] = hdr(&t[0], dt, 4, S1244);
            for (int i = 1; i < 3; i++) c->in[i] = hdr(&t[i], dt, 1, S2);
        }
        break;
    case KN_K_MATMUL: hdr(&t[1], dt, 2, S34); break;
    case KN_K_CONV:
        c->n_in = 2;
        c->in[0] = hdr(&t[0], dt, 4, S1244);
        c->in[1] = hdr(&t[1], dt, 4, S4233);
        if (op == KN_OP_CONV2D_INPUT_GRAD || op == KN_OP_CONV2D_WEIGHT_GRAD) {
            /* the forward: x {1, 2, 4, 4}, w {4, 2, 3, 3} -> {1, 4, 2, 2} */
            static const int64_t S1422[4] = {1, 4, 2, 2};
            bool dx = op == KN_OP_CONV2D_INPUT_GRAD;
            c->in[dx ? 0 : 1] = hdr(&t[dx ? 0 : 1], dt, 4, S1422);
            if (dx) c->in[1] = hdr(&t[1], dt, 4, S4233);
            c->a.nshape = 4;
            memcpy(c->a.shape, dx ? S1244 : S4233, sizeof(int64_t) * 4);
        }
        break;
    case KN_K_POOL:
        hdr(&t[0], dt, 4, S1244);
        c->a.kernel[0] = c->a.kernel[1] = c->a.stride[0] = c->a.stride[1] = 2;
        c->a.nshape = 2;
        c->a.shape[0] = c->a.shape[1] = 1;
        break;
    case KN_K_ATTENTION:
        c->n_in = 3;
        for (int i = 0; i < 3; i++) c->in[i] = hdr(&t[i], dt, 4, S1248);
        c->a.scale = 0.35;
        break;
    case KN_K_CAT:
        c->n_in = 2;
        c->in[1] = hdr(&t[1], dt, 2, S23);
        break;
    case KN_K_INDEX:
        if (op == KN_OP_GATHER_SCATTER) { /* h, src, dst into 4 rows */
            c->n_in = 3;
            c->in[0] = hdr(&t[0], dt, 2, S43);
            c->in[1] = hdr(&t[1], KN_I64, 1, S5);
            c->in[2] = hdr(&t[2], KN_I64, 1, S5);
            c->a.nshape = 1;
            c->a.shape[0] = 4;
        } else {
            hdr(&t[0], dt, 2, S43);
            hdr(&t[1], KN_I64, op == KN_OP_GATHER ? 2 : 1, op == KN_OP_GATHER ? S43 : S2);
            if (op == KN_OP_INDEX_ADD) hdr(&t[2], dt, 2, (const int64_t[]){2, 3});
        }
        break;
    case KN_K_TRI: hdr(&t[0], dt, 2, S33); break;
    case KN_K_VIEW:
        c->a.nshape = 1;
        c->a.shape[0] = 6;
        c->a.ndims = 2;
        c->a.dims[0] = 1;
        c->a.stop = c->a.step = 1;
        if (op == KN_OP_EXPAND) {
            c->a.nshape = 2;
            memcpy(c->a.shape, S23, sizeof S23);
        }
        break;
    case KN_K_CREATE:
        c->a.dtype = dt;
        c->a.nshape = 1;
        c->a.shape[0] = 3;
        c->a.value = 0;
        c->a.value2 = op == KN_OP_RANDINT ? 2 : 1;
        break;
    default: break;
    }
}

static bool library_op(kn_op op)
{
    kn_op_kind k = kn_op_kind_of(op);
    return k == KN_K_MATMUL || k == KN_K_CONV || k == KN_K_ATTENTION || op == KN_OP_GATHER_SCATTER;
}

static void test_every_op_and_dtype(void)
{
    int wrong = 0, accepted = 0, refused = 0;
    for (int op = 0; op < KN_OP_COUNT; op++)
        for (int dt = 0; dt < KN_DTYPE_COUNT; dt++) {
            kn_tensor t[KN_MAX_INPUTS];
            kn_opcall c;
            sample_call((kn_op)op, (kn_dtype)dt, t, &c);
            kn_meta m[KN_MAX_OUTPUTS];
            int n_out = 0;
            bool inferred = kn_op_infer(&c, m, &n_out) == KN_OK;
            bool says = kn_cuda_supports_op(&c);
            bool want = inferred && kn_op_kind_of((kn_op)op) != KN_K_VIEW;
            accepted += inferred;
            refused += !says;
            if ((inferred || library_op((kn_op)op)) && says != want) {
                printf("#   %s in %s: kn_op_infer %s, supports_op says %s\n", kn_op_name((kn_op)op),
                       kn_dtype_name((kn_dtype)dt), inferred ? "accepts" : "refuses", says ? "yes" : "no");
                wrong++;
            }
        }
    ok(accepted > KN_OP_COUNT * 3, "kn_op_infer accepts %d of the sample calls", accepted);
    ok(wrong == 0, "supports_op says yes exactly to what infer accepts, views aside, and no to a library op "
                   "infer refuses (%d calls refused)", refused);
}

static void test_op_alone(void)
{
    int wrong = 0;
    for (int op = 0; op < KN_OP_COUNT; op++) {
        kn_opcall c;
        kn_opcall_init(&c, (kn_op)op);
        bool want = kn_op_kind_of((kn_op)op) != KN_K_VIEW;
        if (kn_cuda_supports_op(&c) != want) {
            printf("#   %s alone: supports_op says %s\n", kn_op_name((kn_op)op), want ? "no" : "yes");
            wrong++;
        }
    }
    ok(wrong == 0, "asked about the op alone, every op but the views runs in some dtype");
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ATTENTION);
    ok(kn_cuda_supports_op(&c), "the plan's attention probe gets yes");
}

static void test_families(void)
{
    kn_tensor t[KN_MAX_INPUTS];
    kn_opcall c;
    sample_call(KN_OP_MATMUL, KN_I32, t, &c);
    ok(!kn_cuda_supports_op(&c), "matmul of i32: no (cuBLASLt and kiln's kernel take floats)");
    sample_call(KN_OP_CONV2D, KN_I64, t, &c);
    ok(!kn_cuda_supports_op(&c), "conv2d of i64: no");
    sample_call(KN_OP_ATTENTION, KN_BOOL, t, &c);
    ok(!kn_cuda_supports_op(&c), "attention of bool: no");

    sample_call(KN_OP_SUM, KN_F32, t, &c);
    ok(kn_cuda_eager_supports(&c) && kn_cuda_ops_supports(&c), "sum over one dim: the kernel IR's (and the templates')");
    c.a.ndims = 2;
    c.a.dims[0] = 0;
    ok(!kn_cuda_eager_supports(&c) && kn_cuda_ops_supports(&c) && kn_cuda_supports_op(&c),
       "sum over two dims: the templates'");
    c.a.ndims = 0;
    ok(!kn_cuda_eager_supports(&c) && kn_cuda_supports_op(&c), "sum over all dims of a 2-D input: the templates'");
    sample_call(KN_OP_RANDN, KN_F32, t, &c);
    ok(!kn_cuda_eager_supports(&c) && kn_cuda_ops_supports(&c), "randn: the templates' (never a generated kernel)");
    sample_call(KN_OP_INDEX_SELECT, KN_BF16, t, &c);
    ok(!kn_cuda_eager_supports(&c) && kn_cuda_ops_supports(&c), "index_select: the templates'");
    sample_call(KN_OP_LAYER_NORM, KN_F16, t, &c);
    ok(kn_cuda_eager_supports(&c) && !kn_cuda_ops_supports(&c), "layer_norm: the kernel IR's alone");
    sample_call(KN_OP_RESHAPE, KN_F32, t, &c);
    ok(!kn_cuda_supports_op(&c), "reshape: no (views are metadata, run in core)");

    sample_call(KN_OP_GATHER_SCATTER, KN_F32, t, &c);
    c.a.n_epilogue = 2;
    c.a.epilogue[0] = KN_OP_RELU;
    c.a.epilogue[1] = KN_OP_LOG_SOFTMAX;
    ok(kn_cuda_gather_scatter_supports(&c) && kn_cuda_supports_op(&c), "gather_scatter + relu + log_softmax: yes");
    c.a.epilogue[0] = KN_OP_SOFTMAX;
    c.a.epilogue[1] = KN_OP_RELU;
    ok(!kn_cuda_supports_op(&c), "gather_scatter with a row op before the last step: no");
    c.a.n_epilogue = 1;
    c.a.epilogue[0] = KN_OP_EXP;
    ok(!kn_cuda_supports_op(&c), "gather_scatter with an exp epilogue: no");
    c.a.epilogue[0] = KN_OP_SOFTMAX;
    int64_t wide[2] = {4, KN_GATHER_SCATTER_ROW_MAX + 1};
    hdr(&t[0], KN_F32, 2, wide);
    ok(!kn_cuda_supports_op(&c), "gather_scatter with a softmax over rows of %d: no", KN_GATHER_SCATTER_ROW_MAX + 1);
    hdr(&t[0], KN_I32, 2, S43);
    c.a.n_epilogue = 0;
    ok(!kn_cuda_supports_op(&c), "gather_scatter of i32 rows: no");
}

/* A tensor on the GPU like header h: index inputs (i64 of an index op)
 * hold 1 (indices are 1-based), the rest 0.5, 0.75, ... (positive, so
 * that log and sqrt stay finite). NULL on failure. */
static kn_tensor *gpu_tensor(const kn_tensor *h, bool index)
{
    kn_tensor *t = NULL, *d = NULL;
    if (kn_tensor_new(h->dtype, h->ndim, h->shape, KN_CPU, &t) != KN_OK) return NULL;
    for (int64_t i = 0; i < kn_tensor_numel(t); i++)
        kn_store_f64((char *)t->storage->data + i * (int64_t)kn_dtype_size(t->dtype), t->dtype,
                     index ? 1.0 : 0.5 + 0.25 * (double)(i % 5));
    if (kn_tensor_to_device(t, KN_CUDA, NULL, &d) != KN_OK) d = NULL;
    kn_tensor_release(t);
    return d;
}

/* With a GPU: every sample call supports_op says yes to runs through
 * eager execution (the vtable's run) on real tensors. */
static void test_runs_on_gpu(void)
{
    int ran = 0, failed = 0;
    for (int op = 0; op < KN_OP_COUNT; op++)
        for (int dt = 0; dt < KN_DTYPE_COUNT; dt++) {
            kn_tensor t[KN_MAX_INPUTS];
            kn_opcall c;
            sample_call((kn_op)op, (kn_dtype)dt, t, &c);
            kn_meta m[KN_MAX_OUTPUTS];
            int n_out = 0;
            if (kn_op_kind_of((kn_op)op) == KN_K_VIEW || kn_op_infer(&c, m, &n_out) != KN_OK ||
                !kn_cuda_supports_op(&c))
                continue;
            bool made = true;
            for (int i = 0; i < c.n_in; i++) {
                bool index = kn_op_kind_of((kn_op)op) == KN_K_INDEX && i > 0 && c.in[i]->dtype == KN_I64;
                c.in[i] = gpu_tensor(&t[i], index);
                made = made && c.in[i];
            }
            kn_status st = made ? kn_op_eager(&c, KN_CUDA) : KN_ERR_DEVICE;
            if (st == KN_OK) st = kn_backend_get(KN_CUDA)->be->sync(kn_backend_get(KN_CUDA));
            if (st != KN_OK) {
                printf("#   %s in %s: %s\n", kn_op_name((kn_op)op), kn_dtype_name((kn_dtype)dt), kn_last_error());
                failed++;
            }
            ran++;
            for (int i = 0; i < c.n_out; i++) kn_tensor_release(c.out[i]);
            for (int i = 0; i < c.n_in; i++) kn_tensor_release(c.in[i]);
        }
    ok(failed == 0 && ran > KN_OP_COUNT * 3, "on the GPU, %d calls supports_op says yes to ran (%d failed)", ran, failed);
}

int main(void)
{
    test_every_op_and_dtype();
    test_op_alone();
    test_families();
    if (kn_cuda_available()) test_runs_on_gpu();
    else printf("# no CUDA device (%s): the calls are not run\n", kn_cuda_unavailable_reason());
    return done_testing();
}
#endif
