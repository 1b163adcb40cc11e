/* kn_lua_tensor_ud: the kiln.Tensor userdata (see kn_lua_tensor_ud.h). */
#include "kn_capture.h"
#include "kn_lua_state.h"
#include "kn_lua_tensor_ud.h"

/* The value of placeholder t, which has autograd history, as a header of
 * its own that carries t's meta (a new reference): the value itself must
 * not, since the tape's saved placeholders hold it through their lazy and
 * a meta pointing back at the tape would make a cycle no one frees. */
static kn_tensor *value_with_history(kn_tensor *t)
{
    kn_tensor *a;
    if (kn_tensor_alias(t->lazy->value, &a) != KN_OK) return NULL;
    a->ag = t->ag;
    kn_grad_meta_retain(a->ag);
    return a;
}

/* A placeholder whose graph has run stands for its value: outside the
 * capture that made it, hand out the value (and, once that capture is over,
 * keep the value in the userdata for good). */
kn_tensor *kn_lua_tensor_of(lua_State *L, kn_lua_tensor_ud *u)
{
    kn_tensor *t = u->t;
    if (t && t->lazy && t->lazy->value) {
        struct kn_capture *cap = kn_lua_state_get(L)->cap;
        /* no capture runs now (the call that made it is over), or the
         * one that made it ended */
        if (t->ag && t->ag->fn && (!cap || !t->lazy->cap)) {
            kn_tensor *a = value_with_history(t);
            if (a) { /* kept in the userdata for good, as below */
                u->t = a;
                kn_tensor_release(t);
                return a;
            }
        }
        if (!cap || t->lazy->cap != cap) {
            kn_tensor *v = t->lazy->value;
            if (t->ag && !t->ag->fn && !v->ag) { /* why it has no history: a compiled call made it */
                v->ag = t->ag;
                kn_grad_meta_retain(v->ag);
            }
            if (!t->lazy->cap) {
                kn_tensor_retain(v);
                u->t = v;
                kn_tensor_release(t);
            }
            return v;
        }
    }
    return t;
}

kn_tensor *kn_lua_totensor(lua_State *L, int idx)
{
    kn_lua_tensor_ud *u = luaL_testudata(L, idx, KN_TENSOR_MT);
    return u ? kn_lua_tensor_of(L, u) : NULL;
}

kn_tensor *kn_lua_checktensor(lua_State *L, int idx)
{
    kn_tensor *t = kn_lua_totensor(L, idx);
    if (!t) {
        const char *got = luaL_typename(L, idx);
        luaL_argerror(L, idx, lua_pushfstring(L, "tensor expected, got %s", got));
    }
    return t;
}

/* Lua's collector sees a tensor as a few bytes of userdata, not the
 * memory behind it: its storage (on the GPU too) and the autograd history
 * a result keeps alive (nodes and the values they saved). Unpaced, an
 * eager loop filled the GPU with garbage before Lua felt any pressure (the
 * transformer_block sample ran out of 80 GB that way), and 100,000 calls
 * of a compiled MLP with grad on grew the process to 585 MB and ran 2.3x
 * slower than with collections. So what core allocated since the last
 * push (kn_alloc_pressure_take) is counted here: every KN_GC_STEP_BYTES the
 * collector takes a step as if Lua had allocated it, and past
 * KN_GC_PRESSURE_BYTES a full collection frees what Lua no longer reaches. */
#define KN_GC_STEP_BYTES ((int64_t)32 << 20)
#define KN_GC_PRESSURE_BYTES ((int64_t)1 << 30)

void kn_lua_pushtensor(lua_State *L, kn_tensor *t)
{
    kn_lua_tensor_ud *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->t = t;
    luaL_setmetatable(L, KN_TENSOR_MT);
    kn_lua_state *s = kn_lua_state_get(L);
    int64_t fresh = kn_alloc_pressure_take();
    s->bytes_since_gc += fresh;
    s->bytes_since_step += fresh;
    /* the new userdata is on the stack: it stays through either */
    if (s->bytes_since_gc > KN_GC_PRESSURE_BYTES) {
        s->bytes_since_gc = s->bytes_since_step = 0;
        lua_gc(L, LUA_GCCOLLECT);
    } else if (s->bytes_since_step > KN_GC_STEP_BYTES) {
        int kb = (int)(s->bytes_since_step >> 10);
        s->bytes_since_step = 0;
        lua_gc(L, LUA_GCSTEP, kb);
    }
}
