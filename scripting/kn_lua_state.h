/* kn_lua_state: what kiln keeps per Lua state, in that state's registry.
 *
 * Two Lua states in one process (an embedder with one state per job, a test)
 * must not see each other's random stream, compiled call in progress,
 * parameter names or settings, so none of that lives in C statics. Coroutines of one
 * state share its registry, so they share this too, as they share kiln.
 * Private to scripting/. */
#ifndef KN_LUA_STATE_H
#define KN_LUA_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include <lua.h>

#include "kn_autograd.h"
#include "kn_settings.h"

struct kn_capture;

typedef struct {
    /* the capture of the compiled call being traced, or NULL */
    struct kn_capture *cap;
    /* registry reference of that call's parameter names (tensor id ->
     * dotted name), or LUA_NOREF */
    int param_map;
    /* its names are a compiled module's parameters (KN_IN_PARAM); else the
     * modules a compiled function reaches through upvalues and globals */
    bool param_map_is_module;
    /* the trace called something a replay cannot repeat, and what */
    bool impure;
    char impure_what[64];
    /* the random stream of calls without a seed: consecutive counters */
    uint64_t seed, rng_offset;
    /* KN_LOG_* flags that compiled calls log with (kiln.log, KILN_LOGS) */
    int log_flags;
    /* the settings this state's ops and plans run with, written through
     * kiln.config (kn_lua_config.c) as its keys are assigned */
    kn_settings settings;
    /* KN_LUA_CONFIG_BAD_* (kn_lua_config.h): keys of kiln.config holding a
     * value the settings cannot take; a compiled call raises the error */
    unsigned config_bad;
    /* while an imported (ONNX) node runs: the location its ops carry in
     * captures, breaks and errors ("model.onnx:node 'Conv_3' (Conv)"), in
     * place of the Lua line; "" otherwise (kiln.onnx.where) */
    char where_override[128];
    /* what core allocated for tensors and autograd since this state's last
     * forced collection, and since its last collector step
     * (kn_lua_pushtensor) */
    int64_t bytes_since_gc, bytes_since_step;
    /* while tracing: the user's line that ran last ("file:line", "" none),
     * kept by the trace's line hook; where a user function tail-called
     * into kiln's Lua (`return self.head(y)`), its frame is gone from the
     * stack and this is the line that made the call */
    char last_user_line[160];
    /* autograd: grad mode (kiln.no_grad) and the tape's counters */
    kn_autograd grad;
    /* kiln.autocast: while on, matmul, conv2d and attention take their f32
     * inputs in autocast_dtype, and softmax, the norms and the reductions
     * their half inputs in f32 (kn_lua_run) */
    bool autocast_on;
    kn_dtype autocast_dtype;
} kn_lua_state;

/* This state's data, made on first use. The pointer stays valid until the
 * state is closed (the registry holds the userdata behind it). */
kn_lua_state *kn_lua_state_get(lua_State *L);

#endif
