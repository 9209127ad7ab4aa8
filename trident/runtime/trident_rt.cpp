// trident_rt.cpp -- Trident's native runtime, built once per torch version.
//
// It provides:
//   * the api table of trident_rt.h (tensor guards, the global-state guard,
//     frames of IValues, ATen operator calls through the boxed dispatcher);
//   * `Module`: a loaded SCM shared object (dlopen + trident_scm_init);
//   * `Function`: the object users call.  Its vectorcall binds arguments
//     natively and enters the installed SCM; only a miss (or arguments it
//     cannot bind) goes back to the Python miss handler.
//
// Errors raised by operators are translated to the Python exception eager
// PyTorch raises (torch's HANDLE_TH_ERRORS), never thrown across the C ABI.

#include <Python.h>
#include <dlfcn.h>

#include <memory>
#include <optional>

#include <ATen/EmptyTensor.h>
#include <ATen/Operators.h>
#if __has_include(<ATen/core/NamedTensor.h>)  // named tensors: gone in torch 2.13
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/NamedTensor.h>
#define TRT_HAS_NAMED_TENSORS 1
#endif
#include <ATen/record_function.h>
#include <ATen/Parallel.h>
#include <ATen/ScalarOps.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/SavedTensorHooks.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/autograd/forward_grad.h>
#include <torch/csrc/autograd/python_variable.h>

#include <memory>
#include <string>
#include <deque>
#include <vector>

#include "trident_rt.h"
#include "trident_rt_internal.h"

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
  if (kind == 2) return impl->storage_offset();
  if (dim < 0 || dim >= impl->dim()) {
    *ok = 0;
    return 0;
  }
  return kind == 0 ? impl->sizes()[dim] : impl->strides()[dim];
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

// ------------------------------------------------------------- operators ----

enum class ElemKind { Int, Double, Bool, Tensor, OptTensor, Generic };

struct ArgEnc {
  int32_t kind;
  int32_t slot = -1;
  bool tensor_param = false;  // the schema wants a Tensor: wrap Python scalars
  c10::IValue constant;
  ElemKind elem = ElemKind::Generic;
  std::vector<int32_t> items;
  std::vector<int64_t> ivals;
};

}  // namespace

struct trt_op;
// A typed fast path: returns false when the arguments are not what it
// expects (then the boxed call runs).  Chosen at op_new by schema name.
using FastFn = bool (*)(const trt_op*, trt_frame*);

struct trt_op {
  c10::OperatorHandle handle;
  std::vector<ArgEnc> args;
  std::vector<int32_t> outs;
  std::string name;
  FastFn fast = nullptr;
  bool fast_nogil = false;  // the fast path computes: it runs without the GIL
  bool below = false;  // TRT_OP_BELOW_AUTOGRAD
  explicit trt_op(c10::OperatorHandle h) : handle(std::move(h)) {}
};

namespace {

at::Tensor wrap_scalar(const c10::IValue& v) {
  at::Tensor t = v.isDouble() ? at::scalar_to_tensor(at::Scalar(v.toDouble()))
                 : v.isBool() ? at::scalar_to_tensor(at::Scalar(v.toBool()))
                              : at::scalar_to_tensor(at::Scalar(v.toInt()));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

ElemKind list_elem_kind(const c10::TypePtr& ty) {
  c10::TypePtr t = ty;
  if (auto o = t->cast<c10::OptionalType>()) t = o->getElementType();
  auto lt = t->cast<c10::ListType>();
  if (!lt) return ElemKind::Generic;
  c10::TypePtr e = lt->getElementType();
  if (e->kind() == c10::TypeKind::IntType || e->kind() == c10::TypeKind::SymIntType)
    return ElemKind::Int;
  if (e->kind() == c10::TypeKind::FloatType) return ElemKind::Double;
  if (e->kind() == c10::TypeKind::BoolType) return ElemKind::Bool;
  if (e->kind() == c10::TypeKind::TensorType) return ElemKind::Tensor;
  if (auto oe = e->cast<c10::OptionalType>())
    if (oe->getElementType()->kind() == c10::TypeKind::TensorType) return ElemKind::OptTensor;
  return ElemKind::Generic;
}

bool boxed_only();
struct FastEntry {
  const char* name;
  const char* overload;
  FastFn fn;
  bool metadata = false;  // a view, a size or an allocation: runs with the GIL held
};
const FastEntry* find_fast(const c10::FunctionSchema& schema);

trt_op* op_new(const char* name, const char* overload, int32_t nargs, const trt_arg* args,
               int32_t nouts, const int32_t* outs, int32_t flags) {
  HANDLE_TH_ERRORS
  auto h = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!h.has_value()) {
    PyErr_Format(PyExc_RuntimeError, "trident: operator %s.%s is not registered", name,
                 overload);
    return nullptr;
  }
  const auto& schema = h->schema();
  if (static_cast<size_t>(nargs) != schema.arguments().size()) {
    PyErr_Format(PyExc_RuntimeError, "trident: %s.%s takes %d arguments, SCM passes %d", name,
                 overload, static_cast<int>(schema.arguments().size()), nargs);
    return nullptr;
  }
  // Constants made here (wrapped scalars) outlive this call: never let them
  // be inference tensors because the SCM happened to be built under
  // torch.inference_mode().
  c10::InferenceMode normal_mode(false);
  auto op = std::make_unique<trt_op>(*h);
  // A Python number where the schema wants a Tensor (`mul.Tensor(x, 2.0)`
  // after tracing) becomes a wrapped-number tensor, as eager's binding does.
  op->name = std::string(name) + "." + overload;
  op->below = (flags & TRT_OP_BELOW_AUTOGRAD) != 0;
  for (int32_t k = 0; k < nargs; ++k) {
    const trt_arg& a = args[k];
    ArgEnc e;
    e.kind = a.kind;
    switch (a.kind) {
      case TRT_ARG_SLOT: e.slot = static_cast<int32_t>(a.i); break;
      case TRT_ARG_NONE: e.constant = c10::IValue(); break;
      case TRT_ARG_INT: e.constant = c10::IValue(a.i); break;
      case TRT_ARG_DOUBLE: e.constant = c10::IValue(a.d); break;
      case TRT_ARG_BOOL: e.constant = c10::IValue(a.i != 0); break;
      case TRT_ARG_STR: e.constant = c10::IValue(std::string(a.s)); break;
      case TRT_ARG_DEVICE: e.constant = c10::IValue(c10::Device(std::string(a.s))); break;
      case TRT_ARG_LIST:
        e.elem = list_elem_kind(schema.arguments()[k].type());
        if (e.elem == ElemKind::Generic) {
          PyErr_Format(PyExc_RuntimeError, "trident: unsupported list argument %d of %s", k,
                       op->name.c_str());
          return nullptr;
        }
        e.items.assign(a.items, a.items + a.n);
        e.ivals.assign(a.ivals, a.ivals + a.n);
        break;
      default:
        PyErr_Format(PyExc_RuntimeError, "trident: bad argument kind %d", a.kind);
        return nullptr;
    }
    const auto& ty = schema.arguments()[k].type();
    e.tensor_param = ty->kind() == c10::TypeKind::TensorType;
    if (e.tensor_param && (e.constant.isInt() || e.constant.isDouble() || e.constant.isBool()))
      e.constant = c10::IValue(wrap_scalar(e.constant));
    op->args.push_back(std::move(e));
  }
  op->outs.assign(outs, outs + nouts);
  if (nouts == 1 && !boxed_only()) {
    if (const FastEntry* e = find_fast(schema)) {
      op->fast = e->fn;
      op->fast_nogil = !e->metadata;
    }
  }
  return op.release();
  END_HANDLE_TH_ERRORS_RET(nullptr)
}

void op_free(trt_op* op) { delete op; }

c10::IValue build_list(const ArgEnc& e, trt_frame* f) {
  const size_t n = e.items.size();
  switch (e.elem) {
    case ElemKind::Int: {
      c10::List<int64_t> l;
      l.reserve(n);
      for (size_t i = 0; i < n; ++i)
        l.push_back(e.items[i] >= 0 ? f->slots[e.items[i]].toInt() : e.ivals[i]);
      return c10::IValue(std::move(l));
    }
    case ElemKind::Double: {
      c10::List<double> l;
      for (size_t i = 0; i < n; ++i)
        l.push_back(e.items[i] >= 0 ? f->slots[e.items[i]].toDouble()
                                    : static_cast<double>(e.ivals[i]));
      return c10::IValue(std::move(l));
    }
    case ElemKind::Bool: {
      c10::List<bool> l;
      for (size_t i = 0; i < n; ++i)
        l.push_back(e.items[i] >= 0 ? f->slots[e.items[i]].toBool() : e.ivals[i] != 0);
      return c10::IValue(std::move(l));
    }
    case ElemKind::Tensor: {
      c10::List<at::Tensor> l;
      l.reserve(n);
      for (size_t i = 0; i < n; ++i) l.push_back(f->slots[e.items[i]].toTensor());
      return c10::IValue(std::move(l));
    }
    case ElemKind::OptTensor: {
      c10::List<std::optional<at::Tensor>> l;
      for (size_t i = 0; i < n; ++i) {
        if (e.items[i] >= 0)
          l.push_back(f->slots[e.items[i]].toTensor());
        else
          l.push_back(std::nullopt);
      }
      return c10::IValue(std::move(l));
    }
    default: break;
  }
  return c10::IValue();
}

// One boxed-call stack per nesting level, reused across calls.  A boxed kernel can
// re-enter Trident (a Python kernel registered with torch.library that is itself a
// trident.jit function, called from another SCM's program), so a level's stack must
// stay untouched until its call returns; a deque keeps references to the outer
// levels' stacks valid when an inner level adds one.
thread_local std::deque<std::vector<c10::IValue>> call_stacks;
thread_local size_t call_depth = 0;

struct CallLevel {
  std::vector<c10::IValue>& stack;
  CallLevel() : stack(level()) { ++call_depth; }
  ~CallLevel() {
    stack.clear();
    --call_depth;
  }
  static std::vector<c10::IValue>& level() {
    while (call_stacks.size() <= call_depth) call_stacks.emplace_back();
    return call_stacks[call_depth];
  }
};

// ---- typed fast paths for hot operators (skip boxing; see benchmarks/) ----

constexpr size_t kMaxDims = 16;  // the most dimensions a typed fast path writes out

inline const c10::IValue* arg_value(const trt_op* op, trt_frame* f, size_t k) {
  const ArgEnc& e = op->args[k];
  if (e.kind == TRT_ARG_SLOT) return &f->slots[e.slot];
  if (e.kind == TRT_ARG_LIST) return nullptr;
  return &e.constant;
}

template <at::Tensor (*Fn)(const at::Tensor&)>
bool fast_unary(const trt_op* op, trt_frame* f) {
  const c10::IValue* a = arg_value(op, f, 0);
  if (!a || !a->isTensor()) return false;
  f->slots[op->outs[0]] = c10::IValue(Fn(a->toTensor()));
  return true;
}

template <at::Tensor (*Fn)(const at::Tensor&, const at::Tensor&)>
bool fast_binary(const trt_op* op, trt_frame* f) {
  const c10::IValue* a = arg_value(op, f, 0);
  const c10::IValue* b = arg_value(op, f, 1);
  if (!a || !b || !a->isTensor() || !b->isTensor()) return false;
  f->slots[op->outs[0]] = c10::IValue(Fn(a->toTensor(), b->toTensor()));
  return true;
}

template <at::Tensor (*Fn)(const at::Tensor&, const at::Tensor&, const c10::Scalar&)>
bool fast_binary_alpha(const trt_op* op, trt_frame* f) {
  const c10::IValue* a = arg_value(op, f, 0);
  const c10::IValue* b = arg_value(op, f, 1);
  const c10::IValue* c = arg_value(op, f, 2);
  if (!a || !b || !c || !a->isTensor() || !b->isTensor() || !(c->isInt() || c->isDouble()))
    return false;
  f->slots[op->outs[0]] = c10::IValue(Fn(a->toTensor(), b->toTensor(), c->toScalar()));
  return true;
}

// ---- allocation without the dispatcher round trip ----
//
// What empty_like / empty end in for a plain strided CPU or CUDA tensor
// (at::detail::empty_cpu / empty_cuda), called directly: one allocator call
// instead of two dispatcher round trips (empty_like -> empty_strided ->
// backend) and TensorOptions processing.  Taken only when nothing could
// observe or change the dispatcher's path: no torch dispatch mode, no extra
// TLS-included key (functionalization, functorch), no profiler or
// record_function callback, deterministic uninitialized-memory fill off, and
// (for empty_like) an input with exactly contiguous strides and no key
// beyond its backend's autograd/autocast keys.  Anything else: the
// dispatcher, as before.

bool plain_alloc_ok() {
  if (c10::impl::TorchDispatchModeTLS::stack_len() > 0) return false;
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  if (!(tls.included_ - c10::default_included_set).empty()) return false;
  if (at::hasCallbacks()) return false;
  const auto& ctx = at::globalContext();
  if (ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory()) return false;
  return true;
}

bool plain_alloc(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::Device device,
                 at::Tensor* out) {
  for (int64_t s : sizes)
    if (s < 0) return false;  // the dispatcher raises eager's error
  if (device.is_cpu()) {
    *out = at::Tensor(at::detail::empty_cpu(sizes, dtype, /*pin_memory=*/false, std::nullopt));
    return true;
  }
  if (device.is_cuda()) return trident::empty_cuda_plain(sizes, dtype, device.index(), out);
  return false;
}

bool plain_like(const at::Tensor& t, c10::ScalarType dtype, at::Tensor* out) {
  if (!t.defined() || t.layout() != c10::kStrided || t.is_quantized()) return false;
#ifdef TRT_HAS_NAMED_TENSORS
  if (at::impl::has_names(t.unsafeGetTensorImpl())) return false;
#endif
  const c10::Device dev = t.device();
  if (!dev.is_cpu() && !dev.is_cuda()) return false;
  const c10::BackendComponent bc = dev.is_cpu() ? c10::BackendComponent::CPUBit
                                                : c10::BackendComponent::CUDABit;
  const c10::DispatchKeySet allowed =
      c10::DispatchKeySet(dev.is_cpu() ? c10::DispatchKey::CPU : c10::DispatchKey::CUDA) |
      c10::getAutogradRelatedKeySetFromBackend(bc) | c10::getAutocastRelatedKeySetFromBackend(bc);
  for (c10::DispatchKey k : t.key_set())  // (operator- keeps backend bits: test each key)
    if (!allowed.has(k)) return false;    // conj/neg/zero, Python, wrappers...
  const c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
  int64_t expect = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (strides[d] != expect) return false;  // empty_like keeps strides, size-1 dims too
    expect *= std::max<int64_t>(sizes[d], 1);
  }
  if (!plain_alloc_ok()) return false;
  return plain_alloc(sizes, dtype, dev, out);
}

// empty_like(self, dtype=None|constant, layout=None|strided, device=None, pin_memory=None|False,
// memory_format=None|preserve|contiguous): the allocation every Triton host function starts
// with (FlagGems' pointwise wrappers pass the output dtype).  For an input with exactly
// contiguous strides, preserve and contiguous give the same strides.
bool fast_empty_like(const trt_op* op, trt_frame* f) {
  const c10::IValue* a = arg_value(op, f, 0);
  if (!a || !a->isTensor() || op->args.size() != 6) return false;
  const c10::IValue* dtype = arg_value(op, f, 1);
  const c10::IValue* layout = arg_value(op, f, 2);
  const c10::IValue* device = arg_value(op, f, 3);
  const c10::IValue* pin = arg_value(op, f, 4);
  const c10::IValue* mf = arg_value(op, f, 5);
  if (!dtype || !(dtype->isNone() ||
                  (dtype->isInt() && dtype->toInt() >= 0 &&
                   dtype->toInt() < static_cast<int64_t>(c10::ScalarType::NumOptions))))
    return false;
  if (!layout || !(layout->isNone() ||
                   (layout->isInt() && layout->toInt() == static_cast<int64_t>(c10::kStrided))))
    return false;
  if (!device || !device->isNone()) return false;
  if (!pin || !(pin->isNone() || (pin->isBool() && !pin->toBool()))) return false;
  if (!mf || !(mf->isNone() ||
               (mf->isInt() &&
                (mf->toInt() == static_cast<int64_t>(c10::MemoryFormat::Preserve) ||
                 mf->toInt() == static_cast<int64_t>(c10::MemoryFormat::Contiguous)))))
    return false;
  const at::Tensor& t = a->toTensor();
  at::Tensor out;
  if (plain_like(t, dtype->isNone() ? t.scalar_type() : static_cast<c10::ScalarType>(dtype->toInt()),
                 &out)) {
    f->slots[op->outs[0]] = c10::IValue(std::move(out));
    return true;
  }
  std::optional<c10::ScalarType> dt;
  if (dtype->isInt()) dt = static_cast<c10::ScalarType>(dtype->toInt());
  std::optional<c10::Layout> lay;
  if (layout->isInt()) lay = c10::kStrided;
  std::optional<bool> pn;
  if (pin->isBool()) pn = false;
  std::optional<c10::MemoryFormat> mfo;
  if (mf->isInt()) mfo = static_cast<c10::MemoryFormat>(mf->toInt());
  f->slots[op->outs[0]] =
      c10::IValue(at::_ops::empty_like::call(t, dt, lay, std::nullopt, pn, mfo));
  return true;
}

// sym_numel(self) / numel(self): the element count as an int, without boxing.
bool fast_numel(const trt_op* op, trt_frame* f) {
  const c10::IValue* a = arg_value(op, f, 0);
  if (!a || !a->isTensor() || op->args.size() != 1) return false;
  const at::Tensor& t = a->toTensor();
  if (!t.defined() || t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return false;
  f->slots[op->outs[0]] = c10::IValue(t.numel());
  return true;
}

// empty.memory_format(size, dtype, layout=None|strided, device, pin_memory=None|False,
// memory_format=None|contiguous) with a constant dtype and device: FlagGems'
// `torch.empty((M, N), device=..., dtype=...)`.  Otherwise the boxed call.
bool fast_empty(const trt_op* op, trt_frame* f) {
  if (op->args.size() != 6) return false;
  const ArgEnc& size = op->args[0];
  if (size.kind != TRT_ARG_LIST || size.elem != ElemKind::Int) return false;
  const c10::IValue* dtype = arg_value(op, f, 1);
  const c10::IValue* layout = arg_value(op, f, 2);
  const c10::IValue* device = arg_value(op, f, 3);
  const c10::IValue* pin = arg_value(op, f, 4);
  const c10::IValue* mf = arg_value(op, f, 5);
  if (!dtype || !dtype->isInt() || !device || !device->isDevice()) return false;
  if (!layout || !(layout->isNone() ||
                   (layout->isInt() && layout->toInt() == static_cast<int64_t>(c10::kStrided))))
    return false;
  if (!pin || !(pin->isNone() || (pin->isBool() && !pin->toBool()))) return false;
  if (!mf || !(mf->isNone() ||
               (mf->isInt() &&
                mf->toInt() == static_cast<int64_t>(c10::MemoryFormat::Contiguous))))
    return false;
  const size_t n = size.items.size();
  if (n > kMaxDims) return false;
  int64_t dims[kMaxDims];
  for (size_t i = 0; i < n; ++i)
    dims[i] = size.items[i] >= 0 ? f->slots[size.items[i]].toInt() : size.ivals[i];
  if (!plain_alloc_ok()) return false;
  at::Tensor out;
  if (!plain_alloc(c10::IntArrayRef(dims, n), static_cast<c10::ScalarType>(dtype->toInt()),
                   device->toDevice(), &out))
    return false;
  f->slots[op->outs[0]] = c10::IValue(std::move(out));
  return true;
}

// ---- views, casts and small reductions: the host code of a model's layers ----
//
// Typed calls with the same arguments the boxed call would unbox to.  Each
// returns false (the boxed call runs, and raises eager's error where there is
// one) for any argument it does not recognise: a symbolic value, a list held
// in a slot, an out-of-range enum.

inline bool int_arg(const trt_op* op, trt_frame* f, size_t k, int64_t* out) {
  const c10::IValue* v = arg_value(op, f, k);
  if (!v || !v->isInt()) return false;
  *out = v->toInt();
  return true;
}

inline bool bool_arg(const trt_op* op, trt_frame* f, size_t k, bool* out) {
  const c10::IValue* v = arg_value(op, f, k);
  if (!v || !v->isBool()) return false;
  *out = v->toBool();
  return true;
}

inline const at::Tensor* tensor_arg(const trt_op* op, trt_frame* f, size_t k) {
  const c10::IValue* v = arg_value(op, f, k);
  return v && v->isTensor() ? &v->toTensor() : nullptr;
}

// An int[] / SymInt[] argument written out item by item (TRT_ARG_LIST).
inline bool int_list_arg(const trt_op* op, trt_frame* f, size_t k, int64_t* buf, size_t* n) {
  const ArgEnc& e = op->args[k];
  if (e.kind != TRT_ARG_LIST || e.elem != ElemKind::Int || e.items.size() > kMaxDims)
    return false;
  *n = e.items.size();
  for (size_t i = 0; i < *n; ++i) {
    if (e.items[i] >= 0) {
      const c10::IValue& v = f->slots[e.items[i]];
      if (!v.isInt()) return false;
      buf[i] = v.toInt();
    } else {
      buf[i] = e.ivals[i];
    }
  }
  return true;
}

// An optional enum argument (ScalarType, Layout, MemoryFormat): None or an int below `limit`.
inline bool opt_enum_arg(const trt_op* op, trt_frame* f, size_t k, int64_t limit, bool* has,
                         int64_t* out) {
  const c10::IValue* v = arg_value(op, f, k);
  if (!v) return false;
  if (v->isNone()) {
    *has = false;
    return true;
  }
  if (!v->isInt() || v->toInt() < 0 || v->toInt() >= limit) return false;
  *has = true;
  *out = v->toInt();
  return true;
}

inline bool opt_dtype_arg(const trt_op* op, trt_frame* f, size_t k,
                          std::optional<c10::ScalarType>* out) {
  bool has = false;
  int64_t v = 0;
  if (!opt_enum_arg(op, f, k, static_cast<int64_t>(c10::ScalarType::NumOptions), &has, &v))
    return false;
  *out = has ? std::optional<c10::ScalarType>(static_cast<c10::ScalarType>(v)) : std::nullopt;
  return true;
}

inline void set_out(const trt_op* op, trt_frame* f, at::Tensor t) {
  f->slots[op->outs[0]] = c10::IValue(std::move(t));
}

// view(self, SymInt[] size), _unsafe_view(self, SymInt[] size)
template <at::Tensor (*Fn)(const at::Tensor&, c10::SymIntArrayRef)>
bool fast_sized(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  int64_t dims[kMaxDims];
  size_t n = 0;
  if (!a || op->args.size() != 2 || !int_list_arg(op, f, 1, dims, &n)) return false;
  set_out(op, f, Fn(*a, c10::fromIntArrayRefSlow(c10::IntArrayRef(dims, n))));
  return true;
}

// expand(self, SymInt[] size, *, bool implicit=False)
bool fast_expand(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  int64_t dims[kMaxDims];
  size_t n = 0;
  bool implicit = false;
  if (!a || op->args.size() != 3 || !int_list_arg(op, f, 1, dims, &n) ||
      !bool_arg(op, f, 2, &implicit))
    return false;
  set_out(op, f,
          at::_ops::expand::call(*a, c10::fromIntArrayRefSlow(c10::IntArrayRef(dims, n)),
                                 implicit));
  return true;
}

// permute(self, int[] dims)
bool fast_permute(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  int64_t dims[kMaxDims];
  size_t n = 0;
  if (!a || op->args.size() != 2 || !int_list_arg(op, f, 1, dims, &n)) return false;
  set_out(op, f, at::_ops::permute::call(*a, c10::IntArrayRef(dims, n)));
  return true;
}

// unsqueeze(self, int dim), squeeze.dim(self, int dim)
template <at::Tensor (*Fn)(const at::Tensor&, int64_t)>
bool fast_tensor_int(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  int64_t d = 0;
  if (!a || op->args.size() != 2 || !int_arg(op, f, 1, &d)) return false;
  set_out(op, f, Fn(*a, d));
  return true;
}

// transpose.int(self, int dim0, int dim1)
bool fast_transpose(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  int64_t d0 = 0, d1 = 0;
  if (!a || op->args.size() != 3 || !int_arg(op, f, 1, &d0) || !int_arg(op, f, 2, &d1))
    return false;
  set_out(op, f, at::_ops::transpose_int::call(*a, d0, d1));
  return true;
}

// select.int(self, int dim, SymInt index)
bool fast_select(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  int64_t d = 0, i = 0;
  if (!a || op->args.size() != 3 || !int_arg(op, f, 1, &d) || !int_arg(op, f, 2, &i))
    return false;
  set_out(op, f, at::_ops::select_int::call(*a, d, c10::SymInt(i)));
  return true;
}

// slice.Tensor(self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1)
bool fast_slice(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  if (!a || op->args.size() != 5) return false;
  int64_t d = 0, step = 0;
  if (!int_arg(op, f, 1, &d) || !int_arg(op, f, 4, &step)) return false;
  std::optional<c10::SymInt> bounds[2];
  for (size_t k = 2; k < 4; ++k) {
    const c10::IValue* v = arg_value(op, f, k);
    if (!v) return false;
    if (v->isInt())
      bounds[k - 2] = c10::SymInt(v->toInt());
    else if (!v->isNone())
      return false;
  }
  set_out(op, f, at::_ops::slice_Tensor::call(*a, d, bounds[0], bounds[1], c10::SymInt(step)));
  return true;
}

// _to_copy(self, *, ScalarType? dtype, Layout? layout, Device? device, bool? pin_memory,
//          bool non_blocking=False, MemoryFormat? memory_format): every dtype cast.
bool fast_to_copy(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  if (!a || op->args.size() != 7) return false;
  std::optional<c10::ScalarType> dtype;
  if (!opt_dtype_arg(op, f, 1, &dtype)) return false;
  bool has = false;
  int64_t v = 0;
  if (!opt_enum_arg(op, f, 2, static_cast<int64_t>(c10::Layout::NumOptions), &has, &v))
    return false;
  std::optional<c10::Layout> layout;
  if (has) layout = static_cast<c10::Layout>(v);
  const c10::IValue* dev = arg_value(op, f, 3);
  if (!dev || !(dev->isNone() || dev->isDevice())) return false;
  std::optional<c10::Device> device;
  if (dev->isDevice()) device = dev->toDevice();
  const c10::IValue* pin = arg_value(op, f, 4);
  if (!pin || !(pin->isNone() || pin->isBool())) return false;
  std::optional<bool> pin_memory;
  if (pin->isBool()) pin_memory = pin->toBool();
  bool non_blocking = false;
  if (!bool_arg(op, f, 5, &non_blocking)) return false;
  if (!opt_enum_arg(op, f, 6, static_cast<int64_t>(c10::MemoryFormat::NumOptions), &has, &v))
    return false;
  std::optional<c10::MemoryFormat> mf;
  if (has) mf = static_cast<c10::MemoryFormat>(v);
  set_out(op, f,
          at::_ops::_to_copy::call(*a, dtype, layout, device, pin_memory, non_blocking, mf));
  return true;
}

// pow.Tensor_Scalar(self, Scalar exponent), mul.Scalar(self, Scalar other)
template <at::Tensor (*Fn)(const at::Tensor&, const c10::Scalar&)>
bool fast_tensor_scalar(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  const c10::IValue* s = op->args.size() == 2 ? arg_value(op, f, 1) : nullptr;
  if (!a || !s || !(s->isInt() || s->isDouble())) return false;
  set_out(op, f, Fn(*a, s->toScalar()));
  return true;
}

// mean.dim(self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
bool fast_mean_dim(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  if (!a || op->args.size() != 4) return false;
  int64_t dims[kMaxDims];
  size_t n = 0;
  const bool none = op->args[1].kind == TRT_ARG_NONE;
  if (!none && !int_list_arg(op, f, 1, dims, &n)) return false;
  bool keepdim = false;
  std::optional<c10::ScalarType> dtype;
  if (!bool_arg(op, f, 2, &keepdim) || !opt_dtype_arg(op, f, 3, &dtype)) return false;
  at::OptionalIntArrayRef dim;
  if (!none) dim = c10::IntArrayRef(dims, n);
  set_out(op, f, at::_ops::mean_dim::call(*a, dim, keepdim, dtype));
  return true;
}

// cat(Tensor[] tensors, int dim=0)
bool fast_cat(const trt_op* op, trt_frame* f) {
  if (op->args.size() != 2) return false;
  const ArgEnc& e = op->args[0];
  if (e.kind != TRT_ARG_LIST || e.elem != ElemKind::Tensor) return false;
  int64_t d = 0;
  if (!int_arg(op, f, 1, &d)) return false;
  std::vector<at::Tensor> ts;
  ts.reserve(e.items.size());
  for (int32_t slot : e.items) {
    if (slot < 0 || !f->slots[slot].isTensor()) return false;
    ts.push_back(f->slots[slot].toTensor());
  }
  set_out(op, f, at::_ops::cat::call(at::ITensorListRef(ts), d));
  return true;
}

// _softmax(self, int dim, bool half_to_float)
bool fast_softmax(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  int64_t d = 0;
  bool h = false;
  if (!a || op->args.size() != 3 || !int_arg(op, f, 1, &d) || !bool_arg(op, f, 2, &h))
    return false;
  set_out(op, f, at::_ops::_softmax::call(*a, d, h));
  return true;
}

// clone(self, *, MemoryFormat? memory_format=None)
bool fast_clone(const trt_op* op, trt_frame* f) {
  const at::Tensor* a = tensor_arg(op, f, 0);
  if (!a || op->args.size() != 2) return false;
  bool has = false;
  int64_t v = 0;
  if (!opt_enum_arg(op, f, 1, static_cast<int64_t>(c10::MemoryFormat::NumOptions), &has, &v))
    return false;
  std::optional<c10::MemoryFormat> mf;
  if (has) mf = static_cast<c10::MemoryFormat>(v);
  set_out(op, f, at::_ops::clone::call(*a, mf));
  return true;
}

#define TRT_UNARY(name) \
  {"aten::" #name, "", fast_unary<at::_ops::name::call>}
#define TRT_BINARY(name, ov) \
  {"aten::" #name, #ov, fast_binary<at::_ops::name##_##ov::call>}


const FastEntry kFast[] = {
    TRT_UNARY(relu), TRT_UNARY(neg), TRT_UNARY(exp), TRT_UNARY(sigmoid), TRT_UNARY(tanh),
    TRT_UNARY(rsqrt), TRT_UNARY(sqrt), TRT_UNARY(sin), TRT_UNARY(cos),
    {"aten::t", "", fast_unary<at::_ops::t::call>, true},
    TRT_BINARY(mul, Tensor), TRT_BINARY(div, Tensor),
    {"aten::mm", "", fast_binary<at::_ops::mm::call>},
    {"aten::empty_like", "", fast_empty_like, true},
    {"aten::sym_numel", "", fast_numel, true},
    {"aten::numel", "", fast_numel, true},
    {"aten::empty", "memory_format", fast_empty, true},
    {"aten::add", "Tensor", fast_binary_alpha<at::_ops::add_Tensor::call>},
    {"aten::sub", "Tensor", fast_binary_alpha<at::_ops::sub_Tensor::call>},
    {"aten::bmm", "", fast_binary<at::_ops::bmm::call>},
    TRT_UNARY(silu),
    {"aten::view", "", fast_sized<at::_ops::view::call>, true},
    {"aten::_unsafe_view", "", fast_sized<at::_ops::_unsafe_view::call>, true},
    {"aten::expand", "", fast_expand, true},
    {"aten::permute", "", fast_permute, true},
    {"aten::unsqueeze", "", fast_tensor_int<at::_ops::unsqueeze::call>, true},
    {"aten::squeeze", "dim", fast_tensor_int<at::_ops::squeeze_dim::call>, true},
    {"aten::transpose", "int", fast_transpose, true},
    {"aten::select", "int", fast_select, true},
    {"aten::slice", "Tensor", fast_slice, true},
    {"aten::_to_copy", "", fast_to_copy},
    {"aten::pow", "Tensor_Scalar", fast_tensor_scalar<at::_ops::pow_Tensor_Scalar::call>},
    {"aten::mul", "Scalar", fast_tensor_scalar<at::_ops::mul_Scalar::call>},
    {"aten::mean", "dim", fast_mean_dim},
    {"aten::cat", "", fast_cat},
    {"aten::_softmax", "", fast_softmax},
    {"aten::clone", "", fast_clone},
};

bool boxed_only() {
  const char* v = std::getenv("TRIDENT_BOXED_ONLY");
  return v && v[0] == '1';
}

const FastEntry* find_fast(const c10::FunctionSchema& schema) {
  for (const auto& e : kFast)
    if (schema.name() == e.name && schema.overload_name() == e.overload) return &e;
  return nullptr;
}

// Whether this run's TRT_OP_BELOW_AUTOGRAD operators may skip the autograd layer: not while
// a forward-mode AD level is active (dual tensors' tangents are computed there).  Read once
// per run, at its first such operator.
bool below_autograd(trt_frame* f) {
  if (f->below < 0)
    f->below = torch::autograd::ForwardADLevel::try_get_by_idx(0) == nullptr ? 1 : 0;
  return f->below == 1;
}

// An operator runs without the GIL, as eager's Python bindings run it: another Python thread
// makes progress meanwhile.  Nothing in the call touches a Python object without taking the
// GIL itself (a Python kernel, a __torch_dispatch__ subclass and a tensor's last Python
// reference do), and an exception thrown in the scope takes the GIL back before
// HANDLE_TH_ERRORS turns it into a Python error.  Views, sizes and allocations (the
// metadata fast paths) keep it: they take less time than releasing it would.
int op_call(trt_op* op, trt_frame* f) {
  HANDLE_TH_ERRORS
  std::optional<at::AutoDispatchBelowADInplaceOrView> below;
  if (op->below && below_autograd(f)) below.emplace();
  if (op->fast) {
    bool done;
    if (op->fast_nogil) {
      trident::GilRelease nogil;
      done = op->fast(op, f);
    } else {
      done = op->fast(op, f);
    }
    if (done) return TRT_OK;
  }
  CallLevel level;
  std::vector<c10::IValue>& stack = level.stack;
  stack.clear();
  for (const ArgEnc& e : op->args) {
    if (e.kind == TRT_ARG_SLOT) {
      const c10::IValue& v = f->slots[e.slot];
      if (e.tensor_param && !v.isTensor())
        stack.push_back(c10::IValue(wrap_scalar(v)));
      else
        stack.push_back(v);
    }
    else if (e.kind == TRT_ARG_LIST)
      stack.push_back(build_list(e, f));
    else
      stack.push_back(e.constant);
  }
  {
    trident::GilRelease nogil;
    op->handle.callBoxed(&stack);
  }
  const size_t n = op->outs.size();
  for (size_t i = 0; i < n && i < stack.size(); ++i) f->slots[op->outs[i]] = std::move(stack[i]);
  return TRT_OK;
  END_HANDLE_TH_ERRORS_RET(TRT_FAIL)
}

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

// Raises the pending guard error, if any: true when it did (the call's result is dropped).
bool raise_pending_error() {
  PendingError& p = pending_error;
  if (!p.type) return false;
  PyErr_Restore(p.type, p.value, p.tb);
  p = PendingError{};
  return true;
}

const trt_api kApi = {
    TRT_ABI_VERSION, tensor_match,   tensor_meta,    tensor_prop, global_state_snapshot, frame_acquire,
    frame_release,   frame_set_tensor, frame_set_int, frame_set_double,  frame_get_int,
    frame_list_item, frame_to_py,    op_new,         op_free,            op_call,
    trident::launch_new, trident::launch_call, trident::launch_free, trident::launch_select,
    mode_enter,      mode_exit,  guard_error};

// ---------------------------------------------------------------- Module ----

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

PyTypeObject TrtModuleType = {PyVarObject_HEAD_INIT(nullptr, 0)};

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

// -------------------------------------------------------------- Function ----

constexpr int kMaxLocals = 256;

// How a call's arguments map to the locals the SCM reads (L[]): read from the function's
// code object when it is installed or replaced.
struct Binder {
  PyObject* names;  // tuple: parameter names (co_varnames[:nparams]); owned
  int argcount, posonly, kwonly, varargs, varkw, nfree, nlocals;
};

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

PyObject* call_miss(TrtFunction* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  PyObject* miss = self->miss;
  Py_INCREF(miss);  // the call may replace it (tp_init again)
  PyObject* r = PyObject_Vectorcall(miss, args, PyVectorcall_NARGS(nargsf), kwnames);
  Py_DECREF(miss);
  return r;
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

PyTypeObject TrtFunctionType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ----------------------------------------------------------- module init ----

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

// A frame holding a test's values (tensors, floats, ints), in order.
trt_frame* frame_from_list(PyObject* values) {
  trt_frame* f = frame_acquire(static_cast<int32_t>(PyList_GET_SIZE(values)));
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); ++i) {
    PyObject* v = PyList_GET_ITEM(values, i);
    if (THPVariable_Check(v))
      frame_set_tensor(f, static_cast<int32_t>(i), v);
    else if (PyFloat_Check(v))
      frame_set_double(f, static_cast<int32_t>(i), PyFloat_AsDouble(v));
    else
      frame_set_int(f, static_cast<int32_t>(i), PyLong_AsLongLong(v));
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
  PyObject* out = trident::launch_pack_for_test(l, f);
  frame_release(f);
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
    PyObject* r = trident::launch_select_for_test(l, f, g.data(),
                                                  static_cast<int32_t>(g.size() / 3));
    frame_release(f);
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

PyObject* py_api_address(PyObject*, PyObject*) {
  return PyLong_FromVoidPtr(const_cast<trt_api*>(&kApi));
}

PyMethodDef rt_methods[] = {
    {"load_scm", load_scm, METH_VARARGS, "load_scm(path, consts) -> Module"},
    {"global_state", py_global_state, METH_NOARGS, "snapshot of the global-state guard"},
    {"dispatch_keys", py_dispatch_keys, METH_O, "DispatchKeySet raw repr of a tensor"},
    {"global_state_names", py_global_state_names, METH_NOARGS,
     "the name of each word of global_state(), '' where unused"},
    {"keyset_str", py_keyset_str, METH_O, "the keys of a DispatchKeySet raw repr, as c10 prints"},
    {"enum_code", py_enum_code, METH_O, "C++ enum value of a dtype/layout/memory_format/device"},
    {"launch_pack_for_test", py_launch_pack_for_test, METH_VARARGS,
     "pack Triton launch parameters without a GPU (tests)"},
    {"launch_select_for_test", py_launch_select_for_test, METH_VARARGS,
     "run a selecting Triton launch over several calls without a GPU (tests)"},
    {"api_address", py_api_address, METH_NOARGS, "address of the trt_api table"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef rt_module = {PyModuleDef_HEAD_INIT, "_trident_rt", "Trident native runtime", -1,
                         rt_methods};

}  // namespace

PyMODINIT_FUNC PyInit__trident_rt() {
  TrtModuleType.tp_name = "trident.Module";
  TrtModuleType.tp_basicsize = sizeof(TrtModule);
  TrtModuleType.tp_flags = Py_TPFLAGS_DEFAULT;
  TrtModuleType.tp_dealloc = module_dealloc;
  TrtModuleType.tp_methods = module_methods;
  TrtModuleType.tp_doc = "A loaded Specialization Cache Module";
  if (PyType_Ready(&TrtModuleType) < 0) return nullptr;

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
  if (PyType_Ready(&TrtFunctionType) < 0) return nullptr;

  PyObject* m = PyModule_Create(&rt_module);
  if (!m) return nullptr;
  Py_INCREF(&TrtFunctionType);
  if (PyModule_AddObject(m, "Function", reinterpret_cast<PyObject*>(&TrtFunctionType)) < 0) {
    Py_DECREF(&TrtFunctionType);
    Py_DECREF(m);
    return nullptr;
  }
  Py_INCREF(&TrtModuleType);
  if (PyModule_AddObject(m, "Module", reinterpret_cast<PyObject*>(&TrtModuleType)) < 0) {
    Py_DECREF(&TrtModuleType);
    Py_DECREF(m);
    return nullptr;
  }
  if (PyModule_AddIntConstant(m, "ABI_VERSION", TRT_ABI_VERSION) < 0 ||
      PyModule_AddIntConstant(m, "MAX_LOCALS", kMaxLocals) < 0 ||
      PyModule_AddIntConstant(m, "GLOBAL_STATE_WORDS", TRT_GLOBAL_STATE_WORDS) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
