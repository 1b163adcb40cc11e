/* kn_cpu_render: the C the CPU backend generates (its render target). */
#ifndef KN_CPU_RENDER_H
#define KN_CPU_RENDER_H

#include "kn_kir.h"

extern const kn_render_target kn_cpu_render_target;

#endif
