/* kn_fs: file-system helpers of the persistent caches (see kn_fs.h). */
#include "kn_fs.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

kn_status kn_cache_dir_check(const char *dir)
{
    size_t len = strlen(dir);
    if (len > KN_CACHE_DIR_MAX)
        return kn_error(KN_ERR_ARG, "cache dir '%.60s...' is %zu bytes long; kiln supports at most %d", dir, len,
                        KN_CACHE_DIR_MAX);
    return KN_OK;
}

kn_status kn_cache_file_path(char *buf, size_t size, const char *dir, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size) {
        if (size) buf[0] = 0;
        return kn_error(KN_ERR_ARG, "cache file path '%.60s.../%s' is %d bytes long; kiln supports at most %zu",
                        dir, name, n, size ? size - 1 : 0);
    }
    return KN_OK;
}

bool kn_make_dirs(const char *path)
{
    char p[KN_CACHE_PATH_MAX];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return false;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return false;
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return false;
    struct stat sb;
    if (stat(p, &sb) != 0) return false;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return false;
    }
    return true;
}

FILE *kn_fopen_regular(const char *path, bool *not_regular)
{
    if (not_regular) *not_regular = false;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) { /* a FIFO, a device, a directory */
        if (not_regular) *not_regular = true;
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    /* a regular file never blocks; reads go back to the ordinary mode */
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

FILE *kn_fopen_write_regular(const char *path, bool *not_regular)
{
    if (not_regular) *not_regular = false;
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0666);
    struct stat sb;
    if (fd < 0) {
        /* a FIFO with no reader (ENXIO) or a directory (EISDIR) */
        int err = errno;
        if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
            if (not_regular) *not_regular = true;
            err = EINVAL;
        }
        errno = err;
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int err = errno;
        if (!S_ISREG(sb.st_mode)) {
            if (not_regular) *not_regular = true;
            err = EINVAL;
        }
        close(fd);
        errno = err;
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *f = ftruncate(fd, 0) == 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

char *kn_read_file(const char *path, long max_bytes, long *size)
{
    FILE *f = kn_fopen_regular(path, NULL);
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && n <= max_bytes && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = 0;
                *size = n;
            }
        }
    }
    fclose(f);
    return buf;
}

kn_status kn_fs_open_temp(const char *path, char **tmp_out, FILE **f_out)
{
    static atomic_uint counter;
    size_t len = strlen(path) + 48;
    char *tmp = malloc(len);
    if (!tmp) return kn_error(KN_ERR_OOM, "%s: out of memory", path);
    for (int tries = 0; tries < 100; tries++) {
        snprintf(tmp, len, "%s.tmp-%ld-%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) break;
        FILE *f = fdopen(fd, "wb");
        if (!f) {
            close(fd);
            unlink(tmp);
            break;
        }
        *tmp_out = tmp;
        *f_out = f;
        return KN_OK;
    }
    kn_status st = kn_error(KN_ERR_IO, "%s: cannot create a file there: %s", path, strerror(errno));
    free(tmp);
    return st;
}

kn_status kn_fs_commit_temp(FILE *f, const char *tmp, const char *path, kn_status st)
{
    if (st == KN_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        st = kn_error(KN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (st == KN_OK && rename(tmp, path) != 0)
        st = kn_error(KN_ERR_IO, "%s: cannot replace the file: %s", path, strerror(errno));
    if (st != KN_OK) unlink(tmp);
    return st;
}
