/* A library linked (with segment_gap.ld) so that its code segment starts
 * inside the page where its read-only segment ends: file offset 0x5xx,
 * address 0x15xx, as lld lays out libraries and as patchelf/auditwheel
 * leave wheels. Addresses in it are right only when the load bias comes
 * from the segment the mapping maps. Built unstripped, -O1, with frame
 * pointers kept, so that gdb and the unwinder have the same facts. */
#include <unistd.h>

__attribute__((noinline)) long gap_leaf(int fd) {
    char b;
    long r = read(fd, &b, 1);
    __asm__ volatile("" ::: "memory");
    return r;
}

__attribute__((noinline)) long gap_mid(int fd) {
    long r = gap_leaf(fd);
    __asm__ volatile("" ::: "memory");
    return r + 1;
}

long gap_block(int fd) {
    long r = gap_mid(fd);
    __asm__ volatile("" ::: "memory");
    return r + 1;
}
