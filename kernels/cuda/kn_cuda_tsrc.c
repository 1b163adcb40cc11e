/* kn_cuda_tsrc: the embedded template texts (kernels/cuda/ *.cu,
 * kn_cuda_targs.h and core/base/kn_rng.h, turned into kn_cuda_embedded by
 * cmake/embed.cmake) and the assembly of a module's source from them.
 * Kept apart from kn_cuda_ops.c so that it needs no GPU and no loader.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_tsrc.h"

#include "kn_cuda_render.h"
#include "kn_kir.h"

typedef struct {
    const char *name;
    const unsigned char *data;
    size_t size;
} kn_embedded_file;

extern const kn_embedded_file kn_cuda_embedded[];

static const char *const kernel_names[KN_TK_COUNT] = {
    [KN_TK_REDUCE] = "kn_reduce",
    [KN_TK_REDUCE_FINAL] = "kn_reduce_final",
    [KN_TK_REDUCE_COLS] = "kn_reduce_cols",
    [KN_TK_REDUCE_COLS_FINAL] = "kn_reduce_cols_final",
    [KN_TK_REDUCE_COLS_VEC] = "kn_reduce_cols_vec",
    [KN_TK_ARGMAX] = "kn_argmax",
    [KN_TK_POOL] = "kn_pool",
    [KN_TK_POOL_GAP] = "kn_pool_gap",
    [KN_TK_POOL_GAP_PLANES] = "kn_pool_gap_planes",
    [KN_TK_POOL_NHWC] = "kn_pool_nhwc",
    [KN_TK_POOL_NHWC_VEC] = "kn_pool_nhwc_vec",
    [KN_TK_POOL_GAP_VEC] = "kn_pool_gap_vec",
    [KN_TK_POOL_MAX3_NHWC_VEC] = "kn_pool_max3_nhwc_vec",
    [KN_TK_ICHECK] = "kn_index_check",
    [KN_TK_ISELECT] = "kn_index_select",
    [KN_TK_IROWS] = "kn_index_rows",
    [KN_TK_GATHER] = "kn_gather",
    [KN_TK_IADD] = "kn_index_add",
    [KN_TK_IADD_ROWS] = "kn_index_add_rows",
    [KN_TK_RANDOM] = "kn_random",
    [KN_TK_CAT] = "kn_cat",
    [KN_TK_CAT_ROWS] = "kn_cat_rows",
    [KN_TK_CAT_SHORT] = "kn_cat_short",
    [KN_TK_PATCHES] = "kn_patches",
    [KN_TK_GS_ATOMIC] = "kn_gs_atomic",
    [KN_TK_GS_SEGMENT] = "kn_gs_segment",
    [KN_TK_GS_COUNT] = "kn_gs_count",
    [KN_TK_GS_SCAN] = "kn_gs_scan",
    [KN_TK_GS_FILL] = "kn_gs_fill",
    [KN_TK_GS_ORDER] = "kn_gs_order",
    [KN_TK_GS_EPILOGUE] = "kn_gs_epilogue",
    [KN_TK_GS_EPILOGUE_ROWS] = "kn_gs_epilogue_rows",
    [KN_TK_COPY + KN_F32] = "kn_copy_f32",
    [KN_TK_COPY + KN_F64] = "kn_copy_f64",
    [KN_TK_COPY + KN_BF16] = "kn_copy_bf16",
    [KN_TK_COPY + KN_F16] = "kn_copy_f16",
    [KN_TK_COPY + KN_I32] = "kn_copy_i32",
    [KN_TK_COPY + KN_I64] = "kn_copy_i64",
    [KN_TK_COPY + KN_BOOL] = "kn_copy_bool",
};

const char *kn_cuda_ops_kernel_name(int k)
{
    return k >= 0 && k < KN_TK_COUNT ? kernel_names[k] : NULL;
}

/* By file name ("kn_rng.h") or by template name without ".cu" ("kn_ops"). */
const char *kn_cuda_template(const char *name)
{
    size_t n = strlen(name);
    for (const kn_embedded_file *f = kn_cuda_embedded; f->name; f++)
        if (strcmp(f->name, name) == 0 || (strncmp(f->name, name, n) == 0 && strcmp(f->name + n, ".cu") == 0))
            return (const char *)f->data;
    return NULL;
}

const char *kn_cuda_template_name(int i)
{
    for (int j = 0; kn_cuda_embedded[j].name; j++)
        if (j == i) return kn_cuda_embedded[j].name;
    return NULL;
}

/* The families of the per-dtype modules, after kn_ops.cu (other .cu files
 * of kernels/cuda, such as kn_linalg.cu and kn_attention.cu, build modules
 * of their own). */
static const char *const families[] = {"kn_reduce.cu", "kn_index.cu", "kn_pool.cu", "kn_random.cu",
                                       "kn_copy.cu", "kn_gather_scatter.cu"};
#define N_FAMILIES (sizeof families / sizeof families[0])

kn_status kn_cuda_ops_source(kn_dtype dt, int k, char **src)
{
    *src = NULL;
    if (k >= KN_TK_COUNT) return kn_error(KN_ERR_ARG, "cuda templates: no template kernel %d", k);
    const char *prelude = kn_cuda_render_prelude();
    const char *targs = kn_cuda_template("kn_cuda_targs.h"), *rng = kn_cuda_template("kn_rng.h");
    const char *common = kn_cuda_template("kn_ops");
    if (!prelude) return kn_error(KN_ERR_OOM, "cuda templates: out of memory for the prelude");
    if (!targs || !rng || !common)
        return kn_error(KN_ERR_UNSUPPORTED, "cuda templates: the build embedded no %s",
                        !targs ? "kn_cuda_targs.h" : !rng ? "kn_rng.h" : "kn_ops.cu");
    char head[160];
    if (k < 0) snprintf(head, sizeof head, "#define KN_DT %d\n", (int)dt);
    else
        snprintf(head, sizeof head, "#define KN_DT %d\n#define KN_ONE_KERNEL 1\n#define KN_KSEL_%s 1\n", (int)dt,
                 kernel_names[k]);
    const char *fam[N_FAMILIES];
    size_t len = strlen(head) + strlen(prelude) + strlen(targs) + strlen(rng) + strlen(common) + 80;
    for (size_t i = 0; i < N_FAMILIES; i++) {
        fam[i] = kn_cuda_template(families[i]);
        if (!fam[i])
            return kn_error(KN_ERR_UNSUPPORTED, "cuda templates: the build embedded no %s", families[i]);
        len += strlen(fam[i]) + 2;
    }
    char *s = malloc(len), *p = s;
    if (!s) return kn_error(KN_ERR_OOM, "cuda templates: out of memory for a %zu-byte source", len);
    /* the prelude is a helper library: most modules use only some of it;
     * so are the families' helpers to a module of one kernel (NVRTC's
     * warning 177, unused function, stays off for it) */
    p += sprintf(p, "%s#pragma nv_diag_suppress 177\n%s\n%s%s\n%s\n%s\n", head, prelude,
                 k < 0 ? "#pragma nv_diag_default 177\n" : "", targs, rng, common);
    for (size_t i = 0; i < N_FAMILIES; i++) p += sprintf(p, "%s\n", fam[i]);
    *src = s;
    return KN_OK;
}
