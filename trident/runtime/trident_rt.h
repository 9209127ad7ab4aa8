/*
 * trident_rt.h -- the C ABI between a generated Specialization Cache Module
 * (SCM) and Trident's runtime.
 *
 * Why this split: the runtime (trident_rt*.cpp) includes torch's C++ headers
 * and takes tens of seconds to compile, so it is built once per torch version
 * and cached.  Each SCM is plain C generated per function (guards, symbolic-size
 * arithmetic, the order of ATen calls and Triton launches); it includes only
 * this header and Python.h, so it compiles in a fraction of a second on every
 * specialization miss.
 *
 * The SCM never links against the runtime.  The runtime hands it a table of
 * function pointers (trt_api) at load time; all calls from generated code go
 * through that table.  Every entry that can fail returns a status
 * (TRT_OK / TRT_FAIL) and, on TRT_FAIL, has set a Python exception: the
 * same exception eager PyTorch raises for that operator.  No entry ever
 * throws across this boundary.
 */
#ifndef TRIDENT_RT_H
#define TRIDENT_RT_H

#include <Python.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct or the api table below changes shape. */
#define TRT_ABI_VERSION 10

/* The mode a whole version runs under (ir.Version.run_mode). */
#define TRT_MODE_NONE 0
#define TRT_MODE_NO_GRAD 1
#define TRT_MODE_ENABLE_GRAD 2
#define TRT_MODE_INFERENCE 3

/* Status codes returned by an SCM entry through its `status` argument. */
enum {
  TRT_HIT = 0,   /* a version's guards passed and it ran; the result is returned */
  TRT_MISS = 1,  /* no version's guards passed: go back to Python and capture */
  TRT_ERROR = 2  /* a version ran and raised: a Python exception is set */
};
/* Status codes of api entries. */
enum { TRT_OK = 0, TRT_FAIL = -1 };

/* What tensor_prop reads. */
enum { TRT_PROP_SIZE = 0, TRT_PROP_STRIDE = 1, TRT_PROP_OFFSET = 2 };

/* "This dimension is symbolic": a size or stride not checked by tensor_match. */
#define TRT_DYN INT64_MIN

/*
 * A TENSOR_MATCH guard: everything Dynamo's TensorCheck compares.
 * sizes/strides hold `ndim` entries each; TRT_DYN marks a symbolic entry
 * (its relations are checked by shape guards in the generated code).
 */
typedef struct trt_tensor_spec {
  PyTypeObject *type;       /* exact Python type (torch.Tensor, nn.Parameter) */
  int32_t dtype;            /* c10::ScalarType */
  int32_t device_type;      /* c10::DeviceType */
  int32_t device_index;     /* -1 for CPU */
  int32_t requires_grad;
  uint64_t dispatch_keys;   /* DispatchKeySet::raw_repr() of the tensor */
  int32_t ndim;
  const int64_t *sizes;
  const int64_t *strides;
} trt_tensor_spec;

/*
 * Snapshot of the process- and thread-global state a captured version
 * depends on (Dynamo's GLOBAL_STATE, GRAD_MODE, DETERMINISTIC_ALGORITHMS,
 * TORCH_FUNCTION_STATE and AUTOGRAD_SAVED_TENSORS_HOOKS guards, plus the
 * thread-local dispatch-key include/exclude sets TensorCheck applies).
 * Compared field by field; the layout is private to the runtime, so it is
 * an opaque array of int64.
 */
#define TRT_GLOBAL_STATE_WORDS 48
typedef struct trt_global_state {
  int64_t w[TRT_GLOBAL_STATE_WORDS];
} trt_global_state;

/* A prepared launch of one Triton CUBIN (see trt_launch_spec). */
typedef struct trt_launch trt_launch;

/* How a Triton kernel parameter is passed (Triton's launch ABI: every
   non-constexpr argument in signature order, then two scratch pointers). */
enum {
  TRT_P_PTR = 0,  /* CUdeviceptr: data pointer of the tensor in the slot */
  TRT_P_I1, TRT_P_I8, TRT_P_I16, TRT_P_I32, TRT_P_I64,
  TRT_P_U8, TRT_P_U16, TRT_P_U32, TRT_P_U64,
  TRT_P_FP16, TRT_P_BF16, TRT_P_FP32, TRT_P_FP64, /* passed as packed bits */
  TRT_P_ONE       /* specialised to the constant 1 and not passed: checked only */
};

typedef struct trt_launch_param {
  int32_t kind;
  int32_t slot;   /* >= 0: the value in this frame slot; TRT_PARAM_CONST: the constant below */
  int64_t ival;
  double dval;
  int32_t div16;  /* precondition: the pointer is 16-byte aligned / the int is a multiple of 16 */
  int32_t dtype;  /* TRT_P_PTR: the c10::ScalarType the CUBIN was compiled for
                     (TRT_DTYPE_ANY: any) */
} trt_launch_param;
#define TRT_PARAM_CONST (-1)
#define TRT_DTYPE_ANY (-1)

/* One part of a selecting launch's key, read from a frame slot. */
enum {
  TRT_K_PTR = 0,    /* a tensor: 1 if its data pointer is 16-byte aligned, else 0 */
  TRT_K_INT = 1,    /* an int (or bool): its value, or its class (transform below) */
  TRT_K_DOUBLE = 2  /* a float: its bits */
};
/* What an int key part keeps of the value.  Every transform but RAW adds a
   second key word, the value's specialisation class (== 1, multiple of 16,
   32/64-bit range): Triton compiles one CUBIN per class.  CLASS: an operand
   only Triton's specialisation reads (not in the autotuner's key); LOG2 and
   ALIGN32: a key operand the autotuner buckets (FlagGems' LibTuner "log":
   2 ** ceil(log2 v), "align32": ceil(v / 32) * 32). */
enum {
  TRT_KT_RAW = 0,
  TRT_KT_CLASS = 1,
  TRT_KT_LOG2 = 2,
  TRT_KT_ALIGN32 = 3
};
typedef struct trt_launch_key {
  int32_t slot;
  int32_t kind;
  int32_t transform; /* TRT_KT_*; TRT_K_INT only */
} trt_launch_key;

typedef struct trt_launch_spec {
  const char *name;      /* kernel symbol in the CUBIN */
  const char *cubin;
  int64_t cubin_size;
  int32_t num_warps, num_ctas, shared, cooperative, pdl;
  int32_t nparams;
  const trt_launch_param *params;
  /* A selecting launch (an @triton.autotune kernel whose key reads values
     that change within the version): `resolver` is not NULL and the CUBIN
     above is unused.  Each call computes its key from the `nkeys` slots
     (every value Triton's autotuner, binder and specialisation read) and
     launches the variant the key maps to.  A key seen for the first time
     calls resolver(key, operands, grids) -> (launched, variant | None):
     Triton's own autotuner picks the configuration (benchmarking a new key as
     eager does) and `variant` = (symbol, cubin, num_warps, num_ctas, shared,
     cooperative, pdl, grid_index, params) is kept for the key.  `launched`
     says the resolver already launched this call's kernel.  Borrowed: the
     version's constant pool owns it. */
  PyObject *resolver;
  int32_t nkeys;
  const trt_launch_key *keys;
} trt_launch_spec;

/* launch_call's result when a precondition failed (nothing was launched). */
#define TRT_PRECONDITION 1

/* A frame holds the IValues of one version's run (tensors, ints, lists). */
typedef struct trt_frame trt_frame;
/* A prepared call of one ATen operator through the PyTorch dispatcher. */
typedef struct trt_op trt_op;

/* How an operator argument is encoded in trt_op_new. */
enum {
  TRT_ARG_SLOT = 0,   /* the value in frame slot `i` */
  TRT_ARG_NONE = 1,
  TRT_ARG_INT = 2,    /* i (also bool, dtype, layout, memory_format) */
  TRT_ARG_DOUBLE = 3, /* d */
  TRT_ARG_BOOL = 4,   /* i != 0 */
  TRT_ARG_STR = 5,    /* s */
  TRT_ARG_DEVICE = 6, /* s, e.g. "cuda:0" */
  TRT_ARG_LIST = 7    /* n elements: items[k] >= 0 is a slot, TRT_ITEM_CONST
                         takes ivals[k], TRT_ITEM_NONE is None; the element type
                         comes from the operator's schema */
};
/* trt_op_new flags: run the operator with the Autograd and ADInplaceOrView
   dispatch keys excluded (as ATen's autograd kernels redispatch), while no
   forward-mode AD level is active; the lowering sets it only where no
   autograd records and no alias of the result leaves the program. */
#define TRT_OP_BELOW_AUTOGRAD 1
#define TRT_ITEM_CONST (-1)
#define TRT_ITEM_NONE (-2)

typedef struct trt_arg {
  int32_t kind;
  int32_t n;
  int64_t i;
  double d;
  const char *s;
  const int32_t *items;
  const int64_t *ivals;
} trt_arg;

/*
 * The runtime's entry points, handed to an SCM in trident_scm_init.
 * "borrowed"/"new" refer to Python references as in the CPython API.
 */
typedef struct trt_api {
  int32_t abi_version;

  /* ---- guards ---- */
  /* 1 if `obj` matches `spec`, 0 if not (never sets an exception).  On a
     match writes sizes[ndim], strides[ndim], storage_offset to `meta`. */
  int (*tensor_match)(PyObject *obj, const trt_tensor_spec *spec, int64_t *meta);
  /* Writes sizes, strides and storage offset of a tensor known to match. */
  void (*tensor_meta)(PyObject *obj, int64_t *meta, int32_t ndim);
  /* Size (kind TRT_PROP_SIZE), stride (TRT_PROP_STRIDE) or storage offset
     (TRT_PROP_OFFSET) of dimension `dim` of a tensor that has no tensor guard
     (e.g. the `_base` of an input view).  Sets *ok = 0 if `obj` is not a
     tensor or has no such dimension. */
  int64_t (*tensor_prop)(PyObject *obj, int32_t kind, int32_t dim, int *ok);
  /* Snapshot the current global state.  An SCM takes it once per call and
     compares it with each version's capture-time snapshot (memcmp), so a
     call that tries many versions reads the thread state once. */
  void (*global_state_now)(trt_global_state *out);

  /* ---- frames ---- */
  trt_frame *(*frame_acquire)(int32_t nslots);
  void (*frame_release)(trt_frame *f);
  /* Store a Python tensor (borrowed) / an int / a double into a slot. */
  void (*frame_set_tensor)(trt_frame *f, int32_t slot, PyObject *tensor);
  void (*frame_set_int)(trt_frame *f, int32_t slot, int64_t v);
  void (*frame_set_double)(trt_frame *f, int32_t slot, double v);
  /* Read an int-valued slot (an operator that returned an int). */
  int64_t (*frame_get_int)(trt_frame *f, int32_t slot);
  /* slot `dst` = element `index` of the list or tuple in slot `src`. */
  int (*frame_list_item)(trt_frame *f, int32_t src, int64_t index, int32_t dst);
  /* New reference to the Python object for a slot: a tensor keeps its
     Python identity (an input mutated in place comes back as itself). */
  PyObject *(*frame_to_py)(trt_frame *f, int32_t slot);

  /* ---- operators ---- */
  /* Resolve `name.overload` and encode its arguments once, at SCM load.
     NULL with a Python exception on failure. */
  trt_op *(*op_new)(const char *name, const char *overload, int32_t nargs,
                    const trt_arg *args, int32_t nouts, const int32_t *outs,
                    int32_t flags);
  void (*op_free)(trt_op *op);
  /* Run through the dispatcher; outputs go to the op's out slots. */
  int (*op_call)(trt_op *op, trt_frame *f);

  /* ---- Triton launches ---- */
  /* Copy the CUBIN and parameter layout; the module is loaded lazily, once
     per device, on the first launch.  NULL with a Python exception. */
  trt_launch *(*launch_new)(const trt_launch_spec *spec);
  /* Check the preconditions, then launch on the current stream of the
     tensors' device.  TRT_OK, TRT_PRECONDITION (nothing launched, no
     exception), or TRT_FAIL with a Python exception. */
  int (*launch_call)(trt_launch *l, trt_frame *f, int64_t gx, int64_t gy, int64_t gz);
  void (*launch_free)(trt_launch *l);
  /* A selecting launch (resolver != NULL): `grids` holds ngrids x 3 grid
     dimensions, one row per autotune configuration; the selected variant
     names its row.  Returns as launch_call. */
  int (*launch_select)(trt_launch *l, trt_frame *f, const int64_t *grids, int32_t ngrids);

  /* ---- modes ---- */
  /* Enter the mode a whole version runs under (TRT_MODE_*: the function's own
     @torch.no_grad(), @torch.enable_grad() or @torch.inference_mode()); returns a
     token for mode_exit, or NULL with a Python exception.  Exits are LIFO. */
  void *(*mode_enter)(int32_t mode);
  void (*mode_exit)(void *token);

  /* ---- guard errors ---- */
  /* Called where a guard's read raised (an exception is set).  An ordinary exception
     (an Exception other than MemoryError) is a failed guard, as in Dynamo: cleared.  A
     KeyboardInterrupt, SystemExit or MemoryError is taken out of the error indicator (the
     other versions' guards run as usual) and kept for the thread: the call raises it when
     the SCM returns, whatever the SCM returned. */
  void (*guard_error)(void);
} trt_api;

/*
 * What an SCM shared object exports (generated code defines these):
 *
 *   int trident_scm_init(const trt_api *api, PyObject *consts, void **state);
 *       Resolve operators, keep the constant tuple.  0 on success, -1 with a
 *       Python exception.
 *   PyObject *trident_scm_call(void *state, PyObject *const *locals, int *status);
 *       Evaluate versions in order; see TRT_HIT / TRT_MISS / TRT_ERROR.
 *       `locals` holds the bound parameters, then the closure cell contents.
 *   int trident_scm_stats(void *state, int64_t *hits, int32_t *failed_guard, int32_t n);
 *       Copy per-version hit counts and the index of the guard that last
 *       failed (-1: none yet); returns the number of versions.
 *   int trident_scm_profile(void *state, int64_t *out, int32_t n);
 *       Copy per version eight counters: ns in guards and in the program over its hits,
 *       misses, ns of guards on misses (written only by versions generated with
 *       TRIDENT_PROFILE=1, zero otherwise); its environment guards, their records, how many
 *       of them are evaluated on every call, whether the block is cached.  Returns the
 *       number of versions.
 *   void trident_scm_free(void *state);
 */
typedef int (*trt_scm_init_fn)(const trt_api *, PyObject *, void **);
typedef PyObject *(*trt_scm_call_fn)(void *, PyObject *const *, int *);
typedef int (*trt_scm_stats_fn)(void *, int64_t *, int32_t *, int32_t);
typedef int (*trt_scm_profile_fn)(void *, int64_t *, int32_t);
typedef void (*trt_scm_free_fn)(void *);

#ifdef __cplusplus
}
#endif
#endif /* TRIDENT_RT_H */
