/* Two threads that take two mutexes in opposite orders and deadlock: a hung
 * C extension as users meet it. deadlock_run(which) is called from a Python
 * thread each (which = 0 or 1) and never returns. */
#include <pthread.h>
#include <unistd.h>

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t b = PTHREAD_MUTEX_INITIALIZER;
static volatile int holding;

__attribute__((noinline)) static void take_second(pthread_mutex_t *m) {
    pthread_mutex_lock(m);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void deadlock_run(int which) {
    pthread_mutex_t *first = which ? &b : &a, *second = which ? &a : &b;
    pthread_mutex_lock(first);
    __atomic_add_fetch(&holding, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&holding, __ATOMIC_SEQ_CST) < 2)
        usleep(1000);
    take_second(second);
    __asm__ volatile("" ::: "memory");
}
