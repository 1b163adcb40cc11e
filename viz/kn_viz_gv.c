/* kn_viz_gv: the Graphviz plumbing of the drawings (see kn_viz_gv.h).
 *
 * The layout and SVG plugins are linked in and preloaded (gvContextPlugins
 * with demand loading off), so rendering reads no Graphviz config file and
 * works where Graphviz is not installed (../shared/device.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <graphviz/gvc.h>

#include "kn_strbuf.h"
#include "kn_viz_gv.h"

extern gvplugin_library_t gvplugin_dot_layout_LTX_library;
extern gvplugin_library_t gvplugin_core_LTX_library;

static lt_symlist_t kn_viz_builtins[] = {
    {"gvplugin_dot_layout_LTX_library", &gvplugin_dot_layout_LTX_library},
    {"gvplugin_core_LTX_library", &gvplugin_core_LTX_library},
    {0, 0},
};

/* Graphviz reports through agerr; keep its last message for our error
 * instead of letting it print to stderr in the middle of a REPL session. */
static char gv_message[512];

static int gv_error_handler(char *msg)
{
    size_t n = strlen(gv_message);
    if (n < sizeof gv_message - 1) snprintf(gv_message + n, sizeof gv_message - n, "%s", msg);
    return 0;
}

/* ---- object IDs in creation order ----
 * cgraph's default ID discipline makes a named object's ID the address of
 * its interned name, and agwrite orders subgraphs by ID: the DOT text (and
 * the layout, which visits clusters in that order) would change from run
 * to run. This one numbers names in the order they are first seen. */

typedef struct id_state {
    Agraph_t *g;
    char **names; /* interned in g (agwrite reads cgraph's header before a name) */
    IDTYPE n, cap;
    IDTYPE anon; /* anonymous objects (edges) get odd IDs, as cgraph's own discipline */
} id_state;

static void *id_open(Agraph_t *g, Agdisc_t *disc)
{
    (void)disc;
    id_state *s = calloc(1, sizeof *s);
    if (s) {
        s->g = g;
        s->anon = 1;
    }
    return s;
}

static long id_map(void *state, int objtype, char *str, IDTYPE *id, int createflag)
{
    (void)objtype;
    id_state *s = state;
    if (!str) {
        *id = s->anon;
        s->anon += 2;
        return 1;
    }
    for (IDTYPE i = 0; i < s->n; i++)
        if (strcmp(s->names[i], str) == 0) {
            *id = 2 * (i + 1);
            return 1;
        }
    if (!createflag) return 0;
    if (s->n == s->cap) {
        IDTYPE cap = s->cap ? s->cap * 2 : 256;
        char **p = realloc(s->names, sizeof *p * cap);
        if (!p) return 0;
        s->names = p;
        s->cap = cap;
    }
    char *copy = agstrdup(s->g, str);
    if (!copy) return 0;
    s->names[s->n++] = copy;
    *id = 2 * s->n;
    return 1;
}

static long id_alloc(void *state, int objtype, IDTYPE request)
{
    (void)state;
    (void)objtype;
    (void)request;
    return 0;
}

static void id_free(void *state, int objtype, IDTYPE id)
{
    (void)state; /* names stay until the graph closes: an ID is never reused */
    (void)objtype;
    (void)id;
}

static char *id_print(void *state, int objtype, IDTYPE id)
{
    (void)objtype;
    id_state *s = state;
    return id % 2 == 0 && id / 2 >= 1 && id / 2 <= s->n ? s->names[id / 2 - 1] : NULL;
}

static void id_close(void *state)
{
    id_state *s = state; /* the names go with the graph's string dictionary */
    free(s->names);
    free(s);
}

static void id_register(void *state, int objtype, void *obj)
{
    (void)state;
    (void)objtype;
    (void)obj;
}

static Agiddisc_t id_disc = {id_open, id_map, id_alloc, id_free, id_print, id_close, id_register};

Agraph_t *kn_viz_gv_open(const char *name)
{
    static Agdisc_t disc;
    disc = (Agdisc_t){&AgMemDisc, &id_disc, &AgIoDisc};
    return agopen((char *)name, Agdirected, &disc);
}

void kn_viz_gv_catch(kn_viz_gv_errors *saved)
{
    gv_message[0] = 0;
    saved->handler = agseterrf(gv_error_handler);
    saved->level = agseterr(AGERR);
}

void kn_viz_gv_release(const kn_viz_gv_errors *saved)
{
    agseterrf(saved->handler);
    agseterr(saved->level);
}

kn_status kn_viz_gv_dot(Agraph_t *g, char **out, size_t *len)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return kn_error(KN_ERR_OOM, "out of host memory writing DOT");
    int rc = agwrite(g, f);
    fclose(f);
    if (rc != 0) {
        free(text);
        return kn_error(KN_ERR_OOM, "Graphviz could not write the DOT text");
    }
    *out = text;
    *len = n;
    return KN_OK;
}

/* The first n-byte `needle` in [p, end), or NULL (memmem is not C11/POSIX). */
static const char *find_bytes(const char *p, const char *end, const char *needle, size_t n)
{
    for (; (size_t)(end - p) >= n; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) - n + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, n) == 0) return p;
    }
    return NULL;
}

/* The SVG text of Graphviz with the font it names for KN_VIZ_FONT (its
 * PostScript alias: family "Courier", generic "monospace") replaced by
 * KN_VIZ_FONT_FAMILY: the faces of the same width a viewer may have. */
static kn_status svg_with_fonts(const char *data, size_t n, char **out, size_t *len)
{
    static const char from[] = " font-family=\"Courier,monospace\"";
    static const char to[] = " font-family=\"" KN_VIZ_FONT_FAMILY "\"";
    kn_strbuf b = {0};
    const char *p = data, *end = data + n;
    while (p < end) {
        const char *hit = find_bytes(p, end, from, sizeof from - 1);
        if (!hit) {
            kn_strbuf_put(&b, p, (size_t)(end - p));
            break;
        }
        kn_strbuf_put(&b, p, (size_t)(hit - p));
        kn_strbuf_puts(&b, to);
        p = hit + sizeof from - 1;
    }
    size_t n_out = b.len;
    KN_TRY(kn_strbuf_finish(&b, out, "the SVG"));
    *len = n_out;
    return KN_OK;
}

kn_status kn_viz_gv_svg(Agraph_t *g, char **out, size_t *len)
{
    GVC_t *gvc = gvContextPlugins(kn_viz_builtins, 0);
    if (!gvc) return kn_error(KN_ERR_OOM, "Graphviz could not start (out of memory?)");
    kn_status st = KN_OK;
    char *data = NULL;
    unsigned n = 0;
    if (gvLayout(gvc, g, "dot") != 0) st = kn_error(KN_ERR_UNSUPPORTED, "Graphviz's dot layout failed: %s", gv_message);
    else {
        if (gvRenderData(gvc, g, "svg", &data, &n) != 0 || !data)
            st = kn_error(KN_ERR_UNSUPPORTED, "Graphviz could not render SVG: %s", gv_message);
        else st = svg_with_fonts(data, n, out, len);
        if (data) gvFreeRenderData(data);
    }
    /* also after a failed layout, which may have set up part of one;
     * gvFreeLayout frees only what a layout made */
    gvFreeLayout(gvc, g);
    gvFreeContext(gvc);
    return st;
}
