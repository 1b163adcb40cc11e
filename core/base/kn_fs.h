/* kn_fs: the few file-system helpers the persistent caches share (the CPU
 * JIT's objects, the CUDA backend's cubins). */
#ifndef KN_FS_H
#define KN_FS_H

#include <stdbool.h>

/* mkdir -p path; false with errno set on failure (ENOTDIR when a part of
 * the path is a file). */
bool kn_make_dirs(const char *path);

/* The whole file as a new NUL-terminated buffer (caller frees) of *size
 * bytes; NULL when it cannot be opened or read, or is larger than
 * max_bytes. */
char *kn_read_file(const char *path, long max_bytes, long *size);

#endif
