/* kn_autotune: timing statistics and the persistent choice cache
 * of max-autotune (see kn_autotune.h for the file format). */
#include "kn_autotune.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "kn_fs.h"
#include "kn_hash.h"

#ifndef KILN_VERSION
#define KILN_VERSION "dev"
#endif

static const char cache_magic[] = "# kiln autotune cache v1";
#define CACHE_FILE "autotune.tsv"
#define MAX_CACHE_BYTES ((long)64 << 20)

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double kn_autotune_median_us(double *ms, int n, double tol, bool *stable)
{
    if (n <= 0) {
        *stable = false;
        return -1;
    }
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    double med = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    double q1 = ms[n / 4], q3 = ms[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1];
    *stable = med > 0 && (q3 - q1) <= tol * med;
    return med * 1e3;
}

/* ---- keys ---- */

void kn_autotune_hash_key(const char *text, char key[KN_TUNE_KEY])
{
    snprintf(key, KN_TUNE_KEY, "%016llx",
             (unsigned long long)kn_hash_str(kn_hash_str(KN_HASH_SEED, "kiln-autotune-1"), text));
}

void kn_autotune_device_key(const char *identity, char key[KN_TUNE_KEY])
{
    char text[600];
    snprintf(text, sizeof text, "%s; kiln %s", identity, KILN_VERSION);
    kn_autotune_hash_key(text, key);
}

/* ---- the cache ---- */

typedef struct dev_line {
    char key[KN_TUNE_KEY];
    char text[600];
} dev_line;

/* Process-wide on purpose: it is the process's copy of one file, which
 * every state tuning into that dir shares (and merges into on a save). It
 * holds one dir's entries at a time: a lookup for another dir (a state
 * with its own kn_settings.cache_dir) loads that dir's file in their place. */
static struct {
    char *dir;        /* the cache dir the entries belong to (NULL: none loaded) */
    bool loaded;
    kn_tune_entry *e;
    int n, cap;
    dev_line *devs;
    int n_devs;
    /* what this process put: a save merges these into the file as it is
     * then, so that processes sharing the dir keep each other's entries */
    kn_tune_entry *mine;
    int n_mine, cap_mine;
    /* entries reported unusable (kn_autotune_cache_reject): not found again */
    kn_tune_entry *rejected;
    int n_rejected, cap_rejected;
} g_cache;

static kn_autotune_notice_fn g_notice;
static void *g_notice_ud;

void kn_autotune_set_notice(kn_autotune_notice_fn fn, void *ud)
{
    g_notice = fn;
    g_notice_ud = ud;
}

static void notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void notice(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_notice) g_notice(msg, g_notice_ud);
    else fprintf(stderr, "%s\n", msg);
}

kn_status kn_autotune_cache_path(const char *cache_dir, char *buf, size_t size)
{
    const char *dir = cache_dir && *cache_dir ? cache_dir : ".";
    kn_status st = kn_cache_dir_check(dir);
    if (st != KN_OK) {
        if (size) buf[0] = 0;
        return st;
    }
    return kn_cache_file_path(buf, size, dir, CACHE_FILE);
}

void kn_autotune_cache_reset(void)
{
    free(g_cache.dir);
    free(g_cache.e);
    free(g_cache.devs);
    free(g_cache.mine);
    free(g_cache.rejected);
    memset(&g_cache, 0, sizeof g_cache);
}

static bool is_key(const char *s)
{
    if (strlen(s) != KN_TUNE_KEY - 1) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}

static bool copy_field(char *dst, size_t size, const char *src)
{
    if (strlen(src) >= size) return false;
    memcpy(dst, src, strlen(src) + 1);
    return true;
}

/* Add or replace (same device and signature) e in the list *list. */
static kn_status list_put(kn_tune_entry **list, int *n, int *cap, const kn_tune_entry *e)
{
    for (int i = 0; i < *n; i++)
        if (strcmp((*list)[i].dev, e->dev) == 0 && strcmp((*list)[i].sig, e->sig) == 0) {
            (*list)[i] = *e;
            return KN_OK;
        }
    if (*n == *cap) {
        int new_cap = *cap ? *cap * 2 : 64;
        kn_tune_entry *grown = realloc(*list, sizeof *grown * (size_t)new_cap);
        if (!grown) return kn_error(KN_ERR_OOM, "out of host memory for the autotune cache");
        *list = grown;
        *cap = new_cap;
    }
    (*list)[(*n)++] = *e;
    return KN_OK;
}

static kn_status add_entry(const kn_tune_entry *e)
{
    return list_put(&g_cache.e, &g_cache.n, &g_cache.cap, e);
}

static void add_dev(const char *key, const char *text)
{
    for (int i = 0; i < g_cache.n_devs; i++)
        if (strcmp(g_cache.devs[i].key, key) == 0) {
            snprintf(g_cache.devs[i].text, sizeof g_cache.devs[i].text, "%s", text);
            return;
        }
    dev_line *n = realloc(g_cache.devs, sizeof *n * (size_t)(g_cache.n_devs + 1));
    if (!n) return; /* the device line is a comment: losing it loses nothing */
    g_cache.devs = n;
    snprintf(n[g_cache.n_devs].key, KN_TUNE_KEY, "%s", key);
    snprintf(n[g_cache.n_devs].text, sizeof n[g_cache.n_devs].text, "%s", text);
    g_cache.n_devs++;
}

/* Parse one entry line (tabs separate 8 fields); why gets the reason. */
static bool parse_line(char *line, kn_tune_entry *e, char *why, size_t size)
{
    char *f[8];
    int n = 0;
    for (char *p = line; n < 8;) {
        f[n++] = p;
        char *t = strchr(p, '\t');
        if (!t) break;
        *t = 0;
        p = t + 1;
    }
    if (n != 8) {
        snprintf(why, size, "%d fields instead of 8", n);
        return false;
    }
    memset(e, 0, sizeof *e);
    char *end;
    if (!is_key(f[0]) || !is_key(f[1])) {
        snprintf(why, size, "a key is not 16 hex digits");
        return false;
    }
    memcpy(e->dev, f[0], KN_TUNE_KEY);
    memcpy(e->sig, f[1], KN_TUNE_KEY);
    if (!f[2][0] || !copy_field(e->choice, sizeof e->choice, f[2])) {
        snprintf(why, size, "bad choice '%.40s'", f[2]);
        return false;
    }
    e->us = strtod(f[3], &end);
    if (end == f[3] || *end) {
        snprintf(why, size, "bad time '%.20s'", f[3]);
        return false;
    }
    e->default_us = strtod(f[4], &end);
    if (end == f[4] || *end) {
        snprintf(why, size, "bad default time '%.20s'", f[4]);
        return false;
    }
    if (strcmp(f[5], "0") != 0 && strcmp(f[5], "1") != 0) {
        snprintf(why, size, "pinned is '%.10s', not 0 or 1", f[5]);
        return false;
    }
    e->pinned = f[5][0] == '1';
    if (!copy_field(e->name, sizeof e->name, f[6]) || !copy_field(e->label, sizeof e->label, f[7])) {
        snprintf(why, size, "a name or label is too long");
        return false;
    }
    return true;
}

/* Read the file at path into g_cache (adding to what is there); a file
 * that does not parse is reported and none of its entries are kept. */
static void load_file(const char *path)
{
    long size = 0;
    errno = 0;
    char *text = kn_read_file(path, MAX_CACHE_BYTES, &size);
    if (!text) {
        if (errno != ENOENT)
            notice("kiln: autotune cache %s cannot be read (%s); it is ignored", path, strerror(errno));
        return;
    }
    int n_before = g_cache.n, n_devs_before = g_cache.n_devs;
    char why[160] = "";
    int lineno = 0;
    bool ok = strncmp(text, cache_magic, strlen(cache_magic)) == 0;
    if (!ok) snprintf(why, sizeof why, "it does not start with '%s'", cache_magic);
    if (ok && size > 0 && text[size - 1] != '\n') {
        ok = false;
        snprintf(why, sizeof why, "it is truncated (the last line has no end)");
    }
    for (char *p = text; ok && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        lineno++;
        if (p[0] == '#') {
            /* "# device KEY = TEXT" keeps its text for the next save */
            if (strncmp(p, "# device ", 9) == 0 && strlen(p) > 9 + 16 + 3 && p[9 + 16] == ' ') {
                char key[KN_TUNE_KEY];
                snprintf(key, sizeof key, "%.16s", p + 9);
                if (is_key(key)) add_dev(key, p + 9 + 16 + 3);
            }
        } else if (p[0]) {
            kn_tune_entry e;
            char lwhy[128];
            if (!parse_line(p, &e, lwhy, sizeof lwhy)) {
                ok = false;
                snprintf(why, sizeof why, "line %d: %s", lineno, lwhy);
            } else if (add_entry(&e) != KN_OK) {
                ok = false;
                snprintf(why, sizeof why, "out of host memory");
            }
        }
        if (!nl) break;
        p = nl + 1;
    }
    free(text);
    if (!ok) {
        notice("kiln: autotune cache %s is corrupt (%s); it is ignored and will be rewritten", path, why);
        g_cache.n = n_before;
        g_cache.n_devs = n_devs_before;
    }
}

static void cache_load(const char *cache_dir)
{
    const char *dir = cache_dir ? cache_dir : "";
    if (g_cache.loaded && strcmp(g_cache.dir ? g_cache.dir : "", dir) == 0) return;
    kn_autotune_cache_reset();
    g_cache.loaded = true;
    if (!*dir) return;
    g_cache.dir = strdup(dir); /* NULL (out of memory): an in-memory cache */
    /* a dir too long for kiln's paths has no file: kn_autotune_cache_put says why */
    char path[KN_CACHE_PATH_MAX];
    if (kn_cache_dir_check(dir) != KN_OK || kn_autotune_cache_path(dir, path, sizeof path) != KN_OK) return;
    load_file(path);
}

static int list_find(const kn_tune_entry *list, int n, const char *dev, const char *sig)
{
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].dev, dev) == 0 && strcmp(list[i].sig, sig) == 0) return i;
    return -1;
}

void kn_autotune_cache_reject(const char *cache_dir, const kn_tune_entry *e, const char *why)
{
    cache_load(cache_dir);
    if (list_find(g_cache.rejected, g_cache.n_rejected, e->dev, e->sig) >= 0) return;
    /* out of memory: it may be reported again, which is harmless */
    (void)list_put(&g_cache.rejected, &g_cache.n_rejected, &g_cache.cap_rejected, e);
    char path[KN_CACHE_PATH_MAX];
    if (kn_autotune_cache_path(cache_dir, path, sizeof path) != KN_OK || !cache_dir || !*cache_dir)
        snprintf(path, sizeof path, "(this process's)");
    notice("kiln: autotune cache %s: the entry for kernel %s (choice '%s') is invalid: %s; it is ignored and the "
           "kernel is measured again",
           path, e->name, e->choice, why);
}

bool kn_autotune_cache_find(const char *cache_dir, const char *dev, const char *sig, kn_tune_entry *out)
{
    cache_load(cache_dir);
    if (list_find(g_cache.rejected, g_cache.n_rejected, dev, sig) >= 0) return false;
    for (int i = 0; i < g_cache.n; i++)
        if (strcmp(g_cache.e[i].dev, dev) == 0 && strcmp(g_cache.e[i].sig, sig) == 0) {
            *out = g_cache.e[i];
            return true;
        }
    return false;
}

/* Tabs and newlines would break the line format: names and labels lose them. */
static void put_clean(FILE *f, const char *s)
{
    for (; *s; s++) fputc(*s == '\t' || *s == '\n' || *s == '\r' ? ' ' : *s, f);
}

static kn_status write_file(const char *path)
{
    char tmp[KN_CACHE_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return kn_error(KN_ERR_IO, "autotune cache: cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "%s\n", cache_magic);
    fprintf(f, "# one line per kernel: device, signature, choice, median us, default us, pinned, kernel, label\n");
    for (int i = 0; i < g_cache.n_devs; i++) {
        fprintf(f, "# device %s = ", g_cache.devs[i].key);
        put_clean(f, g_cache.devs[i].text);
        fputc('\n', f);
    }
    for (int i = 0; i < g_cache.n; i++) {
        const kn_tune_entry *e = &g_cache.e[i];
        fprintf(f, "%s\t%s\t", e->dev, e->sig);
        put_clean(f, e->choice);
        fprintf(f, "\t%.3f\t%.3f\t%d\t", e->us, e->default_us, e->pinned ? 1 : 0);
        put_clean(f, e->name);
        fputc('\t', f);
        put_clean(f, e->label);
        fputc('\n', f);
    }
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return kn_error(KN_ERR_IO, "autotune cache: cannot write %s: %s", path, strerror(err));
    }
    return KN_OK;
}

/* Several processes may tune into one dir at once. Each save, under an
 * exclusive lock on <file>.lock, reads the file as it is now, lays this
 * process's own entries over it and replaces it (temporary, then rename):
 * a save never drops an entry another process wrote in the meantime. */
static kn_status cache_save(void)
{
    if (!g_cache.dir) return KN_OK;
    KN_TRY(kn_cache_dir_check(g_cache.dir));
    if (!kn_make_dirs(g_cache.dir))
        return kn_error(KN_ERR_IO, "autotune cache: cannot create %s: %s", g_cache.dir, strerror(errno));
    char path[KN_CACHE_PATH_MAX], lock_path[KN_CACHE_PATH_MAX + 8];
    KN_TRY(kn_autotune_cache_path(g_cache.dir, path, sizeof path));
    snprintf(lock_path, sizeof lock_path, "%s.lock", path);
    int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0)
        return kn_error(KN_ERR_IO, "autotune cache: cannot open the lock file %s: %s", lock_path, strerror(errno));
    while (flock(lock_fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            int err = errno;
            close(lock_fd);
            return kn_error(KN_ERR_IO, "autotune cache: cannot lock %s: %s", lock_path, strerror(err));
        }
    /* the file as the other processes left it, then ours on top */
    g_cache.n = 0;
    load_file(path);
    kn_status st = KN_OK;
    for (int i = 0; i < g_cache.n_mine && st == KN_OK; i++) st = add_entry(&g_cache.mine[i]);
    if (st == KN_OK) st = write_file(path);
    flock(lock_fd, LOCK_UN);
    close(lock_fd);
    return st;
}

kn_status kn_autotune_cache_put(const char *cache_dir, const char *identity, const kn_tune_entry *e)
{
    cache_load(cache_dir);
    char text[600];
    snprintf(text, sizeof text, "%s; kiln %s", identity, KILN_VERSION);
    add_dev(e->dev, text);
    KN_TRY(add_entry(e));
    KN_TRY(list_put(&g_cache.mine, &g_cache.n_mine, &g_cache.cap_mine, e));
    int bad = list_find(g_cache.rejected, g_cache.n_rejected, e->dev, e->sig);
    if (bad >= 0) g_cache.rejected[bad] = g_cache.rejected[--g_cache.n_rejected]; /* a new choice replaces it */
    kn_status st = cache_save();
    /* said once per process: the choices still serve this process */
    static bool told;
    if (st != KN_OK && !told) {
        told = true;
        notice("kiln: %s; the autotune choices last for this process only", kn_last_error());
    }
    return st;
}
