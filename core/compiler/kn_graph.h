/* kn_graph: the graph IR that capture builds and every executor runs.
 *
 * A graph is a list of nodes in execution order. A node is an op of the op
 * table, or an input (a tensor bound from outside: a function argument, a
 * module parameter, an output of an earlier graph), or a constant (a Lua
 * number baked in). Node i reads only nodes before it. Each node keeps the
 * user's source line it came from, so breaks, guard failures and drawings
 * can point at the Lua code.
 */
#ifndef KN_GRAPH_H
#define KN_GRAPH_H

#include <stdbool.h>

#include "kn_op.h"

enum { KN_NODE_INPUT = KN_OP_COUNT, KN_NODE_CONST };

/* Which part of a training step a node belongs to: the forward, the
 * backward (a gradient rule's op, traced by backward) or the update after
 * it (an optimizer's ops, grad mode off); inference graphs are all
 * forward. */
enum { KN_PART_FORWARD, KN_PART_BACKWARD, KN_PART_UPDATE };
/* Why the recompute pass copied a forward op into the backward (kn_node.
 * recomputed): kiln.config.activation_memory_budget below 1, or a widening
 * cast of a value kept anyway (at any budget). */
enum { KN_RECOMPUTED_BUDGET = 1, KN_RECOMPUTED_WIDENING_CAST = 2 };
/* A KN_PART_*'s word: "forward", "backward" or "update" (cm:graphs(), the drawings). */
const char *kn_part_name(int part);

typedef enum kn_input_kind {
    KN_IN_ARG,          /* an argument of the compiled function */
    KN_IN_PARAM,        /* a parameter or buffer of the compiled module */
    KN_IN_GRAPH_OUTPUT, /* a value an earlier graph of the same call produced */
    KN_IN_TENSOR,       /* any other tensor the code used (an upvalue, a global): guarded by identity */
    KN_IN_VALUE         /* a tensor made during the call outside any graph (kiln.eager's result) */
} kn_input_kind;

/* The name of an input the fold_once pass made (a value of shapes and
 * constants, computed once when a plan is built) starts so: "computed
 * once: full, tril, logical_not" (kn_passes.h). */
#define KN_ONCE_PREFIX "computed once: "

#define KN_NAME_MAX 96
#define KN_WHERE_MAX 128
#define KN_COVERS_MAX 192

typedef struct kn_node {
    int op; /* a kn_op, KN_NODE_INPUT or KN_NODE_CONST */
    int n_in;
    int in_node[KN_MAX_INPUTS], in_out[KN_MAX_INPUTS];
    kn_attrs a;
    int n_out;
    kn_meta out[KN_MAX_OUTPUTS]; /* shapes seen when this node was traced */
    int input;                   /* INPUT: index into the graph's inputs */
    double value;                /* CONST: the number (dtype in out[0]) */
    char name[KN_NAME_MAX];      /* CONST: the Lua name of the number, or "" */
    char where[KN_WHERE_MAX];    /* "file.lua:LINE" of the user code */
    char covers[KN_COVERS_MAX];  /* a node a pass made from several: the ops it replaced with their
                                    lines, for cm:kernels() ("matmul f.lua:3, softmax :4, ..."); or "" */
    unsigned char part;          /* KN_PART_*: set as the node is traced */
    unsigned char recomputed;    /* a forward op the recompute pass copied into the backward: KN_RECOMPUTED_* */
} kn_node;

typedef struct kn_graph_input {
    kn_input_kind kind;
    char name[KN_NAME_MAX]; /* 'x', 'fc1.weight', 'graph 0 output 1' */
    kn_tensor *tensor;      /* bound for the current run; owned (retained) */
    uint64_t tensor_id;     /* identity, for parameter guards */
    kn_meta meta;
    int64_t strides[KN_MAX_DIMS];
    kn_device device;
    bool requires_grad; /* the tensor required grad when traced (its backward is part of the graph) */
    bool pass_made; /* computed by a pass from bound values (a folded conv weight, a value computed
                       once): the graph owns it, nobody binds it again, so its values stay */
    bool from_inputs; /* pass_made from other inputs' values (a folded conv weight), not from constants
                         alone (fold_once): the plan must be built again when those change */
    bool values_read; /* a pass decided something from this input's values (a constant attention
                         mask found to be the causal one): the plan must be built again when
                         they change */
} kn_graph_input;

typedef struct kn_graph {
    kn_node *nodes;
    int n_nodes, cap_nodes;
    kn_graph_input *inputs;
    int n_inputs, cap_inputs;
} kn_graph;

/* The first backward node among nodes (i, end) reading output o of node i
 * (nodes marked in dead, when not NULL, skipped), or -1: a forward value
 * a training step's backward needs (cm:saved(), the recompute pass). */
int kn_graph_first_backward_reader(const kn_graph *g, int i, int o, int end, const unsigned char *dead);

void kn_graph_init(kn_graph *g);
/* Free everything, releasing bound input tensors. */
void kn_graph_free(kn_graph *g);
/* Unbind (release) the input tensors but keep the structure. */
void kn_graph_unbind(kn_graph *g);
/* A deep copy of the structure; inputs are copied unbound. */
kn_status kn_graph_copy(const kn_graph *src, kn_graph *dst);

/* Append a node (copied); its index in *index. */
kn_status kn_graph_add_node(kn_graph *g, const kn_node *n, int *index);
/* Add an input bound to t (retained) and its INPUT node; node index in *node. */
/* Whether an input is the same tensor at every call (a parameter, a tensor
 * guarded by identity), so a pass may bake its values (fold_batch_norm)
 * and a plan check they are unchanged (kn_plan_stale). Arguments and
 * values made during a call are other tensors each time. */
static inline bool kn_input_keeps_values(const kn_graph_input *in)
{
    return in->kind == KN_IN_PARAM || in->kind == KN_IN_TENSOR;
}

kn_status kn_graph_add_input(kn_graph *g, kn_input_kind kind, const char *name, kn_tensor *t,
                             const char *where, int *node);

/* Turn CONST node `node` into an INPUT node bound to t (retained): a number
 * that is read at every call instead of baked in. The input takes its place
 * in input order (inputs are numbered as their nodes appear). */
kn_status kn_graph_const_to_input(kn_graph *g, int node, kn_input_kind kind, const char *name, kn_tensor *t);

/* Number of op nodes (not inputs or constants). */
int kn_graph_op_count(const kn_graph *g);
const char *kn_node_op_name(const kn_node *n);
/* The op's name with what a fused node does after it: "gather_scatter+relu",
 * "gather_scatter+relu+log_softmax" (its epilogue attrs); written into buf. */
const char *kn_node_label(const kn_node *n, char *buf, size_t size);
/* The value of CONST node n on dev, as a 0-dim tensor owned by the caller. */
kn_status kn_node_const_tensor(const kn_node *n, kn_device dev, kn_tensor **out);

/* Run the graph node by node on the inputs' backend, each op with
 * settings (NULL: the defaults). values[i * KN_MAX_OUTPUTS + j]
 * gets output j of node i (new references the caller releases; NULL where a
 * node has fewer outputs). values must hold n_nodes * KN_MAX_OUTPUTS entries.
 * On error every value is released and the message names the node's line. */
kn_status kn_graph_run(const kn_graph *g, const struct kn_settings *settings, kn_tensor **values);

/* Shape inference for node i of g from its input nodes' out metas (any
 * order: it only reads the nodes i names). */
kn_status kn_node_infer(const kn_graph *g, int i, kn_meta out[KN_MAX_OUTPUTS], int *n_out);

/* A header without storage for a value of meta m, contiguous. */
void kn_graph_value_header(const kn_meta *m, kn_tensor *t);
/* The call node n of g makes, as a backend is asked about it before a
 * run (plans ask at build time): its op and attrs, its inputs as headers
 * in hdr (contiguous, no storage), no outputs. False for a node that is no
 * op call. */
bool kn_graph_node_call(const kn_graph *g, const kn_node *n, kn_tensor hdr[KN_MAX_INPUTS], kn_opcall *c);

#endif
