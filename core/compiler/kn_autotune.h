/* kn_autotune: what max-autotune's measured search shares across plans:
 * the timing of one candidate and the persistent choice cache. Its options
 * (budget, progress callback) are the caller's: kn_settings.autotune.
 *
 * The search itself runs inside a plan's first call (core/compiler/kn_plan_tune.c):
 * each generated kernel is rendered in every configuration of
 * kn_kconfig_candidates and each library call (matmul, conv) is run in
 * every algorithm its backend offers (kn_backend.library_variant_label),
 * all on the call's real inputs; a candidate whose output differs from the
 * default's beyond tolerance is rejected and reported, the fastest of the
 * rest wins, and the default stays unless another is measurably faster.
 *
 * The cache is one text file, <cache_dir>/autotune.tsv, readable and
 * editable by people:
 *
 *   # kiln autotune cache v1
 *   # device 5f0c2a9e1b7d4c33 = NVIDIA H100 80GB HBM3, sm 9.0, driver 12080, ...; kiln 0.1.0
 *   5f0c2a9e1b7d4c33<TAB>a81d...<TAB>block=128 ept=4<TAB>12.4<TAB>15.0<TAB>0<TAB>k3_add_relu_f32_64x4096<TAB>label
 *
 * fields: device key (hash of the backend's identity and kiln's version),
 * kernel signature (hash of what the kernel computes on which shapes,
 * dtypes and strides: kernel names and graph positions are not in it),
 * the choice, its median time and the default's (us), pinned (1: chosen
 * by kiln.autotune.pin), the kernel's name and a label for people. A file
 * that does not parse is reported once and ignored (and rewritten by the
 * next save); choices of other devices are kept but not used.
 */
#ifndef KN_AUTOTUNE_H
#define KN_AUTOTUNE_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_settings.h" /* kn_autotune_opts: the search's options travel in the settings */
#include "kn_status.h"

#define KN_TUNE_KEY 17       /* 16 hex digits + NUL */
#define KN_TUNE_CHOICE 64
#define KN_TUNE_LABEL 128
#define KN_TUNE_NAME 80

/* One candidate's measurement: median of enough timed runs to be stable. */
typedef struct kn_tune_cand {
    char choice[KN_TUNE_CHOICE]; /* "default", "block=128 ept=4", "variant=3" */
    char label[KN_TUNE_LABEL];   /* what ran, for people ("cublaslt algo 23 ...") */
    double us;                   /* median; < 0 when not measured */
    int reps;
    char status[192];            /* "" when valid; else why it was rejected or failed */
} kn_tune_cand;

/* Statistics of timed runs (ms) in us: the median, and whether the
 * spread between the quartiles is within `tol` of it. */
double kn_autotune_median_us(double *ms, int n, double tol, bool *stable);

/* ---- the persistent cache ---- */

typedef struct kn_tune_entry {
    char dev[KN_TUNE_KEY], sig[KN_TUNE_KEY];
    char choice[KN_TUNE_CHOICE];
    double us, default_us;
    int pinned;
    char name[KN_TUNE_NAME];
    char label[KN_TUNE_LABEL];
} kn_tune_entry;

/* The device key for a backend identity ("" identity: a test device). */
void kn_autotune_device_key(const char *identity, char key[KN_TUNE_KEY]);
/* A 16-hex-digit key of some text. */
void kn_autotune_hash_key(const char *text, char key[KN_TUNE_KEY]);

/* Look up (dev, sig) in the cache of cache_dir (loaded at the first use;
 * a corrupt file is reported once, through kn_autotune_set_notice's
 * function, and ignored). NULL or "" cache_dir: an in-memory cache for
 * the process. Returns false when there is no entry. */
bool kn_autotune_cache_find(const char *cache_dir, const char *dev, const char *sig, kn_tune_entry *out);
/* Add or replace an entry, remembering identity for the file's device
 * line, and rewrite the file: under a lock on <file>.lock, the file as it
 * is now with this process's entries laid over it, written to a temporary
 * and renamed (processes tuning into one dir keep each other's entries). */
kn_status kn_autotune_cache_put(const char *cache_dir, const char *identity, const kn_tune_entry *e);
/* An entry found in the cache that cannot be used (a choice outside the
 * search space, say): reported once, through the notice function, and not
 * found again by this process until a new choice for its kernel is put. */
void kn_autotune_cache_reject(const char *cache_dir, const kn_tune_entry *e, const char *why);
/* Forget the process's copy (the next lookup reads the file again). */
void kn_autotune_cache_reset(void);
/* The cache file's path for cache_dir (buf); KN_ERR_ARG when it does not
 * fit (then buf is ""). */
kn_status kn_autotune_cache_path(const char *cache_dir, char *buf, size_t size);

/* Where a corrupt-file report goes (NULL: stderr). */
typedef void (*kn_autotune_notice_fn)(const char *msg, void *ud);
void kn_autotune_set_notice(kn_autotune_notice_fn fn, void *ud);

#endif
