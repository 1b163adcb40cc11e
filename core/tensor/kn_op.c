/* kn_op: the op table's names, kinds and arities, and kn_opcall defaults. */
#include "kn_op.h"

#include <stddef.h>
#include <string.h>

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
/* attrs are compared as bytes (cse, guards): the last fields must end the
 * struct without tail padding */
_Static_assert(offsetof(kn_attrs, widen) + sizeof(int) == sizeof(kn_attrs),
               "kn_attrs has no padding after its last field");

const char *kn_op_name(kn_op op)
{
    return (unsigned)op < KN_OP_COUNT ? kn_op_table[op].name : "?";
}

kn_op_kind kn_op_kind_of(kn_op op)
{
    return (unsigned)op < KN_OP_COUNT ? kn_op_table[op].kind : KN_K_CREATE;
}

bool kn_conv_is_patch_embedding(const kn_attrs *a, int64_t kh, int64_t kw)
{
    return a->groups == 1 && kh * kw > 1 && a->stride[0] == kh && a->stride[1] == kw && a->padding[0] == 0 &&
           a->padding[1] == 0 && a->dilation[0] == 1 && a->dilation[1] == 1;
}

bool kn_op_is_elementwise(kn_op op)
{
    if ((unsigned)op >= KN_OP_COUNT) return false;
    switch (kn_op_kind_of(op)) {
    case KN_K_UNARY:
    case KN_K_BINARY:
    case KN_K_COMPARE:
    case KN_K_TERNARY:
    case KN_K_MASKED: return true;
    default: return false;
    }
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
