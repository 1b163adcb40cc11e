/* t/backend_devices.c: devices and the backend registry (core/tensor/
 * kn_backend.c, kn_device_* in kn_tensor.c), with a second CPU device
 * (cpu:1) standing in for a second GPU: the same kernels under another
 * device number, so results must match cpu:0 bit for bit while kiln keeps
 * the two apart (no mixed inputs, copies between them, each freed through
 * its own device object).
 */
#include <stdio.h>
#include <string.h>

#include "cpu/kn_cpu_backend.h"
#include "kn_backend.h"
#include "kn_view.h"
#include "ops_testlib.h"
#include "tap.h"

static const kn_device CPU1 = KN_CPU | 1 << KN_DEVICE_INDEX_SHIFT;

static void test_names_and_parsing(void)
{
    is_str(kn_device_name(KN_CPU), "cpu", "device 0 of the cpu prints as cpu");
    is_str(kn_device_name(KN_CUDA), "cuda", "device 0 of cuda prints as cuda");
    is_str(kn_device_name(kn_device_make(KN_DEVICE_CUDA, 1)), "cuda:1", "cuda device 1 prints as cuda:1");
    is_str(kn_device_name(CPU1), "cpu:1", "cpu device 1 prints as cpu:1");
    ok(kn_device_kind_of(kn_device_make(KN_DEVICE_CUDA, 3)) == KN_DEVICE_CUDA &&
           kn_device_index(kn_device_make(KN_DEVICE_CUDA, 3)) == 3,
       "kind and index survive kn_device_make");

    static const struct {
        const char *name;
        kn_device_kind kind;
        int index;
    } good[] = {{"cpu", KN_DEVICE_CPU, 0},  {"cpu:0", KN_DEVICE_CPU, 0},   {"cpu:1", KN_DEVICE_CPU, 1},
                {"cuda", KN_DEVICE_CUDA, 0}, {"cuda:0", KN_DEVICE_CUDA, 0}, {"cuda:1", KN_DEVICE_CUDA, 1},
                {"cuda:7", KN_DEVICE_CUDA, 7}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        kn_device d = -1;
        kn_status st = kn_device_parse(good[i].name, &d);
        ok(st == KN_OK && kn_device_kind_of(d) == good[i].kind && kn_device_index(d) == good[i].index,
           "parse '%s' -> %s", good[i].name, st == KN_OK ? kn_device_name(d) : kn_last_error());
    }
    kn_device d = -1;
    ok(kn_device_parse("cuda:0", &d) == KN_OK && d == KN_CUDA, "cuda:0 is KN_CUDA itself");
    ok(kn_device_parse("cpu:0", &d) == KN_OK && d == KN_CPU, "cpu:0 is KN_CPU itself");

    static const struct {
        const char *name, *message;
    } bad[] = {{"tpu", "unknown device 'tpu' (expected cpu or cuda)"},
               {"cudax", "unknown device 'cudax'"},
               {"cuda:", "unknown device 'cuda:'"},
               {"cuda:x", "unknown device 'cuda:x'"},
               {"cuda:1x", "unknown device 'cuda:1x'"},
               {"cuda:-1", "unknown device 'cuda:-1'"},
               {"cuda:99", "device 'cuda:99': kiln addresses cuda:0 to cuda:7"},
               {"cpu:8", "device 'cpu:8': kiln addresses cpu:0 to cpu:7"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kn_status st = kn_device_parse(bad[i].name, &d);
        ok(st == KN_ERR_ARG, "parse '%s' fails", bad[i].name);
        like(kn_last_error(), bad[i].message, "... saying why");
    }
}

static void test_registry(void)
{
    ok(kn_backend_get(CPU1) == NULL, "cpu:1 is absent until added");
    kn_tensor *t = NULL;
    int64_t shape[1] = {4};
    ok(kn_tensor_new(KN_F32, 1, shape, CPU1, &t) == KN_ERR_DEVICE && t == NULL, "no tensor on an absent device");
    like(kn_last_error(), "device cpu:1 is not available", "... and the error names the device");
    ok(kn_backend_get(kn_device_make(KN_DEVICE_CPU, KN_DEVICE_MAX_INDEX)) == NULL, "an index past the table is absent");
    ok(kn_backend_get(-1) == NULL, "a negative device is absent");

    ok(kn_cpu_add_device(1) == KN_OK, "add cpu:1");
    ok(kn_cpu_add_device(1) == KN_ERR_ARG, "adding it twice fails");
    like(kn_last_error(), "device cpu:1 is already present", "... saying so");
    ok(kn_cpu_add_device(KN_DEVICE_MAX_INDEX) == KN_ERR_ARG, "an index past the table cannot be added");

    kn_device_ctx *d0 = kn_backend_get(KN_CPU), *d1 = kn_backend_get(CPU1);
    ok(d0 && d1 && d0 != d1, "cpu:0 and cpu:1 have their own device objects");
    ok(d1 && d1->device == CPU1 && d1->index == 1, "cpu:1's object knows its device and index");
    ok(d0 && d1 && d0->be == d1->be && strcmp(d1->be->name, "cpu") == 0, "... and runs the cpu backend");
    ok(kn_backend_get(CPU1) == d1, "the registry gives the same object each time");
}

static kn_status run1(kn_op op, kn_tensor *a, kn_tensor *b, kn_device dev, kn_tensor **out)
{
    kn_opcall c;
    kn_opcall_init(&c, op);
    c.n_in = b ? 2 : (a ? 1 : 0);
    c.in[0] = a;
    c.in[1] = b;
    if (op == KN_OP_SOFTMAX) c.a.dim = 1;
    if (op == KN_OP_FULL) {
        c.a.nshape = 2;
        c.a.shape[0] = 3;
        c.a.shape[1] = 5;
        c.a.value = 2.5;
    }
    kn_status st = kn_op_eager(&c, dev);
    *out = st == KN_OK ? c.out[0] : NULL;
    for (int i = 1; i < c.n_out; i++) kn_tensor_release(c.out[i]);
    return st;
}

/* Same dtype, shape and bits (through cpu:0 for either device). */
static bool same_values(kn_tensor *a, kn_tensor *b)
{
    kn_tensor *ha = NULL, *hb = NULL;
    bool same = kn_tensor_to_device(a, KN_CPU, NULL, &ha) == KN_OK && kn_tensor_to_device(b, KN_CPU, NULL, &hb) == KN_OK &&
                tl_meta_is(hb, ha->dtype, ha->ndim, ha->shape);
    for (int64_t i = 0; same && i < kn_tensor_numel(ha); i++) {
        double x = tl_get(ha, i), y = tl_get(hb, i);
        same = memcmp(&x, &y, sizeof x) == 0;
    }
    kn_tensor_release(ha);
    kn_tensor_release(hb);
    return same;
}

static void test_ops_on_cpu1(void)
{
    int64_t sa[2] = {3, 4}, sb[2] = {4, 5};
    kn_tensor *a0 = tl_rand(KN_F32, 2, sa, TL_CONTIG, -2, 2, 0);
    kn_tensor *b0 = tl_rand(KN_F32, 2, sb, TL_TRANSPOSED, -2, 2, 0);
    kn_tensor *a1 = NULL, *b1 = NULL;
    ok(kn_tensor_to_device(a0, CPU1, NULL, &a1) == KN_OK && kn_tensor_device(a1) == CPU1, "copy cpu -> cpu:1");
    ok(kn_tensor_to_device(b0, CPU1, NULL, &b1) == KN_OK && kn_tensor_device(b1) == CPU1 && kn_tensor_is_contiguous(b1),
       "copy of a transposed view cpu -> cpu:1 (made contiguous)");
    ok(a1 && b1 && same_values(a0, a1) && same_values(b0, b1), "the copies hold the same values");

    static const kn_op ops[] = {KN_OP_MATMUL, KN_OP_ADD, KN_OP_SUM, KN_OP_SOFTMAX, KN_OP_EXP};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        kn_op op = ops[i];
        bool binary = kn_op_arity(op) == 2;
        kn_tensor *y0 = NULL, *y1 = NULL;
        kn_tensor *rhs0 = op == KN_OP_MATMUL ? b0 : a0, *rhs1 = op == KN_OP_MATMUL ? b1 : a1;
        kn_status s0 = run1(op, a0, binary ? rhs0 : NULL, KN_CPU, &y0);
        kn_status s1 = run1(op, a1, binary ? rhs1 : NULL, KN_CPU, &y1);
        ok(s0 == KN_OK && s1 == KN_OK && kn_tensor_device(y0) == KN_CPU && kn_tensor_device(y1) == CPU1,
           "%s runs on cpu:1 and its output lives there", kn_op_name(op));
        ok(s0 == KN_OK && s1 == KN_OK && same_values(y0, y1), "... with cpu:0's values, bit for bit");
        kn_tensor_release(y0);
        kn_tensor_release(y1);
    }

    kn_tensor *f = NULL;
    ok(run1(KN_OP_FULL, NULL, NULL, CPU1, &f) == KN_OK && kn_tensor_device(f) == CPU1 && tl_get(f, 14) == 2.5,
       "a creation op made on cpu:1");
    kn_tensor *v = NULL;
    ok(f && kn_view_transpose(f, 0, 1, &v) == KN_OK && kn_tensor_device(v) == CPU1, "a view stays on cpu:1");
    kn_tensor_release(v);
    kn_tensor_release(f);

    kn_tensor *mixed = NULL;
    ok(run1(KN_OP_ADD, a0, a1, KN_CPU, &mixed) == KN_ERR_DEVICE && mixed == NULL,
       "an op mixing cpu and cpu:1 inputs fails");
    like(kn_last_error(), "add: input 2 is on cpu:1 but input 1 is on cpu", "... naming both devices");

    kn_tensor *back = NULL;
    ok(kn_tensor_to_device(a1, KN_CPU, NULL, &back) == KN_OK && kn_tensor_device(back) == KN_CPU && same_values(a0, back),
       "copy cpu:1 -> cpu gives the values back");
    kn_tensor *same = NULL;
    ok(kn_tensor_to_device(a1, CPU1, NULL, &same) == KN_OK && same == a1, "a copy to its own device is the tensor itself");
    kn_tensor_release(same);
    kn_tensor *none = NULL;
    ok(kn_tensor_to_device(a1, kn_device_make(KN_DEVICE_CPU, 5), NULL, &none) == KN_ERR_DEVICE && !none,
       "a copy to an absent device fails");
    like(kn_last_error(), "to: device cpu:5 is not available", "... naming it");

    kn_tensor_release(back);
    kn_tensor_release(a0);
    kn_tensor_release(b0);
    kn_tensor_release(a1);
    kn_tensor_release(b1);
}

int main(void)
{
    tl_seed();
    test_names_and_parsing();
    test_registry();
    test_ops_on_cpu1();
    return done_testing();
}
