/* t/safetensors.c: the safetensors reader and writer (core/tensor/kn_safetensors.c, kn_safetensors_write.c).
 *
 * Round trips of every dtype (strided views, 0-dim and zero-size tensors
 * included), the exact bytes the writer must produce (from the format's
 * spec, and the reference implementation's own test vectors), the message of
 * every kind of corrupt input, every truncation of a valid file, a save that
 * fails half-way, and a mutation fuzz loop that must never crash (run it
 * under the sanitizer build).
 */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kn_safetensors.h"
#include "tap.h"

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* The whole file in a malloc'd buffer; *n its size. */
static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static kn_tensor *new_tensor(kn_dtype dt, int ndim, const int64_t *shape)
{
    kn_tensor *t;
    if (kn_tensor_new(dt, ndim, shape, KN_CPU, &t) != KN_OK) {
        printf("Bail out! kn_tensor_new: %s\n", kn_last_error());
        exit(1);
    }
    return t;
}

/* Element i of a tensor filled with distinct, valid values of its dtype. */
static double pattern(kn_dtype dt, int64_t i)
{
    switch (dt) {
    case KN_BOOL: return (double)(i % 3 == 1);
    case KN_I32: return (double)(i * 7919 - 100000);
    case KN_I64: return (double)(i * 104729) - 1e12;
    case KN_BF16:
    case KN_F16: return (double)(i % 64) * 0.25 - 4.0;
    default: return sin((double)i) * 1e3;
    }
}

static void fill(kn_tensor *t)
{
    int64_t n = kn_tensor_numel(t);
    size_t es = kn_dtype_size(t->dtype);
    for (int64_t i = 0; i < n; i++)
        kn_store_f64((char *)kn_tensor_data(t) + i * (int64_t)es, t->dtype, pattern(t->dtype, i));
}

/* Element at C-order position i of any strided view. */
static double elem(const kn_tensor *t, int64_t i)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->strides[d];
        i /= t->shape[d];
    }
    return kn_load_f64((const char *)kn_tensor_data(t) + off * (int64_t)kn_dtype_size(t->dtype),
                       t->dtype);
}

static int same_tensor(const kn_tensor *a, const kn_tensor *b)
{
    if (!a || !b || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    int64_t n = kn_tensor_numel(a);
    for (int64_t i = 0; i < n; i++) {
        double x = elem(a, i), y = elem(b, i);
        if (x != y && !(x != x && y != y)) return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ round trips */

static void test_roundtrip_dtypes(void)
{
    static const kn_dtype dts[] = {KN_F32, KN_F64, KN_BF16, KN_F16, KN_I32, KN_I64, KN_BOOL};
    static const char *const names[] = {"f32", "f64", "bf16", "f16", "i32", "i64", "bool"};
    enum { N = 7 };
    kn_tensor *ts[N];
    const int64_t shape[3] = {2, 3, 5};
    for (int i = 0; i < N; i++) {
        ts[i] = new_tensor(dts[i], 3, shape);
        fill(ts[i]);
    }
    const char *meta_k[2] = {"format", "note"}, *meta_v[2] = {"pt", "é \"q\"\n"};
    const char *path = tmp_path("all.safetensors");
    kn_status st = kn_safetensors_save(path, N, names, ts, 2, meta_k, meta_v);
    is_int(st, KN_OK, "save one tensor of every dtype");
    kn_st_file *f;
    st = kn_safetensors_load(path, &f);
    is_int(st, KN_OK, "load it back");
    if (st != KN_OK) {
        printf("# %s\n", kn_last_error());
        return;
    }
    is_int(f->n, N, "all tensors come back");
    for (int i = 0; i < N; i++) {
        kn_tensor *t = kn_st_file_get(f, names[i]);
        ok(same_tensor(t, ts[i]), "round trip of %s keeps dtype, shape and values", names[i]);
        ok(t && kn_tensor_is_contiguous(t) && kn_tensor_device(t) == KN_CPU,
           "%s loads contiguous on the cpu", names[i]);
    }
    is_int(f->n_meta, 2, "metadata pairs come back");
    if (f->n_meta == 2) {
        int k = strcmp(f->meta_keys[0], "note") == 0;
        is_str(f->meta_values[k], "pt", "metadata value");
        is_str(f->meta_values[!k], "é \"q\"\n", "metadata value with escapes and UTF-8");
    }
    kn_st_file_free(f);
    for (int i = 0; i < N; i++) kn_tensor_release(ts[i]);
}

static void test_roundtrip_views(void)
{
    const int64_t shape[2] = {4, 6};
    kn_tensor *base = new_tensor(KN_F32, 2, shape);
    fill(base);
    /* transpose: shape {6,4}, strides {1,6} */
    kn_tensor *tr, *sl, *sc, *zs, *bs;
    const int64_t tshape[2] = {6, 4}, tstr[2] = {1, 6};
    kn_tensor_view_of(base, 2, tshape, tstr, 0, &tr);
    /* rows 2..3, every other column from column 1: shape {2,3}, offset 7 */
    const int64_t sshape[2] = {2, 3}, sstr[2] = {6, 2};
    kn_tensor_view_of(base, 2, sshape, sstr, 7, &sl);
    /* a 0-dim view of element 5 */
    kn_tensor_view_of(base, 0, shape, shape, 5, &sc); /* ndim 0: shape unused */
    const int64_t zshape[3] = {2, 0, 3};
    zs = new_tensor(KN_I64, 3, zshape);
    /* an expanded (stride 0) bool view */
    const int64_t bshape0[1] = {3}, bshape[2] = {4, 3}, bstr[2] = {0, 1};
    kn_tensor *b0 = new_tensor(KN_BOOL, 1, bshape0);
    fill(b0);
    kn_tensor_view_of(b0, 2, bshape, bstr, 0, &bs);

    const char *names[] = {"transposed", "sliced", "scalar", "empty", "expanded"};
    kn_tensor *ts[] = {tr, sl, sc, zs, bs};
    const char *path = tmp_path("views.safetensors");
    is_int(kn_safetensors_save(path, 5, names, ts, 0, NULL, NULL), KN_OK,
           "save strided, 0-dim and zero-size tensors");
    kn_st_file *f = NULL;
    is_int(kn_safetensors_load(path, &f), KN_OK, "load them");
    for (int i = 0; f && i < 5; i++)
        ok(same_tensor(kn_st_file_get(f, names[i]), ts[i]), "%s comes back in C order", names[i]);
    if (f) {
        kn_tensor *s = kn_st_file_get(f, "scalar");
        is_int(s ? s->ndim : -1, 0, "a 0-dim tensor stays 0-dim");
        kn_tensor *e = kn_st_file_get(f, "empty");
        is_int(e ? e->shape[1] : -1, 0, "a zero-size dim is kept");
    }
    kn_st_file_free(f);
    for (int i = 0; i < 5; i++) kn_tensor_release(ts[i]);
    kn_tensor_release(base);
    kn_tensor_release(b0);

    /* No tensors at all: the reference writes {} and six spaces. */
    path = tmp_path("none.safetensors");
    is_int(kn_safetensors_save(path, 0, NULL, NULL, 0, NULL, NULL), KN_OK, "save no tensors");
    size_t n;
    unsigned char *b = read_bytes(path, &n);
    static const unsigned char want[] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    ok(b && n == sizeof want && memcmp(b, want, n) == 0, "an empty file is '{}' padded to 8");
    free(b);
    is_int(kn_safetensors_load(path, &f), KN_OK, "and it loads");
    is_int(f ? f->n : -1, 0, "with no tensors");
    kn_st_file_free(f);
}

/* ------------------------------------------------------------ exact bytes */

/* Compare a saved file with 8-byte length + header text + data bytes. */
static void check_layout(const char *path, const char *header, const void *data, size_t ndata,
                         const char *name)
{
    size_t n, hl = strlen(header);
    unsigned char *b = read_bytes(path, &n);
    int good = b && n == 8 + hl + ndata;
    for (int i = 0; good && i < 8; i++) good = b[i] == (unsigned char)((uint64_t)hl >> (8 * i));
    good = good && memcmp(b + 8, header, hl) == 0 && memcmp(b + 8 + hl, data, ndata) == 0;
    ok(good, "%s", name);
    if (!good && b && n >= 8) printf("#   got header: '%.*s'\n", (int)(n - 8 < 400 ? n - 8 : 400), b + 8);
    free(b);
}

static void test_exact_bytes(void)
{
    const char *path = tmp_path("exact.safetensors");
    /* One F32 tensor "a" = {1, 2}. 54 bytes of JSON, padded with 2 spaces. */
    const int64_t s2[1] = {2};
    kn_tensor *a = new_tensor(KN_F32, 1, s2);
    ((float *)kn_tensor_data(a))[0] = 1.0f;
    ((float *)kn_tensor_data(a))[1] = 2.0f;
    const char *na[] = {"a"};
    kn_safetensors_save(path, 1, na, &a, 0, NULL, NULL);
    static const unsigned char d12[] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}; /* 1.0f, 2.0f LE */
    check_layout(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ", d12,
                 8, "one F32 tensor: length, compact header, space padding, LE data");

    /* The reference implementation's vector: "attn.0" {1,2,3} = 0..5, 64 bytes, no padding. */
    const int64_t s123[3] = {1, 2, 3};
    kn_tensor *attn = new_tensor(KN_F32, 3, s123);
    for (int i = 0; i < 6; i++) ((float *)kn_tensor_data(attn))[i] = (float)i;
    const char *nattn[] = {"attn.0"};
    kn_safetensors_save(path, 1, nattn, &attn, 0, NULL, NULL);
    check_layout(path, "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}",
                 kn_tensor_data(attn), 24, "a 64-byte header gets no padding");

    /* Metadata first; the reference's vector for {framework = pt} and no tensors. */
    const char *mk[] = {"framework"}, *mv[] = {"pt"};
    kn_safetensors_save(path, 0, NULL, NULL, 1, mk, mv);
    check_layout(path, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", "", 0,
                 "metadata only: the reference's bytes");

    /* Order: widest dtype first, then by name; metadata keys sorted. */
    const int64_t s1[1] = {1};
    kn_tensor *b = new_tensor(KN_F32, 1, s1), *c = new_tensor(KN_BOOL, 1, s1),
              *d = new_tensor(KN_I64, 1, s1), *e = new_tensor(KN_F32, 1, s1);
    ((float *)kn_tensor_data(b))[0] = 1.0f;
    ((uint8_t *)kn_tensor_data(c))[0] = 1;
    ((int64_t *)kn_tensor_data(d))[0] = 2;
    ((float *)kn_tensor_data(e))[0] = 2.0f;
    const char *names[] = {"b", "c", "d", "a"};
    kn_tensor *ts[] = {b, c, d, e};
    const char *mk2[] = {"z", "y"}, *mv2[] = {"1", "2"};
    kn_safetensors_save(path, 4, names, ts, 2, mk2, mv2);
    static const unsigned char data[] = {2, 0, 0, 0, 0, 0, 0, 0, /* d: I64 2 */
                                         0, 0, 0, 0x40,          /* a: F32 2 */
                                         0, 0, 0x80, 0x3f,       /* b: F32 1 */
                                         1};                     /* c: BOOL */
    check_layout(path,
                 "{\"__metadata__\":{\"y\":\"2\",\"z\":\"1\"},"
                 "\"d\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]},"
                 "\"c\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[16,17]}}    ",
                 data, sizeof data, "entries ordered by dtype alignment then name");

    /* Escapes in names as serde_json writes them; 0-dim and zero-size shapes. */
    kn_tensor *sc = new_tensor(KN_BF16, 0, s1);
    const int64_t z[2] = {0, 3};
    kn_tensor *zt = new_tensor(KN_F16, 2, z);
    ((uint16_t *)kn_tensor_data(sc))[0] = 0x3f80;
    const char *n2[] = {"q\"\\\n\t\x01/é", "zero"};
    kn_tensor *t2[] = {sc, zt};
    kn_safetensors_save(path, 2, n2, t2, 0, NULL, NULL);
    static const unsigned char d2[] = {0x80, 0x3f};
    check_layout(path,
                 "{\"q\\\"\\\\\\n\\t\\u0001/é\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,2]},"
                 "\"zero\":{\"dtype\":\"F16\",\"shape\":[0,3],\"data_offsets\":[2,2]}}       ",
                 d2, 2, "escaped name, 0-dim shape [], zero-size offsets [2,2]");
    kn_st_file *f = NULL;
    kn_safetensors_load(path, &f);
    ok(f && kn_st_file_get(f, n2[0]) != NULL, "the escaped name reads back unchanged");
    kn_st_file_free(f);

    kn_tensor *all[] = {a, attn, b, c, d, e, sc, zt};
    for (int i = 0; i < 8; i++) kn_tensor_release(all[i]);
}

/* ------------------------------------------------------------ hand-built input */

/* A file image: 8-byte length of `header`, the header, then ndata bytes. */
static unsigned char *image(const char *header, const void *data, size_t ndata, size_t *n)
{
    size_t hl = strlen(header);
    unsigned char *b = malloc(8 + hl + ndata + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    if (ndata) memcpy(b + 8 + hl, data, ndata);
    *n = 8 + hl + ndata;
    return b;
}

static kn_status load_header(const char *header, const void *data, size_t ndata, kn_st_file **f)
{
    size_t n;
    unsigned char *b = image(header, data, ndata, &n);
    const char *path = tmp_path("hand.safetensors");
    write_bytes(path, b, n);
    free(b);
    return kn_safetensors_load(path, f);
}

static void test_lenient_input(void)
{
    static const float v[4] = {1, 2, 3, 4};
    kn_st_file *f = NULL;
    /* Out of order, overlapping, whitespace, unknown fields, \u escapes incl.
     * a surrogate pair, trailing unused data. */
    kn_status st = load_header(
        " {\n \"b\" : {\"shape\": [2], \"dtype\": \"F32\", \"data_offsets\": [8, 16], \"x\": [{}, null, true, -1]},\n"
        "  \"a\\u00e9\\ud83d\\ude00\": {\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[4,12]},"
        "  \"__metadata__\": {\"k\\n\": \"v\\/\"}} \t\r\n",
        v, sizeof v, &f);
    is_int(st, KN_OK, "out-of-order and overlapping offsets, odd spacing and escapes are accepted");
    if (st != KN_OK) printf("#   %s\n", kn_last_error());
    kn_tensor *b = kn_st_file_get(f, "b"), *a = kn_st_file_get(f, "a\xc3\xa9\xf0\x9f\x98\x80");
    ok(b && ((float *)kn_tensor_data(b))[0] == 3 && ((float *)kn_tensor_data(b))[1] == 4,
       "tensor b reads its own range");
    ok(a && a->ndim == 2 && ((float *)kn_tensor_data(a))[0] == 2, "\\u escapes decode to UTF-8");
    ok(f && f->n_meta == 1 && strcmp(f->meta_keys[0], "k\n") == 0 &&
           strcmp(f->meta_values[0], "v/") == 0, "metadata escapes decode");
    is_int(f && f->n > 0 ? (int)strcmp(f->entries[0].name, "b") : -1, 0, "entries keep the header's order");
    kn_st_file_free(f);

    /* BOOL bytes other than 0/1 are read as true. */
    static const unsigned char bools[3] = {0, 7, 1};
    st = load_header("{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", bools, 3, &f);
    const uint8_t *m = f ? kn_tensor_data(kn_st_file_get(f, "m")) : NULL;
    ok(st == KN_OK && m && m[0] == 0 && m[1] == 1 && m[2] == 1, "BOOL bytes normalize to 0/1");
    kn_st_file_free(f);
}

/* ------------------------------------------------------------ corrupt input */

typedef struct corrupt_case {
    const char *header; /* NULL: use raw */
    const char *want;   /* substring of the message */
    const char *name;
} corrupt_case;

static void expect_fail(kn_status st, kn_st_file *f, kn_status want_st, const char *want,
                        const char *name)
{
    ok(st == want_st && f == NULL, "%s: fails with %s", name, kn_status_name(want_st));
    if (st != want_st) printf("#   got status %s\n", kn_status_name(st));
    like(kn_last_error(), want, name);
    kn_st_file_free(f);
}

static void test_corrupt(void)
{
    static const unsigned char zeros[64];
    static const corrupt_case cases[] = {
        {"", "bad JSON header at byte 8: expected '{' at the start of the header, got the end", "empty header"},
        {"[1]", "bad JSON header at byte 8: expected '{' at the start of the header, got '['", "header not an object"},
        {"{\"a\":{\"dtype\":\"F32\",,}}", "bad JSON header at byte 28: expected a string, got ','", "bad JSON gives the file offset"},
        {"{\"a\":{\"dtype\":\"F32\"", "bad JSON header at byte 27: expected '}' or ',' in a tensor entry, got the end of the header", "unterminated object"},
        {"{\"a\" {}}", "bad JSON header at byte 13: expected ':' after an object key, got '{'", "missing colon"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}} x", "bad JSON header at byte 62: unexpected data after the header object", "trailing garbage"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},}", "expected a string, got '}'", "trailing comma"},
        {"{\"a", "bad JSON header at byte 9: unterminated string", "unterminated string"},
        {"{\"a\\q\":{}}", "invalid escape '\\q'", "bad escape"},
        {"{\"a\\u12G4\":{}}", "\\u must be followed by 4 hex digits", "bad \\u"},
        {"{\"a\\udc00\":{}}", "lone low surrogate", "lone low surrogate"},
        {"{\"a\\ud800x\":{}}", "high surrogate \\ud800 without a low surrogate", "lone high surrogate"},
        {"{\"a\xff\":{}}", "invalid UTF-8", "invalid UTF-8"},
        {"{\"a\xed\xa0\x80\":{}}", "invalid UTF-8", "UTF-8 encoded surrogate"},
        {"{\"a\tb\":{}}", "control character 0x09", "raw control character"},
        {"{\"a\\u0000\":{}}", "a tensor name contains a NUL character", "NUL in a name"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "got a number with a fraction", "fraction"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", "leading zero", "leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", "integer out of range", "huge integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,4]}}", "tensor 'a' has a negative dim (-2) in its shape", "negative dim"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,4]}}", "negative data offset", "negative offset"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", "more than 8 dims", "too many dims"},
        {"{\"a\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", "tensor 'a' has unknown dtype 'Q7'", "unknown dtype"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "tensor 'a' has dtype U8, which kiln does not support", "unsupported dtype"},
        {"{\"a\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", "expected a string, got '3'", "dtype not a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", "tensor 'a' of shape {2} and dtype F32 needs 8 bytes, but its data_offsets [0, 4] hold 4", "shape/offset mismatch"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", "needs more than 2^63 bytes", "shape overflow"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[60,68]}}", "tensor 'a' has data_offsets [60, 68] outside the data area (64 bytes)", "offsets past the data area"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", "data_offsets [8, 4] with begin after end", "begin after end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", "expected ',' (\"data_offsets\" must be [begin, end]), got ']'", "one offset"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", "expected ']' (\"data_offsets\" must be [begin, end]), got ','", "three offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "tensor 'a' has no \"shape\" field", "missing shape"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "tensor 'a' has no \"dtype\" field", "missing dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", "tensor 'a' has no \"data_offsets\" field", "missing offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "tensor 'a' has two \"dtype\" fields", "duplicate field"},
        {"{\"a\":[1]}", "the entry of tensor 'a' must be an object, got '['", "entry not an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", "duplicate tensor name 'a'", "duplicate names"},
        {"{\"__metadata__\":{\"k\":1}}", "the metadata value of 'k' is not a string", "metadata value not a string"},
        {"{\"__metadata__\":[]}", "(\"__metadata__\" must be an object of strings)", "metadata not an object"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", "\"__metadata__\" appears twice", "two metadata objects"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}", "nesting deeper than 64 levels", "deep nesting"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":tru}}", "invalid literal", "bad literal"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kn_st_file *f = (kn_st_file *)1;
        kn_status st = load_header(cases[i].header, zeros, sizeof zeros, &f);
        expect_fail(st, f, KN_ERR_FORMAT, cases[i].want, cases[i].name);
        like(kn_last_error(), tmp_path("hand.safetensors"), "the message names the file");
    }

    kn_st_file *f = (kn_st_file *)1;
    kn_status st = kn_safetensors_load(tmp_path("no-such-file.safetensors"), &f);
    expect_fail(st, f, KN_ERR_IO, "no-such-file.safetensors: cannot open: No such file or directory",
                "missing file");
    st = kn_safetensors_load(tmpdir, &f);
    expect_fail(st, f, KN_ERR_IO, "not a regular file", "a directory");

    const char *path = tmp_path("raw.safetensors");
    write_bytes(path, "\x05\0\0\0", 4);
    st = kn_safetensors_load(path, &f);
    expect_fail(st, f, KN_ERR_FORMAT, "raw.safetensors: file too short for safetensors (4 bytes",
                "file shorter than 8 bytes");
    write_bytes(path, "\x10\0\0\0\0\0\0\0{}", 10);
    st = kn_safetensors_load(path, &f);
    expect_fail(st, f, KN_ERR_FORMAT, "header length 16 is larger than the rest of the file (2 bytes)",
                "header length past the end");
    write_bytes(path, "\0\0\0\0\0\x01\0\0{}", 10);
    st = kn_safetensors_load(path, &f);
    expect_fail(st, f, KN_ERR_FORMAT, "header length 1099511627776 is absurd", "absurd header length");
    write_bytes(path, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
    st = kn_safetensors_load(path, &f);
    expect_fail(st, f, KN_ERR_FORMAT, "is absurd", "header length 2^64-1");
}

/* Every proper prefix of a valid file is rejected, none crashes. */
static void test_truncated(void)
{
    const int64_t shape[2] = {3, 4};
    kn_tensor *a = new_tensor(KN_F32, 2, shape), *b = new_tensor(KN_I64, 1, shape);
    fill(a);
    fill(b);
    const char *names[] = {"weight", "idx"};
    kn_tensor *ts[] = {a, b};
    const char *path = tmp_path("full.safetensors");
    kn_safetensors_save(path, 2, names, ts, 0, NULL, NULL);
    size_t n;
    unsigned char *full = read_bytes(path, &n);
    int all_fail = 1, all_format = 1;
    for (size_t len = 0; len < n; len++) {
        kn_st_file *f = NULL;
        kn_status st = kn_safetensors_load_mem(full, len, "trunc", &f);
        if (st == KN_OK) all_fail = 0;
        if (st != KN_ERR_FORMAT) all_format = 0;
        kn_st_file_free(f);
    }
    ok(all_fail, "every truncation of a %zu-byte file is rejected", n);
    ok(all_format, "each with a format error");
    const char *tpath = tmp_path("trunc.safetensors");
    write_bytes(tpath, full, n - 1);
    kn_st_file *f = NULL;
    kn_status st = kn_safetensors_load(tpath, &f);
    expect_fail(st, f, KN_ERR_FORMAT, "tensor 'weight' has data_offsets [24, 72] outside the data area (71 bytes)",
                "a file missing its last byte");
    free(full);
    kn_tensor_release(a);
    kn_tensor_release(b);
}

/* --------------------------------------------------------------- saving */

static int temp_files_left(void)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp-")) n++;
    if (d) closedir(d);
    return n;
}

static void test_save_errors(void)
{
    const int64_t s1[1] = {1};
    kn_tensor *a = new_tensor(KN_F32, 1, s1);
    const char *path = tmp_path("keep.safetensors");
    const char *na[] = {"a"};
    kn_safetensors_save(path, 1, na, &a, 0, NULL, NULL);
    size_t n0, n1;
    unsigned char *before = read_bytes(path, &n0);

    const char *dup[] = {"x", "x"};
    kn_tensor *two[] = {a, a};
    kn_status st = kn_safetensors_save(path, 2, dup, two, 0, NULL, NULL);
    is_int(st, KN_ERR_ARG, "duplicate names are refused");
    like(kn_last_error(), "duplicate tensor name 'x'", "with a message naming it");
    const char *res[] = {"__metadata__"};
    st = kn_safetensors_save(path, 1, res, &a, 0, NULL, NULL);
    like(kn_last_error(), "'__metadata__' is reserved", "'__metadata__' cannot name a tensor");
    const char *mk[] = {"k", "k"}, *mv[] = {"1", "2"};
    st = kn_safetensors_save(path, 1, na, &a, 2, mk, mv);
    like(kn_last_error(), "duplicate metadata key 'k'", "duplicate metadata keys are refused");
    st = kn_safetensors_save(tmp_path("no/such/dir/x.safetensors"), 1, na, &a, 0, NULL, NULL);
    is_int(st, KN_ERR_IO, "a missing folder gives an I/O error");
    like(kn_last_error(), "x.safetensors: cannot create a file there: No such file or directory",
         "naming the file and the reason");
    st = kn_safetensors_save(tmpdir, 1, na, &a, 0, NULL, NULL);
    is_int(st, KN_ERR_IO, "saving over a directory fails");
    like(kn_last_error(), "cannot replace the file", "at the rename");

    /* A write that fails half-way (file size limit) leaves the old file whole. */
    const int64_t big[1] = {1 << 18};
    kn_tensor *t = new_tensor(KN_F32, 1, big);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 100000;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    st = kn_safetensors_save(path, 1, na, &t, 0, NULL, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    is_int(st, KN_ERR_IO, "a write that runs out of room fails");
    like(kn_last_error(), "write failed", "with a write error");
    unsigned char *after = read_bytes(path, &n1);
    ok(n0 == n1 && memcmp(before, after, n0) == 0, "the existing file is unchanged by failed saves");
    is_int(temp_files_left(), 0, "no temporary file is left behind");

    /* Saving through a symbolic link updates its target and keeps the link. */
    const char *target = tmp_path("target.safetensors"), *link = tmp_path("link.safetensors");
    kn_safetensors_save(target, 1, na, &a, 0, NULL, NULL);
    if (symlink(target, link) != 0) perror("symlink");
    const char *nb[] = {"b"};
    st = kn_safetensors_save(link, 1, nb, &a, 0, NULL, NULL);
    struct stat lsb;
    kn_st_file *f = NULL;
    kn_safetensors_load(target, &f);
    ok(st == KN_OK && lstat(link, &lsb) == 0 && S_ISLNK(lsb.st_mode) && f && kn_st_file_get(f, "b"),
       "a save through a symlink replaces the target and keeps the link");
    kn_st_file_free(f);
    free(before);
    free(after);
    kn_tensor_release(a);
    kn_tensor_release(t);
}

/* --------------------------------------------------------------- fuzzing */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Change the image in one of several ways that reach different checks. */
static size_t mutate(unsigned char *b, size_t n, size_t cap)
{
    static const char tokens[] = "{}[]\",:\\-0123456789eE.u ";
    int k = (int)(rnd() % 6);
    size_t at = n ? (size_t)(rnd() % n) : 0;
    switch (k) {
    case 0: if (n) b[at] ^= (unsigned char)(1u << (rnd() % 8)); break;
    case 1: if (n) b[at] = (unsigned char)rnd(); break;
    case 2: if (n) b[at] = (unsigned char)tokens[rnd() % (sizeof tokens - 1)]; break;
    case 3: return n ? (size_t)(rnd() % n) : 0; /* truncate */
    case 4: /* insert a byte */
        if (n < cap) {
            memmove(b + at + 1, b + at, n - at);
            b[at] = (unsigned char)tokens[rnd() % (sizeof tokens - 1)];
            return n + 1;
        }
        break;
    default: /* delete a byte */
        if (n) {
            memmove(b + at, b + at + 1, n - at - 1);
            return n - 1;
        }
    }
    return n;
}

static void test_fuzz(void)
{
    const int64_t shape[2] = {2, 3}, s0[1] = {0};
    kn_tensor *ts[4] = {new_tensor(KN_F32, 2, shape), new_tensor(KN_BOOL, 1, shape),
                        new_tensor(KN_BF16, 0, shape), new_tensor(KN_I64, 1, s0)};
    for (int i = 0; i < 4; i++) fill(ts[i]);
    const char *names[] = {"layer.0.weight", "mask", "s\xc3\xa9", "empty"};
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    const char *path = tmp_path("seed.safetensors");
    kn_safetensors_save(path, 4, names, ts, 1, mk, mv);
    size_t n0;
    unsigned char *seed = read_bytes(path, &n0);
    size_t cap = n0 + 64;
    unsigned char *b = malloc(cap);
    int iters = 6000, loaded = 0, bad_status = 0, bad_tensor = 0;
    for (int it = 0; it < iters; it++) {
        memcpy(b, seed, n0);
        size_t n = n0;
        int muts = 1 + (int)(rnd() % 4);
        for (int m = 0; m < muts; m++) n = mutate(b, n, cap);
        if (rnd() % 8 == 0) { /* keep the header length in step with edits */
            uint64_t hl = n > 8 ? n - 8 - rnd() % (n - 8 < 40 ? n - 8 : 40) : 0;
            for (int i = 0; i < 8 && n >= 8; i++) b[i] = (unsigned char)(hl >> (8 * i));
        }
        kn_st_file *f = NULL;
        kn_status st;
        if (it % 20 == 0) { /* through a real file now and then */
            write_bytes(tmp_path("fuzz.safetensors"), b, n);
            st = kn_safetensors_load(tmp_path("fuzz.safetensors"), &f);
        } else {
            st = kn_safetensors_load_mem(b, n, "fuzz", &f);
        }
        if (st == KN_OK) {
            loaded++;
            for (int i = 0; i < f->n; i++) {
                kn_tensor *t = f->entries[i].tensor;
                int64_t bytes = kn_tensor_numel(t) * (int64_t)kn_dtype_size(t->dtype);
                if (bytes > (int64_t)n || !kn_tensor_is_contiguous(t)) bad_tensor++;
            }
        } else if (st != KN_ERR_FORMAT || !*kn_last_error()) {
            if (bad_status++ < 3) printf("#   status %s: %s\n", kn_status_name(st), kn_last_error());
        }
        kn_st_file_free(f);
    }
    /* Pure noise behind a plausible length. */
    for (int it = 0; it < 2000; it++) {
        size_t n = 8 + (size_t)(rnd() % 120);
        for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rnd();
        uint64_t hl = rnd() % (n - 7);
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hl >> (8 * i));
        kn_st_file *f = NULL;
        kn_status st = kn_safetensors_load_mem(b, n, "noise", &f);
        if (st != KN_OK && st != KN_ERR_FORMAT) bad_status++;
        kn_st_file_free(f);
    }
    ok(1, "%d mutated and 2000 random files did not crash (%d still loaded)", iters, loaded);
    is_int(bad_status, 0, "every rejected file gives a format error with a message");
    is_int(bad_tensor, 0, "every accepted file gives tensors that fit in it");
    free(seed);
    free(b);
    for (int i = 0; i < 4; i++) kn_tensor_release(ts[i]);
}

static void cleanup(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        unlink(tmp_path(e->d_name));
    }
    if (d) closedir(d);
    rmdir(tmpdir);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kn_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! mkdtemp failed\n");
        return 1;
    }
    test_roundtrip_dtypes();
    test_roundtrip_views();
    test_exact_bytes();
    test_lenient_input();
    test_corrupt();
    test_truncated();
    test_save_errors();
    test_fuzz();
    cleanup();
    return done_testing();
}
