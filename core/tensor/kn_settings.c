/* kn_settings: the defaults and the cache dir's rules (see kn_settings.h). */
#include "kn_settings.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kn_settings_init(kn_settings *s)
{
    memset(s, 0, sizeof *s);
    s->f32_precision = KN_F32_IEEE;
    const char *env = getenv("KILN_CACHE_DIR"), *home = getenv("HOME");
    if (env && *env) kn_settings_set_cache_dir(s, env, strlen(env));
    else if (home && *home) snprintf(s->cache_dir, sizeof s->cache_dir, "%s/.cache/kiln", home);
    s->autotune.budget_s = 20.0;
    s->activation_memory_budget = 1.0;
    /* the backends' own logs: KILN_LOGS names them (kiln.log cannot) */
    const char *logs = getenv("KILN_LOGS");
    if (logs && strstr(logs, "library")) s->logs |= KN_SETTINGS_LOG_LIBRARY;
    if (logs && strstr(logs, "nvrtc")) s->logs |= KN_SETTINGS_LOG_NVRTC;
    if (logs && (strstr(logs, "fusion") || strstr(logs, "library") || strstr(logs, "all")))
        s->logs |= KN_SETTINGS_LOG_ATTENTION;
}

/* Process-wide on purpose: what NULL settings mean is the process's
 * environment, read once (getenv scans all of it) and never written
 * again, so every caller without settings of its own sees the same. */
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;
static kn_settings defaults;

static void init_defaults(void)
{
    kn_settings_init(&defaults);
}

const kn_settings *kn_settings_or_defaults(const kn_settings *s)
{
    if (s) return s;
    pthread_once(&defaults_once, init_defaults);
    return &defaults;
}

const char *kn_settings_cache_dir(const kn_settings *s)
{
    return kn_settings_or_defaults(s)->cache_dir;
}

bool kn_settings_set_cache_dir(kn_settings *s, const char *dir, size_t len)
{
    if (memchr(dir, 0, len)) {
        s->cache_dir[0] = 0;
        return false;
    }
    if (len > KN_CACHE_DIR_MAX) {
        memcpy(s->cache_dir, dir, KN_CACHE_DIR_MAX + 1);
        s->cache_dir[KN_CACHE_DIR_MAX + 1] = 0;
        return false;
    }
    memcpy(s->cache_dir, dir, len);
    s->cache_dir[len] = 0;
    return true;
}
