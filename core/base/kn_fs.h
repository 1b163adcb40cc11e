/* kn_fs: the few file-system helpers the persistent caches share (the CPU
 * JIT's objects, the CUDA backend's cubins). */
#ifndef KN_FS_H
#define KN_FS_H

#include <stdbool.h>
#include <stdio.h>

/* mkdir -p path; false with errno set on failure (ENOTDIR when a part of
 * the path is a file). */
bool kn_make_dirs(const char *path);

/* fopen(path, "rb") for a regular file only. A FIFO (or a device) would
 * block the open or the read forever, so the file is opened without
 * blocking and looked at first. NULL with errno set on failure; *not_regular
 * (may be NULL) says the path exists but is not a regular file. */
FILE *kn_fopen_regular(const char *path, bool *not_regular);

/* The whole file as a new NUL-terminated buffer (caller frees) of *size
 * bytes; NULL when it cannot be opened or read, or is larger than
 * max_bytes. */
char *kn_read_file(const char *path, long max_bytes, long *size);

#endif
