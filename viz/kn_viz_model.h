/* kn_viz_model: what a view draws, read once from a kn_compiled into plain
 * lists, so that the Graphviz builder (kn_viz_dot.c) and the text outline
 * (kn_viz_text.c) say the same thing. Private to viz/. */
#ifndef KN_VIZ_MODEL_H
#define KN_VIZ_MODEL_H

#include "kn_strbuf.h"
#include "kn_viz.h"

typedef enum kn_viz_vkind {
    KN_VN_OP,        /* an op node (fused: in a kernel) */
    KN_VN_ARG,       /* an argument of the compiled function */
    KN_VN_PARAM,     /* a module parameter (dotted name) */
    KN_VN_PREV,      /* an output of an earlier graph of the call */
    KN_VN_TENSOR,    /* another tensor the code used, or a folded constant */
    KN_VN_CONST,     /* a Lua number baked into the graph */
    KN_VN_VIEW,      /* fused: a view, made from its source's value without a copy */
    KN_VN_OUTPUT     /* a value the graph hands back */
} kn_viz_vkind;

typedef struct kn_viz_vnode {
    kn_viz_vkind kind;
    int kernel;                /* fused: the kernel (index in its graph) that computes it, -1 */
    int n_in;
    int in[KN_MAX_INPUTS];     /* drawn nodes (index in the graph's list) it reads; -1 when not drawn */
    char op[32];               /* op name, or "input", "output", ... */
    char name[KN_NAME_MAX];    /* inputs: 'x', 'fc1.weight', 'graph 0 output 1'; outputs: 'output N' */
    char shape[128];           /* "{16, 256, 512}" (symbolic sizes as expressions) */
    char dtype[8];
    char where[KN_WHERE_MAX];  /* the user's source line, or "" */
    double value;              /* KN_VN_CONST */
    double bytes;              /* the output's size */
    int out_number;            /* KN_VN_OUTPUT: N of "graph K output N" (-1: an input handed back) */
    unsigned sig;              /* what a repeat must match (collapse) */
    bool hidden;               /* collapsed into the first repetition */
    int alias;                 /* hidden: the node of the first repetition it stands for, else -1 */
    bool copies;               /* fused: a copy the plan makes (a reshape that copies, a contiguous op) */
    int in_reason[KN_MAX_INPUTS]; /* fused: why input q crosses kernels, an index in the graph's
                                     reasons, or -1 */
    unsigned char part;        /* KN_PART_*: the part of a training step its op belongs to */
} kn_viz_vnode;

#define KN_VIZ_REASON_MAX 560

typedef struct kn_viz_vkernel {
    char name[80];
    int number;                /* its number in :kernels, :src and cm:kernels(), from 1 */
    char kind[16];             /* generated | cpu | cuda | cudnn | cublaslt */
    char group[12];            /* pointwise | row | library | reference */
    int epilogue_of;           /* runs in this kernel's library epilogue (-1: none) */
    int *nodes;                /* its drawn op nodes, in order */
    int n_nodes;
    bool timed;
    double us, pct, roof;      /* roof < 0: unknown */
    int calls;
    unsigned sig;
    bool hidden;
    unsigned char part;        /* KN_PART_* of its first op node */
} kn_viz_vkernel;

typedef struct kn_viz_vgraph {
    int index, version, n_ops;
    kn_viz_vnode *nodes;
    int n_nodes, cap_nodes;
    kn_viz_vkernel *kernels;
    int n_kernels;
    char note[KN_REASON_MAX + 32]; /* fused: why it runs op by op ("" when compiled) */
    /* collapse: a run of rep_count equal repetitions of rep_len nodes
     * (captured) or kernels (fused) from rep_start; rep_count 0: none */
    int rep_start, rep_len, rep_count;
    /* fused: why each edge between two kernels is one (kn_fusion.edges, as the plan runs them) */
    struct kn_viz_reason {
        int from, to; /* kernels */
        char text[KN_VIZ_REASON_MAX];
    } *reasons;
    int n_reasons;
    /* the version's guards (what a call must match to run it), borrowed from the kn_version */
    int n_guards;
    const char (*guards)[KN_REASON_MAX];
} kn_viz_vgraph;

typedef struct kn_viz_model {
    const kn_compiled *cm;
    kn_viz_view view;
    kn_viz_vgraph *graphs;
    int n_graphs;
    const kn_break *breaks;    /* the breaks of the latest call (else the distinct ones), graph order */
    int n_breaks;
    int n_kernels;
    bool timed;                /* some kernel has a timing */
    double max_pct, total_us;
    bool training;             /* some op is a backward or an optimizer update: parts are drawn */
    bool host_timed;           /* timed, and the host's time per call is known */
    double host_us, kernel_us; /* per call: the host's time and the kernels' (kiln.time's) */
} kn_viz_model;

kn_status kn_viz_model_build(const kn_compiled *cm, const kn_viz_opts *o, kn_viz_model *m);
void kn_viz_model_free(kn_viz_model *m);

/* The host's share of a call, 0..100: host_us / (host_us + kernel_us). */
double kn_viz_host_pct(const kn_viz_model *m);
/* At or above this host share a view says the call is host-bound. */
#define KN_VIZ_HOST_BOUND_PCT 50.0
/* "host overhead 3306.2 us per call (11% of the call)", and when host-bound
 * a second line (after `newline`) saying the heat leaves the host out. */
void kn_viz_host_text(kn_strbuf *b, const kn_viz_model *m, const char *newline);

/* "12.5 KiB" */
void kn_viz_fmt_bytes(double bytes, char *buf, size_t size);

#endif
