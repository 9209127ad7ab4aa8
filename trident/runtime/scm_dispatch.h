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
 *   scm_main.c     the four exported trident_scm_* entries (fixed source,
 *                  compiled once per cache).
 *   scm.c          the dispatcher (generated, the only unit compiled on every
 *                  rebuild): trt_scm_dispatch, which calls the versions'
 *                  functions directly and in order, and the version tables.
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
 * that is not TRT_MISS wins. */
TRT_HIDDEN PyObject *trt_scm_dispatch(void *const *v, PyObject *const *L,
                                      const trt_global_state *now, int *status);

#endif /* TRIDENT_SCM_DISPATCH_H */
