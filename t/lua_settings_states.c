/* t/lua_settings_states.c: two Lua states of one process, each with its own
 * settings (issue 28: settings that travel with the call).
 *
 * State A runs with allow_tf32 = false, its own cache dir and a 60 s
 * autotune budget; state B with allow_tf32 = true, another cache dir and a
 * budget of 0. Both are configured before either runs anything, and their
 * calls interleave, so settings kept in process globals would give A the
 * values B set last. What each state gets, seen on the CPU:
 *   - allow_tf32: with KILN_CPU_FOLD_EPILOGUES=1 a plan folds an f32
 *     conv + ReLU into the library call only under TF32
 *     (cm:stats().library_epilogues);
 *   - the cache dir: the generated C a plan compiles lands in its own
 *     state's dir (c-*.kjit), as do its autotune choices (autotune.tsv);
 *   - the autotune budget: A's search measures, B's (0 s) skips.
 * Also: kiln.config reads back (and pairs() lists) each state's own
 * values, kn_lua_settings gives each state's struct, and a bad value set in
 * one state is that state's error at its next compiled call, not the
 * other's.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "kn_lua.h"
#include "kn_settings.h"
#include "lua_state.h"
#include "tap.h"

/* Files in dir whose names start with prefix and end with suffix. */
static int count_files(const char *dir, const char *prefix, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    size_t lp = strlen(prefix), ls = strlen(suffix);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len >= lp + ls && strncmp(e->d_name, prefix, lp) == 0 && strcmp(e->d_name + len - ls, suffix) == 0) n++;
    }
    closedir(d);
    return n;
}

static bool exists(const char *dir, const char *name)
{
    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* An f32 conv with a bias and a ReLU after it, on the CPU, at image size
 * %d, and the input times 2: a generated kernel, which lands in the cache
 * dir (a size per call, so each compiles code of its own: the process's
 * in-memory JIT cache would otherwise serve the second state without a
 * file in its dir). Returns "<library_epilogues> same",
 * same: the plan computes what eager does (within 1e-5). */
static const char *const FOLD_MODEL =
    "local n = %d\n"
    "local w, b = kiln.randn({4, 2, 3, 3}, {seed = 1, device = 'cpu'}), kiln.randn({4}, {seed = 2, device = 'cpu'})\n"
    "local f = function(x) return kiln.conv2d(x, w, b, {padding = 1}):relu(), x * 2 end\n"
    "local cm = kiln.compile(f)\n"
    "local x = kiln.randn({1, 2, n, n}, {seed = 3, device = 'cpu'})\n"
    "local y, z = cm(x)\n"
    "local e, ez = f(x)\n"
    "local d = math.max((y - e):abs():max():item(), (z - ez):abs():max():item())\n"
    "return cm:stats().library_epilogues .. ' ' .. (d <= 1e-5 and 'same' or tostring(d))";

/* A pointwise kernel under max-autotune (a size per call, as above):
 * "<measured> <skipped>" kernels of its search. */
static const char *const TUNE_MODEL =
    "local cm = kiln.compile(function(x) return (x * 2):relu() + 1 end, {mode = 'max-autotune-no-cudagraphs'})\n"
    "cm(kiln.randn({%d, 64}, {seed = 4, device = 'cpu'}))\n"
    "local n = {measured = 0, skipped = 0}\n"
    "for _, k in ipairs(cm:autotune()) do n[k.source] = (n[k.source] or 0) + 1 end\n"
    "return n.measured .. ' ' .. n.skipped";

/* A compiled call that does not tune: "ran", or the error. */
static const char *const PLAIN_CALL =
    "local cm = kiln.compile(function(x) return x + 1 end)\n"
    "local ok, e = pcall(cm, kiln.ones({%d}, {device = 'cpu'}))\n"
    "return ok and 'ran' or tostring(e)";

static const char *run_fmt(lua_State *L, const char *fmt, int n, char *buf, size_t size)
{
    char code[2048];
    snprintf(code, sizeof code, fmt, n);
    return eval(L, code, buf, size);
}

int main(void)
{
    setenv("KILN_CPU_FOLD_EPILOGUES", "1", 1); /* plans fold epilogues on the CPU too */
    char base[] = "/tmp/kiln-settings-states-XXXXXX";
    if (!mkdtemp(base)) skip_all("cannot make a temporary dir");
    char dir_a[256], dir_b[256], buf[1024], code[1024];
    snprintf(dir_a, sizeof dir_a, "%s/a", base);
    snprintf(dir_b, sizeof dir_b, "%s/b", base);

    lua_State *A = new_state(), *B = new_state();
    snprintf(code, sizeof code,
             "kiln.config.allow_tf32 = false; kiln.config.cache_dir = '%s'; kiln.config.autotune_budget_s = 60\n"
             "return 'ok'", dir_a);
    is_str(eval(A, code, buf, sizeof buf), "ok", "A: allow_tf32 false, its cache dir, a 60 s budget");
    snprintf(code, sizeof code,
             "kiln.config.allow_tf32 = true; kiln.config.cache_dir = '%s'; kiln.config.autotune_budget_s = 0\n"
             "return 'ok'", dir_b);
    is_str(eval(B, code, buf, sizeof buf), "ok", "B: allow_tf32 true, its cache dir, a 0 s budget");

    /* what each state reads back, and its struct */
    static const char *const READ_BACK = "return tostring(kiln.config.allow_tf32) .. ' ' .. kiln.config.cache_dir";
    snprintf(code, sizeof code, "false %s", dir_a);
    is_str(eval(A, READ_BACK, buf, sizeof buf), code, "A reads back its own kiln.config");
    snprintf(code, sizeof code, "true %s", dir_b);
    is_str(eval(B, READ_BACK, buf, sizeof buf), code, "B reads back its own kiln.config");
    is_str(eval(A,
                "local n, tf32, prec = 0, nil, nil\n"
                "for k, v in pairs(kiln.config) do\n"
                "  n = n + 1\n"
                "  if k == 'allow_tf32' then tf32 = v elseif k == 'f32_precision' then prec = v end\n"
                "end\n"
                "return n .. ' ' .. tostring(tf32) .. ' ' .. tostring(prec)",
                buf, sizeof buf),
           "13 false ieee", "pairs(kiln.config) lists A's keys with A's values");
    is_str(eval(B, "return tostring(kiln.config.f32_precision)", buf, sizeof buf), "tf32",
           "B's allow_tf32 = true reads back as its f32_precision 'tf32'");
    const kn_settings *sa = kn_lua_settings(A), *sb = kn_lua_settings(B);
    ok(sa != sb && !kn_settings_allow_tf32(sa) && kn_settings_allow_tf32(sb), "kn_lua_settings: A's allow_tf32 false, B's true");
    ok(strcmp(sa->cache_dir, dir_a) == 0 && strcmp(sb->cache_dir, dir_b) == 0, "kn_lua_settings: each its cache dir");
    ok(sa->autotune.budget_s == 60 && sb->autotune.budget_s == 0, "kn_lua_settings: each its autotune budget");

    /* allow_tf32 and the cache dir, calls interleaved: A, B, A */
    is_str(run_fmt(A, FOLD_MODEL, 8, buf, sizeof buf), "0 same",
           "A (no TF32) keeps conv and ReLU apart, and its plan computes what eager does");
    int a_kjit = count_files(dir_a, "c-", ".kjit");
    ok(a_kjit >= 1, "A's generated code is in A's cache dir (%d files)", a_kjit);
    is_int(count_files(dir_b, "c-", ".kjit"), 0, "and none in B's");
    is_str(run_fmt(B, FOLD_MODEL, 10, buf, sizeof buf), "1 same",
           "B (TF32) folds the ReLU into the conv, and its plan computes what eager does");
    int b_kjit = count_files(dir_b, "c-", ".kjit");
    ok(b_kjit >= 1, "B's generated code is in B's cache dir (%d files)", b_kjit);
    is_int(count_files(dir_a, "c-", ".kjit"), a_kjit, "and none more in A's");
    is_str(run_fmt(A, FOLD_MODEL, 12, buf, sizeof buf), "0 same", "A, after B's call: still no TF32, no fold");
    ok(count_files(dir_a, "c-", ".kjit") > a_kjit, "A's new code goes to A's dir");
    is_int(count_files(dir_b, "c-", ".kjit"), b_kjit, "and none to B's");

    /* the autotune options and the choice file: B, then A */
    is_str(run_fmt(B, TUNE_MODEL, 16, buf, sizeof buf), "0 1", "B's search (0 s budget) skips its kernel");
    is_str(run_fmt(A, TUNE_MODEL, 24, buf, sizeof buf), "1 0", "A's search (60 s budget) measures its kernel");
    ok(exists(dir_a, "autotune.tsv"), "A's choice is saved in A's cache dir");
    ok(!exists(dir_b, "autotune.tsv"), "B's dir has no choice file (B measured nothing)");

    /* a bad value is its own state's error, at its next compiled call */
    is_str(eval(A, "kiln.config.autotune_budget_s = 'fast'; return 'set'", buf, sizeof buf), "set",
           "A: assigning a budget that is no number is no error by itself");
    like(run_fmt(A, TUNE_MODEL, 32, buf, sizeof buf),
         "kiln.config.autotune_budget_s must be a number of seconds >= 0, got string", "A's next compiled call says why");
    is_str(run_fmt(B, PLAIN_CALL, 3, buf, sizeof buf), "ran", "B's compiled calls are not affected");
    eval(A, "kiln.config.autotune_budget_s = 60", buf, sizeof buf);
    is_str(run_fmt(A, PLAIN_CALL, 4, buf, sizeof buf), "ran", "A runs again once its budget is a number");
    eval(B, "kiln.config.cache_dir = string.rep('d', 1100)", buf, sizeof buf);
    like(run_fmt(B, PLAIN_CALL, 5, buf, sizeof buf), "kiln.config.cache_dir is 1100 bytes long; kiln supports at most 1024",
         "B's cache dir over the limit is B's error");
    is_str(run_fmt(A, PLAIN_CALL, 6, buf, sizeof buf), "ran", "and not A's");

    /* closing A leaves B with its own settings */
    lua_close(A);
    snprintf(code, sizeof code, "kiln.config.cache_dir = '%s'; return 'ok'", dir_b);
    eval(B, code, buf, sizeof buf);
    is_str(run_fmt(B, FOLD_MODEL, 14, buf, sizeof buf), "1 same", "B after A is closed: still TF32, still folds");
    lua_close(B);

    snprintf(code, sizeof code, "rm -rf '%s'", base);
    if (system(code) != 0) printf("# could not remove %s\n", base);
    return done_testing();
}
