/*
 * scm_dispatch.h -- how the units of one SCM fit together.
 *
 * An SCM shared object is linked from several translation units so that a
 * rebuild after a specialization miss compiles only what changed:
 *
 *   version_<i>.c  one per version (generated): its guards, program and
 *                  result, and its own init and free.  Its text depends on
 *                  that version alone, so its object is compiled once and
 *                  taken from the build cache by every later rebuild.
 *   scm_main.c     the five exported trident_scm_* entries (fixed source,
 *                  compiled once per cache).
 *   scm.c          the dispatcher (generated, the only unit compiled on every
 *                  rebuild): trt_scm_dispatch, which calls the versions'
 *                  functions directly and in order, the version tables, and
 *                  the SCM's dispatch index (trt_scm_index, below).
 *
 * The dispatcher includes only this header, not Python.h (whose parsing
 * would be most of its compile time): the types below are opaque here.
 * Units that include scm_prelude.h see them completed by Python.h and
 * trident_rt.h; C11 allows the repeated typedefs, and the compiler checks
 * they agree.  Everything declared here is hidden: the calls between units
 * are direct, and only the trident_scm_* entries are exported.
 */
#ifndef TRIDENT_SCM_DISPATCH_H
#define TRIDENT_SCM_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct _object PyObject;                  /* Python.h */
typedef struct trt_api trt_api;                   /* trident_rt.h */
typedef struct trt_global_state trt_global_state; /* trident_rt.h */

#define TRT_HIDDEN __attribute__((visibility("hidden")))

/* TRT_MISS of trident_rt.h (scm_main.c checks that they are equal). */
#define TRT_SCM_MISS 1

/* The functions of version i:
 *   trident_version_<i>(state, L, now, status): the guards, then the program;
 *     the result on TRT_HIT, NULL on TRT_MISS / TRT_ERROR (then with a Python
 *     exception set);
 *   trident_version_<i>_init(api, K, globals, builtins, &state): K is this
 *     version's constant pool (borrowed: the SCM's state owns the tuple);
 *     0, or -1 with a Python exception set;
 *   trident_version_<i>_free(state). */
#define TRT_DECLARE_VERSION(i)                                                              \
  TRT_HIDDEN PyObject *trident_version_##i(void *st, PyObject *const *L,                   \
                                           const trt_global_state *now, int *status);      \
  TRT_HIDDEN int trident_version_##i##_init(const trt_api *a, PyObject *const *K,          \
                                            PyObject *globals, PyObject *builtins,         \
                                            void **out);                                   \
  TRT_HIDDEN void trident_version_##i##_free(void *st);

typedef PyObject *trt_version_fn(void *st, PyObject *const *L, const trt_global_state *now,
                                 int *status);
typedef int trt_version_init_fn(const trt_api *a, PyObject *const *K, PyObject *globals,
                                PyObject *builtins, void **out);
typedef void trt_version_free_fn(void *st);

/* Defined by the generated dispatcher. */
TRT_HIDDEN extern const int trt_scm_nversions;
/* Where each version's pool starts in the constant tuple (after globals, builtins). */
TRT_HIDDEN extern const int trt_scm_bases[];
TRT_HIDDEN extern trt_version_init_fn *const trt_scm_inits[];
TRT_HIDDEN extern trt_version_free_fn *const trt_scm_frees[];
/* Try the versions in order, each with its state v[i]; the first status
 * that is not TRT_MISS wins.  The whole dispatch of an SCM without a
 * dispatch index (below). */
TRT_HIDDEN PyObject *trt_scm_dispatch(void *const *v, PyObject *const *L,
                                      const trt_global_state *now, int *status);

/*
 * The dispatch index: which versions a call can match, found from its tensor
 * arguments' metadata instead of by trying every version.
 *
 * A version whose guards include tensor_match guards on plain arguments L[i]
 * has a key: per such tensor, its exact type, dispatch keys, dtype, device,
 * requires_grad and ndim, and the values of the sizes and strides the guard
 * fixes.  Versions that agree on all of it but those values form a group.
 * For a call, a group's probes run tensor_match with the group's spec (all
 * sizes and strides TRT_DYN) on each of its tensors, which also reads their
 * sizes and strides; the values at the group's static positions make the
 * call's key, and a binary search in the group's sorted keys gives the
 * versions with that key.  A version whose guards hold for the call passes
 * the probe with exactly its own key, so it is always among the candidates:
 * the key is a necessary condition, never a sufficient one (the candidate's
 * own guards decide).
 *
 * scm_main.c tries the candidates of every group and the versions in no
 * group ("keyless") merged in ascending dispatch position, so the first
 * version whose guards pass wins, as in the ordered scan.  When none does, it
 * tries every other version in order, so that after a miss each version has
 * recorded the guard that failed it (trident's miss reasons read them), and
 * a version the index left out by mistake would still be found.  No version
 * runs twice in one call.  An SCM with few versions has no index
 * (ngroups == 0): trt_scm_dispatch alone, the ordered scan.
 */
#define TRT_SCM_INDEX_NDIM 16    /* a probed tensor has at most this many dimensions */
#define TRT_SCM_INDEX_WIDTH 64   /* a group's key has at most this many values */
#define TRT_SCM_INDEX_GROUPS 32  /* an index has at most this many groups */

typedef struct trt_scm_probe {
  int32_t local;          /* the tensor is L[local] */
  int32_t type_k;         /* its exact type: an index into the SCM's constant tuple */
  int32_t dtype, device_type, device_index, requires_grad; /* as trt_tensor_spec */
  uint64_t dispatch_keys;
  int32_t ndim;           /* <= TRT_SCM_INDEX_NDIM */
  int32_t nkey;           /* how many of its sizes and strides are in the key */
  const int8_t *pos;      /* each one's index in tensor_match's meta: d is size d,
                             ndim + d is stride d */
} trt_scm_probe;

typedef struct trt_scm_group {
  int32_t nprobes;
  const trt_scm_probe *probes;
  int32_t width;          /* the key's length: the probes' nkey summed */
  int32_t nkeys;          /* distinct keys */
  const int64_t *keys;    /* nkeys rows of width values, ascending (lexicographic) */
  const int32_t *start;   /* nkeys + 1: the versions of key k are vers[start[k]..start[k+1]) */
  const int32_t *vers;    /* dispatch positions, ascending within each key */
} trt_scm_group;

typedef struct trt_dispatch_index {
  int32_t ngroups;        /* 0: no index, the ordered scan alone */
  const trt_scm_group *groups;
  int32_t nkeyless;       /* versions in no group, ascending */
  const int32_t *keyless;
  trt_version_fn *const *fns; /* each version's function, by dispatch position */
} trt_dispatch_index;

/* Defined by the generated dispatcher. */
TRT_HIDDEN extern const trt_dispatch_index trt_scm_index;

#endif /* TRIDENT_SCM_DISPATCH_H */
