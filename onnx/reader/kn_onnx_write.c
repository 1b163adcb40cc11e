/* kn_onnx_write: writing ONNX files (the other half of kn_onnx.c).
 *
 * The caller builds the ModelProto out of protobuf-c's generated structs;
 * this file turns kn_tensors into TensorProtos and writes the packed model
 * with protobuf-c's generated pack function: to a new file beside the
 * destination, flushed, then renamed over it, so a failed save never
 * leaves a half-written model where the old one was.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_fs.h"
#include "kn_onnx.h"

int32_t kn_onnx_elem_type(kn_dtype dt)
{
    switch (dt) {
    case KN_F32: return 1;
    case KN_I32: return 6;
    case KN_I64: return 7;
    case KN_BOOL: return 9;
    case KN_F16: return 10;
    case KN_F64: return 11;
    case KN_BF16: return 16;
    default: return 0;
    }
}

kn_status kn_onnx_tensor_proto(Onnx__TensorProto *tp, const char *name, const kn_tensor *t)
{
    onnx__tensor_proto__init(tp);
    if (t->lazy || !t->storage)
        return kn_error(KN_ERR_ARG, "onnx: tensor '%s' has no value (a traced placeholder)", name);
    if (kn_device_kind_of(kn_tensor_device(t)) != KN_DEVICE_CPU || !kn_tensor_is_contiguous(t))
        return kn_error(KN_ERR_ARG, "onnx: tensor '%s' must be a contiguous CPU tensor to be written", name);
    int32_t et = kn_onnx_elem_type(t->dtype);
    if (!et) return kn_error(KN_ERR_DTYPE, "onnx: tensor '%s': dtype %s has no ONNX type", name, kn_dtype_name(t->dtype));
    /* raw_data is little-endian: what this host's memory holds */
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe != 1)
        return kn_error(KN_ERR_UNSUPPORTED, "onnx: writing tensors on a big-endian host is not supported");
    tp->name = (char *)name;
    tp->has_data_type = 1;
    tp->data_type = et;
    tp->n_dims = (size_t)t->ndim;
    tp->dims = (int64_t *)t->shape; /* borrowed: the tensor outlives the pack */
    tp->has_raw_data = 1;
    tp->raw_data.len = (size_t)kn_tensor_numel(t) * kn_dtype_size(t->dtype);
    tp->raw_data.data = (uint8_t *)kn_tensor_data(t);
    return KN_OK;
}

kn_status kn_onnx_save_model(const Onnx__ModelProto *m, const char *path)
{
    size_t size = onnx__model_proto__get_packed_size(m);
    /* protobuf's own limit: a message over 2 GiB cannot be read back */
    if (size > (size_t)INT32_MAX)
        return kn_error(KN_ERR_ARG, "%s: the model would be %zu bytes, over protobuf's 2 GiB limit", path, size);
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return kn_error(KN_ERR_OOM, "%s: out of memory packing %zu bytes", path, size);
    size_t packed = onnx__model_proto__pack(m, buf);
    kn_status st = KN_OK;
    if (packed != size) st = kn_error(KN_ERR_FORMAT, "%s: protobuf-c packed %zu bytes of %zu", path, packed, size);
    /* saving over a symbolic link replaces the file it points to */
    char *real = realpath(path, NULL);
    if (real) path = real;
    char *tmp = NULL;
    FILE *f = NULL;
    if (st == KN_OK) st = kn_fs_open_temp(path, &tmp, &f);
    if (st == KN_OK) {
        if (fwrite(buf, 1, size, f) != size) st = kn_error(KN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        st = kn_fs_commit_temp(f, tmp, path, st);
    }
    free(tmp);
    free(real);
    free(buf);
    return st;
}
