// trident_rt_binder.cpp -- binding a call's arguments to the locals an SCM reads (L[]),
// as CPython's own frame setup binds them, from a binder read off the function's code
// object.

#include <Python.h>

#include "trident_rt_py.h"

namespace trident {

int binder_from_code(PyObject* code, Binder* out) {
  if (!code || !PyCode_Check(code)) {
    PyErr_SetString(PyExc_TypeError, "trident.jit needs a Python function");
    return -1;
  }
  auto* co = reinterpret_cast<PyCodeObject*>(code);
  Binder b{};
  b.argcount = co->co_argcount;
  b.posonly = co->co_posonlyargcount;
  b.kwonly = co->co_kwonlyargcount;
  b.varargs = (co->co_flags & CO_VARARGS) != 0;
  b.varkw = (co->co_flags & CO_VARKEYWORDS) != 0;
  PyObject* varnames = PyCode_GetVarnames(co);
  if (!varnames) return -1;
  const int np = b.argcount + b.kwonly;
  PyObject* names = PyTuple_GetSlice(varnames, 0, np);
  Py_DECREF(varnames);
  if (!names) return -1;
  PyObject* freevars = PyCode_GetFreevars(co);
  if (!freevars) {
    Py_DECREF(names);
    return -1;
  }
  b.nfree = static_cast<int>(PyTuple_GET_SIZE(freevars));
  Py_DECREF(freevars);
  // More locals than L[] holds: the binder stays, but vectorcall never binds natively (the
  // miss handler refuses such a function with a warning and runs it eagerly).
  b.nlocals = np + b.varargs + b.varkw + b.nfree;
  b.names = names;
  *out = b;
  return 0;
}

// Binds like CPython's own frame setup.  0 on success, -1 on anything unusual: the caller
// then takes the Python path, which reproduces eager's TypeError exactly.  Every L[i] it
// fills is a NEW reference (the caller releases nlocals of them, NULL ones included): a
// default, keyword default or closure cell read here may be replaced by Python code that
// runs later in the call (a finalizer during an allocation, a guard's property).  `b` is
// the caller's snapshot of the binder, with its own reference to the names.
int bind(const Binder& b, PyFunctionObject* fo, PyObject* const* args, Py_ssize_t nargs,
         PyObject* kwnames, PyObject** L) {
  const int ac = b.argcount, kw = b.kwonly;
  const int np = ac + kw;
  Py_ssize_t npos = nargs < ac ? nargs : ac;
  for (Py_ssize_t i = 0; i < npos; ++i) {
    Py_INCREF(args[i]);
    L[i] = args[i];
  }
  int idx = np;
  if (b.varargs) {
    PyObject* t = PyTuple_New(nargs > ac ? nargs - ac : 0);
    if (!t) return -1;
    for (Py_ssize_t i = ac; i < nargs; ++i) {
      Py_INCREF(args[i]);
      PyTuple_SET_ITEM(t, i - ac, args[i]);
    }
    L[idx++] = t;
  } else if (nargs > ac) {
    return -1;
  }
  PyObject* kwdict = nullptr;
  if (b.varkw) {
    kwdict = PyDict_New();
    if (!kwdict) return -1;
    L[idx++] = kwdict;
  }
  if (kwnames) {
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nk; ++k) {
      PyObject* key = PyTuple_GET_ITEM(kwnames, k);
      PyObject* val = args[nargs + k];
      int found = -1;
      for (int p = b.posonly; p < np; ++p)
        if (PyTuple_GET_ITEM(b.names, p) == key) { found = p; break; }
      if (found < 0)
        for (int p = b.posonly; p < np; ++p) {
          int eq = PyUnicode_Compare(PyTuple_GET_ITEM(b.names, p), key) == 0;
          if (eq) { found = p; break; }
        }
      if (found >= 0) {
        if (L[found]) return -1;  // multiple values for one argument
        Py_INCREF(val);
        L[found] = val;
      } else if (kwdict) {
        if (PyDict_SetItem(kwdict, key, val) < 0) return -1;
      } else {
        return -1;
      }
    }
  }
  PyObject* defaults = fo->func_defaults;
  Py_ssize_t nd = defaults ? PyTuple_GET_SIZE(defaults) : 0;
  for (int i = 0; i < ac; ++i) {
    if (L[i]) continue;
    Py_ssize_t di = i - (ac - nd);
    if (di < 0) return -1;
    L[i] = Py_NewRef(PyTuple_GET_ITEM(defaults, di));
  }
  for (int i = ac; i < np; ++i) {
    if (L[i]) continue;
    PyObject* kwdefaults = fo->func_kwdefaults;
    if (!kwdefaults) return -1;
    Py_INCREF(kwdefaults);  // a key's __eq__ could replace it
    PyObject* d = PyDict_GetItemWithError(kwdefaults, PyTuple_GET_ITEM(b.names, i));
    Py_XINCREF(d);
    Py_DECREF(kwdefaults);
    if (!d) {
      PyErr_Clear();
      return -1;
    }
    L[i] = d;
  }
  if (b.nfree) {
    PyObject* closure = fo->func_closure;
    if (!closure || PyTuple_GET_SIZE(closure) != b.nfree) return -1;
    for (int i = 0; i < b.nfree; ++i) {
      PyObject* v = PyCell_GET(PyTuple_GET_ITEM(closure, i));
      if (!v) return -1;
      L[idx++] = Py_NewRef(v);
    }
  }
  return 0;
}

}  // namespace trident
