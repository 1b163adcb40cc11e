/* t/lua_states.c: two independent Lua states with kiln in one process.
 *
 * An embedder (a server with one state per request, a test harness) opens
 * kiln in several states; each must have its own random stream, its own
 * compiled call in progress and its own parameter names. Here state A
 * starts tracing a compiled module and, in the middle of the trace, makes
 * state B compile and run its own model: B must see no capture of A's, and
 * A's trace must still name its parameters after B's call. Then A is closed
 * and B goes on working.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "kn_lua.h"
#include "lua_state.h"
#include "tap.h"

/* The first eight numbers of kiln.randn, as text: equal text, equal stream. */
static const char *const DRAW =
    "local t = kiln.randn({8}, {device = 'cpu'}):tolist()\n"
    "for i = 1, #t do t[i] = string.format('%.9g', t[i]) end\n"
    "return table.concat(t, ' ')";

/* The end of both models' chunks: compiled y against eager e, then "ok"
 * and the names of cm's graph inputs, or what went wrong. */
#define CHECK_AND_NAME                                                                    \
    "local diff = (y - e):abs():max():item()\n"                                          \
    "if not (diff <= 1e-5) then return 'compiled differs from eager by ' .. diff end\n"  \
    "local names = {}\n"                                                                 \
    "for _, g in ipairs(cm:graphs()) do\n"                                               \
    "  for _, n in ipairs(g.nodes) do if n.name then names[#names + 1] = n.name end end\n" \
    "end\n"                                                                              \
    "return 'ok ' .. table.concat(names, ' ')"

/* B compiles a Linear (on the default device, as the model's parameters
 * are) and checks it against eager; returns "ok <names>"
 * with the names of its graph's parameter inputs, or what went wrong. */
static const char *const B_MODEL =
    "local m = kiln.nn.Linear(4, 3)\n"
    "local cm = kiln.compile(m)\n"
    "local x = kiln.randn({2, 4})\n"
    "local y, e = cm(x), m(x)\n" CHECK_AND_NAME;

static lua_State *state_b;
static char b_result[512];

/* run_in_b(code) in A: run code in B now (A's trace is in progress). */
static int run_in_b(lua_State *L)
{
    eval(state_b, luaL_checkstring(L, 1), b_result, sizeof b_result);
    return 0;
}

static const char *const A_MODEL =
    "local Net = kiln.nn.Module{name = 'Net',\n"
    "  init = function(self) self.fc = kiln.nn.Linear(4, 3) end,\n"
    "  forward = function(self, x)\n"
    "    run_in_b(B_MODEL)\n"
    "    return self.fc(x):relu()\n"
    "  end}\n"
    "local m = Net()\n"
    "local cm = kiln.compile(m)\n"
    "local x = kiln.randn({2, 4})\n"
    "local y = cm(x)\n"
    "local e = m.fc(x):relu()\n" CHECK_AND_NAME;

int main(void)
{
    char a[512], b[512], fresh[512];

    /* seeds: A's manual_seed is not B's stream, and B's draws do not move A's */
    lua_State *A = new_state(), *B = new_state();
    eval(A, "kiln.manual_seed(42)", a, sizeof a);
    eval(B, DRAW, b, sizeof b);
    lua_State *F = new_state();
    eval(F, DRAW, fresh, sizeof fresh);
    lua_close(F);
    ok(strncmp(b, "error", 5) != 0, "B draws numbers (%s)", b);
    is_str(b, fresh, "B's stream after A's manual_seed is a fresh state's stream");
    eval(A, DRAW, a, sizeof a);
    F = new_state();
    eval(F, "kiln.manual_seed(42)", fresh, sizeof fresh);
    eval(F, DRAW, fresh, sizeof fresh);
    lua_close(F);
    is_str(a, fresh, "A's stream after B's draws is the stream of a fresh state seeded 42");

    /* a capture in progress in A is not B's; B's parameter map not A's */
    state_b = B;
    lua_pushcfunction(A, run_in_b);
    lua_setglobal(A, "run_in_b");
    lua_pushstring(A, B_MODEL);
    lua_setglobal(A, "B_MODEL");
    eval(A, A_MODEL, a, sizeof a);
    like(b_result, "ok ", "B compiles and runs its model in the middle of A's trace, right against eager");
    like(b_result, "weight", "B's graph names its parameter (weight)");
    ok(!strstr(b_result, "fc."), "B's graph has none of A's names (%s)", b_result);
    like(a, "ok ", "A's compiled model is right against eager after B ran in its trace");
    like(a, "fc.weight", "A's trace names its parameters after B's compiled call");

    /* closing A leaves B working */
    lua_close(A);
    eval(B, B_MODEL, b, sizeof b);
    like(b, "ok ", "B compiles and runs a model after A is closed");
    eval(B, "kiln.manual_seed(5)", b, sizeof b);
    eval(B, DRAW, b, sizeof b);
    F = new_state();
    eval(F, "kiln.manual_seed(5)", fresh, sizeof fresh);
    eval(F, DRAW, fresh, sizeof fresh);
    lua_close(F);
    is_str(b, fresh, "B's stream after A is closed is its own");
    lua_close(B);
    return done_testing();
}
