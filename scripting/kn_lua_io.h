/* kn_lua_io: kiln.load_safetensors and kiln.save_safetensors. Private to
 * scripting/. */
#ifndef KN_LUA_IO_H
#define KN_LUA_IO_H

#include <lua.h>

/* Add them to the kiln table on the stack top. */
void kn_lua_open_io(lua_State *L);

#endif
