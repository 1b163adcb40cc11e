/* kn_interrupt: the process-wide "the user pressed Ctrl-C" flag.
 *
 * The REPL's SIGINT handler calls kn_interrupt_request(); long-running C code
 * (kernels, autotuning, compilation) polls kn_interrupt_pending() between
 * units of work and gives up with an error, so Ctrl-C reaches code that never
 * returns to Lua. The REPL clears the flag before it runs each chunk. No Lua
 * here: core/ stays usable without it.
 */
#ifndef KN_INTERRUPT_H
#define KN_INTERRUPT_H

/* Set the flag. Async-signal-safe: the only thing a signal handler may call. */
void kn_interrupt_request(void);
/* Nonzero while an interrupt was requested and not yet cleared. Cheap enough
 * to call in an inner loop; safe from any thread. */
int kn_interrupt_pending(void);
/* Forget a pending interrupt (the REPL does this once it was honoured). */
void kn_interrupt_clear(void);

#endif
