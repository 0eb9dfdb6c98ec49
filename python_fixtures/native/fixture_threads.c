/* Threads that Python does not know about, for `--native-all`: started with
 * pthread_create from C, named with pthread_setname_np (what
 * /proc/PID/task/TID/comm shows), blocked in fixture_block().
 * Built into the tests' libfixture.so next to fixture.c. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

long fixture_block(int fd);

struct start {
    const char *name;
    int fd;
    volatile int tid;
};

static void *c_thread(void *arg) {
    struct start *s = arg;
    int fd = s->fd;
    pthread_setname_np(pthread_self(), s->name);
    __atomic_store_n(&s->tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
    fixture_block(fd);
    return 0;
}

/* Starts a named thread blocked in fixture_block(fd); returns its kernel
 * thread id once it runs (its name is set by then), or -1. */
int fixture_start_thread(const char *name, int fd) {
    struct start s = {name, fd, 0};
    pthread_t t;
    if (pthread_create(&t, 0, c_thread, &s))
        return -1;
    while (!__atomic_load_n(&s.tid, __ATOMIC_ACQUIRE))
        usleep(1000);
    pthread_detach(t);
    return s.tid;
}
