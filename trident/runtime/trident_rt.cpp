// trident_rt.cpp -- Trident's native runtime `_trident_rt`, built once per torch version:
// its module init.  The runtime's translation units, in the order a call meets them:
//
//   trident_rt_types.cpp       the Python types: `Function` (the object users call; its
//                              vectorcall enters the installed SCM) and `Module` (an SCM)
//   trident_rt_binder.cpp      binding a call's arguments to the locals an SCM reads
//   trident_rt_loader.cpp      loading an SCM shared object (dlopen + trident_scm_init)
//   trident_rt_api.cpp         the api table of trident_rt.h: tensor guards, the
//                              global-state guard, frames of IValues, modes, guard errors
//   trident_rt_ops.cpp         ATen operator calls (boxed dispatcher, typed fast paths)
//   trident_rt_launch.cpp      Triton launches
//   trident_rt_test_hooks.cpp  CPU test entry points of the launch ABI
//
// trident_rt_py.h holds what they share at the CPython level (no torch header),
// trident_rt_internal.h what they share at the ATen level.

#include <Python.h>

#include "trident_rt.h"
#include "trident_rt_py.h"

namespace {

PyMethodDef rt_methods[] = {
    {"load_scm", trident::load_scm, METH_VARARGS, "load_scm(path, consts) -> Module"},
    {"global_state", trident::py_global_state, METH_NOARGS, "snapshot of the global-state guard"},
    {"dispatch_keys", trident::py_dispatch_keys, METH_O, "DispatchKeySet raw repr of a tensor"},
    {"global_state_names", trident::py_global_state_names, METH_NOARGS,
     "the name of each word of global_state(), '' where unused"},
    {"keyset_str", trident::py_keyset_str, METH_O,
     "the keys of a DispatchKeySet raw repr, as c10 prints"},
    {"enum_code", trident::py_enum_code, METH_O,
     "C++ enum value of a dtype/layout/memory_format/device"},
    {"api_address", trident::py_api_address, METH_NOARGS, "address of the trt_api table"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef rt_module = {PyModuleDef_HEAD_INIT, "_trident_rt", "Trident native runtime", -1,
                         rt_methods};

}  // namespace

PyMODINIT_FUNC PyInit__trident_rt() {
  PyObject* m = PyModule_Create(&rt_module);
  if (!m) return nullptr;
  if (trident::add_types(m) < 0 || trident::add_test_hooks(m) < 0 ||
      PyModule_AddIntConstant(m, "ABI_VERSION", TRT_ABI_VERSION) < 0 ||
      PyModule_AddIntConstant(m, "MAX_LOCALS", trident::kMaxLocals) < 0 ||
      PyModule_AddIntConstant(m, "GLOBAL_STATE_WORDS", TRT_GLOBAL_STATE_WORDS) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
