/* What the machine itself charges a sampler per sample, with no reading at
 * all: the floor under every tool's CPU per sample.
 *
 *     floor sleep RATE SECONDS
 *     floor pause RATE SECONDS TID
 *
 * `sleep` wakes RATE times a second (clock_nanosleep to absolute deadlines)
 * and does nothing else. `pause` also stops thread TID at each wake as a
 * pausing sampler must (PTRACE_SEIZE, PTRACE_INTERRUPT, waitpid for the stop,
 * PTRACE_DETACH) and reads nothing. Run under measure.c, which reports the
 * CPU; divide by RATE x SECONDS. Exits 1 if a pause fails. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[1], "pause") == 0 && argc < 5)) {
        fprintf(stderr, "usage: floor sleep|pause RATE SECONDS [TID]\n");
        return 2;
    }
    int pause = strcmp(argv[1], "pause") == 0;
    double rate = atof(argv[2]), secs = atof(argv[3]);
    pid_t tid = pause ? atoi(argv[4]) : 0;
    long step = (long)(1e9 / rate);
    long n = (long)(rate * secs);
    /* As pyinspect does: wake at the deadline, not up to 50 us after it. */
    prctl(PR_SET_TIMERSLACK, 1);
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    for (long i = 0; i < n; i++) {
        t.tv_nsec += step;
        while (t.tv_nsec >= 1000000000L) {
            t.tv_nsec -= 1000000000L;
            t.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
        if (!pause)
            continue;
        int status;
        if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0 || ptrace(PTRACE_INTERRUPT, tid, 0, 0) != 0 ||
            waitpid(tid, &status, __WALL) != tid) {
            perror("floor: pause");
            return 1;
        }
        ptrace(PTRACE_DETACH, tid, 0, 0);
    }
    return 0;
}
