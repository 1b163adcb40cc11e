/* kn_hash: FNV-1a 64, the hash kiln uses for cache keys and for the
 * checksums of cache entries (detects corruption, not attacks: entries live
 * in the user's own cache directory). */
#ifndef KN_HASH_H
#define KN_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KN_HASH_SEED 0xcbf29ce484222325ull

/* Continue hash h over n bytes at p (start with KN_HASH_SEED). */
uint64_t kn_hash_bytes(uint64_t h, const void *p, size_t n);
/* Continue h over a NUL-terminated string, including a terminator byte so
 * that ("ab", "c") and ("a", "bc") hash differently. */
uint64_t kn_hash_str(uint64_t h, const char *s);

#endif
