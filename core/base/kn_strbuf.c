/* kn_strbuf: see kn_strbuf.h. */
#include "kn_strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(kn_strbuf *b, size_t extra)
{
    if (b->oom) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void kn_strbuf_put(kn_strbuf *b, const char *s, size_t n)
{
    if (!reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void kn_strbuf_puts(kn_strbuf *b, const char *s)
{
    kn_strbuf_put(b, s, strlen(s));
}

void kn_strbuf_printf(kn_strbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

kn_status kn_strbuf_finish(kn_strbuf *b, char **out, const char *what)
{
    if (b->oom || !b->p) {
        kn_strbuf_free(b);
        *out = NULL;
        return kn_error(KN_ERR_OOM, "%s: out of memory", what);
    }
    *out = b->p;
    b->p = NULL;
    b->len = b->cap = 0;
    return KN_OK;
}

void kn_strbuf_free(kn_strbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
