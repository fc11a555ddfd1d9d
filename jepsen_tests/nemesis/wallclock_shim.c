/* The wall clock of one process, shifted by an offset the harness can change at any time.
 *
 * Preloaded into a node (LD_PRELOAD) by jepsen_tests/nemesis/clock.py. It wraps
 * clock_gettime for the wall clocks (CLOCK_REALTIME, its coarse variant and CLOCK_TAI),
 * gettimeofday and time, and adds the offset, in nanoseconds, stored as a little-endian
 * int64 in the first 8 bytes of the file named by LBJT_WALLCLOCK_FILE. The file is mapped
 * shared, so the harness's store is seen by the next call: no system call per clock read.
 * CLOCK_MONOTONIC and CLOCK_BOOTTIME are left alone, as an NTP step or a skewed clock leaves
 * them alone on a real machine (libfaketime, used by clock-bump, shifts them too).
 *
 * Without the variable, or if the file cannot be mapped, the offset is 0.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int64_t *offset_ns;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

static void resolve(void) {
    if (!real_clock_gettime)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
}

__attribute__((constructor)) static void init(void) {
    resolve();
    const char *path = getenv("LBJT_WALLCLOCK_FILE");
    if (!path)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    void *p = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED)
        offset_ns = (int64_t *)p;
}

static int64_t offset(void) {
    /* An aligned 8-byte load: the harness's aligned 8-byte store is never seen torn. */
    return offset_ns ? __atomic_load_n(offset_ns, __ATOMIC_RELAXED) : 0;
}

static void shift(struct timespec *ts, int64_t off) {
    int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + off;
    int64_t sec = ns / 1000000000, rem = ns % 1000000000;
    if (rem < 0) {
        rem += 1000000000;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)rem;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    resolve();
    int r = real_clock_gettime(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI)) {
        int64_t off = offset();
        if (off)
            shift(ts, off);
    }
    return r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timeval *volatile out = tv; /* glibc declares it nonnull, and accepts NULL */
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0 && out) {
        out->tv_sec = ts.tv_sec;
        out->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *t) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (t)
        *t = ts.tv_sec;
    return ts.tv_sec;
}
