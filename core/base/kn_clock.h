/* kn_clock: the one clock kiln times host work with (compile phases,
 * autotuning budgets, kiln.clock). Monotonic, so a wall-clock change during
 * a run cannot make a phase negative. */
#ifndef KN_CLOCK_H
#define KN_CLOCK_H

/* Seconds since an arbitrary fixed point. */
double kn_clock_s(void);

#endif
