/* kn_settings: the options one caller runs ops with (a Lua state sets its
 * own through kiln.config): whether f32 library calls may use TF32, where
 * compiled kernels and autotune choices are cached, max-autotune's search
 * options, and what the backends log.
 *
 * They travel with the work, never through process globals: an eager op
 * carries them in its kn_opcall, a plan keeps the ones it was built with
 * (kn_plan_build), and every function that runs device work on a caller's
 * behalf takes them. Two Lua states of one process with different settings
 * each get their own for their own calls. NULL means the defaults
 * (kn_settings_or_defaults): TF32 off, the cache in $KILN_CACHE_DIR or
 * ~/.cache/kiln, a 20 s search budget, the logs $KILN_LOGS names.
 */
#ifndef KN_SETTINGS_H
#define KN_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_fs.h"

/* Where a max-autotune search stands, for a progress bar. */
typedef struct kn_autotune_progress {
    const char *kernel;   /* the kernel being measured ("" when done) */
    int kernels_done, kernels_total;
    int candidates;       /* measured so far, all kernels */
    double elapsed_s, budget_s;
    bool done;            /* the last report of a search */
    /* a search resuming one Ctrl-C stopped: kernels left to tune of the
     * plan's tunable ones ("resuming: 5 of 14 kernels left to tune"); 0: none */
    int resume_left, resume_total;
} kn_autotune_progress;

/* max-autotune's search options (core/compiler/kn_autotune.h). */
typedef struct kn_autotune_opts {
    double budget_s;      /* search time per compiled function (kiln.config.autotune_budget_s) */
    void (*progress)(const kn_autotune_progress *p, void *ud); /* NULL: no reports */
    void *progress_ud;
    /* testing the rejection path: candidate N (N >= 1) of every tuned
     * kernel gets its output corrupted after it runs; 0: none
     * (KILN_AUTOTUNE_FAULT) */
    int fault_candidate;
} kn_autotune_opts;

/* What the backends print on stderr, from $KILN_LOGS (kn_settings.logs). */
enum {
    KN_SETTINGS_LOG_LIBRARY = 1,   /* "library": each new cuBLASLt or cuDNN call and its algorithm */
    KN_SETTINGS_LOG_ATTENTION = 2, /* "fusion", "library" or "all": why an attention runs unfused on the GPU */
    KN_SETTINGS_LOG_NVRTC = 4,     /* "nvrtc": each kernel module NVRTC compiles, and how long it took */
};

/* What an f32 kernel's result may be (kiln.config.f32_precision):
 * IEEE: as true f32 computes it (FFMA, or a method as accurate: the
 * contract the autotuner will hold split-precision candidates to);
 * TF32: TF32 tensor cores allowed (allow_tf32's meaning); FASTEST: any
 * engine. */
typedef enum { KN_F32_IEEE, KN_F32_TF32, KN_F32_FASTEST } kn_f32_precision;

typedef struct kn_settings {
    kn_f32_precision f32_precision; /* kiln.config.f32_precision (allow_tf32: its alias) */
    /* the persistent cache of compiled kernels, autotune choices and
     * library plans (kiln.config.cache_dir); "": none, memory only. One
     * byte more than a dir may have: a longer one is kept cut to
     * KN_CACHE_DIR_MAX + 1 bytes, which kn_cache_dir_check then refuses,
     * instead of using the cut path (kn_settings_set_cache_dir). */
    char cache_dir[KN_CACHE_DIR_MAX + 2];
    kn_autotune_opts autotune;
    int logs; /* KN_SETTINGS_LOG_* */
    /* a training step's kept forward values, as a fraction of all of them
     * (kiln.config.activation_memory_budget; 1: keep all; lower: the
     * recompute pass computes cheap ones again in the backward) */
    double activation_memory_budget;
} kn_settings;

/* Whether f32 matmul and conv may use TF32: every precision but IEEE
 * (kiln.config.allow_tf32 reads it). */
static inline bool kn_settings_allow_tf32(const kn_settings *s)
{
    return s->f32_precision != KN_F32_IEEE;
}

/* The defaults into s (what NULL settings mean). */
void kn_settings_init(kn_settings *s);

/* s, or the defaults when s is NULL: read from the environment once per
 * process, then never changed. */
const kn_settings *kn_settings_or_defaults(const kn_settings *s);

/* The cache dir of s (or of the defaults) as the caches take it: "" for
 * none. */
const char *kn_settings_cache_dir(const kn_settings *s);

/* Set s's cache dir to the len bytes at dir. False when they are no valid
 * dir: longer than KN_CACHE_DIR_MAX (kept cut to KN_CACHE_DIR_MAX + 1
 * bytes, which the caches refuse) or holding a NUL byte (kept as "": no
 * file goes to the dir cut at the NUL). */
bool kn_settings_set_cache_dir(kn_settings *s, const char *dir, size_t len);

#endif
