/* Fixture library for the native unwinder tests. Built with
 *   gcc -O2 -fomit-frame-pointer -shared -fPIC fixture.c fixture_asm.s
 * and stripped to its dynamic symbols, so the static helpers below have no
 * name and must show up as libfixture.so+0x...
 * Every call is followed by work on its result so that gcc cannot turn it
 * into a tail call (which would legitimately remove the caller's frame). */
#include <stdint.h>
#include <time.h>
#include <unistd.h>

volatile uint64_t fixture_counter;

__attribute__((noinline)) static long helper_read(int fd, char *buf) {
    long r = read(fd, buf, 1);
    __asm__ volatile("" ::: "memory");
    return r * 5 + 1;
}

__attribute__((noinline)) static long helper_mid(int fd) {
    char buf[16] = {0};
    long r = helper_read(fd, buf);
    return r * 3 + buf[0];
}

/* Blocks in read() on `fd` through two static helpers. */
long fixture_block(int fd) {
    long r = helper_mid(fd);
    return r + 7;
}

__attribute__((noinline)) static long helper_sleep(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    long r = nanosleep(&ts, 0);
    __asm__ volatile("" ::: "memory");
    return r + 2;
}

/* Sleeps in nanosleep() through a static helper. */
long fixture_sleep(long ms) {
    long r = helper_sleep(ms);
    return r * 2;
}

__attribute__((noinline)) static uint64_t spin_inner(uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        fixture_counter++;
    return fixture_counter;
}

/* Spins forever (iterations == 0) or for `iterations` rounds. */
uint64_t fixture_spin(uint64_t iterations) {
    uint64_t t = 0;
    for (uint64_t i = 0; iterations == 0 || i < iterations; i++)
        t += spin_inner(100000);
    return t;
}

/* Calls back into the caller (a ctypes callback: native -> Python -> native). */
long fixture_call(long (*cb)(long), long arg) {
    long r = cb(arg);
    return r + 1;
}

/* In fixture_asm.s: hand-written, no CFI, rbp used as a scratch register. */
long fixture_asm_block(int fd);

/* Keeps a frame pointer, so unwinding its caller needs the rbp that
 * fixture_asm_block saved on the stack. */
__attribute__((noinline, optimize("no-omit-frame-pointer"))) long fixture_asm_entry(int fd) {
    volatile char pad[32];
    pad[0] = 1;
    long r = fixture_asm_block(fd);
    return r + pad[0];
}
