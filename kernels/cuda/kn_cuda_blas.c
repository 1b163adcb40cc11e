/* kn_cuda_blas: matmul on the GPU through cuBLASLt, with kiln's own kernels
 * (kn_linalg.cu) for whatever cuBLASLt refuses or when it is not built in.
 *
 * Semantics are kn_infer_matmul's (core/tensor/kn_shape_linalg.c): 1-D operands,
 * broadcast batch dims, a mix of float dtypes promoted to the output's.
 * kiln tensors are row-major; cuBLASLt is column-major, so C = A.B is
 * computed as C^T = B^T.A^T: kiln's b is cuBLASLt's A and kiln's a its B,
 * and the output, contiguous [.., M, N], is read as an N x M column-major
 * matrix. An operand whose inner stride is 1 along either matrix dim maps
 * onto a layout (op N or op T) without a copy; the batch dims that collapse
 * to one stride for both operands (a broadcast is stride 0) become one
 * strided-batch call and any outer batch dims a loop of such calls. When b
 * is shared by all batches and a's rows continue from batch to batch
 * (x @ w over [B, T, K]), the batches fold into the rows of one GEMM.
 *
 * The output may be strided too (a plan lays attention's P·V out in its
 * head-merged order, kn_plan.c run_permuted): D's leading dim is the
 * output's row stride and its batch dims join the strided-batch runs as
 * the operands' do. Its rows must be unit-stride (D has no transposed
 * form); any other pattern, or one that needs kiln's own kernel (which
 * writes contiguous outputs only), answers KN_ERR_UNSUPPORTED and the plan
 * copies instead.
 *
 * Each distinct call signature gets its cuBLASLt descriptors and the
 * heuristic's algorithm once, cached, so a repeated call costs one
 * cublasLtMatmul per batch run. The workspace is allocated once and never
 * moves: a CUDA graph recorded around a matmul keeps its address.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_blas.h"

#include "kn_cuda_context.h"
#include "kn_cuda_gemm_x3.h"
#include "kn_cuda_libplans.h"
#include "kn_cuda_linalg.h"
#include "kn_cuda_module.h"
#include "kn_hash.h"
#include "kn_phase.h"

#ifdef KILN_HAVE_CUBLASLT
#include <cublasLt.h>
#include <dlfcn.h>
#endif

#define LT_HEUR_MAX 8 /* the heuristic's algorithms asked for (max-autotune measures them all) */
#define LT_SPLITS 3   /* split-K variants of its first: 2, 4, 8 */
#define LT_WORKSPACE ((int64_t)32 << 20)

/* ---- the problem: sizes and strides of one matmul call ------------------ */

typedef struct mm_operand {
    const kn_tensor *t;
    int64_t rs, cs;                  /* matrix row / column strides (elements) */
    int64_t bs[KN_LA_MAX_BATCH];     /* strides over the output's batch dims; 0 = broadcast */
} mm_operand;

typedef struct mm_problem {
    int64_t m, n, k, nbatch;
    int nbat;
    int64_t bsize[KN_LA_MAX_BATCH];
    mm_operand a, b;
    kn_tensor *o;
    bool o_dense;                    /* the output is contiguous (the usual case) */
    int64_t o_rs, o_cs;              /* its matrix row / column strides (elements) */
    int64_t o_bs[KN_LA_MAX_BATCH];   /* its strides over the batch dims (0 where a dim has size 1) */
} mm_problem;

/* Strides of a (M x K) and b (K x N) as CPU's kn_cpu_matmul reads them. */
static void mm_describe_operand(mm_problem *pr, mm_operand *op, const kn_tensor *t, bool left)
{
    int nd = t->ndim;
    op->t = t;
    if (left) {
        op->rs = nd >= 2 ? t->strides[nd - 2] : 0;
        op->cs = t->strides[nd - 1];
    } else {
        op->rs = nd >= 2 ? t->strides[nd - 2] : t->strides[0];
        op->cs = nd >= 2 ? t->strides[nd - 1] : 0;
    }
    int nb = nd > 2 ? nd - 2 : 0;
    for (int i = 0; i < pr->nbat; i++) {
        int it = i - (pr->nbat - nb);
        op->bs[i] = it >= 0 && t->shape[it] != 1 ? t->strides[it] : 0;
    }
}

static void mm_describe(mm_problem *pr, const kn_tensor *a, const kn_tensor *b, kn_tensor *o)
{
    int na = a->ndim, nb = b->ndim;
    memset(pr, 0, sizeof *pr);
    pr->m = na >= 2 ? a->shape[na - 2] : 1;
    pr->k = a->shape[na - 1];
    pr->n = nb >= 2 ? b->shape[nb - 1] : 1;
    pr->nbat = o->ndim - (na >= 2) - (nb >= 2);
    pr->nbatch = 1;
    for (int i = 0; i < pr->nbat; i++) {
        pr->bsize[i] = o->shape[i];
        pr->nbatch *= o->shape[i];
    }
    pr->o = o;
    mm_describe_operand(pr, &pr->a, a, true);
    mm_describe_operand(pr, &pr->b, b, false);
    /* the output's dims: batch, then M (when a is 2-D or more), then N
     * (when b is) */
    int no = o->ndim;
    pr->o_dense = kn_tensor_is_contiguous(o);
    if (na >= 2 && nb >= 2) {
        pr->o_rs = o->strides[no - 2];
        pr->o_cs = o->strides[no - 1];
    } else if (nb >= 2) { /* a 1-D: one row */
        pr->o_rs = pr->n;
        pr->o_cs = no ? o->strides[no - 1] : 1;
    } else { /* b 1-D: one column; its rows are the last dim (if a has them) */
        pr->o_rs = na >= 2 && no ? o->strides[no - 1] : 1;
        pr->o_cs = 1;
    }
    if (pr->o_dense) { /* exactly what the contiguous layout gives */
        pr->o_rs = pr->n;
        pr->o_cs = 1;
    }
    for (int i = 0; i < pr->nbat && i < KN_LA_MAX_BATCH; i++) pr->o_bs[i] = o->shape[i] != 1 ? o->strides[i] : 0;
}

/* Whether cuBLASLt's D can take this output's strides: unit-stride rows
 * (D is column-major N x M with the row stride as its leading dim) that do
 * not overlap, no negative stride, a float dtype. */
static bool mm_out_mappable(const mm_problem *pr)
{
    if (pr->o_dense) return true;
    if (!kn_dtype_is_float(pr->o->dtype) || pr->nbat > KN_LA_MAX_BATCH) return false;
    if (pr->n > 1 && pr->o_cs != 1) return false;
    if (pr->m > 1 && pr->o_rs < pr->n) return false;
    for (int i = 0; i < pr->nbat; i++)
        if (pr->o_bs[i] < 0) return false;
    return pr->o_rs >= 0;
}


/* kiln's tiled kernel: any strides, any float dtypes. */
static kn_status matmul_naive(const mm_problem *pr)
{
    kn_la_matmul_args p;
    memset(&p, 0, sizeof p);
    p.a = kn_cuda_tensor_ptr(pr->a.t);
    p.b = kn_cuda_tensor_ptr(pr->b.t);
    p.out = kn_cuda_tensor_ptr(pr->o);
    p.m = pr->m, p.n = pr->n, p.k = pr->k, p.nbatch = pr->nbatch;
    p.a_rs = pr->a.rs, p.a_cs = pr->a.cs, p.b_rs = pr->b.rs, p.b_cs = pr->b.cs;
    p.nbat = pr->nbat;
    for (int i = 0; i < pr->nbat; i++) {
        p.bsize[i] = pr->bsize[i];
        p.a_bs[i] = pr->a.bs[i];
        p.b_bs[i] = pr->b.bs[i];
    }
    p.a_dt = (int)pr->a.t->dtype, p.b_dt = (int)pr->b.t->dtype, p.o_dt = (int)pr->o->dtype;
    const void *fn;
    KN_TRY(kn_cuda_linalg_kernel(pr->o->dtype == KN_F64 ? "kn_la_matmul_f64" : "kn_la_matmul_f32", &fn));
    int64_t tiles = ((pr->m + 15) / 16) * ((pr->n + 15) / 16) * pr->nbatch;
    return kn_cuda_launch(fn, kn_cuda_linalg_grid(tiles, 1), 256, &p, 0);
}

/* ---- cuBLASLt ------------------------------------------------------------ */

#ifdef KILN_HAVE_CUBLASLT

/* What fixes a cuBLASLt call apart from its pointers. Zeroed before being
 * filled, so it can be hashed and compared as bytes. */
typedef struct lt_key {
    int32_t dtype, epilogue, bias_dt, tf32;
    int32_t op_a, op_b; /* cuBLASLt's A is kiln's b, its B kiln's a */
    int64_t m, n, k, count;
    int64_t rows_a, cols_a, ld_a, rows_b, cols_b, ld_b;
    int64_t ld_d;       /* D's leading dim: N for a contiguous output, its row stride otherwise */
    int64_t sa, sb, sd; /* strided-batch offsets */
    int64_t align_a, align_b, align_d, align_bias;
    int32_t variant, pad_; /* max-autotune: which algorithm (lt_entry_build) */
} lt_key;

typedef struct lt_entry {
    lt_key key;
    uint64_t hash;
    bool refused; /* the heuristic found no algorithm: use kiln's kernel */
    bool past_end; /* variant > 0 beyond what the heuristic offers */
    int x3_tile;   /* >= 0: this variant is kiln's split-f32 kernel in that tile shape (x3_variant) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    char label[2][112]; /* lt_label's text without and with a residual, made at the first call that
                           needs it: reading the algorithm's attributes costs host time every call */
} lt_entry;

/* One GPU's cuBLASLt (kn_cuda_dev.blas): its handle, its one workspace
 * and the plans built with them. */
struct kn_cuda_blas {
    cublasLtHandle_t h;
    int state; /* 0 not tried, 1 ready, -1 unavailable */
    void *ws;
    int64_t ws_size;
    kn_cuda_libplans *plans; /* lt_key -> lt_entry */
};

/* cuBLASLt is opened on the first matmul rather than linked: the library
 * is over 500 MB, and linking it cost every kiln process (CPU-only runs,
 * the REPL, each test) about 85 ms and 210 MB of resident memory at start
 * (measured on the development machine). */
#define LT_FUNCS(X)                                                                                \
    X(cublasLtCreate) X(cublasLtGetStatusString) X(cublasLtMatmul) X(cublasLtMatmulDescCreate)     \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)   \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)                             \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                           \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic)                      \
    X(cublasLtMatmulAlgoConfigGetAttribute) X(cublasLtMatmulAlgoConfigSetAttribute)                \
    X(cublasLtMatmulAlgoCheck) X(cublasLtGetVersion)

static struct {
#define LT_FIELD(f) __typeof__(&f) f;
    LT_FUNCS(LT_FIELD)
#undef LT_FIELD
} lt;

/* The library this build was configured with, then its soname, then any.
 * Once per process: the function table `lt` serves every GPU. */
static bool lt_open_once(void)
{
    static const char *const names[] = {
#ifdef KILN_CUBLASLT_LIB
        KILN_CUBLASLT_LIB,
#endif
#ifdef KILN_CUBLASLT_SONAME
        KILN_CUBLASLT_SONAME,
#endif
        "libcublasLt.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) return false;
    bool ok = true;
#define LT_SYM(f) ok = ok && (*(void **)&lt.f = dlsym(h, #f)) != NULL;
    LT_FUNCS(LT_SYM)
#undef LT_SYM
    return ok; /* a library missing a symbol stays loaded but unused */
}

static pthread_once_t lt_opened = PTHREAD_ONCE_INIT;
static bool lt_loaded;

static void lt_load(void)
{
    lt_loaded = lt_open_once();
}

static bool lt_open(void)
{
    pthread_once(&lt_opened, lt_load);
    return lt_loaded;
}

static kn_status lt_fail(cublasStatus_t s, const char *what)
{
    return kn_error(KN_ERR_DEVICE, "matmul: cuBLASLt %s failed: %s (%d)", what,
                    lt.cublasLtGetStatusString(s), (int)s);
}

static kn_cuda_blas *lt_ready(void);

/* "cublaslt algo 21 tile 18 stages 8 splitk 2" (cuBLASLt's enum numbers). */
static void lt_label(const cublasLtMatmulAlgo_t *a, const char *extra, char *buf, size_t size)
{
    int32_t id = -1, splitk = 1;
    uint32_t tile = 0, stages = 0;
    size_t w;
    lt.cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    lt.cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    lt.cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
    lt.cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
    snprintf(buf, size, "cublaslt algo %d tile %u stages %u splitk %d%s", (int)id, (unsigned)tile,
             (unsigned)stages, (int)(splitk > 0 ? splitk : 1), extra);
}

size_t kn_cuda_blas_version(void)
{
    return lt_ready() ? lt.cublasLtGetVersion() : 0;
}

static void lt_entry_destroy(lt_entry *e);

static void lt_plan_destroy(void *plan)
{
    lt_entry_destroy(plan);
}

/* The current GPU's handle and workspace; NULL when cuBLASLt cannot start
 * (the naive kernels then do all matmuls). */
static kn_cuda_blas *lt_ready(void)
{
    kn_cuda_dev *gpu = kn_cuda_current();
    if (!gpu->blas && !(gpu->blas = calloc(1, sizeof *gpu->blas))) return NULL;
    kn_cuda_blas *b = gpu->blas;
    if (b->state) return b->state > 0 ? b : NULL;
    b->state = -1;
    kn_phase_begin(KN_PHASE_STARTUP);
    bool started = lt_open() && lt.cublasLtCreate(&b->h) == CUBLAS_STATUS_SUCCESS;
    kn_phase_end(KN_PHASE_STARTUP);
    if (!started) {
        if (kn_cuda_lib_log_on())
            fprintf(stderr, "kiln: cuBLASLt cannot be opened or started: matmuls use kiln's kernel\n");
        return NULL;
    }
    if (!(b->plans = kn_cuda_libplans_new(sizeof(lt_key), lt_plan_destroy))) return NULL;
    if (kn_cuda_malloc(LT_WORKSPACE, &b->ws) == KN_OK) b->ws_size = LT_WORKSPACE;
    else b->ws = NULL, b->ws_size = 0; /* algorithms without workspace only */
    b->state = 1;
    return b;
}

static cudaDataType_t lt_type(kn_dtype dt)
{
    switch (dt) {
    case KN_F64: return CUDA_R_64F;
    case KN_BF16: return CUDA_R_16BF;
    case KN_F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}

static cublasStatus_t lt_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows,
                                int64_t cols, int64_t ld, int64_t count, int64_t stride)
{
    cublasStatus_t s = lt.cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
    if (s != CUBLAS_STATUS_SUCCESS || count <= 1) return s;
    int32_t c32 = (int32_t)count;
    s = lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c32, sizeof c32);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof stride);
    return s;
}

static void lt_entry_destroy(lt_entry *e)
{
    if (e->la) lt.cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) lt.cublasLtMatrixLayoutDestroy(e->lb);
    if (e->ld) lt.cublasLtMatrixLayoutDestroy(e->ld);
    if (e->desc) lt.cublasLtMatmulDescDestroy(e->desc);
    free(e);
}

/* e's matmul descriptor (ops, epilogue, bias) and the layouts of its A, B
 * and D, from e->key; what was made before a failure stays in e for
 * lt_entry_destroy. bias_ptr only tells the heuristic its alignment. */
static cublasStatus_t lt_descriptors(lt_entry *e, const void *bias_ptr)
{
    const lt_key *k = &e->key;
    kn_dtype dt = (kn_dtype)k->dtype;
    cudaDataType_t t = lt_type(dt);
    cublasComputeType_t ct = dt == KN_F64 ? CUBLAS_COMPUTE_64F
                             : k->tf32    ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
    cudaDataType_t scale = dt == KN_F64 ? CUDA_R_64F : CUDA_R_32F;
    cublasStatus_t s = lt.cublasLtMatmulDescCreate(&e->desc, ct, scale);
    int32_t op_a = k->op_a, op_b = k->op_b;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt.cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt.cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b);
    if (s == CUBLAS_STATUS_SUCCESS && k->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        uint32_t epi = (uint32_t)k->epilogue;
        s = lt.cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        if (s == CUBLAS_STATUS_SUCCESS && bias_ptr) {
            int32_t bt = (int32_t)lt_type((kn_dtype)k->bias_dt);
            s = lt.cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                               sizeof bt);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = lt.cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias_ptr, sizeof bias_ptr);
        }
    }
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt_layout(&e->la, t, k->rows_a, k->cols_a, k->ld_a, k->count, k->sa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt_layout(&e->lb, t, k->rows_b, k->cols_b, k->ld_b, k->count, k->sb);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt_layout(&e->ld, t, k->m, k->n, k->ld_d, k->count, k->sd);
    return s;
}

/* The heuristic's preference for key k: at most b's workspace, and the
 * operands' alignments. *pref (the caller destroys it) is made first. */
static cublasStatus_t lt_preference(const kn_cuda_blas *b, const lt_key *k, cublasLtMatmulPreference_t *pref)
{
    cublasStatus_t s = lt.cublasLtMatmulPreferenceCreate(pref);
    uint64_t wsb = (uint64_t)b->ws_size;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt.cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                                 sizeof wsb);
    /* The default assumes 256-byte aligned operands; a slice view is less. */
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        int64_t align;
    } al[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k->align_a},
              {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k->align_b},
              {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k->align_d},
              {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k->align_d}};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++) {
        uint32_t v = (uint32_t)al[i].align;
        s = lt.cublasLtMatmulPreferenceSetAttribute(*pref, al[i].attr, &v, sizeof v);
    }
    return s;
}

/* ---- kiln's split-precision kernel (kn_cuda_gemm_x3.h) as variants ----
 * In the "ieee" mode (f32 without TF32) kiln's split-f32 kernel is a
 * variant of every matmul it can take: after cuBLASLt's algorithms and
 * split-K variants come its tile shapes. On Hopper its wgmma form is also
 * the default for the shapes x3_default_tile picks; there the variant
 * after the tile shapes is cuBLASLt's first algorithm, which the default
 * then is not. Its accuracy depends on the inputs (operands below about
 * 1e-34 lose their small TF32 part), which max-autotune measures on the
 * real inputs and the default cannot: docs/precision.md says so. */

static bool x3_allowed(const lt_key *k)
{
    return k->dtype == KN_F32 && !k->tf32;
}

/* The key's operands as the kernel reads them: cuBLASLt's A is kiln's b
 * (op T: b is [n, k], op N: [k, n]), its B kiln's a (op N: a is [m, k],
 * op T: [k, m]), D the output [m, n] with rows ld_d apart. */
static void x3_layout(const lt_key *k, kn_cuda_x3_call *c)
{
    memset(c, 0, sizeof *c);
    c->b_kmajor = k->op_a == CUBLAS_OP_T;
    c->a_kmajor = k->op_b == CUBLAS_OP_N;
    c->p.m = k->n, c->p.n = k->m, c->p.k = k->k;
    c->p.lda = k->ld_b, c->p.ldb = k->ld_a, c->p.ldy = k->ld_d;
    c->p.sa = k->sb, c->p.sb = k->sa, c->p.sy = k->sd;
    c->count = k->count;
}

/* The default's tile of the split-f32 kernel for call c, or -1 for
 * cuBLASLt's strict GEMM: kn_cuda_gemm_x3_default_pick's rule on this GPU,
 * for a k-contiguous: a linear layer's forward (b k-contiguous, or an ONNX
 * weight kn_pass_k_major laid out so) and its input gradient (b
 * n-contiguous: 4096x2048x512 ran 136 us against cuBLASLt's 179, H200,
 * session 26). With a m-contiguous (a weight gradient, dy^T x) it ran
 * 0.97x cuBLASLt (4096-long sums): those stay with cuBLASLt. */
static int x3_default_tile_of(const kn_cuda_x3_call *c)
{
    int splits;
    int tile = kn_cuda_gemm_x3_default_pick(c, kn_cuda_current()->sm_count, &splits);
    return tile >= 0 && kn_cuda_gemm_x3_tile_runs_here(tile) ? tile : -1;
}

static int x3_default_tile(const lt_key *k)
{
    if (!x3_allowed(k) || k->op_b != CUBLAS_OP_N) return -1;
    if (k->align_a < 16 || k->align_b < 16 || (k->bias_dt && k->bias_dt != KN_F32)) return -1;
    kn_cuda_x3_call c;
    x3_layout(k, &c);
    if (!kn_cuda_gemm_x3_shape_fits(&c)) return -1;
    return x3_default_tile_of(&c);
}

bool kn_cuda_matmul_wants_k_major_b(kn_dtype dt, bool tf32, int64_t m, int64_t n, int64_t k)
{
    if (dt != KN_F32 || tf32) return false;
    kn_cuda_x3_call c;
    memset(&c, 0, sizeof c);
    c.p.m = m, c.p.n = n, c.p.k = k, c.p.lda = k, c.p.ldb = k, c.count = 1;
    c.a_kmajor = c.b_kmajor = true; /* as the product will run once b is laid out */
    return kn_cuda_gemm_x3_shape_fits(&c) && x3_default_tile_of(&c) >= 0;
}

/* Descriptors, layouts and the heuristic's first algorithm for key k.
 * bias_ptr only tells the heuristic its alignment. A refusal
 * (NOT_SUPPORTED, no algorithm) is cached as e->refused, not an error. */
static kn_status lt_entry_build(kn_cuda_blas *b, const lt_key *k, uint64_t h, const void *bias_ptr,
                                lt_entry **out)
{
    lt_entry *e = calloc(1, sizeof *e);
    if (!e) return kn_error(KN_ERR_OOM, "matmul: out of memory for a cuBLASLt plan");
    e->key = *k;
    e->hash = h;
    e->x3_tile = -1;
    kn_dtype dt = (kn_dtype)k->dtype;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t s = lt_descriptors(e, bias_ptr);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt_preference(b, k, &pref);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (pref) lt.cublasLtMatmulPreferenceDestroy(pref);
        lt_entry_destroy(e);
        return lt_fail(s, "descriptor setup");
    }
    cublasLtMatmulHeuristicResult_t res[LT_HEUR_MAX];
    int got = 0;
    memset(res, 0, sizeof res);
    s = lt.cublasLtMatmulAlgoGetHeuristic(b->h, e->desc, e->la, e->lb, e->ld, e->ld, pref, LT_HEUR_MAX, res,
                                          &got);
    lt.cublasLtMatmulPreferenceDestroy(pref);
    e->refused = true;
    /* variant v: the heuristic's v-th usable algorithm; past those, its
     * first with split-K 2, 4, 8 (a wide-K, few-tile GEMM such as
     * large_linear's M = 64 fills the GPU only when K is split) */
    int usable[LT_HEUR_MAX], nu = 0;
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < got; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && (int64_t)res[i].workspaceSize <= b->ws_size) usable[nu++] = i;
    int v = k->variant;
    if (nu && v == KN_VARIANT_STRICT) {
        e->algo = res[usable[0]].algo; /* cuBLASLt's strict f32 (k->tf32 is off under the contract) */
        e->refused = false;
    } else if (nu && v >= 0 && v < nu) {
        e->algo = res[usable[v]].algo;
        e->refused = false;
        /* the default: kiln's kernel where it measured faster, cuBLASLt's
         * algorithm kept for a call the kernel cannot take (a bias it
         * cannot read as f32) */
        if (v == 0) e->x3_tile = x3_default_tile(k);
    } else if (nu && v < nu + LT_SPLITS) {
        e->algo = res[usable[0]].algo;
        int32_t split = 2 << (v - nu);
        cublasLtMatmulHeuristicResult_t chk;
        memset(&chk, 0, sizeof chk);
        if (lt.cublasLtMatmulAlgoConfigSetAttribute(&e->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split,
                                                    sizeof split) == CUBLAS_STATUS_SUCCESS &&
            lt.cublasLtMatmulAlgoCheck(b->h, e->desc, e->la, e->lb, e->ld, e->ld, &e->algo, &chk) ==
                CUBLAS_STATUS_SUCCESS &&
            (int64_t)chk.workspaceSize <= b->ws_size)
            e->refused = false;
    } else if (v && nu && x3_allowed(k) && v < nu + LT_SPLITS + KN_CUDA_X3_TILES) {
        e->x3_tile = v - nu - LT_SPLITS;
        kn_cuda_x3_call c;
        x3_layout(k, &c);
        e->refused = !kn_cuda_gemm_x3_tile_takes(e->x3_tile, c.a_kmajor, c.b_kmajor);
    } else if (nu && v == nu + LT_SPLITS + KN_CUDA_X3_TILES && x3_default_tile(k) >= 0) {
        e->algo = res[usable[0]].algo; /* cuBLASLt's first, which the default is not here */
        e->refused = false;
    } else if (v) {
        e->past_end = true;
    }
    if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED &&
        s != CUBLAS_STATUS_INVALID_VALUE) {
        lt_entry_destroy(e);
        return lt_fail(s, "heuristic");
    }
    kn_status st = kn_cuda_libplans_insert(b->plans, &e->key, e->hash, e);
    if (st != KN_OK) {
        lt_entry_destroy(e);
        return st;
    }
    if (kn_cuda_lib_log_on())
        fprintf(stderr,
                "kiln: matmul %s m=%lld n=%lld k=%lld batch=%lld ops=%c%c ld=%lld,%lld align=%lld,%lld,%lld "
                "epilogue=%d tf32=%d: %s%s\n",
                kn_dtype_name(dt), (long long)k->n, (long long)k->m, (long long)k->k, (long long)k->count,
                k->op_b == CUBLAS_OP_T ? 'T' : 'N', k->op_a == CUBLAS_OP_T ? 'T' : 'N',
                (long long)k->ld_b, (long long)k->ld_a, (long long)k->align_b, (long long)k->align_a,
                (long long)k->align_d, k->epilogue, k->tf32,
                e->refused ? "cuBLASLt refused (kiln's kernel runs): " : "cuBLASLt",
                !e->refused                 ? ""
                : s == CUBLAS_STATUS_SUCCESS ? "no algorithm"
                                             : lt.cublasLtGetStatusString(s));
    *out = e;
    return KN_OK;
}

/* cuBLASLt's view of the logical p x q matrix L with L(i, j) at
 * i*si + j*sj: column-major as is (op N, ld sj) when si is 1, or stored
 * transposed (op T, ld si) when sj is 1. A dim of size 1 leaves its stride
 * free. False when neither fits (then a copy makes it contiguous). */
static bool lt_map(int64_t p, int64_t q, int64_t si, int64_t sj, int32_t *op, int64_t *rows,
                   int64_t *cols, int64_t *ld)
{
    if ((si == 1 || p == 1) && (q == 1 || sj >= p)) {
        *op = CUBLAS_OP_N, *rows = p, *cols = q, *ld = q == 1 ? p : sj;
        return true;
    }
    if ((sj == 1 || q == 1) && (p == 1 || si >= q)) {
        *op = CUBLAS_OP_T, *rows = q, *cols = p, *ld = p == 1 ? q : si;
        return true;
    }
    return false;
}

/* Whether batch dims [lo, nbat) are one strided run for strides st (dims
 * of size 1 skipped); *step gets the run's stride. */
static bool batch_run(const mm_problem *pr, const int64_t *st, int lo, int64_t *step)
{
    int64_t expect = 0;
    bool have = false;
    *step = 0;
    for (int d = pr->nbat - 1; d >= lo; d--) {
        if (pr->bsize[d] == 1) continue;
        if (st[d] < 0) return false;
        if (have && st[d] != expect) return false;
        if (!have) *step = st[d];
        have = true;
        expect = st[d] * pr->bsize[d];
    }
    return true;
}

static bool fits_i32(int64_t v)
{
    return v >= 0 && v <= INT32_MAX;
}

/* The operands of pr in the output's dtype, each mappable onto a cuBLASLt
 * layout with its batch dims one strided run, and the bias in *lbias (NULL
 * when it cannot be had: the epilogue then goes to kiln's kernel): copies
 * (tmp, the caller releases them) where the views are not. False when a
 * needed copy is not available: kiln's kernel then runs on the views. */
static bool lt_operands(mm_problem *pr, const kn_tensor *bias, kn_tensor *tmp[3], const kn_tensor **lbias)
{
    kn_dtype dt = pr->o->dtype;
    /* operands in the output dtype, each mappable onto a cuBLASLt layout */
    for (int w = 0; w < 2; w++) {
        mm_operand *op = w ? &pr->b : &pr->a;
        int64_t p = w ? pr->n : pr->k, q = w ? pr->k : pr->m;
        int32_t o32;
        int64_t r, c, l;
        bool neg = op->cs < 0 || op->rs < 0;
        for (int i = 0; i < pr->nbat; i++) neg = neg || op->bs[i] < 0;
        if (op->t->dtype == dt && !neg && lt_map(p, q, op->cs, op->rs, &o32, &r, &c, &l)) continue;
        if (kn_cuda_copy_as(op->t, dt, &tmp[w]) != KN_OK) { /* naive on the views */
            if (kn_cuda_lib_log_on())
                fprintf(stderr, "kiln: matmul: no %s copy of operand %d for cuBLASLt (%s): kiln's kernel runs\n",
                        op->t->dtype == dt ? "contiguous" : "converted", w + 1, kn_last_error());
            return false;
        }
        mm_describe_operand(pr, op, tmp[w], w == 0);
    }
    *lbias = bias;
    if (bias && (bias->dtype != dt || (pr->n > 1 && bias->strides[0] != 1))) {
        *lbias = kn_cuda_copy_as(bias, dt, &tmp[2]) == KN_OK ? tmp[2] : NULL;
    }
    /* An operand whose batch dims are no single strided run (attention's
     * q, k, v: [B, H, T, D] views of one [B, T, 3D] tensor) would need a
     * loop of calls, one per outer index; on the H100 that loop made the
     * PV matmul of the transformer_block sample 232 us. One contiguous copy
     * (~10 us) and one strided-batch call are cheaper. */
    for (int w = 0; w < 2; w++) {
        mm_operand *op = w ? &pr->b : &pr->a;
        int64_t step;
        if (tmp[w] || batch_run(pr, op->bs, 0, &step)) continue;
        if (kn_cuda_copy_as(op->t, dt, &tmp[w]) != KN_OK) return false;
        mm_describe_operand(pr, op, tmp[w], w == 0);
    }
    return true;
}

/* x @ w over a view whose last batch dim is longer than M and whose rows
 * do not continue from batch to batch: the sequence-first view [T, B, K]
 * of a batch-first [B, T, K] tensor (ViT's in-projection after
 * nn.MultiheadAttention's transpose). As described that is T GEMMs of B
 * rows each (197 GEMMs of 8 rows: 65 us on the H200 where one GEMM of the
 * same size takes 14). When b is shared over that dim, exchanging it with
 * M computes the same products into the same places as B GEMMs of T rows:
 * a's row stride and that batch stride trade places, and so do D's leading
 * dim and batch stride (D is then described by strides, not as dense). */
static void mm_rows_from_batch(mm_problem *pr)
{
    int d = pr->nbat - 1;
    if (d < 0 || pr->a.t->ndim < 2 || pr->b.t->ndim < 2 || pr->b.bs[d] != 0 || pr->bsize[d] <= pr->m) return;
    if (pr->a.bs[d] == pr->m * pr->a.rs) return; /* rows continue: lt_shape folds the batches into rows */
    if (!mm_out_mappable(pr)) return;
    int32_t o32;
    int64_t r, c, l;
    if (!lt_map(pr->k, pr->bsize[d], pr->a.cs, pr->a.bs[d], &o32, &r, &c, &l)) return;
    int64_t o_rs = pr->o_dense ? pr->n : pr->o_rs, o_bs = pr->o->strides[d];
    if (pr->m > 1 && o_rs < 0) return;
    int64_t m = pr->m, a_rs = pr->a.rs;
    pr->m = pr->bsize[d];
    pr->a.rs = pr->a.bs[d];
    pr->bsize[d] = m;
    pr->a.bs[d] = m != 1 ? a_rs : 0;
    pr->o_rs = o_bs;
    pr->o_bs[d] = m != 1 ? o_rs : 0;
    pr->o_cs = 1;
    pr->o_dense = false;
}

/* The shape of the cuBLASLt calls for pr (its operands mappable:
 * lt_operands) into a zeroed key k: the largest suffix [*split, nbat) of
 * the batch dims that is one strided run for a, b and the output becomes
 * the strided batch (or, b shared, more rows of one GEMM), the dims before
 * it a loop of calls; the layouts and the alignments over every pointer
 * the calls will use (pa, pb, pd: cuBLASLt's A, B and D). The dtype, the
 * variant and the epilogue are the caller's. False when a size does not
 * fit cuBLASLt's 32 bits. */
static bool lt_shape(const mm_problem *pr, const char *pa, const char *pb, char *pd, lt_key *k_out, int *split_out)
{
    size_t esz = kn_dtype_size(pr->o->dtype);
    lt_key k;
    memset(&k, 0, sizeof k);
    /* largest suffix of batch dims that is one strided run for a, b and
     * the output (a contiguous output is one for any suffix) */
    int split = 0;
    int64_t sa = 0, sb = 0, so = 0;
    while (!(batch_run(pr, pr->a.bs, split, &sa) && batch_run(pr, pr->b.bs, split, &sb) &&
             (pr->o_dense || batch_run(pr, pr->o_bs, split, &so))))
        split++;
    int64_t count = 1;
    for (int d = split; d < pr->nbat; d++) count *= pr->bsize[d];
    if (pr->o_dense) so = pr->m * pr->n;
    int64_t m = pr->m, a_rs = pr->a.rs, ld_d = pr->o_dense || pr->m == 1 ? pr->n : pr->o_rs;
    /* b shared: the batches of a are more rows of one GEMM, when the
     * output's rows also continue from batch to batch */
    bool o_rows_run = pr->o_dense || (pr->m == 1 ? so >= pr->n : so == pr->m * pr->o_rs);
    if (count > 1 && sb == 0 && (pr->m == 1 || sa == pr->m * pr->a.rs) && o_rows_run) {
        int32_t o32;
        int64_t r, c, l, rs = pr->m == 1 ? sa : pr->a.rs;
        if (lt_map(pr->k, pr->m * count, pr->a.cs, rs, &o32, &r, &c, &l)) {
            a_rs = rs;
            m = pr->m * count;
            count = 1;
            if (!pr->o_dense) ld_d = pr->m == 1 ? so : pr->o_rs;
        }
    }
    /* cuBLASLt A = kiln b^T (N x K), B = kiln a^T (K x m), D = out^T (N x m) */
    if (!lt_map(pr->n, pr->k, pr->b.cs, pr->b.rs, &k.op_a, &k.rows_a, &k.cols_a, &k.ld_a) ||
        !lt_map(pr->k, m, pr->a.cs, a_rs, &k.op_b, &k.rows_b, &k.cols_b, &k.ld_b))
        return false; /* cannot happen after the copies; kept for safety */
    k.m = pr->n, k.n = m, k.k = pr->k, k.count = count;
    k.ld_d = ld_d;
    k.sa = count > 1 ? sb : 0;
    k.sb = count > 1 ? sa : 0;
    k.sd = count > 1 ? so : 0;
    if (!fits_i32(k.m) || !fits_i32(k.n) || !fits_i32(k.k) || !fits_i32(k.ld_a) ||
        !fits_i32(k.ld_b) || !fits_i32(k.ld_d) || !fits_i32(k.count))
        return false;
    /* alignment over every pointer the calls will use: base plus batch steps */
    int64_t bya[KN_LA_MAX_BATCH], byb[KN_LA_MAX_BATCH];
    for (int i = 0; i < pr->nbat; i++) {
        bya[i] = pr->b.bs[i] * (int64_t)esz;
        byb[i] = pr->a.bs[i] * (int64_t)esz;
    }
    int64_t byd = pr->m * pr->n * (int64_t)esz, byo[KN_LA_MAX_BATCH + 1];
    k.align_a = kn_cuda_align_of(pa, bya, pr->nbat, 256);
    k.align_b = kn_cuda_align_of(pb, byb, pr->nbat, 256);
    if (pr->o_dense) {
        k.align_d = kn_cuda_align_of(pd, &byd, pr->nbat ? 1 : 0, 256);
    } else { /* every batch start and the row stride */
        for (int i = 0; i < pr->nbat; i++) byo[i] = pr->o_bs[i] * (int64_t)esz;
        byo[pr->nbat] = ld_d * (int64_t)esz;
        k.align_d = kn_cuda_align_of(pd, byo, pr->nbat + 1, 256);
    }
    memcpy(k_out, &k, sizeof k); /* the bytes, padding too: the key is hashed */
    *split_out = split;
    return true;
}

/* What a variant's label adds for the work its call did besides the
 * product: a bias or activation in its epilogue, a residual. */
static const char *epilogue_note(bool epi, bool residual)
{
    return epi ? (residual ? " +epilogue +residual" : " +epilogue") : residual ? " +residual" : "";
}

/* The next outer batch index of [0, split) (an odometer): *oa, *ob and
 * *oo step by the cuBLASLt A (kiln's b), B (kiln's a) and output strides. */
static void outer_next(const mm_problem *pr, int split, int64_t *idx, int64_t *oa, int64_t *ob, int64_t *oo)
{
    for (int d = split - 1; d >= 0; d--) {
        *oa += pr->b.bs[d];
        *ob += pr->a.bs[d];
        *oo += pr->o_bs[d];
        if (++idx[d] < pr->bsize[d]) break;
        *oa -= pr->b.bs[d] * idx[d];
        *ob -= pr->a.bs[d] * idx[d];
        *oo -= pr->o_bs[d] * idx[d];
        idx[d] = 0;
    }
}

/* Key k's calls through kiln's split-f32 kernel in tile shape `tile`, the
 * epilogue (f32 bias over n, act, a residual like the output) in its
 * stores. */
static kn_status x3_calls(const lt_key *k, const mm_problem *pr, int split, const char *pa, const char *pb, char *pd,
                          const kn_tensor *bias, int act, const kn_tensor *residual, int tile)
{
    kn_cuda_x3_call c;
    x3_layout(k, &c);
    c.p.bias = bias ? kn_cuda_tensor_ptr(bias) : NULL;
    c.p.act = act;
    const int64_t esz = 4;
    c.p.vec2 = k->ld_d % 2 == 0 && k->sd % 2 == 0 && k->align_d >= 8;
    int64_t outer = 1, idx[KN_LA_MAX_BATCH] = {0}, oa = 0, ob = 0, oo = 0;
    for (int d = 0; d < split; d++) outer *= pr->bsize[d];
    for (int64_t it = 0; it < outer; it++) {
        int64_t od = pr->o_dense ? it * k->count * k->n * pr->n : oo;
        c.p.a = pb + ob * esz;
        c.p.b = pa + oa * esz;
        c.p.y = pd + od * esz;
        c.p.res = residual ? (const char *)kn_cuda_tensor_ptr(residual) + od * esz : NULL;
        KN_TRY(kn_cuda_gemm_x3(&c, tile));
        outer_next(pr, split, idx, &oa, &ob, &oo);
    }
    kn_cuda_variant_label("kiln split-f32 GEMM %s (3xTF32)%s", kn_cuda_gemm_x3_tile_name(tile),
                          epilogue_note(bias || act, residual));
    return KN_OK;
}

/* Entry e's calls (its key as lt_shape made it) over the outer batch dims
 * [0, split), one strided-batch call each: D = A·B, or D = A·B + C with a
 * residual (C). cuBLASLt refusing the first call is no error: e->refused
 * is set (remembered: next time straight to the fallback). */
static kn_status lt_calls(kn_cuda_blas *b, lt_entry *e, const mm_problem *pr, int split, const char *pa,
                          const char *pb, char *pd, const kn_tensor *residual)
{
    kn_dtype dt = pr->o->dtype;
    size_t esz = kn_dtype_size(dt);
    int64_t m = e->key.n, count = e->key.count;
    float one_f = 1.0f, zero_f = 0.0f;
    double one_d = 1.0, zero_d = 0.0;
    const void *alpha = dt == KN_F64 ? (const void *)&one_d : (const void *)&one_f;
    const void *beta = dt == KN_F64 ? (const void *)&zero_d : (const void *)&zero_f;
    /* a residual rides in as C with beta 1: D = A·B + C (+ bias); it has
     * D's shape and layout (the caller checked), so D's layout serves */
    const char *pc = pd;
    if (residual) {
        beta = alpha;
        pc = kn_cuda_tensor_ptr(residual);
    }
    /* the outer batch dims [0, split): one strided-batch call each */
    int64_t outer = 1, idx[KN_LA_MAX_BATCH] = {0};
    for (int d = 0; d < split; d++) outer *= pr->bsize[d];
    int64_t oa = 0, ob = 0, oo = 0;
    for (int64_t it = 0; it < outer; it++) {
        /* m: rows after any folding; a strided output steps by its own strides */
        int64_t od = pr->o_dense ? it * count * m * pr->n : oo;
        cublasStatus_t s = lt.cublasLtMatmul(
            b->h, e->desc, alpha, pa + oa * (int64_t)esz, e->la, pb + ob * (int64_t)esz, e->lb,
            beta, pc + od * (int64_t)esz, e->ld, pd + od * (int64_t)esz, e->ld, &e->algo, b->ws,
            (size_t)b->ws_size, kn_cuda_stream());
        if (s == CUBLAS_STATUS_NOT_SUPPORTED && it == 0) {
            e->refused = true; /* remembered: next time straight to the fallback */
            if (kn_cuda_lib_log_on())
                fprintf(stderr, "kiln: matmul: cublasLtMatmul refused its own algorithm: kiln's kernel runs\n");
            break;
        }
        if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(s, "matmul");
        outer_next(pr, split, idx, &oa, &ob, &oo);
    }
    return KN_OK;
}

/* The library path. *done stays false when cuBLASLt refuses or a needed
 * copy is not available: the caller then runs kiln's kernel. Temporaries
 * (casts, contiguous copies) are released before returning; the allocator
 * keeps their memory from reuse until the queued work is done. */
static kn_status matmul_lt(const mm_problem *pr0, const kn_tensor *bias, int act, const kn_tensor *residual,
                           int variant, bool *done)
{
    *done = false;
    bool past_end = false;
    kn_cuda_blas *b = lt_ready();
    if (!b)
        return variant > 0 ? kn_error(KN_ERR_RANGE, "matmul: cuBLASLt is not available: no variant %d", variant) : KN_OK;
    kn_dtype dt = pr0->o->dtype;
    kn_tensor *tmp[3] = {NULL, NULL, NULL};
    kn_status st = KN_OK;
    mm_problem pr = *pr0;
    const kn_tensor *lbias = NULL;
    if (!lt_operands(&pr, bias, tmp, &lbias)) goto out;
    mm_rows_from_batch(&pr);
    const char *pa = kn_cuda_tensor_ptr(pr.b.t), *pb = kn_cuda_tensor_ptr(pr.a.t);
    char *pd = kn_cuda_tensor_ptr(pr.o);
    lt_key k;
    int split;
    if (!lt_shape(&pr, pa, pb, pd, &k, &split)) goto out;
    k.dtype = (int32_t)dt;
    k.variant = variant;
    k.tf32 = dt == KN_F32 && kn_cuda_allow_tf32();
    bool want_epi = (bias || act) && (!bias || lbias);
    for (int attempt = want_epi ? 0 : 1; attempt < 2 && !*done; attempt++) {
        bool epi = attempt == 0;
        k.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        k.bias_dt = 0;
        k.align_bias = 0;
        if (epi) {
            k.epilogue = act == 1   ? (bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU)
                         : act == 2 ? (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                    : CUBLASLT_EPILOGUE_BIAS;
            if (bias) {
                k.bias_dt = (int32_t)lbias->dtype;
                k.align_bias = kn_cuda_align_of(kn_cuda_tensor_ptr(lbias), NULL, 0, 256);
            }
        }
        const void *bptr = epi && bias ? kn_cuda_tensor_ptr(lbias) : NULL;
        uint64_t h = kn_hash_bytes(KN_HASH_SEED, &k, sizeof k);
        lt_entry *e = kn_cuda_libplans_find(b->plans, &k, h);
        if (!e) {
            kn_phase_begin(KN_PHASE_LIBRARY_PLANS);
            st = lt_entry_build(b, &k, h, bptr, &e);
            kn_phase_end(KN_PHASE_LIBRARY_PLANS);
            if (st != KN_OK) goto out;
        }
        past_end = past_end || e->past_end;
        if (e->refused) continue;
        /* kiln's split-f32 kernel: the bias as the library would take it (f32, contiguous) */
        if (e->x3_tile >= 0 && (!bias || lbias)) {
            st = x3_calls(&k, &pr, split, pa, pb, pd, lbias, act, residual, e->x3_tile);
            if (st == KN_OK) *done = true;
            /* the default's kernel unable to take the call: cuBLASLt's algorithm */
            if (st != KN_ERR_UNSUPPORTED || k.variant != 0) goto out;
            if (kn_cuda_lib_log_on()) fprintf(stderr, "kiln: matmul: %s: cuBLASLt runs\n", kn_last_error());
            st = KN_OK;
        } else if (e->x3_tile >= 0 && k.variant != 0) {
            st = kn_error(KN_ERR_UNSUPPORTED, "matmul: the split-f32 kernel takes no bias it cannot read as f32");
            goto out;
        }
        if (bptr) {
            cublasStatus_t s = lt.cublasLtMatmulDescSetAttribute(
                e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bptr, sizeof bptr);
            if (s != CUBLAS_STATUS_SUCCESS) {
                st = lt_fail(s, "bias pointer");
                goto out;
            }
        }
        if ((st = lt_calls(b, e, &pr, split, pa, pb, pd, residual)) != KN_OK) goto out;
        if (e->refused) continue;
        *done = true;
        char *label = e->label[residual ? 1 : 0];
        if (!label[0])
            lt_label(&e->algo, epilogue_note(epi, residual), label, sizeof e->label[0]);
        kn_cuda_variant_label("%s", label);
        if (!epi) st = kn_cuda_bias_act(pr.o, bias, 1, pr.n, act); /* a strided output has neither (matmul_run) */
    }
    /* a variant is that algorithm or nothing: kiln's kernel is no variant */
    if (!*done && variant > 0 && st == KN_OK)
        st = past_end ? kn_error(KN_ERR_RANGE, "matmul: cuBLASLt has no variant %d for this call", variant)
                      : kn_error(KN_ERR_UNSUPPORTED, "matmul: cuBLASLt variant %d cannot run this call", variant);
out:
    for (int i = 0; i < 3; i++) kn_tensor_release(tmp[i]);
    return st;
}

#else
size_t kn_cuda_blas_version(void)
{
    return 0;
}
#endif /* KILN_HAVE_CUBLASLT */

/* ---- entry points ---------------------------------------------------------- */

/* o += r (same shape) when the library could not take the residual:
 * through kiln's own add, then a copy back into o. */
kn_status kn_cuda_add_into(kn_tensor *o, const kn_tensor *r)
{
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_ADD);
    c.n_in = 2;
    c.in[0] = o;
    c.in[1] = (kn_tensor *)r;
    KN_TRY(kn_op_eager(&c, kn_cuda_current()->device));
    cudaError_t e = cudaMemcpyAsync(kn_cuda_tensor_ptr(o), kn_cuda_tensor_ptr(c.out[0]),
                                    (size_t)kn_tensor_numel(o) * kn_dtype_size(o->dtype), cudaMemcpyDeviceToDevice,
                                    kn_cuda_stream());
    kn_tensor_release(c.out[0]);
    return e == cudaSuccess ? KN_OK : kn_cuda_fail(e, "matmul: residual add");
}

/* o = act(o + bias + residual) after a product the library did not fold
 * them into (each may be absent). */
static kn_status finish_epilogue(kn_tensor *o, const kn_tensor *bias, int act, const kn_tensor *residual, int64_t n)
{
    if (!residual) return kn_cuda_bias_act(o, bias, 1, n, act);
    KN_TRY(kn_cuda_bias_act(o, bias, 1, n, 0));
    KN_TRY(kn_cuda_add_into(o, residual));
    return act ? kn_cuda_bias_act(o, NULL, 1, n, act) : KN_OK;
}

static kn_status matmul_run(const kn_opcall *c, const kn_tensor *bias, int act, const kn_tensor *residual)
{
    if (c->n_in != 2 || !c->in[0] || !c->in[1] || c->n_out < 1 || !c->out[0])
        return kn_error(KN_ERR_ARG, "matmul: expects 2 inputs and a preallocated output");
    if (act < 0 || act > 2) return kn_error(KN_ERR_ARG, "matmul: unknown activation %d", act);
    kn_tensor *o = c->out[0];
    const kn_tensor *a = c->in[0], *b = c->in[1];
    if (!kn_cuda_on_current(a) || !kn_cuda_on_current(b) || !kn_cuda_on_current(o))
        return kn_error(KN_ERR_DEVICE, "matmul: the CUDA backend got a tensor that is not on cuda");
    if (!kn_dtype_is_float(o->dtype) || !kn_dtype_is_float(a->dtype) || !kn_dtype_is_float(b->dtype))
        return kn_error(KN_ERR_UNSUPPORTED, "matmul: float tensors only on cuda, got %s and %s",
                        kn_dtype_name(a->dtype), kn_dtype_name(b->dtype));
    mm_problem pr;
    mm_describe(&pr, a, b, o);
    if (pr.nbat > KN_LA_MAX_BATCH)
        return kn_error(KN_ERR_UNSUPPORTED, "matmul: more than %d batch dims", KN_LA_MAX_BATCH);
    if (bias && (bias->ndim != 1 || bias->shape[0] != pr.n || !kn_dtype_is_float(bias->dtype) ||
                 !kn_cuda_on_current(bias)))
        return kn_error(KN_ERR_SHAPE, "matmul: a fused bias must be a float cuda tensor of shape {%lld}",
                        (long long)pr.n);
    /* a strided output (a plan's permuted layout) goes to cuBLASLt's D as
     * is, or not at all: nothing here writes one otherwise, and the plan
     * copies instead on KN_ERR_UNSUPPORTED */
    if (!pr.o_dense && (bias || act || residual || pr.k == 0 || !mm_out_mappable(&pr)))
        return kn_error(KN_ERR_UNSUPPORTED, "matmul: cannot write this strided output%s",
                        bias || act || residual ? " with an epilogue" : "");
    KN_TRY(kn_cuda_init());
    if (kn_tensor_numel(o) == 0) return KN_OK;
    if (pr.k == 0) { /* empty sums: zeros (all-zero bits in every float dtype) */
        KN_CUDA_TRY(cudaMemsetAsync(kn_cuda_tensor_ptr(o), 0,
                                    (size_t)kn_tensor_numel(o) * kn_dtype_size(o->dtype),
                                    kn_cuda_stream()),
                    "matmul: zero fill");
        return finish_epilogue(o, bias, act, residual, pr.n);
    }
#ifdef KILN_HAVE_CUBLASLT
    bool done = false;
    KN_TRY(matmul_lt(&pr, bias, act, residual, c->variant, &done));
    if (done) return KN_OK;
#else
    if (c->variant > 0) return kn_error(KN_ERR_RANGE, "matmul: no cuBLASLt in this build: no variant %d", c->variant);
#endif
    if (!pr.o_dense) /* kiln's kernel writes contiguous outputs only */
        return kn_error(KN_ERR_UNSUPPORTED, "matmul: cuBLASLt did not take this strided output");
    kn_cuda_variant_label("kiln matmul kernel");
    KN_TRY(matmul_naive(&pr));
    return finish_epilogue(o, bias, act, residual, pr.n);
}

kn_status kn_cuda_matmul(const kn_opcall *c)
{
    return matmul_run(c, NULL, 0, NULL);
}

kn_status kn_cuda_matmul_fused(const kn_opcall *c, const kn_tensor *bias, int act, const kn_tensor *residual)
{
    const kn_tensor *o = c->out[0];
    if (residual && (residual->dtype != o->dtype || !kn_tensor_is_contiguous(residual) ||
                     residual->ndim != o->ndim ||
                     memcmp(residual->shape, o->shape, sizeof(int64_t) * (size_t)o->ndim) != 0 ||
                     !kn_cuda_on_current(residual)))
        return kn_error(KN_ERR_SHAPE, "matmul: a fused residual must be a contiguous cuda tensor like the output");
    return matmul_run(c, bias, act, residual);
}

/* Strided outputs are taken where cuBLASLt writes them in one
 * strided-batch call: the output's batch dims one strided run (B = 1, or
 * a permutation that keeps them in order). Attention's head merge at
 * B > 1 has batch dims (B, H) at strides (T*D, hd), no single run: it
 * would take one call per b, and on the H100 such a loop of calls made the
 * P.V matmul of transformer_block 232 us where one call and a copy cost
 * ~45 us (see matmul_lt); so it is declined and the plan keeps its copy.
 * A 2-D batch (cuBLASLt's pointer-array batch mode) would lift this. */
bool kn_cuda_matmul_strided_ok(const kn_opcall *c)
{
    if (!c || c->op != KN_OP_MATMUL || c->n_in != 2 || !c->in[0] || !c->in[1] || c->n_out != 1 || !c->out[0])
        return false;
#ifndef KILN_HAVE_CUBLASLT
    return false; /* kiln's own kernel writes contiguous outputs only */
#else
    mm_problem pr;
    int64_t step;
    if (c->out[0]->ndim - (c->in[0]->ndim >= 2) - (c->in[1]->ndim >= 2) > KN_LA_MAX_BATCH) return false;
    mm_describe(&pr, c->in[0], c->in[1], c->out[0]);
    return mm_out_mappable(&pr) && batch_run(&pr, pr.o_bs, 0, &step);
#endif
}

/* ---- the roofline ceiling ------------------------------------------------- */

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

kn_status kn_cuda_matmul_rate(kn_dtype dt, double *tflops)
{
    enum { SIZE = 8192, WARM = 2, RUNS = 5 };
    *tflops = 0;
    if (!kn_dtype_is_float(dt))
        return kn_error(KN_ERR_DTYPE, "matmul rate: float dtypes only, got %s", kn_dtype_name(dt));
    KN_TRY(kn_cuda_init());
    int64_t shape[2] = {SIZE, SIZE};
    kn_tensor *t[3] = {NULL, NULL, NULL};
    cudaEvent_t ev[2] = {NULL, NULL};
    kn_status st = KN_OK;
    for (int i = 0; i < 3 && st == KN_OK; i++) st = kn_tensor_new(dt, 2, shape, kn_cuda_current()->device, &t[i]);
    /* 0x3c bytes: small finite values in every float dtype (zeros would
     * let the GPU draw less power and clock higher than real data does) */
    for (int i = 0; i < 2 && st == KN_OK; i++) {
        cudaError_t e = cudaMemsetAsync(kn_cuda_tensor_ptr(t[i]), 0x3c,
                                        (size_t)(SIZE * SIZE) * kn_dtype_size(dt), kn_cuda_stream());
        if (e != cudaSuccess) st = kn_cuda_fail(e, "matmul rate: fill");
    }
    for (int i = 0; i < 2 && st == KN_OK; i++) {
        cudaError_t e = cudaEventCreate(&ev[i]);
        if (e != cudaSuccess) st = kn_cuda_fail(e, "matmul rate: event");
    }
    /* b k-contiguous (a Linear layer's weight as nn.Linear holds it, and
     * ONNX's after kn_pass_k_major): the layout matmul's default runs
     * fastest, on Hopper in f32 the split-f32 kernel, whose rate is then
     * the ceiling its kernels and cuBLASLt's are held to (with b [k, n]
     * the ceiling was cuBLASLt's strict 48 TFLOP/s, and the split
     * kernel's GEMMs read 104% of it, H200 session 16) */
    kn_tensor bt;
    if (st == KN_OK) {
        bt = *t[1];
        bt.strides[0] = 1, bt.strides[1] = SIZE; /* square: the transpose's header, the same storage */
    }
    kn_opcall c;
    kn_opcall_init(&c, KN_OP_MATMUL);
    c.n_in = 2, c.in[0] = t[0], c.in[1] = &bt, c.n_out = 1, c.out[0] = t[2];
    double ms[RUNS];
    for (int r = 0; r < WARM + RUNS && st == KN_OK; r++) {
        cudaError_t e = cudaEventRecord(ev[0], kn_cuda_stream());
        if (e == cudaSuccess && (st = kn_cuda_matmul(&c)) != KN_OK) break;
        if (e == cudaSuccess) e = cudaEventRecord(ev[1], kn_cuda_stream());
        if (e == cudaSuccess) e = cudaEventSynchronize(ev[1]);
        float f = 0;
        if (e == cudaSuccess) e = cudaEventElapsedTime(&f, ev[0], ev[1]);
        if (e != cudaSuccess) st = kn_cuda_fail(e, "matmul rate: timing");
        if (r >= WARM) ms[r - WARM] = f;
    }
    if (st == KN_OK) {
        qsort(ms, RUNS, sizeof ms[0], cmp_double);
        double med = ms[RUNS / 2];
        *tflops = med > 0 ? 2.0 * SIZE * (double)SIZE * SIZE / (med * 1e-3) / 1e12 : 0;
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    for (int i = 0; i < 3; i++) kn_tensor_release(t[i]);
    return st;
}
