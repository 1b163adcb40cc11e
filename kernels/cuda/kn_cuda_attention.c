/* kn_cuda_attention: the launcher of kn_attention.cu and kn_attention_f32.cu
 * (see kn_cuda_attention.h).
 *
 * Modules are built per (dtype, head-dim bucket) so that a first call
 * compiles a handful of kernels, not every instantiation: tensor-core
 * modules per padded head dim (16..128 in steps of 16), SIMT modules per
 * number of 32-column output chunks (1..8). Both are process-wide and keyed
 * by their source in the module cache (memory, then disk), like
 * kn_cuda_linalg_kernel's.
 */
#include "kn_cuda_attention.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_attn_args.h"
#include "kn_cuda_context.h"
#include "kn_cuda_module.h"
#include "kn_cuda_tsrc.h"
#include "kn_strbuf.h"

#define TC_MAX_DIM 128  /* Q fragments and O accumulators live in registers */
#define F32T_MAX_DIM 128 /* the tiled f32 kernel's widest head (O: 64 registers a thread) */
#define X3_MAX_DIM 64    /* the split-f32 kernel's widest head (O and its tile's partial in registers) */
#define X3_BN 32         /* its keys a tile (KN_ATT_X3_BN) */
#define SIMT_MAX_DIM 256
#define N_TC_SIZES (TC_MAX_DIM / 16)
#define N_SIMT_SIZES (SIMT_MAX_DIM / 32)
#define SIMT_BM 32
#define WARPS 4

/* one kernel configuration */
typedef struct attn_config {
    int kind;   /* the module kind: KN_ATT_MODULE_TC (bf16/f16 tensor cores), _SIMT, _F32T or _X3 */
    int mt;     /* tc: m16 tiles a warp (BM = 64 * mt); f32 tiled and split-f32: query rows a block (64 or 32) */
    int bn;     /* keys a tile */
    int ks;     /* tc: groups of 4 warps that split the keys of one query block */
    int max_dp; /* tc: the widest padded head dim it is built for (register budget) */
    const char *label;
} attn_config;

#define N_TC_CONFIGS 6
static const attn_config tc_configs[N_TC_CONFIGS] = {
    {KN_ATT_MODULE_TC, 1, 64, 1, 128, "tc bm64 bn64"},
    {KN_ATT_MODULE_TC, 1, 32, 1, 128, "tc bm64 bn32"},
    {KN_ATT_MODULE_TC, 2, 64, 1, 64, "tc bm128 bn64"},
    {KN_ATT_MODULE_TC, 1, 64, 2, 128, "tc bm64 bn64 ks2"},
    {KN_ATT_MODULE_TC, 1, 32, 2, 128, "tc bm64 bn32 ks2"},
    {KN_ATT_MODULE_TC, 1, 32, 4, 64, "tc bm64 bn32 ks4"},
};
static const attn_config simt_config = {KN_ATT_MODULE_SIMT, 0, 32, 1, 0, "simt bm32 bn32"};
/* the tiled f32 kernel: mt is its query rows a block (64 or 32). Blocks
 * of 16 rows (one a thread: twice the blocks at 128 tokens) lost at every
 * shape of bench/attention_variants.c on the H200 (BERT's 36.4 us against
 * 22.2, ViT's 90.4 against 50.4: each block stages all of K and V for
 * half the rows, and its products load a K or V vector for every 4 FMAs) */
#define N_F32T_CONFIGS 2
static const attn_config f32t_configs[N_F32T_CONFIGS] = {
    {KN_ATT_MODULE_F32T, 64, 64, 1, F32T_MAX_DIM, "f32 tiled bm64 bn64"},
    {KN_ATT_MODULE_F32T, 32, 64, 1, F32T_MAX_DIM, "f32 tiled bm32 bn64"},
};

/* the split-f32 kernel (f32 on the TF32 tensor cores, split so that the
 * result keeps f32 accuracy): mt is its query rows a block, 16 a warp; ks
 * its key groups, which keep one buffer each (two with one group) */
#define N_X3_CONFIGS 3
static const attn_config x3_configs[N_X3_CONFIGS] = {
    {KN_ATT_MODULE_X3, 64, X3_BN, 1, X3_MAX_DIM, "split-f32 bm64 bn32"},
    {KN_ATT_MODULE_X3, 32, X3_BN, 1, X3_MAX_DIM, "split-f32 bm32 bn32"},
    {KN_ATT_MODULE_X3, 32, X3_BN, 2, X3_MAX_DIM, "split-f32 bm32 bn32 ks2"},
};

static int dt_code_index(kn_dtype dt) /* f32 0, bf16 1, f16 2 */
{
    return dt == KN_BF16 ? 1 : dt == KN_F16 ? 2 : 0;
}

static const char *dt_tag(kn_dtype dt)
{
    return dt == KN_BF16 ? "bf16" : dt == KN_F16 ? "f16" : "f32";
}

static bool f32t_size(int size)
{
    return size == 32 || size == 64 || size == 128;
}

static bool x3_size(int size)
{
    return size == 32 || size == 64;
}

kn_status kn_cuda_attention_source(int kind, kn_dtype dt, int size, char **src)
{
    *src = NULL;
    if (dt != KN_F32 && dt != KN_BF16 && dt != KN_F16)
        return kn_error(KN_ERR_UNSUPPORTED, "attention: no kernels for dtype %s", kn_dtype_name(dt));
    bool bad = kind == KN_ATT_MODULE_TC     ? dt == KN_F32 || size < 16 || size > TC_MAX_DIM || size % 16
               : kind == KN_ATT_MODULE_F32T ? dt != KN_F32 || !f32t_size(size)
               : kind == KN_ATT_MODULE_X3   ? dt != KN_F32 || !x3_size(size)
                                            : size < 1 || size > N_SIMT_SIZES;
    static const char *const kind_names[] = {"SIMT", "tensor-core", "tiled f32", "split-f32"};
    if (bad || kind < 0 || kind > KN_ATT_MODULE_X3)
        return kn_error(KN_ERR_ARG, "attention: no %s module of size %d for %s",
                        kind >= 0 && kind <= KN_ATT_MODULE_X3 ? kind_names[kind] : "such", size, kn_dtype_name(dt));
    /* the f32 kernels (kn_attention_f32.cu) follow the shared helpers of kn_attention.cu */
    bool f32 = kind == KN_ATT_MODULE_F32T || kind == KN_ATT_MODULE_X3;
    const char *tpl = kn_cuda_template("kn_attention"), *args = kn_cuda_template("kn_cuda_attn_args.h");
    const char *f32_tpl = f32 ? kn_cuda_template("kn_attention_f32") : "";
    if (!tpl || !args || !f32_tpl)
        return kn_error(KN_ERR_UNSUPPORTED, "attention: kernels/cuda/%s is not embedded in this build",
                        !tpl ? "kn_attention.cu" : !args ? "kn_cuda_attn_args.h" : "kn_attention_f32.cu");
    kn_strbuf s = {0};
    static const char *const kind_defines[] = {"NC", "DP", "FT", "X3"};
    kn_strbuf_printf(&s, "#define KN_ATT_STANDALONE 1\n#define KN_ATT_DT %d\n#define KN_ATT_%s %d\n", (int)dt,
                     kind_defines[kind], size);
    kn_strbuf_puts(&s, args);
    kn_strbuf_puts(&s, "\n");
    kn_strbuf_puts(&s, tpl);
    if (f32) {
        kn_strbuf_puts(&s, "\n");
        kn_strbuf_puts(&s, f32_tpl);
    }
    return kn_strbuf_finish(&s, src, "attention: the kernel source");
}

/* The kernel of configuration c in its module (of padded head dim size). */
int kn_cuda_attention_modules(kn_att_module *out, int cap)
{
    static const kn_dtype dts[] = {KN_F32, KN_BF16, KN_F16};
    int n = 0;
    for (int di = 0; di < 3; di++) /* tensor cores: bf16 and f16, head dims 16..128 */
        for (int size = 16; dts[di] != KN_F32 && size <= TC_MAX_DIM; size += 16)
            if (n < cap) out[n++] = (kn_att_module){KN_ATT_MODULE_TC, dts[di], size};
    for (int di = 0; di < 3; di++) /* SIMT: every dtype, 1..8 output chunks */
        for (int size = 1; size <= N_SIMT_SIZES; size++)
            if (n < cap) out[n++] = (kn_att_module){KN_ATT_MODULE_SIMT, dts[di], size};
    for (int size = 32; size <= F32T_MAX_DIM; size *= 2) /* tiled f32: head dims 32, 64, 128 */
        if (n < cap) out[n++] = (kn_att_module){KN_ATT_MODULE_F32T, KN_F32, size};
    for (int size = 32; size <= X3_MAX_DIM; size *= 2) /* split-f32: head dims 32, 64 */
        if (n < cap) out[n++] = (kn_att_module){KN_ATT_MODULE_X3, KN_F32, size};
    return n;
}

const char *kn_cuda_attention_module_tag(int kind)
{
    return kind == KN_ATT_MODULE_TC ? "tc" : kind == KN_ATT_MODULE_F32T ? "f32t" : kind == KN_ATT_MODULE_X3 ? "x3" : "simt";
}

static void config_kernel_name(const attn_config *c, kn_dtype dt, int size, char name[48])
{
    if (c->kind == KN_ATT_MODULE_F32T) {
        snprintf(name, 48, "kn_attn_f32t_d%d%s", size, c->mt == 64 ? "" : "_m32");
        return;
    }
    if (c->kind == KN_ATT_MODULE_X3) {
        snprintf(name, 48, "kn_attn_x3_d%d_m%d%s", size, c->mt, c->ks == 2 ? "_k2" : "");
        return;
    }
    char ks[16] = "";
    if (c->ks > 1) snprintf(ks, sizeof ks, "_k%d", c->ks);
    snprintf(name, 48, "kn_attn_tc_%s_d%d_m%d_n%d%s", dt_tag(dt), size, 64 * c->mt, c->bn, ks);
}

int kn_cuda_attention_kernel_names(int kind, kn_dtype dt, int size, char names[][48])
{
    if (kind == KN_ATT_MODULE_SIMT) {
        snprintf(names[0], 48, "kn_attn_simt_%s_c%d", dt_tag(dt), size);
        return 1;
    }
    int n = 0;
    if (kind == KN_ATT_MODULE_F32T) {
        for (int i = 0; i < N_F32T_CONFIGS; i++) config_kernel_name(&f32t_configs[i], dt, size, names[n++]);
        return n;
    }
    if (kind == KN_ATT_MODULE_X3) {
        for (int i = 0; i < N_X3_CONFIGS; i++) config_kernel_name(&x3_configs[i], dt, size, names[n++]);
        return n;
    }
    for (int i = 0; i < N_TC_CONFIGS; i++)
        if (size <= tc_configs[i].max_dp) config_kernel_name(&tc_configs[i], dt, size, names[n++]);
    return n;
}

/* ---- modules and kernels, process-wide ---- */

typedef struct kernel_slot {
    const void *fn;
    unsigned long long smem_devices; /* GPUs (index < 64) whose shared-memory limit was raised */
    int per_sm; /* blocks an SM holds at once (registers, shared memory), as the first GPU asked reports */
} kernel_slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static kernel_slot tc_kernels[2][N_TC_SIZES][N_TC_CONFIGS]; /* [bf16, f16][DP/16 - 1][config] */
static kernel_slot simt_kernels[3][N_SIMT_SIZES];       /* [f32, bf16, f16][NC - 1] */
static kernel_slot f32t_kernels[3][N_F32T_CONFIGS];    /* [FT 32, 64, 128][BM 64, 32] */
static kernel_slot x3_kernels[2][N_X3_CONFIGS];        /* [DP 32, 64][x3_configs] */

/* threads a block of configuration c */
static int config_threads(const attn_config *c)
{
    return c->kind == KN_ATT_MODULE_X3 ? 2 * c->mt * c->ks : 32 * WARPS * c->ks; /* split-f32: a warp per 16 rows a group */
}

static size_t tc_smem(int dp, const attn_config *c)
{
    /* a group's Q block + two stages of K and of V, rows padded by 8 halves */
    return (size_t)c->ks * (size_t)(64 * c->mt + 4 * c->bn) * (size_t)(dp + 8) * 2;
}

static size_t f32t_smem(int ft, int bm)
{
    /* Q as [bm][ft + 4], K and V as [64][ft + 4], P as [bm][64 + 8], f32 */
    return (size_t)((bm + 2 * 64) * (ft + 4) + bm * 72) * sizeof(float);
}

static size_t x3_smem(int dp, const attn_config *c)
{
    /* each key group's stages of K (rows of dp + 8) and V (dp + 4), 32
     * keys each (two stages with one group, one each with more), then Q as
     * [bm][dp + 8], f32 */
    int stages = c->ks == 1 ? 2 : c->ks;
    return (size_t)(stages * X3_BN * (2 * dp + 12) + c->mt * (dp + 8)) * sizeof(float);
}

static size_t simt_smem(int64_t d, int64_t dv)
{
    return (size_t)(SIMT_BM * d + 32 * (d + 1) + 32 * dv) * sizeof(float);
}

/* The kernel of a configuration, compiled on first use, with its dynamic
 * shared-memory limit raised to `smem` on the current GPU; per_sm (NULL
 * or) gets how many of its blocks an SM holds at once. */
static kn_status get_kernel(const attn_config *c, kn_dtype dt, int size, size_t smem, const void **fn, int *per_sm)
{
    pthread_mutex_lock(&lock);
    kernel_slot *slot = c->kind == KN_ATT_MODULE_TC     ? &tc_kernels[dt_code_index(dt) - 1][size / 16 - 1][c - tc_configs]
                        : c->kind == KN_ATT_MODULE_F32T ? &f32t_kernels[size == 32 ? 0 : size == 64 ? 1 : 2][c - f32t_configs]
                        : c->kind == KN_ATT_MODULE_X3   ? &x3_kernels[size == 32 ? 0 : 1][c - x3_configs]
                                                        : &simt_kernels[dt_code_index(dt)][size - 1];
    kn_status st = KN_OK;
    if (!slot->fn) {
        char *src = NULL;
        kn_cuda_module *mod = NULL;
        char name[48];
        if (c->kind == KN_ATT_MODULE_SIMT) kn_cuda_attention_kernel_names(c->kind, dt, size, &name);
        else config_kernel_name(c, dt, size, name);
        st = kn_cuda_attention_source(c->kind, dt, size, &src);
        if (st == KN_OK) st = kn_cuda_module_get(src, kn_cuda_cache_dir(), &mod);
        free(src);
        if (st == KN_OK) st = kn_cuda_module_kernel(mod, name, &slot->fn);
    }
    int dev = kn_cuda_current()->index;
    if (st == KN_OK && smem > 48 * 1024 && dev < 64 && !(slot->smem_devices >> dev & 1)) {
        /* raise to the most any problem of this kernel needs, once a GPU */
        cudaError_t e = cudaKernelSetAttributeForDevice((cudaKernel_t)slot->fn,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        (int)(c->kind != KN_ATT_MODULE_SIMT ? smem : simt_smem(SIMT_MAX_DIM, 32 * size)), dev);
        if (e != cudaSuccess) st = kn_cuda_fail(e, "attention: raising the kernel's shared-memory limit");
        else slot->smem_devices |= 1ull << dev;
    }
    if (st == KN_OK && per_sm && !slot->per_sm) {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, slot->fn, config_threads(c), smem) != cudaSuccess || n < 1) {
            (void)cudaGetLastError();
            n = 1; /* unknown: the cost model then assumes the fewest */
        }
        slot->per_sm = n;
    }
    if (per_sm) *per_sm = st == KN_OK ? slot->per_sm : 1;
    *fn = slot->fn;
    pthread_mutex_unlock(&lock);
    return st;
}

/* ---- validation and the configurations a problem can use ---- */

static bool aligned(const void *ptr, size_t bytes)
{
    return (uintptr_t)ptr % bytes == 0;
}

/* Whether the keys, and a mask's key offsets, fit the 32-bit indices of
 * the tensor-core and tiled f32 kernels. */
static bool keys_fit_32_bits(const kn_attention_problem *p)
{
    return (double)p->tk * (double)(p->mask ? llabs((long long)p->mask_stride[3]) + 1 : 1) <= 2147483647.0;
}

/* The head dim padded to the tensor-core kernels' 16 */
static int tc_padded_dim(const kn_attention_problem *p)
{
    return (int)((p->d > p->dv ? p->d : p->dv) + 15) / 16 * 16;
}

/* Why the tensor-core kernels cannot take p (NULL when they can). */
static const char *tc_refusal(const kn_attention_problem *p, char *why, size_t n)
{
    if (p->dtype == KN_F32) return "f32 runs on the SIMT kernel (no TF32 attention kernel yet)";
    if (p->d % 8 || p->dv % 8 || p->d > TC_MAX_DIM || p->dv > TC_MAX_DIM) {
        snprintf(why, n, "head dims d=%lld dv=%lld: the tensor-core kernels need multiples of 8 up to %d",
                 (long long)p->d, (long long)p->dv, TC_MAX_DIM);
        return why;
    }
    if (!keys_fit_32_bits(p)) return "keys or the mask's key stride exceed the tensor-core kernels' 32-bit indices";
    const void *ptrs[4] = {p->q, p->k, p->v, p->o};
    const int64_t *strides[4] = {p->q_stride, p->k_stride, p->v_stride, p->o_stride};
    static const char *const names[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++) {
        if (!aligned(ptrs[i], 16)) {
            snprintf(why, n, "%s is not 16-byte aligned (the tensor-core kernels load 16 bytes at a time)", names[i]);
            return why;
        }
        for (int s = 0; s < 3; s++)
            if (strides[i][s] % 8) {
                snprintf(why, n, "%s's stride %lld (dim %d) is not a multiple of 8 elements (16-byte loads)",
                         names[i], (long long)strides[i][s], s);
                return why;
            }
    }
    return NULL;
}

static kn_status validate(const kn_attention_problem *p)
{
    if (!p) return kn_error(KN_ERR_ARG, "attention: no problem given");
    if (p->dtype != KN_F32 && p->dtype != KN_BF16 && p->dtype != KN_F16)
        return kn_error(KN_ERR_UNSUPPORTED, "attention: dtype %s is not supported (f32, bf16 or f16)",
                        kn_dtype_name(p->dtype));
    if (p->batch <= 0 || p->heads <= 0 || p->tq <= 0 || p->tk <= 0 || p->d <= 0 || p->dv <= 0)
        return kn_error(KN_ERR_ARG, "attention: every dim must be > 0 (batch %lld heads %lld tq %lld tk %lld d %lld dv %lld)",
                        (long long)p->batch, (long long)p->heads, (long long)p->tq, (long long)p->tk,
                        (long long)p->d, (long long)p->dv);
    if (p->d > SIMT_MAX_DIM || p->dv > SIMT_MAX_DIM)
        return kn_error(KN_ERR_UNSUPPORTED, "attention: head dims d=%lld dv=%lld: the fused kernel takes at most %d",
                        (long long)p->d, (long long)p->dv, SIMT_MAX_DIM);
    if (!p->q || !p->k || !p->v || !p->o) return kn_error(KN_ERR_ARG, "attention: q, k, v or o is NULL");
    size_t es = kn_dtype_size(p->dtype);
    if (!aligned(p->q, es) || !aligned(p->k, es) || !aligned(p->v, es) || !aligned(p->o, es))
        return kn_error(KN_ERR_UNSUPPORTED, "attention: q, k, v or o is not aligned to its %zu-byte elements", es);
    if (p->mask) {
        kn_dtype md = p->mask_dtype;
        if (md != KN_BOOL && md != KN_F32 && md != p->dtype)
            return kn_error(KN_ERR_UNSUPPORTED, "attention: a %s mask is not supported (bool, f32 or %s)",
                            kn_dtype_name(md), kn_dtype_name(p->dtype));
        if (!aligned(p->mask, kn_dtype_size(md)))
            return kn_error(KN_ERR_UNSUPPORTED, "attention: the mask is not aligned to its elements");
    }
    if ((double)p->batch * (double)p->heads * (double)((p->tq + SIMT_BM - 1) / SIMT_BM) > 2147483647.0)
        return kn_error(KN_ERR_UNSUPPORTED, "attention: batch*heads*query blocks exceeds one launch grid");
    return KN_OK;
}

/* Whether the tiled f32 kernel can take p: f32 (any precision setting: it
 * is strict f32 FMA), head dims up to 128, q, k and v rows it can copy 16
 * bytes at a time, and 32-bit key offsets into the mask. Returns why not,
 * or NULL. */
static const char *f32t_refusal(const kn_attention_problem *p)
{
    if (p->dtype != KN_F32) return "not f32";
    if (p->d > F32T_MAX_DIM || p->dv > F32T_MAX_DIM) return "head dims over 128";
    const void *ptrs[3] = {p->q, p->k, p->v};
    const int64_t *strides[3] = {p->q_stride, p->k_stride, p->v_stride};
    for (int i = 0; i < 3; i++) {
        if (!aligned(ptrs[i], 16)) return "q, k or v is not 16-byte aligned";
        for (int s = 0; s < 3; s++)
            if (strides[i][s] % 4) return "a stride of q, k or v is not a multiple of 4 elements";
    }
    if (!keys_fit_32_bits(p)) return "the mask's key offsets exceed 32 bits";
    return NULL;
}

/* Whether the split-f32 kernel can take p: f32, head dims up to 64, a GPU
 * with TF32 tensor cores (sm_80 on), and the tiled f32 kernel's alignment
 * and index limits. KILN_ATTENTION_X3=0 turns it off (to measure the tiled
 * kernel in its place). Returns why not, or NULL. */
static const char *x3_refusal(const kn_attention_problem *p)
{
    static int off = -1;
    if (off < 0) {
        const char *v = getenv("KILN_ATTENTION_X3");
        off = v && strcmp(v, "0") == 0;
    }
    if (off) return "KILN_ATTENTION_X3=0";
    if (p->dtype != KN_F32) return "not f32";
    if (kn_cuda_current()->arch < 80) return "no TF32 tensor cores before sm_80";
    if (p->d > X3_MAX_DIM || p->dv > X3_MAX_DIM) return "head dims over 64";
    return f32t_refusal(p);
}

/* Whether blocks of 64 query rows would not fill two an SM: where the f32
 * kernels take 32-row blocks first. */
static bool few_64_row_blocks(const kn_attention_problem *p)
{
    int64_t blocks = (p->tq + 63) / 64 * p->batch * p->heads;
    return blocks < 2 * (int64_t)kn_cuda_current()->sm_count;
}

/* The configurations p can use: the tensor-core ones in table order, or
 * the split-f32 ones and the tiled f32 ones, then the SIMT one. The
 * blocks of 32 query rows go first where 64-row ones would leave SMs
 * idle. */
static int configs_of(const kn_attention_problem *p, const attn_config **out)
{
    char why[160];
    int n = 0;
    if (!x3_refusal(p)) {
        /* where 64-row blocks would not fill two a SM, 32-row blocks in
         * two key groups first, then 32-row blocks, then 64-row ones;
         * elsewhere the other way round. On the H200
         * (bench/attention_variants.c, with the 4-warp kernels at 128
         * registers): BERT's 8 x 12 x 128 x 64 took 16.0 us in key groups,
         * 17.7 in 32-row blocks, 19.0 in 64-row ones; ViT's 8 x 12 x 197 x
         * 64 36.9 us in 64-row blocks, 41.5 and 43.8 in the others; 16 x 8
         * x 256 x 64 52.6 in 64-row blocks, 58.8 in key groups. */
        bool small = few_64_row_blocks(p);
        out[n++] = &x3_configs[small ? 2 : 0];
        out[n++] = &x3_configs[1];
        out[n++] = &x3_configs[small ? 0 : 2];
    }
    if (!tc_refusal(p, why, sizeof why)) {
        int dp = tc_padded_dim(p);
        for (int i = 0; i < N_TC_CONFIGS; i++)
            if (dp <= tc_configs[i].max_dp) out[n++] = &tc_configs[i];
    }
    if (!f32t_refusal(p)) {
        /* 32-row blocks first where 64-row ones would leave SMs idle
         * (BERT's 8 x 12 heads x 128 tokens make 192 blocks of 64 rows
         * for 132 SMs, which hold three each), and for heads over 64 wide,
         * whose 64-row kernel needs 254 registers a thread, two blocks an
         * SM (4 x 16 x 512 x 128 on the H200: 614 us against 375) */
        bool small = few_64_row_blocks(p) || p->d > 64 || p->dv > 64;
        out[n++] = &f32t_configs[small ? 1 : 0];
        out[n++] = &f32t_configs[small ? 0 : 1];
    }
    out[n++] = &simt_config;
    return n;
}

/* The default pick among configs_of's tensor-core configurations: the
 * least modelled time, counted in keys a group walks:
 *   waves x (keys a group walks + 64)
 * waves = the launch's blocks over what the GPU holds at once (the
 * kernel's blocks an SM, from the occupancy API, times the SMs); the 64
 * keys stand for a block's fixed work (staging Q, the merge, the store).
 * Fitted to bench/attention_variants.c on the H200, where it picks the
 * fastest configuration at its seven shapes: 64-row blocks of 64-key
 * tiles at 128 tokens (BERT, GPT-2; 128-row blocks would leave SMs idle),
 * 128-row blocks where they fill the GPU in one wave (ViT's 197 tokens,
 * 256 and 1024 tokens), 64-row ones for 128-wide heads. Ties go to the
 * earlier configuration. */
static const attn_config *default_config(const kn_attention_problem *p, const attn_config **cfg, int n)
{
    const attn_config *best = cfg[0];
    double best_cost = 0;
    int dp = tc_padded_dim(p);
    int64_t sms = kn_cuda_current()->sm_count;
    for (int i = 0; i < n; i++) {
        const attn_config *c = cfg[i];
        /* key groups (ks > 1) lost at every shape of bench/attention_variants.c
         * once staging a tile cost a few instructions a chunk (H200: BERT's
         * 8.9 against 7.9 us, GPT-2's causal 7.2 against 6.3): they stay
         * variants for max-autotune */
        if (c->kind != KN_ATT_MODULE_TC || c->ks > 1) continue;
        const void *fn;
        int per_sm = 1;
        if (get_kernel(c, p->dtype, dp, tc_smem(dp, c), &fn, &per_sm) != KN_OK) continue;
        int64_t blocks = (p->tq + 64 * c->mt - 1) / (64 * c->mt) * p->batch * p->heads;
        int64_t waves = (blocks + per_sm * sms - 1) / (per_sm * sms);
        int64_t keys = p->causal && p->tq < p->tk ? p->tq : p->tk;
        int64_t tiles = (keys + c->bn - 1) / c->bn, group_tiles = (tiles + c->ks - 1) / c->ks;
        double cost = (double)waves * (double)(group_tiles * c->bn + 64);
        if (i == 0 || cost < best_cost) best = c, best_cost = cost;
    }
    return best;
}

bool kn_cuda_attention_f32_tiled(const kn_attention_problem *p)
{
    return validate(p) == KN_OK && !f32t_refusal(p);
}

/* Up to 128 keys a query walks, kiln's tensor-core kernel runs the call
 * by default rather than cuDNN: inside the suite's CUDA graphs on the
 * H200, BERT (8 x 12 x 128 x 64, padding mask) took 215-218 us a call with
 * it against 221-222 with cuDNN, GPT-2 205 against 213 reading its mask
 * and 198-200 against 217 causal, though cuDNN's kernel alone is 0.5-1 us
 * shorter than kiln's at BERT's shape: the call's total is what counts
 * (where cuDNN's extra time goes is not measured). Longer sequences keep
 * cuDNN, whose kernels pull ahead with the keys (1.2x at ViT's 197
 * tokens, 1.9x at 1024). */
#define SHORT_TC_MAX_KEYS 128

bool kn_cuda_attention_short_tc(const kn_attention_problem *p)
{
    char why[160];
    return (p->dtype == KN_BF16 || p->dtype == KN_F16) && p->tk <= SHORT_TC_MAX_KEYS && validate(p) == KN_OK &&
           !tc_refusal(p, why, sizeof why);
}

int kn_cuda_attention_variants(const kn_attention_problem *p, const char **labels)
{
    if (validate(p) != KN_OK) return 0;
    const attn_config *cfg[KN_ATTENTION_MAX_VARIANTS];
    int n = configs_of(p, cfg);
    if (labels)
        for (int i = 0; i < n; i++) labels[i] = cfg[i]->label;
    return n;
}

/* The strict-f32 pick (KN_ATTENTION_STRICT): the first configuration that
 * is not the split-f32 kernel. */
static const attn_config *strict_config(const attn_config **cfg, int n)
{
    for (int i = 0; i < n; i++)
        if (cfg[i]->kind != KN_ATT_MODULE_X3) return cfg[i];
    return cfg[n - 1]; /* not reached: the SIMT configuration is always last */
}

kn_status kn_cuda_attention(const kn_attention_problem *p)
{
    KN_TRY(validate(p));
    const attn_config *cfg[KN_ATTENTION_MAX_VARIANTS];
    int n = configs_of(p, cfg);
    if ((p->variant < 0 && p->variant != KN_ATTENTION_STRICT) || p->variant > n)
        return kn_error(KN_ERR_RANGE, "attention: variant %d does not exist (this problem has %d)", p->variant, n);
    const attn_config *c = p->variant > 0 ? cfg[p->variant - 1]
                           : p->variant == KN_ATTENTION_STRICT ? strict_config(cfg, n)
                                                               : default_config(p, cfg, n);

    kn_attn_args a;
    memset(&a, 0, sizeof a);
    a.q = p->q;
    a.k = p->k;
    a.v = p->v;
    a.o = p->o;
    a.mask = p->mask;
    a.heads = p->heads;
    a.tq = p->tq;
    a.tk = p->tk;
    for (int i = 0; i < 3; i++) {
        a.qs[i] = p->q_stride[i];
        a.ks[i] = p->k_stride[i];
        a.vs[i] = p->v_stride[i];
        a.os[i] = p->o_stride[i];
    }
    if (p->mask)
        for (int i = 0; i < 4; i++) a.ms[i] = p->mask_stride[i];
    a.scale_log2 = (float)(p->scale * 1.4426950408889634);
    a.d = (int)p->d;
    a.dv = (int)p->dv;
    a.causal = p->causal != 0;
    a.zero_nan = p->zero_nan != 0;
    a.mask_kind = !p->mask ? 0 : p->mask_dtype == KN_BOOL ? 1 : p->mask_dtype == p->dtype ? 2 : 3;
    a.mask_word_pairs = a.mask_kind == 2 && a.ms[3] == 1 && p->tk % 2 == 0 && a.ms[0] % 2 == 0 && a.ms[1] % 2 == 0 &&
                        a.ms[2] % 2 == 0 && (uintptr_t)p->mask % 4 == 0;

    int size, bm;
    size_t smem;
    if (c->kind == KN_ATT_MODULE_TC) {
        size = tc_padded_dim(p);
        bm = 64 * c->mt;
        smem = tc_smem(size, c);
    } else if (c->kind == KN_ATT_MODULE_F32T) {
        int64_t dm = p->d > p->dv ? p->d : p->dv;
        size = dm <= 32 ? 32 : dm <= 64 ? 64 : 128;
        bm = c->mt;
        smem = f32t_smem(size, bm);
    } else if (c->kind == KN_ATT_MODULE_X3) {
        size = p->d <= 32 && p->dv <= 32 ? 32 : 64;
        bm = c->mt;
        smem = x3_smem(size, c);
    } else {
        size = (int)(p->dv + 31) / 32;
        bm = SIMT_BM;
        smem = simt_smem(p->d, p->dv);
    }
    const void *fn = NULL;
    KN_TRY(get_kernel(c, p->dtype, size, smem, &fn, NULL));
    int64_t nqb = (p->tq + bm - 1) / bm;
    a.n_qblocks = (int)nqb;
    kn_cuda_variant_label("kiln attention %s", c->label);
    return kn_cuda_launch(fn, nqb * p->batch * p->heads, config_threads(c), &a, smem);
}
