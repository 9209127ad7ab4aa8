// trident_rt_types.cpp -- the runtime's two Python types.
//
//   * `trident.Module`: a loaded SCM (made by load_scm, trident_rt_loader.cpp); its stats
//     and profile methods read the SCM's counters.
//   * `trident.Function`: the object users call.  Its vectorcall binds arguments natively
//     (trident_rt_binder.cpp) and enters the installed SCM; only a miss (or arguments it
//     cannot bind) goes back to the Python miss handler.

#include <Python.h>

#include <cstddef>
#include <vector>

#include "trident_rt.h"
#include "trident_rt_py.h"

namespace trident {

PyTypeObject TrtModuleType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject TrtFunctionType = {PyVarObject_HEAD_INIT(nullptr, 0)};

}  // namespace trident

using namespace trident;

namespace {

// ---------------------------------------------------------------- Module ----

PyObject* module_stats(PyObject* self, PyObject*) {
  auto* m = reinterpret_cast<TrtModule*>(self);
  int n = m->stats(m->state, nullptr, nullptr, 0);
  std::vector<int64_t> hits(n);
  std::vector<int32_t> failed(n);
  m->stats(m->state, hits.data(), failed.data(), n);
  PyObject* out = PyList_New(n);
  if (!out) return nullptr;
  for (int i = 0; i < n; ++i) {
    PyObject* t = Py_BuildValue("(Li)", static_cast<long long>(hits[i]), failed[i]);
    if (!t) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, i, t);
  }
  return out;
}

PyObject* module_profile(PyObject* self, PyObject*) {
  auto* m = reinterpret_cast<TrtModule*>(self);
  int n = m->stats(m->state, nullptr, nullptr, 0);
  std::vector<int64_t> v(8 * static_cast<size_t>(n > 0 ? n : 0));
  m->profile(m->state, v.data(), n);
  PyObject* out = PyList_New(n);
  if (!out) return nullptr;
  for (int i = 0; i < n; ++i) {
    const int64_t* o = v.data() + 8 * i;
    PyObject* t = Py_BuildValue("(LLLLLLLL)", static_cast<long long>(o[0]),
                                static_cast<long long>(o[1]), static_cast<long long>(o[2]),
                                static_cast<long long>(o[3]), static_cast<long long>(o[4]),
                                static_cast<long long>(o[5]), static_cast<long long>(o[6]),
                                static_cast<long long>(o[7]));
    if (!t) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, i, t);
  }
  return out;
}

PyMethodDef module_methods[] = {
    {"stats", module_stats, METH_NOARGS,
     "[(hits, index of the guard that last failed or -1)] per version"},
    {"profile", module_profile, METH_NOARGS,
     "[(ns in guards, ns in the program over the hits, misses, ns of guards on misses "
     "(these four nonzero only for versions generated with TRIDENT_PROFILE=1), environment "
     "guards, their records, of them evaluated on every call, cached)] per version"},
    {nullptr, nullptr, 0, nullptr}};

// -------------------------------------------------------------- Function ----

PyObject* call_miss(TrtFunction* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  PyObject* miss = self->miss;
  Py_INCREF(miss);  // the call may replace it (tp_init again)
  PyObject* r = PyObject_Vectorcall(miss, args, PyVectorcall_NARGS(nargsf), kwnames);
  Py_DECREF(miss);
  return r;
}

PyObject* function_vectorcall(PyObject* self_, PyObject* const* args, size_t nargsf,
                              PyObject* kwnames) {
  auto* self = reinterpret_cast<TrtFunction*>(self_);
  TrtModule* m = self->module;
  PyObject* fn = self->fn;
  if (!m || reinterpret_cast<PyFunctionObject*>(fn)->func_code != self->code ||
      self->b.nlocals > kMaxLocals)
    return call_miss(self, args, nargsf, kwnames);
  // Strong references for the whole call: binding allocates, so a collection can run a
  // finalizer that calls this function, misses, and installs a new SCM (releasing this
  // one), or replaces the function's code (and with it the binder).
  Py_INCREF(m);
  Py_INCREF(fn);
  const Binder b = self->b;
  Py_INCREF(b.names);
  PyObject* L[kMaxLocals];
  for (int i = 0; i < b.nlocals; ++i) L[i] = nullptr;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject* r = nullptr;
  int status = TRT_MISS;
  if (bind(b, reinterpret_cast<PyFunctionObject*>(fn), args, nargs, kwnames, L) == 0) {
    r = m->call(m->state, L, &status);
    if (raise_pending_error()) [[unlikely]] {  // a guard read raised KeyboardInterrupt, ...
      Py_CLEAR(r);
      status = TRT_ERROR;
    }
  } else if (PyErr_Occurred()) {
    status = TRT_ERROR;
  }
  for (int i = 0; i < b.nlocals; ++i) Py_XDECREF(L[i]);
  Py_DECREF(b.names);
  Py_DECREF(fn);
  Py_DECREF(m);
  if (status == TRT_MISS) {
    Py_XDECREF(r);
    return call_miss(self, args, nargsf, kwnames);
  }
  return r;  // hit: the result; error: NULL with the exception set
}

int function_init_binder(TrtFunction* self) {
  PyObject* code = PyFunction_GetCode(self->fn);
  Binder b{};
  if (binder_from_code(code, &b) < 0) return -1;
  PyObject* old_names = self->b.names;
  self->b = b;
  Py_XDECREF(old_names);
  Py_INCREF(code);
  Py_XSETREF(self->code, code);
  return 0;
}

int function_init(PyObject* self_, PyObject* args, PyObject*) {
  auto* self = reinterpret_cast<TrtFunction*>(self_);
  PyObject *fn, *miss;
  if (!PyArg_ParseTuple(args, "O!O", &PyFunction_Type, &fn, &miss)) return -1;
  Py_INCREF(fn);
  Py_XSETREF(self->fn, fn);
  Py_INCREF(miss);
  Py_XSETREF(self->miss, miss);
  if (function_init_binder(self) < 0) return -1;
  self->vectorcall = function_vectorcall;
  return 0;
}

PyObject* function_new(PyTypeObject* type, PyObject*, PyObject*) {
  auto* self = reinterpret_cast<TrtFunction*>(type->tp_alloc(type, 0));
  return reinterpret_cast<PyObject*>(self);
}

int function_traverse(PyObject* self_, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<TrtFunction*>(self_);
  Py_VISIT(self->dict);
  Py_VISIT(self->fn);
  Py_VISIT(self->miss);
  Py_VISIT(reinterpret_cast<PyObject*>(self->module));
  return 0;
}

int function_clear(PyObject* self_) {
  auto* self = reinterpret_cast<TrtFunction*>(self_);
  Py_CLEAR(self->dict);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->miss);
  Py_CLEAR(self->code);
  Py_CLEAR(self->b.names);
  PyObject* m = reinterpret_cast<PyObject*>(self->module);
  self->module = nullptr;
  Py_XDECREF(m);
  return 0;
}

void function_dealloc(PyObject* self_) {
  auto* self = reinterpret_cast<TrtFunction*>(self_);
  PyObject_GC_UnTrack(self_);
  if (self->weakrefs) PyObject_ClearWeakRefs(self_);
  function_clear(self_);
  Py_TYPE(self_)->tp_free(self_);
}

PyObject* function_install(PyObject* self_, PyObject* arg) {
  auto* self = reinterpret_cast<TrtFunction*>(self_);
  if (arg != Py_None && Py_TYPE(arg) != &TrtModuleType) {
    PyErr_SetString(PyExc_TypeError, "install expects a trident Module or None");
    return nullptr;
  }
  // Refresh the binder in case the function's code object was replaced.
  if (reinterpret_cast<PyFunctionObject*>(self->fn)->func_code != self->code &&
      function_init_binder(self) < 0)
    return nullptr;
  PyObject* old = reinterpret_cast<PyObject*>(self->module);
  if (arg == Py_None) {
    self->module = nullptr;
  } else {
    Py_INCREF(arg);
    self->module = reinterpret_cast<TrtModule*>(arg);
  }
  Py_XDECREF(old);  // a call in flight holds its own reference
  Py_RETURN_NONE;
}

PyObject* function_module(PyObject* self_, void*) {
  auto* self = reinterpret_cast<TrtFunction*>(self_);
  if (!self->module) Py_RETURN_NONE;
  Py_INCREF(self->module);
  return reinterpret_cast<PyObject*>(self->module);
}

PyObject* function_get_fn(PyObject* self_, void*) {
  auto* self = reinterpret_cast<TrtFunction*>(self_);
  Py_INCREF(self->fn);
  return self->fn;
}

PyObject* function_descr_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyMethodDef function_methods[] = {
    {"_install", function_install, METH_O, "install an SCM Module (or None)"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef function_getset[] = {
    {"_module", function_module, nullptr, "the installed SCM Module", nullptr},
    {"_fn", function_get_fn, nullptr, "the wrapped Python function", nullptr},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

}  // namespace

int trident::add_types(PyObject* m) {
  TrtModuleType.tp_name = "trident.Module";
  TrtModuleType.tp_basicsize = sizeof(TrtModule);
  TrtModuleType.tp_flags = Py_TPFLAGS_DEFAULT;
  TrtModuleType.tp_dealloc = module_dealloc;
  TrtModuleType.tp_methods = module_methods;
  TrtModuleType.tp_doc = "A loaded Specialization Cache Module";
  if (PyType_Ready(&TrtModuleType) < 0) return -1;

  TrtFunctionType.tp_name = "trident.Function";
  TrtFunctionType.tp_basicsize = sizeof(TrtFunction);
  TrtFunctionType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC |
                             Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
  TrtFunctionType.tp_new = function_new;
  TrtFunctionType.tp_init = function_init;
  TrtFunctionType.tp_dealloc = function_dealloc;
  TrtFunctionType.tp_traverse = function_traverse;
  TrtFunctionType.tp_clear = function_clear;
  TrtFunctionType.tp_call = PyVectorcall_Call;
  TrtFunctionType.tp_vectorcall_offset = offsetof(TrtFunction, vectorcall);
  TrtFunctionType.tp_dictoffset = offsetof(TrtFunction, dict);
  TrtFunctionType.tp_weaklistoffset = offsetof(TrtFunction, weakrefs);
  TrtFunctionType.tp_descr_get = function_descr_get;
  TrtFunctionType.tp_methods = function_methods;
  TrtFunctionType.tp_getset = function_getset;
  TrtFunctionType.tp_doc = "A function compiled by trident.jit";
  if (PyType_Ready(&TrtFunctionType) < 0) return -1;

  Py_INCREF(&TrtFunctionType);
  if (PyModule_AddObject(m, "Function", reinterpret_cast<PyObject*>(&TrtFunctionType)) < 0) {
    Py_DECREF(&TrtFunctionType);
    return -1;
  }
  Py_INCREF(&TrtModuleType);
  if (PyModule_AddObject(m, "Module", reinterpret_cast<PyObject*>(&TrtModuleType)) < 0) {
    Py_DECREF(&TrtModuleType);
    return -1;
  }
  return 0;
}
