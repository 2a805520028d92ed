/* LD_PRELOAD fault injector for the serve fault tests (tests/it/serve/faults.rs).
 *
 * Counts the write-like calls (write, pwrite, pwrite64, writev, fsync,
 * fdatasync) on descriptors whose path contains $FAULT_PATH, and makes call
 * number $FAULT_AT fail once: with errno $FAULT_ERRNO ("EIO" or "ENOSPC"), or,
 * for "SHORT", by writing only half the bytes (a short write). Every other
 * call goes to libc. Writes "fault-shim: injected ..." on stderr when it
 * fires, so the test can tell the point was reached. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef int (*sync_fn)(int);

static long target = -1;
static const char *pattern;
static int fail_errno = EIO;
static int short_write;
static atomic_long seen;

__attribute__((constructor)) static void init(void) {
    const char *at = getenv("FAULT_AT");
    pattern = getenv("FAULT_PATH");
    const char *e = getenv("FAULT_ERRNO");
    if (!at || !pattern) return;
    target = atol(at);
    if (e && strcmp(e, "ENOSPC") == 0) fail_errno = ENOSPC;
    if (e && strcmp(e, "SHORT") == 0) short_write = 1;
}

/* 1: fail this call; 0: pass it on. */
static int fire(int fd, const char *call) {
    if (target < 0) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) return 0;
    path[n] = 0;
    if (!strstr(path, pattern)) return 0;
    long k = atomic_fetch_add(&seen, 1) + 1;
    if (k != target) return 0;
    char msg[4200];
    int len = snprintf(msg, sizeof msg, "fault-shim: injected %s into %s #%ld on %s\n",
                       short_write ? "a short write" : strerror(fail_errno), call, k, path);
    write_fn real_write = (write_fn)dlsym(RTLD_NEXT, "write");
    if (len > 0) (void)real_write(2, msg, (size_t)len);
    return 1;
}

#define REAL(name, type)                                                                    \
    static type real_##name;                                                                \
    if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write, write_fn);
    if (fire(fd, "write")) {
        if (short_write && n > 1) return real_write(fd, buf, n / 2);
        errno = fail_errno;
        return -1;
    }
    return real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite, pwrite_fn);
    if (fire(fd, "pwrite")) {
        if (short_write && n > 1) return real_pwrite(fd, buf, n / 2, off);
        errno = fail_errno;
        return -1;
    }
    return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite64, pwrite_fn);
    if (fire(fd, "pwrite64")) {
        if (short_write && n > 1) return real_pwrite64(fd, buf, n / 2, off);
        errno = fail_errno;
        return -1;
    }
    return real_pwrite64(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL(writev, writev_fn);
    if (fire(fd, "writev")) {
        if (short_write && cnt > 0 && iov[0].iov_len > 1) {
            struct iovec half = {iov[0].iov_base, iov[0].iov_len / 2};
            return real_writev(fd, &half, 1);
        }
        errno = fail_errno;
        return -1;
    }
    return real_writev(fd, iov, cnt);
}

int fsync(int fd) {
    REAL(fsync, sync_fn);
    if (!short_write && fire(fd, "fsync")) {
        errno = fail_errno;
        return -1;
    }
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync, sync_fn);
    if (!short_write && fire(fd, "fdatasync")) {
        errno = fail_errno;
        return -1;
    }
    return real_fdatasync(fd);
}
