/*
 * scm_prelude.h -- small helpers every version unit of an SCM includes
 * (and scm_main.c; the dispatcher unit includes only scm_dispatch.h).
 *
 * Source loads return NEW references or NULL (with no Python error left
 * set): a load that fails is a failed guard, i.e. a specialization miss,
 * never an exception, except KeyboardInterrupt, SystemExit and MemoryError,
 * which the call raises (trt_guard_clear).  Integer helpers follow Python's semantics.
 */
#ifndef TRIDENT_SCM_PRELUDE_H
#define TRIDENT_SCM_PRELUDE_H

#include "trident_rt.h"

#include <math.h>
#include <string.h>

#define TRT_EXPORT __attribute__((visibility("default")))
/* A guard evaluation that runs only when something changed: kept out of line. */
#define TRT_COLD __attribute__((noinline, cold))

/* The units of one SCM and their prototypes (no Python.h needed there). */
#include "scm_dispatch.h"

/* The runtime's api table: each unit sets it in its init (a tentative definition; the
   unit's own `static const trt_api *api;` is the same object). */
static const trt_api *api;

/* A guard's read raised: an ordinary exception is a failed guard (cleared); a
   KeyboardInterrupt, SystemExit or MemoryError reaches the caller (api->guard_error). */
static inline void trt_guard_clear(void) { api->guard_error(); }

/* Monotonic nanoseconds, for TRIDENT_PROFILE=1 versions only. */
#include <time.h>
static inline int64_t trt_now_ns(void) {
  struct timespec t;
  if (clock_gettime(CLOCK_MONOTONIC, &t) != 0) return 0;
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* ---- guard helpers -------------------------------------------------------
 * The helpers declared here without a body are defined once, in scm_main.c, and called from
 * the units: each reads Python objects through the C API (a lookup, a call), which a direct
 * call adds nothing to, while compiled inline into every version's unit they made up most of
 * its compile (gcc 12, -O1: a FlagGems wrapper's 58 KB unit 128 ms, of which a logger guard's
 * helpers alone 20 ms).  Cheap ones the hot path runs on every call (an argument tuple's
 * item, integer arithmetic) stay inline. */

/* globals[name], falling back to builtins[name]. */
PyObject *trt_load_global(PyObject *globals, PyObject *builtins, PyObject *name);

PyObject *trt_getattr(PyObject *o, PyObject *name);

static inline PyObject *trt_getitem_int(PyObject *o, Py_ssize_t i) {
  if (!o) return NULL;
  PyObject *v;
  if (PyTuple_CheckExact(o)) {
    if (i < 0 || i >= PyTuple_GET_SIZE(o)) return NULL;
    v = PyTuple_GET_ITEM(o, i);
    Py_INCREF(v);
    return v;
  }
  if (PyList_CheckExact(o)) {
    if (i < 0 || i >= PyList_GET_SIZE(o)) return NULL;
    v = PyList_GET_ITEM(o, i);
    Py_INCREF(v);
    return v;
  }
  PyObject *k = PyLong_FromSsize_t(i);
  if (!k) { trt_guard_clear(); return NULL; }
  v = PyObject_GetItem(o, k);
  Py_DECREF(k);
  if (!v) trt_guard_clear();
  return v;
}

PyObject *trt_getitem_obj(PyObject *o, PyObject *key);

/* d[key] read from the dict's own storage, as Dynamo's dict_getitem accessor reads it
   (PyDict_GetItem): never a subclass's __getitem__ or a defaultdict's __missing__, so the
   guard inserts nothing and runs no user code.  A new reference; NULL (no error set) when d is
   not a dict (exact or subclass) or has no such key; an error from a key's hash or equality
   fails the guard (trt_guard_clear). */
PyObject *trt_dict_item(PyObject *d, PyObject *key);

/* A set equal to `value` (whose elements are exact str, bytes or int)
   with every element of an exact type among those: Python's own equality
   would also accept {True} or {1.0} for {1}. */
int trt_set_equals(PyObject *o, PyObject *value);

/* Exact type and equal value; never leaves an exception set. */
int trt_equals(PyObject *o, PyObject *type, PyObject *value);

/* Dynamo's `math.isnan(x)` over a float symbol: 1 or 0 for a float, a failed guard (ok = 0)
   for anything else (or a source that could not be read). */
/* The value of a Python float (a dynamic float argument in a shape guard); anything else
   fails the guard. */
static inline double trt_pyfloat(PyObject *o, int *ok) {
  if (!o || !PyFloat_CheckExact(o)) {
    *ok = 0;
    return 0.0;
  }
  return PyFloat_AS_DOUBLE(o);
}

static inline int64_t trt_float_isnan(PyObject *o, int *ok) {
  if (!o || !PyFloat_CheckExact(o)) {
    *ok = 0;
    return 0;
  }
  return isnan(PyFloat_AS_DOUBLE(o)) ? 1 : 0;
}

int trt_len_is(PyObject *o, PyObject *type, Py_ssize_t n);

/* dict keys equal `keys` (a tuple), in order. */
int trt_dict_keys(PyObject *o, PyObject *keys);

int trt_not_in_dict(PyObject *o, PyObject *name);

/* hasattr(o, name): 1 or 0; -1 (a failed guard either way) when o is missing or the lookup
   raised something other than AttributeError, which hasattr would propagate. */
int trt_has_attr(PyObject *o, PyObject *name);

/* fn(o, arg) is True; an exception counts as a failed check. */
int trt_call_check(PyObject *o, PyObject *fn, PyObject *arg);

/* 1 if key in o, 0 if not, -1 when o is not an exact-or-sub dict (set) or
   the lookup raises (the guard then fails: a miss). */
int trt_dict_has(PyObject *o, PyObject *key);

int trt_set_has(PyObject *o, PyObject *key);

/* The i-th key (value = 0) or value (value = 1) of dict d, in order, as a
   new reference: `list(dict.keys(d))[i]`; NULL (no error set) when d is not
   a dict or has no i-th entry. */
PyObject *trt_dict_entry_at(PyObject *d, Py_ssize_t i, int value);

/* `o()` as a new reference; NULL (no error set) when o is NULL or raises. */
PyObject *trt_call_noargs(PyObject *o);

/* `var.get()` (dflt NULL) or `var.get(dflt)` of a contextvars.ContextVar, as a new
   reference; NULL (no error set) when `var` is not a ContextVar or is unset with no default. */
PyObject *trt_contextvar_get(PyObject *var, PyObject *dflt);

/* `not logger.isEnabledFor(level)`, read as Logger.isEnabledFor reads it:
   `disabled`, then the level's entry in `_cache` (cleared by logging on any
   level change); a level not cached yet asks isEnabledFor itself. */
int trt_logger_quiet(PyObject *lg, PyObject *n_disabled, PyObject *n_cache, PyObject *n_enabled,
                     PyObject *level);

/* An exact Python int as int64; *ok = 0 if it is not one or overflows. */
static inline int64_t trt_pyint(PyObject *o, int *ok) {
  if (!o || !PyLong_CheckExact(o)) { *ok = 0; return 0; }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) { trt_guard_clear(); *ok = 0; return 0; }
  return (int64_t)v;
}

static inline int64_t trt_floordiv(int64_t a, int64_t b, int *ok) {
  if (b == 0) { *ok = 0; return 0; }
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
  return q;
}

static inline int64_t trt_mod(int64_t a, int64_t b, int *ok) {
  if (b == 0) { *ok = 0; return 0; }
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/* Python's << and >> on int64; a negative count or an overflowing left shift fails. */
static inline int64_t trt_shift(int64_t a, int64_t b, int left, int *ok) {
  if (b < 0) { *ok = 0; return 0; }
  if (!left) return b >= 63 ? (a < 0 ? -1 : 0) : (a >> b);
  if (b >= 63 || (a != 0 && (a > (INT64_MAX >> b) || a < (INT64_MIN >> b)))) { *ok = 0; return 0; }
  return (int64_t)((uint64_t)a << b);
}

static inline int64_t trt_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t trt_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* + - * and negation on int64 where Python's ints do not overflow: a result beyond int64
   fails (*ok = 0: a guard misses, a program's integer misses) instead of wrapping. */
static inline int64_t trt_add(int64_t a, int64_t b, int *ok) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) { *ok = 0; return 0; }
  return r;
}
static inline int64_t trt_sub(int64_t a, int64_t b, int *ok) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) { *ok = 0; return 0; }
  return r;
}
static inline int64_t trt_mul(int64_t a, int64_t b, int *ok) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) { *ok = 0; return 0; }
  return r;
}
static inline int64_t trt_neg(int64_t a, int *ok) {
  if (a == INT64_MIN) { *ok = 0; return 0; }
  return -a;
}
static inline int64_t trt_abs(int64_t a, int *ok) {
  if (a == INT64_MIN) { *ok = 0; return 0; }
  return a < 0 ? -a : a;
}

/* Python's float arithmetic (ir.FloatExpr).  + - * are C's (IEEE-754, as Python's; units are
   compiled with -ffp-contract=off, so no fused multiply-add changes a rounding).  Where Python
   raises or leaves float, *ok = 0 (a miss: the call then runs as eager does). */
#define TRT_EXACT_INT (INT64_C(1) << 53)
/* int / int: Python divides exactly-rounded; for operands within 2**53 that is the double
   division.  Beyond, or by zero (ZeroDivisionError), it fails. */
static inline double trt_idiv(int64_t a, int64_t b, int *ok) {
  if (b == 0 || a > TRT_EXACT_INT || a < -TRT_EXACT_INT || b > TRT_EXACT_INT ||
      b < -TRT_EXACT_INT) { *ok = 0; return 0; }
  return (double)a / (double)b;
}
/* An int compared with a float: exact within 2**53 (Python compares exactly; beyond, fails). */
static inline double trt_exact_double(int64_t a, int *ok) {
  if (a > TRT_EXACT_INT || a < -TRT_EXACT_INT) { *ok = 0; return 0; }
  return (double)a;
}
static inline double trt_fdiv(double a, double b, int *ok) {
  if (b == 0.0) { *ok = 0; return 0; }  /* ZeroDivisionError */
  return a / b;
}
static inline double trt_fsqrt(double a, int *ok) {
  if (!(a >= 0.0) || isinf(a)) { *ok = 0; return 0; }  /* ValueError (and NaN, inf: Python's) */
  return sqrt(a);
}
/* Python's int ** int for a non-negative exponent (a negative one makes a float: FloatBin);
   beyond int64 fails. */
static inline int64_t trt_ipow(int64_t a, int64_t b, int *ok) {
  if (b < 0) { *ok = 0; return 0; }
  int64_t r = 1;
  while (b) {
    if ((b & 1) && __builtin_mul_overflow(r, a, &r)) { *ok = 0; return 0; }
    b >>= 1;
    if (b && __builtin_mul_overflow(a, a, &a)) { *ok = 0; return 0; }
  }
  return r;
}
/* math.trunc (int()), math.floor, math.ceil, round() (half to even, as Python's) of a
   double, mode 0-3; NaN, inf or a value beyond int64 fails (Python: an error or a big int). */
static inline int64_t trt_float_to_int(double x, int mode, int *ok) {
  double r = mode == 0 ? trunc(x) : mode == 1 ? floor(x) : mode == 2 ? ceil(x) : nearbyint(x);
  /* -2**63 <= r < 2**63; false for NaN */
  if (!(r >= -9223372036854775808.0 && r < 9223372036854775808.0)) { *ok = 0; return 0; }
  return (int64_t)r;
}
/* Finite operands only (Python special-cases inf and NaN); 0 ** negative is Python's
   ZeroDivisionError, negative ** non-integer its complex result, an infinite result its
   OverflowError. */
static inline double trt_fpow(double a, double b, int *ok) {
  if (!isfinite(a) || !isfinite(b) || (a == 0.0 && b < 0.0) || (a < 0.0 && floor(b) != b)) {
    *ok = 0;
    return 0;
  }
  double r = pow(a, b);
  if (!isfinite(r)) { *ok = 0; return 0; }
  return r;
}

/* ---- cheap loads of attributes guards often read ---------------------- */

/* type.__dict__ without allocating a mappingproxy; anything else: getattr. */
PyObject *trt_attr_dict(PyObject *o, PyObject *name);

/* object.__getattribute__(o, name): the generic lookup (type MRO descriptors, then the
   instance dict), past a class's own __getattribute__ / __getattr__. */
PyObject *trt_generic_getattr(PyObject *o, PyObject *name);

/* A Python function's __defaults__ / __kwdefaults__ / __code__ (`which`: TRT_FN_*). */
enum { TRT_FN_DEFAULTS = 0, TRT_FN_KWDEFAULTS = 1, TRT_FN_CODE = 2 };
PyObject *trt_attr_func(PyObject *o, PyObject *name, int which);

/* ---- environment guards, cached on version tags -------------------------
 * A guard whose every source starts at a global or a constant (`G['m'].f.cfg.mode == 'a'`,
 * `type(G['f']).__call__ is ...`) depends only on the interpreter's state, not on the call's
 * arguments.  A version evaluates all of these guards together, in a cold function, while
 * recording what each read depended on (an "environment block", trt_envblock):
 *   DICT d        a dict read (globals, a module's, an instance's, a class's, a dict value):
 *                 its version tag (CPython 3.10-3.12: unique across dicts, changed by every
 *                 mutation);
 *   CLASS o, t    the class of an object read through (o.__class__ = X changes no dict);
 *   TYPETAG t     a class whose attributes were looked up: its version tag (any change of
 *                 the class or of a base clears it);
 *   INSTDICT o, d the instance dict an attribute was read from is still o's dict.
 * When every guard passed, the block is committed; later calls re-evaluate nothing while
 * all recorded tags hold.  A guard that read something no tag covers (a list item, a
 * function's __defaults__, a property, an object with its own __getattr__...) is marked
 * live and evaluated on every call, as are all of them where the interpreter has no dict
 * tags (3.13+).  The evaluation and the check of the tags (trt_envblock_hit) are scm_main.c's. */
#if PY_VERSION_HEX < 0x030D0000
#define TRT_HAVE_DICT_TAGS 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static inline uint64_t trt_dict_tag(PyObject *d) { return ((PyDictObject *)d)->ma_version_tag; }
#pragma GCC diagnostic pop
static inline uint64_t trt_type_tag(PyObject *t) {
  PyTypeObject *tp = (PyTypeObject *)t;
  return (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
}
#else
#define TRT_HAVE_DICT_TAGS 0
static inline uint64_t trt_dict_tag(PyObject *d) { (void)d; return 0; }
static inline uint64_t trt_type_tag(PyObject *t) { (void)t; return 0; }
#endif

enum { TRT_ER_DICT = 0, TRT_ER_CLASS = 1, TRT_ER_TYPETAG = 2, TRT_ER_INSTDICT = 3,
       TRT_ER_FUNCATTR = 4 /* 4 + TRT_FN_*: a function's __defaults__/__kwdefaults__/__code__ */ };

/* Where a live guard's evaluation starts: after its last step whose reads the records
 * cover (the object that step loaded, the same object while they hold). */
typedef struct trt_envanchor {
  int step;      /* -1: from the root */
  PyObject *obj; /* strong */
} trt_envanchor;

typedef struct trt_envrec {
  int kind;
  PyObject *obj;  /* strong */
  PyObject *aux;  /* strong or NULL: CLASS the class, INSTDICT the dict */
  uint64_t tag;   /* DICT, TYPETAG */
} trt_envrec;

typedef struct trt_envblock {
  int valid;           /* committed: 1 its guards passed with the state recorded, 2 guard
                          `failed` failed and reads nothing else */
  int failed;
  int n, cap;          /* records */
  int uncovered;       /* the guard being recorded read something no record covers */
  int busy;            /* being recorded (a re-entrant call evaluates without recording) */
  int nguards;         /* guards in the block */
  int nlive;           /* of them, evaluated on every call (-1: the last evaluation failed) */
  trt_envrec *rec;     /* malloc'd */
  unsigned char *live; /* per guard of the block */
  trt_envanchor *anchor; /* per guard of the block */
} trt_envblock;

/* The first member of every version's state: what trident_scm_stats reads. */
typedef struct trt_version_head {
  int64_t hits;   /* calls this version served */
  int32_t failed; /* index of the guard that last failed, or -1 */
  /* Written only by a version generated with TRIDENT_PROFILE=1 (trident_scm_profile reads
   * them): nanoseconds in its guards and in its program over its hits, and its misses and
   * the nanoseconds its guards took on them. */
  int64_t ns_guards, ns_program, misses, ns_misses;
  trt_envblock eb; /* the version's environment guards (zero until they first ran) */
} trt_version_head;

/* One guard of a block, as data (the version unit holds only these tables; scm_main.c's
 * interpreter evaluates them): its loads from the root, then its check.  A same-object guard
 * has two load chains, the first nsteps_a steps and the rest. */
enum { TRT_ES_GLOBAL, TRT_ES_CONST, TRT_ES_ATTR, TRT_ES_ITEM_INT, TRT_ES_ITEM_STR, TRT_ES_TYPEOF,
       TRT_ES_DICT_KEY_AT, TRT_ES_DICT_VALUE_AT, TRT_ES_DICT_ITEM };
typedef struct trt_envstep {
  int op;
  int32_t arg; /* name index (GLOBAL, ATTR, ITEM_STR), constant index (CONST; DICT_ITEM: the
                  key), item or entry index */
} trt_envstep;

enum { TRT_EG_ID, TRT_EG_EQ, TRT_EG_TYPE, TRT_EG_SAME, TRT_EG_NOTIN, TRT_EG_CONTAINS,
       TRT_EG_LEN, TRT_EG_DICTKEYS };
enum { TRT_EGF_UNCOVERED = 1, /* what the check reads has no tag: live */
       TRT_EGF_DICT = 2,      /* the check reads the value's contents, an exact dict */
       TRT_EGF_PRESENT = 4,   /* contains: the key must be present */
       TRT_EGF_SET = 8 };     /* contains: in a set, not a dict */
#define TRT_ENV_STEPS 32 /* longest chain a block takes (longer ones stay inline) */
typedef struct trt_envg_desc {
  int kind, flags;
  int nsteps, nsteps_a;     /* all steps; of them, the first chain's (same-object) */
  const trt_envstep *steps;
  int32_t c0, c1;           /* constants: id/eq/type/len/dict-keys/contains' value or type */
  int32_t name;             /* not-in-dict's name index */
  int64_t n;                /* length */
} trt_envg_desc;

/* What the tables refer to: the version's constants, names, globals and builtins. */
typedef struct trt_envctx {
  PyObject *const *K;
  PyObject *const *N;
  PyObject *globals, *builtins;
} trt_envctx;

int trt_envblock_hit(const trt_envblock *b);

/* Defined once, in scm_main.c.  trt_envblock_eval evaluates the n guards d[i] (guard
 * index ix[i] of the version) with recording and commits the block when all pass; on a
 * failure it stores the failed guard's index in *failed and returns 0.  trt_envblock_live
 * evaluates the live ones only.  trt_envblock_free releases the records. */
int trt_envblock_eval(trt_envblock *b, const trt_envg_desc *d, const int *ix, int n,
                      const trt_envctx *ctx, int32_t *failed);
int trt_envblock_live(trt_envblock *b, const trt_envg_desc *d, const int *ix, int n,
                      const trt_envctx *ctx, int32_t *failed);
void trt_envblock_free(trt_envblock *b);

/* Recording loads (new references, NULL on failure with no exception set), each equal in
 * value to its plain counterpart above (trt_load_global, trt_getattr / trt_attr_dict /
 * trt_attr_func, trt_getitem_*, trt_dict_item, TypeOf, trt_dict_entry_at). */
PyObject *trt_r_global(trt_envblock *b, PyObject *globals, PyObject *builtins, PyObject *name);
PyObject *trt_r_attr(trt_envblock *b, PyObject *o, PyObject *name);
PyObject *trt_r_item_int(trt_envblock *b, PyObject *o, Py_ssize_t i);
PyObject *trt_r_item_obj(trt_envblock *b, PyObject *o, PyObject *key);
PyObject *trt_r_dict_item(trt_envblock *b, PyObject *o, PyObject *key);
PyObject *trt_r_typeof(trt_envblock *b, PyObject *o);
PyObject *trt_r_dict_entry_at(trt_envblock *b, PyObject *o, Py_ssize_t i, int value);
/* What a guard checks on the value it loaded, recorded: `o` is an exact dict whose contents
 * the check reads (NotInDict reads o's instance dict: trt_r_instdict), an object whose class
 * the check reads, or something no record covers. */
void trt_r_dict(trt_envblock *b, PyObject *o);
PyObject *trt_r_instdict(trt_envblock *b, PyObject *o); /* o's instance dict (new ref) */
void trt_r_class(trt_envblock *b, PyObject *o);
void trt_r_uncovered(trt_envblock *b);

#endif /* TRIDENT_SCM_PRELUDE_H */
