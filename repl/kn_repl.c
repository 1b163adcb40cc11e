/* kn_repl: the `kiln` program, a Lua 5.4 interpreter with the kiln module
 * preloaded as the global `kiln`. Modelled on Lua's own lua.c:
 *
 *   kiln                     REPL (prompt, line editing, history) when stdin
 *                            is a terminal; else read lines from stdin with
 *                            no prompt and exit 1 if any of them failed
 *   kiln FILE.lua [args]     run a script with the global `arg`, as lua does
 *                            (a model file: says to use -i or :load)
 *   kiln -i FILE.lua         run it (load it, if it is a model file), then the REPL
 *   kiln -e CODE             run a chunk; -i then enters the REPL
 *   kiln --help, --version
 *
 * In the REPL a line is first tried as `return <line>` so an expression
 * prints its values; a chunk whose syntax error ends at <eof> is incomplete
 * and more lines are read; a line starting with ':' is a command, run by
 * kiln.repl.command (scripting/lua/20_repl.lua). Errors print the message and
 * a traceback, and the session goes on.
 *
 * Ctrl-C: the SIGINT handler only sets the kn_interrupt flag (which C
 * kernels poll) and, while a chunk runs, a Lua hook that raises
 * "interrupted" at the next Lua instruction. lua_sethook is the one Lua call
 * that is safe in a signal handler.
 */
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "kn_interrupt.h"
#include "kn_lua.h"
#include "kn_repl_edit.h"

#ifndef KILN_VERSION
#define KILN_VERSION "0.0.0"
#endif

#define PROMPT "kiln> "
#define PROMPT2 "  >> "
#define EOFMARK "<eof>"
#define MARKLEN (sizeof(EOFMARK) / sizeof(char) - 1)
/* After this many Ctrl-C that never reached Lua (a C call that does not
 * poll kn_interrupt_pending), the next one ends the program. */
#define KN_STUCK_INTERRUPTS 3

static const char *progname = "kiln";

/* ---- Ctrl-C ------------------------------------------------------------ */

static lua_State *volatile running_L;       /* set while a chunk runs */
static volatile sig_atomic_t unheard_sigints; /* Ctrl-C since Lua last heard one */

/* The hook the signal handler sets: raise "interrupted" in the running code.
 * A hook left over from a Ctrl-C that came as a chunk ended finds the flag
 * cleared and only removes itself. */
static void interrupt_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    unheard_sigints = 0;
    if (kn_interrupt_pending()) luaL_error(L, "interrupted");
}

static void on_sigint(int sig)
{
    kn_interrupt_request();
    lua_State *L = running_L;
    if (!L) return; /* at the prompt: kn_repl_edit.c reads the flag */
    if (++unheard_sigints > KN_STUCK_INTERRUPTS) {
        static const char msg[] = "\nkiln: interrupted again and again without effect; exiting\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* No SA_RESTART: a blocked read() (the prompt, io.read) must return EINTR. */
static void install_sigint(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* ---- messages and calls ------------------------------------------------ */

/* Print an error message to stderr, after what the program printed so far
 * (stdout is flushed first, so piped output keeps its order). */
static void l_message(const char *pname, const char *msg)
{
    fflush(stdout);
    if (pname) fprintf(stderr, "%s: ", pname);
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
}

/* Report a failed status with the error message on the top of the stack. */
static int report(lua_State *L, int status)
{
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        if (msg == NULL) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, -1));
        l_message(progname, msg);
        lua_settop(L, 0);
    }
    return status;
}

/* Message handler: append a traceback to string errors. An error object
 * with __tostring (kiln's command usage errors) gives just that string: a
 * user who typed `:run` with no model needs no stack. */
/* Ctrl-C inside a REPL command: the command's own word on where it stopped
 * (kiln.repl.interrupt_note(): "interrupted after 3 of 100 runs"), pushed
 * on the stack; false when there is none (a plain chunk, no Ctrl-C). */
static bool push_interrupt_note(lua_State *L)
{
    if (!kn_interrupt_pending()) return false;
    lua_sethook(L, NULL, 0, 0); /* the Ctrl-C is being answered: no second "interrupted" in the note */
    int top = lua_gettop(L);
    if (lua_getglobal(L, "kiln") == LUA_TTABLE && lua_getfield(L, -1, "repl") == LUA_TTABLE &&
        lua_getfield(L, -1, "interrupt_note") == LUA_TFUNCTION && lua_pcall(L, 0, 1, 0) == LUA_OK &&
        lua_type(L, -1) == LUA_TSTRING) {
        lua_replace(L, top + 1);
        lua_settop(L, top + 1);
        return true;
    }
    lua_settop(L, top);
    return false;
}

/* Forget the note of the command that just ended, and end its progress
 * line (kiln.profiler.progress_end: the line is cleared before an error
 * is printed, and no later call draws under the old label). */
static void clear_interrupt_note(lua_State *L)
{
    int top = lua_gettop(L);
    if (lua_getglobal(L, "kiln") == LUA_TTABLE) {
        if (lua_getfield(L, -1, "repl") == LUA_TTABLE) {
            lua_pushnil(L);
            lua_setfield(L, -2, "interrupt_note");
        }
        lua_pop(L, 1);
        if (lua_getfield(L, -1, "profiler") == LUA_TTABLE && lua_getfield(L, -1, "progress_end") == LUA_TFUNCTION)
            lua_pcall(L, 0, 0, 0);
    }
    lua_settop(L, top);
}

/* The traceback at the top of the stack without kiln's own Lua frames
 * ("\tkiln/40_timing.lua:12: in ...") and the C frames between them: an
 * error raised inside kiln's Lua ends at the user's frame that called it,
 * with one line saying how many kiln frames were left out. */
static void trim_kiln_frames(lua_State *L)
{
    const char *tb = lua_tostring(L, -1);
    if (!tb) return;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    int dropped = 0;
    const char *p = tb;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
#define STARTS(lit) (strncmp(p, lit, sizeof lit - 1) == 0)
        bool kiln_frame = STARTS("\tkiln/") || STARTS("\t[C]: in function 'error'") || STARTS("\t(...tail calls...)") ||
                          (dropped && STARTS("\t[C]: in ") && !STARTS("\t[C]: in ?"));
#undef STARTS
        if (kiln_frame) dropped++;
        else luaL_addlstring(&b, p, len);
        p += len;
    }
    if (dropped) lua_pushfstring(L, "\n\t(%d frame%s inside kiln left out)", dropped, dropped == 1 ? "" : "s");
    else lua_pushliteral(L, "");
    luaL_addvalue(&b);
    luaL_pushresult(&b);
    lua_remove(L, -2);
}

static int msghandler(lua_State *L)
{
    /* an interrupted command says how far it got; kiln's own Lua frames
     * are no traceback a user needs */
    if (push_interrupt_note(L)) return 1;
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    trim_kiln_frames(L);
    return 1;
}

/* Call the function below the narg arguments on the stack, with the message
 * handler and with Ctrl-C armed. */
static int docall(lua_State *L, int narg, int nres)
{
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    kn_interrupt_clear();
    unheard_sigints = 0;
    running_L = L;
    int status = lua_pcall(L, narg, nres, base);
    running_L = NULL;
    lua_sethook(L, NULL, 0, 0); /* set by a Ctrl-C that C code honoured first */
    kn_interrupt_clear();
    clear_interrupt_note(L);
    lua_remove(L, base);
    return status;
}

static int dochunk(lua_State *L, int status)
{
    if (status == LUA_OK) status = docall(L, 0, 0);
    return report(L, status);
}

static int dostring(lua_State *L, const char *s, const char *name)
{
    return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* Push kiln.repl[name] (a function of the scripting/lua/2x_repl*.lua or 60_report.lua files), or nil. */
static int push_repl_fn(lua_State *L, const char *name)
{
    lua_getfield(L, LUA_REGISTRYINDEX, KN_REPL_KILN_KEY);
    if (lua_getfield(L, -1, "repl") == LUA_TTABLE) lua_getfield(L, -1, name);
    else lua_pushnil(L);
    lua_replace(L, -3);
    lua_pop(L, 1);
    return lua_isfunction(L, -1);
}

/* Print the n values on the top of the stack: kiln.repl.show formats
 * tables readably; plain print is the fallback. */
static void print_results(lua_State *L, int n)
{
    if (n <= 0) return;
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    if (!push_repl_fn(L, "show")) {
        lua_pop(L, 1);
        lua_getglobal(L, "print");
    }
    lua_insert(L, -(n + 1));
    if (docall(L, n, 0) != LUA_OK)
        l_message(progname, lua_pushfstring(L, "error calling 'print' (%s)", lua_tostring(L, -1)));
}

/* ---- reading chunks ---------------------------------------------------- */

typedef struct {
    int interactive;   /* prompt and libedit, else plain lines from stdin */
    int lineno;        /* lines read from stdin so far (piped mode) */
    int chunk_line;    /* line of stdin where the current chunk starts */
    int chunk_no;      /* chunks typed so far (interactive): the N of "stdin#N:LINE" */
    int quit;          /* :quit was asked for */
    char *buf;         /* getline's buffer (piped mode) */
    size_t cap;
} repl_state;

static repl_state repl;

/* Read one line and push it. Returns KN_EDIT_LINE, KN_EDIT_EOF or
 * KN_EDIT_INTERRUPTED (Ctrl-C at the prompt). */
static int pushline(lua_State *L, int firstline)
{
    if (repl.interactive) {
        char *b;
        int r = kn_edit_readline(firstline ? PROMPT : PROMPT2, &b);
        if (r == KN_EDIT_LINE) {
            lua_pushstring(L, b);
            free(b);
        }
        return r;
    }
    if (kn_interrupt_pending()) return KN_EDIT_INTERRUPTED; /* came between two lines */
    errno = 0;
    ssize_t n = getline(&repl.buf, &repl.cap, stdin);
    if (n < 0) return errno == EINTR && kn_interrupt_pending() ? KN_EDIT_INTERRUPTED : KN_EDIT_EOF;
    while (n > 0 && (repl.buf[n - 1] == '\n' || repl.buf[n - 1] == '\r')) n--;
    repl.lineno++;
    lua_pushlstring(L, repl.buf, (size_t)n);
    return KN_EDIT_LINE;
}

/* lua_Reader that feeds `pad` newlines and then the text: in piped mode a
 * chunk is loaded as if it sat at its line of stdin, so error messages name
 * the line of the input ("stdin:12:"). */
typedef struct {
    int pad;
    const char *text;
    size_t len;
} chunk_reader;

static const char *read_chunk(lua_State *L, void *ud, size_t *size)
{
    static char newlines[512];
    chunk_reader *r = ud;
    (void)L;
    if (r->pad > 0) {
        if (!newlines[0]) memset(newlines, '\n', sizeof newlines);
        *size = (size_t)r->pad < sizeof newlines ? (size_t)r->pad : sizeof newlines;
        r->pad -= (int)*size;
        return newlines;
    }
    *size = r->len;
    r->len = 0;
    return *size ? r->text : NULL;
}

/* Piped input keeps stdin's own line numbers ("stdin:12"); typed chunks are
 * numbered, so that a location from an earlier chunk ("stdin#3:2", in a
 * break's stack, a guard, an error) says which one (:history shows them). */
static int load_text(lua_State *L, const char *text, size_t len)
{
    chunk_reader r = {repl.interactive ? 0 : repl.chunk_line - 1, text, len};
    char name[32] = "=stdin";
    if (repl.interactive) snprintf(name, sizeof name, "=stdin#%d", repl.chunk_no);
    return lua_load(L, read_chunk, &r, name, "t");
}

/* kiln.repl.chunks[N] = the text of typed chunk N (for :history). */
static void remember_chunk(lua_State *L, int text_idx)
{
    if (!repl.interactive) return;
    text_idx = lua_absindex(L, text_idx);
    int top = lua_gettop(L);
    if (lua_getglobal(L, "kiln") == LUA_TTABLE && lua_getfield(L, -1, "repl") == LUA_TTABLE) {
        if (lua_getfield(L, -1, "chunks") != LUA_TTABLE) {
            lua_pop(L, 1);
            lua_newtable(L);
            lua_pushvalue(L, -1);
            lua_setfield(L, -3, "chunks");
        }
        lua_pushvalue(L, text_idx);
        lua_rawseti(L, -2, repl.chunk_no);
    }
    lua_settop(L, top);
}

/* Is the status a syntax error that ends at <eof> (more lines needed)? If so
 * pop the message. */
static int incomplete(lua_State *L, int status)
{
    if (status == LUA_ERRSYNTAX) {
        size_t lmsg;
        const char *msg = lua_tolstring(L, -1, &lmsg);
        if (lmsg >= MARKLEN && strcmp(msg + lmsg - MARKLEN, EOFMARK) == 0) {
            lua_pop(L, 1);
            return 1;
        }
    }
    return 0;
}

/* Try the line on the top of the stack as `return <line>`; on success the
 * function is pushed above the line. */
static int addreturn(lua_State *L)
{
    const char *line = lua_tostring(L, -1);
    const char *retline = lua_pushfstring(L, "return %s;", line);
    int status = load_text(L, retline, strlen(retline));
    lua_remove(L, -2); /* the "return ..." string */
    if (status != LUA_OK) lua_pop(L, 1);
    return status;
}

/* The text on the top of the stack is a statement, maybe the first line of
 * several: read lines until it compiles or fails for another reason. */
static int multiline(lua_State *L)
{
    for (;;) {
        size_t len;
        const char *text = lua_tolstring(L, 1, &len);
        int status = load_text(L, text, len);
        if (!incomplete(L, status)) return status;
        int r = pushline(L, 0);
        if (r == KN_EDIT_INTERRUPTED) return r;
        if (r == KN_EDIT_EOF) { /* input ended inside the chunk: report it */
            load_text(L, text, len);
            return LUA_ERRSYNTAX;
        }
        lua_pushliteral(L, "\n");
        lua_insert(L, -2);
        lua_concat(L, 3); /* chunk .. "\n" .. line */
    }
}

/* Is the line a `:` command? ("::label::" is Lua.) */
static int is_command(const char *line)
{
    line += strspn(line, " \t");
    return line[0] == ':' && line[1] != ':';
}

enum { CHUNK_EOF = -100, CHUNK_SKIP, CHUNK_COMMAND };

/* Read a chunk. Leaves on the stack [text, function] (status LUA_OK),
 * [text, message] (a syntax error), or [line] for CHUNK_COMMAND; returns
 * CHUNK_EOF at end of input and CHUNK_SKIP when Ctrl-C discarded the input. */
static int loadline(lua_State *L)
{
    lua_settop(L, 0);
    repl.chunk_line = repl.lineno + 1;
    int r = pushline(L, 1);
    if (r == KN_EDIT_EOF) return CHUNK_EOF;
    if (r == KN_EDIT_INTERRUPTED) return CHUNK_SKIP;
    if (is_command(lua_tostring(L, 1))) return CHUNK_COMMAND;
    repl.chunk_no++;
    int status = addreturn(L);
    if (status != LUA_OK) {
        status = multiline(L);
        if (status == KN_EDIT_INTERRUPTED) return CHUNK_SKIP;
    }
    remember_chunk(L, 1);
    return status;
}

/* Run the chunk loadline left; print its results. Returns the status. */
static int run_chunk(lua_State *L, int status)
{
    if (status == CHUNK_COMMAND) {
        push_repl_fn(L, "command");
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            lua_pushliteral(L, "the REPL commands are missing (kiln.repl.command is nil)");
            return report(L, LUA_ERRRUN);
        }
        lua_pushvalue(L, 1);
        return report(L, docall(L, 1, 0));
    }
    if (status == LUA_OK) {
        int base = lua_gettop(L) - 1; /* below the function */
        status = docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK) print_results(L, lua_gettop(L) - base);
    }
    return report(L, status);
}

/* kiln.repl.on_quit: :quit ends the loop after the current chunk, so the
 * exit status still says whether earlier lines failed. */
static int l_on_quit(lua_State *L)
{
    (void)L;
    repl.quit = 1;
    return 0;
}

/* Set kiln.repl.on_quit to f (NULL: remove it). Only the REPL loop has it:
 * in a script, kiln.cmd.quit() exits at once. */
static void set_on_quit(lua_State *L, lua_CFunction f)
{
    lua_getfield(L, LUA_REGISTRYINDEX, KN_REPL_KILN_KEY);
    if (lua_getfield(L, -1, "repl") == LUA_TTABLE) {
        if (f) lua_pushcfunction(L, f);
        else lua_pushnil(L);
        lua_setfield(L, -2, "on_quit");
    }
    lua_pop(L, 2);
}

/* The banner a person at a terminal sees first (kiln.repl.banner: version,
 * mode, device, where help is). Piped input gets none: what a script feeds
 * kiln prints only its own output. */
static void print_banner(lua_State *L)
{
    int top = lua_gettop(L);
    if (push_repl_fn(L, "banner") && lua_pcall(L, 0, 1, 0) == LUA_OK && lua_isstring(L, -1))
        printf("%s\n", lua_tostring(L, -1));
    lua_settop(L, top);
    fflush(stdout);
}

/* The read-eval-print loop, on a terminal or on piped lines. Returns the
 * number of chunks that failed. */
static int do_repl(lua_State *L, int interactive)
{
    const char *oldprogname = progname;
    int failed = 0;
    progname = NULL; /* REPL errors carry no "kiln: " prefix, as in lua.c */
    repl.interactive = interactive;
    set_on_quit(L, l_on_quit);
    if (interactive) {
        print_banner(L);
        kn_edit_init(L);
    }
    for (;;) {
        int status = loadline(L);
        if (status == CHUNK_EOF) break;
        if (status == CHUNK_SKIP) {
            if (!interactive) { /* Ctrl-C while reading piped input: stop */
                failed++;
                break;
            }
            continue;
        }
        if (interactive) kn_edit_add_history(lua_tostring(L, 1));
        if (run_chunk(L, status) != LUA_OK) failed++;
        lua_settop(L, 0);
        fflush(stdout);
        if (repl.quit) break;
    }
    if (interactive) {
        if (!repl.quit) fputs("\n", stdout);
        kn_edit_close();
    }
    set_on_quit(L, NULL);
    fflush(stdout);
    free(repl.buf);
    repl.buf = NULL;
    progname = oldprogname;
    return failed;
}

/* ---- command line ------------------------------------------------------ */

#define has_error 1 /* bad option */
#define has_i 2     /* -i */
#define has_v 4     /* -v, --version */
#define has_e 8     /* -e */
#define has_help 16 /* -h, --help */

static void print_usage(lua_State *L, const char *badoption)
{
    FILE *out = badoption ? stderr : stdout;
    if (badoption) {
        if (badoption[1] == 'e') fprintf(out, "%s: '%s' needs an argument\n", progname, badoption);
        else fprintf(out, "%s: unrecognized option '%s'\n", progname, badoption);
    }
    fprintf(out,
            "usage: %s [options] [script.lua [args]]\n"
            "Available options are:\n"
            "  -e code        run the Lua chunk 'code'\n"
            "  -i             enter the REPL after running 'script' or -e; a model\n"
            "                 file (one returning {name=, model=, inputs=}) is loaded\n"
            "                 as :load does, so :run works\n"
            "  -v, --version  show the version\n"
            "  -h, --help     show this help\n"
            "  --             stop handling options\n"
            "  -              run standard input as a Lua file\n"
            "With no script and no -e, kiln starts the REPL; when standard input is\n"
            "not a terminal it reads Lua lines and :commands from it with no prompt and\n"
            "exits with status 1 if any of them failed. The kiln module is the global\n"
            "'kiln' (also require \"kiln\"). History: $KILN_HISTORY or ~/.kiln_history.\n"
            "KILN_REPORT=FILE.html writes the session report (:report) at exit.\n",
            progname);
    if (badoption || !L || !push_repl_fn(L, "help_text")) return;
    if (lua_pcall(L, 0, 1, 0) == LUA_OK && lua_isstring(L, -1))
        fprintf(out, "\nREPL commands (each is also a Lua function, kiln.cmd.NAME):\n%s",
                lua_tostring(L, -1));
    lua_settop(L, 0);
}

static void print_version(void)
{
    printf("kiln %s (Lua %s.%s)\n", KILN_VERSION, LUA_VERSION_MAJOR, LUA_VERSION_MINOR);
    fflush(stdout);
}

/* Sort out the options; *first is the index of the script (or argc). */
static int collectargs(char **argv, int *first)
{
    int args = 0;
    int i;
    for (i = 1; argv[i] != NULL; i++) {
        *first = i;
        const char *a = argv[i];
        if (a[0] != '-' || strcmp(a, "-") == 0) return args; /* the script */
        if (strcmp(a, "--") == 0) {
            *first = i + 1;
            return args;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) args |= has_help;
        else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) args |= has_v;
        else if (strcmp(a, "-i") == 0) args |= has_i;
        else if (strncmp(a, "-e", 2) == 0) {
            args |= has_e;
            if (a[2] == '\0' && (argv[++i] == NULL || argv[i][0] == '-')) {
                *first = i - 1;
                return has_error;
            }
        } else {
            return has_error;
        }
    }
    *first = i;
    return args;
}

/* Run the -e chunks, in order. */
static int runargs(lua_State *L, char **argv, int n)
{
    for (int i = 1; i < n; i++) {
        if (strncmp(argv[i], "-e", 2) != 0) continue;
        const char *chunk = argv[i][2] ? argv[i] + 2 : argv[++i];
        if (dostring(L, chunk, "=(command line)") != LUA_OK) return 0;
    }
    return 1;
}

/* The global `arg`: arg[0] the script, arg[1..] its arguments, negative
 * indices the interpreter and options (as lua.c). */
static void createargtable(lua_State *L, char **argv, int argc, int script)
{
    if (script == argc) script = 0; /* no script: arg[0] is the program */
    int narg = argc - (script + 1);
    lua_createtable(L, narg > 0 ? narg : 0, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

static int pushargs(lua_State *L)
{
    if (lua_getglobal(L, "arg") != LUA_TTABLE) luaL_error(L, "'arg' is not a table");
    int n = (int)luaL_len(L, -1);
    luaL_checkstack(L, n + 3, "too many arguments to script");
    for (int i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
    lua_remove(L, -n - 1);
    return n;
}

/* Run the script; then_repl: the REPL follows (-i). A script that returns
 * a model spec (as the samples do) is loaded as :load would with -i, and
 * otherwise kiln says how to use it (kiln.repl.script_result). */
static int handle_script(lua_State *L, char **argv, int then_repl)
{
    const char *fname = argv[0];
    if (strcmp(fname, "-") == 0 && strcmp(argv[-1], "--") != 0) fname = NULL; /* stdin */
    int base = lua_gettop(L);
    int status = luaL_loadfile(L, fname);
    if (status == LUA_OK) {
        int n = pushargs(L);
        status = docall(L, n, LUA_MULTRET);
    }
    if (status == LUA_OK && lua_gettop(L) > base && push_repl_fn(L, "script_result")) {
        lua_pushvalue(L, base + 1);
        lua_pushstring(L, fname ? fname : "stdin");
        lua_pushboolean(L, then_repl);
        status = docall(L, 3, 0);
    }
    if (status == LUA_OK) lua_settop(L, base);
    return report(L, status);
}

/* `kiln report DIR [OUT.html]`: the page of a KILN_TRACE folder
 * (kiln.report_from_trace, scripting/lua/61_events.lua), written to OUT
 * (default DIR/report.html). A file named "report" still runs as a script. */
static int is_report_command(char **argv, int n)
{
    return n >= 1 && strcmp(argv[0], "report") == 0 && access("report", F_OK) != 0;
}

static int run_report_command(lua_State *L, char **argv, int n)
{
    if (n < 2) {
        lua_pushliteral(L, "usage: kiln report DIR [OUT.html] (DIR: a KILN_TRACE folder)");
        return report(L, LUA_ERRRUN);
    }
    static const char code[] = "local dir, out = ...\n"
                               "out = out or (dir .. '/report.html')\n"
                               "print('wrote ' .. kiln.report_from_trace(dir, out))\n";
    int status = luaL_loadbuffer(L, code, sizeof code - 1, "=kiln report");
    if (status == LUA_OK) {
        lua_pushstring(L, argv[1]);
        if (n >= 3) lua_pushstring(L, argv[2]);
        else lua_pushnil(L);
        status = docall(L, 2, 0);
    }
    return report(L, status);
}

/* KILN_REPORT=file.html: write the session report (kiln.repl.exit_report,
 * scripting/lua/60_report.lua) as the program ends. Returns 0 when it
 * could not be written (the message names the path). */
static int write_exit_report(lua_State *L)
{
    const char *path = getenv("KILN_REPORT");
    if (!path || !*path) return 1;
    if (!push_repl_fn(L, "exit_report")) {
        lua_pop(L, 1);
        return 1;
    }
    int status = docall(L, 0, 1);
    if (status == LUA_OK && lua_isstring(L, -1)) {
        fflush(stdout);
        fprintf(stderr, "%s: wrote the session report to %s\n", progname, lua_tostring(L, -1));
    }
    if (status == LUA_OK) lua_pop(L, 1);
    return report(L, status) == LUA_OK;
}

/* Open the libraries and the kiln module (the global `kiln`), and give the
 * REPL its own reference to the module. */
static void open_kiln(lua_State *L)
{
    luaL_openlibs(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, KN_REPL_KILN_KEY);
}

/* Everything, in protected mode (so that an out-of-memory while opening is
 * reported, not fatal). Pushes a boolean: did it all succeed? */
static int pmain(lua_State *L)
{
    int argc = (int)lua_tointeger(L, 1);
    char **argv = (char **)lua_touserdata(L, 2);
    int script = argc;
    int args = collectargs(argv, &script);
    luaL_checkversion(L);
    if (args == has_error) {
        print_usage(NULL, argv[script]);
        return 0;
    }
    lua_gc(L, LUA_GCRESTART);
    lua_gc(L, LUA_GCGEN, 0, 0);
    open_kiln(L);
    if (args & has_help) {
        print_usage(L, NULL);
        lua_pushboolean(L, 1);
        return 1;
    }
    if (args & has_v) print_version();
    createargtable(L, argv, argc, script);
    install_sigint();
    int ok = runargs(L, argv, script);
    if (ok && script < argc && is_report_command(argv + script, argc - script)) {
        lua_pushboolean(L, run_report_command(L, argv + script, argc - script) == LUA_OK);
        return 1;
    }
    if (ok && script < argc && handle_script(L, argv + script, args & has_i) != LUA_OK) ok = 0;
    if (ok && (args & has_i || (script == argc && !(args & (has_e | has_v))))) {
        /* A person at a terminal saw each error; piped lines are a script,
         * and their failures make the exit status. */
        int interactive = isatty(STDIN_FILENO);
        int failed = do_repl(L, interactive);
        ok = interactive || failed == 0;
    }
    /* also after a failed script: the report shows what was compiled */
    if (!write_exit_report(L)) ok = 0;
    lua_pushboolean(L, ok);
    return 1;
}

/* A crash is a kiln bug: say so and print the native stack (addresses
 * resolve with `addr2line -e kiln`), then die with the same signal so
 * the exit status stays honest. Only async-signal-safe calls here. */
static void on_crash(int sig)
{
    static const char msg[] = "kiln: internal error (fatal signal); native stack:\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) { /* nothing more to do */ }
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv)
{
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc now: it cannot be loaded inside the handler */
    signal(SIGSEGV, on_crash);
    signal(SIGFPE, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGILL, on_crash);
    lua_State *L = luaL_newstate();
    if (L == NULL) {
        l_message(argv[0], "cannot create state: not enough memory");
        return EXIT_FAILURE;
    }
    lua_gc(L, LUA_GCSTOP); /* stop the collector while building the state */
    lua_pushcfunction(L, pmain);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int status = lua_pcall(L, 2, 1, 0);
    int result = lua_toboolean(L, -1);
    report(L, status);
    lua_close(L);
    return (result && status == LUA_OK) ? EXIT_SUCCESS : EXIT_FAILURE;
}
