/* tap.h: a small TAP producer for kiln's C tests (run by prove).
 *
 *   plan(n) or done_testing(); ok(cond, fmt, ...); is_int(got, want, name);
 *   is_str(got, want, name); like(got, substr, name); skip_all(reason);
 * Failures print file:line and the values. Exit status: 0 when all passed.
 */
#ifndef KN_TAP_H
#define KN_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed, tap_planned;

static inline void plan(int n)
{
    tap_planned = n;
    printf("1..%d\n", n);
}

static inline void skip_all(const char *reason)
{
    printf("1..0 # SKIP %s\n", reason);
    exit(0);
}

static inline int tap_ok(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int tap_ok(int cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    tap_n++;
    printf("%s %d - ", cond ? "ok" : "not ok", tap_n);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!cond) {
        tap_failed++;
        printf("#   Failed test at %s line %d.\n", file, line);
    }
    fflush(stdout);
    return cond;
}

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

#define is_int(got, want, name)                                                        \
    do {                                                                               \
        long long tap_g_ = (long long)(got), tap_w_ = (long long)(want);               \
        if (!ok(tap_g_ == tap_w_, "%s", name))                                         \
            printf("#          got: %lld\n#     expected: %lld\n", tap_g_, tap_w_);    \
    } while (0)

#define is_str(got, want, name)                                                        \
    do {                                                                               \
        const char *tap_g_ = (got), *tap_w_ = (want);                                  \
        if (!ok(tap_g_ && tap_w_ && strcmp(tap_g_, tap_w_) == 0, "%s", name))          \
            printf("#          got: '%s'\n#     expected: '%s'\n", tap_g_ ? tap_g_ : "(null)", tap_w_); \
    } while (0)

#define like(got, substr, name)                                                        \
    do {                                                                               \
        const char *tap_g_ = (got), *tap_w_ = (substr);                                \
        if (!ok(tap_g_ && strstr(tap_g_, tap_w_) != NULL, "%s", name))                \
            printf("#          got: '%s'\n#  to contain: '%s'\n", tap_g_ ? tap_g_ : "(null)", tap_w_); \
    } while (0)

static inline int done_testing(void)
{
    if (!tap_planned) printf("1..%d\n", tap_n);
    else if (tap_planned != tap_n) printf("# planned %d tests but ran %d\n", tap_planned, tap_n);
    return tap_failed || (tap_planned && tap_planned != tap_n) ? 1 : 0;
}

#endif
