/* kn_safetensors: the safetensors reader (see kn_safetensors.h), and the
 * dtype table and byte helpers the writer (kn_safetensors_write.c) shares
 * through kn_safetensors_internal.h.
 *
 * The header is read by a small strict JSON parser that streams: it checks the
 * syntax and fills one record per tensor as it goes instead of building a
 * tree, so a hostile 100 MB header costs memory in proportion to its tensors,
 * not to its tokens. Only integers are accepted as numbers (a safetensors
 * header holds no others), and unknown fields inside a tensor entry are
 * skipped, as the reference implementation does.
 */
#include "kn_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kn_fs.h"
#include "kn_safetensors_internal.h"

/* Nesting is only two deep in a valid header; the limit keeps skipping of
 * unknown values from recursing without bound on hostile input. */
#define ST_MAX_DEPTH 64

/* ---------------------------------------------------------------- dtypes */

/* rank: the position in the reference implementation's Dtype enum, which is
 * in increasing alignment order; the writer sorts by it (widest first) so
 * files come out byte-identical to the Python library's. */
static const struct {
    const char *name;
    kn_dtype dt;
    int rank;
} st_dtypes[] = {
    {"BOOL", KN_BOOL, 0}, {"F16", KN_F16, 7},  {"BF16", KN_BF16, 8}, {"I32", KN_I32, 9},
    {"F32", KN_F32, 11},  {"F64", KN_F64, 12}, {"I64", KN_I64, 13},
};
#define ST_NDTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

/* Valid in the format, but kiln has no such element type. */
static const char *const st_foreign_dtypes[] = {
    "U8", "I8", "I16", "U16", "U32", "U64", "F8_E5M2", "F8_E4M3", "F8_E8M0",
    "F4", "F6_E2M3", "F6_E3M2", "C64",
};

const char *kn_st_dtype_name(kn_dtype dt)
{
    for (int i = 0; i < ST_NDTYPES; i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
    return "?";
}

int kn_st_dtype_rank(kn_dtype dt)
{
    for (int i = 0; i < ST_NDTYPES; i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].rank;
    return -1;
}

/* 0: a kiln dtype (in *out); 1: valid in the format but not in kiln; 2: unknown. */
static int st_dtype_lookup(const char *name, kn_dtype *out)
{
    for (int i = 0; i < ST_NDTYPES; i++)
        if (strcmp(name, st_dtypes[i].name) == 0) {
            *out = st_dtypes[i].dt;
            return 0;
        }
    for (size_t i = 0; i < sizeof st_foreign_dtypes / sizeof st_foreign_dtypes[0]; i++)
        if (strcmp(name, st_foreign_dtypes[i]) == 0) return 1;
    return 2;
}

#define ST_KILN_DTYPES "F32, F64, BF16, F16, I32, I64 and BOOL"

kn_status kn_st_dtype_parse(const char *name, kn_dtype *out)
{
    switch (st_dtype_lookup(name, out)) {
    case 0: return KN_OK;
    case 1:
        return kn_error(KN_ERR_FORMAT, "safetensors dtype %s is not supported by kiln (it reads "
                        ST_KILN_DTYPES ")", name);
    default: return kn_error(KN_ERR_FORMAT, "unknown safetensors dtype '%.40s'", name);
    }
}

/* Reverse the bytes of each element: safetensors data is little-endian. */
void kn_st_swap_elems(void *p, int64_t n, size_t esize)
{
    unsigned char *b = p;
    if (esize < 2) return;
    for (int64_t i = 0; i < n; i++, b += esize)
        for (size_t j = 0; j < esize / 2; j++) {
            unsigned char tmp = b[j];
            b[j] = b[esize - 1 - j];
            b[esize - 1 - j] = tmp;
        }
}

/* ------------------------------------------------------------ byte source */

/* Where the bytes come from: a FILE or a buffer. */
typedef struct st_src {
    FILE *f;
    const unsigned char *mem;
    int64_t size;
    const char *name; /* for messages */
} st_src;

static kn_status src_read(st_src *s, int64_t off, void *buf, int64_t n)
{
    if (n == 0) return KN_OK;
    if (off < 0 || n < 0 || off > s->size || n > s->size - off)
        return kn_error(KN_ERR_FORMAT, "%s: read of %lld bytes at offset %lld runs past the end "
                        "of the file (%lld bytes)", s->name, (long long)n, (long long)off,
                        (long long)s->size);
    if (s->mem) {
        memcpy(buf, s->mem + off, (size_t)n);
        return KN_OK;
    }
    if (fseeko(s->f, (off_t)off, SEEK_SET) != 0)
        return kn_error(KN_ERR_IO, "%s: cannot seek to offset %lld: %s", s->name,
                        (long long)off, strerror(errno));
    size_t got = fread(buf, 1, (size_t)n, s->f);
    if (got != (size_t)n) {
        if (ferror(s->f))
            return kn_error(KN_ERR_IO, "%s: read error at offset %lld: %s", s->name,
                            (long long)off, strerror(errno));
        /* The file shrank after we measured it. */
        return kn_error(KN_ERR_IO, "%s: unexpected end of file at offset %lld",
                        s->name, (long long)(off + (int64_t)got));
    }
    return KN_OK;
}

/* ---------------------------------------------------------- JSON scanning */

typedef struct jparser {
    const unsigned char *p; /* the header text */
    size_t len, pos;
    const char *file;
    int depth;
} jparser;

/* A syntax error: the message carries the file offset (8 + header byte),
 * which is what a hex dump of the file shows. */
static kn_status jerr(const jparser *P, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kn_status jerr(const jparser *P, size_t pos, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kn_error(KN_ERR_FORMAT, "%s: bad JSON header at byte %zu: %s", P->file, pos + 8, msg);
}

/* What is at pos, for "expected X, got Y" messages. */
static const char *jwhat(const jparser *P, size_t pos, char *buf, size_t bufsize)
{
    if (pos >= P->len) return "the end of the header";
    unsigned char c = P->p[pos];
    if (c >= 0x20 && c < 0x7f) snprintf(buf, bufsize, "'%c'", c);
    else snprintf(buf, bufsize, "byte 0x%02x", c);
    return buf;
}

static void jws(jparser *P)
{
    while (P->pos < P->len) {
        unsigned char c = P->p[P->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        P->pos++;
    }
}

static kn_status jexpect(jparser *P, char c, const char *context)
{
    jws(P);
    if (P->pos < P->len && P->p[P->pos] == (unsigned char)c) {
        P->pos++;
        return KN_OK;
    }
    char buf[16];
    return jerr(P, P->pos, "expected '%c' %s, got %s", c, context, jwhat(P, P->pos, buf, sizeof buf));
}

/* Consume c (after whitespace) if it is next; says whether it was. */
static int jaccept(jparser *P, char c)
{
    jws(P);
    if (P->pos < P->len && P->p[P->pos] == (unsigned char)c) {
        P->pos++;
        return 1;
    }
    return 0;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static kn_status jhex4(jparser *P, size_t at, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = at + (size_t)i < P->len ? hexval(P->p[at + (size_t)i]) : -1;
        if (h < 0) return jerr(P, at, "\\u must be followed by 4 hex digits");
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return KN_OK;
}

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 if invalid. */
size_t kn_st_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f; /* no UTF-16 surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else return 0;
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return len;
}

static size_t utf8_put(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Decode one escape at P->pos (just after the backslash) into out; advances. */
static kn_status jescape(jparser *P, char *out, size_t *n)
{
    size_t at = P->pos - 1;
    if (P->pos >= P->len) return jerr(P, at, "unterminated string");
    unsigned char e = P->p[P->pos++];
    static const char names[] = "\"\\/bfnrt", repl[] = "\"\\/\b\f\n\r\t";
    const char *simple = e ? strchr(names, e) : NULL;
    if (simple) {
        out[(*n)++] = repl[simple - names];
        return KN_OK;
    }
    if (e != 'u') return jerr(P, at, "invalid escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
    unsigned cp;
    KN_TRY(jhex4(P, P->pos, &cp));
    P->pos += 4;
    if (cp >= 0xdc00 && cp <= 0xdfff) return jerr(P, at, "lone low surrogate \\u%04x", cp);
    if (cp >= 0xd800 && cp <= 0xdbff) {
        unsigned lo;
        if (P->pos + 2 > P->len || P->p[P->pos] != '\\' || P->p[P->pos + 1] != 'u')
            return jerr(P, at, "high surrogate \\u%04x without a low surrogate", cp);
        KN_TRY(jhex4(P, P->pos + 2, &lo));
        if (lo < 0xdc00 || lo > 0xdfff)
            return jerr(P, at, "high surrogate \\u%04x followed by \\u%04x", cp, lo);
        P->pos += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    *n += utf8_put(cp, out + *n);
    return KN_OK;
}

/* A string at P->pos (after whitespace). *out is a new NUL-terminated string
 * (malloc'd, the caller frees) and *outlen its length, which may count NUL
 * bytes from \u0000; out may be NULL to only check and skip. */
static kn_status jstring(jparser *P, char **out, size_t *outlen)
{
    jws(P);
    char buf[16];
    if (P->pos >= P->len || P->p[P->pos] != '"')
        return jerr(P, P->pos, "expected a string, got %s", jwhat(P, P->pos, buf, sizeof buf));
    size_t start = P->pos++;
    /* First find the end, so the copy is sized by the string, not the header;
     * the decoded text is never longer than the escaped one. */
    size_t end = P->pos;
    while (end < P->len && P->p[end] != '"') end += P->p[end] == '\\' ? 2 : 1;
    if (end >= P->len) return jerr(P, start, "unterminated string");
    char *s = malloc(end - P->pos + 1);
    if (!s) return kn_error(KN_ERR_OOM, "%s: out of memory reading the header", P->file);
    size_t n = 0;
    kn_status st = KN_OK;
    while (st == KN_OK && P->pos < end) {
        unsigned char c = P->p[P->pos];
        if (c == '\\') {
            P->pos++;
            st = jescape(P, s, &n);
        } else if (c < 0x20) {
            st = jerr(P, P->pos, "control character 0x%02x in a string (must be escaped)", c);
        } else {
            size_t k = kn_st_utf8_seq(P->p + P->pos, end - P->pos);
            if (!k) st = jerr(P, P->pos, "invalid UTF-8 in a string");
            memcpy(s + n, P->p + P->pos, k);
            n += k;
            P->pos += k;
        }
    }
    if (st != KN_OK) {
        free(s);
        return st;
    }
    P->pos = end + 1;
    s[n] = '\0';
    if (out) *out = s;
    else free(s);
    if (outlen) *outlen = n;
    return KN_OK;
}

/* An integer (JSON number syntax, without fraction or exponent). */
static kn_status jint(jparser *P, int64_t *out)
{
    jws(P);
    size_t start = P->pos;
    int neg = 0;
    char buf[16];
    if (P->pos < P->len && P->p[P->pos] == '-') {
        neg = 1;
        P->pos++;
    }
    if (P->pos >= P->len || P->p[P->pos] < '0' || P->p[P->pos] > '9')
        return jerr(P, start, "expected an integer, got %s", jwhat(P, start, buf, sizeof buf));
    if (P->p[P->pos] == '0' && P->pos + 1 < P->len && P->p[P->pos + 1] >= '0' &&
        P->p[P->pos + 1] <= '9')
        return jerr(P, start, "leading zero in a number");
    uint64_t v = 0;
    while (P->pos < P->len && P->p[P->pos] >= '0' && P->p[P->pos] <= '9') {
        unsigned d = (unsigned)(P->p[P->pos++] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return jerr(P, start, "integer out of range");
        v = v * 10 + d;
    }
    if (P->pos < P->len && (P->p[P->pos] == '.' || P->p[P->pos] == 'e' || P->p[P->pos] == 'E'))
        return jerr(P, start, "expected an integer, got a number with a fraction or exponent");
    *out = neg ? -(int64_t)v : (int64_t)v;
    return KN_OK;
}

static kn_status jliteral(jparser *P, const char *word)
{
    size_t n = strlen(word);
    if (P->len - P->pos < n || memcmp(P->p + P->pos, word, n) != 0)
        return jerr(P, P->pos, "invalid literal");
    P->pos += n;
    return KN_OK;
}

/* Check and skip any value (a field kiln does not use). */
static kn_status jskip(jparser *P)
{
    jws(P);
    char buf[16];
    if (P->pos >= P->len)
        return jerr(P, P->pos, "expected a value, got the end of the header");
    unsigned char c = P->p[P->pos];
    if (c == '"') return jstring(P, NULL, NULL);
    if (c == '-' || (c >= '0' && c <= '9')) {
        int64_t v;
        return jint(P, &v);
    }
    if (c == 't') return jliteral(P, "true");
    if (c == 'f') return jliteral(P, "false");
    if (c == 'n') return jliteral(P, "null");
    if (c != '{' && c != '[') return jerr(P, P->pos, "expected a value, got %s", jwhat(P, P->pos, buf, sizeof buf));
    if (++P->depth > ST_MAX_DEPTH) return jerr(P, P->pos, "nesting deeper than %d levels", ST_MAX_DEPTH);
    P->pos++;
    char close = c == '{' ? '}' : ']';
    if (!jaccept(P, close)) {
        do {
            if (c == '{') {
                KN_TRY(jstring(P, NULL, NULL));
                KN_TRY(jexpect(P, ':', "after an object key"));
            }
            KN_TRY(jskip(P));
        } while (jaccept(P, ','));
        KN_TRY(jexpect(P, close, c == '{' ? "or ',' in an object" : "or ',' in an array"));
    }
    P->depth--;
    return KN_OK;
}

/* ------------------------------------------------------- header records */

typedef struct st_rec {
    char *name;
    size_t pos; /* header byte of the name, for messages */
    kn_dtype dt;
    int ndim;
    int64_t shape[KN_MAX_DIMS];
    int64_t begin, end;
} st_rec;

typedef struct st_kv {
    char *key, *val;
} st_kv;

typedef struct st_header {
    st_rec *recs;
    int n, cap;
    st_kv *meta;
    int nmeta, capmeta;
    int have_meta;
} st_header;

static void header_free(st_header *h)
{
    for (int i = 0; i < h->n; i++) free(h->recs[i].name);
    for (int i = 0; i < h->nmeta; i++) {
        free(h->meta[i].key);
        free(h->meta[i].val);
    }
    free(h->recs);
    free(h->meta);
    memset(h, 0, sizeof *h);
}

/* Make room for one more item in a growing array; 0 when out of memory. */
static int grow(void **arr, int *cap, int n, size_t size)
{
    if (n < *cap) return 1;
    if (*cap > (1 << 28)) return 0;
    int ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)ncap * size);
    if (!p) return 0;
    *arr = p;
    *cap = ncap;
    return 1;
}

/* A JSON string that must hold no NUL (names, dtypes, metadata), since
 * they travel on as C strings. */
static kn_status jcstring(jparser *P, char **out, const char *what)
{
    size_t len;
    jws(P);
    size_t at = P->pos;
    KN_TRY(jstring(P, out, &len));
    if (strlen(*out) != len) {
        free(*out);
        *out = NULL;
        return jerr(P, at, "%s contains a NUL character (\\u0000)", what);
    }
    return KN_OK;
}

static kn_status parse_metadata(jparser *P, st_header *h)
{
    jws(P);
    if (h->have_meta) return jerr(P, P->pos, "\"__metadata__\" appears twice");
    h->have_meta = 1;
    KN_TRY(jexpect(P, '{', "(\"__metadata__\" must be an object of strings)"));
    if (jaccept(P, '}')) return KN_OK;
    do {
        char *k = NULL, *v = NULL;
        KN_TRY(jcstring(P, &k, "a metadata key"));
        kn_status st = jexpect(P, ':', "after an object key");
        if (st == KN_OK) {
            jws(P);
            if (P->pos >= P->len || P->p[P->pos] != '"')
                st = jerr(P, P->pos, "the metadata value of '%.60s' is not a string", k);
        }
        if (st == KN_OK) st = jcstring(P, &v, "a metadata value");
        if (st == KN_OK && !grow((void **)&h->meta, &h->capmeta, h->nmeta, sizeof(st_kv)))
            st = kn_error(KN_ERR_OOM, "%s: out of memory reading the header", P->file);
        if (st != KN_OK) {
            free(k);
            free(v);
            return st;
        }
        h->meta[h->nmeta].key = k;
        h->meta[h->nmeta++].val = v;
    } while (jaccept(P, ','));
    return jexpect(P, '}', "or ',' in \"__metadata__\"");
}

static kn_status parse_dtype(jparser *P, st_rec *r)
{
    char *s;
    KN_TRY(jcstring(P, &s, "a dtype"));
    kn_status st = KN_OK;
    switch (st_dtype_lookup(s, &r->dt)) {
    case 0: break;
    case 1:
        st = kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s' has dtype %s, which kiln does not "
                      "support (it reads " ST_KILN_DTYPES ")", P->file, r->name, s);
        break;
    default:
        st = kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s' has unknown dtype '%.40s'", P->file,
                      r->name, s);
    }
    free(s);
    return st;
}

static kn_status parse_shape(jparser *P, st_rec *r)
{
    KN_TRY(jexpect(P, '[', "(\"shape\" must be an array of integers)"));
    r->ndim = 0;
    if (jaccept(P, ']')) return KN_OK;
    do {
        int64_t d;
        KN_TRY(jint(P, &d));
        if (d < 0)
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s' has a negative dim (%lld) in its shape",
                            P->file, r->name, (long long)d);
        if (r->ndim == KN_MAX_DIMS)
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s' has more than %d dims (kiln's limit)",
                            P->file, r->name, KN_MAX_DIMS);
        r->shape[r->ndim++] = d;
    } while (jaccept(P, ','));
    return jexpect(P, ']', "or ',' in \"shape\"");
}

static kn_status parse_offsets(jparser *P, st_rec *r)
{
    int64_t v[2];
    KN_TRY(jexpect(P, '[', "(\"data_offsets\" must be [begin, end])"));
    for (int i = 0; i < 2; i++) {
        if (i) KN_TRY(jexpect(P, ',', "(\"data_offsets\" must be [begin, end])"));
        KN_TRY(jint(P, &v[i]));
        if (v[i] < 0)
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s' has a negative data offset (%lld)",
                            P->file, r->name, (long long)v[i]);
    }
    KN_TRY(jexpect(P, ']', "(\"data_offsets\" must be [begin, end])"));
    r->begin = v[0];
    r->end = v[1];
    return KN_OK;
}

/* One tensor entry {"dtype": ..., "shape": [...], "data_offsets": [b, e]}. */
static kn_status parse_tensor(jparser *P, st_rec *r)
{
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    int have[3] = {0, 0, 0};
    jws(P);
    if (P->pos >= P->len || P->p[P->pos] != '{') {
        char buf[16];
        return jerr(P, P->pos, "the entry of tensor '%.80s' must be an object, got %s", r->name,
                    jwhat(P, P->pos, buf, sizeof buf));
    }
    P->pos++;
    if (!jaccept(P, '}')) {
        do {
            char *key;
            jws(P);
            size_t at = P->pos;
            KN_TRY(jcstring(P, &key, "a field name"));
            kn_status st = jexpect(P, ':', "after an object key");
            int f = 0;
            while (f < 3 && strcmp(key, fields[f]) != 0) f++;
            free(key);
            if (st == KN_OK && f < 3 && have[f]++)
                st = jerr(P, at, "tensor '%.80s' has two \"%s\" fields", r->name, fields[f]);
            if (st == KN_OK) {
                if (f == 0) st = parse_dtype(P, r);
                else if (f == 1) st = parse_shape(P, r);
                else if (f == 2) st = parse_offsets(P, r);
                else st = jskip(P); /* unknown fields are allowed, as in the reference */
            }
            KN_TRY(st);
        } while (jaccept(P, ','));
        KN_TRY(jexpect(P, '}', "or ',' in a tensor entry"));
    }
    for (int f = 0; f < 3; f++)
        if (!have[f])
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s' has no \"%s\" field", P->file,
                            r->name, fields[f]);
    return KN_OK;
}

static kn_status parse_header(jparser *P, st_header *h)
{
    KN_TRY(jexpect(P, '{', "at the start of the header"));
    if (!jaccept(P, '}')) {
        do {
            char *name;
            jws(P);
            size_t at = P->pos;
            KN_TRY(jcstring(P, &name, "a tensor name"));
            kn_status st = jexpect(P, ':', "after an object key");
            if (st == KN_OK && strcmp(name, "__metadata__") == 0) {
                free(name);
                st = parse_metadata(P, h);
            } else if (st == KN_OK) {
                if (!grow((void **)&h->recs, &h->cap, h->n, sizeof(st_rec))) {
                    free(name);
                    return kn_error(KN_ERR_OOM, "%s: out of memory reading the header", P->file);
                }
                st_rec *r = &h->recs[h->n++]; /* counted now so header_free frees the name */
                memset(r, 0, sizeof *r);
                r->name = name;
                r->pos = at;
                st = parse_tensor(P, r);
            } else {
                free(name);
            }
            KN_TRY(st);
        } while (jaccept(P, ','));
        KN_TRY(jexpect(P, '}', "or ',' in the header object"));
    }
    jws(P); /* the writer pads with spaces */
    if (P->pos != P->len) return jerr(P, P->pos, "unexpected data after the header object");
    return KN_OK;
}

static int cmp_rec_name(const void *a, const void *b)
{
    return strcmp((*(const st_rec *const *)a)->name, (*(const st_rec *const *)b)->name);
}

/* Names unique, and each entry's offsets fit its shape and the data area. */
static kn_status validate(const char *file, st_header *h, int64_t data_size)
{
    if (h->n > 1) {
        const st_rec **byname = malloc((size_t)h->n * sizeof *byname);
        if (!byname) return kn_error(KN_ERR_OOM, "%s: out of memory reading the header", file);
        for (int i = 0; i < h->n; i++) byname[i] = &h->recs[i];
        qsort(byname, (size_t)h->n, sizeof *byname, cmp_rec_name);
        for (int i = 1; i < h->n; i++)
            if (strcmp(byname[i - 1]->name, byname[i]->name) == 0) {
                kn_status st = kn_error(KN_ERR_FORMAT, "%s: duplicate tensor name '%.80s'", file,
                                        byname[i]->name);
                free(byname);
                return st;
            }
        free(byname);
    }
    for (int i = 0; i < h->n; i++) {
        const st_rec *r = &h->recs[i];
        char sh[200];
        kn_shape_str(r->ndim, r->shape, sh, sizeof sh);
        if (r->begin > r->end)
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s' has data_offsets [%lld, %lld] "
                            "with begin after end", file, r->name, (long long)r->begin,
                            (long long)r->end);
        if (r->end > data_size)
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s' has data_offsets [%lld, %lld] "
                            "outside the data area (%lld bytes)", file, r->name,
                            (long long)r->begin, (long long)r->end, (long long)data_size);
        /* Bytes the shape needs, without overflow: a shape whose size would
         * overflow cannot match offsets that fit in the file. */
        int64_t esize = (int64_t)kn_dtype_size(r->dt), need = esize;
        int zero = 0, big = 0;
        for (int d = 0; d < r->ndim; d++) zero |= r->shape[d] == 0;
        for (int d = 0; d < r->ndim && !zero && !big; d++) {
            if (need > INT64_MAX / r->shape[d]) big = 1;
            else need *= r->shape[d];
        }
        if (zero) need = 0;
        if (big || need != r->end - r->begin) {
            char nb[32];
            if (big) snprintf(nb, sizeof nb, "more than 2^63");
            else snprintf(nb, sizeof nb, "%lld", (long long)need);
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s' of shape %s and dtype %s needs "
                            "%s bytes, but its data_offsets [%lld, %lld] hold %lld",
                            file, r->name, sh, kn_st_dtype_name(r->dt), nb, (long long)r->begin,
                            (long long)r->end, (long long)(r->end - r->begin));
        }
        if (kn_shape_check("safetensors", r->ndim, r->shape, r->dt) != KN_OK) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", kn_last_error());
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%.80s': %s", file, r->name, msg);
        }
    }
    return KN_OK;
}

/* --------------------------------------------------------------- loading */

void kn_st_file_free(kn_st_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        free(f->entries[i].name);
        kn_tensor_release(f->entries[i].tensor);
    }
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->entries);
    free(f->meta_keys);
    free(f->meta_values);
    free(f);
}

kn_tensor *kn_st_file_get(const kn_st_file *f, const char *name)
{
    for (int i = 0; f && i < f->n; i++)
        if (strcmp(f->entries[i].name, name) == 0) return f->entries[i].tensor;
    return NULL;
}

/* Turn the checked records into tensors, reading their bytes; takes over the
 * names and metadata strings of h. */
static kn_status build_file(st_src *src, st_header *h, int64_t data_start, kn_st_file **out)
{
    kn_st_file *f = calloc(1, sizeof *f);
    if (!f) return kn_error(KN_ERR_OOM, "%s: out of memory", src->name);
    f->entries = calloc((size_t)h->n + 1, sizeof *f->entries);
    f->meta_keys = calloc((size_t)h->nmeta + 1, sizeof(char *));
    f->meta_values = calloc((size_t)h->nmeta + 1, sizeof(char *));
    if (!f->entries || !f->meta_keys || !f->meta_values) {
        kn_st_file_free(f);
        return kn_error(KN_ERR_OOM, "%s: out of memory", src->name);
    }
    for (int i = 0; i < h->nmeta; i++) {
        f->meta_keys[i] = h->meta[i].key;
        f->meta_values[i] = h->meta[i].val;
        h->meta[i].key = h->meta[i].val = NULL;
        f->n_meta++;
    }
    for (int i = 0; i < h->n; i++) {
        st_rec *r = &h->recs[i];
        kn_tensor *t;
        kn_status st = kn_tensor_new(r->dt, r->ndim, r->shape, KN_CPU, &t);
        if (st == KN_OK) {
            f->entries[f->n].name = r->name;
            f->entries[f->n++].tensor = t;
            r->name = NULL;
            st = src_read(src, data_start + r->begin, kn_tensor_data(t), r->end - r->begin);
        }
        if (st != KN_OK) {
            kn_st_file_free(f);
            return st;
        }
        int64_t numel = kn_tensor_numel(t);
        if (r->dt == KN_BOOL) {
            /* Any non-zero byte is true; kiln's kernels expect exactly 0 or 1. */
            unsigned char *b = kn_tensor_data(t);
            for (int64_t k = 0; k < numel; k++) b[k] = b[k] != 0;
        }
        if (ST_BIG_ENDIAN) kn_st_swap_elems(kn_tensor_data(t), numel, kn_dtype_size(r->dt));
    }
    *out = f;
    return KN_OK;
}

static kn_status st_load(st_src *src, kn_st_file **out)
{
    *out = NULL;
    if (src->size < 8)
        return kn_error(KN_ERR_FORMAT, "%s: file too short for safetensors (%lld bytes; the "
                        "header length alone takes 8)", src->name, (long long)src->size);
    unsigned char lb[8];
    KN_TRY(src_read(src, 0, lb, 8));
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | lb[i];
    if (n > (uint64_t)KN_ST_MAX_HEADER)
        return kn_error(KN_ERR_FORMAT, "%s: header length %llu is absurd (more than %lld bytes); "
                        "not a safetensors file?", src->name, (unsigned long long)n,
                        (long long)KN_ST_MAX_HEADER);
    if ((int64_t)n > src->size - 8)
        return kn_error(KN_ERR_FORMAT, "%s: header length %llu is larger than the rest of the "
                        "file (%lld bytes); truncated or not a safetensors file?", src->name,
                        (unsigned long long)n, (long long)(src->size - 8));
    unsigned char *text = malloc((size_t)n + 1);
    if (!text) return kn_error(KN_ERR_OOM, "%s: out of memory for the header", src->name);
    kn_status st = src_read(src, 8, text, (int64_t)n);
    st_header h;
    memset(&h, 0, sizeof h);
    if (st == KN_OK) {
        jparser P = {text, (size_t)n, 0, src->name, 0};
        st = parse_header(&P, &h);
    }
    free(text);
    int64_t data_start = 8 + (int64_t)n;
    if (st == KN_OK) st = validate(src->name, &h, src->size - data_start);
    if (st == KN_OK) st = build_file(src, &h, data_start, out);
    header_free(&h);
    return st;
}

kn_status kn_safetensors_load(const char *path, kn_st_file **out)
{
    *out = NULL;
    bool not_regular;
    FILE *f = kn_fopen_regular(path, &not_regular);
    if (!f && not_regular)
        return kn_error(KN_ERR_IO, "%s: not a regular file (a FIFO, device or directory cannot be "
                        "read as safetensors)", path);
    if (!f) return kn_error(KN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        kn_status st = kn_error(KN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        fclose(f);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        fclose(f);
        return kn_error(KN_ERR_IO, "%s: not a regular file", path);
    }
    st_src src = {f, NULL, (int64_t)sb.st_size, path};
    kn_status st = st_load(&src, out);
    fclose(f);
    return st;
}

kn_status kn_safetensors_load_mem(const void *data, size_t len, const char *name,
                                  kn_st_file **out)
{
    st_src src = {NULL, data, (int64_t)len, name ? name : "<memory>"};
    if (!data) src.mem = (const unsigned char *)"";
    return st_load(&src, out);
}
