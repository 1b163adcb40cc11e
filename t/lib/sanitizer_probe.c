/* sanitizer_probe: does one deliberate thing that the sanitizers see, so
 * t/ci_sanitizer_net.sh can check that CI's net catches every real report
 * (even from a process whose failure is expected) and only real ones.
 * Built only in the sanitizer build (KILN_SANITIZE).
 *   ub     signed overflow: a UBSan report, then exit (no recovery)
 *   heap   use after free: an ASan report
 *   leak   a lost block: a LeakSanitizer report at exit
 *   huge   a request larger than ASan allows: NULL and a warning, no report
 *   clean  nothing */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "clean";
    /* volatile: the compiler must not see the values and fold the UB away */
    volatile int big = INT_MAX, one = 1;
    if (strcmp(what, "ub") == 0) {
        int sum = big + one;
        printf("%d\n", sum);
    } else if (strcmp(what, "heap") == 0) {
        int *p = malloc(sizeof *p);
        int *volatile stale = p; /* hides the use after free from -Wuse-after-free */
        free(p);
        return stale[0] == 7;
    } else if (strcmp(what, "leak") == 0) {
        void *volatile lost = malloc(64);
        lost = NULL;
        (void)lost;
    } else if (strcmp(what, "huge") == 0) {
        void *p = malloc(((size_t)1 << 50) * (size_t)one);
        printf("%s\n", p ? "allocated" : "null");
        free(p);
    }
    return 3; /* a non-zero status a caller expects, as a failing kiln run */
}
