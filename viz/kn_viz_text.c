/* kn_viz_text: a view as a compact text outline, for `:graph` in a
 * terminal: per graph its inputs, ops and outputs (captured) or its kernels
 * with the ops they cover and their timings (fused), and each break where
 * it split two graphs. */
#include <stdlib.h>
#include <string.h>

#include "kn_viz_model.h"

/* "x {8, 16} f32, fc.weight {16, 16} f32" on one line, wrapped. */
static void value_list(kn_strbuf *b, const kn_viz_vgraph *vg, const char *head, bool outputs)
{
    int col = 0, n = 0;
    for (int i = 0; i < vg->n_nodes; i++) {
        const kn_viz_vnode *v = &vg->nodes[i];
        bool is_out = v->kind == KN_VN_OUTPUT;
        bool is_in = v->kind == KN_VN_ARG || v->kind == KN_VN_PARAM || v->kind == KN_VN_PREV || v->kind == KN_VN_TENSOR;
        if (v->hidden || (outputs ? !is_out : !is_in)) continue;
        if (n == 0) {
            kn_strbuf_printf(b, "  %-8s", head);
            col = 10;
        }
        int w = (int)(strlen(v->name) + strlen(v->shape) + strlen(v->dtype) + 4);
        if (n > 0 && col + w > 100) {
            kn_strbuf_printf(b, ",\n          ");
            col = 10;
        }
        else if (n > 0) {
            kn_strbuf_printf(b, ", ");
            col += 2;
        }
        kn_strbuf_printf(b, "%s %s %s", v->name, v->shape, v->dtype);
        col += w;
        n++;
    }
    if (n) kn_strbuf_printf(b, "\n");
}

static void captured_graph(kn_strbuf *b, const kn_viz_model *m, const kn_viz_vgraph *vg)
{
    value_list(b, vg, "inputs", false);
    int w = 4;
    for (int i = 0; i < vg->n_nodes; i++)
        if (vg->nodes[i].kind == KN_VN_OP && (int)strlen(vg->nodes[i].op) > w) w = (int)strlen(vg->nodes[i].op);
    for (int i = 0; i < vg->n_nodes; i++) {
        const kn_viz_vnode *v = &vg->nodes[i];
        if (vg->rep_count && i == vg->rep_start)
            kn_strbuf_printf(b, "  -- repeated %d times (drawn once): --\n", vg->rep_count);
        if (vg->rep_count && i == vg->rep_start + vg->rep_len)
            kn_strbuf_printf(b, "  -- end of the repeated run --\n");
        if (v->hidden || v->kind != KN_VN_OP) continue;
        kn_strbuf_printf(b, "  ");
        if (m->training) kn_strbuf_printf(b, "%-8s  ", kn_part_name(v->part)); /* a training step's part */
        kn_strbuf_printf(b, "%-*s  %-24s %-4s  %s\n", w, v->op, v->shape, v->dtype, v->where);
    }
    value_list(b, vg, "outputs", true);
}

static void fused_graph(kn_strbuf *b, const kn_viz_model *m, const kn_viz_vgraph *vg)
{
    if (vg->note[0]) kn_strbuf_printf(b, "  (%s)\n", vg->note);
    int w = 6;
    for (int k = 0; k < vg->n_kernels; k++)
        if ((int)strlen(vg->kernels[k].name) > w) w = (int)strlen(vg->kernels[k].name);
    for (int k = 0; k < vg->n_kernels; k++) {
        const kn_viz_vkernel *vk = &vg->kernels[k];
        if (vg->rep_count && k == vg->rep_start)
            kn_strbuf_printf(b, "  -- repeated %d times (drawn once): --\n", vg->rep_count);
        if (vg->rep_count && k == vg->rep_start + vg->rep_len) kn_strbuf_printf(b, "  -- end of the repeated run --\n");
        if (vk->hidden) continue;
        kn_strbuf_printf(b, "  %3d  %-*s  %-9s", vk->number, w, vk->name, vk->kind);
        if (m->training) kn_strbuf_printf(b, "  %-8s", kn_part_name(vk->part));
        if (m->timed) {
            if (vk->timed) {
                kn_strbuf_printf(b, " %9.1f us %5.1f%%", vk->us, vk->pct);
                if (vk->roof >= 0) kn_strbuf_printf(b, " roof %3.0f%%", vk->roof);
                else kn_strbuf_printf(b, "          ");
            }
            else kn_strbuf_printf(b, " %9s    %6s%10s", "-", "", "");
        }
        kn_strbuf_printf(b, "  ");
        for (int j = 0; j < vk->n_nodes; j++) kn_strbuf_printf(b, "%s%s", j ? ", " : "", vg->nodes[vk->nodes[j]].op);
        if (vk->epilogue_of >= 0) kn_strbuf_printf(b, " (in %s's epilogue)", vg->kernels[vk->epilogue_of].name);
        kn_strbuf_printf(b, "\n");
    }
    /* why the kernels drawn are not fewer: each edge between two of them */
    bool titled = false;
    for (int i = 0; i < vg->n_reasons; i++) {
        const struct kn_viz_reason *r = &vg->reasons[i];
        if (r->from < 0 || r->to < 0 || r->from >= vg->n_kernels || r->to >= vg->n_kernels ||
            vg->kernels[r->from].hidden || vg->kernels[r->to].hidden)
            continue;
        if (!titled) kn_strbuf_printf(b, "  between kernels:\n");
        titled = true;
        kn_strbuf_printf(b, "    %s -> %s: %s\n", vg->kernels[r->from].name, vg->kernels[r->to].name, r->text);
    }
}

kn_status kn_viz_outline(const kn_compiled *cm, const kn_viz_opts *o, char **text)
{
    kn_viz_model m;
    KN_TRY(kn_viz_model_build(cm, o, &m));
    kn_strbuf b = {0};
    bool fused = o->view == KN_VIZ_FUSED;
    kn_strbuf_printf(&b, "%s (%s) · %s graph · mode %s · %d graph%s, %d break%s", cm->id.name, cm->id.where,
                  fused ? "fused" : "captured", cm->id.mode, m.n_graphs, m.n_graphs == 1 ? "" : "s", m.n_breaks,
                  m.n_breaks == 1 ? "" : "s");
    if (fused) kn_strbuf_printf(&b, ", %d kernel%s", m.n_kernels, m.n_kernels == 1 ? "" : "s");
    if (m.timed) kn_strbuf_printf(&b, " · %.1f us per call in kernels", m.total_us);
    kn_strbuf_printf(&b, "\n");
    if (m.host_timed) {
        kn_viz_host_text(&b, &m, "\n");
        kn_strbuf_printf(&b, "\n");
    }
    int next_break = 0;
    for (int gi = 0; gi < m.n_graphs; gi++) {
        const kn_viz_vgraph *vg = &m.graphs[gi];
        kn_strbuf_printf(&b, "graph %d (version %d): %d op%s", vg->index, vg->version, vg->n_ops, vg->n_ops == 1 ? "" : "s");
        if (fused) kn_strbuf_printf(&b, " in %d kernel%s", vg->n_kernels, vg->n_kernels == 1 ? "" : "s");
        kn_strbuf_printf(&b, ", %d guard%s\n", vg->n_guards, vg->n_guards == 1 ? "" : "s");
        for (int i = 0; !fused && i < vg->n_guards; i++) kn_strbuf_printf(&b, "  guard: %s\n", vg->guards[i]);
        if (fused) fused_graph(&b, &m, vg);
        else captured_graph(&b, &m, vg);
        for (; next_break < m.n_breaks && m.breaks[next_break].graph <= vg->index; next_break++) {
            const kn_break *br = &m.breaks[next_break];
            kn_strbuf_printf(&b, "break %d: %s at %s: %s\n", next_break + 1, br->category, br->where, br->reason);
        }
    }
    for (; next_break < m.n_breaks; next_break++) {
        const kn_break *br = &m.breaks[next_break];
        kn_strbuf_printf(&b, "break %d: %s at %s: %s\n", next_break + 1, br->category, br->where, br->reason);
    }
    kn_viz_model_free(&m);
    if (b.oom) {
        free(b.p);
        return kn_error(KN_ERR_OOM, "out of host memory writing the outline");
    }
    *text = b.p;
    return KN_OK;
}
