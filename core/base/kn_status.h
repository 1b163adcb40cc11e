/* kn_status: error reporting inside the C core.
 *
 * Every fallible function returns a kn_status. The message that explains it is
 * kept in a thread-local buffer set by kn_error(); the Lua boundary reads it
 * with kn_last_error() and raises a Lua error. Nothing in core/ aborts on user
 * input: bad shapes, dtypes, sizes and files all come back as a status.
 */
#ifndef KN_STATUS_H
#define KN_STATUS_H

typedef enum kn_status {
    KN_OK = 0,
    KN_ERR_ARG,         /* a bad argument: wrong type, out-of-range dim, ... */
    KN_ERR_SHAPE,       /* shapes that do not fit the op */
    KN_ERR_DTYPE,       /* a dtype the op does not accept */
    KN_ERR_OOM,         /* an allocation failed */
    KN_ERR_IO,          /* a file could not be read or written */
    KN_ERR_FORMAT,      /* a file is corrupt or truncated */
    KN_ERR_UNSUPPORTED, /* no implementation on this backend */
    KN_ERR_DEVICE,      /* the device (GPU) failed or is missing */
    KN_ERR_INTERRUPTED, /* the user pressed Ctrl-C */
    KN_ERR_RANGE        /* an index past the end (a library variant that does not exist) */
} kn_status;

/* Set the message for the current error and return `st` (so callers can
 * `return kn_error(KN_ERR_SHAPE, "matmul: ...")`). The message is copied. */
kn_status kn_error(kn_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The message of the last kn_error on this thread ("" if none). */
const char *kn_last_error(void);

/* A short name for a status ("shape error"). */
const char *kn_status_name(kn_status st);

/* Propagate a failing status. */
#define KN_TRY(expr)                        \
    do {                                    \
        kn_status kn_try_st_ = (expr);      \
        if (kn_try_st_ != KN_OK) return kn_try_st_; \
    } while (0)

#endif
