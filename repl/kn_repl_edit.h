/* kn_repl_edit: line editing, history and tab completion for the REPL
 * program (kn_repl.c), which is the only caller. */
#ifndef KN_REPL_EDIT_H
#define KN_REPL_EDIT_H

#include <lua.h>

/* Registry key of the kiln module table, kept apart from the global `kiln`
 * so that a user who reassigns the global does not break the REPL (set by
 * kn_repl.c, read here by completion). */
#define KN_REPL_KILN_KEY "kiln.repl.module"

/* Results of kn_edit_readline. */
enum { KN_EDIT_EOF = 0, KN_EDIT_LINE = 1, KN_EDIT_INTERRUPTED = -1 };

/* Set up libedit for an interactive session on stdin: history from
 * $KILN_HISTORY (else ~/.kiln_history), tab completion through L (commands,
 * Lua names, file names). Call once, before the first kn_edit_readline. */
void kn_edit_init(lua_State *L);
/* Read one line with prompt. On KN_EDIT_LINE *line is malloc'ed (caller
 * frees), without its newline. KN_EDIT_INTERRUPTED: Ctrl-C discarded what
 * was typed. KN_EDIT_EOF: Ctrl-D on an empty line, or the terminal closed. */
int kn_edit_readline(const char *prompt, char **line);
/* Add one complete chunk (possibly several lines) to the history and save
 * the history file, so a crash loses nothing. Empty chunks and repeats of
 * the previous entry are skipped. */
void kn_edit_add_history(const char *chunk);
/* Free what kn_edit_init took. */
void kn_edit_close(void);

#endif
