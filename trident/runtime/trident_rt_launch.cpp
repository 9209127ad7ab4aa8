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

#include <Python.h>
#include <dlfcn.h>

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/csrc/Exceptions.h>

#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "trident_rt_internal.h"

#ifdef TRT_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#endif

constexpr int kMaxParams = 128;
constexpr int kMaxDevices = 64;

struct trt_launch {
  std::string name;
  std::string cubin;
  int32_t num_warps, num_ctas, shared, cooperative, pdl;
  std::vector<trt_launch_param> params;
  void* function[kMaxDevices] = {nullptr};
};

namespace trident {
namespace {

enum PackResult { kPacked = 0, kPrecondition = 1, kError = 2 };

// Fills storage[] (8 bytes per passed parameter).  *device gets the CUDA
// device index of the first pointer argument (-1 if none).
PackResult pack(const trt_launch* l, trt_frame* f, uint64_t* storage, int* nstored, int* device,
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
      if (*device < 0 && t.is_cuda()) *device = t.device().index();
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

CUfunction load_function(Driver* d, trt_launch* l, int device) {
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

trt_launch* launch_new(const trt_launch_spec* s) {
  if (s->nparams > kMaxParams) {
    PyErr_SetString(PyExc_RuntimeError, "trident: too many Triton kernel parameters");
    return nullptr;
  }
  auto* l = new trt_launch();
  l->name = s->name;
  l->cubin.assign(s->cubin, static_cast<size_t>(s->cubin_size));
  l->num_warps = s->num_warps;
  l->num_ctas = s->num_ctas;
  l->shared = s->shared;
  l->cooperative = s->cooperative;
  l->pdl = s->pdl;
  l->params.assign(s->params, s->params + s->nparams);
  return l;
}

void launch_free(trt_launch* l) { delete l; }

int launch_call(trt_launch* l, trt_frame* f, int64_t gx, int64_t gy, int64_t gz) {
#ifdef TRT_WITH_CUDA
  HANDLE_TH_ERRORS
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
  if (!check(d, d->launchKernelEx(&cfg, fn, params, nullptr), "cuLaunchKernelEx")) return TRT_FAIL;
  return TRT_OK;
  END_HANDLE_TH_ERRORS_RET(TRT_FAIL)
#else
  (void)l; (void)f; (void)gx; (void)gy; (void)gz;
  PyErr_SetString(PyExc_RuntimeError,
                  "trident: this runtime was built without CUDA; cannot launch Triton kernels");
  return TRT_FAIL;
#endif
}

PyObject* launch_pack_for_test(trt_launch* l, trt_frame* f) {
  HANDLE_TH_ERRORS
  uint64_t storage[kMaxParams];
  int n = 0, device = -1;
  const PackResult r = pack(l, f, storage, &n, &device, /*require_cuda=*/false);
  if (r == kError) return nullptr;
  if (r == kPrecondition) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(storage), 8 * n);
  END_HANDLE_TH_ERRORS
}

}  // namespace trident
