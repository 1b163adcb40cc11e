/* t/jit_cache.c: the run-time C compiler and its persistent cache. A second
 * compile of the same source is a hit with no compiler run; corrupt entries
 * (a flipped payload byte, a flipped header byte, truncation, an empty file,
 * garbage) are reported with the documented notice, rebuilt, never loaded,
 * and the rebuilt function works; compile errors carry the compiler's
 * message and the generated line; an uncreatable cache dir gives a notice and
 * compiling still works; four processes compiling one new source into one
 * cache dir at once all succeed and leave one valid entry and no temp files.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpu/kn_cpu_jit.h"
#include "tap.h"

static char dir[256];
static char notices[8][1024];
static int n_notices;

static void on_notice(const char *msg, void *ud)
{
    (void)ud;
    if (n_notices < 8) snprintf(notices[n_notices], sizeof notices[0], "%s", msg);
    n_notices++;
}

static unsigned salt;

/* A fresh source: int NAME(int a) { return a * 3 + salt; } */
static void make_src(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "int %s(int a);\nint %s(int a) { return a * 3 + %u; }\n", name, name, salt);
}

typedef int (*ifn)(int);

/* Compile src and call NAME(7); true when it returns 21 + salt. */
static bool compile_and_call(const char *src, const char *cache, const char *name, kn_status *st_out)
{
    kn_jit_lib *lib = NULL;
    kn_status st = kn_jit_compile(src, cache, &lib);
    if (st_out) *st_out = st;
    if (st != KN_OK) {
        printf("#   compile: %s\n", kn_last_error());
        return false;
    }
    ifn f = (ifn)kn_jit_symbol(lib, name);
    bool good = f && f(7) == 21 + (int)salt;
    kn_jit_release(lib);
    return good;
}

/* The one entry file in dir (path into out); counts temp files too. */
static int entries(char *out, size_t size, int *temps)
{
    int n = 0;
    *temps = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, ".tmp-", 5) == 0 || strncmp(de->d_name, ".load-", 6) == 0) (*temps)++;
        size_t l = strlen(de->d_name);
        if (l > 5 && strcmp(de->d_name + l - 5, ".kjit") == 0) {
            snprintf(out, size, "%s/%s", dir, de->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

static long file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static void flip_byte(const char *p, long at)
{
    FILE *f = fopen(p, "r+b");
    if (!f) return;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

/* Damage the entry with `how`, recompile: one notice containing `why`, a
 * rebuild (one more compiler run), a working function, then a clean hit. */
static void corrupt_case(const char *src, const char *how, const char *why)
{
    char entry[600];
    int temps;
    entries(entry, sizeof entry, &temps);
    long size = file_size(entry);
    if (strcmp(how, "payload") == 0) flip_byte(entry, size - 10);
    else if (strcmp(how, "header") == 0) flip_byte(entry, 9); /* inside the key */
    else if (strcmp(how, "truncate") == 0) {
        if (truncate(entry, size / 2) != 0) printf("#   truncate failed\n");
    } else {
        FILE *f = fopen(entry, "wb");
        if (strcmp(how, "garbage") == 0)
            for (int i = 0; i < 300; i++) fputc((i * 37 + 11) & 0xff, f);
        fclose(f);
    }
    kn_jit_stats before, after;
    kn_jit_stats_get(&before);
    n_notices = 0;
    bool works = compile_and_call(src, dir, "kiln_t_fn", NULL);
    kn_jit_stats_get(&after);
    ok(works, "%s: the rebuilt function works", how);
    ok(after.corrupt == before.corrupt + 1 && after.compiles == before.compiles + 1 &&
           after.hits == before.hits,
       "%s: counted as corrupt, rebuilt with one compiler run", how);
    char want[800];
    snprintf(want, sizeof want, "kiln cache: entry %s is corrupt (%s); rebuilding", entry, why);
    ok(n_notices == 1, "%s: one notice", how);
    is_str(notices[0], want, "notice text");
    kn_jit_stats_get(&before);
    works = compile_and_call(src, dir, "kiln_t_fn", NULL);
    kn_jit_stats_get(&after);
    ok(works && after.hits == before.hits + 1 && after.compiles == before.compiles,
       "%s: the rebuilt entry is a clean hit", how);
}

static void rm_dir(const char *d)
{
    DIR *dd = opendir(d);
    if (dd) {
        struct dirent *de;
        while ((de = readdir(dd))) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
            char p[600];
            snprintf(p, sizeof p, "%s/%s", d, de->d_name);
            unlink(p);
        }
        closedir(dd);
    }
    rmdir(d);
}

/* Four processes released at once compile one new source into dir. */
static void concurrent(void)
{
    char src[256];
    salt += 1000;
    make_src(src, sizeof src, "kiln_t_par");
    int gate[2];
    if (pipe(gate) != 0) {
        ok(0, "pipe");
        return;
    }
    fflush(stdout);
    pid_t pids[4];
    for (int i = 0; i < 4; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(gate[1]);
            char c;
            while (read(gate[0], &c, 1) > 0) {} /* EOF: everyone starts */
            kn_jit_lib *lib = NULL;
            int code = 1;
            if (kn_jit_compile(src, dir, &lib) == KN_OK) {
                ifn f = (ifn)kn_jit_symbol(lib, "kiln_t_par");
                code = f && f(7) == 21 + (int)salt ? 0 : 2;
            } else {
                fprintf(stderr, "child %d: %s\n", i, kn_last_error());
            }
            kn_jit_release(lib);
            _exit(code);
        }
    }
    close(gate[0]);
    close(gate[1]);
    int good = 0;
    for (int i = 0; i < 4; i++) {
        int ws = 0;
        if (pids[i] > 0 && waitpid(pids[i], &ws, 0) == pids[i] && WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
            good++;
    }
    is_int(good, 4, "4 concurrent processes compiling one new source all succeed");
    kn_jit_stats before, after;
    kn_jit_stats_get(&before);
    n_notices = 0;
    bool works = compile_and_call(src, dir, "kiln_t_par", NULL);
    kn_jit_stats_get(&after);
    ok(works && after.hits == before.hits + 1 && after.corrupt == before.corrupt && n_notices == 0,
       "after them the entry is valid: a clean hit");
    char entry[600];
    int temps;
    int n = entries(entry, sizeof entry, &temps);
    ok(n == 3 && temps == 0, "three entries in the dir (three sources), no temporary files left (%d, %d)", n, temps);
}

int main(void)
{
    if (!kn_jit_available()) skip_all("no C compiler for the JIT");
    salt = (unsigned)(time(NULL) ^ getpid()) % 100000u;
    printf("# salt %u; compiler: %s\n", salt, kn_jit_compiler_id());
    snprintf(dir, sizeof dir, "%s/kiln-jitc-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) skip_all("cannot make a temporary directory");
    kn_jit_set_notice(on_notice, NULL);
    kn_jit_stats_reset();

    char src[256];
    make_src(src, sizeof src, "kiln_t_fn");
    kn_jit_stats s;
    ok(compile_and_call(src, dir, "kiln_t_fn", NULL), "first compile works");
    kn_jit_stats_get(&s);
    ok(s.misses == 1 && s.compiles == 1 && s.hits == 0 && s.compile_s > 0, "first compile: a miss, one compiler run");
    ok(compile_and_call(src, dir, "kiln_t_fn", NULL), "second compile works");
    kn_jit_stats_get(&s);
    ok(s.hits == 1 && s.compiles == 1 && s.misses == 1, "second compile: a cache hit, no compiler run");
    char entry[600];
    int temps;
    ok(entries(entry, sizeof entry, &temps) == 1 && temps == 0, "one entry, no temporary files");
    ok(n_notices == 0, "no notices so far");

    corrupt_case(src, "payload", "checksum mismatch");
    corrupt_case(src, "header", "header checksum mismatch");
    corrupt_case(src, "truncate", "length mismatch: truncated or extended");
    corrupt_case(src, "empty", "truncated header");
    corrupt_case(src, "garbage", "bad magic: not a kiln JIT entry");

    /* another source with the same function name is another entry */
    salt += 1;
    make_src(src, sizeof src, "kiln_t_fn");
    kn_jit_stats_get(&s);
    ok(compile_and_call(src, dir, "kiln_t_fn", NULL), "a changed source compiles anew");
    kn_jit_stats b2;
    kn_jit_stats_get(&b2);
    ok(b2.misses == s.misses + 1, "a changed source is a miss");

    /* compile errors */
    kn_jit_lib *lib = NULL;
    kn_status st = kn_jit_compile("int f(void);\nint f(void)\n{\n    return undefined_name;\n}\n", dir, &lib);
    ok(st == KN_ERR_UNSUPPORTED && lib == NULL, "a compile error is KN_ERR_UNSUPPORTED");
    like(kn_last_error(), "undefined_name", "the message carries the compiler's complaint");
    like(kn_last_error(), "kernel.c:4", "with the file and line");
    like(kn_last_error(), "generated source line 4:     return undefined_name;", "and the generated line");

    /* no persistent cache */
    kn_jit_stats_get(&s);
    ok(compile_and_call(src, NULL, "kiln_t_fn", NULL), "compiling without a cache dir works");
    kn_jit_stats_get(&b2);
    ok(b2.misses == s.misses + 1 && b2.hits == s.hits, "without a cache dir it is always a miss");

    /* a cache dir that cannot be created */
    char blocker[400], bad[500];
    snprintf(blocker, sizeof blocker, "%s/afile", dir);
    FILE *f = fopen(blocker, "w");
    if (f) fclose(f);
    snprintf(bad, sizeof bad, "%s/sub/cache", blocker);
    n_notices = 0;
    kn_jit_stats_get(&s);
    ok(compile_and_call(src, bad, "kiln_t_fn", &st) && st == KN_OK,
       "an uncreatable cache dir: compiling still works");
    kn_jit_stats_get(&b2);
    ok(b2.cache_errors == s.cache_errors + 1, "counted as a cache error");
    char want[800];
    snprintf(want, sizeof want,
             "kiln cache: cannot create cache directory '%s' (Not a directory); compiling without "
             "the persistent cache", bad);
    is_str(n_notices == 1 ? notices[0] : "", want, "with a clear notice");
    unlink(blocker);

    concurrent();
    rm_dir(dir);
    return done_testing();
}
