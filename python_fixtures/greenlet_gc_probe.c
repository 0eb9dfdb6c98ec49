// CPython's collector lists, compiled against one interpreter's headers.
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX >= 0x03090000
#include "internal/pycore_interp.h"
// The collector's state is the interpreter's (3.9+)...
typedef PyInterpreterState gc_owner;
#define GC_IN_RUNTIME 0
#elif PY_VERSION_HEX >= 0x03080000
#include "internal/pycore_pystate.h"
// ... or the runtime's (3.7, 3.8).
typedef _PyRuntimeState gc_owner;
#define GC_IN_RUNTIME 1
#else
#include "internal/pystate.h"
typedef _PyRuntimeState gc_owner;
#define GC_IN_RUNTIME 1
#endif
#include <stddef.h>
#define P(name, expr) __attribute__((used)) const unsigned long probe_##name = (expr);
P(gc_in_runtime, GC_IN_RUNTIME)
P(interp_gc_generations, offsetof(gc_owner, gc.generations))
P(gc_generations, NUM_GENERATIONS)
P(interp_gc_permanent, offsetof(gc_owner, gc.permanent_generation))
P(gc_generation_size, sizeof(struct gc_generation))
P(gc_head_size, sizeof(PyGC_Head))
P(func_qualname, offsetof(PyFunctionObject, func_qualname))
P(method_func, offsetof(PyMethodObject, im_func))
P(method_self, offsetof(PyMethodObject, im_self))
P(cfunction_self, offsetof(PyCFunctionObject, m_self))
P(tp_base, offsetof(PyTypeObject, tp_base))
