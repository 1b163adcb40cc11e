/* bench/gemm_algos.c: is cuBLASLt's heuristic's first algorithm the fastest
 * one for the bf16 GEMMs of small transformers, and if not, which
 * configurations beat it and by how much?
 *
 * kiln takes the heuristic's first pick (kernels/cuda/kn_cuda_blas.c). At
 * BERT/GPT-2/ViT sizes with 8 sequences (M = 1024 or 1576 rows) a GEMM
 * fills the GPU with only a wave or two of tiles, where the tile shape,
 * cluster shape and split-K decide a lot and a heuristic tuned for large
 * problems may choose badly. This program times every algorithm the
 * heuristic offers (and split-K 2, 3, 4 of its first) on the linear layers
 * of those models, directly through cuBLASLt, kiln not involved:
 *
 *   row-major C[M,N] = A[M,K] . W[K,N] (+ bias, + GELU, + residual)
 *
 * bf16 operands and output, f32 compute and scale. Mapped to column-major
 * as kiln maps it: cuBLASLt's A is W read as an N x K column-major matrix,
 * its B is the activation read as K x M, and D is N x M (m=N, n=M, k=K):
 * layout "NN". Layout "TN" stores the weight as [N,K] row-major
 * (PyTorch's nn.Linear), cuBLASLt's A then taken with op T, to see whether
 * the weight's layout changes what is fast.
 *
 * Timing is meant to match a model's forward: each weight is read once per
 * call and is cold in L2 (the H200's L2 is 60 MB), the activations are
 * warm. So every problem gets enough copies of its weight and bias to
 * cover at least 128 MiB (and twice the L2), and consecutive calls rotate
 * through them: between two uses of one copy at least ~100 MB of other
 * weights pass through L2. 100 such calls are captured in a CUDA graph
 * (launch overhead, which is not what is being compared, stays out);
 * the figure is the median of 5 graph launches divided by the calls, in
 * microseconds. An algorithm whose capture fails is timed with direct
 * launches instead and marked "direct".
 *
 * Each algorithm's output (first weight copy) is compared with that of
 * the heuristic's first: an algorithm off by more than
 * 0.05 * max|D_ref| + 0.01 (or NaN) is marked BAD and is never "best".
 *
 *   build/bench/gemm_algos [calls]      (calls per graph, default 100)
 *
 *   GEMM_ONLY=bert_ffn2,vit_qkv   only these problems (names as printed)
 *   GEMM_HEUR=N                   ask the heuristic for N algorithms (default 64)
 *
 * Output: one line per algorithm, "<problem> <layout> <epilogue>  h#<i> ...",
 * h#i the heuristic's i-th result, h#0/skS its first with split-K S; then
 * a "SUMMARY <problem> <layout> <epilogue>:" line. Lines starting with '#'
 * are context. Config numbers are cuBLASLt's enum values (cublasLt.h), -1
 * where this cuBLASLt does not report that attribute.
 *
 * Without a GPU it prints "gemm_algos: no GPU" and exits 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#define WORKSPACE_BYTES ((size_t)32 << 20)
#define WEIGHT_POOL_MIN ((size_t)128 << 20)
#define TIMED_LAUNCHES 5
#define DEFAULT_CALLS 100
#define DEFAULT_HEUR 64
#define MAX_HEUR 1024
#define ALIGN_BYTES 256 /* every copy starts where cuBLASLt's default alignment assumption holds */

enum epilogue_kind { EPI_BIAS, EPI_GELU_BIAS, EPI_RESIDUAL };
static const char *const EPI_NAMES[] = {"bias", "gelu_bias", "residual"};

typedef struct problem {
    const char *name;
    int m, n, k;
    enum epilogue_kind epi;
} problem;

static const problem PROBLEMS[] = {
    {"bert_qkv", 1024, 2304, 768, EPI_BIAS},
    {"bert_out", 1024, 768, 768, EPI_BIAS},
    {"bert_ffn1", 1024, 3072, 768, EPI_BIAS},
    {"bert_ffn2", 1024, 768, 3072, EPI_BIAS},
    {"gpt2_out_res", 1024, 768, 768, EPI_RESIDUAL},
    {"gpt2_ffn1_gelu", 1024, 3072, 768, EPI_GELU_BIAS},
    {"gpt2_ffn2_res", 1024, 768, 3072, EPI_RESIDUAL},
    {"vit_qkv", 1576, 2304, 768, EPI_BIAS},
    {"vit_ffn1", 1576, 3072, 768, EPI_BIAS},
    {"vit_ffn2", 1576, 768, 3072, EPI_BIAS},
    {"vit_out", 1576, 768, 768, EPI_BIAS},
};

/* ---- errors: report, let the caller skip ------------------------------- */

static int cuda_ok(cudaError_t e, const char *call, const char *where)
{
    if (e == cudaSuccess) return 1;
    printf("%s: %s failed: %s (%d)\n", where, call, cudaGetErrorString(e), (int)e);
    (void)cudaGetLastError(); /* a non-sticky error must not fail the next call too */
    return 0;
}

static int lt_ok(cublasStatus_t s, const char *call, const char *where)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 1;
    printf("%s: %s failed: %s (%d)\n", where, call, cublasLtGetStatusString(s), (int)s);
    return 0;
}

/* After a failure: a sticky error (a faulting kernel) leaves the context
 * unusable, and every later measurement would fail too. */
static void exit_if_context_lost(void)
{
    (void)cudaGetLastError();
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("gemm_algos: the CUDA context is lost (%s): stopping\n", cudaGetErrorString(e));
        exit(1);
    }
}

/* ---- bf16 on the host --------------------------------------------------- */

static uint16_t float_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN stays a (quiet) NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);                  /* round to nearest, ties to even */
    return (uint16_t)(bits >> 16);
}

static float bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* uniform in [-1, 1); xorshift64*: deterministic, no libm, good enough for data */
static float uniform_pm1(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545f4914f6cdd1dull;
    return (float)(r >> 40) / (float)(1u << 23) - 1.0f;
}

/* n bf16 values uniform in [-scale, scale) written to device memory */
static int fill_random(void *dev, size_t n, float scale, const char *where)
{
    uint16_t *h = malloc(n * sizeof *h);
    if (!h) {
        printf("%s: out of host memory\n", where);
        return 0;
    }
    for (size_t i = 0; i < n; i++) h[i] = float_to_bf16(scale * uniform_pm1());
    int ok = cuda_ok(cudaMemcpy(dev, h, n * sizeof *h, cudaMemcpyHostToDevice), "cudaMemcpy", where);
    free(h);
    return ok;
}

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* ---- one problem in one layout: descriptors and buffers ---------------- */

typedef struct gemm_case {
    const problem *p;
    int weight_transposed; /* layout TN: W stored [N,K] row-major */
    char label[64];        /* "bert_ffn2 NN bias" */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    char *weights, *biases; /* nw copies each, weight_stride / bias_stride bytes apart */
    size_t weight_stride, bias_stride;
    int nw;
    void *x, *residual, *d, *workspace;
    float alpha, beta;
} gemm_case;

/* Descriptor and layouts for c->p in c's layout; bias pointer set to copy 0
 * (the heuristic reads its alignment). */
static int make_descriptors(gemm_case *c)
{
    const problem *p = c->p;
    const char *w = c->label;
    if (!lt_ok(cublasLtMatmulDescCreate(&c->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", w))
        return 0;
    int32_t op_a = c->weight_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = CUBLAS_OP_N;
    uint32_t epi = p->epi == EPI_GELU_BIAS ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    int32_t bias_type = CUDA_R_16BF;
    const void *bias0 = c->biases;
    if (!lt_ok(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
               "cublasLtMatmulDescSetAttribute(TRANSA)", w) ||
        !lt_ok(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b),
               "cublasLtMatmulDescSetAttribute(TRANSB)", w) ||
        !lt_ok(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
               "cublasLtMatmulDescSetAttribute(EPILOGUE)", w) ||
        !lt_ok(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                              sizeof bias_type),
               "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)", w) ||
        !lt_ok(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias0, sizeof bias0),
               "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", w))
        return 0;
    /* A: W as cuBLASLt stores it (before op): N x K ld N, or K x N ld K for op T */
    uint64_t a_rows = c->weight_transposed ? (uint64_t)p->k : (uint64_t)p->n;
    uint64_t a_cols = c->weight_transposed ? (uint64_t)p->n : (uint64_t)p->k;
    return lt_ok(cublasLtMatrixLayoutCreate(&c->la, CUDA_R_16BF, a_rows, a_cols, (int64_t)a_rows),
                 "cublasLtMatrixLayoutCreate(A)", w) &&
           lt_ok(cublasLtMatrixLayoutCreate(&c->lb, CUDA_R_16BF, (uint64_t)p->k, (uint64_t)p->m, p->k),
                 "cublasLtMatrixLayoutCreate(B)", w) &&
           lt_ok(cublasLtMatrixLayoutCreate(&c->ld, CUDA_R_16BF, (uint64_t)p->n, (uint64_t)p->m, p->n),
                 "cublasLtMatrixLayoutCreate(D)", w);
}

static void destroy_descriptors(gemm_case *c)
{
    if (c->la) cublasLtMatrixLayoutDestroy(c->la);
    if (c->lb) cublasLtMatrixLayoutDestroy(c->lb);
    if (c->ld) cublasLtMatrixLayoutDestroy(c->ld);
    if (c->desc) cublasLtMatmulDescDestroy(c->desc);
    c->la = c->lb = c->ld = NULL;
    c->desc = NULL;
}

/* One call with weight/bias copy `copy`. The bias pointer lives in the
 * descriptor, which cublasLtMatmul reads when it enqueues: setting it per
 * call is what rotates the biases, also inside a captured graph. */
static cublasStatus_t matmul(const gemm_case *c, const cublasLtMatmulAlgo_t *algo, int copy, cudaStream_t s)
{
    const void *bias = c->biases + (size_t)copy * c->bias_stride;
    cublasStatus_t st =
        cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    /* beta = 0: C is not read; passing D keeps the one layout for both */
    const void *cmat = c->p->epi == EPI_RESIDUAL ? c->residual : c->d;
    return cublasLtMatmul(c->lt, c->desc, &c->alpha, c->weights + (size_t)copy * c->weight_stride, c->la, c->x,
                          c->lb, &c->beta, cmat, c->ld, c->d, c->ld, algo, c->workspace, WORKSPACE_BYTES, s);
}

/* ---- describing an algorithm ------------------------------------------- */

/* One config attribute as a number, whatever its width; -1 if unreadable. */
static long long algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t attr)
{
    size_t need = 0, wrote = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, NULL, 0, &need) != CUBLAS_STATUS_SUCCESS) return -1;
    switch (need) {
    case 1: {
        uint8_t v = 0;
        return cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, sizeof v, &wrote) == CUBLAS_STATUS_SUCCESS ? v : -1;
    }
    case 2: {
        uint16_t v = 0;
        return cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, sizeof v, &wrote) == CUBLAS_STATUS_SUCCESS ? v : -1;
    }
    case 4: { /* ID and SPLITK_NUM are int32_t, the others uint32_t: all small and non-negative */
        int32_t v = 0;
        return cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, sizeof v, &wrote) == CUBLAS_STATUS_SUCCESS ? v : -1;
    }
    case 8: {
        int64_t v = 0;
        return cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, sizeof v, &wrote) == CUBLAS_STATUS_SUCCESS ? v : -1;
    }
    default: return -1;
    }
}

static void describe_algo(const cublasLtMatmulAlgo_t *a, char *buf, size_t size)
{
    snprintf(buf, size, "algo %lld tile %lld stages %lld splitk %lld red %lld swz %lld cust %lld inner %lld cluster %lld",
             algo_attr(a, CUBLASLT_ALGO_CONFIG_ID), algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), algo_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION), algo_attr(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

/* ---- timing ------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* `calls` consecutive calls, rotating weight copies, captured as a graph;
 * NULL (the failure printed) if capture or instantiation fails. */
static cudaGraphExec_t capture_calls(const gemm_case *c, const cublasLtMatmulAlgo_t *algo, int calls, cudaStream_t s,
                                     const char *where)
{
    if (!cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture", where))
        return NULL;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < calls && st == CUBLAS_STATUS_SUCCESS; i++) st = matmul(c, algo, i % c->nw, s);
    cudaGraph_t graph = NULL;
    cudaError_t end = cudaStreamEndCapture(s, &graph); /* always: the stream must leave capture mode */
    cudaGraphExec_t exec = NULL;
    int ok = lt_ok(st, "cublasLtMatmul (capturing)", where) && cuda_ok(end, "cudaStreamEndCapture", where) &&
             cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate", where);
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return ok ? exec : NULL;
}

/* Microseconds per call (median over TIMED_LAUNCHES of `calls` calls), < 0
 * on failure; *direct tells whether the graph had to be replaced by plain
 * launches. */
static float time_algo(const gemm_case *c, const cublasLtMatmulAlgo_t *algo, int calls, cudaStream_t s,
                       cudaEvent_t e0, cudaEvent_t e1, int *direct, const char *where)
{
    float per_call[TIMED_LAUNCHES];
    float ms = 0;
    cudaGraphExec_t exec = capture_calls(c, algo, calls, s, where);
    *direct = exec == NULL;
    if (exec) {
        int ok = cuda_ok(cudaGraphLaunch(exec, s), "cudaGraphLaunch (warm-up)", where) &&
                 cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize (warm-up)", where);
        for (int r = 0; r < TIMED_LAUNCHES && ok; r++) {
            ok = cuda_ok(cudaEventRecord(e0, s), "cudaEventRecord", where) &&
                 cuda_ok(cudaGraphLaunch(exec, s), "cudaGraphLaunch", where) &&
                 cuda_ok(cudaEventRecord(e1, s), "cudaEventRecord", where) &&
                 cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize", where) &&
                 cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime", where);
            per_call[r] = 1e3f * ms / (float)calls;
        }
        cudaGraphExecDestroy(exec);
        if (!ok) return -1;
        return median(per_call, TIMED_LAUNCHES);
    }
    int ok = 1;
    for (int i = 0; i < calls && ok; i++) ok = lt_ok(matmul(c, algo, i % c->nw, s), "cublasLtMatmul (warm-up)", where);
    ok = ok && cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize (warm-up)", where);
    for (int r = 0; r < TIMED_LAUNCHES && ok; r++) {
        ok = cuda_ok(cudaEventRecord(e0, s), "cudaEventRecord", where);
        for (int i = 0; i < calls && ok; i++) ok = lt_ok(matmul(c, algo, i % c->nw, s), "cublasLtMatmul", where);
        ok = ok && cuda_ok(cudaEventRecord(e1, s), "cudaEventRecord", where) &&
             cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize", where) &&
             cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime", where);
        per_call[r] = 1e3f * ms / (float)calls;
    }
    return ok ? median(per_call, TIMED_LAUNCHES) : -1;
}

/* One call with copy 0 into D, first poisoned with NaN (0xffff) so that an
 * algorithm that writes nothing cannot pass; D copied to host `out`. */
static int run_once(const gemm_case *c, const cublasLtMatmulAlgo_t *algo, cudaStream_t s, uint16_t *out,
                    const char *where)
{
    size_t bytes = (size_t)c->p->m * (size_t)c->p->n * sizeof(uint16_t);
    return cuda_ok(cudaMemsetAsync(c->d, 0xff, bytes, s), "cudaMemsetAsync", where) &&
           lt_ok(matmul(c, algo, 0, s), "cublasLtMatmul", where) &&
           cuda_ok(cudaMemcpyAsync(out, c->d, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync", where) &&
           cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize", where);
}

/* max |a - b|; NaN if either has a NaN where the other does not agree */
static float max_abs_diff(const uint16_t *a, const uint16_t *b, size_t n)
{
    float worst = 0;
    for (size_t i = 0; i < n; i++) {
        float d = bf16_to_float(a[i]) - bf16_to_float(b[i]);
        if (d != d) return d;
        if (d < 0) d = -d;
        if (d > worst) worst = d;
    }
    return worst;
}

static float max_abs(const uint16_t *a, size_t n)
{
    float worst = 0;
    for (size_t i = 0; i < n; i++) {
        float v = bf16_to_float(a[i]);
        if (v < 0) v = -v;
        if (v > worst) worst = v;
    }
    return worst;
}

/* ---- one problem in one layout ----------------------------------------- */

typedef struct candidate {
    cublasLtMatmulAlgo_t algo;
    float waves;
    char name[32]; /* "h#3", "h#0/sk2" */
} candidate;

static int heuristic_count(void)
{
    const char *e = getenv("GEMM_HEUR");
    int n = e ? atoi(e) : DEFAULT_HEUR;
    return n < 1 ? 1 : n > MAX_HEUR ? MAX_HEUR : n;
}

/* The heuristic's usable algorithms, then split-K 2, 3, 4 of its first
 * (a few-wave GEMM may fill the GPU only when K is split). */
static int gather_candidates(gemm_case *c, candidate *out, int max_out)
{
    const char *w = c->label;
    int nheur = heuristic_count();
    cublasLtMatmulHeuristicResult_t *res = calloc((size_t)nheur, sizeof *res);
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = WORKSPACE_BYTES;
    int got = 0, n = 0;
    if (!res) {
        printf("%s: out of host memory\n", w);
        return 0;
    }
    if (lt_ok(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", w) &&
        lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
              "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", w) &&
        lt_ok(cublasLtMatmulAlgoGetHeuristic(c->lt, c->desc, c->la, c->lb, c->ld, c->ld, pref, nheur, res, &got),
              "cublasLtMatmulAlgoGetHeuristic", w)) {
        for (int i = 0; i < got && n < max_out; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > WORKSPACE_BYTES) continue;
            out[n].algo = res[i].algo;
            out[n].waves = res[i].wavesCount;
            snprintf(out[n].name, sizeof out[n].name, "h#%d", i);
            n++;
        }
    }
    printf("# %s: the heuristic returned %d, %d usable\n", w, got, n);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    int first = 0;
    while (first < got && (res[first].state != CUBLAS_STATUS_SUCCESS || res[first].workspaceSize > WORKSPACE_BYTES))
        first++;
    for (int32_t split = 2; first < got && split <= 4 && n < max_out; split++) {
        candidate *k = &out[n];
        k->algo = res[first].algo;
        snprintf(k->name, sizeof k->name, "h#%d/sk%d", first, (int)split);
        cublasLtMatmulHeuristicResult_t chk;
        memset(&chk, 0, sizeof chk);
        cublasStatus_t st =
            cublasLtMatmulAlgoConfigSetAttribute(&k->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split);
        if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulAlgoCheck(c->lt, c->desc, c->la, c->lb, c->ld, c->ld, &k->algo, &chk);
        if (st != CUBLAS_STATUS_SUCCESS) {
            printf("%s  %s  skipped: split-K refused: %s\n", w, k->name, cublasLtGetStatusString(st));
            continue;
        }
        if (chk.workspaceSize > WORKSPACE_BYTES) {
            printf("%s  %s  skipped: needs %zu bytes of workspace\n", w, k->name, chk.workspaceSize);
            continue;
        }
        k->waves = chk.wavesCount;
        n++;
    }
    free(res);
    return n;
}

/* Time candidates cand[0..n) of c, print a line each and the summary. */
static void measure_case(const gemm_case *c, const candidate *cand, int n, uint16_t *ref, uint16_t *out, int calls,
                         cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1)
{
    const problem *p = c->p;
    const char *w = c->label;
    size_t nd = (size_t)p->m * (size_t)p->n;
    /* the reference and the baseline: the heuristic's first, or if that one
     * fails, the first algorithm that runs */
    int base = -1, best = -1, timed = 0, bad = 0;
    float base_us = -1, best_us = -1, tol = 0;
    for (int i = 0; i < n; i++) {
        char where[160], config[200]; /* a label (64 at most) and a name (32) */
        snprintf(where, sizeof where, "%s  %s", w, cand[i].name);
        describe_algo(&cand[i].algo, config, sizeof config);
        uint16_t *dst = base < 0 ? ref : out;
        if (!run_once(c, &cand[i].algo, s, dst, where)) {
            exit_if_context_lost();
            continue;
        }
        float diff = 0;
        if (base < 0) {
            float ref_max = max_abs(ref, nd);
            tol = 0.05f * ref_max + 1e-2f;
            if (ref_max != ref_max) {
                printf("%s: the reference output has NaN: no correctness check\n", where);
                tol = -1;
            }
        } else {
            diff = tol >= 0 ? max_abs_diff(ref, out, nd) : 0;
        }
        int is_bad = diff != diff || diff > tol;
        int direct = 0;
        float us = time_algo(c, &cand[i].algo, calls, s, e0, e1, &direct, where);
        if (us < 0) {
            exit_if_context_lost();
            continue;
        }
        timed++;
        bad += is_bad;
        if (base < 0) {
            base = i;
            base_us = us;
            if (i > 0) printf("%s: %s failed: %s is the baseline and reference\n", w, cand[0].name, cand[i].name);
        }
        if (!is_bad && (best < 0 || us < best_us)) best = i, best_us = us;
        printf("%s  %-8s %s waves %.2f  %8.2f us  (%.2f of %s)  maxdiff %.4f%s%s\n", w, cand[i].name, config,
               (double)cand[i].waves, (double)us, (double)(us / base_us), cand[base].name, (double)diff,
               is_bad ? "  BAD" : "", direct ? "  direct" : "");
        fflush(stdout);
    }
    if (base < 0) {
        printf("SUMMARY %s: no algorithm ran\n", w);
        return;
    }
    double flop = 2.0 * p->m * (double)p->n * (double)p->k;
    if (best < 0) {
        printf("SUMMARY %s: %s %.2f us, no good algorithm (%d timed, %d bad)\n", w, cand[base].name, (double)base_us,
               timed, bad);
    } else {
        printf("SUMMARY %s: %s %.2f us, best %.2f us (%s), gain %.1f%%, GFLOP/s %.0f -> %.0f, %d timed, %d bad\n",
               w, cand[base].name, (double)base_us, (double)best_us, cand[best].name,
               100.0 * (double)(base_us - best_us) / (double)base_us, flop / base_us * 1e-3, flop / best_us * 1e-3,
               timed, bad);
    }
}

static void run_case(gemm_case *c, int calls, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1)
{
    size_t nd = (size_t)c->p->m * (size_t)c->p->n;
    int max_cand = heuristic_count() + 3;
    candidate *cand = calloc((size_t)max_cand, sizeof *cand);
    uint16_t *ref = malloc(nd * sizeof *ref), *out = malloc(nd * sizeof *out);
    if (!cand || !ref || !out) {
        printf("%s: out of host memory\n", c->label);
    } else if (make_descriptors(c)) {
        int n = gather_candidates(c, cand, max_cand);
        if (n == 0) printf("SUMMARY %s: no usable algorithm\n", c->label);
        else measure_case(c, cand, n, ref, out, calls, s, e0, e1);
    }
    fflush(stdout);
    destroy_descriptors(c);
    free(cand);
    free(ref);
    free(out);
}

/* ---- one problem: buffers shared by both layouts ------------------------ */

static int selected(const char *name)
{
    const char *only = getenv("GEMM_ONLY");
    if (!only || !*only) return 1;
    size_t len = strlen(name);
    for (const char *s = only; *s;) {
        const char *end = strchr(s, ',');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if (n == len && strncmp(s, name, n) == 0) return 1;
        if (!end) break;
        s = end + 1;
    }
    return 0;
}

static void run_problem(const problem *p, cublasLtHandle_t lt, size_t pool_bytes, int calls, cudaStream_t s,
                        cudaEvent_t e0, cudaEvent_t e1)
{
    const char *w = p->name;
    size_t es = sizeof(uint16_t);
    size_t wbytes = (size_t)p->n * (size_t)p->k * es, bbytes = (size_t)p->n * es;
    size_t xbytes = (size_t)p->m * (size_t)p->k * es, dbytes = (size_t)p->m * (size_t)p->n * es;
    gemm_case c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.lt = lt;
    c.alpha = 1.0f;
    c.beta = p->epi == EPI_RESIDUAL ? 1.0f : 0.0f;
    c.weight_stride = round_up(wbytes, ALIGN_BYTES);
    c.bias_stride = round_up(bbytes, ALIGN_BYTES);
    c.nw = (int)((pool_bytes + c.weight_stride - 1) / c.weight_stride);
    if (c.nw < 2) c.nw = 2;
    int ok = cuda_ok(cudaMalloc((void **)&c.weights, (size_t)c.nw * c.weight_stride), "cudaMalloc(weights)", w) &&
             cuda_ok(cudaMalloc((void **)&c.biases, (size_t)c.nw * c.bias_stride), "cudaMalloc(biases)", w) &&
             cuda_ok(cudaMalloc(&c.x, xbytes), "cudaMalloc(x)", w) &&
             cuda_ok(cudaMalloc(&c.d, dbytes), "cudaMalloc(d)", w) &&
             cuda_ok(cudaMalloc(&c.workspace, WORKSPACE_BYTES), "cudaMalloc(workspace)", w) &&
             (p->epi != EPI_RESIDUAL || cuda_ok(cudaMalloc(&c.residual, dbytes), "cudaMalloc(residual)", w));
    /* Weights ~ U(-1/32, 1/32), about 1/sqrt(K) here, so that D stays O(1)
     * as in a trained layer (GELU then sees its curved part). One random
     * copy duplicated: the values do not matter to L2, only the addresses. */
    ok = ok && fill_random(c.weights, wbytes / es, 1.0f / 32, w) && fill_random(c.biases, bbytes / es, 1.0f, w) &&
         fill_random(c.x, xbytes / es, 1.0f, w) && (!c.residual || fill_random(c.residual, dbytes / es, 1.0f, w));
    for (int i = 1; i < c.nw && ok; i++)
        ok = cuda_ok(cudaMemcpy(c.weights + (size_t)i * c.weight_stride, c.weights, wbytes, cudaMemcpyDeviceToDevice),
                     "cudaMemcpy(weight copy)", w) &&
             cuda_ok(cudaMemcpy(c.biases + (size_t)i * c.bias_stride, c.biases, bbytes, cudaMemcpyDeviceToDevice),
                     "cudaMemcpy(bias copy)", w);
    if (ok) {
        printf("# %s: M %d N %d K %d %s, %d weight copies of %.2f MB (%.0f MB)\n", w, p->m, p->n, p->k,
               EPI_NAMES[p->epi], c.nw, (double)wbytes / 1e6, (double)c.nw * (double)c.weight_stride / 1e6);
        for (int t = 0; t < 2; t++) {
            c.weight_transposed = t;
            snprintf(c.label, sizeof c.label, "%s %s %s", p->name, t ? "TN" : "NN", EPI_NAMES[p->epi]);
            run_case(&c, calls, s, e0, e1);
        }
    } else {
        exit_if_context_lost();
    }
    cudaFree(c.weights);
    cudaFree(c.biases);
    cudaFree(c.x);
    cudaFree(c.d);
    cudaFree(c.residual);
    cudaFree(c.workspace);
}

int main(int argc, char **argv)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("gemm_algos: no GPU\n");
        return 0;
    }
    int calls = argc > 1 ? atoi(argv[1]) : DEFAULT_CALLS;
    if (calls < 1) calls = DEFAULT_CALLS;
    struct cudaDeviceProp prop;
    int dev = 0, runtime = 0;
    if (!cuda_ok(cudaGetDevice(&dev), "cudaGetDevice", "gemm_algos") ||
        !cuda_ok(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties", "gemm_algos"))
        return 1;
    cudaRuntimeGetVersion(&runtime);
    /* at least 128 MiB and twice the L2: each copy is evicted before it comes round again */
    size_t pool = WEIGHT_POOL_MIN;
    if (prop.l2CacheSize > 0 && 2 * (size_t)prop.l2CacheSize > pool) pool = 2 * (size_t)prop.l2CacheSize;

    cublasLtHandle_t lt = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (!lt_ok(cublasLtCreate(&lt), "cublasLtCreate", "gemm_algos") ||
        !cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", "gemm_algos") ||
        !cuda_ok(cudaEventCreate(&e0), "cudaEventCreate", "gemm_algos") ||
        !cuda_ok(cudaEventCreate(&e1), "cudaEventCreate", "gemm_algos"))
        return 1;
    printf("# %s, sm_%d%d, %d SMs, L2 %.0f MB; CUDA runtime %d, cuBLASLt %zu\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, (double)prop.l2CacheSize / 1e6, runtime, cublasLtGetVersion());
    printf("# bf16, f32 compute; us per call: median of %d graph launches of %d calls, weights rotated over >= %.0f "
           "MB; heuristic asked for %d\n",
           TIMED_LAUNCHES, calls, (double)pool / 1e6, heuristic_count());
    fflush(stdout);
    int ran = 0;
    for (size_t i = 0; i < sizeof PROBLEMS / sizeof PROBLEMS[0]; i++)
        if (selected(PROBLEMS[i].name)) {
            run_problem(&PROBLEMS[i], lt, pool, calls, s, e0, e1);
            ran++;
        }
    if (!ran) printf("gemm_algos: GEMM_ONLY=%s names no problem of the table\n", getenv("GEMM_ONLY"));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(s);
    cublasLtDestroy(lt);
    return 0;
}
