/* kn_op: the op table's names and kinds, and eager dispatch to a backend. */
#include "kn_op.h"

#include <string.h>

#include "kn_backend.h"
#include "kn_profile.h"
#include "kn_view.h"

static const struct {
    const char *name;
    kn_op_kind kind;
    int arity;
} kn_op_table[] = {
#define KN_OP(id, name, kind, nin, expr) {name, kind, nin},
#include "kn_ops.def"
#undef KN_OP
};

_Static_assert(sizeof kn_op_table / sizeof kn_op_table[0] == KN_OP_COUNT,
               "kn_op_table must have one row per op in kn_ops.def");

const char *kn_op_name(kn_op op)
{
    return (unsigned)op < KN_OP_COUNT ? kn_op_table[op].name : "?";
}

kn_op_kind kn_op_kind_of(kn_op op)
{
    return (unsigned)op < KN_OP_COUNT ? kn_op_table[op].kind : KN_K_CREATE;
}

int kn_op_arity(kn_op op)
{
    return (unsigned)op < KN_OP_COUNT ? kn_op_table[op].arity : 0;
}

kn_op kn_op_by_name(const char *name)
{
    for (int i = 0; i < KN_OP_COUNT; i++)
        if (strcmp(kn_op_table[i].name, name) == 0) return (kn_op)i;
    return KN_OP_COUNT;
}

void kn_opcall_init(kn_opcall *c, kn_op op)
{
    memset(c, 0, sizeof *c);
    c->op = op;
    c->a.correction = 1;
    c->a.count_include_pad = 1;
    c->a.groups = 1;
    c->a.dilation[0] = c->a.dilation[1] = 1;
    c->a.stride[0] = c->a.stride[1] = 1;
    c->a.eps = 1e-5;
    c->a.dtype = KN_F32;
}

#ifdef KILN_HAVE_CUDA
#include "cuda/kn_cuda.h"
#endif

const kn_backend *kn_backend_get(kn_device dev)
{
    if (dev == KN_CPU) return &kn_cpu_backend;
#ifdef KILN_HAVE_CUDA
    if (dev == KN_CUDA && kn_cuda_available()) return &kn_cuda_backend;
#endif
    return NULL;
}

static bool g_allow_tf32;

void kn_set_allow_tf32(bool allow)
{
    g_allow_tf32 = allow;
}

bool kn_allow_tf32(void)
{
    return g_allow_tf32;
}

kn_status kn_op_eager(kn_opcall *c, kn_device dev)
{
    kn_meta metas[KN_MAX_OUTPUTS];
    int n_out = 0;
    c->n_out = 0;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i] && !c->in[i]->storage)
            return kn_error(KN_ERR_ARG,
                            "%s: input %d is a traced value that has no data (it comes from a "
                            "compiled call that did not finish)",
                            kn_op_name(c->op), i + 1);
    if (c->n_in > 0) {
        dev = kn_tensor_device(c->in[0]);
        for (int i = 1; i < c->n_in; i++)
            if (kn_tensor_device(c->in[i]) != dev)
                return kn_error(KN_ERR_DEVICE, "%s: input %d is on %s but input 1 is on %s",
                                kn_op_name(c->op), i + 1,
                                kn_device_name(kn_tensor_device(c->in[i])),
                                kn_device_name(dev));
    }
    KN_TRY(kn_op_infer(c, metas, &n_out));
    if (kn_op_kind_of(c->op) == KN_K_VIEW) { /* metadata only: no backend involved */
        KN_TRY(kn_view_run(c, &c->out[0]));
        c->n_out = 1;
        return KN_OK;
    }
    const kn_backend *be = kn_backend_get(dev);
    if (!be) return kn_error(KN_ERR_DEVICE, "device %s is not available", kn_device_name(dev));
    if (!be->supports_op(c))
        return kn_error(KN_ERR_UNSUPPORTED, "%s: not supported on %s for these dtypes",
                        kn_op_name(c->op), be->name);
    for (int i = 0; i < n_out; i++) {
        kn_status st = kn_tensor_new_meta(&metas[i], dev, &c->out[i]);
        if (st != KN_OK) {
            for (int j = 0; j < i; j++) kn_tensor_release(c->out[j]);
            return st;
        }
    }
    c->n_out = n_out;
    bool prof = kn_profile_on;
    int slot = prof ? kn_profile_kernel_begin(dev) : -1;
    kn_status st = be->run(c);
    if (prof) kn_profile_op_end(slot, c);
    if (st != KN_OK) {
        for (int i = 0; i < n_out; i++) {
            kn_tensor_release(c->out[i]);
            c->out[i] = NULL;
        }
        c->n_out = 0;
    }
    return st;
}
