/* kn_kir: the kernel IR, between fusion and the renderers.
 *
 * A kernel is a loop nest over an iteration space (shape[0..ndim)) that
 * loads from buffer arguments through per-dim strides (views and
 * broadcasting are strides, so no copies), evaluates scalar expressions
 * (the op table's elementwise formulas) and stores results. Two shapes of
 * loop nest cover what kiln fuses:
 *
 *   POINTWISE  for every index i of the space:  store(exprs...)
 *   ROW        the last dim is the row; for every row r (all other dims):
 *                acc0 = reduce over the row of expr0        (stage 0)
 *                acc1 = reduce over the row of expr1(acc0)  (stage 1) ...
 *                then stores: per element of the row, or once per row
 *              (softmax = max, then sum of exp(x - acc0), then store
 *               exp(x - acc0) / acc1; layer_norm = mean, then variance, ...)
 *
 * Matmul and convolution are LIBRARY kernels: one graph node run by the
 * backend's library routine, then an optional pointwise epilogue over its
 * output (bias, activation, residual add) in the same kernel. FALLBACK
 * kernels run one node with the reference executor (ops no generated code
 * covers yet). One renderer turns POINTWISE and ROW kernels into C (CPU,
 * compiled at run time) and CUDA C++ (NVRTC).
 *
 * Everything here is plain data: fusion builds it, renderers read it, and
 * it can be printed and hashed for the persistent cache.
 */
#ifndef KN_KIR_H
#define KN_KIR_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_graph.h"

#define KN_KIR_MAX_ARGS 16
#define KN_KIR_MAX_EXPRS 256
#define KN_KIR_MAX_STAGES 4
#define KN_KIR_MAX_STORES 8
#define KN_KIR_MAX_NODES 64

typedef enum kn_kernel_kind {
    KN_KERNEL_POINTWISE,
    KN_KERNEL_ROW,
    KN_KERNEL_LIBRARY,
    KN_KERNEL_FALLBACK
} kn_kernel_kind;

typedef enum kn_kx_kind {
    KN_KX_LOAD,  /* arg[buf] at the current index (row kernels: element `i` of the row) */
    KN_KX_CONST, /* value */
    KN_KX_OP,    /* op (a kn_op of kind UNARY/BINARY/COMPARE/TERNARY/MASKED) on a, b, c;
                    the formula is the op table's; CAST converts to dtype */
    KN_KX_ACC,   /* the result of reduction stage `acc` of this row */
    KN_KX_INDEX  /* the loop index of dim `dim` (for tril/triu masks), as i64 */
} kn_kx_kind;

typedef struct kn_kexpr {
    kn_kx_kind kind;
    int op;        /* KX_OP: a kn_op */
    int a, b, c;   /* KX_OP operands: indices of earlier exprs (-1 unused) */
    int buf;       /* KX_LOAD: argument index */
    int acc;       /* KX_ACC: stage index */
    int dim;       /* KX_INDEX */
    double value;  /* KX_CONST; also MASKED_FILL's fill value */
    kn_dtype dtype; /* the value's type; computation happens in f32 for
                       f32/bf16/f16, f64 for f64, i64 for ints, as bool for bool */
    bool internal;  /* a step inside one op's decomposition (softmax's max and
                       sum, arange's product), not the result of an op: it is
                       not brought back to its dtype, and a target that
                       evaluates f32 math in f64 keeps it in f64, as the
                       eager kernel keeps it in a double (see kn_kir.c) */
} kn_kexpr;

typedef struct kn_karg {
    int node, out;     /* the graph value it binds to (node index, output) */
    kn_dtype dtype;
    int64_t offset;    /* in elements, from the buffer's first element */
    int64_t strides[KN_MAX_DIMS]; /* per dim of the iteration space, in elements; 0 = broadcast */
    bool is_output;    /* written by this kernel (contiguous in the space: strides are the
                          contiguous strides of shape, or of shape without the row dim for
                          per-row stores) */
    /* A gathered argument (an embedding table read through its index, as
     * index_select along dim 0 would): 1 + the argument holding the
     * 1-based row index at each position (an integer tensor with its own
     * strides in the space; no expression loads it), 0 for an ordinary
     * argument. The row, clamped into 0..gather_size-1, adds gather_stride
     * elements a row to the address; strides cover the rest. */
    int gather_by;
    int64_t gather_stride, gather_size;
    /* The index is 0-based and a negative one counts from the table's end
     * (ONNX's Gather, which the importer writes as where(i < 0, i + n, i)
     * + 1 before kiln's 1-based index_select): the reader wraps it itself,
     * so that arithmetic needs no kernel of its own. */
    bool gather_from_end;
} kn_karg;

typedef struct kn_kstage {
    int op;   /* KN_OP_SUM, KN_OP_AMAX or KN_OP_AMIN (mean = sum, then * (1/n) in an expr) */
    int expr; /* the expression reduced over the row (may use KX_ACC of earlier stages) */
} kn_kstage;

typedef struct kn_kstore {
    int arg;      /* the output argument */
    int expr;     /* the value */
    bool per_row; /* ROW kernels: once per row (after the stages) instead of per element */
} kn_kstore;

/* How a generated kernel is laid out on its target, beyond what it
 * computes: the autotuner's knobs (core/compiler/kn_autotune). All zero is the
 * default every mode but max-autotune runs; a field a target or kernel kind
 * does not use stays 0. Every setting computes the same values (up to the
 * order of a row's float additions). */
typedef struct kn_kconfig {
    int block;  /* CUDA: threads per block, a power of two in [32, 1024]; 0: 256 */
    int ept;    /* CUDA POINTWISE: elements (vectors, on the vector path) per thread per grid
                   step, unrolled; 0: 1 on the scalar path, kn_kernel_vec_ept's on the vector
                   path */
    int rows;   /* CUDA ROW: KN_ROWS_AUTO (one warp per row with the row in registers when
                   the row has at most KN_KIR_WARP_ROW_MAX elements, else one block with the
                   row in registers when it has at most KN_KIR_REGS_PER_THREAD elements a
                   thread, else one block reading memory), KN_ROWS_BLOCK, KN_ROWS_WARP,
                   KN_ROWS_REGS, KN_ROWS_BLOCK_REGS */
    int unroll; /* C: `#pragma GCC unroll` on the innermost loops; 0: the compiler's choice */
    int tile;   /* C POINTWISE over >= 2 dims: the two innermost loops in tile x tile blocks; 0: none */
    int vec;    /* Vector width. CUDA POINTWISE: each thread moves vec consecutive elements of
                   every argument contiguous along the last dim with one aligned vector load or
                   store (arguments broadcast along it are loaded once); 0: the widest that
                   fits 16 bytes (kn_kernel_vec_width), 1: scalar. CUDA ROW with the row in
                   registers: the lanes' vector width likewise (kn_kernel_row_vec). A scalar
                   loop serves misaligned pointers and sizes at run time. C:
                   `#pragma omp simd simdlen(vec)` on the innermost loop (outputs never alias
                   inputs in a plan, which the pragma asserts); 0: none */
    int lanes;  /* CUDA ROW with one warp per row: the lanes that share a row, 8, 16 or 32
                   (a warp then takes 32 / lanes rows); 0: kn_kernel_row_lanes's choice */
} kn_kconfig;

/* ROW strategies; KN_ROWS_REGS is one warp per row with each lane keeping
 * its elements of the row in registers (read from memory once, however
 * many stages; rows of at most 1024 elements); KN_ROWS_BLOCK_REGS the same
 * with one block per row (rows of at most KN_KIR_REGS_PER_THREAD x block). */
enum { KN_ROWS_AUTO = 0, KN_ROWS_BLOCK = 1, KN_ROWS_WARP = 2, KN_ROWS_REGS = 3, KN_ROWS_BLOCK_REGS = 4 };
/* The most elements of a row one thread keeps in registers (per argument). */
#define KN_KIR_REGS_PER_THREAD 32

/* "default", or the non-default fields as "block=128 ept=4"; and back
 * (KN_ERR_ARG naming the bad word). */
void kn_kconfig_text(const kn_kconfig *c, char *buf, size_t size);
kn_status kn_kconfig_parse(const char *text, kn_kconfig *c);

typedef struct kn_kernel {
    char name[80];     /* "k3_softmax_f32_64x128": index, main op, dtype, sizes */
    kn_kernel_kind kind;
    int ndim;
    int64_t shape[KN_MAX_DIMS];
    int n_args;
    kn_karg args[KN_KIR_MAX_ARGS];
    int n_exprs;
    kn_kexpr exprs[KN_KIR_MAX_EXPRS];
    int n_stages;
    kn_kstage stages[KN_KIR_MAX_STAGES];
    int n_stores;
    kn_kstore stores[KN_KIR_MAX_STORES];
    int n_nodes;
    int nodes[KN_KIR_MAX_NODES]; /* the graph nodes it covers, in order */
    int lib_node;                /* LIBRARY / FALLBACK: the node the backend runs */
    kn_kconfig cfg;              /* POINTWISE / ROW: the layout (autotuned in max-autotune) */
    /* LIBRARY epilogue: exprs/stores over the library output, which is
     * arg 0 (is_output) and read back with KX_LOAD of arg 0. */
} kn_kernel;

/* The kernels of one graph, in execution order. */
typedef struct kn_kprogram {
    int n_kernels;
    kn_kernel *kernels;
} kn_kprogram;

void kn_kprogram_free(kn_kprogram *p);

/* Builders: append an expression / argument; index in *out, or an error
 * when the kernel is full. */
kn_status kn_kernel_add_expr(kn_kernel *k, const kn_kexpr *e, int *out);
kn_status kn_kernel_add_arg(kn_kernel *k, const kn_karg *a, int *out);

/* A render target: what one backend's generated code looks like. The
 * renderer (kn_kir.c) is shared; each backend owns its target (kernels/cpu:
 * C for the CPU JIT, kernels/cuda: CUDA C++ for NVRTC) and hands it to core
 * through its vtable (kn_backend.render_target). Differences that are text
 * or a switch are fields; the loop nest, which differs in shape (nested
 * loops against a grid-stride loop over threads), and the target's tuning
 * knobs are overrides, written with the helpers of kn_kir_target.h. */
typedef struct kn_kir_rctx kn_kir_rctx;
typedef struct kn_render_target {
    const char *name;    /* "c", "cuda": cm:source's word, and part of autotune keys */
    const char *prelude; /* types, KN_FN, kn_u2f / kn_f2u; the shared bf16 / f16 and integer
                            helpers follow it */
    const char *bufs, *sizes;  /* how a function body reaches its buffers and sizes */
    const char *after_params;  /* a line after the parameters, or NULL */
    const char *unroll_pragma; /* spelled before a loop as "PRAGMA N" when cfg.unroll > 0;
                                  NULL: the target ignores cfg.unroll */
    const char *full_unroll_pragma; /* before a loop whose trip count is a constant (a row
                                       held in registers), or NULL */
    bool f32_math_in_f64;    /* f32 formulas evaluate in double and round once (the CPU
                                reference's results to the last bit) */
    int kept_bytes;          /* a row held in registers keeps per-element values across its
                                loops instead of computing them again while its registers
                                (inputs and kept values) take at most this many bytes a
                                thread (kn_kir.c, plan_kept; 0: none) */
    bool f32_row_sum_in_f64; /* float row sums accumulate in double (a serial loop, which
                                a tree reduction does not need) */
    bool sizes_baked;        /* n<d> are the kernel's own sizes as constants, not read
                                from `sizes`: every launch passes k->shape, and constant
                                bounds fold the row loops' guards and the index
                                divisions (a GPU kernel's instruction count) */
    const char *half_gelu;   /* the prefix of prelude functions computing GELU in f32
                                for a result rounded to bf16/f16, "<prefix>bf16" and
                                "<prefix>f16" (NULL: the op table's erf formula) */
    const char *pair_op;     /* the prefix of prelude functions "<prefix><op>_<dtype>"
                                (a, b, e) computing a bf16/f16 add, sub or mul of
                                element e of two loaded vectors, its rounded result
                                (NULL: the f32 formula, rounded) */
    const char *pair_word_op; /* the prefix of prelude functions "<prefix><op>_<dtype>"
                                 (x, y) on two 32-bit words of bf16/f16 pairs: the add,
                                 sub or mul of each pair, rounded, packed in one word
                                 (NULL: none; a row's folded ops then run in f32) */
    const char *rsqrt_f32;   /* the function computing rsqrt in f32 (NULL: the op
                                table's 1 / sqrt). CUDA's rsqrtf is within 2 ulp, as
                                PyTorch's CUDA rsqrt; 1 / sqrtf's IEEE division and
                                square root cost a layer norm's warp a slow path */
    const char *ld_bf16_in_vec; /* a prelude function (vector, index) reading bf16 element
                                index of a vector held in registers as f32 from the
                                vector's 32-bit words: the upper element of a word is
                                one AND, where a 16-bit element cost a byte permute
                                and a shift (NULL: kn_ld_bf16 of the element) */
    const char *store16;     /* a prelude function (pointer, vector) storing a 16-byte
                                vector in one instruction (NULL: assignment, which the
                                compiler may split) */
    /* The function's first line: its name k->name, and a signature that
     * takes bufs and sizes as the fields above reach them. */
    void (*signature)(kn_kir_rctx *r);
    /* The loop nests, with the body inside (kn_kir_target.h's helpers):
     * POINTWISE (and LIBRARY epilogues), and ROW. */
    kn_status (*pointwise)(kn_kir_rctx *r);
    kn_status (*row)(kn_kir_rctx *r);
    /* ROW: after each stage's loop, combine the partial accumulators of
     * the threads that share a row into s<stage>; NULL: one thread a row. */
    void (*row_partials)(kn_kir_rctx *r, int stage);
    /* The non-default configurations worth measuring for generated kernel k
     * (POINTWISE or ROW), at most max into out; returns the count. */
    int (*candidates)(const kn_kernel *k, kn_kconfig *out, int max);
    /* Declares v<j>_t, an aligned struct of V elements of argument j
     * (x[0..V)), for the vector loads of a row held in registers; NULL:
     * the target never vectorizes rows. */
    void (*vector_type)(kn_kir_rctx *r, int j, int V);
} kn_render_target;


/* The generated source of one kernel (or of every kernel of a program) for
 * a target; caller frees *src. The function for kernel k is named k->name
 * and has the signature
 *     void NAME(char **bufs, const int64_t *sizes)
 * with bufs[i] the address of element 0 of argument i (offset applied by
 * the caller) and sizes the iteration shape (generated code may also bake
 * the shape in: sizes lets a cached object serve a dynamic version). */
kn_status kn_kernel_render(const kn_kernel *k, const kn_render_target *t, char **src);
kn_status kn_kprogram_render(const kn_kprogram *p, const kn_render_target *t, char **src);
/* A target's prelude alone (types, bf16/f16 bit code, helpers; no includes
 * on CUDA), for hand-written templates that share it; caller frees *src. */
kn_status kn_kir_prelude(const kn_render_target *t, char **src);

/* Whether CUDA POINTWISE kernel k can take vector width V (cfg.vec): along
 * the last dim every argument is contiguous or broadcast, V elements fit
 * 16 bytes and never straddle rows. */
bool kn_kernel_vec_ok(const kn_kernel *k, int V);
/* The vector width CUDA POINTWISE kernel k renders with: cfg.vec where
 * kn_kernel_vec_ok allows it; by default (cfg.vec 0) the widest V with V
 * elements of the widest contiguous argument in 16 bytes that it allows;
 * 0: the scalar loop only (cfg.vec 1, or nothing fits). */
int kn_kernel_vec_width(const kn_kernel *k);
/* Vectors per thread per grid step on that path: cfg.ept, or by default
 * the fewest (1, 2, 4) whose blocks for k->shape all fit the GPU at once
 * (KN_KIR_FULL_GRID), else 4. A grid of one wave and a bit more left a
 * second, ragged wave: on the H100 an f32 ReLU of 1.6M elements took 8.7
 * us with one vector a thread (1568 blocks) and 8.3 with two (784), one of
 * 3.2M 13.3 us with two and 11.8 with four. At most 2 where the kernel
 * computes a transcendental or a division. */
int kn_kernel_vec_ept(const kn_kernel *k);
/* CUDA ROW: whether each thread keeps its elements of the row in registers
 * (cfg.rows regs or bregs, or by default rows of at most
 * KN_KIR_REGS_PER_THREAD elements a thread of the warp or block), and
 * then its vector width (1: scalar): 16 bytes of the widest argument
 * contiguous along the row, where the row length of k->shape and the
 * arguments' row strides are multiples of it (cfg.vec 1: scalar). */
bool kn_kernel_row_regs(const kn_kernel *k);
int kn_kernel_row_vec(const kn_kernel *k);

/* The configurations worth measuring for generated kernel k on target t,
 * the default first (out[0] is all zero); at most max; returns the count
 * (1 for kernels with nothing to tune). */
int kn_kconfig_candidates(const kn_kernel *k, const kn_render_target *t, kn_kconfig *out, int max);

/* Human-readable dump of a kernel (for KILN_LOGS=kernels and tests). */
kn_status kn_kernel_dump(const kn_kernel *k, char **text);

/* Whether the renderers produce a function for k: POINTWISE, ROW, and a
 * LIBRARY kernel with an epilogue (its stores; rendered like POINTWISE and
 * run after the library call). kn_kprogram_render skips the others. */
bool kn_kernel_has_source(const kn_kernel *k);

/* CUDA launches. A CUDA kernel is
 *     extern "C" __global__ void NAME(kn_kargs ka)
 * with the struct below passed by value (the rendered prelude defines the
 * same layout): bufs as for C, sizes the iteration shape. Launch with
 * kn_kernel_launch_dims (sizes: the run's shape, NULL = k->shape), no
 * dynamic shared memory:
 * (block: k->cfg.block, default KN_KIR_ROW_BLOCK; it is also the kernel's
 * __launch_bounds__, so launch with no larger block):
 *   POINTWISE (and LIBRARY epilogues): a grid-stride loop over the flattened
 *     space, each thread taking cfg.ept elements a block-width apart per
 *     step; grid ceil(numel / (block * ept)) capped at KN_KIR_MAX_GRID. On
 *     the vector path (kn_kernel_vec_width V > 0) the elements are V-wide
 *     vectors and ept kn_kernel_vec_ept's: grid ceil(numel / (block * V *
 *     ept)), capped likewise. Any grid >= 1 and any block up to the bound is
 *     correct.
 *   ROW: one block per row, warp shuffles then the warps' partials in
 *     shared memory per stage: block must be a power of two in [32, 1024];
 *     grid = rows capped at KN_KIR_MAX_GRID. With one warp per row
 *     (kn_kernel_warp_rows: cfg.rows, or by default rows of at most
 *     KN_KIR_WARP_ROW_MAX elements of k->shape, fixed when rendered) a
 *     block takes block / lanes rows (kn_kernel_row_lanes): grid =
 *     ceil(rows / (block / lanes)), capped likewise. Where that cap cuts the grid, the kernel loops over rows
 *     (any grid >= 1 is correct); otherwise it takes one row a warp (block)
 *     and needs the whole grid, with block exactly kn_kernel_block's.
 * grid 0 means there is nothing to do: skip the launch. */
#define KN_KIR_ROW_BLOCK 256
#define KN_KIR_WARP_ROW_MAX 1024
#define KN_KIR_MAX_GRID 65535
/* Blocks that fill a large GPU once: 132 SMs (H100) x 8 resident blocks of 256 threads. */
#define KN_KIR_FULL_GRID 1056
typedef struct kn_kargs {
    char *bufs[KN_KIR_MAX_ARGS];
    long long sizes[KN_MAX_DIMS];
} kn_kargs;
void kn_kernel_launch_dims(const kn_kernel *k, const int64_t *sizes, int64_t *grid, int *block);
/* A CUDA kernel's threads per block: k->cfg.block, or KN_KIR_ROW_BLOCK. */
int kn_kernel_block(const kn_kernel *k);
bool kn_kernel_warp_rows(const kn_kernel *k);
/* CUDA ROW with one warp per row (kn_kernel_warp_rows): the lanes that
 * share a row. cfg.lanes where the rows split evenly into warps of it;
 * by default 32, halved (down to 8) while a lane would hold at most one
 * vector of a row held in registers and the rows split evenly: a lane's
 * loads of two rows' vectors are in flight together. */
int kn_kernel_row_lanes(const kn_kernel *k);
/* ... and that default, whatever cfg.lanes says. */
int kn_kernel_row_lanes_auto(const kn_kernel *k);

#endif
