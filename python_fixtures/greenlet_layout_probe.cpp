// Offsets of greenlet's objects, compiled against a greenlet release's own
// headers and one interpreter's include dir.
#define GREENLET_MODULE 1
#include <patchlevel.h>
#if PY_VERSION_HEX >= 0x030B0000
// The interpreter frame's layout (greenlet's own headers ask for it on 3.12+).
#define Py_BUILD_CORE 1
#endif
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif
#define private public
#define protected public
#include "greenlet_internal.hpp"
#if __has_include("TGreenlet.hpp")
#include "TGreenlet.hpp"
#include "TThreadState.hpp"
#else
// greenlet 2.x's names for the same headers.
#include "greenlet_greenlet.hpp"
#include "greenlet_thread_state.hpp"
#endif
#undef private
#undef protected
#include <cstddef>
#include <cstdio>
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
using namespace greenlet;
// Each value as `name = offset` in the generated assembly (compile with -S).
#define P(name, expr) extern "C" __attribute__((used)) const unsigned long probe_##name = (expr);
P(pygreenlet_pimpl, offsetof(PyGreenlet, pimpl))
P(pygreenlet_dict, offsetof(PyGreenlet, dict))
P(greenlet_exc_info, offsetof(Greenlet, exception_state) + offsetof(ExceptionState, exc_info))
P(greenlet_stack_start, offsetof(Greenlet, stack_state) + offsetof(StackState, _stack_start))
P(greenlet_stack_stop, offsetof(Greenlet, stack_state) + offsetof(StackState, stack_stop))
P(greenlet_top_frame, offsetof(Greenlet, python_state) + offsetof(PythonState, _top_frame))
P(user_main_greenlet, offsetof(UserGreenlet, _main_greenlet))
P(user_run_callable, offsetof(UserGreenlet, _run_callable))
P(user_parent, offsetof(UserGreenlet, _parent))
P(main_thread_state, offsetof(MainGreenlet, _thread_state))
P(thread_state_main, offsetof(ThreadState, main_greenlet))
P(thread_state_current, offsetof(ThreadState, current_greenlet))
P(tstate_exc_state, offsetof(PyThreadState, exc_state))
P(err_stackitem_previous, offsetof(_PyErr_StackItem, previous_item))
#if PY_VERSION_HEX >= 0x030B0000
P(frameobject_f_frame, offsetof(PyFrameObject, f_frame))
#endif
P(frameobject_f_back, offsetof(PyFrameObject, f_back))
