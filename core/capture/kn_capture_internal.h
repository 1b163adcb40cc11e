/* kn_capture_internal: what the files of a compiled function share and no
 * one else needs. They depend on each other in one direction only:
 * kn_capture_trace.c (capturing a call) uses kn_capture_guards.c (the
 * version cache), which uses kn_capture_dynamic.c (what is made dynamic),
 * and all of them use kn_capture.c (the compiled function, its lazies,
 * running a version). */
#ifndef KN_CAPTURE_INTERNAL_H
#define KN_CAPTURE_INTERNAL_H

#include <stdbool.h>

#include "kn_graph.h"
#include "kn_status.h"
#include "kn_tensor.h"

/* kn_capture.h's types, by their tags: including it here would make this
 * header and kn_capture.c, which includes both, a circle of modules. */
struct kn_capture;
struct kn_compiled;
struct kn_version;
struct kn_graph_cache;
struct kn_recompile;

/* kn_capture.c */
/* A placeholder for output `out` of node `node` of the open graph. */
kn_status kn_capture_placeholder(struct kn_capture *cap, int node, int out, kn_tensor **t);
/* Drop the capture's references on the open graph's lazies; with detach,
 * the ones placeholders still hold forget the capture too. */
void kn_capture_drop_lazies(struct kn_capture *cap, bool detach);
/* End capturing a call without running anything: placeholders detached,
 * the open graph freed. */
void kn_capture_close(struct kn_capture *cap);

/* kn_capture_writes.c */
/* A placeholder (new reference in *out) for the value the open graph
 * writes into tensor real, or NULL in *out when it writes none. */
kn_status kn_capture_written_value(struct kn_capture *cap, const kn_tensor *real, kn_tensor **out);
/* Copy the written values into their tensors when the graph ran (ran),
 * then forget the writes; the first error is returned. */
kn_status kn_capture_apply_writes(struct kn_capture *cap, bool ran);

/* kn_capture_dynamic.c */
/* Whether a recompile may make Lua numbers dynamic (kiln.config.dynamic_numbers,
 * and dynamic not off). */
bool kn_capture_numbers_dynamic(const struct kn_compiled *cm);
/* Make the numbers of traced graph g that changed since version `newest`
 * of graph k dynamic (inputs of g now), naming them in rc. */
kn_status kn_capture_make_numbers_dynamic(struct kn_compiled *cm, int k, const struct kn_version *newest,
                                          kn_graph *g, struct kn_recompile *rc);
/* Automatic dynamic shapes: dim `dim` of input `name` is symbolic from now on. */
void kn_capture_add_dynamic(struct kn_compiled *cm, const char *name, int dim);
/* The symbolic sizes of new version v of graph cache gc (none when no dim
 * is dynamic). */
kn_status kn_capture_make_symbols(struct kn_compiled *cm, struct kn_graph_cache *gc, struct kn_version *v);

/* kn_capture_guards.c */
/* The version of graph k that traced graph g fits, or a new one compiled
 * (the recompile explained); *version is -1 when g must run eagerly. */
kn_status kn_capture_lookup_or_compile(struct kn_compiled *cm, int k, kn_graph *g, int *version);

#endif
