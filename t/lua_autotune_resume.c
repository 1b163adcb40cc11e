/* t/lua_autotune_resume.c: max-autotune's search, stopped by Ctrl-C,
 * resumes at the next call (issue 16, item 7).
 *
 * The interrupt is the REPL's own: the process-wide flag of core/base
 * (kn_interrupt_request), raised from the search's progress callback once
 * two kernels are done, as a Ctrl-C at that moment would. Then:
 *   - the first call's plan has kernels left untuned ("skipped") and the
 *     compiled function says the search was interrupted;
 *   - the next call tunes exactly those: its progress reports "resuming:
 *     N of M kernels left to tune" with N the skipped count and M the plan's
 *     tunable kernels, and afterwards no kernel is skipped and the search
 *     is no longer marked interrupted;
 *   - the resumed plan computes what eager computes (fresh random input);
 *   - a third call searches nothing.
 * Runs on the default device (the CPU here; the lead's GPU run covers CUDA).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "kn_autotune.h"
#include "kn_interrupt.h"
#include "kn_lua.h"
#include "kn_settings.h"
#include "lua_state.h"
#include "tap.h"

/* what the search reported */
static int interrupt_at;                  /* request Ctrl-C once this many kernels are done (0: never) */
static int reports, max_resume_left, max_resume_total;

static void on_progress(const kn_autotune_progress *p, void *ud)
{
    (void)ud;
    reports++;
    if (p->resume_left > max_resume_left) max_resume_left = p->resume_left;
    if (p->resume_total > max_resume_total) max_resume_total = p->resume_total;
    if (interrupt_at > 0 && !p->done && p->kernels_done >= interrupt_at) {
        kn_interrupt_request();
        interrupt_at = 0;
    }
}

/* "measured=2 cached=1 skipped=3 total=6 stopped=interrupted" */
static const char *const SOURCES =
    "local n, total = {}, 0\n"
    "for _, k in ipairs(cm:autotune()) do n[k.source] = (n[k.source] or 0) + 1; total = total + 1 end\n"
    "return string.format('measured=%d cached=%d skipped=%d total=%d stopped=%s', n.measured or 0,\n"
    "  n.cached or 0, n.skipped or 0, total, tostring(cm:stats().autotune_stopped))";

static int field(const char *s, const char *name)
{
    const char *at = strstr(s, name);
    return at ? atoi(at + strlen(name)) : -1;
}

int main(void)
{
    char buf[1024], first[1024], second[1024];
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 1);
    lua_pop(L, 1);
    eval(L,
         "kiln.config.cache_dir = os.tmpname() .. '-resume'\n"
         "kiln.config.autotune_budget_s = 300\n"
         "spec = dofile('samples/transformer_block.lua')\n"
         "cm = kiln.compile(spec.model, {mode = 'max-autotune'})\n"
         "inputs = spec.inputs({small = true, device = kiln.default_device()})\n"
         "return 'ok'",
         buf, sizeof buf);
    if (strcmp(buf, "ok") != 0) {
        printf("Bail out! setting up: %s\n", buf);
        return 1;
    }
    kn_settings *settings = kn_lua_settings(L); /* this state's: the embedder's own progress callback */
    settings->autotune.progress = on_progress;
    settings->autotune.progress_ud = NULL;

    /* the first call: Ctrl-C after two kernels */
    interrupt_at = 2;
    eval(L, "local ok, e = pcall(cm, table.unpack(inputs)); return ok and 'ran' or tostring(e)", buf, sizeof buf);
    printf("# the interrupted call: %s\n", buf);
    ok(interrupt_at == 0, "the search reached two kernels and the interrupt was requested");
    ok(max_resume_total == 0, "a first search is no resumption");
    eval(L, SOURCES, first, sizeof first);
    printf("# after the interrupted call: %s\n", first);
    int skipped = field(first, "skipped="), total = field(first, "total=");
    ok(skipped >= 1 && skipped < total, "some kernels, not all, were left untuned (%d of %d)", skipped, total);
    ok(strstr(first, "stopped=interrupted") != NULL, "cm:stats().autotune_stopped says 'interrupted'");

    /* the next call, as the REPL's next chunk: the flag cleared */
    kn_interrupt_clear();
    reports = max_resume_left = max_resume_total = 0;
    eval(L,
         "local x = spec.inputs({small = true, device = kiln.default_device()})\n"
         "x[1] = kiln.randn(x[1]:shape(), {seed = 7, device = x[1].device})\n"
         "local y, e = cm(table.unpack(x)), spec.model(table.unpack(x))\n"
         "local d = (y - e):abs():max():item()\n"
         "return d <= 1e-3 and 'same' or ('differs by ' .. d)",
         buf, sizeof buf);
    is_str(buf, "same", "the resumed call computes what eager computes (fresh input)");
    ok(reports > 0, "the resumed call searched (%d progress reports)", reports);
    is_int(max_resume_left, skipped, "its progress says how many kernels were left to tune");
    ok(max_resume_total == total, "... of the plan's tunable kernels ('resuming: %d of %d kernels left to tune')",
       max_resume_left, max_resume_total);
    eval(L, SOURCES, second, sizeof second);
    printf("# after the resumed call: %s\n", second);
    is_int(field(second, "skipped="), 0, "no kernel is left untuned");
    is_int(field(second, "measured=") + field(second, "cached="), total, "every tunable kernel is measured or cached");
    ok(field(second, "measured=") > field(first, "measured="), "the resumed search measured more kernels");
    ok(strstr(second, "stopped=nil") != NULL, "the search is no longer marked interrupted");

    /* a third call searches nothing */
    reports = 0;
    eval(L, "cm(table.unpack(inputs)); return 'ran'", buf, sizeof buf);
    is_str(buf, "ran", "a third call runs");
    is_int(reports, 0, "and searches nothing");

    eval(L, "os.execute('rm -rf ' .. kiln.config.cache_dir); return 'ok'", buf, sizeof buf);
    lua_close(L);
    return done_testing();
}
