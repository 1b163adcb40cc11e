/* sanitizer_probe: does one deliberate thing that the sanitizers see, so
 * t/ci_sanitizer_net.sh can check that CI's net catches every real report
 * (even from a process whose failure is expected) and only real ones.
 * Built only in the sanitizer build (KILN_SANITIZE).
 *   ub     signed overflow: a UBSan report, then exit (no recovery)
 *   heap   use after free: an ASan report
 *   leak   a lost block: a LeakSanitizer report at exit
 *   graph  a Graphviz graph never closed, as kiln's drawing code could
 *          forget one: a report at exit that t/lib/lsan.supp, which
 *          suppresses Graphviz's own leaks, must not hide
 *   layout a graph with a cluster laid out with dot and freed as kiln
 *          does (kn_viz_gv.c): Graphviz 2.42's own leaks only, which
 *          t/lib/lsan.supp suppresses given full stacks
 *   layout-kept  the same without gvFreeLayout: leaks of the caller's,
 *          which it must not suppress
 *   huge   a request larger than ASan allows: NULL and a warning, no report
 *   clean  nothing */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <graphviz/gvc.h>

extern gvplugin_library_t gvplugin_dot_layout_LTX_library;

/* Lays out a graph whose cluster has a rank with no node of its own (the
 * kind of graph kiln's drawings are: Graphviz then leaks virtual edges and
 * the nodes that fill that rank), freeing the layout or not. */
static void layout(int free_layout)
{
    static lt_symlist_t builtins[] = {{"gvplugin_dot_layout_LTX_library", &gvplugin_dot_layout_LTX_library},
                                      {0, 0}};
    GVC_t *gvc = gvContextPlugins(builtins, 0);
    Agraph_t *g = agmemread("digraph g { newrank=true; subgraph cluster_a { t -> x [minlen=2]; } o -> x; }");
    if (!gvc || !g || gvLayout(gvc, g, "dot") != 0) {
        printf("no layout\n");
        return;
    }
    if (free_layout) gvFreeLayout(gvc, g);
    agclose(g);
    gvFreeContext(gvc);
}

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
    } else if (strcmp(what, "graph") == 0) {
        Agraph_t *volatile lost = agopen("lost", Agdirected, NULL);
        agnode(lost, "a", 1);
        lost = NULL;
        (void)lost;
    } else if (strcmp(what, "layout") == 0 || strcmp(what, "layout-kept") == 0) {
        layout(strcmp(what, "layout") == 0);
    } else if (strcmp(what, "huge") == 0) {
        void *p = malloc(((size_t)1 << 50) * (size_t)one);
        printf("%s\n", p ? "allocated" : "null");
        free(p);
    }
    return 3; /* a non-zero status a caller expects, as a failing kiln run */
}
