/* kn_safetensors: read and write the safetensors file format.
 *
 * Layout (https://github.com/huggingface/safetensors): an 8-byte
 * little-endian header length N, N bytes of JSON
 *   {"__metadata__": {"k": "v", ...},
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * then the data area; each tensor's bytes are data[begin, end), C order,
 * little-endian. kiln reads and writes F32 F64 BF16 F16 I32 I64 BOOL.
 *
 * Reading is strict: every malformed input (short file, absurd header length,
 * bad JSON, unknown dtype, offsets that do not fit the shape or the data
 * area, duplicate names, ...) gives KN_ERR_FORMAT or KN_ERR_IO with a message
 * that names the file and the problem. Offsets may be out of order or overlap
 * (other writers do that); they only have to lie inside the data area.
 *
 * Writing produces what the Python library writes for the same tensors:
 * entries ordered by dtype alignment (widest first) then name, compact JSON,
 * header padded with spaces to a multiple of 8. It writes a temporary file in
 * the same folder and renames it, so a failed save leaves an existing file
 * untouched.
 */
#ifndef KN_SAFETENSORS_H
#define KN_SAFETENSORS_H

#include <stddef.h>

#include "kn_tensor.h"

/* The header may not be longer than this (as the reference implementation). */
#define KN_ST_MAX_HEADER ((int64_t)100 * 1000 * 1000)

typedef struct kn_st_entry {
    char *name;        /* UTF-8, NUL-terminated; owned by the file */
    kn_tensor *tensor; /* contiguous, on the CPU; one reference owned by the file */
} kn_st_entry;

typedef struct kn_st_file {
    int n;                /* tensors, in the order of the file's header */
    kn_st_entry *entries;
    int n_meta;           /* "__metadata__" pairs, in the header's order */
    char **meta_keys;
    char **meta_values;
} kn_st_file;

/* Read a whole file. On success *out is a new kn_st_file owned by the caller
 * (free it with kn_st_file_free; retain a tensor to keep it beyond that).
 * On failure *out is NULL and kn_last_error() says what is wrong. */
kn_status kn_safetensors_load(const char *path, kn_st_file **out);

/* The same from bytes in memory (len bytes at data); `name` stands for the
 * file in messages. Used by tests and by callers that already hold the bytes. */
kn_status kn_safetensors_load_mem(const void *data, size_t len, const char *name,
                                  kn_st_file **out);

void kn_st_file_free(kn_st_file *f); /* NULL is fine */

/* The tensor called `name` in f (borrowed), or NULL. */
kn_tensor *kn_st_file_get(const kn_st_file *f, const char *name);

/* Write n tensors (any strided CPU tensors; written contiguous) under the
 * given names, plus n_meta metadata pairs (none when n_meta is 0; the pairs
 * are written sorted by key). Names must be distinct and not "__metadata__".
 * Nothing is taken over: names and tensors stay the caller's. */
kn_status kn_safetensors_save(const char *path, int n, const char *const *names,
                              kn_tensor *const *tensors, int n_meta,
                              const char *const *meta_keys, const char *const *meta_values);

/* The safetensors dtype name of a kiln dtype ("F32"), and the reverse
 * (returns KN_ERR_FORMAT for names kiln cannot hold). */
const char *kn_st_dtype_name(kn_dtype dt);
kn_status kn_st_dtype_parse(const char *name, kn_dtype *out);

#endif
