/*
 * A redis-server whose wall clock stands still until the conformance test moves it: an
 * LD_PRELOAD library that answers CLOCK_REALTIME (clock_gettime, gettimeofday, time) with the
 * microseconds stored in the file named by FROZEN_CLOCK_FILE, mapped shared, so the test sets
 * the time in place and the server's next clock read sees it. The file holds the time and its
 * bitwise complement (16 bytes): a read that races the test's write (the server's timers read
 * the clock at any moment) sees them disagree and reads again, never a torn time. Redis
 * keeps expiry as a wall-clock date and the scripts read TIME: with this clock no timing
 * decides an outcome, and the model runs on the same clock. Monotonic clocks are left alone
 * (the server's timers keep running). Raw system calls only: jemalloc reads the clock while it
 * initialises, before anything else is ready. (Adapted from tests/support/clock_shift.c,
 * which adds an offset instead.)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *frozen;
static int opened;

static int frozen_us(int64_t *us) {
    if (!opened) {
        opened = 1;
        const char *path = getenv("FROZEN_CLOCK_FILE");
        if (path) {
            long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY, 0);
            if (fd >= 0) {
                void *map = (void *)syscall(SYS_mmap, 0, 16, PROT_READ, MAP_SHARED, fd, 0);
                if (map != MAP_FAILED) frozen = map;
                syscall(SYS_close, fd);
            }
        }
    }
    if (!frozen) return 0;
    for (;;) {
        int64_t value = frozen[0], check = frozen[1];
        if (value == ~check) {
            *us = value;
            return 1;
        }
    }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int64_t us;
    if ((id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) && frozen_us(&us)) {
        ts->tv_sec = us / 1000000;
        ts->tv_nsec = (us % 1000000) * 1000;
        return 0;
    }
    return (int)syscall(SYS_clock_gettime, id, ts);
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r != 0) return r;
    if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
