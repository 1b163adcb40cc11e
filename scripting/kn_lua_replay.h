/* kn_lua_replay: the direct replay of a compiled callable: recording what
 * a traced call needs to be replayed, and replaying it (see
 * kn_lua_replay.c). Private to scripting/. */
#ifndef KN_LUA_REPLAY_H
#define KN_LUA_REPLAY_H

#include <stdbool.h>

#include <lua.h>

#include "kn_lua_compiled_ud.h"

/* Snapshot what the function at fn_idx (and the module at module_idx, 0:
 * none) can read into the table at rt (fields, upvals, tables); false when
 * there is too much to check at every call. keep_ids (0: none): a table of
 * the tensor ids the graph reads; a global tensor not among them (a result
 * the caller keeps in a global) is not compared. */
bool kn_lua_replay_snapshot(lua_State *L, int rt, int fn_idx, int module_idx, int keep_ids);

/* Try a direct replay of the call whose arguments are at [2, nargs + 1]
 * (uv: the callable's uservalue table; module_idx: its module, or nil);
 * pushes the results and returns their count, or -1 when a guard does not
 * hold (then nothing is pushed and the call traces). */
int kn_lua_replay_try(lua_State *L, compiled_ud *u, int uv, int nargs, int module_idx);

/* After a traced call: record what a replay needs, when the call allows it
 * (else say why not in u->no_replay). Results are at [first, top]; before
 * is the snapshot kn_lua_replay_snapshot took before the call. */
void kn_lua_replay_record(lua_State *L, compiled_ud *u, int uv, int nargs, bool is_module, int module_idx,
                          int first, int before);

/* Drop what the last record kept (the tape, the gradients a replay sets,
 * the tensors whose gradient it clears): before a new record, and when
 * the callable is freed. */
void kn_lua_replay_forget(replay_t *rp);

#endif
