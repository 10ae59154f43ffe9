/* The clock step of scripts/job_life.py: an LD_PRELOAD shim that moves CLOCK_REALTIME only.
 *
 * Every process of the harness loads it (LD_PRELOAD); the wall clock it reads (clock_gettime of
 * CLOCK_REALTIME and CLOCK_REALTIME_COARSE, gettimeofday, time) is the real one plus the offset in
 * seconds written in the file $JOB_LIFE_CLOCK_FILE, re-read at most every 20 ms. Writing a new offset
 * steps the wall clock of every process at once, mid-trial, as settimeofday or an NTP step does; the
 * monotonic and boot clocks (sleeps, timeouts, the NVML double's integration) do not move, nor do the
 * times the kernel stamps on files. (libfaketime 0.9.10 moves the monotonic clock too, or makes
 * Python's time.sleep fail with EINVAL when told not to.)
 *
 * Build: cc -shared -fPIC -O2 -o clockstep.so scripts/job_life_clock.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile long long offset_ns;
static volatile long long checked_ns = -1;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

static long long mono_ns(void) {
    struct timespec t;
    real_clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void refresh(void) {
    if (!real_clock_gettime) real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    long long now = mono_ns();
    if (checked_ns >= 0 && now - checked_ns < 20000000LL) return;
    checked_ns = now;
    const char *path = getenv("JOB_LIFE_CLOCK_FILE");
    if (!path) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    offset_ns = (long long)(strtod(buf, NULL) * 1e9);
}

static void shift(struct timespec *t) {
    long long v = (long long)t->tv_sec * 1000000000LL + t->tv_nsec + offset_ns;
    t->tv_sec = v / 1000000000LL;
    t->tv_nsec = v % 1000000000LL;
    if (t->tv_nsec < 0) {
        t->tv_nsec += 1000000000LL;
        t->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clk, struct timespec *t) {
    refresh();
    int rc = real_clock_gettime(clk, t);
    if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) shift(t);
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec t;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &t) != 0) return -1;
    if (tv) {
        tv->tv_sec = t.tv_sec;
        tv->tv_usec = t.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    if (out) *out = t.tv_sec;
    return t.tv_sec;
}
