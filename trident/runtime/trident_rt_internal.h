// trident_rt_internal.h -- shared between the runtime's translation units
// (not part of the SCM ABI; generated code never sees it).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#if __has_include(<ATen/core/NamedTensor.h>)  // named tensors: gone in torch 2.13
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/NamedTensor.h>
#define TRT_HAS_NAMED_TENSORS 1
#endif

#include <vector>

#include "trident_rt.h"

struct trt_frame {
  std::vector<c10::IValue> slots;
  // TRT_OP_BELOW_AUTOGRAD operators of this run: -1 not decided yet, 1 they run below the
  // autograd layer, 0 they take the full path (a forward-mode AD level is active)
  int8_t below = -1;
};

namespace trident {
// Releases the GIL for its scope and takes it back on the way out, exceptions included
// (Py_BEGIN/END_ALLOW_THREADS as an object).  Only code that touches no Python object, or
// takes the GIL itself, runs in it.
struct GilRelease {
  PyThreadState* state;
  GilRelease() : state(PyEval_SaveThread()) {}
  ~GilRelease() { PyEval_RestoreThread(state); }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;
};

// ATen operator calls (trident_rt_ops.cpp): the api table's op_new, op_free and op_call.
trt_op* op_new(const char* name, const char* overload, int32_t nargs, const trt_arg* args,
               int32_t nouts, const int32_t* outs, int32_t flags);
void op_free(trt_op* op);
int op_call(trt_op* op, trt_frame* f);

// Triton launches (trident_rt_launch.cpp).  Without CUDA they raise.
trt_launch* launch_new(const trt_launch_spec* spec);
int launch_call(trt_launch* l, trt_frame* f, int64_t gx, int64_t gy, int64_t gz);
void launch_free(trt_launch* l);
int launch_select(trt_launch* l, trt_frame* f, const int64_t* grids, int32_t ngrids);
// The selection of launch_select without launching (CPU tests): Python None
// when the resolver launched, else (grid_index, packed parameter bytes), or
// None-with-precondition as ("precondition",).
PyObject* launch_select_for_test(trt_launch* l, trt_frame* f, const int64_t* grids,
                                 int32_t ngrids);
// New reference to the Python object in a frame slot (trident_rt_api.cpp).
PyObject* slot_to_py(trt_frame* f, int32_t slot);
// Pack one launch's parameters without launching: for CPU tests of the
// launch ABI.  Returns bytes (8 per passed parameter) or raises.
PyObject* launch_pack_for_test(trt_launch* l, trt_frame* f);
// at::detail::empty_cuda without the dispatcher (contiguous, on device `index`,
// -1 = current); false without CUDA (trident_rt_launch.cpp).
bool empty_cuda_plain(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::DeviceIndex index,
                      at::Tensor* out);
}  // namespace trident
