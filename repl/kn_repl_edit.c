/* kn_repl_edit: line editing for the interactive REPL, on libedit's readline
 * interface: reading a line, Ctrl-C at the prompt, history in a file, and tab
 * completion of `:` commands, Lua names and file names.
 *
 * Ctrl-C: libedit's own signal handling is off (rl_catch_signals = 0, as
 * Python does), so SIGINT reaches kiln's handler, which only sets the
 * kn_interrupt flag. edit_getc waits for input in pselect, which the signal
 * interrupts; it sees the flag and hands libedit a newline, which ends the
 * line; kn_edit_readline throws that line away. No longjmp out of libedit,
 * no libedit call from a signal handler.
 *
 * Completion candidates come from Lua (kiln.repl.complete in
 * scripting/lua/20_repl.lua), which knows tables and metatables better than
 * C would; file names come from libedit.
 */
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <unistd.h>

#include <editline/readline.h>
#include <lauxlib.h>

#include "kn_interrupt.h"
#include "kn_repl_edit.h"

#define KN_HISTORY_MAX 1000

static lua_State *edit_L;            /* for completion */
static char *history_path;           /* NULL: no history file */
static char *last_entry;             /* the newest history entry, to skip repeats */
static int line_discarded;           /* set by edit_getc when Ctrl-C ended the line */
static int utf8_input;               /* the locale is UTF-8: decode input bytes */
static volatile sig_atomic_t winch;  /* the terminal was resized */
/* The terminal, opened a second time with O_NONBLOCK: a file description
 * of kiln's own, so the flag does not leak to the shell that shares stdin's.
 * STDIN_FILENO (blocking) when that cannot be opened. */
static int input_fd = STDIN_FILENO;

/* Breaks between words for completion. '.', ':' stay inside a word so that
 * `kiln.nn.Li` and `x:sh` complete as one; '/', '-' and '~' too, for paths
 * (the Lua side splits `a-b.c` itself). */
static const char word_breaks[] = " \t\n\"'`@$><=;|&{}()[],+*%^#";

static void on_sigwinch(int sig)
{
    (void)sig;
    winch = 1;
}

/* Read one byte of terminal input; -1 at end of input. A Ctrl-C returns
 * '\n' after marking the line as discarded. Two races are closed here:
 * SIGINT and SIGWINCH stay blocked except inside pselect, so a signal that
 * lands just before the wait still interrupts it (a flag check followed by a
 * plain read() would sleep through it); and the read is non-blocking, since
 * the terminal flushes pending input when Ctrl-C is typed, so input that
 * pselect saw may be gone by the time of the read. */
static int read_byte(void)
{
    sigset_t block, orig;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGWINCH);
    sigprocmask(SIG_BLOCK, &block, &orig);
    int c = -1;
    for (;;) {
        if (winch) {
            winch = 0;
            rl_resize_terminal();
        }
        if (kn_interrupt_pending()) {
            kn_interrupt_clear();
            line_discarded = 1;
            c = '\n';
            break;
        }
        fd_set in;
        FD_ZERO(&in);
        FD_SET(input_fd, &in);
        int n = pselect(input_fd + 1, &in, NULL, NULL, NULL, &orig);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        unsigned char b;
        ssize_t r = read(input_fd, &b, 1);
        if (r == 1) {
            c = b;
            break;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        break; /* 0: the terminal hung up */
    }
    sigprocmask(SIG_SETMASK, &orig, NULL);
    return c;
}

/* libedit's rl_getc_function. libedit stores what it returns as one wide
 * character, so in a UTF-8 locale the bytes of a multi-byte character are
 * decoded here (else é would arrive as two characters). */
static int edit_getc(FILE *f)
{
    (void)f;
    int c = read_byte();
    if (c < 0xC0 || !utf8_input || line_discarded) return c;
    int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    int cp = c & (0x3F >> extra);
    for (int i = 0; i < extra; i++) {
        int b = read_byte();
        if (b < 0 || line_discarded) return b;
        if ((b & 0xC0) != 0x80) return 0xFFFD; /* malformed: the replacement character */
        cp = (cp << 6) | (b & 0x3F);
    }
    return cp;
}

/* ---- completion -------------------------------------------------------- */

static char **lua_matches; /* candidates of the current completion, NULL-terminated */
static int want_files;     /* kiln.repl.complete said: complete file names */

static void free_lua_matches(void)
{
    if (!lua_matches) return;
    for (char **p = lua_matches; *p; p++) free(*p);
    free(lua_matches);
    lua_matches = NULL;
}

/* The rl_completion_matches generator over lua_matches. */
static char *lua_match_entry(const char *text, int state)
{
    static int next;
    (void)text;
    if (state == 0) next = 0;
    if (!lua_matches || !lua_matches[next]) return NULL;
    return strdup(lua_matches[next++]);
}

/* kiln.repl.complete(word, line_before_word) -> list of candidates, copied
 * into lua_matches, or nil for "file names fit here" (want_files). Runs
 * protected: a completion must never raise. */
static int collect_lua_matches(lua_State *L)
{
    const char *word = lua_tostring(L, 1);
    const char *before = lua_tostring(L, 2);
    lua_getfield(L, LUA_REGISTRYINDEX, KN_REPL_KILN_KEY);
    lua_getfield(L, -1, "repl");
    lua_getfield(L, -1, "complete");
    lua_pushstring(L, word);
    lua_pushstring(L, before);
    lua_call(L, 2, 1);
    if (lua_isnil(L, -1)) want_files = 1;
    if (!lua_istable(L, -1)) return 0;
    lua_Integer n = luaL_len(L, -1);
    if (n <= 0 || n > 100000) return 0;
    lua_matches = calloc((size_t)n + 1, sizeof *lua_matches);
    if (!lua_matches) return 0;
    for (lua_Integer i = 1, k = 0; i <= n; i++) {
        const char *s = lua_geti(L, -1, i) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (s && (lua_matches[k] = strdup(s)) != NULL) k++;
        lua_pop(L, 1);
    }
    return 0;
}

/* Inside an unclosed string literal (the text before the word has an odd
 * number of unescaped quotes of one kind)? Then complete file names. */
static int in_string(const char *s, int len)
{
    char quote = 0;
    for (int i = 0; i < len; i++) {
        if (quote && s[i] == '\\') i++;
        else if (quote && s[i] == quote) quote = 0;
        else if (!quote && (s[i] == '"' || s[i] == '\'')) quote = s[i];
    }
    return quote != 0;
}

static char **complete_file(const char *text)
{
    char **m = rl_completion_matches(text, rl_filename_completion_function);
    struct stat st;
    /* libedit's readline interface appends the same character to any single
     * match; a directory wants '/', so the user can go on typing below it. */
    rl_completion_append_character = ' ';
    if (m && !m[2] && stat(m[0], &st) == 0 && S_ISDIR(st.st_mode))
        rl_completion_append_character = '/';
    return m;
}

/* rl_attempted_completion_function: text is the word before the cursor,
 * rl_line_buffer[0..start) what precedes it. */
static char **edit_complete(const char *text, int start, int end)
{
    (void)end;
    rl_attempted_completion_over = 1; /* never fall back to libedit's default */
    const char *line = rl_line_buffer ? rl_line_buffer : "";
    if (in_string(line, start)) return complete_file(text);
    int lead = (int)strspn(line, " \t");
    int is_command = line[lead] == ':' && line[lead + 1] != ':';

    rl_completion_append_character = is_command ? ' ' : '\0';
    free_lua_matches();
    want_files = 0;
    lua_State *L = edit_L;
    int top = lua_gettop(L);
    lua_pushcfunction(L, collect_lua_matches);
    lua_pushstring(L, text);
    lua_pushlstring(L, line, (size_t)start);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) free_lua_matches();
    lua_settop(L, top);
    if (want_files) return complete_file(text);
    char **m = lua_matches ? rl_completion_matches(text, lua_match_entry) : NULL;
    free_lua_matches();
    return m;
}

/* ---- history ----------------------------------------------------------- */

/* $KILN_HISTORY (empty: none), else ~/.kiln_history; NULL when unknown. */
static char *find_history_path(void)
{
    const char *env = getenv("KILN_HISTORY");
    if (env) return env[0] ? strdup(env) : NULL;
    const char *home = getenv("HOME");
    if (!home || !home[0]) return NULL;
    size_t n = strlen(home) + sizeof "/.kiln_history";
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/.kiln_history", home);
    return p;
}

void kn_edit_add_history(const char *chunk)
{
    if (!chunk || !chunk[strspn(chunk, " \t\n")]) return;
    if (last_entry && strcmp(last_entry, chunk) == 0) return;
    free(last_entry);
    last_entry = strdup(chunk);
    add_history(chunk);
    /* Saving after every entry: a crash or a kill loses no history. The file
     * holds at most KN_HISTORY_MAX entries, so this stays cheap. */
    if (history_path) write_history(history_path);
}

/* ---- setup ------------------------------------------------------------- */

/* rl_pre_input_hook: put the terminal in raw mode before the prompt shows.
 * libedit would do it only at the first key read, after printing the
 * prompt; a Ctrl-D typed in between reached a canonical-mode terminal, which
 * turned it into an end-of-file mark that libedit later read as a NUL, and
 * Ctrl-D was lost. */
static int raw_before_prompt(void)
{
    rl_prep_terminal(0);
    return 0;
}

void kn_edit_init(lua_State *L)
{
    edit_L = L;
    /* libedit turns input into wide characters by the locale's rules; only
     * the character classes are taken from the environment, so Lua's number
     * formatting (LC_NUMERIC) is untouched. */
    const char *loc = setlocale(LC_CTYPE, "");
    utf8_input = loc && MB_CUR_MAX > 1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigwinch;
    sa.sa_flags = SA_RESTART; /* a resize must not fail the user's io.read */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, NULL);

    const char *tty = ttyname(STDIN_FILENO);
    int fd = tty ? open(tty, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) : -1;
    input_fd = fd >= 0 ? fd : STDIN_FILENO;

    rl_readline_name = "kiln";
    rl_catch_signals = 0;           /* kiln's SIGINT handler stays in place */
    rl_getc_function = edit_getc;   /* must be set before rl_initialize */
    rl_attempted_completion_function = edit_complete;
    rl_pre_input_hook = raw_before_prompt;
    rl_basic_word_break_characters = word_breaks;
    rl_initialize();
    using_history();
    stifle_history(KN_HISTORY_MAX);
    history_path = find_history_path();
    if (history_path) read_history(history_path);
}

int kn_edit_readline(const char *prompt, char **line)
{
    line_discarded = 0;
    kn_interrupt_clear(); /* a Ctrl-C from before the prompt is not for it */
    char *s = readline(prompt);
    if (line_discarded) {
        free(s);
        *line = NULL;
        return KN_EDIT_INTERRUPTED;
    }
    *line = s;
    return s ? KN_EDIT_LINE : KN_EDIT_EOF;
}

void kn_edit_close(void)
{
    if (input_fd != STDIN_FILENO) close(input_fd);
    input_fd = STDIN_FILENO;
    free(history_path);
    free(last_entry);
    history_path = last_entry = NULL;
    free_lua_matches();
}
