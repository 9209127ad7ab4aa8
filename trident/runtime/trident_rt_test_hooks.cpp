// trident_rt_test_hooks.cpp -- entry points for CPU tests of the launch ABI
// (tests/unit/test_launch_abi.py): launch_pack_for_test and launch_select_for_test pack and
// select a Triton launch exactly as an SCM's launch would, without a GPU.
//
// They are part of the default build, in this file only: the tests call them on the very
// runtime `trident.native.build.runtime_module()` builds and every SCM loads, so what they
// check is the code that launches.  A separate test build would double the runtime's build
// (and its cache entries) and test another binary.  They read only their arguments and
// touch no state an SCM uses.

#include <Python.h>

#include <vector>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include "trident_rt.h"
#include "trident_rt_internal.h"
#include "trident_rt_py.h"

namespace {

// A frame holding a test's values (tensors, floats, ints), in order.
// nullptr with a Python exception set when a value is none of these.
trt_frame* frame_from_list(PyObject* values) {
  trt_frame* f = trident::kApi.frame_acquire(static_cast<int32_t>(PyList_GET_SIZE(values)));
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); ++i) {
    PyObject* v = PyList_GET_ITEM(values, i);
    const auto slot = static_cast<int32_t>(i);
    if (THPVariable_Check(v)) {
      trident::kApi.frame_set_tensor(f, slot, v);
      continue;
    }
    if (PyFloat_Check(v)) {
      const double d = PyFloat_AsDouble(v);
      if (d == -1.0 && PyErr_Occurred()) break;
      trident::kApi.frame_set_double(f, slot, d);
      continue;
    }
    const long long n = PyLong_AsLongLong(v);
    if (n == -1 && PyErr_Occurred()) break;
    trident::kApi.frame_set_int(f, slot, n);
  }
  if (PyErr_Occurred()) {
    trident::kApi.frame_release(f);
    return nullptr;
  }
  return f;
}

// launch_pack_for_test(params, values): pack a Triton launch's parameters
// without a GPU, exactly as launch_call would.  params: [(kind, slot, ival,
// dval, div16, dtype)], values: the frame (tensors, ints, floats).  Returns
// the packed bytes, or None when a precondition fails.
PyObject* py_launch_pack_for_test(PyObject*, PyObject* args) {
  PyObject *params, *values;
  if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &params, &PyList_Type, &values))
    return nullptr;
  HANDLE_TH_ERRORS
  std::vector<trt_launch_param> ps;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(params); ++i) {
    trt_launch_param p;
    long long ival;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(params, i), "iiLdii", &p.kind, &p.slot, &ival, &p.dval,
                          &p.div16, &p.dtype))
      return nullptr;
    p.ival = ival;
    ps.push_back(p);
  }
  trt_launch_spec spec = {"test", "", 0, 4, 1, 0, 0, 0, static_cast<int32_t>(ps.size()),
                          ps.data(), nullptr, 0, nullptr};
  trt_launch* l = trident::launch_new(&spec);
  if (!l) return nullptr;
  trt_frame* f = frame_from_list(values);
  if (!f) {
    trident::launch_free(l);
    return nullptr;
  }
  PyObject* out = trident::launch_pack_for_test(l, f);
  trident::kApi.frame_release(f);
  trident::launch_free(l);
  return out;
  END_HANDLE_TH_ERRORS
}

// launch_select_for_test(keys, resolver, grids, calls): one selecting launch
// (keys: [(slot, kind[, transform])]) run over several calls without a GPU.  calls: a list
// of frames (lists of tensors, ints, floats); grids: [(gx, gy, gz)] rows.
// Returns, per call, what launch_select would do: None when the resolver
// launched, ("precondition",), or (grid_index, packed parameter bytes).
PyObject* py_launch_select_for_test(PyObject*, PyObject* args) {
  PyObject *keys, *resolver, *grids, *calls;
  if (!PyArg_ParseTuple(args, "O!OO!O!", &PyList_Type, &keys, &resolver, &PyList_Type, &grids,
                        &PyList_Type, &calls))
    return nullptr;
  HANDLE_TH_ERRORS
  std::vector<trt_launch_key> ks;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); ++i) {
    trt_launch_key k;
    k.transform = TRT_KT_RAW;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(keys, i), "ii|i", &k.slot, &k.kind, &k.transform))
      return nullptr;
    ks.push_back(k);
  }
  std::vector<int64_t> g;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(grids); ++i) {
    long long x, y, z;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(grids, i), "LLL", &x, &y, &z)) return nullptr;
    g.insert(g.end(), {x, y, z});
  }
  trt_launch_spec spec = {"", "", 0, 1, 1, 0, 0, 0, 0, nullptr, resolver,
                          static_cast<int32_t>(ks.size()), ks.data()};
  trt_launch* l = trident::launch_new(&spec);
  if (!l) return nullptr;
  PyObject* out = PyList_New(0);
  for (Py_ssize_t c = 0; out && c < PyList_GET_SIZE(calls); ++c) {
    PyObject* values = PyList_GET_ITEM(calls, c);
    if (!PyList_Check(values)) {
      PyErr_SetString(PyExc_TypeError, "calls must be lists");
      Py_CLEAR(out);
      break;
    }
    trt_frame* f = frame_from_list(values);
    if (!f) {
      Py_CLEAR(out);
      break;
    }
    PyObject* r = trident::launch_select_for_test(l, f, g.data(),
                                                  static_cast<int32_t>(g.size() / 3));
    trident::kApi.frame_release(f);
    if (!r || PyList_Append(out, r) < 0) {
      Py_XDECREF(r);
      Py_CLEAR(out);
      break;
    }
    Py_DECREF(r);
  }
  trident::launch_free(l);
  return out;
  END_HANDLE_TH_ERRORS
}

PyMethodDef test_hook_methods[] = {
    {"launch_pack_for_test", py_launch_pack_for_test, METH_VARARGS,
     "pack Triton launch parameters without a GPU (tests)"},
    {"launch_select_for_test", py_launch_select_for_test, METH_VARARGS,
     "run a selecting Triton launch over several calls without a GPU (tests)"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int trident::add_test_hooks(PyObject* m) { return PyModule_AddFunctions(m, test_hook_methods); }
