/*
 * A server's wall clock, stepped by a test: an LD_PRELOAD library for redis-server that adds
 * an offset to CLOCK_REALTIME (clock_gettime, gettimeofday, time). Redis keeps a key's expiry as
 * a wall-clock date, so a step forward expires keys early, as an operator's `date -s` or an NTP
 * step on the server would. The monotonic clocks are left alone (Redis's timers keep running).
 *
 * The offset, in microseconds, is the first 8 bytes of the file named by CLOCK_SHIFT_FILE,
 * mapped shared: the test writes it in place and the next clock read sees it. Everything here is
 * a raw system call: no libc function that could allocate (jemalloc reads the clock while it
 * initialises, before anything else is ready).
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

static volatile int64_t *shift;
static int opened;

static int64_t offset_us(void) {
    if (!opened) {
        opened = 1;
        const char *path = getenv("CLOCK_SHIFT_FILE");
        if (path) {
            long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY, 0);
            if (fd >= 0) {
                void *map = (void *)syscall(SYS_mmap, 0, 8, PROT_READ, MAP_SHARED, fd, 0);
                if (map != MAP_FAILED) shift = map;
                syscall(SYS_close, fd);
            }
        }
    }
    return shift ? *shift : 0;
}

static void add(struct timespec *ts, int64_t us) {
    int64_t ns = (int64_t)ts->tv_nsec + (us % 1000000) * 1000;
    ts->tv_sec += us / 1000000 + ns / 1000000000;
    ns %= 1000000000;
    if (ns < 0) { ns += 1000000000; ts->tv_sec -= 1; }
    ts->tv_nsec = ns;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) add(ts, offset_us());
    return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    long r = syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    if (r != 0) return (int)r;
    add(&ts, offset_us());
    if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
    (void)tz;
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
