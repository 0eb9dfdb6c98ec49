// C++ with inlined frames and exceptions, for the gdb oracle: a thread that
// throws and catches in a loop through inlined helpers, then parks in a
// condition-variable wait reached through an inlined call chain.
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>

namespace fixture {

static std::mutex mu;
static std::condition_variable cv;
static bool never = false;

struct Parker {
    __attribute__((noinline)) void park() {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [] { return never; });
    }
};

static inline void inlined_wait(Parker &p) { p.park(); }

__attribute__((noinline)) int thrower(int i) {
    if (i % 2 == 0)
        throw std::runtime_error("even " + std::to_string(i));
    return i;
}

static inline int caught(int i) {
    try {
        return thrower(i);
    } catch (const std::exception &) {
        return -1;
    }
}

}  // namespace fixture

extern "C" long cxx_park(int rounds) {
    long s = 0;
    for (int i = 0; i < rounds; i++)
        s += fixture::caught(i);
    fixture::Parker p;
    fixture::inlined_wait(p);
    return s;
}
