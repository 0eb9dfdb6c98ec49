/* Tail calls, for the tests of tail-call frames rebuilt from DWARF call-site
 * records (src/native_unwind/callsites.rs, tests/native_dump.rs).
 *
 * Built with gcc -O2 -g -shared -fPIC: the static helpers end in a jump to
 * their callee (the tests check with objdump that they are jmp), so they
 * leave no frame on the stack while the leaf runs.
 *
 *   tc_chain(n)    calls     tc_mid1, which jumps to tc_mid2, which jumps to
 *                  tc_leaf: one chain, tc_mid1 -> tc_mid2 -> tc_leaf.
 *   tc_fork(n)     calls     tc_split, which jumps to tc_left or tc_right,
 *                  which both jump to tc_leaf2: two chains, ambiguous.
 *   tc_indirect(n) calls     tc_maybe, which jumps to tc_mid2 (then tc_leaf)
 *                  or through a function pointer: the pointer could reach
 *                  tc_leaf too, so nothing is known for sure.
 *
 * The leaves sleep in nanosleep while their argument is negative (a thread
 * parks there for good: nothing changes it), and return at once otherwise.
 */
#include <time.h>

volatile int tc_sink;
/* Never set: keeps the compiler from proving that a parked leaf never returns. */
volatile int tc_stop;

#define HELPER static __attribute__((noinline, noclone))

static void park(int n)
{
    struct timespec t = {0, 20 * 1000 * 1000};
    while (n < 0 && !tc_stop) {
        nanosleep(&t, 0);
    }
}

HELPER int tc_leaf(int n)
{
    park(n);
    tc_sink = n;
    return n * 3;
}

HELPER int tc_mid2(int n)
{
    tc_sink = n;
    return tc_leaf(n - 1);
}

HELPER int tc_mid1(int n)
{
    tc_sink = n;
    return tc_mid2(n * 2);
}

int tc_chain(int n)
{
    /* A call, not a jump: the result is used. */
    return tc_mid1(n) + 1;
}

HELPER int tc_leaf2(int n)
{
    park(n);
    tc_sink = n;
    return n * 5;
}

HELPER int tc_left(int n)
{
    tc_sink = 1;
    return tc_leaf2(n - 1);
}

HELPER int tc_right(int n)
{
    tc_sink = 2;
    return tc_leaf2(n - 2);
}

HELPER int tc_split(int n)
{
    if (n & 1)
        return tc_left(n);
    return tc_right(n * 3);
}

int tc_fork(int n)
{
    return tc_split(n) + 1;
}

int (*volatile tc_pointer)(int) = tc_leaf;

HELPER int tc_maybe(int n)
{
    tc_sink = n;
    if (n > 1000)
        return tc_pointer(n);
    return tc_mid2(n + 1);
}

int tc_indirect(int n)
{
    return tc_maybe(n) + 1;
}
