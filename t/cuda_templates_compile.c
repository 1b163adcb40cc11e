/* t/cuda_templates_compile.c: every CUDA template module of kn_cuda_ops.c
 * (per dtype: the prelude, the argument structs, kn_rng.h and the .cu
 * families, with every kernel; and the one-kernel modules models compile,
 * for bf16 and i64) compiles with NVRTC for sm_90 without errors or warnings and
 * holds every kernel kn_cuda_ops.c looks up by name (kn_gather_scatter.cu's
 * included: its float modules compile for sm_80 too, the paths without
 * sm_90's vector and bf16 atomics); every module of kiln's own linear
 * algebra (kn_cuda_linalg.c: kn_linalg.cu, kn_la_aux.cu, and the stems per
 * dtype) compiles without warnings and holds the kernels its table lists,
 * and every kernel its templates define is in that table; every module of
 * kn_attention.cu (tensor-core kernels per bf16/f16 head-dim bucket, SIMT
 * kernels per dtype and output width; with kn_attention_f32.cu, the tiled
 * and split f32 kernels per head dim) compiles without warnings and holds
 * the kernels kn_cuda_attention.c looks up. Every embedded template must
 * be part of a module compiled here, so a new module cannot go untested.
 * Needs NVRTC only, no GPU, so template syntax errors fail CI on any
 * machine with the toolkit. */
#include "tap.h"

#ifndef KILN_HAVE_CUDA
int main(void)
{
    skip_all("built without the CUDA toolkit (no NVRTC)");
}
#else
#include <string.h>

#include "cuda/kn_cuda_attention.h"
#include "cuda/kn_cuda_linalg.h"
#include "cuda/kn_cuda_module.h"
#include "cuda/kn_cuda_nvrtc.h"
#include "cuda/kn_cuda_tsrc.h"

/* Whether the image names symbol `name` (ELF string tables hold names
 * NUL-terminated, so "kn_reduce" does not match "kn_reduce_final"). */
static bool has_symbol(const char *img, size_t n, const char *name)
{
    size_t len = strlen(name) + 1;
    for (const char *p = img; p && (size_t)(p - img) + len <= n; p++) {
        p = memchr(p, name[0], n - (size_t)(p - img));
        if (!p || (size_t)(p - img) + len > n) return false;
        if (memcmp(p, name, len) == 0 && (p == img || p[-1] == 0 || p[-1] == '.')) return true;
    }
    return false;
}

/* The embedded templates some compiled module's source holds, by index
 * (kn_cuda_template_name). */
#define MAX_TEMPLATES 64
static bool covered[MAX_TEMPLATES];

static void cover(const char *src)
{
    for (int i = 0; i < MAX_TEMPLATES && kn_cuda_template_name(i); i++)
        if (!covered[i] && strstr(src, kn_cuda_template(kn_cuda_template_name(i)))) covered[i] = true;
}

/* Every embedded template (a .cu file, an argument header) is in some module
 * this test compiled: one a new module of its own is missing from here. */
static void test_coverage(void)
{
    int n = 0, missing = 0;
    for (; n < MAX_TEMPLATES && kn_cuda_template_name(n); n++)
        if (!covered[n]) {
            printf("# %s is in no module this test compiles: add its modules here\n", kn_cuda_template_name(n));
            missing++;
        }
    ok(n > 0 && n < MAX_TEMPLATES, "%d embedded templates", n);
    is_int(missing, 0, "every embedded template is compiled as part of some module");
}

/* Whether a linalg module of kn_cuda_linalg.c's table holds kernel `name`. */
static bool linalg_listed(const char *name)
{
    for (int m = 0; m < kn_cuda_linalg_module_count(); m++)
        for (int k = 0; kn_cuda_linalg_module_kernel(m, k); k++)
            if (strcmp(kn_cuda_linalg_module_kernel(m, k), name) == 0) return true;
    return false;
}

/* Every module of kiln's own linear algebra compiles and holds its
 * kernels; every extern "C" kernel of its templates (kn_linalg.cu,
 * kn_la_*.cu) is in the table, named or as KN_LA_KERNEL (a template of one
 * instantiation a module). */
static void test_linalg_modules(void)
{
    int bad_compile = 0, bad_warn = 0, missing = 0, unlisted = 0, found = 0, n = kn_cuda_linalg_module_count();
    for (int m = 0; m < n; m++) {
        char *src = NULL, *img = NULL, *log = NULL;
        size_t len = 0;
        const char *name = kn_cuda_linalg_module_name(m);
        kn_status st = kn_cuda_linalg_module_source(m, &src);
        char arch[16];
        if (st == KN_OK) kn_cuda_module_arch(src, 90, arch, sizeof arch);
        if (st == KN_OK) st = kn_nvrtc_compile(src, arch, &img, &len, &log);
        if (st != KN_OK) {
            printf("# linalg %s: %s\n", name, kn_last_error());
            bad_compile++;
        } else {
            cover(src);
            if (log && strstr(log, "warning")) {
                printf("# linalg %s:\n%s\n", name, log);
                bad_warn++;
            }
            for (int k = 0; kn_cuda_linalg_module_kernel(m, k); k++)
                if (!has_symbol(img, len, kn_cuda_linalg_module_kernel(m, k))) {
                    printf("# linalg %s: no kernel %s in the image\n", name, kn_cuda_linalg_module_kernel(m, k));
                    missing++;
                }
        }
        free(img);
        free(log);
        free(src);
    }
    for (int i = 0; kn_cuda_template_name(i); i++) {
        const char *file = kn_cuda_template_name(i), *text = kn_cuda_template(file);
        if (strcmp(file, "kn_linalg.cu") != 0 && strncmp(file, "kn_la_", 6) != 0) continue;
        for (const char *p = strstr(text, "extern \"C\" __global__"); p; p = strstr(p + 1, "extern \"C\" __global__")) {
            const char *open = strchr(p, '('), *lb = strstr(p, "__launch_bounds__");
            if (lb && lb < open) open = strchr(strchr(lb, ')'), '('); /* the kernel's own parenthesis */
            const char *id = open;
            while (id > p && id[-1] != ' ') id--;
            char kname[64];
            snprintf(kname, sizeof kname, "%.*s", (int)(open - id), id);
            found++;
            if (strcmp(kname, "KN_LA_KERNEL") != 0 && !linalg_listed(kname)) {
                printf("# %s: kernel %s is in no module of kn_cuda_linalg.c's table\n", file, kname);
                unlisted++;
            }
        }
    }
    printf("# linalg: %d modules, %d kernels in the templates\n", n, found);
    ok(found >= 10, "linalg: the templates' kernels are found");
    is_int(bad_compile, 0, "linalg: every module compiles for sm_90");
    is_int(bad_warn, 0, "linalg: no NVRTC warnings");
    is_int(missing, 0, "linalg: every kernel of the table is in its module");
    is_int(unlisted, 0, "linalg: every kernel of the templates is in the table");
    ok(kn_cuda_linalg_module_kernel(n, 0) == NULL && kn_cuda_linalg_module_name(n) == NULL,
       "linalg: nothing past the last module");
    const void *fn = NULL;
    ok(kn_cuda_linalg_kernel("kn_la_no_such_kernel", &fn) != KN_OK && strstr(kn_last_error(), "kn_la_no_such_kernel"),
       "linalg: an unknown kernel is an error that names it");
}

/* Every module kn_cuda_attention.c can build: tensor-core modules for
 * bf16 and f16 at each padded head dim 16..128, SIMT modules for f32, bf16
 * and f16 at 1..8 output chunks of 32 columns, tiled f32 modules for head
 * dims 32, 64 and 128, split-f32 modules for head dims 32 and 64. */
static void test_attention_modules(void)
{
    int bad_compile = 0, bad_warn = 0, missing = 0, modules = 0;
    kn_att_module all[KN_ATTENTION_MAX_MODULES];
    int n_all = kn_cuda_attention_modules(all, KN_ATTENTION_MAX_MODULES);
    for (int mi = 0; mi < n_all; mi++) {
        const int kind = all[mi].kind, size = all[mi].size;
        const kn_dtype dt = all[mi].dt;
        const char *tag = kn_cuda_attention_module_tag(kind), *dn = kn_dtype_name(dt);
        char *src = NULL, *img = NULL, *log = NULL, names[KN_ATTENTION_MAX_VARIANTS][48];
        size_t n = 0;
        kn_status st = kn_cuda_attention_source(kind, dt, size, &src);
        if (st == KN_OK) st = kn_nvrtc_compile(src, "sm_90", &img, &n, &log);
        if (st == KN_OK) cover(src);
        modules++;
        if (st != KN_OK) {
            printf("# attention %s %s size %d: %s\n", tag, dn, size, kn_last_error());
            bad_compile++;
        } else {
            if (log && strstr(log, "warning")) {
                printf("# attention %s %s size %d:\n%s\n", tag, dn, size, log);
                bad_warn++;
            }
            int nk = kn_cuda_attention_kernel_names(kind, dt, size, names);
            for (int k = 0; k < nk; k++)
                if (!has_symbol(img, n, names[k])) {
                    printf("# attention: no kernel %s in the image\n", names[k]);
                    missing++;
                }
        }
        free(img);
        free(log);
        free(src);
    }
    printf("# kn_attention.cu: %d modules\n", modules);
    is_int(bad_compile, 0, "kn_attention.cu: every module compiles for sm_90");
    is_int(bad_warn, 0, "kn_attention.cu: no NVRTC warnings");
    is_int(missing, 0, "kn_attention.cu: every kernel the launcher looks up is in its module");
    char *src = NULL;
    ok(kn_cuda_attention_source(KN_ATT_MODULE_TC, KN_F32, 64, &src) != KN_OK && !src, "attention: no tensor-core f32 module");
    ok(kn_cuda_attention_source(KN_ATT_MODULE_TC, KN_BF16, 72, &src) != KN_OK && !src, "attention: no module for an unpadded size");
}

/* A model compiles one module a template kernel (kn_cuda_ops_source with
 * k >= 0): each such module must hold its kernel and no other, or the
 * KN_KSEL_ guards of the .cu files have drifted from kn_cuda_tsrc.c's
 * names. bf16 and i64 (float and integer instantiations). */
static void test_one_kernel_modules(void)
{
    static const kn_dtype dts[] = {KN_BF16, KN_I64};
    for (int i = 0; i < 2; i++) {
        int failed = 0, wrong = 0;
        for (int k = 0; k < KN_TK_COUNT; k++) {
            char *src = NULL, *img = NULL, *log = NULL;
            size_t n = 0;
            kn_status st = kn_cuda_ops_source(dts[i], k, &src);
            if (st == KN_OK) st = kn_nvrtc_compile(src, "sm_90", &img, &n, &log);
            if (st != KN_OK || (log && strstr(log, "warning"))) {
                printf("# %s %s: %s\n", kn_dtype_name(dts[i]), kn_cuda_ops_kernel_name(k),
                       st != KN_OK ? kn_last_error() : log);
                failed++;
            } else {
                for (int j = 0; j < KN_TK_COUNT; j++)
                    if (has_symbol(img, n, kn_cuda_ops_kernel_name(j)) != (j == k)) {
                        printf("# %s module of %s %s %s\n", kn_dtype_name(dts[i]), kn_cuda_ops_kernel_name(k),
                               j == k ? "lacks" : "also holds", kn_cuda_ops_kernel_name(j));
                        wrong++;
                    }
            }
            free(img);
            free(log);
            free(src);
        }
        if (!ok(failed == 0, "%s: every one-kernel module compiles without warnings", kn_dtype_name(dts[i])))
            printf("# %d failed\n", failed);
        if (!ok(wrong == 0, "%s: every one-kernel module holds its kernel and no other", kn_dtype_name(dts[i])))
            printf("# %d wrong\n", wrong);
    }
}

int main(void)
{
    ok(kn_cuda_template("kn_ops") != NULL, "kn_ops.cu is embedded");
    ok(kn_cuda_template("kn_rng.h") != NULL, "kn_rng.h is embedded");
    ok(kn_cuda_template("kn_cuda_targs.h") != NULL, "kn_cuda_targs.h is embedded");
    ok(kn_cuda_template("kn_no_such_template") == NULL, "an unknown template is NULL");
    for (int dt = 0; dt < KN_DTYPE_COUNT; dt++) {
        const char *name = kn_dtype_name((kn_dtype)dt);
        char *src = NULL, *img = NULL, *log = NULL;
        size_t n = 0;
        kn_status st = kn_cuda_ops_source((kn_dtype)dt, -1, &src);
        ok(st == KN_OK && src, "%s: module source assembled", name);
        if (st != KN_OK) {
            printf("# %s\n", kn_last_error());
            continue;
        }
        st = kn_nvrtc_compile(src, "sm_90", &img, &n, &log);
        if (st == KN_OK) cover(src);
        if (!ok(st == KN_OK, "%s: module compiles for sm_90 (%zu-byte source)", name, strlen(src)))
            printf("# %s\n", kn_last_error());
        if (!ok(!log || !strstr(log, "warning"), "%s: no NVRTC warnings", name)) printf("# %s\n", log);
        if (st == KN_OK) {
            int missing = 0;
            for (int k = 0; k < KN_TK_COUNT; k++)
                if (!has_symbol(img, n, kn_cuda_ops_kernel_name(k))) {
                    printf("# %s: no kernel %s in the image\n", name, kn_cuda_ops_kernel_name(k));
                    missing++;
                }
            is_int(missing, 0, "every kernel the host looks up is in the image");
        }
        free(img);
        free(log);
        free(src);
    }
    /* kn_gather_scatter.cu takes other paths before sm_90 (no vector or
     * bf16 atomic reductions): the float modules compile for sm_80 too */
    static const kn_dtype pre90[] = {KN_F32, KN_BF16, KN_F16};
    for (int i = 0; i < 3; i++) {
        char *src = NULL, *img = NULL, *log = NULL;
        size_t n = 0;
        kn_status st = kn_cuda_ops_source(pre90[i], -1, &src);
        if (st == KN_OK) st = kn_nvrtc_compile(src, "sm_80", &img, &n, &log);
        if (!ok(st == KN_OK, "%s: module compiles for sm_80", kn_dtype_name(pre90[i]))) printf("# %s\n", kn_last_error());
        if (!ok(!log || !strstr(log, "warning"), "%s: no NVRTC warnings for sm_80", kn_dtype_name(pre90[i])))
            printf("# %s\n", log);
        ok(st == KN_OK && has_symbol(img, n, "kn_gs_atomic") && has_symbol(img, n, "kn_gs_segment"),
           "%s: sm_80 image holds the gather_scatter kernels", kn_dtype_name(pre90[i]));
        free(img);
        free(log);
        free(src);
    }
    test_one_kernel_modules();
    test_linalg_modules();
    test_attention_modules();
    test_coverage();
    return done_testing();
}
#endif
