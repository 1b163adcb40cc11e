/* kn_onnx: reading ONNX files (ModelProto and single TensorProto files).
 *
 * The protobuf decoding is protobuf-c's, generated at build time from the
 * onnx.proto the system installs; this file adds what a loader must check
 * before anyone trusts the model: the default-domain opset kiln knows,
 * initializer byte sizes against shape and type, external data kept inside
 * the model's folder, every node input defined, and the graph's order (a
 * cycle is an error; a graph out of order is sorted). The model description
 * handed up is the generated protobuf-c structs (plain C) plus the
 * initializers converted to kn_tensors and a topological node order per
 * graph. Every error names the file and what is wrong.
 *
 * Uses core (base, tensor) only, and no Lua; the Lua side is
 * onnx/kn_lua_onnx.c (the binding) and onnx/lua/ (the interpreter).
 */
#ifndef KN_ONNX_H
#define KN_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "kn_status.h"
#include "kn_tensor.h"
#include "onnx.pb-c.h"

/* The newest default-domain (ai.onnx) opset kiln's importer knows. */
#define KN_ONNX_MAX_OPSET 21

/* One graph (the main graph or an If branch), validated. */
typedef struct kn_onnx_graph {
    const Onnx__GraphProto *proto;
    size_t *order;            /* node indices in a topological order */
    kn_tensor **initializers; /* parallel to proto->initializer */
    /* per node, its subgraphs (attribute graphs), parallel to each node's
     * attributes that hold a graph; NULL where none */
    struct kn_onnx_graph ***subgraphs; /* [node][attribute] */
} kn_onnx_graph;

typedef struct kn_onnx_model {
    char *path;             /* as given, for messages */
    Onnx__ModelProto *proto;
    int64_t opset;          /* the default domain's version */
    kn_onnx_graph *graph;
} kn_onnx_model;

/* Load and validate path (the file is mapped, decoded once and unmapped,
 * and each initializer's bytes are moved into a kn_tensor and dropped from
 * the decoded message, so a large model is not held twice). External data
 * files are read from beside the model. */
kn_status kn_onnx_load(const char *path, kn_onnx_model **out);
/* The same from bytes in memory; `name` names them in messages and `dir`
 * (may be NULL: external data refused) is where external data lives. */
kn_status kn_onnx_load_bytes(const void *data, size_t size, const char *name, const char *dir,
                             kn_onnx_model **out);
void kn_onnx_free(kn_onnx_model *m);

/* A TensorProto as a new CPU kn_tensor (f32, f64, f16, bf16, i32, i64,
 * bool; other ONNX types are KN_ERR_UNSUPPORTED naming the type). `file`
 * and `dir` as above; `what` names the tensor in messages. */
kn_status kn_onnx_tensor(const Onnx__TensorProto *tp, const char *file, const char *dir,
                         kn_tensor **out);
/* Read a file holding one serialized TensorProto (the conformance suite's
 * input_N.pb / output_N.pb). *name (may be NULL) gets a malloc'd copy of
 * the tensor's name ("" if none). */
kn_status kn_onnx_read_tensor_file(const char *path, kn_tensor **out, char **name);

/* ---- writing (kn_onnx_write.c) ---- */

/* The ONNX element type of a kiln dtype (every kiln dtype has one). */
int32_t kn_onnx_elem_type(kn_dtype dt);
/* Fill tp as the initializer `name` holding t's values (raw_data). t must
 * be a contiguous CPU tensor; tp borrows its name, dims and bytes, so t and
 * name must outlive the pack. */
kn_status kn_onnx_tensor_proto(Onnx__TensorProto *tp, const char *name, const kn_tensor *t);
/* Pack m with protobuf-c and write it to path: into a new file beside it,
 * flushed, then renamed over path, so a failed save leaves nothing behind. */
kn_status kn_onnx_save_model(const Onnx__ModelProto *m, const char *path);

/* ONNX's name of an element type number ("FLOAT", "UINT8", ...). */
const char *kn_onnx_type_name(int32_t onnx_type);
/* The kiln dtype of an ONNX element type; false if kiln has none. */
int kn_onnx_dtype(int32_t onnx_type, kn_dtype *out);

#endif
