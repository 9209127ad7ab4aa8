// trident_rt_py.h -- the runtime's Python objects (Module, Function) and the CPython-level
// functions its translation units share (not part of the SCM ABI; generated code never sees
// it).  It includes no torch header, so the units that need only CPython (trident_rt.cpp,
// trident_rt_types.cpp, trident_rt_binder.cpp, trident_rt_loader.cpp) compile in a second.
#pragma once

#include <Python.h>

#include "trident_rt.h"

namespace trident {

// The most locals (L[]) a call binds natively; a function with more always misses.
constexpr int kMaxLocals = 256;

// `trident.Module`: a loaded SCM shared object and its state (trident_rt_loader.cpp).
struct TrtModule {
  PyObject_HEAD void* handle;
  void* state;
  trt_scm_call_fn call;
  trt_scm_stats_fn stats;
  trt_scm_profile_fn profile;
  trt_scm_free_fn free_fn;
  PyObject* consts;
  PyObject* path;
};

// How a call's arguments map to the locals the SCM reads (L[]): read from the function's
// code object when it is installed or replaced.
struct Binder {
  PyObject* names;  // tuple: parameter names (co_varnames[:nparams]); owned
  int argcount, posonly, kwonly, varargs, varkw, nfree, nlocals;
};

// `trident.Function`: the object users call (trident_rt_types.cpp).
struct TrtFunction {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* dict;
  PyObject* weakrefs;
  PyObject* fn;      // the user's Python function
  PyObject* code;    // its code object when the binder was built
  PyObject* miss;    // Python callable: the SCM's miss handler
  TrtModule* module; // installed SCM or nullptr
  Binder b;          // nlocals > kMaxLocals: never bound natively (every call misses)
};

// -- trident_rt_types.cpp: the two Python types --
extern PyTypeObject TrtModuleType;
extern PyTypeObject TrtFunctionType;
// Readies both types and adds them to the module `m` as Module and Function; -1 with an
// exception set on failure.
int add_types(PyObject* m);

// -- trident_rt_loader.cpp: loading and unloading an SCM shared object --
// load_scm(path, consts) -> Module: dlopen, resolve the entry points, trident_scm_init.
PyObject* load_scm(PyObject* self, PyObject* args);
// Module's tp_dealloc: frees the SCM's state and unmaps it.
void module_dealloc(PyObject* self);

// -- trident_rt_binder.cpp: binding a call's arguments to L[] --
// The binder of a code object: 0, or -1 with an exception set.  `out->names` is a new
// reference on success.
int binder_from_code(PyObject* code, Binder* out);
int bind(const Binder& b, PyFunctionObject* fo, PyObject* const* args, Py_ssize_t nargs,
         PyObject* kwnames, PyObject** L);

// -- trident_rt_api.cpp: the api table and the module functions about its guards --
extern const trt_api kApi;
// Raises the pending guard error, if any: true when it did (the call's result is dropped).
bool raise_pending_error();
PyObject* py_global_state(PyObject*, PyObject*);
PyObject* py_global_state_names(PyObject*, PyObject*);
PyObject* py_keyset_str(PyObject*, PyObject* raw);
PyObject* py_dispatch_keys(PyObject*, PyObject* t);
PyObject* py_enum_code(PyObject*, PyObject* o);
PyObject* py_api_address(PyObject*, PyObject*);

// -- trident_rt_test_hooks.cpp: CPU tests of the launch ABI --
// Adds launch_pack_for_test and launch_select_for_test to `m`; -1 with an exception set.
int add_test_hooks(PyObject* m);

}  // namespace trident
