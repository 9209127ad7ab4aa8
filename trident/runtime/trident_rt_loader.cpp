// trident_rt_loader.cpp -- loading an SCM shared object into a `trident.Module`
// (dlopen, its entry points, trident_scm_init with the api table) and unloading it when
// the Module's last reference goes.

#include <Python.h>
#include <dlfcn.h>

#include "trident_rt.h"
#include "trident_rt_py.h"

namespace trident {

PyObject* load_scm(PyObject*, PyObject* args) {
  const char* path;
  PyObject* consts;
  if (!PyArg_ParseTuple(args, "sO!", &path, &PyTuple_Type, &consts)) return nullptr;
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    PyErr_Format(PyExc_ImportError, "trident: cannot load SCM %s: %s", path, dlerror());
    return nullptr;
  }
  auto init = reinterpret_cast<trt_scm_init_fn>(dlsym(h, "trident_scm_init"));
  auto call = reinterpret_cast<trt_scm_call_fn>(dlsym(h, "trident_scm_call"));
  auto stats = reinterpret_cast<trt_scm_stats_fn>(dlsym(h, "trident_scm_stats"));
  auto prof = reinterpret_cast<trt_scm_profile_fn>(dlsym(h, "trident_scm_profile"));
  auto fr = reinterpret_cast<trt_scm_free_fn>(dlsym(h, "trident_scm_free"));
  if (!init || !call || !stats || !prof || !fr) {
    PyErr_Format(PyExc_ImportError, "trident: %s lacks the SCM entry points", path);
    dlclose(h);
    return nullptr;
  }
  void* state = nullptr;
  if (init(&kApi, consts, &state) != 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "trident: SCM init failed");
    dlclose(h);
    return nullptr;
  }
  auto* m = PyObject_New(TrtModule, &TrtModuleType);
  if (!m) {
    fr(state);
    dlclose(h);
    return nullptr;
  }
  m->handle = h;
  m->state = state;
  m->call = call;
  m->stats = stats;
  m->profile = prof;
  m->free_fn = fr;
  Py_INCREF(consts);
  m->consts = consts;
  m->path = PyUnicode_FromString(path);
  if (!m->path) {
    Py_DECREF(m);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(m);
}

void module_dealloc(PyObject* self) {
  auto* m = reinterpret_cast<TrtModule*>(self);
  if (m->free_fn && m->state) m->free_fn(m->state);
  Py_XDECREF(m->consts);
  Py_XDECREF(m->path);
  // Unmapped once the last reference is gone: every call into the SCM holds one for its
  // whole duration (function_vectorcall), nothing the SCM made outlives its state (ops,
  // launches and specs are the runtime's copies, freed above), and it registers no
  // callback.  Without this, a function recompiled N times keeps N shared objects mapped.
  if (m->handle) dlclose(m->handle);
  Py_TYPE(self)->tp_free(self);
}

}  // namespace trident
