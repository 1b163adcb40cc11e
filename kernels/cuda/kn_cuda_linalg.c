/* kn_cuda_linalg: what kn_cuda_blas.c and kn_cuda_dnn.c share (see
 * kn_cuda_linalg.h): kiln's own kernels of kn_linalg.cu, the fallback for
 * what cuBLASLt or cuDNN refuse, with the launch helpers around them, and
 * the helpers both libraries' paths take their operands through.
 */
#include "kn_cuda_linalg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_context.h"
#include "kn_cuda_module.h"
#include "kn_cuda_tsrc.h"
#include "kn_op.h"
#include "kn_strbuf.h"

#define GRID_CAP 65535

int64_t kn_cuda_align_of(const void *p, const int64_t *byte_strides, int n, int64_t cap)
{
    uint64_t bits = (uint64_t)(uintptr_t)p;
    for (int i = 0; i < n; i++) bits |= (uint64_t)(byte_strides[i] < 0 ? -byte_strides[i] : byte_strides[i]);
    int64_t a = cap;
    while (a > 1 && bits % (uint64_t)a) a >>= 1;
    return a;
}

kn_status kn_cuda_copy_as(const kn_tensor *t, kn_dtype dt, kn_tensor **out)
{
    kn_opcall c;
    kn_opcall_init(&c, dt == t->dtype ? KN_OP_CONTIGUOUS : KN_OP_CAST);
    c.n_in = 1;
    c.in[0] = (kn_tensor *)t;
    c.a.dtype = dt;
    KN_TRY(kn_op_eager(&c, kn_cuda_current()->device));
    *out = c.out[0];
    return KN_OK;
}

kn_status kn_cuda_linalg_source(char **src)
{
    const char *args = kn_cuda_template("kn_cuda_la_args.h"), *tpl = kn_cuda_template("kn_linalg");
    *src = NULL;
    if (!args || !tpl)
        return kn_error(KN_ERR_UNSUPPORTED, "kernels/cuda/%s is not embedded in this build",
                        !args ? "kn_cuda_la_args.h" : "kn_linalg.cu");
    kn_strbuf s = {0};
    kn_strbuf_puts(&s, "#define KN_LA_STANDALONE 1\n");
    kn_strbuf_puts(&s, args);
    kn_strbuf_puts(&s, "\n");
    kn_strbuf_puts(&s, tpl);
    return kn_strbuf_finish(&s, src, "kn_linalg.cu's source");
}

kn_status kn_cuda_linalg_kernel(const char *name, const void **fn)
{
    /* process-wide, like the module cache: kernel handles serve every GPU */
    static kn_cuda_module *mod;
    static struct {
        const char *name;
        const void *fn;
    } known[8];
    for (int i = 0; i < 8 && known[i].name; i++)
        if (strcmp(known[i].name, name) == 0) {
            *fn = known[i].fn;
            return KN_OK;
        }
    if (!mod) {
        char *src = NULL;
        kn_status st = kn_cuda_linalg_source(&src);
        if (st != KN_OK) return kn_error(st, "%s: %s", name, kn_last_error());
        st = kn_cuda_module_get(src, kn_cuda_cache_dir(), &mod);
        free(src);
        KN_TRY(st);
    }
    KN_TRY(kn_cuda_module_kernel(mod, name, fn));
    for (int i = 0; i < 8; i++)
        if (!known[i].name) {
            known[i].name = name; /* callers pass string literals */
            known[i].fn = *fn;
            break;
        }
    return KN_OK;
}

bool kn_cuda_lib_log_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("KILN_LOGS");
        on = v && strstr(v, "library") != NULL;
    }
    return on;
}

int64_t kn_cuda_linalg_grid(int64_t work, int64_t per_block)
{
    int64_t g = (work + per_block - 1) / per_block;
    return g < 1 ? 1 : g > GRID_CAP ? GRID_CAP : g;
}

kn_status kn_cuda_bias_act(kn_tensor *y, const kn_tensor *bias, int64_t inner, int64_t channels,
                           int act)
{
    int64_t total = kn_tensor_numel(y);
    if (total == 0 || (!bias && act == 0)) return KN_OK;
    kn_la_bias_args p;
    memset(&p, 0, sizeof p);
    p.y = kn_cuda_tensor_ptr(y);
    p.bias = bias ? kn_cuda_tensor_ptr(bias) : NULL;
    p.total = total;
    p.inner = inner > 0 ? inner : 1;
    p.channels = channels > 0 ? channels : 1;
    p.bias_s = bias ? bias->strides[0] : 0;
    p.y_dt = (int)y->dtype;
    p.b_dt = bias ? (int)bias->dtype : 0;
    p.act = act;
    const void *fn;
    KN_TRY(kn_cuda_linalg_kernel(y->dtype == KN_F64 ? "kn_la_bias_act_f64" : "kn_la_bias_act_f32", &fn));
    return kn_cuda_launch(fn, kn_cuda_linalg_grid(total, 256), 256, &p, 0);
}
