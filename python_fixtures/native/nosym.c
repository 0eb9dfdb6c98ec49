/* A program with no symbols at all once built with -static and stripped:
 * main -> two static helpers -> read() on stdin (blocks until EOF).
 * Prints "ready" first. */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) static long nosym_inner(int fd) {
    char c;
    long r = read(fd, &c, 1);
    __asm__ volatile("" ::: "memory");
    return r * 3 + 1;
}

__attribute__((noinline)) static long nosym_outer(int fd) {
    long r = nosym_inner(fd);
    return r * 7 + 2;
}

int main(void) {
    printf("ready\n");
    fflush(stdout);
    long r = nosym_outer(0);
    return (int)(r & 1);
}
