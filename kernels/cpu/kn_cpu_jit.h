/* kn_cpu_jit: compile generated C at run time with the system C compiler
 * and load it with dlopen, through a persistent on-disk cache.
 *
 * Flow: kn_jit_compile(src) hashes (source, target "c", the compiler's
 * identification, kiln's version, the flags) into a key. A valid cache
 * entry for the key is loaded without running the compiler; otherwise the
 * compiler builds a shared object (cc -std=c11 -O3 -fPIC -shared
 * -fno-math-errno -ffp-contract=off -fwrapv -fopenmp-simd; never -ffast-math: NaN and
 * inf must behave as in the reference), which is loaded and then stored.
 *
 * Cache entries (<cache_dir>/c-<key>.kjit) hold a header (magic, key,
 * lengths, checksums), the source and compiler id they were built from,
 * and the .so bytes. They are written to a temporary file in the same
 * directory and renamed into place, so readers (other processes too) see a
 * whole entry or none, and two processes building the same key both
 * succeed. On load everything is checked (size, magic, key, source,
 * checksums); a corrupt or foreign entry is reported through the notice
 * callback ("kiln cache: entry PATH is corrupt (checksum mismatch);
 * rebuilding") and rebuilt, never loaded. dlopen needs a file: a verified
 * payload is copied to a private temporary file, opened and unlinked; so
 * unverified bytes are never loaded even if the entry changes meanwhile.
 *
 * If the cache directory cannot be created or written, compiling still
 * works without the persistent cache (a notice says why, once per call).
 * $CC selects the compiler (default "cc"; it may contain words: "ccache cc").
 */
#ifndef KN_CPU_JIT_H
#define KN_CPU_JIT_H

#include <stdbool.h>
#include <stdint.h>

#include "kn_status.h"

typedef struct kn_jit_lib kn_jit_lib;

typedef struct kn_jit_stats {
    int64_t hits;         /* loaded from a valid cache entry (no compiler run) */
    int64_t misses;       /* had to compile */
    int64_t compiles;     /* compiler runs, failed ones included */
    int64_t corrupt;      /* entries found corrupt or foreign and rebuilt */
    int64_t cache_errors; /* cache dir or entry could not be created or written */
    double compile_s;     /* wall seconds spent in the compiler */
    double load_s;        /* wall seconds verifying and loading cached entries */
} kn_jit_stats;

/* Whether a working C compiler exists (runs `$CC --version` once). If not,
 * the caller falls back to the reference executor with a notice. */
bool kn_jit_available(void);
/* The first line of `$CC --version` ("" when no compiler). Static storage. */
const char *kn_jit_compiler_id(void);

/* Compile (or load from cache_dir; NULL or "" = no persistent cache) the
 * C source src. On success *out is a library the caller owns and releases
 * with kn_jit_release. A compile error returns KN_ERR_UNSUPPORTED with the
 * compiler's first lines and the generated source line they point at. */
kn_status kn_jit_compile(const char *src, const char *cache_dir, kn_jit_lib **out);
/* kn_jit_compile; *cached (when not NULL) says whether the library was
 * loaded from cache_dir without running the compiler. */
kn_status kn_jit_compile_ex(const char *src, const char *cache_dir, kn_jit_lib **out, bool *cached);
/* The address of a function of the library, or NULL. */
void *kn_jit_symbol(kn_jit_lib *lib, const char *name);
/* Unload; functions from the library must not be called after. NULL is fine. */
void kn_jit_release(kn_jit_lib *lib);

/* Process-wide counters (thread-safe). */
void kn_jit_stats_get(kn_jit_stats *out);
void kn_jit_stats_reset(void);

/* Where cache notices go (a corrupt entry, an unwritable dir). fn NULL
 * restores the default: one line on stderr. msg is valid during the call. */
typedef void (*kn_jit_notice_fn)(const char *msg, void *ud);
void kn_jit_set_notice(kn_jit_notice_fn fn, void *ud);

#endif
