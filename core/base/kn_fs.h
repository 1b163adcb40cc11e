/* kn_fs: the few file-system helpers the persistent caches share (the CPU
 * JIT's objects, the CUDA backend's cubins). */
#ifndef KN_FS_H
#define KN_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "kn_status.h"

/* The longest cache directory kiln takes (bytes, without the NUL), and a
 * size that holds any file path kiln builds in it. Every buffer that holds
 * such a path is KN_CACHE_PATH_MAX long, and a longer dir is refused with
 * an error rather than cut short (a cut path would put the entries
 * somewhere else than the configured dir). */
#define KN_CACHE_DIR_MAX 1024
#define KN_CACHE_PATH_MAX (KN_CACHE_DIR_MAX + 128)

/* KN_ERR_ARG naming the dir and the limit when dir is longer than
 * KN_CACHE_DIR_MAX; else KN_OK. */
kn_status kn_cache_dir_check(const char *dir);

/* "dir/name" into buf; KN_ERR_ARG naming the path and the limit when it
 * does not fit in size bytes (buf then holds ""). */
kn_status kn_cache_file_path(char *buf, size_t size, const char *dir, const char *name);

/* mkdir -p path; false with errno set on failure (ENOTDIR when a part of
 * the path is a file). */
bool kn_make_dirs(const char *path);

/* fopen(path, "rb") for a regular file only. A FIFO (or a device) would
 * block the open or the read forever, so the file is opened without
 * blocking and looked at first. NULL with errno set on failure; *not_regular
 * (may be NULL) says the path exists but is not a regular file. */
FILE *kn_fopen_regular(const char *path, bool *not_regular);

/* fopen(path, "wb") for a regular file only (created when missing,
 * emptied when present). Opening a FIFO for writing blocks until a reader
 * comes, so the file is opened without blocking and looked at before it
 * is emptied. NULL with errno set on failure; *not_regular (may be NULL)
 * says the path exists but is not a regular file (a FIFO, a device, a
 * directory). */
FILE *kn_fopen_write_regular(const char *path, bool *not_regular);

/* The whole file as a new NUL-terminated buffer (caller frees) of *size
 * bytes; NULL when it cannot be opened or read, or is larger than
 * max_bytes. */
char *kn_read_file(const char *path, long max_bytes, long *size);

/* Writing a file whole or not at all (a save, a cache entry): a new file
 * next to `path` (so the rename stays on one file system), created
 * exclusively with the permissions a plain fopen would give; *tmp_out is
 * its malloc'd name. */
kn_status kn_fs_open_temp(const char *path, char **tmp_out, FILE **f_out);
/* Finish it: when st is KN_OK, flush to the disk (a crash then cannot
 * leave a renamed but empty file where the old one was), close and rename
 * over `path`; otherwise (or when one of those fails) close and remove the
 * temporary file. Returns st, or the error that stopped the commit. */
kn_status kn_fs_commit_temp(FILE *f, const char *tmp, const char *path, kn_status st);

#endif
