/* kn_hash: FNV-1a 64 (see kn_hash.h). */
#include "kn_hash.h"

#include <string.h>

uint64_t kn_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t kn_hash_str(uint64_t h, const char *s)
{
    return kn_hash_bytes(h, s, strlen(s) + 1);
}
