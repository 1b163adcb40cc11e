/* kn_cuda_libplans: a cache of a library's per-signature plans (cuBLASLt
 * matmul descriptors and algorithms, cuDNN execution plans), keyed by the
 * bytes of a signature struct and their hash.
 *
 * One cache per library per GPU (kn_cuda_dev): a plan holds that GPU's
 * workspace and the library handle it was built with. Plans are never
 * evicted; the cache destroys them when it is freed. */
#ifndef KN_CUDA_LIBPLANS_H
#define KN_CUDA_LIBPLANS_H

#include <stddef.h>
#include <stdint.h>

#include "kn_status.h"

typedef struct kn_cuda_libplans kn_cuda_libplans;

/* key_size: the size of every key (the signature struct, zeroed before
 * being filled so its padding compares equal); destroy frees one plan. */
kn_cuda_libplans *kn_cuda_libplans_new(size_t key_size, void (*destroy)(void *plan));
void kn_cuda_libplans_free(kn_cuda_libplans *c);
/* The plan stored under key (hash: kn_hash_bytes of it), or NULL. */
void *kn_cuda_libplans_find(const kn_cuda_libplans *c, const void *key, uint64_t hash);
/* Store plan under key (not present yet); the cache owns it from now on,
 * except on error (KN_ERR_OOM), when the caller still does. */
kn_status kn_cuda_libplans_insert(kn_cuda_libplans *c, const void *key, uint64_t hash, void *plan);

#endif
