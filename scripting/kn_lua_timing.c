/* kn_lua_timing: the C half of kiln.time, kiln.profile, kiln.trace and the
 * roofline (scripting/lua/40_timing.lua is the other half), as the table
 * kiln.profiler:
 *   begin(device)              start a per-kernel session (core/tensor/kn_profile)
 *   finish()                   end it: {{name, kind, key, index, dtype, ms, start_ms, bytes,
 *                              flops}, ...} (index: in its plan; nil for an eager op)
 *   cancel()                   drop a session after an error
 *   time_calls(n, device, fn, ...)  call fn(...) n times back to back with a
 *                              device event between calls; returns the device
 *                              ms of each call and the host ms each call took
 *                              to return (for the CPU: to run)
 *   host_calls(n, device, fn, ...)  call fn(...) n times, each after a device
 *                              synchronize (not timed); the host ms of each call
 *   timing(device)             "trace" or "events": what times kernels (kn_profile_timing)
 *   measure(device)            {copy_gbps, bandwidth = {{bytes, gbps}...}, f32_gflops, bf16_gflops}
 *   write_file(path, text)     write a small file, making its folders
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kn_clock.h"
#include "kn_backend.h"
#include "kn_interrupt.h"
#include "kn_ceilings.h"
#include "kn_lua_state.h"
#include "kn_lua_timing.h"
#include "kn_lua_util.h"
#include "kn_profile.h"

static double now_ms(void)
{
    return kn_clock_s() * 1e3;
}

/* ---- progress of :time and :bench ----
 *
 * One line on stderr, redrawn at most ten times a second, and only when
 * stderr is a terminal and the command has run for more than a second (a
 * quick :time prints nothing extra; piped output never gets it). The
 * autotune bar (kn_lua_config.c) is drawn the same way. Process-wide on
 * purpose: there is one stderr. The command starts it with a label,
 * the loops report (phase, done, total), the command ends it. */
static struct {
    bool active, shown;
    double t0, last;
    char label[64], phase[48];
    long done, total;
} progress_line;

static void progress_draw(void)
{
    double t = kn_clock_s();
    if (!progress_line.active || t - progress_line.t0 < 1.0 || t - progress_line.last < 0.1 || !isatty(2)) return;
    progress_line.last = t;
    progress_line.shown = true;
    enum { W = 20 };
    int fill = progress_line.total > 0 ? (int)((double)W * (double)progress_line.done / (double)progress_line.total) : 0;
    char bar[W + 1];
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : '-';
    bar[W] = 0;
    fprintf(stderr, "\r\033[K%s [%s] %ld/%ld %s  %.1f s", progress_line.label, bar, progress_line.done, progress_line.total,
            progress_line.phase, t - progress_line.t0);
    fflush(stderr);
}

static void progress_report(const char *phase, long done, long total)
{
    if (!progress_line.active) return;
    if (phase) snprintf(progress_line.phase, sizeof progress_line.phase, "%s", phase);
    progress_line.done = done;
    progress_line.total = total;
    progress_draw();
}

/* progress_start(label): the command's line starts (drawn after a second). */
static int l_progress_start(lua_State *L)
{
    snprintf(progress_line.label, sizeof progress_line.label, "%s", luaL_checkstring(L, 1));
    progress_line.active = true;
    progress_line.shown = false;
    progress_line.t0 = kn_clock_s();
    progress_line.last = 0;
    progress_line.phase[0] = 0;
    progress_line.done = progress_line.total = 0;
    return 0;
}

/* progress_label(label): the line's label changes (:bench's mode), the clock goes on. */
static int l_progress_label(lua_State *L)
{
    snprintf(progress_line.label, sizeof progress_line.label, "%s", luaL_checkstring(L, 1));
    return 0;
}

/* progress(phase, done, total); also where a Lua loop stops on Ctrl-C when
 * a call inside it caught the interrupt (the flag stays set) */
static int l_progress(lua_State *L)
{
    if (kn_interrupt_pending()) return luaL_error(L, "interrupted");
    progress_report(luaL_checkstring(L, 1), (long)luaL_checkinteger(L, 2), (long)luaL_checkinteger(L, 3));
    return 0;
}

/* progress_end(): the line is cleared; returns where it stood: phase,
 * done, total, label (for "interrupted after N of M ..."). */
static int l_progress_end(lua_State *L)
{
    if (progress_line.shown) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
    progress_line.active = progress_line.shown = false;
    lua_pushstring(L, progress_line.phase);
    lua_pushinteger(L, progress_line.done);
    lua_pushinteger(L, progress_line.total);
    lua_pushstring(L, progress_line.label);
    return 4;
}

/* interrupted(): whether Ctrl-C was pressed during the chunk running now
 * (the REPL clears the flag when the chunk ends): tells an interrupt from
 * another error. */
static int l_interrupted(lua_State *L)
{
    lua_pushboolean(L, kn_interrupt_pending());
    return 1;
}

static kn_device check_device(lua_State *L, int idx)
{
    const char *name = luaL_checkstring(L, idx);
    kn_device dev;
    if (kn_device_parse(name, &dev) != KN_OK) luaL_argerror(L, idx, lua_pushfstring(L, "unknown device '%s'", name));
    return dev;
}

static int l_begin(lua_State *L)
{
    kn_status st = kn_profile_begin(check_device(L, 1));
    if (st != KN_OK) return kn_lua_fail(L, st);
    return 0;
}

static int l_timing(lua_State *L)
{
    lua_pushstring(L, kn_profile_timing(check_device(L, 1)));
    return 1;
}

static int l_cancel(lua_State *L)
{
    (void)L;
    if (kn_profile_on) kn_profile_cancel();
    return 0;
}

static int l_finish(lua_State *L)
{
    kn_profile_record *r = NULL;
    int n = 0;
    kn_status st = kn_profile_end(&r, &n);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 0, 9);
        lua_pushstring(L, r[i].name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, r[i].kind);
        lua_setfield(L, -2, "kind");
        /* what identifies a kernel across calls: its plan and index (names
         * restart at k0 in each graph), or the name of an eager op */
        bool sub = r[i].owner && r[i].index < 0; /* an eager op run for kernel `parent` */
        if (sub) lua_pushfstring(L, "%p#%d/%s", r[i].owner, r[i].parent, r[i].name);
        else if (r[i].owner) lua_pushfstring(L, "%p#%d", r[i].owner, r[i].index);
        else lua_pushstring(L, r[i].name);
        lua_setfield(L, -2, "key");
        if (sub) {
            /* the key of the kernel it belongs to, as cm:kernels() gives it */
            lua_pushfstring(L, "%p#%d", r[i].owner, r[i].parent);
            lua_setfield(L, -2, "parent");
            if (r[i].inner) { /* its time is part of the parent's */
                lua_pushboolean(L, 1);
                lua_setfield(L, -2, "inner");
            }
        } else if (r[i].owner) {
            lua_pushinteger(L, r[i].index);
            lua_setfield(L, -2, "index");
        }
        lua_pushstring(L, kn_dtype_name(r[i].dtype));
        lua_setfield(L, -2, "dtype");
        lua_pushnumber(L, r[i].ms);
        lua_setfield(L, -2, "ms");
        lua_pushnumber(L, r[i].start_ms);
        lua_setfield(L, -2, "start_ms");
        lua_pushnumber(L, r[i].bytes);
        lua_setfield(L, -2, "bytes");
        lua_pushnumber(L, r[i].write_bytes);
        lua_setfield(L, -2, "write_bytes");
        lua_pushnumber(L, r[i].flops);
        lua_setfield(L, -2, "flops");
        lua_seti(L, -2, i + 1);
    }
    free(r);
    return 1;
}

typedef struct {
    kn_device_ctx *dc;
    void **ev;
    int n;
} events_ud;

static int events_gc(lua_State *L)
{
    events_ud *u = lua_touserdata(L, 1);
    for (int i = 0; i < u->n; i++) u->dc->be->event_destroy(u->dc, u->ev[i]);
    free(u->ev);
    u->ev = NULL;
    u->n = 0;
    return 0;
}

/* The arguments time_calls and host_calls share: (n, device, fn, ...):
 * the call count, the device's backend and how many arguments follow fn. */
static kn_device_ctx *check_calls(lua_State *L, lua_Integer *n, int *nargs)
{
    *n = luaL_checkinteger(L, 1);
    kn_device dev = check_device(L, 2);
    luaL_checkany(L, 3);
    *nargs = lua_gettop(L) - 3;
    if (*n < 1 || *n > 1000000) luaL_argerror(L, 1, "the number of calls must be in 1..1000000");
    kn_device_ctx *dc = kn_backend_get(dev);
    if (!dc) luaL_error(L, "device %s is not available", kn_device_name(dev));
    return dc;
}

static int l_time_calls(lua_State *L)
{
    lua_Integer n;
    int nargs;
    kn_device_ctx *dc = check_calls(L, &n, &nargs);
    if (!dc->be->event_create || !dc->be->event_record || !dc->be->event_elapsed_ms)
        return luaL_error(L, "the %s backend has no timing events", dc->be->name);
    /* the events live in a userdata, so a Lua error in fn frees them */
    events_ud *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->dc = dc;
    u->n = 0;
    u->ev = calloc((size_t)n + 1, sizeof *u->ev);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, events_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    int ud = lua_gettop(L);
    if (!u->ev) return luaL_error(L, "out of host memory for %d events", (int)n + 1);
    /* each call pushes fn and a copy of every argument */
    luaL_checkstack(L, nargs + 8, "time_calls: too many arguments");
    for (; u->n <= n; u->n++) {
        kn_status st = dc->be->event_create(dc, &u->ev[u->n]);
        if (st != KN_OK) return kn_lua_fail(L, st);
    }
    lua_createtable(L, (int)n, 0);
    int wall = lua_gettop(L);
    kn_status st = dc->be->event_record(dc, u->ev[0]);
    if (st != KN_OK) return kn_lua_fail(L, st);
    /* progress from the calls' own wall times: no clock read of its own
     * between two events, at most every 50 ms of calls */
    double calls_ms = 0, reported_ms = 0;
    progress_report("timed calls", 0, (long)n);
    for (lua_Integer i = 0; i < n; i++) {
        double t0 = now_ms();
        lua_pushvalue(L, 3);
        for (int a = 0; a < nargs; a++) lua_pushvalue(L, 4 + a);
        lua_call(L, nargs, 0);
        double ms = now_ms() - t0;
        if (kn_interrupt_pending()) return luaL_error(L, "interrupted"); /* fn caught the Ctrl-C */
        lua_pushnumber(L, ms);
        lua_seti(L, wall, i + 1);
        st = dc->be->event_record(dc, u->ev[i + 1]);
        if (st != KN_OK) return kn_lua_fail(L, st);
        calls_ms += ms;
        if (progress_line.active && calls_ms - reported_ms >= 50) {
            reported_ms = calls_ms;
            progress_report(NULL, (long)i + 1, (long)n);
        }
        progress_line.done = (long)i + 1;
    }
    if (dc->be->sync && (st = dc->be->sync(dc)) != KN_OK) return kn_lua_fail(L, st);
    lua_createtable(L, (int)n, 0);
    for (lua_Integer i = 0; i < n; i++) {
        double ms = 0;
        st = dc->be->event_elapsed_ms(dc, u->ev[i], u->ev[i + 1], &ms);
        if (st != KN_OK) return kn_lua_fail(L, st);
        lua_pushnumber(L, ms);
        lua_seti(L, -2, i + 1);
    }
    lua_pushvalue(L, wall);
    lua_pushcfunction(L, events_gc);
    lua_pushvalue(L, ud);
    lua_call(L, 1, 0);
    return 2;
}

/* host_calls(n, device, fn, ...): call fn(...) n times, each on an idle
 * device (a synchronize before it, not timed); the host ms of each call.
 * Back-to-back calls (time_calls) measure the device once its queue is
 * full; these measure what the host spends to queue one call's work. */
static int l_host_calls(lua_State *L)
{
    lua_Integer n;
    int nargs;
    kn_device_ctx *dc = check_calls(L, &n, &nargs);
    luaL_checkstack(L, nargs + 8, "host_calls: too many arguments");
    lua_createtable(L, (int)n, 0);
    int host = lua_gettop(L);
    progress_report("host calls", 0, (long)n);
    for (lua_Integer i = 0; i < n; i++) {
        progress_report(NULL, (long)i, (long)n);
        kn_status st = dc->be->sync ? dc->be->sync(dc) : KN_OK;
        if (st != KN_OK) return kn_lua_fail(L, st);
        lua_pushvalue(L, 3);
        for (int a = 0; a < nargs; a++) lua_pushvalue(L, 4 + a);
        double t0 = now_ms();
        lua_call(L, nargs, 0);
        lua_pushnumber(L, now_ms() - t0);
        lua_seti(L, host, i + 1);
    }
    kn_status st = dc->be->sync ? dc->be->sync(dc) : KN_OK;
    if (st != KN_OK) return kn_lua_fail(L, st);
    return 1;
}

static int l_measure(lua_State *L)
{
    kn_ceilings c;
    kn_status st = kn_ceilings_measure(check_device(L, 1), &kn_lua_state_get(L)->settings, &c);
    if (st != KN_OK) return kn_lua_fail(L, st);
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, c.copy_gbps);
    lua_setfield(L, -2, "copy_gbps");
    lua_createtable(L, c.n_bw, 0);
    for (int i = 0; i < c.n_bw; i++) {
        lua_createtable(L, 0, 3);
        lua_pushnumber(L, c.bw[i].bytes);
        lua_setfield(L, -2, "bytes");
        lua_pushnumber(L, c.bw[i].gbps);
        lua_setfield(L, -2, "gbps");
        if (c.bw[i].copy_gbps > 0) {
            lua_pushnumber(L, c.bw[i].copy_gbps);
            lua_setfield(L, -2, "copy_gbps");
        }
        lua_seti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "bandwidth");
    lua_pushnumber(L, c.f32_gflops);
    lua_setfield(L, -2, "f32_gflops");
    lua_pushnumber(L, c.bf16_gflops);
    lua_setfield(L, -2, "bf16_gflops");
    return 1;
}

/* mkdir -p of the folders above path. */
static void make_parents(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0755);
            *p = '/';
        }
}

/* Written to a temporary name and renamed, so that a reader never sees
 * half a file (two kilns measuring at once each write a whole one). */
static int l_write_file(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    size_t len;
    const char *text = luaL_checklstring(L, 2, &len);
    make_parents(path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        lua_pushnil(L);
        lua_pushfstring(L, "cannot write %s: %s", tmp, strerror(errno));
        return 2;
    }
    bool ok = fwrite(text, 1, len, f) == len;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        lua_pushnil(L);
        lua_pushfstring(L, "cannot write %s: %s", path, strerror(errno));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

void kn_lua_open_timing(lua_State *L)
{
    static const luaL_Reg fns[] = {{"begin", l_begin},
                                   {"finish", l_finish},
                                   {"cancel", l_cancel},
                                   {"time_calls", l_time_calls},
                                   {"host_calls", l_host_calls}, {"timing", l_timing},
                                   {"measure", l_measure},
                                   {"write_file", l_write_file},
                                   {"progress_start", l_progress_start},
                                   {"progress", l_progress},
                                   {"progress_label", l_progress_label},
                                   {"progress_end", l_progress_end},
                                   {"interrupted", l_interrupted},
                                   {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "profiler");
}
