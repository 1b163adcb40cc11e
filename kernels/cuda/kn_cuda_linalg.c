/* kn_cuda_linalg: what kn_cuda_blas.c, kn_cuda_conv.c and kn_cuda_dnn.c share (see
 * kn_cuda_linalg.h): kiln's own kernels (kn_linalg.cu, kn_la_*.cu) in
 * modules by use, compiled when first asked for; the fallback for
 * what cuBLASLt or cuDNN refuse (conv2d's launchers among them: the direct
 * convolution, the stem convolution, the NHWC copy), and the helpers both
 * libraries' paths take their operands through.
 */
#include "kn_cuda_linalg.h"

#include <pthread.h>
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

/* ---- the modules ----
 * NVRTC compiles a module whole, and a model's first call waits for every
 * module it runs a kernel of: each holds what one kind of model runs, so a
 * bf16 ResNet compiles its stem's one instantiation, not the f16 ones or
 * the fallback convolutions. A module's source is KN_LA_STANDALONE, its
 * defines (KN_LA_DT, KN_LA_NT, its own, such as KN_LA_DW_WINDOW, and
 * KN_LA_KERNEL, the name of its one kernel, for a template of one
 * instantiation), the argument structs
 * (kn_cuda_la_args.h), kn_la_common.cu and its template. The disk cache
 * keys a module by its whole source (kn_cuda_module.c), defines included. */
#define LA_MAX_KERNELS 6
typedef struct la_module {
    const char *name;     /* "stem_tc bf16 n8": for bench/nvrtc_modules.c and the tests */
    const char *tpl;      /* its template, kernels/cuda/<tpl>.cu */
    int dt, nt;           /* KN_LA_DT and KN_LA_NT, or -1 for none */
    const char *defines;  /* more of its defines, or "" */
    const char *kernels[LA_MAX_KERNELS]; /* its kernels; one: the template names it KN_LA_KERNEL */
} la_module;

#define DW_WINDOW(k) "#define KN_LA_DW_WINDOW " #k "\n"
#define DW_NCHW(k) DW_WINDOW(k) "#define KN_LA_DW_NCHW 1\n"
static const la_module la_modules[] = {
    /* kn_linalg.cu: the fallback matmul and conv2d */
    {"fallback", "kn_linalg", -1, -1, "", {"kn_la_matmul_f32", "kn_la_matmul_f64", "kn_la_conv2d_f32", "kn_la_conv2d_f64"}},
    /* kn_la_dw.cu: channels-last (window 0: any window; strips of 3x3 and
     * 5x5), then NCHW planes */
    {"dw f32", "kn_la_dw", KN_LA_F32, -1, DW_WINDOW(0), {"kn_la_conv_dw_f32"}},
    {"dw bf16", "kn_la_dw", KN_LA_BF16, -1, DW_WINDOW(0), {"kn_la_conv_dw_bf16"}},
    {"dw f16", "kn_la_dw", KN_LA_F16, -1, DW_WINDOW(0), {"kn_la_conv_dw_f16"}},
    {"dw strip3 f32", "kn_la_dw", KN_LA_F32, -1, DW_WINDOW(3), {"kn_la_conv_dw_strip3_f32"}},
    {"dw strip3 bf16", "kn_la_dw", KN_LA_BF16, -1, DW_WINDOW(3), {"kn_la_conv_dw_strip3_bf16"}},
    {"dw strip3 f16", "kn_la_dw", KN_LA_F16, -1, DW_WINDOW(3), {"kn_la_conv_dw_strip3_f16"}},
    {"dw strip5 f32", "kn_la_dw", KN_LA_F32, -1, DW_WINDOW(5), {"kn_la_conv_dw_strip5_f32"}},
    {"dw strip5 bf16", "kn_la_dw", KN_LA_BF16, -1, DW_WINDOW(5), {"kn_la_conv_dw_strip5_bf16"}},
    {"dw strip5 f16", "kn_la_dw", KN_LA_F16, -1, DW_WINDOW(5), {"kn_la_conv_dw_strip5_f16"}},
    {"dw nchw3 f32", "kn_la_dw", KN_LA_F32, -1, DW_NCHW(3), {"kn_la_conv_dw_nchw3_f32"}},
    {"dw nchw3 bf16", "kn_la_dw", KN_LA_BF16, -1, DW_NCHW(3), {"kn_la_conv_dw_nchw3_bf16"}},
    {"dw nchw3 f16", "kn_la_dw", KN_LA_F16, -1, DW_NCHW(3), {"kn_la_conv_dw_nchw3_f16"}},
    {"dw nchw5 f32", "kn_la_dw", KN_LA_F32, -1, DW_NCHW(5), {"kn_la_conv_dw_nchw5_f32"}},
    {"dw nchw5 bf16", "kn_la_dw", KN_LA_BF16, -1, DW_NCHW(5), {"kn_la_conv_dw_nchw5_bf16"}},
    {"dw nchw5 f16", "kn_la_dw", KN_LA_F16, -1, DW_NCHW(5), {"kn_la_conv_dw_nchw5_f16"}},
    /* kn_la_rows.cu: a few rows against a weight, strict f32 */
    {"rows f32", "kn_la_rows", KN_LA_F32, -1, "", {"kn_la_gemm_rows_f32"}},
    {"aux", "kn_la_aux", -1, -1, "",
     {"kn_la_bias_act_f32", "kn_la_bias_act_f64", "kn_la_to_nhwc", "kn_la_gemm_x3_sum", "kn_la_conv_dgrad_weight"}},
    {"stem f32", "kn_la_stem", KN_LA_F32, -1, "", {"kn_la_conv_stem_f32"}},
    {"stem bf16", "kn_la_stem", KN_LA_BF16, -1, "", {"kn_la_conv_stem_bf16"}},
    {"stem f16", "kn_la_stem", KN_LA_F16, -1, "", {"kn_la_conv_stem_f16"}},
    {"stem_tc bf16 n2", "kn_la_stem_tc", KN_LA_BF16, 2, "", {"kn_la_conv_stem_tc_bf16_n2"}},
    {"stem_tc bf16 n4", "kn_la_stem_tc", KN_LA_BF16, 4, "", {"kn_la_conv_stem_tc_bf16_n4"}},
    {"stem_tc bf16 n8", "kn_la_stem_tc", KN_LA_BF16, 8, "", {"kn_la_conv_stem_tc_bf16_n8"}},
    {"stem_tc f16 n2", "kn_la_stem_tc", KN_LA_F16, 2, "", {"kn_la_conv_stem_tc_f16_n2"}},
    {"stem_tc f16 n4", "kn_la_stem_tc", KN_LA_F16, 4, "", {"kn_la_conv_stem_tc_f16_n4"}},
    {"stem_tc f16 n8", "kn_la_stem_tc", KN_LA_F16, 8, "", {"kn_la_conv_stem_tc_f16_n8"}},
    /* kn_la_gemm_x3.cu: the split-precision f32 GEMM, a module per tile
     * shape (kn_cuda_gemm_x3.c's table, in its order) and layout */
#define X3_MODULES(bm, bn, wm, wn, kt, name)                                                                       \
    X3_MODULE(bm, bn, wm, wn, kt, name, 1, 1, "kk"), X3_MODULE(bm, bn, wm, wn, kt, name, 1, 0, "kn"),            \
        X3_MODULE(bm, bn, wm, wn, kt, name, 0, 1, "mk"), X3_MODULE(bm, bn, wm, wn, kt, name, 0, 0, "mn")
#define X3_MODULE(bm, bn, wm, wn, kt, name, ak, bk, lay)                                                           \
    {"gemm_x3 " name " " lay, "kn_la_gemm_x3", -1, -1,                                                             \
     "#define KN_X3_BM " #bm "\n#define KN_X3_BN " #bn "\n#define KN_X3_WM " #wm "\n#define KN_X3_WN " #wn       \
     "\n#define KN_X3_KTILE " #kt "\n#define KN_X3_AK " #ak "\n#define KN_X3_BK " #bk "\n",                      \
     {"kn_la_gemm_x3_" name "_" lay}}
    X3_MODULES(128, 128, 64, 32, 32, "128x128"),
    X3_MODULES(128, 64, 32, 32, 32, "128x64"),
    X3_MODULES(64, 64, 32, 32, 32, "64x64"),
    X3_MODULES(64, 32, 32, 16, 32, "64x32"),
    X3_MODULES(128, 128, 64, 32, 64, "128x128k64"),
    /* its wgmma form (sm_90a only: KN_ARCH_SPECIFIC), a warpgroup per 64
     * rows of the tile */
#define X3W_MODULES(bm, bn, kt, name)                                                                              \
    X3W_MODULE(bm, bn, kt, name, 1, 1, "kk"), X3W_MODULE(bm, bn, kt, name, 1, 0, "kn"),                          \
        X3W_MODULE(bm, bn, kt, name, 0, 1, "mk"), X3W_MODULE(bm, bn, kt, name, 0, 0, "mn")
#define X3W_MODULE(bm, bn, kt, name, ak, bk, lay)                                                                  \
    {"gemm_x3 " name " " lay, "kn_la_gemm_x3", -1, -1,                                                             \
     KN_CUDA_ARCH_SPECIFIC_LINE "#define KN_X3_WGMMA 1\n#define KN_X3_BM " #bm "\n#define KN_X3_BN " #bn           \
                               "\n#define KN_X3_KTILE " #kt "\n#define KN_X3_AK " #ak "\n#define KN_X3_BK " #bk "\n", \
     {"kn_la_gemm_x3_" name "_" lay}}
    X3W_MODULES(128, 128, 32, "wg128x128"),
    X3W_MODULES(64, 128, 32, "wg64x128"),
    X3W_MODULES(64, 64, 32, "wg64x64"),
    X3W_MODULES(128, 192, 32, "wg128x192"),
    X3W_MODULES(128, 64, 32, "wg128x64"),
    /* its swapped form (KN_X3_SWAP, y^T = b a^T for few rows): both
     * operands k-contiguous only */
#define X3S_MODULE(bn, name)                                                                                       \
    {"gemm_x3 " name " kk", "kn_la_gemm_x3", -1, -1,                                                                \
     KN_CUDA_ARCH_SPECIFIC_LINE "#define KN_X3_WGMMA 1\n#define KN_X3_SWAP 1\n#define KN_X3_BM 64\n#define KN_X3_BN " #bn \
                               "\n#define KN_X3_KTILE 32\n#define KN_X3_AK 1\n#define KN_X3_BK 1\n",                \
     {"kn_la_gemm_x3_" name "_kk"}}
    X3S_MODULE(128, "wgs64x128"),
    X3S_MODULE(64, "wgs64x64"),
    /* its convolution forms (kn_cuda_la_args.h), a module per tile shape
     * (kn_cuda_gemm_x3.c's conv tiles): KN_X3_CONV 1, conv_x3, an implicit
     * GEMM over a channels-last input (both operands k-contiguous);
     * KN_X3_CONV 2, conv_x3w, its weight gradient (the output's gradient
     * m-contiguous, the input's windows gathered n-contiguous) */
#define X3C_MODULE(form, kmajor, bm, bn, tag, name)                                                                \
    {tag " " name, "kn_la_gemm_x3", -1, -1,                                                                        \
     KN_CUDA_ARCH_SPECIFIC_LINE "#define KN_X3_WGMMA 1\n#define KN_X3_CONV " #form "\n#define KN_X3_BM " #bm       \
                               "\n#define KN_X3_BN " #bn "\n#define KN_X3_KTILE 32\n#define KN_X3_AK " #kmajor    \
                               "\n#define KN_X3_BK " #kmajor "\n",                                                \
     {"kn_la_" tag "_" name}}
    X3C_MODULE(1, 1, 128, 64, "conv_x3", "wg128x64"),
    X3C_MODULE(1, 1, 128, 128, "conv_x3", "wg128x128"),
    X3C_MODULE(1, 1, 64, 64, "conv_x3", "wg64x64"),
    X3C_MODULE(2, 0, 64, 128, "conv_x3w", "wg64x128"),
#undef X3C_MODULE
#undef X3S_MODULE
#undef X3W_MODULE
#undef X3W_MODULES
#undef X3_MODULE
#undef X3_MODULES
};
#define LA_N_MODULES ((int)(sizeof la_modules / sizeof la_modules[0]))

int kn_cuda_linalg_module_count(void)
{
    return LA_N_MODULES;
}

const char *kn_cuda_linalg_module_name(int m)
{
    return m >= 0 && m < LA_N_MODULES ? la_modules[m].name : NULL;
}

const char *kn_cuda_linalg_module_kernel(int m, int k)
{
    return m >= 0 && m < LA_N_MODULES && k >= 0 && k < LA_MAX_KERNELS ? la_modules[m].kernels[k] : NULL;
}

kn_status kn_cuda_linalg_module_source(int m, char **src)
{
    *src = NULL;
    if (m < 0 || m >= LA_N_MODULES) return kn_error(KN_ERR_ARG, "cuda: no linalg module %d", m);
    const la_module *mod = &la_modules[m];
    const char *parts[3] = {kn_cuda_template("kn_cuda_la_args.h"), kn_cuda_template("kn_la_common"),
                            kn_cuda_template(mod->tpl)};
    const char *files[3] = {"kn_cuda_la_args.h", "kn_la_common.cu", mod->tpl};
    for (int i = 0; i < 3; i++)
        if (!parts[i]) return kn_error(KN_ERR_UNSUPPORTED, "kernels/cuda/%s%s is not embedded in this build", files[i],
                                       i == 2 ? ".cu" : "");
    kn_strbuf s = {0};
    kn_strbuf_puts(&s, "#define KN_LA_STANDALONE 1\n");
    if (mod->dt >= 0) kn_strbuf_printf(&s, "#define KN_LA_DT %d\n", mod->dt);
    if (mod->nt >= 0) kn_strbuf_printf(&s, "#define KN_LA_NT %d\n", mod->nt);
    kn_strbuf_puts(&s, mod->defines);
    if (!mod->kernels[1]) kn_strbuf_printf(&s, "#define KN_LA_KERNEL %s\n", mod->kernels[0]);
    for (int i = 0; i < 3; i++) {
        kn_strbuf_puts(&s, parts[i]);
        kn_strbuf_puts(&s, "\n");
    }
    return kn_strbuf_finish(&s, src, "a linalg module's source");
}

/* A kernel of a module by name: its module compiled the first time one of
 * its kernels is asked for, and the kernel kept. Process-wide, like the
 * module cache: kernel handles serve every GPU. */
kn_status kn_cuda_linalg_kernel(const char *name, const void **fn)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const void *known[LA_N_MODULES][LA_MAX_KERNELS];
    int m = 0, k = 0;
    for (m = 0; m < LA_N_MODULES; m++) {
        for (k = 0; k < LA_MAX_KERNELS && la_modules[m].kernels[k]; k++)
            if (strcmp(la_modules[m].kernels[k], name) == 0) break;
        if (k < LA_MAX_KERNELS && la_modules[m].kernels[k]) break;
    }
    if (m == LA_N_MODULES) return kn_error(KN_ERR_ARG, "cuda: no linalg kernel '%s'", name);
    pthread_mutex_lock(&lock);
    *fn = known[m][k];
    pthread_mutex_unlock(&lock);
    if (*fn) return KN_OK;
    /* compiled outside the lock: another module's kernels stay at hand meanwhile
     * (two threads after the same module get one from the module cache) */
    char *src = NULL;
    kn_cuda_module *mod = NULL;
    kn_status st = kn_cuda_linalg_module_source(m, &src);
    if (st != KN_OK) return kn_error(st, "%s: %s", name, kn_last_error());
    st = kn_cuda_module_get(src, kn_cuda_cache_dir(), &mod);
    free(src);
    KN_TRY(st);
    KN_TRY(kn_cuda_module_kernel(mod, name, fn));
    pthread_mutex_lock(&lock);
    known[m][k] = *fn;
    pthread_mutex_unlock(&lock);
    return KN_OK;
}

bool kn_cuda_lib_log_on(void)
{
    return (kn_cuda_call_settings()->logs & KN_SETTINGS_LOG_LIBRARY) != 0;
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

/* ---- conv2d ---- */

/* kiln's kernel: any strides (y's too), any float dtypes, bias fused.
 * x, w and y are seen as NCHW here: a channels-last call passes permuted
 * headers (conv_run). */
kn_status kn_cuda_linalg_conv2d(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias,
                                kn_tensor *y, const kn_attrs *at)
{
    kn_la_conv_args p;
    memset(&p, 0, sizeof p);
    int xo = x->ndim - 3, yo = y->ndim - 3;
    p.x = kn_cuda_tensor_ptr(x);
    p.w = kn_cuda_tensor_ptr(w);
    p.bias = bias ? kn_cuda_tensor_ptr(bias) : NULL;
    p.y = kn_cuda_tensor_ptr(y);
    p.n = xo ? x->shape[0] : 1;
    p.c = x->shape[xo], p.h = x->shape[xo + 1], p.wd = x->shape[xo + 2];
    p.k = w->shape[0], p.r = w->shape[2], p.s = w->shape[3];
    p.p = y->shape[yo + 1], p.q = y->shape[yo + 2];
    p.xs[0] = xo ? x->strides[0] : 0;
    p.ys[0] = yo ? y->strides[0] : 0;
    for (int i = 0; i < 3; i++) {
        p.xs[i + 1] = x->strides[xo + i];
        p.ys[i + 1] = y->strides[yo + i];
    }
    for (int i = 0; i < 4; i++) p.ws[i] = w->strides[i];
    p.bias_s = bias ? bias->strides[0] : 0;
    p.sh = at->stride[0], p.sw = at->stride[1], p.ph = at->padding[0], p.pw = at->padding[1];
    p.dh = at->dilation[0], p.dw = at->dilation[1], p.groups = at->groups;
    p.x_dt = (int)x->dtype, p.w_dt = (int)w->dtype, p.b_dt = bias ? (int)bias->dtype : 0;
    p.y_dt = (int)y->dtype;
    const void *fn;
    KN_TRY(kn_cuda_linalg_kernel(y->dtype == KN_F64 ? "kn_la_conv2d_f64" : "kn_la_conv2d_f32", &fn));
    int64_t total = kn_tensor_numel(y), g = (total + 255) / 256;
    return kn_cuda_launch(fn, g > GRID_CAP ? GRID_CAP : g, 256, &p, 0);
}

/* x (seen as NCHW through any strides) as a new contiguous {N, H, W, cp}
 * of x's dtype, channels past C zero: a channels-last conv's input. */
kn_status kn_cuda_linalg_to_nhwc(const kn_tensor *x, int64_t cp, kn_tensor **out)
{
    int64_t shape[4] = {x->shape[0], x->shape[2], x->shape[3], cp};
    KN_TRY(kn_tensor_new(x->dtype, 4, shape, kn_tensor_device(x), out));
    kn_la_nhwc_args p;
    memset(&p, 0, sizeof p);
    p.x = kn_cuda_tensor_ptr(x);
    p.y = kn_cuda_tensor_ptr(*out);
    p.n = x->shape[0], p.c = x->shape[1], p.h = x->shape[2], p.w = x->shape[3], p.cp = cp;
    for (int i = 0; i < 4; i++) p.xs[i] = x->strides[i];
    p.esize = (int)kn_dtype_size(x->dtype);
    const void *fn;
    kn_status st = kn_cuda_linalg_kernel("kn_la_to_nhwc", &fn);
    int64_t total = kn_tensor_numel(*out), g = (total + 255) / 256;
    if (st == KN_OK) st = kn_cuda_launch(fn, g > GRID_CAP ? GRID_CAP : g, 256, &p, 0);
    if (st != KN_OK) {
        kn_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

/* Whether every element of one image of x (strides of any sign) is within
 * 2^31 elements of its first: the stem kernel's offsets are 32-bit. */
static bool image_in_32_bits(const kn_tensor *x)
{
    int64_t reach = 0;
    for (int d = 1; d < 4; d++) {
        int64_t s = x->strides[d] < 0 ? -x->strides[d] : x->strides[d];
        if (x->shape[d] > 0 && s > (INT32_MAX - reach) / (x->shape[d] > 1 ? x->shape[d] - 1 : 1)) return false;
        reach += s * (x->shape[d] > 1 ? x->shape[d] - 1 : 0);
    }
    return reach < INT32_MAX;
}

/* Whether the stem kernel takes this channels-last call: an NCHW input
 * whose taps per output channel (C x kh x kw) fit its shared memory, one
 * group, one float dtype throughout (f64 stays on the exact paths). */
bool kn_cuda_linalg_stem_fits(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at)
{
    kn_dtype dt = y->dtype;
    return at->out_layout == KN_LAYOUT_NHWC && at->in_layout == KN_LAYOUT_NCHW && at->groups == 1 && x->ndim == 4 &&
           (dt == KN_F32 || dt == KN_BF16 || dt == KN_F16) && x->dtype == dt && w->dtype == dt &&
           kn_tensor_is_contiguous(w) && kn_tensor_is_contiguous(y) &&
           x->shape[1] * w->shape[1] * w->shape[2] <= KN_LA_STEM_TAPS && image_in_32_bits(x);
}

/* Whether the tensor-core stem kernel takes this call: the stem kernel's
 * form in bf16 or f16, with up to KN_LA_TC_TAPS taps. */
bool kn_cuda_linalg_stem_tc_fits(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at)
{
    kn_dtype dt = y->dtype;
    return at->out_layout == KN_LAYOUT_NHWC && at->in_layout == KN_LAYOUT_NCHW && at->groups == 1 && x->ndim == 4 &&
           (dt == KN_BF16 || dt == KN_F16) && x->dtype == dt && w->dtype == dt && kn_tensor_is_contiguous(w) &&
           kn_tensor_is_contiguous(y) && x->shape[1] * w->shape[1] * w->shape[2] <= KN_LA_TC_TAPS &&
           w->shape[3] >= x->shape[1] && image_in_32_bits(x) && at->dilation[0] * w->shape[1] < 32768 &&
           at->dilation[1] * w->shape[2] < 32768;
}

/* The stem kernels' arguments (both kernels take the same struct). */
static kn_la_stem_args stem_args(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                                 const kn_attrs *at, int act)
{
    kn_la_stem_args p;
    memset(&p, 0, sizeof p);
    p.x = kn_cuda_tensor_ptr(x);
    p.w = kn_cuda_tensor_ptr(w);
    p.bias = bias ? kn_cuda_tensor_ptr(bias) : NULL;
    p.y = kn_cuda_tensor_ptr(y);
    p.n = x->shape[0], p.c = x->shape[1], p.h = x->shape[2], p.wd = x->shape[3];
    p.k = w->shape[0], p.r = w->shape[1], p.s = w->shape[2], p.cw = w->shape[3];
    p.p = y->shape[1], p.q = y->shape[2];
    for (int i = 0; i < 4; i++) p.xs[i] = x->strides[i];
    p.bias_s = bias ? bias->strides[0] : 0;
    p.sh = at->stride[0], p.sw = at->stride[1], p.ph = at->padding[0], p.pw = at->padding[1];
    p.dh = at->dilation[0], p.dw = at->dilation[1];
    p.dt = (int)y->dtype, p.b_dt = bias ? (int)bias->dtype : 0, p.act = act;
    return p;
}

/* The tensor-core stem: 128 pixels by 64 output channels a block. */
kn_status kn_cuda_linalg_conv_stem_tc(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                                      const kn_attrs *at, int act)
{
    kn_la_stem_args p = stem_args(x, w, bias, y, at, act);
    p.vec = kn_cuda_align_of(p.y, NULL, 0, 16) == 16; /* 16-byte stores where the channels allow (the kernel checks) */
    int64_t bn = p.k <= 16 ? 16 : p.k <= 32 ? 32 : 64; /* the kernel's channels a block: its NT x 8 */
    static const char *const names[2][3] = {
        {"kn_la_conv_stem_tc_bf16_n2", "kn_la_conv_stem_tc_bf16_n4", "kn_la_conv_stem_tc_bf16_n8"},
        {"kn_la_conv_stem_tc_f16_n2", "kn_la_conv_stem_tc_f16_n4", "kn_la_conv_stem_tc_f16_n8"}};
    const void *fn;
    KN_TRY(kn_cuda_linalg_kernel(names[y->dtype == KN_F16][bn == 16 ? 0 : bn == 32 ? 1 : 2], &fn));
    /* blocks that stay: each stages its weights once and then takes tile
     * after tile (four blocks an SM fit its registers) */
    const int sms = kn_cuda_current()->sm_count;
    int64_t pix = p.n * p.p * p.q, gx = (pix + 127) / 128, gy = (p.k + bn - 1) / bn;
    int64_t resident = 4 * (int64_t)sms / gy > 0 ? 4 * (int64_t)sms / gy : 1;
    if (gx > resident) gx = resident;
    if (gy > 65535) return kn_error(KN_ERR_UNSUPPORTED, "conv2d: %lld output channels for the stem kernel", (long long)p.k);
    kn_cuda_variant_label("kiln stem conv tensor cores nhwc%s%s", bias ? " +bias" : "", act ? "+relu" : "");
    return kn_cuda_launch_dims(fn, (unsigned)gx, (unsigned)gy, 128, 1, &p, 0);
}

/* The stem kernel (channels-last out, NCHW in) with bias and act (0 none,
 * 1 relu) fused. */
kn_status kn_cuda_linalg_conv_stem(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                                   const kn_attrs *at, int act)
{
    kn_la_stem_args p = stem_args(x, w, bias, y, at, act);
    int64_t per16 = 16 / (int64_t)kn_dtype_size(y->dtype); /* elements in 16 bytes */
    p.vec = kn_cuda_align_of(p.y, NULL, 0, 16) == 16 && p.k % per16 == 0;
    const void *fn;
    KN_TRY(kn_cuda_linalg_kernel(y->dtype == KN_BF16  ? "kn_la_conv_stem_bf16"
                                 : y->dtype == KN_F16 ? "kn_la_conv_stem_f16"
                                                      : "kn_la_conv_stem_f32",
                                 &fn));
    int64_t pix = p.n * p.p * p.q, g = (pix + 127) / 128;
    kn_cuda_variant_label("kiln stem conv nhwc%s%s", bias ? " +bias" : "", act ? "+relu" : "");
    return kn_cuda_launch(fn, g > GRID_CAP ? GRID_CAP : g, 128, &p, 0);
}

bool kn_cuda_linalg_dw_fits(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at)
{
    kn_dtype dt = y->dtype;
    return at->in_layout == KN_LAYOUT_NHWC && at->out_layout == KN_LAYOUT_NHWC && x->ndim == 4 && w->ndim == 4 &&
           y->ndim == 4 && (dt == KN_F32 || dt == KN_BF16 || dt == KN_F16) && x->dtype == dt && w->dtype == dt &&
           at->groups == x->shape[3] && w->shape[0] == x->shape[3] && w->shape[3] == 1 && y->shape[3] == w->shape[0] &&
           w->shape[1] * w->shape[2] <= KN_LA_DW_TAPS && kn_tensor_is_contiguous(w) && kn_tensor_is_contiguous(y) &&
           y->shape[0] * y->shape[1] * y->shape[2] < INT32_MAX && x->shape[1] < INT32_MAX / 2 &&
           x->shape[2] < INT32_MAX / 2;
}

kn_status kn_cuda_linalg_conv_dw(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                                 const kn_attrs *at, int act)
{
    kn_la_dw_args p;
    memset(&p, 0, sizeof p);
    p.x = kn_cuda_tensor_ptr(x);
    p.w = kn_cuda_tensor_ptr(w);
    p.bias = bias ? kn_cuda_tensor_ptr(bias) : NULL;
    p.y = kn_cuda_tensor_ptr(y);
    p.n = x->shape[0], p.h = x->shape[1], p.wd = x->shape[2], p.c = x->shape[3];
    p.p = y->shape[1], p.q = y->shape[2];
    for (int i = 0; i < 4; i++) p.xs[i] = x->strides[i];
    p.bias_s = bias ? bias->strides[0] : 0;
    p.r = (int)w->shape[1], p.s = (int)w->shape[2];
    p.sh = at->stride[0], p.sw = at->stride[1], p.ph = at->padding[0], p.pw = at->padding[1];
    p.dh = at->dilation[0], p.dw = at->dilation[1];
    p.dt = (int)y->dtype, p.b_dt = bias ? (int)bias->dtype : 0, p.act = act;
    int64_t per16 = 16 / (int64_t)kn_dtype_size(y->dtype); /* channels in 16 bytes */
    p.vec = kn_cuda_align_of(p.x, NULL, 0, 16) == 16 && kn_cuda_align_of(p.y, NULL, 0, 16) == 16 &&
            kn_cuda_align_of(p.w, NULL, 0, 16) == 16 && p.c % per16 == 0 && p.xs[3] == 1 && p.xs[2] % per16 == 0 &&
            p.xs[1] % per16 == 0 && p.xs[0] % per16 == 0;
    /* a slice is at most 32 vectors, split evenly: 72 channels are one
     * slice of 9 lanes by 28 pixels, not 16 lanes of which 7 idle */
    int64_t vec = p.vec ? per16 : 1, vectors = (p.c + vec - 1) / vec, slices = (vectors + 31) / 32;
    int64_t lanes = (vectors + slices - 1) / slices, rows = 256 / lanes;
    /* strips of KN_LA_DW_STRIP outputs a thread where the kernel has the
     * window and stride compiled in (MobileNet's 3x3 and 5x5, stride 1 and
     * 2); one output a thread otherwise */
    bool strip = p.vec && p.r == p.s && (p.r == 3 || p.r == 5) && (p.sw == 1 || p.sw == 2) && p.dh == 1 && p.dw == 1;
    int64_t work = p.n * p.p * (strip ? (p.q + KN_LA_DW_STRIP - 1) / KN_LA_DW_STRIP : p.q);
    int64_t gx = (work + rows - 1) / rows;
    if (gx > 16384) gx = 16384;
    if (slices > 65535) return kn_error(KN_ERR_UNSUPPORTED, "conv2d: %lld channels for the depthwise kernel", (long long)p.c);
    const void *fn;
    char name[40];
    snprintf(name, sizeof name, "kn_la_conv_dw%s_%s", !strip ? "" : p.r == 3 ? "_strip3" : "_strip5",
             kn_dtype_name(y->dtype));
    KN_TRY(kn_cuda_linalg_kernel(name, &fn));
    kn_cuda_variant_label("kiln depthwise conv nhwc%s%s", bias ? " +bias" : "",
                          act == KN_EPI_RELU ? " +relu" : act == KN_EPI_HARDSWISH ? " +hardswish" : "");
    return kn_cuda_launch_dims(fn, (unsigned)gx, (unsigned)slices, (unsigned)lanes, (unsigned)rows, &p, 0);
}

/* The block's planes and rows for kn_la_conv_dw_nchw (kn_la_dwc_args): a
 * thread takes four output rows of one column, 256 threads a block. Small
 * planes (MobileNet's 7x7 and 14x14) share a block, whole; a large one is
 * cut into bands of rows. false: even one band of four rows of one plane
 * needs more than DWC_SHARED_MAX of shared memory (a row over 1700 wide). */
#define DWC_THREADS 256
/* 48 KB a block without opting in, the kernel's own 6 KB of plane
 * offsets (ptxas) included */
#define DWC_SHARED_MAX (40 * 1024)
static bool dwc_layout(kn_la_dwc_args *p, int k, size_t *shared)
{
    if (p->p <= 0 || p->q <= 0 || p->planes <= 0) return false;
    int64_t strips = (p->p + 3) / 4, per_plane = strips * p->q;
    int64_t ppb = 1, band = p->p;
    if (per_plane <= DWC_THREADS) {
        ppb = DWC_THREADS / per_plane;
        if (ppb > p->planes) ppb = p->planes;
    } else {
        int64_t band_strips = DWC_THREADS / p->q;
        band = (band_strips > 0 ? band_strips : 1) * 4;
        if (band > p->p) band = p->p;
    }
    int64_t pitch = (p->q - 1) * p->s + k;
    for (;;) {
        int64_t rows = ((band + 3) / 4 * 4 - 1) * p->s + k;
        size_t bytes = (size_t)(ppb * (rows * pitch + k * k + 1)) * sizeof(float);
        if (bytes <= DWC_SHARED_MAX) {
            p->ppb = (int)ppb, p->band = (int)band, p->bands = (int)((p->p + band - 1) / band);
            p->pitch = (int)pitch, p->rows_alloc = (int)rows;
            *shared = bytes;
            return true;
        }
        if (ppb > 1) ppb /= 2;
        else if (band > 4) band = (band - 1) / 4 * 4;
        else return false;
    }
}

static void dwc_args(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y, const kn_attrs *at,
                     int act, kn_la_dwc_args *p)
{
    memset(p, 0, sizeof *p);
    p->x = kn_cuda_tensor_ptr(x);
    p->w = kn_cuda_tensor_ptr(w);
    p->bias = bias ? kn_cuda_tensor_ptr(bias) : NULL;
    p->y = kn_cuda_tensor_ptr(y);
    p->n = x->shape[0], p->c = x->shape[1], p->h = x->shape[2], p->wd = x->shape[3];
    p->p = y->shape[2], p->q = y->shape[3], p->planes = p->n * p->c;
    for (int i = 0; i < 4; i++) p->xs[i] = x->strides[i];
    p->bias_s = bias ? bias->strides[0] : 0;
    p->s = at->stride[0], p->ph = at->padding[0], p->pw = at->padding[1];
    p->dt = (int)y->dtype, p->b_dt = bias ? (int)bias->dtype : 0, p->act = act;
}

bool kn_cuda_linalg_dw_nchw_fits(const kn_tensor *x, const kn_tensor *w, const kn_tensor *y, const kn_attrs *at)
{
    kn_dtype dt = y->dtype;
    if (at->in_layout != KN_LAYOUT_NCHW || at->out_layout != KN_LAYOUT_NCHW || x->ndim != 4 || w->ndim != 4 ||
        y->ndim != 4 || !(dt == KN_F32 || dt == KN_BF16 || dt == KN_F16) || x->dtype != dt || w->dtype != dt ||
        at->groups != x->shape[1] || w->shape[0] != x->shape[1] || w->shape[1] != 1 || y->shape[1] != w->shape[0] ||
        w->shape[2] != w->shape[3] || (w->shape[2] != 3 && w->shape[2] != 5) || at->stride[0] != at->stride[1] ||
        (at->stride[0] != 1 && at->stride[0] != 2) || at->dilation[0] != 1 || at->dilation[1] != 1 ||
        at->padding[0] < 0 || at->padding[1] < 0 || !kn_tensor_is_contiguous(w) || !kn_tensor_is_contiguous(y) ||
        x->shape[2] >= INT32_MAX / 4 || x->shape[3] >= INT32_MAX / 4 || y->shape[0] * y->shape[1] >= INT32_MAX)
        return false;
    kn_la_dwc_args p;
    size_t shared;
    dwc_args(x, w, NULL, (kn_tensor *)y, at, 0, &p);
    return dwc_layout(&p, (int)w->shape[2], &shared);
}

kn_status kn_cuda_linalg_conv_dw_nchw(const kn_tensor *x, const kn_tensor *w, const kn_tensor *bias, kn_tensor *y,
                                      const kn_attrs *at, int act)
{
    kn_la_dwc_args p;
    size_t shared = 0;
    int k = (int)w->shape[2];
    dwc_args(x, w, bias, y, at, act, &p);
    if (!dwc_layout(&p, k, &shared))
        return kn_error(KN_ERR_UNSUPPORTED, "conv2d: rows of %lld for the NCHW depthwise kernel", (long long)p.q);
    int64_t blocks = (p.planes + p.ppb - 1) / p.ppb * p.bands;
    if (blocks > INT32_MAX) return kn_error(KN_ERR_UNSUPPORTED, "conv2d: %lld blocks for the depthwise kernel",
                                            (long long)blocks);
    char name[40];
    snprintf(name, sizeof name, "kn_la_conv_dw_nchw%d_%s", k, kn_dtype_name(y->dtype));
    const void *fn;
    KN_TRY(kn_cuda_linalg_kernel(name, &fn));
    kn_cuda_variant_label("kiln depthwise conv nchw%s%s", bias ? " +bias" : "",
                          act == KN_EPI_RELU ? " +relu" : act == KN_EPI_HARDSWISH ? " +hardswish" : "");
    return kn_cuda_launch_dims(fn, (unsigned)blocks, 1, DWC_THREADS, 1, &p, shared);
}

bool kn_cuda_linalg_gemm_rows_fits(const kn_tensor *a, const kn_tensor *b, const kn_tensor *y)
{
    return a->ndim == 2 && b->ndim == 2 && y->ndim == 2 && a->dtype == KN_F32 && b->dtype == KN_F32 &&
           y->dtype == KN_F32 && a->shape[0] == y->shape[0] && b->shape[0] == y->shape[1] &&
           a->shape[1] == b->shape[1] && a->shape[0] <= KN_CUDA_GEMM_ROWS_MAX && a->strides[1] == 1 &&
           b->strides[1] == 1 && y->strides[1] == 1;
}

kn_status kn_cuda_linalg_gemm_rows(const kn_tensor *a, const kn_tensor *b, const kn_tensor *bias, kn_tensor *y, int act)
{
    kn_la_rows_args p;
    memset(&p, 0, sizeof p);
    p.a = kn_cuda_tensor_ptr(a), p.b = kn_cuda_tensor_ptr(b), p.y = kn_cuda_tensor_ptr(y);
    p.bias = bias ? kn_cuda_tensor_ptr(bias) : NULL;
    p.m = a->shape[0], p.n = b->shape[0], p.k = a->shape[1];
    p.a_s0 = a->strides[0], p.b_s0 = b->strides[0], p.y_s0 = y->strides[0];
    p.bias_s = bias ? bias->strides[0] : 0;
    p.b_dt = bias ? (int)bias->dtype : 0, p.act = act;
    if (p.m == 0 || p.n == 0) return KN_OK;
    const void *fn;
    KN_TRY(kn_cuda_linalg_kernel("kn_la_gemm_rows_f32", &fn));
    kn_cuda_variant_label("kiln rows gemm%s%s", bias ? " +bias" : "",
                          act == KN_EPI_RELU ? " +relu" : act == KN_EPI_HARDSWISH ? " +hardswish" : "");
    return kn_cuda_launch(fn, kn_cuda_linalg_grid(p.n, 1), 256, &p, 0); /* a block a column of y */
}
