/* kn_lazy: the graph value a traced placeholder tensor stands for.
 *
 * A placeholder (kn_tensor.lazy set, no storage) holds one reference and
 * drops it when it is released; core/capture makes the lazies and fills
 * them in as their graphs run. The struct lives below kn_tensor so the
 * tensor layer never calls into capture: it knows the value only by
 * pointer, which is why dropping the last reference hands the value back
 * instead of releasing it here.
 */
#ifndef KN_LAZY_H
#define KN_LAZY_H

#include <stdbool.h>

#include "kn_device.h"

/* Room for a graph input's name: KN_NAME_MAX of kn_graph.h (kn_capture.c
 * checks that they agree). */
#define KN_LAZY_NAME_MAX 96

struct kn_capture;
struct kn_tensor;

/* Refcounted: one reference per placeholder tensor, one held by the
 * capture while its graph is open. */
typedef struct kn_lazy {
    int refcount;
    /* of refcount, the references autograd's saved tensors hold: they
     * make the value an output of its graph only when the capture keeps
     * values for a backward outside the graph (kn_capture.keep_saved) */
    int saved_refs;
    bool dropped;           /* its graph ran without computing it (nothing but a saved tensor wanted it) */
    struct kn_capture *cap; /* NULL once its capture ended */
    int segment;            /* the graph (of the call) that computes it */
    int node, out;
    int output_index;       /* among its graph's outputs, once run; -1 before */
    kn_device device;       /* where its value will be */
    struct kn_tensor *value; /* the value, once its graph ran (owned) */
    bool is_input;          /* it stood for an input of its graph: keeps that name */
    int input_kind;         /* a kn_input_kind (kn_graph.h), when is_input */
    char input_name[KN_LAZY_NAME_MAX];
} kn_lazy;

/* Drop one reference (NULL is fine). On the last one lz is freed and the
 * value it owned is returned for the caller to release; else NULL. */
struct kn_tensor *kn_lazy_release(kn_lazy *lz);

#endif
