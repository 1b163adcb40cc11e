/* repl_pty: the interactive REPL driven through a pseudo-terminal, as a
 * user at a keyboard would: the prompt, line editing keys, history (in the
 * session, in the file, and across sessions), tab completion, multi-line
 * chunks, errors, Ctrl-C at the prompt and during a running chunk, Ctrl-D.
 *
 * Every wait is a poll() with a timeout, so a hang fails a test instead of
 * blocking prove. The kiln program is $KILN (t/run sets it).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

#define TIMEOUT_MS 15000 /* generous: the sanitizer build starts slowly */
/* A step that does real work (max-autotune's search of a whole sample)
 * gets longer: on a machine busy with other builds, the resumed search
 * outran 15 s and the checks after it read out of step. Waiting longer
 * costs nothing when the prompt comes. */
#define WORK_TIMEOUT_MS 120000
static long wait_ms = TIMEOUT_MS;

static int master = -1;
static pid_t child = -1;
static char out[1 << 18]; /* everything the REPL wrote */
static size_t outlen, mark;

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Read what is available within ms milliseconds; 0 at end of output. */
static int pump(int ms)
{
    struct pollfd p = {.fd = master, .events = POLLIN};
    int r = poll(&p, 1, ms);
    if (r <= 0) return r == 0 ? 1 : (errno == EINTR);
    if (outlen + 4096 >= sizeof out) return 0;
    ssize_t n = read(master, out + outlen, 4096);
    if (n <= 0) return 0; /* EIO: the child closed the terminal */
    outlen += (size_t)n;
    out[outlen] = '\0';
    return 1;
}

/* Print the output after the mark as TAP comments, control keys visible. */
static void show_since_mark(void)
{
    printf("; the output after the mark was:\n# ");
    for (const char *p = out + mark; *p; p++) {
        if (*p == '\n') printf("\n# ");
        else if (*p == '\r') printf("\\r");
        else if ((unsigned char)*p < 32) printf("^%c", *p + 64);
        else putchar(*p);
    }
    printf("\n");
}

/* Wait until s appears in the output after the mark; on success the mark
 * moves past it. On a timeout, show what came instead. */
static int expect(const char *s)
{
    long end = now_ms() + wait_ms;
    for (;;) {
        char *hit = strstr(out + mark, s);
        if (hit) {
            mark = (size_t)(hit - out) + strlen(s);
            return 1;
        }
        long left = end - now_ms();
        if (left <= 0 || !pump((int)(left > 200 ? 200 : left))) break;
    }
    printf("# waited for '%s'", s);
    show_since_mark();
    return 0;
}

/* The output from the mark up to the next prompt (moves the mark). */
static const char *until_prompt(char *buf, size_t size)
{
    size_t from = mark;
    buf[0] = '\0';
    if (!expect("kiln> ")) return buf;
    size_t n = mark - from;
    if (n >= size) n = size - 1;
    memcpy(buf, out + from, n);
    buf[n] = '\0';
    return buf;
}

static void type(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(master, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* Let the output settle (for keys typed into a half-drawn line). */
static void settle(int ms)
{
    long end = now_ms() + ms;
    while (now_ms() < end && pump(20)) continue;
}

static void start(const char *kiln, const char *history)
{
    struct winsize ws = {.ws_row = 24, .ws_col = 100};
    outlen = mark = 0;
    out[0] = '\0';
    child = forkpty(&master, NULL, NULL, &ws);
    if (child < 0) {
        perror("forkpty");
        exit(1);
    }
    if (child == 0) {
        setenv("TERM", "xterm", 1);
        setenv("KILN_HISTORY", history, 1);
        execl(kiln, "kiln", (char *)NULL);
        perror(kiln);
        _exit(127);
    }
}

/* Wait for the child to exit; its status, or -1 on a timeout (then kill it). */
static int finish(void)
{
    long end = now_ms() + TIMEOUT_MS;
    int status;
    for (;;) {
        pid_t r = waitpid(child, &status, WNOHANG);
        if (r == child) break;
        if (now_ms() > end) {
            printf("# kiln did not exit");
            show_since_mark();
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
            close(master);
            return -1;
        }
        pump(50);
    }
    settle(50);
    close(master);
    child = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static char *slurp(const char *path)
{
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    return buf;
}

#define LEFT "\033[D"
#define RIGHT "\033[C"
#define UP "\033[A"
#define KEY_CTRL(c) ((char[]){(char)((c)&037), 0})

int main(void)
{
    const char *kiln = getenv("KILN");
    if (!kiln || access(kiln, X_OK) != 0) skip_all("$KILN is not an executable kiln program");
    char history[] = "/tmp/kiln_pty_history_XXXXXX";
    int hfd = mkstemp(history);
    if (hfd < 0) skip_all("cannot make a temporary file");
    close(hfd);
    unlink(history); /* kiln must create it */
    char seg[1 << 14];

    start(kiln, history);
    ok(expect("kiln "), "a banner comes first, with the version");
    ok(expect(" · mode eager · device "), "... the mode and the device");
    ok(expect(":help for the commands"), "... and where help is");
    ok(expect("kiln> "), "the prompt appears");

    type("1+1\r");
    like(until_prompt(seg, sizeof seg), "\r\n2\r\n", "an expression prints its value");

    /* "retrun 1+1" fixed into "return 1+10" with the editing keys:
     * Left x3, Ctrl-A, Right x4 (after "retr"), Backspace, Right, "r",
     * Ctrl-E, "0". */
    type("retrun 1+1");
    settle(100);
    type(LEFT LEFT LEFT);
    type(KEY_CTRL('a'));
    type(RIGHT RIGHT RIGHT RIGHT);
    type("\177");
    type(RIGHT);
    type("r");
    type(KEY_CTRL('e'));
    type("0\r");
    const char *s = until_prompt(seg, sizeof seg);
    like(s, "\r\n11\r\n", "arrows, Ctrl-A, Ctrl-E and backspace fixed the line (1+10 = 11)");
    ok(!strstr(s, "syntax error") && !strstr(s, "near"), "the edited line had no syntax error");

    type(UP "\r");
    like(until_prompt(seg, sizeof seg), "\r\n11\r\n", "Up recalls the previous line from history");

    type("for i=1,3 do\r");
    ok(expect("  >> "), "an incomplete chunk shows the continuation prompt");
    type("io.write(i*10, ' ')\r");
    ok(expect("  >> "), "still incomplete: continuation prompt again");
    type("end\r");
    like(until_prompt(seg, sizeof seg), "10 20 30", "the multi-line chunk ran once complete");

    type("kiln.vers\t");
    settle(200);
    type("\r");
    like(until_prompt(seg, sizeof seg), "0.1.0", "Tab completed kiln.vers into kiln.version");

    type("kiln.Tensor.resh\t");
    settle(200);
    type(KEY_CTRL('a'));
    type("return type(");
    type(KEY_CTRL('e'));
    type(")\r");
    like(until_prompt(seg, sizeof seg), "function", "Tab completed a field two tables deep (kiln.Tensor.reshape)");

    type(":hel\t");
    settle(200);
    type("\r");
    like(until_prompt(seg, sizeof seg), ":run [n]", "Tab completed :hel into :help, which lists the commands");

    type(":load CMakeLis\t");
    settle(200);
    type("\r");
    like(until_prompt(seg, sizeof seg), "cannot load model file 'CMakeLists.txt'",
         "Tab completed a file name after :load");

    type("error('oops')\r");
    s = until_prompt(seg, sizeof seg);
    like(s, "oops", "an error prints its message");
    like(s, "stack traceback", "... and a traceback");
    type("return 3*3\r");
    like(until_prompt(seg, sizeof seg), "\r\n9\r\n", "the session goes on after an error");

    type("undefined_thing_xyz");
    settle(100);
    type(KEY_CTRL('c'));
    s = until_prompt(seg, sizeof seg);
    ok(!strstr(s, "error") && !strstr(s, "nil"), "Ctrl-C at the prompt discards the line unrun");
    type("return 5\r");
    like(until_prompt(seg, sizeof seg), "\r\n5\r\n", "a fresh prompt after Ctrl-C takes the next line");

    type("for i=1,2 do\r");
    ok(expect("  >> "), "continuation prompt");
    type(KEY_CTRL('c'));
    s = until_prompt(seg, sizeof seg);
    type("return 6\r");
    like(until_prompt(seg, sizeof seg), "\r\n6\r\n", "Ctrl-C at the continuation prompt drops the whole chunk");

    type("while true do end\r");
    settle(300);
    type(KEY_CTRL('c'));
    s = until_prompt(seg, sizeof seg);
    like(s, "interrupted", "Ctrl-C stops a running chunk with 'interrupted'");
    type("return 7\r");
    like(until_prompt(seg, sizeof seg), "\r\n7\r\n", "the next line still works after an interrupt");

    /* Ctrl-C during max-autotune's search: it stops, keeps what it
     * measured, and the prompt comes back */
    /* the small size: the search takes a second or two, long enough to
     * interrupt at its first progress report and short enough to resume */
    type("kiln.config.cache_dir = os.tmpname() .. '-autotune'; kiln.config.autotune_budget_s = 300\r");
    until_prompt(seg, sizeof seg);
    type("kiln.session.small = true\r");
    until_prompt(seg, sizeof seg);
    type(":load samples/transformer_block.lua\r");
    until_prompt(seg, sizeof seg);
    type(":mode max-autotune\r");
    until_prompt(seg, sizeof seg);
    type(":run\r");
    wait_ms = WORK_TIMEOUT_MS; /* the first call compiles before it searches */
    ok(expect("autotune ["), "max-autotune's first call shows a progress bar");
    ok(expect(" kernels "), "with the kernels done");
    wait_ms = TIMEOUT_MS;
    type(KEY_CTRL('c'));
    s = until_prompt(seg, sizeof seg);
    like(s, "autotuning interrupted: ", "Ctrl-C stops the search and says what it kept");
    like(s, "interrupted", "the call ends with 'interrupted'");
    type(":autotune\r");
    s = until_prompt(seg, sizeof seg);
    like(s, "stopped: interrupted", ":autotune then shows the search was interrupted");
    /* the next call tunes the kernels the interrupted search left */
    type(":run\r");
    wait_ms = WORK_TIMEOUT_MS;
    s = until_prompt(seg, sizeof seg);
    wait_ms = TIMEOUT_MS;
    like(s, "autotune resuming: ", "the next call resumes the search, and its progress bar says so");
    like(s, " kernels left to tune", "... with the kernels left to tune");
    like(s, "autotuning resumed where Ctrl-C stopped it: ", "and says it resumed when it is done");
    ok(!strstr(s, "interrupted after"), "the resumed call runs to its end");
    type(":autotune\r");
    s = until_prompt(seg, sizeof seg);
    ok(!strstr(s, "stopped: interrupted"), ":autotune no longer shows the search as interrupted");

    /* Ctrl-C in :run, :time and :bench: how far each got, no traceback */
    type(":mode eager\r");
    until_prompt(seg, sizeof seg);
    type(":run 100000\r");
    settle(2000);
    type(KEY_CTRL('c'));
    s = until_prompt(seg, sizeof seg);
    like(s, " of 100000 runs\r\n", "Ctrl-C in :run: 'interrupted after N of 100000 runs'");
    like(s, "interrupted after ", "... (the words)");
    ok(!strstr(s, "traceback") && !strstr(s, ".lua:"), "... and no traceback through kiln's Lua files");
    type(":time 100000\r");
    ok(expect(":time ["), ":time draws a progress line once it has run a second");
    settle(500);
    type(KEY_CTRL('c'));
    s = until_prompt(seg, sizeof seg);
    like(s, " calls (:time)\r\n", "Ctrl-C in :time: 'interrupted after N of M ... calls (:time)'");
    ok(!strstr(s, "traceback"), "... and no traceback");
    type(":bench 100000\r");
    ok(expect(":bench eager ["), ":bench draws a progress line with the mode it is in");
    settle(500);
    type(KEY_CTRL('c'));
    s = until_prompt(seg, sizeof seg);
    like(s, " of 100000 timed calls (:bench eager)\r\n", "Ctrl-C in :bench: how far it got, in which mode");
    ok(!strstr(s, "traceback"), "... and no traceback");
    type("os.execute('rm -rf ' .. kiln.config.cache_dir)\r");
    until_prompt(seg, sizeof seg);
    type("return 7\r"); /* the last line, which the next session's Up recalls */
    until_prompt(seg, sizeof seg);

    type(KEY_CTRL('d'));
    is_int(finish(), 0, "Ctrl-D at an empty prompt exits with status 0");

    const char *h = slurp(history);
    ok(strstr(h, "1+10") != NULL, "the history file has the edited line");
    ok(strstr(h, "while") != NULL, "the history file has the interrupted chunk");
    ok(strstr(h, "undefined_thing_xyz") == NULL, "a line discarded by Ctrl-C is not in the history");

    /* A second session starts with the first one's history. */
    start(kiln, history);
    ok(expect("kiln> "), "a second session starts");
    type(UP "\r");
    like(until_prompt(seg, sizeof seg), "\r\n7\r\n", "Up recalls the last line of the previous session");
    /* typed chunks are numbered: a location says which chunk */
    type("error('boom')\r");
    like(until_prompt(seg, sizeof seg), "stdin#2:1: boom", "an error in the 2nd typed chunk says stdin#2:1");
    type(":history\r");
    like(until_prompt(seg, sizeof seg), "   2  error('boom')", ":history lists the typed chunks by number");
    type(":quit\r");
    is_int(finish(), 0, ":quit exits with status 0");

    unlink(history);
    return done_testing();
}
