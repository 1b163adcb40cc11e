/* kn_cuda_dnn_attention: bf16/f16 scaled-dot-product attention through
 * cuDNN's fused flash-attention engines, built with the graph (backend)
 * API as cudnn-frontend's CompositeSDPANode builds it for inference:
 *
 *   S = Q.Kᵀ (FLOAT) -> * scale -> [+ bias] -> [causal: keep row >= col,
 *   else -inf] -> softmax (max, sub, exp, sum, div; with the Stats value
 *   max + log(sum) the engines' pattern needs even when nothing reads it)
 *   -> P in the I/O type -> P.V = O
 *
 * On the H200 (cuDNN 9.14) it runs BERT's 8x12x128x64 with its padding
 * mask in 7.5 us inside the model's CUDA graph, against kiln's kernel's
 * 10.2, ViT's 197 tokens in 12.3 against 15.3; launched back to back
 * (bench/results/2026-11-29-h200-attention-variants-cudnn.txt, where its
 * host work shows at short sequences) 16x8x256x64 takes 11.7 us against
 * 21.9 and 4x8x1024x64 23.4 against 62. kn_cuda_attention_op makes it the
 * default where it takes the call and keeps kiln's kernel for the rest
 * (f32, bool masks, odd layouts, a cuDNN without the engines) and as
 * max-autotune's other candidates.
 *
 * A query row whose every key is masked with -inf gives 0 here (cuDNN's
 * answer, and PyTorch's SDPA's), where kiln's kernel gives NaN unless the
 * op says zero_nan. Masks written with the dtype's lowest value (what
 * Hugging Face's models and PyTorch's exporter write) never do that.
 *
 * Plans are kept per signature for the life of the process, each with its
 * workspace, which never moves (CUDA graph recordings stay valid); a
 * refusal is remembered too. Every engine compiles at plan time (0.4-2 s
 * for a process's first plan): the chosen plan is kept in the cache
 * directory across processes, as conv plans are (kn_cuda_dnn.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cuda_dnn_attention.h"

#include "kn_cuda_alloc.h"
#include "kn_cuda_context.h"
#include "kn_cuda_dnn.h"
#include "kn_cuda_libplans.h"
#include "kn_cuda_linalg.h"
#include "kn_hash.h"
#include "kn_phase.h"

#ifdef KILN_HAVE_CUDNN
#include <cudnn_graph.h>

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_BIAS, UID_SCALE, UID_NEG_INF, UID_VIRTUAL = 100 };
enum { MAX_DESC = 96, MAX_OPS = 24 };
#define SDPA_MAX_WORKSPACE ((int64_t)256 << 20)

typedef struct sdpa_key {
    int32_t dt, causal, bias_dt, has_bias;
    int64_t b, h, tq, tk, d;
    int64_t qs[3], ks[3], vs[3], os[3]; /* batch, head, row */
    int64_t bias_dims[4], bias_strides[4];
} sdpa_key;

typedef struct sdpa_plan {
    bool refused;
    bool from_cache; /* loaded from the cache directory, chosen by an earlier process */
    char why[160];   /* a refusal's reason */
    char label[64]; /* "cudnn sdpa eng 2" */
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t keep[MAX_DESC];
    int nkeep;
    unsigned uses; /* bit u: tensor UID u is in the graph */
    int64_t ws_size; /* the workspace its engine needs (kn_cuda_dnn_execute's shared one) */
    /* by-value scalars live here, at addresses the variant pack keeps */
    float scale, neg_inf;
    kn_cuda_dnn_pack pack; /* the last execution's variant pack */
} sdpa_plan;

struct kn_cuda_sdpa_plans {
    kn_cuda_libplans *plans;
};

/* Descriptors are recorded in the plan as they are made, so one cleanup
 * frees them whichever step fails; the first failure is kept and turns
 * every later step into a no-op. */
typedef struct builder {
    sdpa_plan *p;
    cudnnBackendDescriptor_t ops[MAX_OPS];
    int nops;
    int64_t next_uid;
    cudnnStatus_t st;
    const char *where;
} builder;

static bool ok(builder *g, cudnnStatus_t s, const char *where)
{
    if (s == CUDNN_STATUS_SUCCESS) return true;
    if (g->st == CUDNN_STATUS_SUCCESS) {
        g->st = s;
        g->where = where;
    }
    return false;
}

static cudnnBackendDescriptor_t make(builder *g, cudnnBackendDescriptorType_t type, const char *where)
{
    cudnnBackendDescriptor_t d = NULL;
    if (g->st != CUDNN_STATUS_SUCCESS) return NULL;
    if (g->p->nkeep == MAX_DESC) {
        ok(g, CUDNN_STATUS_BAD_PARAM, "too many descriptors");
        return NULL;
    }
    if (!ok(g, cudnnBackendCreateDescriptor(type, &d), where)) return NULL;
    g->p->keep[g->p->nkeep++] = d;
    return d;
}

static void set(builder *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void *value, const char *where)
{
    if (g->st == CUDNN_STATUS_SUCCESS) ok(g, cudnnBackendSetAttribute(d, name, type, count, value), where);
}

static void finalize(builder *g, cudnnBackendDescriptor_t d, const char *where)
{
    if (g->st == CUDNN_STATUS_SUCCESS) ok(g, cudnnBackendFinalize(d), where);
}

static void add_op(builder *g, cudnnBackendDescriptor_t op)
{
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    if (g->nops == MAX_OPS) {
        ok(g, CUDNN_STATUS_BAD_PARAM, "too many operations");
        return;
    }
    g->ops[g->nops++] = op;
}

enum { T_VIRTUAL = 1, T_BY_VALUE = 2 };

/* A rank-4 tensor; uid 0 gives a virtual tensor a fresh uid. Alignment 16
 * on every tensor, as the frontend declares it. */
static cudnnBackendDescriptor_t tensor(builder *g, int64_t uid, cudnnDataType_t dt, const int64_t *dims,
                                       const int64_t *strides, int flags, const char *name)
{
    bool virt = flags & T_VIRTUAL, byval = flags & T_BY_VALUE;
    int64_t align = 16;
    if (uid == 0) uid = g->next_uid++;
    else g->p->uses |= 1u << uid;
    cudnnBackendDescriptor_t d = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, name);
    set(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, name);
    set(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, name);
    set(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, name);
    set(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, name);
    set(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, name);
    if (virt) set(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, name);
    if (byval) set(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval, name);
    finalize(g, d, name);
    return d;
}

/* y = mode(x [, b [, t]]) computed in prec; both alphas 1 and GEN_INDEX's
 * axis set, as the frontend's PointwiseNode sets them. */
static void pointwise(builder *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                      cudnnBackendDescriptor_t y, const char *name)
{
    float one = 1.0f;
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, name);
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, name);
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, name);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, name);
    finalize(g, pw, name);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, name);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, name);
    if (b) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, name);
    if (t) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, name);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, name);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, name);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, name);
    finalize(g, op, name);
    add_op(g, op);
}

/* c = a.b batched over the first two dims, FLOAT compute */
static void matmul(builder *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c,
                   const char *name)
{
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, name);
    set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, name);
    finalize(g, mm, name);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, name);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, name);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, name);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, name);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, name);
    finalize(g, op, name);
    add_op(g, op);
}

/* y = reduce(x) over the dims where y is 1, FLOAT compute */
static void reduce(builder *g, size_t version, cudnnReduceTensorOp_t rop, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t y, const char *name)
{
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, name);
    set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, name);
    set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &rop, name);
#if CUDNN_VERSION >= 91100
    /* the frontend's default from 9.11 on; the engines match it */
    bool det = false;
    if (version >= 91100) set(g, rd, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det, name);
#else
    (void)version;
#endif
    finalize(g, rd, name);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, name);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, name);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, name);
    finalize(g, op, name);
    add_op(g, op);
}

static cudnnDataType_t io_type(kn_dtype dt)
{
    return dt == KN_BF16 ? CUDNN_DATA_BFLOAT16 : dt == KN_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* The operation graph of key k, op by op (see the top of the file). */
static cudnnBackendDescriptor_t build_graph(builder *g, const sdpa_key *k, void *handle, size_t version)
{
    int64_t B = k->b, H = k->h, TQ = k->tq, TK = k->tk, D = k->d;
    cudnnDataType_t io = io_type((kn_dtype)k->dt), fl = CUDNN_DATA_FLOAT;
    int64_t qd[4] = {B, H, TQ, D}, ktd[4] = {B, H, D, TK}, vd[4] = {B, H, TK, D};
    int64_t qs[4] = {k->qs[0], k->qs[1], k->qs[2], 1}, kts[4] = {k->ks[0], k->ks[1], 1, k->ks[2]};
    int64_t vs[4] = {k->vs[0], k->vs[1], k->vs[2], 1}, os[4] = {k->os[0], k->os[1], k->os[2], 1};
    int64_t sd[4] = {B, H, TQ, TK}, ss[4] = {H * TQ * TK, TQ * TK, TK, 1};
    int64_t rd[4] = {B, H, TQ, 1}, rs[4] = {H * TQ, TQ, 1, 1};
    int64_t one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t tq = tensor(g, UID_Q, io, qd, qs, 0, "Q");
    cudnnBackendDescriptor_t tk = tensor(g, UID_K, io, ktd, kts, 0, "K^T"); /* K with its last two dims swapped */
    cudnnBackendDescriptor_t tv = tensor(g, UID_V, io, vd, vs, 0, "V");
    cudnnBackendDescriptor_t to = tensor(g, UID_O, io, qd, os, 0, "O");
    cudnnBackendDescriptor_t s = tensor(g, 0, fl, sd, ss, T_VIRTUAL, "S");
    matmul(g, tq, tk, s, "Q.K^T");
    cudnnBackendDescriptor_t tscale = tensor(g, UID_SCALE, fl, one, one, T_BY_VALUE, "scale");
    cudnnBackendDescriptor_t last = tensor(g, 0, fl, sd, ss, T_VIRTUAL, "S*scale");
    pointwise(g, CUDNN_POINTWISE_MUL, fl, -1, s, tscale, NULL, last, "mul scale");
    if (k->has_bias) {
        cudnnBackendDescriptor_t tb =
            tensor(g, UID_BIAS, io_type((kn_dtype)k->bias_dt), k->bias_dims, k->bias_strides, 0, "bias");
        cudnnBackendDescriptor_t sb = tensor(g, 0, fl, sd, ss, T_VIRTUAL, "S+bias");
        pointwise(g, CUDNN_POINTWISE_ADD, fl, -1, last, tb, NULL, sb, "add bias");
        last = sb;
    }
    if (k->causal) { /* PyTorch's top-left is_causal: keep key j for query i iff j <= i */
        cudnnBackendDescriptor_t ninf = tensor(g, UID_NEG_INF, fl, one, one, T_BY_VALUE, "-inf");
        cudnnBackendDescriptor_t row = tensor(g, 0, CUDNN_DATA_INT32, sd, ss, T_VIRTUAL, "row index");
        cudnnBackendDescriptor_t col = tensor(g, 0, CUDNN_DATA_INT32, sd, ss, T_VIRTUAL, "col index");
        cudnnBackendDescriptor_t keep = tensor(g, 0, CUDNN_DATA_BOOLEAN, sd, ss, T_VIRTUAL, "keep");
        pointwise(g, CUDNN_POINTWISE_GEN_INDEX, fl, 2, last, NULL, NULL, row, "row index");
        pointwise(g, CUDNN_POINTWISE_GEN_INDEX, fl, 3, last, NULL, NULL, col, "col index");
        pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep, "row >= col");
        cudnnBackendDescriptor_t sm = tensor(g, 0, fl, sd, ss, T_VIRTUAL, "S masked");
        pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, fl, -1, last, ninf, keep, sm, "select -inf");
        last = sm;
    }
    cudnnBackendDescriptor_t mx = tensor(g, 0, fl, rd, rs, T_VIRTUAL, "max");
    reduce(g, version, CUDNN_REDUCE_TENSOR_MAX, last, mx, "max");
    cudnnBackendDescriptor_t sub = tensor(g, 0, fl, sd, ss, T_VIRTUAL, "S-max");
    pointwise(g, CUDNN_POINTWISE_SUB, fl, -1, last, mx, NULL, sub, "sub max");
    cudnnBackendDescriptor_t ex = tensor(g, 0, fl, sd, ss, T_VIRTUAL, "exp");
    pointwise(g, CUDNN_POINTWISE_EXP, fl, -1, sub, NULL, NULL, ex, "exp");
    cudnnBackendDescriptor_t sum = tensor(g, 0, fl, rd, rs, T_VIRTUAL, "sum");
    reduce(g, version, CUDNN_REDUCE_TENSOR_ADD, ex, sum, "sum");
    /* Stats = max + log(sum): unused, but on 9.19 no engine took a graph
     * without it (the frontend always adds it) */
    cudnnBackendDescriptor_t lg = tensor(g, 0, fl, rd, rs, T_VIRTUAL, "log sum");
    pointwise(g, CUDNN_POINTWISE_LOG, fl, -1, sum, NULL, NULL, lg, "log");
    cudnnBackendDescriptor_t stats = tensor(g, 0, fl, rd, rs, T_VIRTUAL, "stats");
    pointwise(g, CUDNN_POINTWISE_ADD, fl, -1, mx, lg, NULL, stats, "stats");
    /* P in the I/O type before the second matmul: the backend requires it */
    cudnnBackendDescriptor_t pp = tensor(g, 0, io, sd, ss, T_VIRTUAL, "P");
    pointwise(g, CUDNN_POINTWISE_DIV, fl, -1, ex, sum, NULL, pp, "div");
    matmul(g, pp, tv, to, "P.V");
    cudnnBackendDescriptor_t graph = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops, "operation graph");
    /* deprecated since 9.8 (hence the number); kn_cuda_dnn.c found 9.14
     * sees no GPU without it */
    set(g, graph, (cudnnBackendAttributeName_t)800, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph");
    finalize(g, graph, "operation graph");
    return graph;
}

/* The first engine that takes the graph (kn_cuda_dnn_first_plan). Every
 * SDPA engine compiles at plan time (0.4-2 s for a process's first, tens
 * of ms after). */
static cudnnStatus_t pick_plan(sdpa_plan *p, cudnnBackendDescriptor_t graph)
{
    void *plan = NULL, *cfg = NULL;
    char engine[48];
    cudnnStatus_t s = (cudnnStatus_t)kn_cuda_dnn_first_plan(graph, SDPA_MAX_WORKSPACE, &plan, &cfg, &p->ws_size,
                                                            engine, sizeof engine);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    if (p->nkeep == MAX_DESC) {
        cudnnBackendDestroyDescriptor(plan);
        cudnnBackendDestroyDescriptor(cfg);
        return CUDNN_STATUS_BAD_PARAM;
    }
    p->plan = plan;
    p->keep[p->nkeep++] = cfg;
    /* "cudnn eng 2" -> "cudnn sdpa eng 2": :time's kind and max-autotune's label */
    snprintf(p->label, sizeof p->label, "cudnn sdpa%s", engine + strlen("cudnn"));
    return CUDNN_STATUS_SUCCESS;
}

static void plan_release(sdpa_plan *p)
{
    kn_cuda_dnn_pack_release(&p->pack);
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->nkeep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->keep[i]);
    p->plan = NULL;
    p->nkeep = 0;
}

static void plan_destroy(void *plan)
{
    sdpa_plan *p = plan;
    plan_release(p);
    free(p);
}

/* The key of problem a, or false (why set) when cuDNN's engines do not
 * cover it: they take bf16/f16 with equal head dims, a multiple of 8 up to
 * 256, 16-byte aligned operands and rows, and an additive mask (a bool
 * mask has no engine pattern). */
static bool make_key(const kn_attention_problem *a, sdpa_key *k, const char **why)
{
    memset(k, 0, sizeof *k);
    if (a->dtype != KN_BF16 && a->dtype != KN_F16) return *why = "cuDNN's engines take bf16 and f16 only", false;
    if (a->d != a->dv || a->d % 8 != 0 || a->d > 256) return *why = "head dims not equal multiples of 8 up to 256", false;
    if (a->mask && a->mask_dtype == KN_BOOL) return *why = "a bool mask (no engine pattern for it)", false;
    if (a->mask && a->mask_dtype != a->dtype && a->mask_dtype != KN_F32)
        return *why = "a mask of another dtype", false;
    const void *ptrs[5] = {a->q, a->k, a->v, a->o, a->mask};
    for (int i = 0; i < 5; i++)
        if ((uintptr_t)ptrs[i] % 16) return *why = "an operand not 16-byte aligned", false;
    const int64_t *st[4] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            if (st[i][j] % 8) return *why = "a row or head stride not a multiple of 16 bytes", false;
    k->dt = (int32_t)a->dtype;
    k->causal = a->causal != 0;
    k->b = a->batch, k->h = a->heads, k->tq = a->tq, k->tk = a->tk, k->d = a->d;
    memcpy(k->qs, a->q_stride, sizeof k->qs);
    memcpy(k->ks, a->k_stride, sizeof k->ks);
    memcpy(k->vs, a->v_stride, sizeof k->vs);
    memcpy(k->os, a->o_stride, sizeof k->os);
    if (a->mask) {
        /* a broadcast dim (stride 0) is a dim of size 1, as the frontend's bias */
        int64_t full[4] = {a->batch, a->heads, a->tq, a->tk};
        if (a->mask_stride[3] != 1 && a->tk > 1) return *why = "a mask whose keys are not contiguous", false;
        k->has_bias = 1;
        k->bias_dt = (int32_t)a->mask_dtype;
        for (int i = 0; i < 4; i++) {
            k->bias_dims[i] = a->mask_stride[i] == 0 && i < 3 ? 1 : full[i];
            k->bias_strides[i] = i == 3 ? 1 : a->mask_stride[i] ? a->mask_stride[i] : 1;
        }
        if (k->bias_dims[2] == 1) k->bias_strides[2] = 1; /* a size-1 dim's stride is free; 1 keeps it tidy */
    }
    return true;
}

static sdpa_plan *build_plan(const sdpa_key *k, void *handle, size_t version)
{
    sdpa_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    builder g;
    memset(&g, 0, sizeof g);
    g.p = p;
    g.next_uid = UID_VIRTUAL;
    kn_phase_begin(KN_PHASE_LIBRARY_PLANS);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    void *cached = NULL;
    if (kn_cuda_dnn_plan_load("attention", k, sizeof *k, SDPA_MAX_WORKSPACE, &cached, &p->ws_size, p->label,
                              sizeof p->label)) {
        p->plan = cached;
        p->from_cache = true;
        /* which tensors the graph has, for the variant pack: */
        p->uses = 1u << UID_Q | 1u << UID_K | 1u << UID_V | 1u << UID_O | 1u << UID_SCALE |
                  (k->has_bias ? 1u << UID_BIAS : 0) | (k->causal ? 1u << UID_NEG_INF : 0);
    } else {
        cudnnBackendDescriptor_t graph = build_graph(&g, k, handle, version);
        s = g.st;
        if (s == CUDNN_STATUS_SUCCESS) s = pick_plan(p, graph);
        if (s == CUDNN_STATUS_SUCCESS) kn_cuda_dnn_plan_save("attention", k, sizeof *k, p->plan, p->label);
    }
    kn_phase_end(KN_PHASE_LIBRARY_PLANS);
    if (s != CUDNN_STATUS_SUCCESS) {
        char last[96] = "";
        cudnnGetLastErrorString(last, sizeof last);
        snprintf(p->why, sizeof p->why, "cuDNN %s: %s%s%s", g.where ? g.where : "plan", cudnnGetErrorString(s),
                 last[0] ? ": " : "", last);
        plan_release(p);
        p->refused = true;
    }
    /* the graph's descriptors stay in p->keep for the plan's life */
    return p;
}

static kn_status execute(sdpa_plan *p, const kn_attention_problem *a)
{
    int64_t uids[KN_CUDA_DNN_PACK_MAX];
    void *ptrs[KN_CUDA_DNN_PACK_MAX];
    int n = 0;
    p->scale = (float)a->scale;
    p->neg_inf = -__builtin_inff();
    void *by_uid[UID_NEG_INF + 1] = {NULL};
    by_uid[UID_Q] = (void *)a->q, by_uid[UID_K] = (void *)a->k, by_uid[UID_V] = (void *)a->v, by_uid[UID_O] = a->o;
    by_uid[UID_BIAS] = (void *)a->mask, by_uid[UID_SCALE] = &p->scale, by_uid[UID_NEG_INF] = &p->neg_inf;
    for (int u = UID_Q; u <= UID_NEG_INF; u++)
        if (p->uses & (1u << u)) uids[n] = u, ptrs[n++] = by_uid[u];
    cudnnStatus_t s = (cudnnStatus_t)kn_cuda_dnn_execute(p->plan, p->ws_size, uids, ptrs, n, &p->pack);
    if (s == CUDNN_STATUS_SUCCESS) return KN_OK;
    char last[256] = "";
    cudnnGetLastErrorString(last, sizeof last);
    return kn_error(KN_ERR_DEVICE, "scaled_dot_product_attention: cuDNN execute failed: %s%s%s",
                    cudnnGetErrorString(s), last[0] ? ": " : "", last);
}

/* The plan for a's signature (built, or refused, at its first call). */
static kn_status find_plan(const kn_attention_problem *a, sdpa_plan **out)
{
    const char *why = NULL;
    sdpa_key k;
    if (!make_key(a, &k, &why)) return kn_error(KN_ERR_UNSUPPORTED, "attention through cuDNN: %s", why);
    size_t version = 0;
    void *handle = kn_cuda_dnn_handle(&version);
    if (!handle) return kn_error(KN_ERR_UNSUPPORTED, "attention through cuDNN: cuDNN is not available");
    kn_cuda_dev *gpu = kn_cuda_current();
    if (!gpu->dnn_sdpa) {
        struct kn_cuda_sdpa_plans *c = calloc(1, sizeof *c);
        if (!c || !(c->plans = kn_cuda_libplans_new(sizeof(sdpa_key), plan_destroy))) {
            free(c);
            return kn_error(KN_ERR_OOM, "attention through cuDNN: out of host memory");
        }
        gpu->dnn_sdpa = c;
    }
    kn_cuda_libplans *plans = gpu->dnn_sdpa->plans;
    uint64_t hash = kn_hash_bytes(KN_HASH_SEED, &k, sizeof k);
    sdpa_plan *p = kn_cuda_libplans_find(plans, &k, hash);
    if (!p) {
        p = build_plan(&k, handle, version);
        if (!p) return kn_error(KN_ERR_OOM, "attention through cuDNN: out of host memory");
        if (kn_cuda_lib_log_on())
            fprintf(stderr, "kiln: cuDNN attention %lldx%lldx%lldx%lldx%lld %s%s%s: %s%s\n", (long long)k.b,
                    (long long)k.h, (long long)k.tq, (long long)k.tk, (long long)k.d, kn_dtype_name((kn_dtype)k.dt),
                    k.causal ? " causal" : "", k.has_bias ? " bias" : "", p->refused ? p->why : p->label,
                    p->from_cache ? " (the plan an earlier process chose, from the cache directory)" : "");
        if (kn_cuda_libplans_insert(plans, &k, hash, p) != KN_OK) {
            plan_destroy(p);
            return kn_error(KN_ERR_OOM, "attention through cuDNN: out of host memory");
        }
    }
    if (p->refused) return kn_error(KN_ERR_UNSUPPORTED, "attention through cuDNN: %s", p->why);
    *out = p;
    return KN_OK;
}

bool kn_cuda_dnn_attention_covers(const kn_attention_problem *a)
{
    const char *why;
    sdpa_key k;
    return make_key(a, &k, &why);
}

kn_status kn_cuda_dnn_attention(const kn_attention_problem *a)
{
    sdpa_plan *p = NULL;
    KN_TRY(find_plan(a, &p));
    KN_TRY(execute(p, a));
    kn_cuda_variant_label("%s", p->label);
    return KN_OK;
}

#else /* no cuDNN in this build */

bool kn_cuda_dnn_attention_covers(const kn_attention_problem *a)
{
    (void)a;
    return false;
}

kn_status kn_cuda_dnn_attention(const kn_attention_problem *a)
{
    (void)a;
    return kn_error(KN_ERR_UNSUPPORTED, "attention through cuDNN: kiln was built without cuDNN");
}

#endif
