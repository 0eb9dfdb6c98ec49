// C++ frames named as a PyTorch-size library names them: a kernel wrapper
// whose template arguments spell out a whole function type, a std::function
// holding a lambda (`std::_Function_handler<…>::_M_invoke`), an operator(),
// a function in an anonymous namespace, each taking containers by reference,
// so that every demangled name runs to hundreds of characters. The thread
// parks in read() at the bottom, after writing a byte to `ready_fd`.
#include <unistd.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pyinspect_fixture {

template <typename... T>
struct typelist {};

namespace detail {
template <typename Fn, typename Ret, typename Args>
struct WrapFunctionIntoFunctor_ {
    Fn fn;
    __attribute__((noinline)) Ret operator()(const std::vector<double>& v, long n) {
        return fn(v, n) + 1;
    }
};
}  // namespace detail

template <typename Functor>
struct wrap_kernel_functor_unboxed_ {
    template <typename... Args>
    __attribute__((noinline)) static long call(
        Functor* f, const std::map<std::string, std::vector<long>>& options, Args&&... args) {
        return (*f)(std::forward<Args>(args)...) + static_cast<long>(options.size());
    }
};

namespace {
__attribute__((noinline)) long addmm_impl_cpu_(
    std::vector<double>& out, const std::vector<double>& a, long n, int fd, int ready_fd) {
    char c = 'r';
    if (write(ready_fd, &c, 1) != 1)
        return -1;
    long got = read(fd, &c, 1);  // parks here: nothing writes to fd
    out.push_back(a.empty() ? 0.0 : a[0] * static_cast<double>(n));
    return got;
}
}  // namespace

}  // namespace pyinspect_fixture

extern "C" long names_block(int fd, int ready_fd) {
    using namespace pyinspect_fixture;
    std::vector<double> out;
    auto lambda = [&out, fd, ready_fd](const std::vector<double>& a, long n)
        __attribute__((noinline)) { return addmm_impl_cpu_(out, a, n, fd, ready_fd); };
    using Handler = std::function<long(const std::vector<double>&, long)>;
    using Functor = detail::WrapFunctionIntoFunctor_<
        Handler, long, typelist<const std::vector<double>&, long, std::map<std::string, long>>>;
    Functor functor{Handler(lambda)};
    std::map<std::string, std::vector<long>> options{{"beta", {1}}};
    std::vector<double> a{2.0};
    return wrap_kernel_functor_unboxed_<Functor>::call(&functor, options, a, 3L);
}
