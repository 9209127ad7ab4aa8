/*
 * scm_main.c -- the entry points every SCM exports (see trident_rt.h).
 *
 * The same in every SCM, so it is compiled once per build cache and linked
 * with the version units and the generated dispatcher (scm_dispatch.h
 * describes the pieces).  The state of one loaded SCM is the constant tuple
 * and each version's own state; nothing here is static except the runtime's
 * api table, which is the same for every SCM of a process.
 */
#include "scm_prelude.h"

#include <stdlib.h>

_Static_assert(TRT_SCM_MISS == TRT_MISS, "scm_dispatch.h disagrees with trident_rt.h");

static const trt_api *api;

int trt_envg_chain(trt_envcache *c, PyObject *globals, PyObject *builtins, PyObject *const *names,
                   const int *ix, int n, PyObject *root, PyObject *expect, PyObject *type) {
  trt_envcache_reset(c);
  PyObject *v;
  int i = 0;
  if (!root) {
    v = trt_env_global(c, globals, builtins, names[ix[0]]);
    i = 1;
  } else {
    Py_INCREF(root);
    v = root;
  }
  for (; v && i < n; ++i) {
    PyObject *next = trt_env_modattr(c, v, names[ix[i]]);
    Py_DECREF(v);
    v = next;
  }
  int pass = v && (type ? trt_equals(v, type, expect) : v == expect);
  Py_XDECREF(v);
  if (!pass) {
    trt_envcache_reset(c);
    return 0;
  }
  trt_envcache_commit(c);
  return 1;
}

typedef struct scm_state {
  PyObject *consts; /* (globals, builtins, *pool of each version); owned */
  void *v[];        /* each version's state, in dispatch order */
} scm_state;

TRT_EXPORT PyObject *trident_scm_call(void *st, PyObject *const *L, int *status) {
  scm_state *S = (scm_state *)st;
  /* One snapshot per call; every version compares it with its own. */
  trt_global_state now;
  api->global_state_now(&now);
  return trt_scm_dispatch(S->v, L, &now, status);
}

TRT_EXPORT void trident_scm_free(void *st) {
  scm_state *S = (scm_state *)st;
  if (!S) return;
  for (int i = 0; i < trt_scm_nversions; ++i)
    if (S->v[i]) trt_scm_frees[i](S->v[i]);
  Py_XDECREF(S->consts);
  free(S);
}

TRT_EXPORT int trident_scm_stats(void *st, int64_t *hits, int32_t *failed, int32_t n) {
  scm_state *S = (scm_state *)st;
  for (int i = 0; i < n && i < trt_scm_nversions; ++i) {
    const trt_version_head *h = (const trt_version_head *)S->v[i];
    hits[i] = h->hits;
    failed[i] = h->failed;
  }
  return trt_scm_nversions;
}

TRT_EXPORT int trident_scm_init(const trt_api *a, PyObject *consts, void **out) {
  if (a->abi_version != TRT_ABI_VERSION) {
    PyErr_SetString(PyExc_ImportError, "trident: SCM built for another runtime ABI");
    return -1;
  }
  api = a;
  scm_state *S = (scm_state *)calloc(1, sizeof(scm_state) + trt_scm_nversions * sizeof(void *));
  if (!S) {
    PyErr_NoMemory();
    return -1;
  }
  Py_INCREF(consts);
  S->consts = consts;
  PyObject *const *K = (PyObject *const *)&PyTuple_GET_ITEM(consts, 0);
  for (int i = 0; i < trt_scm_nversions; ++i) {
    if (trt_scm_inits[i](a, K + trt_scm_bases[i], K[0], K[1], &S->v[i]) != 0) {
      trident_scm_free(S);
      return -1;
    }
  }
  *out = S;
  return 0;
}
