/* kn_safetensors_internal: what the reader (kn_safetensors.c) and the
 * writer (kn_safetensors_write.c) share and no one else needs. The writer
 * uses these; the reader uses nothing of the writer. */
#ifndef KN_SAFETENSORS_INTERNAL_H
#define KN_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kn_dtype.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ST_BIG_ENDIAN 1
#else
#define ST_BIG_ENDIAN 0
#endif

/* The position of dt in the reference implementation's Dtype enum (its
 * alignment order; the writer sorts by it), or -1 for a dtype safetensors
 * cannot hold. */
int kn_st_dtype_rank(kn_dtype dt);

/* Reverse the bytes of each of the n elements of esize bytes at p:
 * safetensors data is little-endian. */
void kn_st_swap_elems(void *p, int64_t n, size_t esize);

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 if invalid. */
size_t kn_st_utf8_seq(const unsigned char *s, size_t n);

#endif
