/* Run a command and report its wall time, CPU time and peak RSS.
 *
 *     measure REPORT_FILE COMMAND [ARGS...]
 *
 * Writes "wall_ns utime_us stime_us maxrss_kib exit_status" to REPORT_FILE.
 * Why not measure from Python: Linux carries the exec'ing process's peak RSS
 * over into ru_maxrss, so a child spawned from the ~17 MB benchmark script
 * reports at least ~17 MB. Forked from this small program, the command's
 * ru_maxrss is its own. Built by bench/run.py with gcc. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: measure REPORT_FILE COMMAND [ARGS...]\n");
        return 2;
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pid_t pid = fork();
    if (pid < 0) {
        perror("measure: fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror("measure: exec");
        _exit(127);
    }
    int status;
    struct rusage usage;
    if (wait4(pid, &status, 0, &usage) < 0) {
        perror("measure: wait4");
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    long long wall = (end.tv_sec - start.tv_sec) * 1000000000LL + (end.tv_nsec - start.tv_nsec);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    FILE *report = fopen(argv[1], "w");
    if (!report) {
        perror("measure: report file");
        return 2;
    }
    fprintf(report, "%lld %lld %lld %ld %d\n", wall,
            (long long)usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec,
            (long long)usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec, usage.ru_maxrss, code);
    fclose(report);
    return code;
}
