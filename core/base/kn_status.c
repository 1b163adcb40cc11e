/* kn_status: the thread-local error message behind every kn_status. */
#include "kn_status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char kn_errbuf[1024];

kn_status kn_error(kn_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kn_errbuf, sizeof kn_errbuf, fmt, ap);
    va_end(ap);
    return st;
}

const char *kn_last_error(void)
{
    return kn_errbuf;
}

const char *kn_status_name(kn_status st)
{
    switch (st) {
    case KN_OK: return "ok";
    case KN_ERR_ARG: return "bad argument";
    case KN_ERR_SHAPE: return "shape error";
    case KN_ERR_DTYPE: return "dtype error";
    case KN_ERR_OOM: return "out of memory";
    case KN_ERR_IO: return "I/O error";
    case KN_ERR_FORMAT: return "format error";
    case KN_ERR_UNSUPPORTED: return "unsupported";
    case KN_ERR_DEVICE: return "device error";
    case KN_ERR_INTERRUPTED: return "interrupted";
    case KN_ERR_RANGE: return "out of range";
    }
    return "unknown error";
}
