// trident_rt_launch.cpp -- launching Triton CUBINs from an SCM.
//
// Mirrors Triton's own launcher (triton/backends/nvidia/driver.py,
// make_launcher): every non-constexpr argument in signature order, then the
// global and profile scratch pointers; fp16/bf16/fp32/fp64 scalars as packed
// bits; cuLaunchKernelEx with the cooperative / PDL / cluster attributes;
// the dynamic shared-memory opt-in above 48 KB done at module load as in
// Triton's loadBinary.  The CUBIN is loaded lazily once per device.
//
// Before launching, every specialisation the CUBIN was compiled for is
// checked (16-byte alignment, divisibility by 16, equality to 1, 32-bit
// range, pointer element type).  A failed check returns TRT_PRECONDITION
// and launches nothing: the SCM turns it into a specialization miss.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/csrc/Exceptions.h>

#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "trident_rt_internal.h"

#ifdef TRT_WITH_CUDA
#include <ATen/EmptyTensor.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#endif

constexpr int kMaxParams = 128;
constexpr int kMaxDevices = 64;

// One CUBIN and how to launch it.
struct trt_kernel {
  std::string name;
  std::string cubin;
  int32_t num_warps = 1, num_ctas = 1, shared = 0, cooperative = 0, pdl = 0;
  std::vector<trt_launch_param> params;
  void* function[kMaxDevices] = {nullptr};
};

// A selecting launch's variant: the kernel one key maps to.  Keys whose
// resolver returned the same variant object share one kernel (one module
// load per device), whatever their number.
struct trt_variant {
  std::vector<int64_t> key;
  std::shared_ptr<trt_kernel> kernel;
  int32_t grid = 0;  // which row of the grids this variant's configuration uses
};

struct trt_launch {
  trt_kernel base;                // a fixed launch (resolver == nullptr)
  PyObject* resolver = nullptr;   // owned reference; see trt_launch_spec
  std::vector<trt_launch_key> keys;
  // Variants by key hash; unique_ptr keeps them in place while the table grows
  // (the resolver runs Python, which may let another thread in).
  std::vector<std::unique_ptr<trt_variant>> variants;
  std::unordered_multimap<uint64_t, size_t> index;
  size_t last = SIZE_MAX;  // the variant the previous call used
  // The resolver's variant objects (owned references) and their parsed
  // kernels: a variant returned again for another key is not parsed again.
  std::vector<std::pair<PyObject*, std::shared_ptr<trt_variant>>> parsed;
};

namespace trident {
namespace {

enum PackResult { kPacked = 0, kPrecondition = 1, kError = 2 };

// Fills storage[] (8 bytes per passed parameter).  *device gets the CUDA
// device index of the pointer arguments (-1 if none); pointers on two devices
// are an error.
PackResult pack(const trt_kernel* l, trt_frame* f, uint64_t* storage, int* nstored, int* device,
                bool require_cuda) {
  int n = 0;
  *device = -1;
  for (const trt_launch_param& p : l->params) {
    const c10::IValue* v = p.slot >= 0 ? &f->slots[p.slot] : nullptr;
    if (p.kind == TRT_P_PTR) {
      if (!v || !v->isTensor()) {
        PyErr_SetString(PyExc_TypeError, "trident: a Triton pointer argument is not a tensor");
        return kError;
      }
      const at::Tensor& t = v->toTensor();
      if (p.dtype >= 0 && static_cast<int32_t>(t.scalar_type()) != p.dtype) return kPrecondition;
      if (require_cuda && !t.is_cuda()) {
        PyErr_Format(PyExc_ValueError,
                     "Pointer argument (at %d) cannot be accessed from Triton (cpu tensor?)",
                     static_cast<int>(&p - l->params.data()));
        return kError;
      }
      const uint64_t ptr = reinterpret_cast<uint64_t>(t.data_ptr());
      if (p.div16 && (ptr % 16) != 0) return kPrecondition;
      if (t.is_cuda()) {
        const int dev = t.device().index();
        if (*device < 0) {
          *device = dev;
        } else if (dev != *device) {  // one launch runs on one device
          PyErr_Format(PyExc_ValueError,
                       "Pointer argument (at %d) is on cuda:%d, an earlier one on cuda:%d: a "
                       "Triton launch runs on one device (trident)",
                       static_cast<int>(&p - l->params.data()), dev, *device);
          return kError;
        }
      }
      storage[n++] = ptr;
      continue;
    }
    if (p.kind == TRT_P_FP16 || p.kind == TRT_P_BF16 || p.kind == TRT_P_FP32 ||
        p.kind == TRT_P_FP64) {
      double d = p.dval;
      if (v) d = v->isDouble() ? v->toDouble() : static_cast<double>(v->toInt());
      uint64_t bits = 0;
      if (p.kind == TRT_P_FP64) {
        std::memcpy(&bits, &d, 8);
      } else if (p.kind == TRT_P_FP32) {
        float x = static_cast<float>(d);
        uint32_t b;
        std::memcpy(&b, &x, 4);
        bits = b;
      } else if (p.kind == TRT_P_FP16) {
        bits = c10::Half(static_cast<float>(d)).x;
      } else {
        bits = c10::BFloat16(static_cast<float>(d)).x;
      }
      storage[n++] = bits;
      continue;
    }
    int64_t x = p.ival;
    if (v) x = v->isBool() ? static_cast<int64_t>(v->toBool()) : v->toInt();
    if (p.kind == TRT_P_ONE) {
      if (x != 1) return kPrecondition;
      continue;
    }
    if (p.div16 && (x % 16) != 0) return kPrecondition;
    switch (p.kind) {
      case TRT_P_I32:
        if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
          return kPrecondition;
        break;
      case TRT_P_U32:
        if (x < 0 || x > std::numeric_limits<uint32_t>::max()) return kPrecondition;
        break;
      case TRT_P_I1: case TRT_P_I8: case TRT_P_I16: case TRT_P_U8: case TRT_P_U16:
      case TRT_P_I64: case TRT_P_U64:
        break;
      default:
        PyErr_Format(PyExc_RuntimeError, "trident: bad Triton parameter kind %d", p.kind);
        return kError;
    }
    // Little-endian: the low bytes of the 8-byte slot hold the narrower value.
    storage[n++] = static_cast<uint64_t>(x);
  }
  *nstored = n;
  return kPacked;
}

#ifdef TRT_WITH_CUDA
struct Driver {
  CUresult (*moduleLoadData)(CUmodule*, const void*);
  CUresult (*moduleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*funcSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*funcGetAttribute)(int*, CUfunction_attribute, CUfunction);
  CUresult (*funcSetCacheConfig)(CUfunction, CUfunc_cache);
  CUresult (*deviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*launchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*ctxGetCurrent)(CUcontext*);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*devicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*deviceGet)(CUdevice*, int);
  CUresult (*getErrorString)(CUresult, const char**);
  std::string error;
};

Driver* driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      d.error = std::string("cannot open libcuda.so.1: ") + dlerror();
      return;
    }
#define TRT_SYM(field, name)                                              \
  d.field = reinterpret_cast<decltype(d.field)>(dlsym(h, name));          \
  if (!d.field) {                                                         \
    d.error = std::string("libcuda.so.1 lacks ") + name;                  \
    return;                                                               \
  }
    TRT_SYM(moduleLoadData, "cuModuleLoadData");
    TRT_SYM(moduleGetFunction, "cuModuleGetFunction");
    TRT_SYM(funcSetAttribute, "cuFuncSetAttribute");
    TRT_SYM(funcGetAttribute, "cuFuncGetAttribute");
    TRT_SYM(funcSetCacheConfig, "cuFuncSetCacheConfig");
    TRT_SYM(deviceGetAttribute, "cuDeviceGetAttribute");
    TRT_SYM(launchKernelEx, "cuLaunchKernelEx");
    TRT_SYM(ctxGetCurrent, "cuCtxGetCurrent");
    TRT_SYM(ctxSetCurrent, "cuCtxSetCurrent");
    TRT_SYM(devicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    TRT_SYM(deviceGet, "cuDeviceGet");
    TRT_SYM(getErrorString, "cuGetErrorString");
#undef TRT_SYM
  });
  if (!d.error.empty()) {
    PyErr_Format(PyExc_RuntimeError, "trident: %s", d.error.c_str());
    return nullptr;
  }
  return &d;
}

bool check(Driver* d, CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* s = nullptr;
  d->getErrorString(r, &s);
  PyErr_Format(PyExc_RuntimeError, "Triton Error [CUDA]: %s (%s)", s ? s : "unknown error", what);
  return false;
}

CUfunction load_function(Driver* d, trt_kernel* l, int device) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (l->function[device]) return static_cast<CUfunction>(l->function[device]);
  CUcontext ctx = nullptr;
  if (!check(d, d->ctxGetCurrent(&ctx), "cuCtxGetCurrent")) return nullptr;
  if (!ctx) {
    CUdevice dev;
    if (!check(d, d->deviceGet(&dev, device), "cuDeviceGet")) return nullptr;
    if (!check(d, d->devicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain")) return nullptr;
    if (!check(d, d->ctxSetCurrent(ctx), "cuCtxSetCurrent")) return nullptr;
  }
  CUmodule mod;
  if (!check(d, d->moduleLoadData(&mod, l->cubin.data()), "cuModuleLoadData")) return nullptr;
  CUfunction fn;
  if (!check(d, d->moduleGetFunction(&fn, mod, l->name.c_str()), "cuModuleGetFunction"))
    return nullptr;
  if (l->shared > 49152) {
    CUdevice dev;
    int optin = 0, shared_static = 0;
    if (!check(d, d->deviceGet(&dev, device), "cuDeviceGet") ||
        !check(d, d->deviceGetAttribute(&optin,
                                        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
               "cuDeviceGetAttribute"))
      return nullptr;
    if (optin > 49152) {
      if (!check(d, d->funcSetCacheConfig(fn, CU_FUNC_CACHE_PREFER_SHARED), "cuFuncSetCacheConfig") ||
          !check(d, d->funcGetAttribute(&shared_static, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
                 "cuFuncGetAttribute") ||
          !check(d, d->funcSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        optin - shared_static),
                 "cuFuncSetAttribute"))
        return nullptr;
    }
  }
  if (l->num_ctas == 16 &&
      !check(d, d->funcSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
             "cuFuncSetAttribute"))
    return nullptr;
  l->function[device] = fn;
  return fn;
}
#endif  // TRT_WITH_CUDA

}  // namespace

namespace {

bool fill_kernel(trt_kernel* k, const char* name, const char* cubin, size_t cubin_size,
                 int32_t num_warps, int32_t num_ctas, int32_t shared, int32_t cooperative,
                 int32_t pdl, const trt_launch_param* params, int32_t nparams) {
  if (nparams > kMaxParams) {
    PyErr_SetString(PyExc_RuntimeError, "trident: too many Triton kernel parameters");
    return false;
  }
  if (num_warps < 1 || num_ctas < 1) {
    PyErr_SetString(PyExc_RuntimeError, "trident: bad Triton launch metadata");
    return false;
  }
  k->name = name;
  k->cubin.assign(cubin, cubin_size);
  k->num_warps = num_warps;
  k->num_ctas = num_ctas;
  k->shared = shared;
  k->cooperative = cooperative;
  k->pdl = pdl;
  k->params.assign(params, params + nparams);
  return true;
}

// Launches `k` on the current stream of its tensors' device.
int launch_kernel(trt_kernel* l, trt_frame* f, int64_t gx, int64_t gy, int64_t gz) {
#ifdef TRT_WITH_CUDA
  uint64_t storage[kMaxParams];
  void* params[kMaxParams + 2];
  int n = 0, device = -1;
  const PackResult r = pack(l, f, storage, &n, &device, /*require_cuda=*/true);
  if (r == kPrecondition) return TRT_PRECONDITION;
  if (r == kError) return TRT_FAIL;
  if (gx * gy * gz <= 0) return TRT_OK;  // Triton skips empty grids too
  Driver* d = driver();
  if (!d) return TRT_FAIL;
  const int cur = c10::cuda::current_device();
  if (device < 0) device = cur;
  if (device >= kMaxDevices) {
    PyErr_SetString(PyExc_RuntimeError, "trident: device index out of range");
    return TRT_FAIL;
  }
  std::optional<c10::cuda::CUDAGuard> guard;
  if (device != cur) guard.emplace(static_cast<c10::DeviceIndex>(device));
  CUfunction fn = static_cast<CUfunction>(l->function[device]);
  if (!fn && !(fn = load_function(d, l, device))) return TRT_FAIL;
  for (int i = 0; i < n; ++i) params[i] = &storage[i];
  CUdeviceptr global_scratch = 0, profile_scratch = 0;
  params[n] = &global_scratch;
  params[n + 1] = &profile_scratch;
  CUlaunchAttribute attrs[4];
  CUlaunchConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.gridDimX = static_cast<unsigned>(gx * l->num_ctas);
  cfg.gridDimY = static_cast<unsigned>(gy);
  cfg.gridDimZ = static_cast<unsigned>(gz);
  cfg.blockDimX = 32 * l->num_warps;
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  cfg.sharedMemBytes = l->shared;
  cfg.hStream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  cfg.attrs = attrs;
  unsigned na = 0;
  if (l->pdl) {
    attrs[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[na].value.programmaticStreamSerializationAllowed = 1;
    ++na;
  }
  if (l->cooperative) {
    attrs[na].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[na].value.cooperative = 1;
    ++na;
  }
  if (l->num_ctas != 1) {
    attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[na].value.clusterDim.x = l->num_ctas;
    attrs[na].value.clusterDim.y = 1;
    attrs[na].value.clusterDim.z = 1;
    ++na;
    attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attrs[na].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    ++na;
  }
  cfg.numAttrs = na;
  CUresult res;
  {
    // As Triton's own launcher: the launch can block (a full launch queue) without the GIL.
    GilRelease nogil;
    res = d->launchKernelEx(&cfg, fn, params, nullptr);
  }
  if (!check(d, res, "cuLaunchKernelEx")) return TRT_FAIL;
  return TRT_OK;
#else
  (void)l; (void)f; (void)gx; (void)gy; (void)gz;
  PyErr_SetString(PyExc_RuntimeError,
                  "trident: this runtime was built without CUDA; cannot launch Triton kernels");
  return TRT_FAIL;
#endif
}

constexpr uint64_t kFnvBasis = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// Triton compiles one CUBIN per specialisation class of an int argument:
// == 1, a multiple of 16, and its width (32 or 64 bits).
int64_t spec_class(int64_t x) {
  const bool i32 = x >= std::numeric_limits<int32_t>::min() &&
                   x <= std::numeric_limits<int32_t>::max();
  return static_cast<int64_t>(x == 1) | (static_cast<int64_t>(x % 16 == 0) << 1) |
         (static_cast<int64_t>(!i32) << 2);
}

// The bucket FlagGems' LibTuner strategies give a key value, for the values
// where they are exact (|v| <= 2**40); beyond, the value itself (a finer
// key, never a coarser one).
constexpr int64_t kBucketLimit = int64_t{1} << 40;

int64_t bucket(int32_t transform, int64_t x) {
  if (transform == TRT_KT_LOG2) {  // 2 ** ceil(log2 x)
    if (x < 1 || x > kBucketLimit) return x;
    int64_t p = 1;
    while (p < x) p <<= 1;
    return p;
  }
  if (transform == TRT_KT_ALIGN32) {  // ceil(x / 32) * 32
    if (x < -kBucketLimit || x > kBucketLimit) return x;
    return (x > 0 ? (x + 31) / 32 : x / 32) * 32;
  }
  return x;
}

// Computes the key of this call (*nkey words).  false with a Python exception
// when a slot does not hold what the key expects.
bool compute_key(const trt_launch* l, trt_frame* f, int64_t* key, size_t* nkey, uint64_t* hash) {
  uint64_t h = kFnvBasis;
  size_t n = 0;
  auto put = [&](int64_t x) {
    key[n++] = x;
    h = (h ^ static_cast<uint64_t>(x)) * kFnvPrime;
  };
  for (size_t i = 0; i < l->keys.size(); ++i) {
    const trt_launch_key& k = l->keys[i];
    const c10::IValue& v = f->slots[k.slot];
    int64_t x = 0;
    if (k.kind == TRT_K_PTR) {
      if (!v.isTensor()) {
        PyErr_SetString(PyExc_TypeError, "trident: a Triton pointer argument is not a tensor");
        return false;
      }
      put((reinterpret_cast<uintptr_t>(v.toTensor().data_ptr()) % 16) == 0);
    } else if (k.kind == TRT_K_INT) {
      if (v.isBool()) {
        x = v.toBool();
      } else if (v.isInt()) {
        x = v.toInt();
      } else {
        PyErr_SetString(PyExc_TypeError, "trident: a Triton integer argument is not an int");
        return false;
      }
      switch (k.transform) {
        case TRT_KT_RAW:
          put(x);
          break;
        case TRT_KT_CLASS:
          put(spec_class(x));
          break;
        case TRT_KT_LOG2:
        case TRT_KT_ALIGN32:
          put(bucket(k.transform, x));
          put(spec_class(x));
          break;
        default:
          PyErr_Format(PyExc_RuntimeError, "trident: bad launch key transform %d", k.transform);
          return false;
      }
    } else if (k.kind == TRT_K_DOUBLE) {
      double d = 0.0;
      if (v.isDouble()) {
        d = v.toDouble();
      } else if (v.isInt()) {
        d = static_cast<double>(v.toInt());
      } else {
        PyErr_SetString(PyExc_TypeError, "trident: a Triton float argument is not a number");
        return false;
      }
      std::memcpy(&x, &d, sizeof(x));
      put(x);
    } else {
      PyErr_Format(PyExc_RuntimeError, "trident: bad launch key kind %d", k.kind);
      return false;
    }
  }
  *nkey = n;
  *hash = h;
  return true;
}

bool same_key(const trt_variant& v, const int64_t* key, size_t n) {
  return v.key.size() == n && (n == 0 || std::memcmp(v.key.data(), key, n * sizeof(int64_t)) == 0);
}

// Parses the resolver's variant tuple into `v`'s kernel and grid.
bool parse_variant(PyObject* t, trt_variant* v, int32_t ngrids) {
  const char* name = nullptr;
  PyObject* cubin = nullptr;
  PyObject* params = nullptr;
  int nw, nc, sh, coop, pdl, grid;
  if (!PyTuple_Check(t) ||
      !PyArg_ParseTuple(t, "sO!iiiiiiO!", &name, &PyBytes_Type, &cubin, &nw, &nc, &sh, &coop,
                        &pdl, &grid, &PyTuple_Type, &params)) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "trident: a launch resolver returned a bad variant");
    return false;
  }
  if (grid < 0 || grid >= ngrids) {
    PyErr_Format(PyExc_RuntimeError, "trident: variant grid %d out of range (%d grids)", grid,
                 ngrids);
    return false;
  }
  std::vector<trt_launch_param> ps;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(params); ++i) {
    trt_launch_param p;
    long long ival;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(params, i), "iiLdii", &p.kind, &p.slot, &ival,
                          &p.dval, &p.div16, &p.dtype))
      return false;
    p.ival = ival;
    ps.push_back(p);
  }
  v->grid = grid;
  v->kernel = std::make_shared<trt_kernel>();
  return fill_kernel(v->kernel.get(), name, PyBytes_AS_STRING(cubin),
                     static_cast<size_t>(PyBytes_GET_SIZE(cubin)), nw, nc, sh, coop, pdl,
                     ps.data(), static_cast<int32_t>(ps.size()));
}

// Calls the resolver for a key not in the table.  Returns 1 if the resolver
// launched this call itself, 0 with *out set to the variant to launch, -1 on
// error.
int resolve_key(trt_launch* l, trt_frame* f, const int64_t* key, size_t nkey, uint64_t hash,
                const int64_t* grids, int32_t ngrids, trt_variant** out) {
  const size_t nops = l->keys.size();
  PyObject* keyt = PyTuple_New(static_cast<Py_ssize_t>(nkey));
  PyObject* ops = PyTuple_New(static_cast<Py_ssize_t>(nops));
  PyObject* gs = PyTuple_New(ngrids);
  PyObject* res = nullptr;
  int rc = -1;
  if (!keyt || !ops || !gs) goto done;
  for (size_t i = 0; i < nkey; ++i) {
    PyObject* k = PyLong_FromLongLong(key[i]);
    if (!k) goto done;
    PyTuple_SET_ITEM(keyt, i, k);
  }
  for (size_t i = 0; i < nops; ++i) {
    PyObject* o = slot_to_py(f, l->keys[i].slot);
    if (!o) goto done;
    PyTuple_SET_ITEM(ops, i, o);
  }
  for (int32_t g = 0; g < ngrids; ++g) {
    PyObject* row = Py_BuildValue("(LLL)", static_cast<long long>(grids[3 * g]),
                                  static_cast<long long>(grids[3 * g + 1]),
                                  static_cast<long long>(grids[3 * g + 2]));
    if (!row) goto done;
    PyTuple_SET_ITEM(gs, g, row);
  }
  res = PyObject_CallFunctionObjArgs(l->resolver, keyt, ops, gs, nullptr);
  if (!res) goto done;
  {
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
      PyErr_SetString(PyExc_TypeError, "trident: a launch resolver must return (launched, variant)");
      goto done;
    }
    const int launched = PyObject_IsTrue(PyTuple_GET_ITEM(res, 0));
    if (launched < 0) goto done;
    PyObject* vt = PyTuple_GET_ITEM(res, 1);
    trt_variant* v = nullptr;
    if (vt != Py_None) {
      auto nv = std::make_unique<trt_variant>();
      nv->key.assign(key, key + nkey);
      const trt_variant* seen = nullptr;
      for (const auto& p : l->parsed) {
        if (p.first == vt) seen = p.second.get();
      }
      if (seen) {
        nv->kernel = seen->kernel;
        nv->grid = seen->grid;
      } else {
        auto pv = std::make_shared<trt_variant>();
        if (!parse_variant(vt, pv.get(), ngrids)) goto done;
        Py_INCREF(vt);
        l->parsed.emplace_back(vt, pv);
        nv->kernel = pv->kernel;
        nv->grid = pv->grid;
      }
      v = nv.get();
      l->index.emplace(hash, l->variants.size());
      l->variants.push_back(std::move(nv));
    }
    if (launched) {
      rc = 1;
    } else if (!v) {
      PyErr_SetString(PyExc_RuntimeError,
                      "trident: a launch resolver neither launched nor gave a variant");
    } else {
      *out = v;
      rc = 0;
    }
  }
done:
  Py_XDECREF(keyt);
  Py_XDECREF(ops);
  Py_XDECREF(gs);
  Py_XDECREF(res);
  return rc;
}

// The variant for this call: 0 with *out set, 1 when the resolver already
// launched, -1 on error.
int select_variant(trt_launch* l, trt_frame* f, const int64_t* grids, int32_t ngrids,
                   trt_variant** out) {
  int64_t key[2 * kMaxParams];  // at most two words per key part
  uint64_t hash = 0;
  size_t nk = 0;
  if (l->keys.size() > static_cast<size_t>(kMaxParams)) {
    PyErr_SetString(PyExc_RuntimeError, "trident: launch key too long");
    return -1;
  }
  if (!compute_key(l, f, key, &nk, &hash)) return -1;
  if (l->last < l->variants.size() && same_key(*l->variants[l->last], key, nk)) {
    *out = l->variants[l->last].get();
    return 0;
  }
  auto range = l->index.equal_range(hash);
  for (auto it = range.first; it != range.second; ++it) {
    if (same_key(*l->variants[it->second], key, nk)) {
      l->last = it->second;
      *out = l->variants[it->second].get();
      return 0;
    }
  }
  return resolve_key(l, f, key, nk, hash, grids, ngrids, out);
}

}  // namespace

trt_launch* launch_new(const trt_launch_spec* s) {
  auto l = std::make_unique<trt_launch>();
  if (s->resolver) {
    if (s->nkeys > kMaxParams) {
      PyErr_SetString(PyExc_RuntimeError, "trident: launch key too long");
      return nullptr;
    }
    l->keys.assign(s->keys, s->keys + s->nkeys);
    Py_INCREF(s->resolver);
    l->resolver = s->resolver;
    return l.release();
  }
  if (!fill_kernel(&l->base, s->name, s->cubin, static_cast<size_t>(s->cubin_size), s->num_warps,
                   s->num_ctas, s->shared, s->cooperative, s->pdl, s->params, s->nparams))
    return nullptr;
  return l.release();
}

void launch_free(trt_launch* l) {
  if (!l) return;
  Py_XDECREF(l->resolver);
  for (auto& p : l->parsed) Py_DECREF(p.first);
  delete l;
}

int launch_call(trt_launch* l, trt_frame* f, int64_t gx, int64_t gy, int64_t gz) {
  HANDLE_TH_ERRORS
  if (l->resolver) {
    PyErr_SetString(PyExc_RuntimeError, "trident: launch_call on a selecting launch");
    return TRT_FAIL;
  }
  return launch_kernel(&l->base, f, gx, gy, gz);
  END_HANDLE_TH_ERRORS_RET(TRT_FAIL)
}

int launch_select(trt_launch* l, trt_frame* f, const int64_t* grids, int32_t ngrids) {
  HANDLE_TH_ERRORS
  if (!l->resolver) {
    PyErr_SetString(PyExc_RuntimeError, "trident: launch_select on a fixed launch");
    return TRT_FAIL;
  }
  trt_variant* v = nullptr;
  const int r = select_variant(l, f, grids, ngrids, &v);
  if (r < 0) return TRT_FAIL;
  if (r == 1) return TRT_OK;
  const int64_t* g = grids + 3 * v->grid;
  return launch_kernel(v->kernel.get(), f, g[0], g[1], g[2]);
  END_HANDLE_TH_ERRORS_RET(TRT_FAIL)
}

PyObject* launch_pack_for_test(trt_launch* l, trt_frame* f) {
  HANDLE_TH_ERRORS
  uint64_t storage[kMaxParams];
  int n = 0, device = -1;
  const PackResult r = pack(&l->base, f, storage, &n, &device, /*require_cuda=*/false);
  if (r == kError) return nullptr;
  if (r == kPrecondition) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(storage), 8 * n);
  END_HANDLE_TH_ERRORS
}

PyObject* launch_select_for_test(trt_launch* l, trt_frame* f, const int64_t* grids,
                                 int32_t ngrids) {
  HANDLE_TH_ERRORS
  trt_variant* v = nullptr;
  const int r = select_variant(l, f, grids, ngrids, &v);
  if (r < 0) return nullptr;
  if (r == 1) Py_RETURN_NONE;
  uint64_t storage[kMaxParams];
  int n = 0, device = -1;
  const PackResult p = pack(v->kernel.get(), f, storage, &n, &device, /*require_cuda=*/false);
  if (p == kError) return nullptr;
  if (p == kPrecondition) return Py_BuildValue("(s)", "precondition");
  return Py_BuildValue("(iy#)", v->grid, reinterpret_cast<const char*>(storage),
                       static_cast<Py_ssize_t>(8 * n));
  END_HANDLE_TH_ERRORS
}

}  // namespace trident

namespace trident {

bool empty_cuda_plain(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::DeviceIndex index,
                      at::Tensor* out) {
#ifdef TRT_WITH_CUDA
  // as at::detail::empty_cuda: lazy CUDA init, the device's caching allocator
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  const c10::DeviceIndex cur = c10::cuda::current_device();
  if (index < 0) index = cur;
  std::optional<c10::cuda::CUDAGuard> guard;
  if (index != cur) guard.emplace(index);
  *out = at::Tensor(at::detail::empty_generic(sizes, c10::cuda::CUDACachingAllocator::get(),
                                              c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                              dtype, std::nullopt));
  return true;
#else
  (void)sizes;
  (void)dtype;
  (void)index;
  (void)out;
  return false;
#endif
}

}  // namespace trident
