/* kn_lua_system: kiln.clock, kiln.device_info, kiln.default_device and the
 * op list: facts about the machine for the REPL's :device and :run. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kn_lua_system.h"
#include "kn_lua_util.h"
#include "kn_clock.h"
#include "kn_backend.h"
#include "kn_op.h"
#include "cpu/kn_cpu_jit.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_nvrtc.h"
#endif
#include <stdlib.h>

/* kiln.clock(): monotonic seconds, for timing calls. */
static int l_clock(lua_State *L)
{
    lua_pushnumber(L, kn_clock_s());
    return 1;
}

static void cpu_name(char *buf, size_t n)
{
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p += 1 + (p[1] == ' ');
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, n, "%s", p);
            }
            break;
        }
    }
    fclose(f);
}

static void push_cuda(lua_State *L)
{
    lua_newtable(L);
#ifdef KILN_HAVE_CUDA
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "built");
    kn_cuda_device_info info[8];
    int count = 0;
    kn_status st = kn_cuda_query_devices(info, 8, &count);
    lua_pushinteger(L, count);
    lua_setfield(L, -2, "count");
    if (st != KN_OK) {
        lua_pushstring(L, kn_last_error());
        lua_setfield(L, -2, "error");
    }
    lua_newtable(L);
    for (int i = 0; i < count && i < 8 && st == KN_OK; i++) {
        lua_newtable(L);
        lua_pushstring(L, info[i].name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, info[i].memory_bytes);
        lua_setfield(L, -2, "memory_bytes");
        lua_pushinteger(L, info[i].free_bytes);
        lua_setfield(L, -2, "free_bytes");
        lua_pushinteger(L, info[i].sm_count);
        lua_setfield(L, -2, "sm_count");
        lua_pushfstring(L, "%d.%d", info[i].cc_major, info[i].cc_minor);
        lua_setfield(L, -2, "cc");
        lua_pushinteger(L, info[i].l2_bytes);
        lua_setfield(L, -2, "l2_bytes");
        lua_pushfstring(L, "%d.%d", info[i].driver_version / 1000, (info[i].driver_version % 1000) / 10);
        lua_setfield(L, -2, "driver");
        lua_seti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "devices");
#else
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "built");
    lua_pushinteger(L, 0);
    lua_setfield(L, -2, "count");
    lua_pushliteral(L, "this kiln was built without the CUDA toolkit");
    lua_setfield(L, -2, "error");
    lua_newtable(L);
    lua_setfield(L, -2, "devices");
#endif
}

/* kiln.device_info() -> {cpu = {name, cores, memory_bytes}, cuda = {...}} */
static int l_device_info(lua_State *L)
{
    lua_newtable(L);
    lua_newtable(L);
    char name[256];
    cpu_name(name, sizeof name);
    lua_pushstring(L, name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, sysconf(_SC_NPROCESSORS_ONLN));
    lua_setfield(L, -2, "cores");
    lua_pushinteger(L, (lua_Integer)sysconf(_SC_PHYS_PAGES) * (lua_Integer)sysconf(_SC_PAGESIZE));
    lua_setfield(L, -2, "memory_bytes");
    lua_setfield(L, -2, "cpu");
    push_cuda(L);
    lua_setfield(L, -2, "cuda");
    return 1;
}

static int l_default_device(lua_State *L)
{
    lua_pushstring(L, kn_device_name(kn_lua_default_device()));
    return 1;
}

/* kiln.cuda_available(): true, or false and the one-line reason. */
static int l_cuda_available(lua_State *L)
{
#ifdef KILN_HAVE_CUDA
    bool ok = kn_cuda_available();
    lua_pushboolean(L, ok);
    if (ok) return 1;
    lua_pushstring(L, kn_cuda_unavailable_reason());
    return 2;
#else
    lua_pushboolean(L, 0);
    lua_pushstring(L, "this kiln was built without the CUDA toolkit");
    return 2;
#endif
}

/* The device named by argument arg (default: the default device). */
static kn_device_ctx *device_arg(lua_State *L, int arg)
{
    kn_device dev = kn_lua_default_device();
    if (!lua_isnoneornil(L, arg)) {
        kn_status st = kn_device_parse(luaL_checkstring(L, arg), &dev);
        if (st != KN_OK) kn_lua_fail(L, st);
    }
    return kn_backend_get(dev);
}

/* kiln.synchronize([device]): wait for the device's queued work, so wall
 * clocks around GPU calls measure the work and not its launch. */
static int l_synchronize(lua_State *L)
{
    kn_device_ctx *dc = device_arg(L, 1);
    if (dc && dc->be->sync) {
        kn_status st = dc->be->sync(dc);
        if (st != KN_OK) return kn_lua_fail(L, st);
    }
    return 0;
}

/* kiln.memory_stats([device]): the device allocator's figures in bytes
 * {allocated_bytes, reserved_bytes, peak_allocated_bytes,
 * peak_reserved_bytes}; nil on a device without one (the CPU). */
static int l_memory_stats(lua_State *L)
{
    kn_device_ctx *dc = device_arg(L, 1);
    if (!dc || !dc->be->memory) return 0;
    kn_memory_stats m;
    dc->be->memory(dc, &m);
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, m.allocated);
    lua_setfield(L, -2, "allocated_bytes");
    lua_pushinteger(L, m.reserved);
    lua_setfield(L, -2, "reserved_bytes");
    lua_pushinteger(L, m.peak_allocated);
    lua_setfield(L, -2, "peak_allocated_bytes");
    lua_pushinteger(L, m.peak_reserved);
    lua_setfield(L, -2, "peak_reserved_bytes");
    return 1;
}

/* kiln.reset_peak_memory_stats([device]): the peaks start again from now. */
static int l_reset_peak_memory_stats(lua_State *L)
{
    kn_device_ctx *dc = device_arg(L, 1);
    if (dc && dc->be->memory_reset_peak) dc->be->memory_reset_peak(dc);
    return 0;
}

/* kiln.jit_stats(): the process-wide counters of the generated-code cache. */
static int l_jit_stats(lua_State *L)
{
    kn_jit_stats s;
    kn_jit_stats_get(&s);
    lua_createtable(L, 0, 7);
    lua_pushinteger(L, s.hits);
    lua_setfield(L, -2, "hits");
    lua_pushinteger(L, s.misses);
    lua_setfield(L, -2, "misses");
    lua_pushinteger(L, s.compiles);
    lua_setfield(L, -2, "compiles");
    lua_pushinteger(L, s.corrupt);
    lua_setfield(L, -2, "corrupt");
    lua_pushinteger(L, s.cache_errors);
    lua_setfield(L, -2, "cache_errors");
    lua_pushnumber(L, s.compile_s);
    lua_setfield(L, -2, "compile_s");
    lua_pushnumber(L, s.load_s);
    lua_setfield(L, -2, "load_s");
    lua_pushstring(L, kn_jit_compiler_id());
    lua_setfield(L, -2, "compiler");
    return 1;
}

/* kiln.nvrtc_compile(src [, arch]): true, or false and NVRTC's log; nil
 * when this kiln was built without CUDA. NVRTC needs no GPU. */
static int l_nvrtc_compile(lua_State *L)
{
#ifdef KILN_HAVE_CUDA
    const char *src = luaL_checkstring(L, 1);
    const char *arch = luaL_optstring(L, 2, "sm_90");
    char *image = NULL, *log = NULL;
    size_t size = 0;
    kn_status st = kn_nvrtc_compile(src, arch, &image, &size, &log);
    lua_pushboolean(L, st == KN_OK);
    if (st == KN_OK) lua_pushinteger(L, (lua_Integer)size);
    else lua_pushstring(L, log ? log : kn_last_error());
    free(image);
    free(log);
    return 2;
#else
    (void)L;
    return 0;
#endif
}

/* kiln.ops(): the names of every op in the op table, in table order. */
static int l_ops(lua_State *L)
{
    lua_createtable(L, KN_OP_COUNT, 0);
    for (int i = 0; i < KN_OP_COUNT; i++) {
        lua_pushstring(L, kn_op_name((kn_op)i));
        lua_seti(L, -2, i + 1);
    }
    return 1;
}

void kn_lua_open_system(lua_State *L)
{
    static const luaL_Reg fns[] = {{"clock", l_clock},
                                   {"device_info", l_device_info},
                                   {"default_device", l_default_device},
                                   {"ops", l_ops},
                                   {"jit_stats", l_jit_stats},
                                   {"nvrtc_compile", l_nvrtc_compile},
                                   {"cuda_available", l_cuda_available},
                                   {"synchronize", l_synchronize},
                                   {"memory_stats", l_memory_stats},
                                   {"reset_peak_memory_stats", l_reset_peak_memory_stats},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
