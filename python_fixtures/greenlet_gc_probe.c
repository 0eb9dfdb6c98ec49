// CPython's collector lists, compiled against one interpreter's headers.
#define Py_BUILD_CORE 1
#include <Python.h>
#include "internal/pycore_interp.h"
#include <stddef.h>
#define P(name, expr) __attribute__((used)) const unsigned long probe_##name = (expr);
P(interp_gc_generations, offsetof(PyInterpreterState, gc.generations))
P(interp_gc_permanent, offsetof(PyInterpreterState, gc.permanent_generation))
P(gc_generation_size, sizeof(struct gc_generation))
P(gc_generations, NUM_GENERATIONS)
P(gc_head_size, sizeof(PyGC_Head))
P(func_qualname, offsetof(PyFunctionObject, func_qualname))
P(method_func, offsetof(PyMethodObject, im_func))
P(tp_base, offsetof(PyTypeObject, tp_base))
