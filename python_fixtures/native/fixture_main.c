/* Test program for the native unwinder.
 *   fixture_main threads      : threads "blocker" (fixture_block on a pipe),
 *                               "spinner" (fixture_spin), "asm" (fixture_asm_entry),
 *                               "sleeper" (fixture_sleep); prints
 *                               "ready <blocker> <spinner> <asm> <sleeper>" (tids).
 *   fixture_main dlopen LIB   : prints "ready", waits for a line on stdin, then
 *                               dlopens LIB and calls its fixture_block on a pipe
 *                               in a new thread; prints "loaded <tid>".
 * Exits when stdin reaches EOF. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

long fixture_block(int fd);
long fixture_sleep(long ms);
uint64_t fixture_spin(uint64_t iterations);
long fixture_asm_entry(int fd);

static int pipe_fd[2];
static pthread_barrier_t barrier;
static int tids[4];
static long (*late_block)(int);

static void *run(void *arg) {
    int which = (int)(intptr_t)arg;
    static const char *names[] = {"blocker", "spinner", "asm", "sleeper"};
    pthread_setname_np(pthread_self(), names[which]);
    tids[which] = (int)syscall(SYS_gettid);
    pthread_barrier_wait(&barrier);
    switch (which) {
    case 0: fixture_block(pipe_fd[0]); break;
    case 1: fixture_spin(0); break;
    case 2: fixture_asm_entry(pipe_fd[0]); break;
    default: fixture_sleep(1000000); break;
    }
    return 0;
}

static void *run_late(void *arg) {
    (void)arg;
    tids[0] = (int)syscall(SYS_gettid);
    pthread_barrier_wait(&barrier);
    late_block(pipe_fd[0]);
    return 0;
}

int main(int argc, char **argv) {
    char line[64];
    pthread_t t;
    if (pipe(pipe_fd))
        return 1;
    if (argc >= 2 && strcmp(argv[1], "threads") == 0) {
        pthread_barrier_init(&barrier, 0, 5);
        for (int i = 0; i < 4; i++)
            pthread_create(&t, 0, run, (void *)(intptr_t)i);
        pthread_barrier_wait(&barrier);
        printf("ready %d %d %d %d\n", tids[0], tids[1], tids[2], tids[3]);
        fflush(stdout);
    } else if (argc >= 3 && strcmp(argv[1], "dlopen") == 0) {
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            return 0;
        void *h = dlopen(argv[2], RTLD_NOW);
        if (!h || !(late_block = (long (*)(int))dlsym(h, "fixture_block"))) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        pthread_barrier_init(&barrier, 0, 2);
        pthread_create(&t, 0, run_late, 0);
        pthread_barrier_wait(&barrier);
        printf("loaded %d\n", tids[0]);
        fflush(stdout);
    } else {
        return 2;
    }
    while (fgets(line, sizeof line, stdin))
        ;
    _exit(0);
}
