/* A shared library with no symbols at all once stripped: every function is
 * static (and visibility hidden), so even .dynsym names none of them. A
 * constructor publishes the entry point's address in the environment
 * variable NOSYM_ENTRY ("0x..."), which is how the Python fixture finds it.
 *   entry -> outer -> inner -> read(fd)  (blocks) */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) static long nosym_lib_inner(int fd) {
    char c;
    long r = read(fd, &c, 1);
    __asm__ volatile("" ::: "memory");
    return r * 3 + 1;
}

__attribute__((noinline)) static long nosym_lib_outer(int fd) {
    long r = nosym_lib_inner(fd);
    return r * 7 + 2;
}

__attribute__((noinline)) static long nosym_lib_entry(int fd) {
    long r = nosym_lib_outer(fd);
    return r + 5;
}

__attribute__((constructor)) static void publish_entry(void) {
    char buf[32];
    snprintf(buf, sizeof buf, "%p", (void *)nosym_lib_entry);
    setenv("NOSYM_ENTRY", buf, 1);
}
