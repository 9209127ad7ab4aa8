// trident_rt_api.cpp -- the api table an SCM calls (trt_api, trident_rt.h): tensor guards,
// the global-state guard, frames of IValues, a version's mode and the errors a guard's read
// raises.  Its operator entries are trident_rt_ops.cpp's, its launch entries
// trident_rt_launch.cpp's.  Also the module functions that name what these guards compare
// (global_state_names, keyset_str, enum_code, dispatch_keys).

#include <Python.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/SavedTensorHooks.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/autograd/python_variable.h>

#include "trident_rt.h"
#include "trident_rt_internal.h"
#include "trident_rt_py.h"

namespace {

// ---------------------------------------------------------------- guards ----

int tensor_match(PyObject* obj, const trt_tensor_spec* s, int64_t* meta) {
  if (Py_TYPE(obj) != s->type) return 0;
  const at::Tensor& t = THPVariable_Unpack(obj);
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->key_set().raw_repr() != s->dispatch_keys) return 0;
  if (static_cast<int32_t>(impl->dtype().toScalarType()) != s->dtype) return 0;
  const c10::Device dev = impl->device();
  if (static_cast<int32_t>(dev.type()) != s->device_type) return 0;
  if (static_cast<int32_t>(dev.index()) != s->device_index) return 0;
  if (static_cast<int32_t>(impl->requires_grad()) != s->requires_grad) return 0;
  const int64_t nd = impl->dim();
  if (nd != s->ndim) return 0;
  const auto sizes = impl->sizes();
  const auto strides = impl->strides();
  for (int64_t i = 0; i < nd; ++i) {
    if (s->sizes[i] != TRT_DYN && s->sizes[i] != sizes[i]) return 0;
    if (s->strides[i] != TRT_DYN && s->strides[i] != strides[i]) return 0;
    meta[i] = sizes[i];
    meta[nd + i] = strides[i];
  }
  meta[2 * nd] = impl->storage_offset();
  return 1;
}

void tensor_meta(PyObject* obj, int64_t* meta, int32_t nd) {
  const at::Tensor& t = THPVariable_Unpack(obj);
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const auto sizes = impl->sizes();
  const auto strides = impl->strides();
  for (int32_t i = 0; i < nd; ++i) {
    meta[i] = sizes[i];
    meta[nd + i] = strides[i];
  }
  meta[2 * nd] = impl->storage_offset();
}

int64_t tensor_prop(PyObject* obj, int32_t kind, int32_t dim, int* ok) {
  if (!obj || !THPVariable_Check(obj)) {
    *ok = 0;
    return 0;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->layout() != c10::kStrided) {
    *ok = 0;
    return 0;
  }
  if (kind == TRT_PROP_OFFSET) return impl->storage_offset();
  if (dim < 0 || dim >= impl->dim()) {
    *ok = 0;
    return 0;
  }
  return kind == TRT_PROP_SIZE ? impl->sizes()[dim] : impl->strides()[dim];
}

#ifdef TRT_HAS_NAMED_TENSORS
const c10::DispatchKeySet kNamedKey(c10::DispatchKey::Named);
#else
const c10::DispatchKeySet kNamedKey;  // no Named key to leave out
#endif

void global_state_snapshot(trt_global_state* g) {
  int64_t* w = g->w;
  for (int i = 0; i < TRT_GLOBAL_STATE_WORDS; ++i) w[i] = 0;
  w[0] = c10::GradMode::is_enabled();
  w[1] = c10::InferenceMode::is_enabled();
  // w[2..5] unused (autocast state is in w[24..43], for every device type
  // Dynamo's GlobalStateGuard checks).
  auto& ctx = at::globalContext();
  w[6] = ctx.deterministicAlgorithms();
  w[7] = ctx.deterministicAlgorithmsWarnOnly();
  w[8] = static_cast<int64_t>(ctx.allowFP16ReductionCuBLAS());
  w[9] = static_cast<int64_t>(ctx.allowBF16ReductionCuBLAS());
  w[10] = at::get_num_threads();
  w[11] = static_cast<int64_t>(c10::get_default_dtype_as_scalartype());
  w[12] = static_cast<int64_t>(at::impl::PythonTorchFunctionTLS::get_disabled_state());
  w[13] = at::impl::PythonTorchFunctionTLS::stack_len();
  const auto& hooks = at::SavedTensorDefaultHooks::get_tls_state();
  w[14] = static_cast<int64_t>(hooks.stack.size());
  w[15] = hooks.disabled_error_message.has_value();
  const auto local = c10::impl::tls_local_dispatch_key_set();
  // Without the Named key (torch <= 2.12): at::NoNamesGuard excludes it, and on torch 2.11's
  // CUDA build linear and matmul run their mm/bmm under it while a version's program calls
  // aten::mm/bmm directly, so a wrapper of those saw two states for the same calls. It
  // changes only how tensors carrying names dispatch, and every tensor a version reads is
  // matched on its own key set (Named where it has names), so both states share versions,
  // as under Dynamo's guards (they apply the thread-local sets to each tensor's keys).
  w[16] = static_cast<int64_t>((local.included_ - kNamedKey).raw_repr());
  w[17] = static_cast<int64_t>((local.excluded_ - kNamedKey).raw_repr());
  w[18] = c10::impl::TorchDispatchModeTLS::stack_len();
  w[20] = at::autocast::is_autocast_cache_enabled();
  w[21] = static_cast<int64_t>(ctx.float32MatmulPrecision());  // covers allow_tf32 (cuBLAS)
  // w[22]: unused (cuDNN TF32 is not part of Dynamo's global state either)
  // Autocast: whether it is on for a device type is the exclusion of that
  // type's autocast key from the thread-local dispatch set (w[17] holds it);
  // its dtype only matters where it is on, so it is read only there.
  int k = 24;
  for (at::DeviceType dt : at::autocast::_AUTOCAST_SUPPORTED_DEVICES) {
    const bool on = !local.excluded_.has(at::autocast::get_autocast_dispatch_key_from_device_type(dt));
    w[k++] = on;
    w[k++] = on ? static_cast<int64_t>(at::autocast::get_autocast_dtype(dt)) : -1;
  }
}


// ---------------------------------------------------------------- frames ----


thread_local std::vector<std::unique_ptr<trt_frame>> free_frames;

trt_frame* frame_acquire(int32_t n) {
  trt_frame* f;
  if (!free_frames.empty()) {
    f = free_frames.back().release();
    free_frames.pop_back();
  } else {
    f = new trt_frame();
  }
  f->slots.resize(static_cast<size_t>(n));
  f->below = -1;
  return f;
}

void frame_release(trt_frame* f) {
  f->slots.clear();  // drops tensor references; keeps capacity
  free_frames.emplace_back(f);
}

void frame_set_tensor(trt_frame* f, int32_t slot, PyObject* t) {
  f->slots[slot] = c10::IValue(THPVariable_Unpack(t));
}
void frame_set_int(trt_frame* f, int32_t slot, int64_t v) { f->slots[slot] = c10::IValue(v); }
void frame_set_double(trt_frame* f, int32_t slot, double v) { f->slots[slot] = c10::IValue(v); }
int64_t frame_get_int(trt_frame* f, int32_t slot) {
  const auto& v = f->slots[slot];
  if (v.isInt()) return v.toInt();
  if (v.isBool()) return v.toBool();
  if (v.isSymInt()) return v.toSymInt().guard_int(__FILE__, __LINE__);
  return 0;
}

int frame_list_item(trt_frame* f, int32_t src, int64_t index, int32_t dst) {
  const auto& v = f->slots[src];
  if (v.isTensorList()) {
    auto l = v.toTensorList();
    if (index < 0 || index >= static_cast<int64_t>(l.size())) goto bad;
    f->slots[dst] = c10::IValue(l.get(index));
    return TRT_OK;
  }
  if (v.isList()) {
    auto l = v.toList();
    if (index < 0 || index >= static_cast<int64_t>(l.size())) goto bad;
    f->slots[dst] = l.get(index);
    return TRT_OK;
  }
  if (v.isTuple()) {
    const auto& e = v.toTupleRef().elements();
    if (index < 0 || index >= static_cast<int64_t>(e.size())) goto bad;
    f->slots[dst] = e[index];
    return TRT_OK;
  }
bad:
  PyErr_Format(PyExc_IndexError, "trident: element %lld of slot %d is out of range",
               static_cast<long long>(index), src);
  return TRT_FAIL;
}

PyObject* ivalue_to_py(const c10::IValue& v) {
  if (v.isTensor()) return THPVariable_Wrap(v.toTensor());
  if (v.isInt()) return PyLong_FromLongLong(v.toInt());
  if (v.isDouble()) return PyFloat_FromDouble(v.toDouble());
  if (v.isBool()) return PyBool_FromLong(v.toBool());
  if (v.isNone()) Py_RETURN_NONE;
  if (v.isList() || v.isTuple()) {
    std::vector<c10::IValue> items;
    if (v.isList()) {
      for (const auto& e : v.toListRef()) items.push_back(e);
    } else {
      for (const auto& e : v.toTupleRef().elements()) items.push_back(e);
    }
    PyObject* out = v.isList() ? PyList_New(items.size()) : PyTuple_New(items.size());
    if (!out) return nullptr;
    for (size_t i = 0; i < items.size(); ++i) {
      PyObject* e = ivalue_to_py(items[i]);
      if (!e) {
        Py_DECREF(out);
        return nullptr;
      }
      if (v.isList())
        PyList_SET_ITEM(out, i, e);
      else
        PyTuple_SET_ITEM(out, i, e);
    }
    return out;
  }
  PyErr_Format(PyExc_TypeError, "trident: cannot return a value of type %s to Python",
               v.tagKind().c_str());
  return nullptr;
}

PyObject* frame_to_py(trt_frame* f, int32_t slot) {
  HANDLE_TH_ERRORS
  return ivalue_to_py(f->slots[slot]);
  END_HANDLE_TH_ERRORS
}

}  // namespace

namespace trident {
PyObject* slot_to_py(trt_frame* f, int32_t slot) { return frame_to_py(f, slot); }
}  // namespace trident

namespace {

// A whole version's mode (TRT_MODE_*): the guard objects eager's decorator would hold.
struct ModeToken {
  std::optional<c10::InferenceMode> inference;
  std::optional<at::AutoGradMode> grad;
};

void* mode_enter(int32_t mode) {
  HANDLE_TH_ERRORS
  auto token = std::make_unique<ModeToken>();
  switch (mode) {
    case TRT_MODE_NO_GRAD: token->grad.emplace(false); break;
    case TRT_MODE_ENABLE_GRAD: token->grad.emplace(true); break;
    case TRT_MODE_INFERENCE: token->inference.emplace(true); break;
    default:
      PyErr_Format(PyExc_ValueError, "trident: unknown version mode %d", static_cast<int>(mode));
      return nullptr;
  }
  return token.release();
  END_HANDLE_TH_ERRORS_RET(nullptr)
}

void mode_exit(void* token) { delete static_cast<ModeToken*>(token); }

// A KeyboardInterrupt, SystemExit or MemoryError a guard's read raised, kept until the
// call into the SCM returns (function_vectorcall raises it then).  The first one wins.
struct PendingError {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* tb = nullptr;
};
thread_local PendingError pending_error;

void guard_error() {
  if (!PyErr_Occurred()) return;
  if (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
    PyErr_Clear();
    return;
  }
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PendingError& p = pending_error;
  if (p.type) {
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    return;
  }
  p.type = t;
  p.value = v;
  p.tb = tb;
}

}  // namespace

namespace trident {

// Raises the pending guard error, if any: true when it did (the call's result is dropped).
bool raise_pending_error() {
  PendingError& p = pending_error;
  if (!p.type) return false;
  PyErr_Restore(p.type, p.value, p.tb);
  p = PendingError{};
  return true;
}

extern const trt_api kApi = {
    TRT_ABI_VERSION, tensor_match,   tensor_meta,    tensor_prop, global_state_snapshot, frame_acquire,
    frame_release,   frame_set_tensor, frame_set_int, frame_set_double,  frame_get_int,
    frame_list_item, frame_to_py,    op_new,         op_free,            op_call,
    launch_new, launch_call, launch_free, launch_select,
    mode_enter,      mode_exit,  guard_error};

// -------------------------------------------------------- module functions ----

PyObject* py_global_state(PyObject*, PyObject*) {
  trt_global_state g;
  global_state_snapshot(&g);
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(&g), sizeof(g));
}

// The name of each word of the snapshot (global_state_snapshot), "" where unused: what a
// miss reason names when a version's global-state guard failed.
PyObject* py_global_state_names(PyObject*, PyObject*) {
  std::vector<std::string> n(TRT_GLOBAL_STATE_WORDS);
  n[0] = "grad mode";
  n[1] = "inference mode";
  n[6] = "deterministic algorithms";
  n[7] = "deterministic algorithms warn only";
  n[8] = "cuBLAS fp16 reduced-precision reduction";
  n[9] = "cuBLAS bf16 reduced-precision reduction";
  n[10] = "intra-op threads";
  n[11] = "default dtype (ScalarType)";
  n[12] = "torch function disabled state";
  n[13] = "torch function mode stack length";
  n[14] = "saved tensor hooks stack length";
  n[15] = "saved tensor hooks disabled";
  n[16] = "included dispatch keys (thread-local)";
  n[17] = "excluded dispatch keys (thread-local)";
  n[18] = "torch dispatch mode stack length";
  n[20] = "autocast cache enabled";
  n[21] = "float32 matmul precision";
  int k = 24;
  for (at::DeviceType dt : at::autocast::_AUTOCAST_SUPPORTED_DEVICES) {
    const std::string d = c10::DeviceTypeName(dt, /*lower_case=*/true);
    n[k++] = "autocast on " + d;
    n[k++] = "autocast dtype on " + d + " (ScalarType)";
  }
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(n.size()));
  if (out == nullptr) return nullptr;
  for (size_t i = 0; i < n.size(); ++i) {
    PyObject* s = PyUnicode_FromStringAndSize(n[i].data(), static_cast<Py_ssize_t>(n[i].size()));
    if (s == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), s);
  }
  return out;
}

// The keys of a DispatchKeySet given by its raw repr, as c10 prints them.
PyObject* py_keyset_str(PyObject*, PyObject* raw) {
  const unsigned long long r = PyLong_AsUnsignedLongLong(raw);
  if (r == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
  const std::string s = c10::toString(c10::DispatchKeySet(c10::DispatchKeySet::RAW, r));
  return PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

PyObject* py_dispatch_keys(PyObject*, PyObject* t) {
  if (!THPVariable_Check(t)) {
    PyErr_SetString(PyExc_TypeError, "expected a tensor");
    return nullptr;
  }
  return PyLong_FromUnsignedLongLong(
      THPVariable_Unpack(t).unsafeGetTensorImpl()->key_set().raw_repr());
}

// The C++ enum value behind a torch.dtype / layout / memory_format, or the
// device type of a torch.device: what the IR stores and the runtime compares.
PyObject* py_enum_code(PyObject*, PyObject* o) {
  if (THPDtype_Check(o))
    return PyLong_FromLong(static_cast<long>(reinterpret_cast<THPDtype*>(o)->scalar_type));
  if (THPLayout_Check(o))
    return PyLong_FromLong(static_cast<long>(reinterpret_cast<THPLayout*>(o)->layout));
  if (THPMemoryFormat_Check(o))
    return PyLong_FromLong(
        static_cast<long>(reinterpret_cast<THPMemoryFormat*>(o)->memory_format));
  if (THPDevice_Check(o))
    return PyLong_FromLong(static_cast<long>(reinterpret_cast<THPDevice*>(o)->device.type()));
  PyErr_SetString(PyExc_TypeError, "expected a torch.dtype, layout, memory_format or device");
  return nullptr;
}

PyObject* py_api_address(PyObject*, PyObject*) {
  return PyLong_FromVoidPtr(const_cast<trt_api*>(&kApi));
}

}  // namespace trident
