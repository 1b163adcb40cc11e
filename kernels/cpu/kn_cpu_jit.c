/* kn_cpu_jit: run-time C compilation with a verified persistent cache (see
 * kn_cpu_jit.h for the contract and the entry format's invariants). */
#include "kn_cpu_jit.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kn_fs.h"
#include "kn_hash.h"
#include "kn_clock.h"
#include "kn_phase.h"

#ifndef KILN_VERSION
#define KILN_VERSION "dev"
#endif

extern char **environ;

/* The flags are part of the key: changing them must not load old objects.
 * -O3, not -O2: GCC 12's -O2 cost model does not version loops for possible
 * aliasing, so the generated loops (no restrict: an output may share a
 * buffer with an input) would stay scalar. -fwrapv: integer kernels wrap
 * instead of being undefined on overflow. -fopenmp-simd: the autotuner's
 * vector-width candidates (`#pragma omp simd`; no OpenMP runtime). */
static const char *const jit_flags[] = {"-std=c11", "-O3", "-fPIC", "-shared", "-fno-math-errno",
                                        "-ffp-contract=off", "-fwrapv", "-fopenmp-simd"};
#define N_FLAGS (sizeof jit_flags / sizeof jit_flags[0])
#define MAX_CC_WORDS 8
#define LOG_LINES 20
#define MAX_ENTRY_BYTES ((long)1 << 28)

struct kn_jit_lib {
    void *handle;
};

/* The on-disk entry header; the source, the compiler id and the payload
 * follow in that order. Host byte order: a cache dir is per machine kind
 * (the compiler id is in the key anyway). */
typedef struct entry_header {
    char magic[8];
    uint64_t key;
    uint64_t src_len, id_len, payload_len;
    uint64_t payload_sum; /* FNV-1a of the payload */
    uint64_t header_sum;  /* FNV-1a of the fields above, the source and the id */
} entry_header;

static const char entry_magic[8] = {'K', 'N', 'J', 'I', 'T', 0, 0, 1};

static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;
static kn_jit_stats jit_stats;
static kn_jit_notice_fn notice_fn;
static void *notice_ud;
static pthread_once_t cc_once = PTHREAD_ONCE_INIT;
static char cc_id[256];
static bool cc_ok;

/* ---- small helpers ---- */

static void notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void notice(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&jit_lock);
    kn_jit_notice_fn fn = notice_fn;
    void *ud = notice_ud;
    pthread_mutex_unlock(&jit_lock);
    if (fn) fn(msg, ud);
    else fprintf(stderr, "%s\n", msg);
}

void kn_jit_set_notice(kn_jit_notice_fn fn, void *ud)
{
    pthread_mutex_lock(&jit_lock);
    notice_fn = fn;
    notice_ud = ud;
    pthread_mutex_unlock(&jit_lock);
}

void kn_jit_stats_get(kn_jit_stats *out)
{
    pthread_mutex_lock(&jit_lock);
    *out = jit_stats;
    pthread_mutex_unlock(&jit_lock);
}

void kn_jit_stats_reset(void)
{
    pthread_mutex_lock(&jit_lock);
    memset(&jit_stats, 0, sizeof jit_stats);
    pthread_mutex_unlock(&jit_lock);
}

#define STAT_ADD(field, v)              \
    do {                                \
        pthread_mutex_lock(&jit_lock);  \
        jit_stats.field += (v);         \
        pthread_mutex_unlock(&jit_lock); \
    } while (0)

/* Split $CC (or "cc") into argv words, in buf. Returns the word count. */
static int cc_words(char *buf, size_t size, char **argv)
{
    const char *cc = getenv("CC");
    snprintf(buf, size, "%s", cc && *cc ? cc : "cc");
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t", &save); tok && n < MAX_CC_WORDS; tok = strtok_r(NULL, " \t", &save))
        argv[n++] = tok;
    return n;
}

/* ---- dying cleanly while the compiler runs ----
 * The compiler runs in its own process group (below), so a SIGTERM or
 * SIGHUP sent to kiln does not reach it: cc and cc1 ran on as orphans and
 * their kiln-jit-* folder stayed behind. Every work folder and compiler in
 * use is registered here; on SIGTERM or SIGHUP the handler stops each
 * compiler's group (SIGTERM first, so the driver deletes its own temporary
 * files), waits for it, removes the folder, and re-raises the signal with
 * the disposition kiln had before (by default: it dies of it). */
#define MAX_WORKDIRS 64
typedef struct {
    volatile sig_atomic_t in_use;
    volatile sig_atomic_t pid; /* the compiler, leader of its group; 0: none running */
    char dir[512];
} workdir_slot;
static workdir_slot workdirs[MAX_WORKDIRS];
/* the only files a work folder holds (the compiler's own go to its TMPDIR) */
static const char *const workdir_files[] = {"kernel.c", "kernel.so", "cc.log", "version.txt"};
static struct sigaction before_term, before_hup;
static pthread_once_t cleanup_once = PTHREAD_ONCE_INIT;

/* dir + "/" + name into out, with no library call that is unsafe in a signal handler */
static void join_path(char *out, size_t size, const char *dir, const char *name)
{
    size_t n = 0;
    for (const char *p = dir; *p && n + 1 < size; p++) out[n++] = *p;
    if (n + 1 < size) out[n++] = '/';
    for (const char *p = name; *p && n + 1 < size; p++) out[n++] = *p;
    out[n] = 0;
}

static void stop_compilers_and_remove_workdirs(void)
{
    for (int i = 0; i < MAX_WORKDIRS; i++) {
        if (!workdirs[i].in_use) continue;
        pid_t pid = (pid_t)workdirs[i].pid;
        if (pid > 0) {
            kill(-pid, SIGTERM);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
            kill(-pid, SIGKILL); /* anything of the group still there */
        }
        char path[600];
        for (size_t f = 0; f < sizeof workdir_files / sizeof workdir_files[0]; f++) {
            join_path(path, sizeof path, workdirs[i].dir, workdir_files[f]);
            unlink(path);
        }
        rmdir(workdirs[i].dir);
    }
}

static void on_terminating_signal(int sig)
{
    int saved = errno;
    stop_compilers_and_remove_workdirs();
    sigaction(sig, sig == SIGTERM ? &before_term : &before_hup, NULL);
    errno = saved;
    raise(sig); /* delivered when this handler returns, to what kiln had before */
}

static void install_cleanup_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_terminating_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGHUP);
    /* a signal kiln ignores (nohup) stays ignored */
    if (sigaction(SIGTERM, NULL, &before_term) == 0 && before_term.sa_handler != SIG_IGN)
        sigaction(SIGTERM, &sa, NULL);
    if (sigaction(SIGHUP, NULL, &before_hup) == 0 && before_hup.sa_handler != SIG_IGN)
        sigaction(SIGHUP, &sa, NULL);
}

/* Register a work folder; its slot, or -1 when all are taken (then it is
 * merely not cleaned up on a signal). */
static int workdir_register(const char *dir)
{
    int slot = -1;
    pthread_mutex_lock(&jit_lock);
    for (int i = 0; i < MAX_WORKDIRS && slot < 0; i++) {
        if (workdirs[i].in_use) continue;
        snprintf(workdirs[i].dir, sizeof workdirs[i].dir, "%s", dir);
        workdirs[i].pid = 0;
        workdirs[i].in_use = 1; /* last: the handler reads dir once this is set */
        slot = i;
    }
    pthread_mutex_unlock(&jit_lock);
    return slot;
}

static void workdir_unregister(int slot)
{
    if (slot < 0) return;
    pthread_mutex_lock(&jit_lock);
    workdirs[slot].in_use = 0;
    workdirs[slot].pid = 0;
    pthread_mutex_unlock(&jit_lock);
}

/* Run argv with stdout and stderr into the file log_path; exit status in
 * *status (-1 when it could not start). slot: its work folder's. */
static void run_logged_now(char **argv, const char *log_path, int slot, int *status);

/* The C compiler's runs are a first call's kernel compile, as NVRTC's are
 * on a GPU (kn_phase). */
static void run_logged(char **argv, const char *log_path, int slot, int *status)
{
    kn_phase_begin(KN_PHASE_NVRTC);
    run_logged_now(argv, log_path, slot, status);
    kn_phase_end(KN_PHASE_NVRTC);
}

static void run_logged_now(char **argv, const char *log_path, int slot, int *status)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    /* its own process group: a Ctrl-C at the terminal is kiln's to handle
     * (between two steps, keeping what is done), not the compiler's to die
     * of halfway through a kernel (the autotuner's candidates compile while
     * the user may press it) */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    pid_t pid;
    /* no SIGTERM between the start and the registration: the handler must
     * know every compiler that runs */
    sigset_t term, before;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigaddset(&term, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &term, &before);
    int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    if (rc == 0 && slot >= 0) workdirs[slot].pid = pid;
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    *status = -1;
    if (rc != 0) return;
    int ws;
    pid_t done;
    while ((done = waitpid(pid, &ws, 0)) < 0 && errno == EINTR) {}
    if (slot >= 0) workdirs[slot].pid = 0;
    if (done < 0) return;
    *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
}

/* A whole file into a new buffer (NUL-terminated too); NULL if unreadable. */

static bool write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

/* A temporary directory for one compilation: $TMPDIR or /tmp, registered
 * (in *slot) for removal on SIGTERM; remove_workdir undoes both. */
static bool make_workdir(char *out, size_t size, int *slot)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, size, "%s/kiln-jit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    pthread_once(&cleanup_once, install_cleanup_handlers);
    sigset_t term, before;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigaddset(&term, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &term, &before); /* made and registered, or neither */
    bool made = mkdtemp(out) != NULL;
    *slot = made ? workdir_register(out) : -1;
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    return made;
}

static void remove_workdir(const char *dir, int slot)
{
    char path[600];
    for (size_t f = 0; f < sizeof workdir_files / sizeof workdir_files[0]; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, workdir_files[f]);
        unlink(path);
    }
    rmdir(dir);
    workdir_unregister(slot);
}

/* ---- the compiler ---- */

static void cc_probe(void)
{
    char buf[512], *argv[MAX_CC_WORDS + 2];
    int n = cc_words(buf, sizeof buf, argv);
    if (n == 0) return;
    argv[n++] = "--version";
    argv[n] = NULL;
    char dir[512], log[600];
    int slot;
    if (!make_workdir(dir, sizeof dir, &slot)) return;
    snprintf(log, sizeof log, "%s/version.txt", dir);
    int status;
    run_logged(argv, log, slot, &status);
    long size = 0;
    char *text = kn_read_file(log, MAX_ENTRY_BYTES, &size);
    remove_workdir(dir, slot);
    if (status == 0 && text) {
        size_t len = strcspn(text, "\n");
        snprintf(cc_id, sizeof cc_id, "%.*s", (int)len, text);
        cc_ok = true;
    }
    free(text);
}

bool kn_jit_available(void)
{
    pthread_once(&cc_once, cc_probe);
    return cc_ok;
}

const char *kn_jit_compiler_id(void)
{
    pthread_once(&cc_once, cc_probe);
    return cc_id;
}

/* The compiler's log (first lines) and, for its first "kernel.c:N:", the
 * generated source line N, into a KN_ERR_UNSUPPORTED message. */
static kn_status compile_error(const char *src, const char *log, int status)
{
    char head[3000] = "";
    size_t used = 0;
    int lines = 0;
    for (const char *p = log ? log : ""; *p && lines < LOG_LINES; lines++) {
        size_t len = strcspn(p, "\n");
        int w = snprintf(head + used, sizeof head - used, "  %.*s\n", (int)len, p);
        if (w < 0 || (size_t)w >= sizeof head - used) break;
        used += (size_t)w;
        p += len + (p[len] == '\n');
    }
    char at[300] = "";
    long ln = 0; /* the first "kernel.c:LINE:" (skipping "kernel.c: In function") */
    for (const char *m = log ? strstr(log, "kernel.c:") : NULL; m && ln <= 0; m = strstr(m + 9, "kernel.c:"))
        ln = strtol(m + 9, NULL, 10);
    if (ln > 0) {
        const char *q = src;
        for (long i = 1; i < ln && q; i++) {
            q = strchr(q, '\n');
            if (q) q++;
        }
        if (q) snprintf(at, sizeof at, "generated source line %ld: %.*s\n", ln,
                        (int)strcspn(q, "\n") > 200 ? 200 : (int)strcspn(q, "\n"), q);
    }
    return kn_error(KN_ERR_UNSUPPORTED, "C compiler (%s) failed on generated code (status %d):\n%s%s",
                    kn_jit_compiler_id(), status, head, at);
}

/* Compile src into a shared object; its bytes in *so (caller frees). */
static kn_status compile_so(const char *src, char **so, long *so_len)
{
    char dir[512], cpath[600], opath[600], lpath[600];
    int slot;
    if (!make_workdir(dir, sizeof dir, &slot))
        return kn_error(KN_ERR_IO, "jit: cannot create a temporary directory: %s", strerror(errno));
    snprintf(cpath, sizeof cpath, "%s/kernel.c", dir);
    snprintf(opath, sizeof opath, "%s/kernel.so", dir);
    snprintf(lpath, sizeof lpath, "%s/cc.log", dir);
    kn_status st = KN_OK;
    FILE *f = fopen(cpath, "wb");
    if (!f || fputs(src, f) < 0) {
        st = kn_error(KN_ERR_IO, "jit: cannot write %s: %s", cpath, strerror(errno));
        if (f) fclose(f);
    } else if (fclose(f) != 0) {
        st = kn_error(KN_ERR_IO, "jit: cannot write %s: %s", cpath, strerror(errno));
    }
    if (st == KN_OK) {
        char buf[512], *argv[MAX_CC_WORDS + N_FLAGS + 8];
        int n = cc_words(buf, sizeof buf, argv);
        for (size_t i = 0; i < N_FLAGS; i++) argv[n++] = (char *)jit_flags[i];
        argv[n++] = "-o";
        argv[n++] = opath;
        argv[n++] = cpath;
        argv[n++] = "-lm";
        argv[n] = NULL;
        double t0 = kn_clock_s();
        int status;
        run_logged(argv, lpath, slot, &status);
        pthread_mutex_lock(&jit_lock);
        jit_stats.compiles++;
        jit_stats.compile_s += kn_clock_s() - t0;
        pthread_mutex_unlock(&jit_lock);
        long loglen = 0;
        char *log = kn_read_file(lpath, MAX_ENTRY_BYTES, &loglen);
        if (status != 0) st = compile_error(src, log, status);
        else if (!(*so = kn_read_file(opath, MAX_ENTRY_BYTES, so_len)))
            st = kn_error(KN_ERR_IO, "jit: the compiler wrote no %s", opath);
        free(log);
    }
    remove_workdir(dir, slot);
    return st;
}

/* ---- the cache ---- */


static uint64_t header_sum(const entry_header *h, const char *src, const char *id)
{
    uint64_t s = kn_hash_bytes(KN_HASH_SEED, h, offsetof(entry_header, header_sum));
    s = kn_hash_bytes(s, src, (size_t)h->src_len);
    return kn_hash_bytes(s, id, (size_t)h->id_len);
}

/* Check a cache entry's bytes against what we expect; NULL if valid (then
 * *payload points into buf), else the reason it is not. */
static const char *entry_verify(const char *buf, long size, uint64_t key, const char *src,
                                const char *id, const char **payload, uint64_t *payload_len)
{
    entry_header h;
    if ((size_t)size < sizeof h) return "truncated header";
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, entry_magic, sizeof h.magic) != 0) return "bad magic: not a kiln JIT entry";
    uint64_t body = (uint64_t)size - sizeof h;
    if (h.src_len > body || h.id_len > body || h.payload_len > body ||
        h.src_len + h.id_len + h.payload_len != body)
        return "length mismatch: truncated or extended";
    const char *esrc = buf + sizeof h, *eid = esrc + h.src_len;
    if (header_sum(&h, esrc, eid) != h.header_sum) return "header checksum mismatch";
    if (h.key != key) return "key mismatch: a foreign entry";
    if (h.src_len != strlen(src) || memcmp(esrc, src, h.src_len) != 0 || h.id_len != strlen(id) ||
        memcmp(eid, id, h.id_len) != 0)
        return "built from another source or compiler";
    *payload = eid + h.id_len;
    *payload_len = h.payload_len;
    if (kn_hash_bytes(KN_HASH_SEED, *payload, (size_t)h.payload_len) != h.payload_sum)
        return "checksum mismatch";
    return NULL;
}

/* Write an entry atomically (temporary file in dir, then rename). */
static bool entry_write(const char *dir, const char *path, uint64_t key, const char *src,
                        const char *id, const char *so, long so_len)
{
    char tmp[KN_CACHE_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%016llx-XXXXXX", dir, (unsigned long long)key);
    int fd = mkstemp(tmp); /* the dir was checked (kn_cache_dir_check): tmp is whole */
    if (fd < 0) return false;
    entry_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, entry_magic, sizeof h.magic);
    h.key = key;
    h.src_len = strlen(src);
    h.id_len = strlen(id);
    h.payload_len = (uint64_t)so_len;
    h.payload_sum = kn_hash_bytes(KN_HASH_SEED, so, (size_t)so_len);
    h.header_sum = header_sum(&h, src, id);
    bool ok = write_all(fd, &h, sizeof h) && write_all(fd, src, h.src_len) &&
              write_all(fd, id, h.id_len) && write_all(fd, so, (size_t)so_len);
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) unlink(tmp);
    return ok;
}

/* dlopen bytes we trust: copy them into a private temporary file in dir
 * (falling back to $TMPDIR), open it, unlink it. */
static void *load_bytes(const char *dir, const char *so, size_t len, char *err, size_t errsize)
{
    char path[KN_CACHE_PATH_MAX];
    const char *tmpdir = getenv("TMPDIR");
    const char *dirs[2] = {dir, tmpdir && *tmpdir ? tmpdir : "/tmp"};
    for (int i = 0; i < 2; i++) {
        if (!dirs[i]) continue;
        /* a cut template has no XXXXXX: mkstemp then fails instead of writing elsewhere */
        if (kn_cache_file_path(path, sizeof path, dirs[i], ".load-XXXXXX") != KN_OK) continue;
        int fd = mkstemp(path);
        if (fd < 0) continue;
        bool ok = write_all(fd, so, len);
        ok = close(fd) == 0 && ok;
        void *h = ok ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
        if (!h) snprintf(err, errsize, "%s", ok ? dlerror() : strerror(errno));
        unlink(path);
        if (h) return h;
    }
    return NULL;
}

/* The key: everything that changes the object code. */
static uint64_t jit_key(const char *src, const char *id)
{
    uint64_t h = kn_hash_str(KN_HASH_SEED, "kiln-jit-entry-1");
    h = kn_hash_str(h, "c");
    h = kn_hash_str(h, id);
    h = kn_hash_str(h, KILN_VERSION);
    for (size_t i = 0; i < N_FLAGS; i++) h = kn_hash_str(h, jit_flags[i]);
    return kn_hash_str(h, src);
}

/* Try the cache entry at path; a handle, or NULL (miss; corruption noticed). */
static void *cache_load(const char *dir, const char *path, uint64_t key, const char *src,
                        const char *id)
{
    double t0 = kn_clock_s();
    long size = 0;
    char *buf = kn_read_file(path, MAX_ENTRY_BYTES, &size);
    if (!buf) return NULL;
    const char *payload = NULL;
    uint64_t plen = 0;
    const char *why = entry_verify(buf, size, key, src, id, &payload, &plen);
    void *h = NULL;
    if (why) {
        STAT_ADD(corrupt, 1);
        notice("kiln cache: entry %s is corrupt (%s); rebuilding", path, why);
    } else {
        char err[512] = "";
        h = load_bytes(dir, payload, (size_t)plen, err, sizeof err);
        if (!h) notice("kiln cache: entry %s could not be loaded (%s); rebuilding", path, err);
    }
    free(buf);
    if (h) STAT_ADD(load_s, kn_clock_s() - t0);
    return h;
}

kn_status kn_jit_compile(const char *src, const char *cache_dir, kn_jit_lib **out)
{
    return kn_jit_compile_ex(src, cache_dir, out, NULL);
}

kn_status kn_jit_compile_ex(const char *src, const char *cache_dir, kn_jit_lib **out, bool *cached)
{
    *out = NULL;
    if (cached) *cached = false;
    if (!kn_jit_available())
        return kn_error(KN_ERR_UNSUPPORTED, "jit: no working C compiler ('%s --version' failed)",
                        getenv("CC") && *getenv("CC") ? getenv("CC") : "cc");
    const char *id = kn_jit_compiler_id();
    uint64_t key = jit_key(src, id);
    char path[KN_CACHE_PATH_MAX] = "";
    bool use_cache = cache_dir && *cache_dir;
    if (use_cache) KN_TRY(kn_cache_dir_check(cache_dir));
    if (use_cache && !kn_make_dirs(cache_dir)) {
        STAT_ADD(cache_errors, 1);
        notice("kiln cache: cannot create cache directory '%s' (%s); compiling without the "
               "persistent cache", cache_dir, strerror(errno));
        use_cache = false;
    }
    if (use_cache) {
        char name[64];
        snprintf(name, sizeof name, "c-%016llx.kjit", (unsigned long long)key);
        KN_TRY(kn_cache_file_path(path, sizeof path, cache_dir, name));
    }

    kn_jit_lib *lib = calloc(1, sizeof *lib);
    if (!lib) return kn_error(KN_ERR_OOM, "jit: out of memory");
    if (use_cache && (lib->handle = cache_load(cache_dir, path, key, src, id))) {
        STAT_ADD(hits, 1);
        if (cached) *cached = true;
        *out = lib;
        return KN_OK;
    }
    STAT_ADD(misses, 1);
    char *so = NULL;
    long so_len = 0;
    kn_status st = compile_so(src, &so, &so_len);
    if (st != KN_OK) {
        free(lib);
        return st;
    }
    char err[512] = "";
    lib->handle = load_bytes(use_cache ? cache_dir : NULL, so, (size_t)so_len, err, sizeof err);
    if (!lib->handle) {
        free(so);
        free(lib);
        return kn_error(KN_ERR_UNSUPPORTED, "jit: cannot load the compiled object: %s", err);
    }
    if (use_cache && !entry_write(cache_dir, path, key, src, id, so, so_len)) {
        STAT_ADD(cache_errors, 1);
        notice("kiln cache: cannot write entry %s (%s); the next run compiles again", path,
               strerror(errno));
    }
    free(so);
    *out = lib;
    return KN_OK;
}

void *kn_jit_symbol(kn_jit_lib *lib, const char *name)
{
    return lib && lib->handle ? dlsym(lib->handle, name) : NULL;
}

void kn_jit_release(kn_jit_lib *lib)
{
    if (!lib) return;
    if (lib->handle) dlclose(lib->handle);
    free(lib);
}
