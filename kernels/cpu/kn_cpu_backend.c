/* kn_cpu_backend: the CPU reference backend's vtable. Memory is host memory,
 * 64-byte aligned (a cache line, and what AVX-512 loads like), zeroed as
 * kn_tensor_new promises; `run` sends each call to the kernel family of its
 * op kind (see kn_cpu.h). The CPU runs everything synchronously.
 */
#include <stdlib.h>
#include <string.h>

#include "kn_cpu.h"

#define KN_CPU_ALIGN 64

static kn_status cpu_alloc(int64_t nbytes, void **p)
{
    *p = NULL;
    if (nbytes < 0 || nbytes > KN_MAX_BYTES)
        return kn_error(KN_ERR_OOM, "cpu: cannot allocate %lld bytes", (long long)nbytes);
    /* aligned_alloc wants a multiple of the alignment; a zero-byte tensor
     * still gets a unique pointer. */
    size_t n = (size_t)((nbytes + KN_CPU_ALIGN - 1) / KN_CPU_ALIGN * KN_CPU_ALIGN);
    if (n == 0) n = KN_CPU_ALIGN;
    void *m = aligned_alloc(KN_CPU_ALIGN, n);
    if (!m) return kn_error(KN_ERR_OOM, "cpu: out of host memory for %lld bytes", (long long)nbytes);
    memset(m, 0, n);
    *p = m;
    return KN_OK;
}

static void cpu_free(void *p)
{
    free(p);
}

static kn_status cpu_copy(void *dst, const void *src, int64_t nbytes)
{
    if (nbytes > 0) memmove(dst, src, (size_t)nbytes);
    return KN_OK;
}

/* Every op has a CPU kernel; kn_op_infer has already rejected the dtypes and
 * attributes an op does not accept. */
static bool cpu_supports_op(const kn_opcall *c)
{
    return c && (unsigned)c->op < KN_OP_COUNT;
}

static kn_status cpu_run(const kn_opcall *c)
{
    if (!c || (unsigned)c->op >= KN_OP_COUNT)
        return kn_error(KN_ERR_ARG, "cpu: unknown op %d", c ? (int)c->op : -1);
    switch (kn_op_kind_of(c->op)) {
    case KN_K_UNARY:
    case KN_K_BINARY:
    case KN_K_COMPARE:
    case KN_K_TERNARY:
    case KN_K_MASKED:
    case KN_K_COPY: return kn_cpu_elementwise(c);
    case KN_K_REDUCE:
    case KN_K_ARGREDUCE:
    case KN_K_SOFTMAX: return kn_cpu_reduce(c);
    case KN_K_NORM: return kn_cpu_norm(c);
    case KN_K_MATMUL: return kn_cpu_matmul(c);
    case KN_K_CONV: return kn_cpu_conv2d(c);
    case KN_K_POOL: return kn_cpu_pool2d(c);
    case KN_K_CAT:
    case KN_K_INDEX:
    case KN_K_TRI: return kn_cpu_index(c);
    case KN_K_CREATE: return kn_cpu_create(c);
    case KN_K_VIEW: break; /* views are metadata: kn_op_eager runs them in core */
    }
    return kn_error(KN_ERR_UNSUPPORTED, "%s: no cpu kernel", kn_op_name(c->op));
}

static kn_status cpu_sync(void)
{
    return KN_OK;
}

const kn_backend kn_cpu_backend = {
    .name = "cpu",
    .device = KN_CPU,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .supports_op = cpu_supports_op,
    .run = cpu_run,
    .sync = cpu_sync,
};
