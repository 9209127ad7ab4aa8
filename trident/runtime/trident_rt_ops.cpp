// trident_rt_ops.cpp -- ATen operator calls for the api table (op_new, op_free, op_call):
// an operator's arguments encoded once at SCM load, then each call through the boxed
// dispatcher or, for hot operators, a typed fast path that skips boxing.
//
// Errors raised by operators are translated to the Python exception eager
// PyTorch raises (torch's HANDLE_TH_ERRORS), never thrown across the C ABI.

#include <Python.h>

#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/EmptyTensor.h>
#include <ATen/Operators.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/forward_grad.h>

#include "trident_rt.h"
#include "trident_rt_internal.h"

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

}  // namespace

namespace trident {

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

}  // namespace trident

namespace {

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

}  // namespace

namespace trident {

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

}  // namespace trident
