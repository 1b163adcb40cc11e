/* kn_lua_log: kiln.log{names} and the KILN_LOGS environment variable: the
 * log names, what each one prints, and parsing them into the state's log
 * flags (the logs themselves are printed by core/capture and the
 * backends).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_capture.h"
#include "kn_lua_log.h"
#include "kn_lua_state.h"
#include "kn_lua_util.h"

/* The log names of kiln.log and KILN_LOGS, one line each (KILN_LOGS=help,
 * kiln.log{"help"}). flag 0: read from KILN_LOGS by a backend when the
 * process starts, not a compiled call's flag. */
static const struct {
    const char *name;
    int flag;
    const char *what;
} LOG_NAMES[] = {
    {"graph_breaks", KN_LOG_GRAPH_BREAKS, "each graph break: where, the reason, a hint and the user's stack"},
    {"recompiles", KN_LOG_RECOMPILES, "each recompile: the function, graph and new version, and the guard that failed"},
    {"guards", KN_LOG_GUARDS, "the guards of each new version of a graph"},
    {"fusion", KN_LOG_FUSION, "why two kernels are two: every edge between kernels, naming both ops and lines"},
    {"kernels", KN_LOG_KERNELS, "each kernel a plan compiles, with its node count"},
    {"passes", KN_LOG_PASSES, "the graph after each compiler pass, tagged [passes:NAME]; (unchanged) when it did nothing"},
    {"cudagraphs", KN_LOG_CUDAGRAPHS, "why a graph runs without a CUDA graph (reduce-overhead)"},
    {"autotune", KN_LOG_AUTOTUNE, "each kernel's candidates and timings as max-autotune measures them"},
    {"onnx", KN_LOG_ONNX, "what m:to(dtype) converts in an imported ONNX model: numbers, constants, Cast targets"},
    {"library", 0, "KILN_LOGS only, on the GPU: each new cuBLASLt or cuDNN call and the algorithm it got"},
    {"nvrtc", 0, "KILN_LOGS only, on the GPU: each kernel module NVRTC compiles (in no cache) and its seconds"},
    {"all", -1, "every log above"},
    {"help", -2, "this list"},
};
enum { N_LOG_NAMES = sizeof LOG_NAMES / sizeof LOG_NAMES[0] };

/* The flags of log name w; -1 for an unknown name, 0 for a name a
 * backend reads from KILN_LOGS itself, -2 for "help". */
static int parse_log_word(const char *w)
{
    for (int i = 0; i < N_LOG_NAMES; i++) {
        if (strcmp(w, LOG_NAMES[i].name) != 0) continue;
        if (LOG_NAMES[i].flag == -1) {
            int all = 0;
            for (int j = 0; j < N_LOG_NAMES; j++) all |= LOG_NAMES[j].flag > 0 ? LOG_NAMES[j].flag : 0;
            return all;
        }
        return LOG_NAMES[i].flag;
    }
    return -1;
}

/* The names into names[N_LOG_NAMES + 1], NULL-ended, for the shared
 * unknown-name message (kn_lua_push_unknown: the list and "did you mean"). */
static const char *const *log_names(const char **names)
{
    for (int i = 0; i < N_LOG_NAMES; i++) names[i] = LOG_NAMES[i].name;
    names[N_LOG_NAMES] = NULL;
    return names;
}

/* KILN_LOGS=help and kiln.log{"help"}: every name with its line. */
static void log_help(FILE *f)
{
    fprintf(f, "kiln logs (KILN_LOGS=name,name or kiln.log{\"name\", ...}):\n");
    for (int i = 0; i < N_LOG_NAMES; i++) fprintf(f, "  %-13s %s\n", LOG_NAMES[i].name, LOG_NAMES[i].what);
    fflush(f);
}

static int l_log(lua_State *L)
{
    int flags = KN_LOG_WARN;
    bool help = false;
    if (lua_istable(L, 1)) {
        lua_Integer n = kn_lua_list_len(L, 1, 64, "kiln.log: names");
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, 1, i);
            const char *w = luaL_checkstring(L, -1);
            int f = parse_log_word(w);
            const char *names[N_LOG_NAMES + 1];
            if (f == -1) return kn_lua_unknown(L, "kiln.log", "log", w, log_names(names));
            if (f == 0)
                return luaL_error(L, "kiln.log: '%s' is read from KILN_LOGS when the process starts: run with "
                                     "KILN_LOGS=%s",
                                  w, w);
            if (f == -2) help = true;
            else flags |= f;
            lua_pop(L, 1);
        }
    } else if (!lua_isnoneornil(L, 1)) {
        return luaL_argerror(L, 1, "a list of log names expected");
    }
    if (help) { /* a question, not a setting: the logs stay as they are */
        fflush(stdout);
        log_help(stdout);
        return 0;
    }
    kn_lua_state_get(L)->log_flags = flags;
    return 0;
}

/* KILN_LOGS: comma- or space-separated names; help prints the list on
 * stdout and ends the program (a question, as `kiln --help` is), an
 * unknown name a warning naming the valid ones (once per process: every
 * Lua state reads it). */
static void log_from_env(lua_State *L)
{
    const char *env = getenv("KILN_LOGS");
    if (!env) return;
    static atomic_flag told = ATOMIC_FLAG_INIT;
    bool tell = !atomic_flag_test_and_set(&told);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *w = strtok_r(buf, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
        int f = parse_log_word(w);
        if (f > 0) kn_lua_state_get(L)->log_flags |= f;
        else if (f == -2 && tell) {
            fflush(stdout);
            log_help(stdout);
            exit(0);
        } else if (f == -1 && tell) {
            const char *names[N_LOG_NAMES + 1];
            kn_lua_push_unknown(L, "log", w, log_names(names));
            fprintf(stderr, "kiln: KILN_LOGS: %s\n", lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    }
}

/* kiln.log_enabled(name): whether log `name` is on in this state (for the
 * logs that Lua code prints, such as onnx). */
static int l_log_enabled(lua_State *L)
{
    const char *w = luaL_checkstring(L, 1);
    int f = parse_log_word(w);
    const char *names[N_LOG_NAMES + 1];
    if (f == -1) return kn_lua_unknown(L, "kiln.log_enabled", "log", w, log_names(names));
    if (f <= 0) return luaL_argerror(L, 1, lua_pushfstring(L, "'%s' is no log a state turns on", w));
    lua_pushboolean(L, (kn_lua_state_get(L)->log_flags & f) == f);
    return 1;
}

void kn_lua_open_log(lua_State *L, int kiln)
{
    log_from_env(L);
    lua_pushcfunction(L, l_log);
    lua_setfield(L, kiln, "log");
    lua_pushcfunction(L, l_log_enabled);
    lua_setfield(L, kiln, "log_enabled");
}
