/* kn_strbuf: a growable, always NUL-terminated string (generated source,
 * graph text, DOT, JSON headers).
 *
 * Appending never fails loudly: an allocation failure sets `oom`, later
 * appends do nothing, and whoever takes the text checks once at the end
 * (kn_strbuf_finish). That keeps the many small appends of a renderer free
 * of error paths. A zeroed kn_strbuf is empty and ready.
 */
#ifndef KN_STRBUF_H
#define KN_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_status.h"

typedef struct kn_strbuf {
    char *p;    /* NULL until the first append; else NUL-terminated */
    size_t len; /* bytes before the NUL */
    size_t cap;
    bool oom;   /* an append failed: the text is incomplete */
} kn_strbuf;

void kn_strbuf_put(kn_strbuf *b, const char *s, size_t n);
void kn_strbuf_puts(kn_strbuf *b, const char *s);
void kn_strbuf_printf(kn_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the text to the caller (*out, theirs to free), or free it and
 * return KN_ERR_OOM naming `what` when an append failed. */
kn_status kn_strbuf_finish(kn_strbuf *b, char **out, const char *what);
void kn_strbuf_free(kn_strbuf *b);

#endif
