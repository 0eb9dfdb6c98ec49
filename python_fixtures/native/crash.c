/* A C library that faults: crash_read(p) reads through p (the core tests
 * pass 0x10), so the process dies of SIGSEGV at that address inside this
 * library, called from Python through ctypes. */
int crash_read(volatile int *p) {
    return *p + 1;
}
