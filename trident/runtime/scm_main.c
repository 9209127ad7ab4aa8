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

/* ---- the guard helpers scm_prelude.h declares ------------------------------ */

PyObject *trt_load_global(PyObject *globals, PyObject *builtins, PyObject *name) {
  PyObject *v = PyDict_GetItemWithError(globals, name);
  if (!v) {
    if (PyErr_Occurred()) { trt_guard_clear(); return NULL; }
    v = PyDict_GetItemWithError(builtins, name);
    if (!v) { trt_guard_clear(); return NULL; }
  }
  Py_INCREF(v);
  return v;
}

PyObject *trt_getattr(PyObject *o, PyObject *name) {
  if (!o) return NULL;
  if (PyModule_CheckExact(o) && PyUnicode_READ_CHAR(name, 0) != '_') {
    /* A plain module attribute lives in the module's dict: one lookup instead
       of getattr's type-MRO walk.  Absent there, take the full path (module
       __getattr__). */
    PyObject *d = PyModule_GetDict(o);
    PyObject *v = d ? PyDict_GetItemWithError(d, name) : NULL;
    if (v) { Py_INCREF(v); return v; }
    if (PyErr_Occurred()) trt_guard_clear();
  }
  PyObject *v = PyObject_GetAttr(o, name);
  if (!v) trt_guard_clear();
  return v;
}

PyObject *trt_getitem_obj(PyObject *o, PyObject *key) {
  if (!o) return NULL;
  PyObject *v;
  if (PyDict_CheckExact(o)) {
    v = PyDict_GetItemWithError(o, key);
    if (!v) { trt_guard_clear(); return NULL; }
    Py_INCREF(v);
    return v;
  }
  v = PyObject_GetItem(o, key);
  if (!v) trt_guard_clear();
  return v;
}

PyObject *trt_dict_item(PyObject *d, PyObject *key) {
  if (!d || !PyDict_Check(d)) return NULL;
  PyObject *v = PyDict_GetItemWithError(d, key);
  if (!v) {
    if (PyErr_Occurred()) trt_guard_clear();
    return NULL;
  }
  Py_INCREF(v);
  return v;
}

int trt_set_equals(PyObject *o, PyObject *value) {
  if (PySet_GET_SIZE(o) != PySet_GET_SIZE(value)) return 0;
  PyObject *it = PyObject_GetIter(o);
  if (!it) { trt_guard_clear(); return 0; }
  PyObject *e;
  int ok = 1;
  while (ok && (e = PyIter_Next(it))) {
    if (!PyLong_CheckExact(e) && !PyUnicode_CheckExact(e) && !PyBytes_CheckExact(e)) {
      ok = 0;
    } else {
      int r = PySet_Contains(value, e);
      if (r != 1) ok = 0;
    }
    Py_DECREF(e);
  }
  Py_DECREF(it);
  if (PyErr_Occurred()) { trt_guard_clear(); return 0; }
  return ok;
}

int trt_equals(PyObject *o, PyObject *type, PyObject *value) {
  if (!o || (PyObject *)Py_TYPE(o) != type) return 0;
  if (o == value) return 1;
  if (PyAnySet_CheckExact(o)) return trt_set_equals(o, value);
  if (PyFloat_CheckExact(o)) {
    /* Equal and of the same sign: 0.0 and -0.0 compare equal but x / s differs. */
    double a = PyFloat_AS_DOUBLE(o), b = PyFloat_AS_DOUBLE(value);
    if (isnan(b)) {
      /* Dynamo's guard for a NaN constant is isnan(x): here also the same sign and payload
         (a returned or copysign'd NaN keeps them), so a hit is never wrong. */
      uint64_t ua, ub;
      memcpy(&ua, &a, sizeof ua);
      memcpy(&ub, &b, sizeof ub);
      return ua == ub;
    }
    return a == b && signbit(a) == signbit(b);
  }
  int r = PyObject_RichCompareBool(o, value, Py_EQ);
  if (r < 0) { trt_guard_clear(); return 0; }
  return r;
}

int trt_len_is(PyObject *o, PyObject *type, Py_ssize_t n) {
  if (!o || (PyObject *)Py_TYPE(o) != type) return 0;
  Py_ssize_t k = PyObject_Length(o);
  if (k < 0) { trt_guard_clear(); return 0; }
  return k == n;
}

int trt_dict_keys(PyObject *o, PyObject *keys) {
  if (!o || !PyDict_Check(o) || PyDict_GET_SIZE(o) != PyTuple_GET_SIZE(keys)) return 0;
  Py_ssize_t pos = 0, i = 0;
  PyObject *k, *v;
  while (PyDict_Next(o, &pos, &k, &v)) {
    int r = PyObject_RichCompareBool(k, PyTuple_GET_ITEM(keys, i++), Py_EQ);
    if (r != 1) { if (r < 0) trt_guard_clear(); return 0; }
  }
  return 1;
}

int trt_not_in_dict(PyObject *o, PyObject *name) {
  if (!o) return 0;
  PyObject *d = PyObject_GenericGetDict(o, NULL);
  if (!d) { trt_guard_clear(); return 0; }
  int r = PyDict_Contains(d, name);
  Py_DECREF(d);
  if (r < 0) { trt_guard_clear(); return 0; }
  return r == 0;
}

int trt_has_attr(PyObject *o, PyObject *name) {
  if (!o) return -1;
  PyObject *v = PyObject_GetAttr(o, name);
  if (v) { Py_DECREF(v); return 1; }
  int absent = PyErr_ExceptionMatches(PyExc_AttributeError);
  trt_guard_clear();
  return absent ? 0 : -1;
}

int trt_call_check(PyObject *o, PyObject *fn, PyObject *arg) {
  if (!o) return 0;
  PyObject *r = PyObject_CallFunctionObjArgs(fn, o, arg, NULL);
  if (!r) { trt_guard_clear(); return 0; }
  int ok = r == Py_True;
  Py_DECREF(r);
  return ok;
}

int trt_dict_has(PyObject *o, PyObject *key) {
  if (!o || !PyDict_Check(o)) return -1;
  int r = PyDict_Contains(o, key);
  if (r < 0) trt_guard_clear();
  return r;
}

int trt_set_has(PyObject *o, PyObject *key) {
  if (!o || !PyAnySet_Check(o)) return -1;
  int r = PySet_Contains(o, key);
  if (r < 0) trt_guard_clear();
  return r;
}

PyObject *trt_dict_entry_at(PyObject *d, Py_ssize_t i, int value) {
  if (!d || !PyDict_Check(d) || i >= PyDict_GET_SIZE(d)) return NULL;
  Py_ssize_t pos = 0, n = 0;
  PyObject *k, *v;
  while (PyDict_Next(d, &pos, &k, &v)) {
    if (n++ == i) {
      PyObject *r = value ? v : k;
      Py_INCREF(r);
      return r;
    }
  }
  return NULL;
}

PyObject *trt_call_noargs(PyObject *o) {
  if (!o) return NULL;
  PyObject *r = PyObject_CallNoArgs(o);
  if (!r) trt_guard_clear();
  return r;
}

PyObject *trt_contextvar_get(PyObject *var, PyObject *dflt) {
  if (!var || !PyContextVar_CheckExact(var)) return NULL;
  PyObject *v = NULL;
  if (PyContextVar_Get(var, dflt, &v) < 0) {
    trt_guard_clear();
    return NULL;
  }
  return v;
}

int trt_logger_quiet(PyObject *lg, PyObject *n_disabled, PyObject *n_cache, PyObject *n_enabled,
                     PyObject *level) {
  if (!lg) return 0;
  PyObject *d = PyObject_GetAttr(lg, n_disabled);
  if (!d) { trt_guard_clear(); return 0; }
  int dis = PyObject_IsTrue(d);
  Py_DECREF(d);
  if (dis < 0) { trt_guard_clear(); return 0; }
  if (dis) return 1;
  PyObject *c = PyObject_GetAttr(lg, n_cache);
  if (!c) { trt_guard_clear(); return 0; }
  int quiet = 0;
  PyObject *v = PyDict_Check(c) ? PyDict_GetItemWithError(c, level) : NULL;
  if (v) {
    quiet = v == Py_False;
  } else {
    if (PyErr_Occurred()) trt_guard_clear();
    PyObject *r = PyObject_CallMethodOneArg(lg, n_enabled, level);
    if (r) { quiet = r == Py_False; Py_DECREF(r); } else { trt_guard_clear(); }
  }
  Py_DECREF(c);
  return quiet;
}

PyObject *trt_attr_dict(PyObject *o, PyObject *name) {
#if PY_VERSION_HEX < 0x030C0000
  if (o && PyType_Check(o) && ((PyTypeObject *)o)->tp_dict) {
    PyObject *d = ((PyTypeObject *)o)->tp_dict;
    Py_INCREF(d);
    return d;
  }
#else
  if (o && PyType_Check(o)) {
    PyObject *d = PyType_GetDict((PyTypeObject *)o);
    if (d) return d;
    trt_guard_clear();
  }
#endif
  return trt_getattr(o, name);
}

PyObject *trt_generic_getattr(PyObject *o, PyObject *name) {
  if (!o) return NULL;
  PyObject *v = PyObject_GenericGetAttr(o, name);
  if (!v) trt_guard_clear();
  return v;
}

PyObject *trt_attr_func(PyObject *o, PyObject *name, int which) {
  if (o && PyFunction_Check(o)) {
    PyObject *v = which == TRT_FN_DEFAULTS ? PyFunction_GetDefaults(o)
                : which == TRT_FN_KWDEFAULTS ? PyFunction_GetKwDefaults(o)
                             : PyFunction_GetCode(o);
    if (!v) v = Py_None;
    Py_INCREF(v);
    return v;
  }
  return trt_getattr(o, name);
}

int trt_envblock_hit(const trt_envblock *b) {
  if (!TRT_HAVE_DICT_TAGS || !b->valid) return 0;
  for (int i = 0; i < b->n; ++i) {
    const trt_envrec *r = &b->rec[i];
    switch (r->kind) {
      case TRT_ER_DICT:
        if (trt_dict_tag(r->obj) != r->tag) return 0;
        break;
      case TRT_ER_CLASS:
        if ((PyObject *)Py_TYPE(r->obj) != r->aux) return 0;
        break;
      case TRT_ER_TYPETAG:
        if (trt_type_tag(r->obj) != r->tag) return 0;
        break;
      case TRT_ER_INSTDICT: {
        PyObject **dp = _PyObject_GetDictPtr(r->obj);
        if (!dp || *dp != r->aux) return 0;
        break;
      }
      default: { /* FUNCATTR: recorded only for exact functions */
        PyObject *v = r->kind == TRT_ER_FUNCATTR + TRT_FN_DEFAULTS ? PyFunction_GET_DEFAULTS(r->obj)
                    : r->kind == TRT_ER_FUNCATTR + TRT_FN_KWDEFAULTS
                        ? PyFunction_GET_KW_DEFAULTS(r->obj)
                        : PyFunction_GET_CODE(r->obj);
        if (v != r->aux) return 0;
      }
    }
  }
  return 1;
}

/* ---- environment blocks (scm_prelude.h) -------------------------------- */

static void eb_clear(trt_envblock *b) {
  for (int i = 0; i < b->n; ++i) {
    Py_CLEAR(b->rec[i].obj);
    Py_CLEAR(b->rec[i].aux);
  }
  if (b->anchor)
    for (int i = 0; i < b->nguards; ++i) {
      Py_CLEAR(b->anchor[i].obj);
      b->anchor[i].step = -1;
    }
  b->n = 0;
  b->valid = 0;
}

void trt_envblock_free(trt_envblock *b) {
  eb_clear(b);
  free(b->rec);
  free(b->live);
  free(b->anchor);
  b->rec = NULL;
  b->live = NULL;
  b->anchor = NULL;
  b->cap = 0;
}

/* Add a record unless an equal one is there (recording runs only when the tags changed). */
static void eb_add(trt_envblock *b, int kind, PyObject *obj, PyObject *aux, uint64_t tag) {
  if (!b) return;
  for (int i = 0; i < b->n; ++i)
    if (b->rec[i].kind == kind && b->rec[i].obj == obj) {
      if (b->rec[i].aux != aux || b->rec[i].tag != tag) b->uncovered = 1;  /* changed meanwhile */
      return;
    }
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 32;
    trt_envrec *r = (trt_envrec *)realloc(b->rec, (size_t)cap * sizeof(trt_envrec));
    if (!r) { b->uncovered = 1; return; }  /* not cached: evaluated on every call */
    b->rec = r;
    b->cap = cap;
  }
  Py_INCREF(obj);
  Py_XINCREF(aux);
  b->rec[b->n++] = (trt_envrec){kind, obj, aux, tag};
}

void trt_r_dict(trt_envblock *b, PyObject *o) {
  if (!b) return;
  if (o && PyDict_CheckExact(o)) eb_add(b, TRT_ER_DICT, o, NULL, trt_dict_tag(o));
  else b->uncovered = 1;
}

void trt_r_class(trt_envblock *b, PyObject *o) {
  if (b && o) eb_add(b, TRT_ER_CLASS, o, (PyObject *)Py_TYPE(o), 0);
}

void trt_r_uncovered(trt_envblock *b) {
  if (b) b->uncovered = 1;
}

/* A class's attribute lookups are covered while its version tag holds. */
static int eb_typetag(trt_envblock *b, PyTypeObject *t) {
  uint64_t tag = trt_type_tag((PyObject *)t);
  if (!tag) return 0;
  eb_add(b, TRT_ER_TYPETAG, (PyObject *)t, NULL, tag);
  return 1;
}

/* The getter of `__dict__` on instances of a class defined in Python (typeobject.c's
 * subtype_dict), read from a class made for the purpose: an instance's `__dict__` whose
 * descriptor has another getter is not recorded. */
static getter subtype_dict_getter(void) {
  static getter g;
  static int done;
  if (done) return g;
  done = 1;
  PyObject *cls = PyObject_CallFunction((PyObject *)&PyType_Type, "s()N", "_trt_probe",
                                        PyDict_New());
  if (cls) {
    PyObject *name = PyUnicode_InternFromString("__dict__");
    PyObject *descr = name ? _PyType_Lookup((PyTypeObject *)cls, name) : NULL;
    if (descr && Py_IS_TYPE(descr, &PyGetSetDescr_Type))
      g = ((PyGetSetDescrObject *)descr)->d_getset->get;
    Py_XDECREF(name);
    Py_DECREF(cls);
  }
  PyErr_Clear();
  return g;
}

/* o's instance dict, recorded (class, class tag, dict identity, dict tag) when o's class
 * uses the generic attribute lookup; NULL (no record) when o has no such dict. */
static PyObject *eb_instdict(trt_envblock *b, PyObject *o) {
  PyTypeObject *tp = Py_TYPE(o);
  PyObject **dp = _PyObject_GetDictPtr(o);
  if (PyErr_Occurred()) trt_guard_clear();
  if (!dp || !*dp || !PyDict_CheckExact(*dp)) return NULL;
  if (b) {
    eb_add(b, TRT_ER_CLASS, o, (PyObject *)tp, 0);
    eb_add(b, TRT_ER_INSTDICT, o, *dp, 0);
    eb_add(b, TRT_ER_DICT, *dp, NULL, trt_dict_tag(*dp));
  }
  return *dp;
}

PyObject *trt_r_instdict(trt_envblock *b, PyObject *o) {
  if (!o) return NULL;
  PyObject *d = PyObject_GenericGetDict(o, NULL); /* what trt_not_in_dict reads */
  if (!d) { trt_guard_clear(); return NULL; }
  if (b && eb_instdict(b, o) != d) b->uncovered = 1;
  return d;
}

PyObject *trt_r_global(trt_envblock *b, PyObject *globals, PyObject *builtins, PyObject *name) {
  trt_r_dict(b, globals);
  PyObject *v = PyDict_GetItemWithError(globals, name);
  if (!v) {
    if (PyErr_Occurred()) { trt_guard_clear(); return NULL; }
    trt_r_dict(b, builtins);
    v = PyDict_GetItemWithError(builtins, name);
    if (!v) { trt_guard_clear(); return NULL; }
  }
  Py_INCREF(v);
  return v;
}

/* The attribute `name` of a module, a class of metaclass `type` or an instance of a class
 * with the generic lookup, read as getattr reads it and recorded; NULL when the read is one
 * no record covers (the caller then takes the plain path). */
static PyObject *eb_attr_covered(trt_envblock *b, PyObject *o, PyObject *name) {
  if (PyModule_CheckExact(o)) {
    if (PyUnicode_READ_CHAR(name, 0) == '_') return NULL;  /* ModuleType's descriptors */
    PyObject *d = PyModule_GetDict(o);
    if (!d) return NULL;
    PyObject *v = trt_dict_item(d, name);
    if (v) {
      trt_r_class(b, o);  /* a module's __class__ can become a subclass with properties */
      trt_r_dict(b, d);
    }
    return v;  /* absent: module __getattr__, the plain path */
  }
  if (PyType_CheckExact(o)) {
    trt_r_class(b, o);
    if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) {
#if PY_VERSION_HEX < 0x030C0000
      PyObject *d = ((PyTypeObject *)o)->tp_dict;
      Py_XINCREF(d);
      return d;  /* a class never replaces its dict */
#else
      PyObject *d = PyType_GetDict((PyTypeObject *)o);
      if (!d) trt_guard_clear();
      return d;
#endif
    }
    PyObject *meta = _PyType_Lookup(&PyType_Type, name);
    if (meta && Py_TYPE(meta)->tp_descr_set) return NULL;  /* __name__, __mro__, ... */
    PyObject *v = _PyType_Lookup((PyTypeObject *)o, name);
    if (!v || !eb_typetag(b, (PyTypeObject *)o)) return NULL;
    if (Py_TYPE(v)->tp_descr_get && !PyFunction_Check(v)) return NULL; /* classmethod... */
    Py_INCREF(v);  /* a plain value, or a function (its __get__(None, cls) is itself) */
    return v;
  }
  PyTypeObject *tp = Py_TYPE(o);
  if (tp->tp_getattro != PyObject_GenericGetAttr) return NULL;  /* __getattr__, C types */
  PyObject *descr = _PyType_Lookup(tp, name);
  if (descr && Py_TYPE(descr)->tp_descr_set) {
    /* a data descriptor wins over the instance dict: only `__dict__` itself is read */
    if (!(Py_IS_TYPE(descr, &PyGetSetDescr_Type) && subtype_dict_getter() &&
          ((PyGetSetDescrObject *)descr)->d_getset->get == subtype_dict_getter()))
      return NULL;
    if (!eb_typetag(b, tp)) return NULL;
    PyObject *d = eb_instdict(b, o);
    Py_XINCREF(d);
    return d;
  }
  if (b && !eb_typetag(b, tp)) return NULL;
  PyObject *d = eb_instdict(b, o);
  if (d) {
    PyObject *v = trt_dict_item(d, name);
    if (v) return v;
  } else if (b) {
    eb_add(b, TRT_ER_CLASS, o, (PyObject *)tp, 0);
    PyObject **dp = _PyObject_GetDictPtr(o);
    if (PyErr_Occurred()) trt_guard_clear();
    if (dp) eb_add(b, TRT_ER_INSTDICT, o, NULL, 0);  /* no dict yet: one made later shows */
  }
  if (!descr || Py_TYPE(descr)->tp_descr_get) return NULL;  /* bound methods are new */
  Py_INCREF(descr);
  return descr;
}

PyObject *trt_r_attr(trt_envblock *b, PyObject *o, PyObject *name) {
  if (!o) return NULL;
  if (b) {
    int which = PyUnicode_CompareWithASCIIString(name, "__defaults__") == 0     ? TRT_FN_DEFAULTS
              : PyUnicode_CompareWithASCIIString(name, "__kwdefaults__") == 0 ? TRT_FN_KWDEFAULTS
              : PyUnicode_CompareWithASCIIString(name, "__code__") == 0       ? TRT_FN_CODE
                                                                               : -1;
    if (which >= 0) {
      /* A function's slot: assignable without any tag, so its current object is recorded
       * (a __kwdefaults__ dict's contents are its own dict record, when read). */
      if (PyFunction_Check(o)) {
        PyObject *v = trt_attr_func(o, name, which);
        PyObject *slot = which == TRT_FN_DEFAULTS ? PyFunction_GET_DEFAULTS(o)
                       : which == TRT_FN_KWDEFAULTS ? PyFunction_GET_KW_DEFAULTS(o)
                       : PyFunction_GET_CODE(o);
        eb_add(b, TRT_ER_FUNCATTR + which, o, slot, 0);
        return v;
      }
      b->uncovered = 1;
    } else {
      PyObject *v = eb_attr_covered(b, o, name);
      if (v) return v;
      b->uncovered = 1;
    }
  }
  /* the plain loads the version's other guards use */
  if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) return trt_attr_dict(o, name);
  if (PyUnicode_CompareWithASCIIString(name, "__defaults__") == 0)
    return trt_attr_func(o, name, TRT_FN_DEFAULTS);
  if (PyUnicode_CompareWithASCIIString(name, "__kwdefaults__") == 0)
    return trt_attr_func(o, name, TRT_FN_KWDEFAULTS);
  if (PyUnicode_CompareWithASCIIString(name, "__code__") == 0)
    return trt_attr_func(o, name, TRT_FN_CODE);
  return trt_getattr(o, name);
}

PyObject *trt_r_item_int(trt_envblock *b, PyObject *o, Py_ssize_t i) {
  if (b && o && !PyTuple_CheckExact(o)) b->uncovered = 1;  /* a tuple's items are fixed */
  return trt_getitem_int(o, i);
}

PyObject *trt_r_item_obj(trt_envblock *b, PyObject *o, PyObject *key) {
  if (b && o) {
    if (PyDict_CheckExact(o)) trt_r_dict(b, o);
    else b->uncovered = 1;
  }
  return trt_getitem_obj(o, key);
}

PyObject *trt_r_dict_item(trt_envblock *b, PyObject *o, PyObject *key) {
  if (b && o) {
    /* The dict's own storage, a subclass's too (no __getitem__, no __missing__): its
     * version tag covers the read. */
    if (PyDict_Check(o)) eb_add(b, TRT_ER_DICT, o, NULL, trt_dict_tag(o));
    else b->uncovered = 1;
  }
  return trt_dict_item(o, key);
}

PyObject *trt_r_typeof(trt_envblock *b, PyObject *o) {
  if (!o) return NULL;
  trt_r_class(b, o);
  Py_INCREF(Py_TYPE(o));
  return (PyObject *)Py_TYPE(o);
}

PyObject *trt_r_dict_entry_at(trt_envblock *b, PyObject *o, Py_ssize_t i, int value) {
  if (b && o) trt_r_dict(b, o);
  return trt_dict_entry_at(o, i, value);
}

/* After step j loaded o: while nothing read so far is uncovered, o is the anchor. */
static void eg_step(trt_envblock *b, trt_envanchor *a, int j, PyObject *o) {
  if (!b || !a || b->uncovered || !o) return;
  Py_INCREF(o);
  Py_XSETREF(a->obj, o);
  a->step = j;
}

/* Steps [from, to) of d; e[from - 1] holds the base (or nothing, for a root step). */
static void eg_load(const trt_envg_desc *d, const trt_envctx *c, trt_envblock *b,
                    trt_envanchor *a, PyObject **e, int from, int to, int first) {
  for (int j = from; j < to; ++j) {
    const trt_envstep *s = &d->steps[j];
    PyObject *base = j > first ? e[j - 1] : NULL;
    PyObject *v;
    switch (s->op) {
      case TRT_ES_GLOBAL: v = trt_r_global(b, c->globals, c->builtins, c->N[s->arg]); break;
      case TRT_ES_CONST: v = c->K[s->arg]; Py_INCREF(v); break;
      case TRT_ES_ATTR: v = trt_r_attr(b, base, c->N[s->arg]); break;
      case TRT_ES_ITEM_INT: v = trt_r_item_int(b, base, s->arg); break;
      case TRT_ES_ITEM_STR: v = trt_r_item_obj(b, base, c->N[s->arg]); break;
      case TRT_ES_TYPEOF: v = trt_r_typeof(b, base); break;
      case TRT_ES_DICT_KEY_AT: v = trt_r_dict_entry_at(b, base, s->arg, 0); break;
      case TRT_ES_DICT_VALUE_AT: v = trt_r_dict_entry_at(b, base, s->arg, 1); break;
      case TRT_ES_DICT_ITEM: v = trt_r_dict_item(b, base, c->K[s->arg]); break;
      default: v = NULL; break;  /* not generated */
    }
    e[j] = v;
    if (first == 0) eg_step(b, a, j, v);
  }
}

/* One guard: its loads (a live guard's from after its anchor), then its check. */
static int eg_run(const trt_envg_desc *d, const trt_envctx *c, trt_envblock *b,
                  trt_envanchor *a) {
  PyObject *e[TRT_ENV_STEPS] = {NULL};
  int same = d->kind == TRT_EG_SAME;
  int from = 0;
  if (!b && a && a->obj && !same) {
    Py_INCREF(a->obj);
    e[a->step] = a->obj;
    from = a->step + 1;
  }
  if (same) {
    eg_load(d, c, b, NULL, e, 0, d->nsteps_a, 0);
    eg_load(d, c, b, NULL, e, d->nsteps_a, d->nsteps, d->nsteps_a);
  } else {
    eg_load(d, c, b, a, e, from, d->nsteps, 0);
  }
  PyObject *v = same ? e[d->nsteps_a - 1] : e[d->nsteps - 1];
  PyObject *const *K = c->K;
  if (d->flags & TRT_EGF_UNCOVERED) trt_r_uncovered(b);
  if (d->flags & TRT_EGF_DICT) trt_r_dict(b, v);
  int pass = 0;
  switch (d->kind) {
    case TRT_EG_ID: pass = v && v == K[d->c0]; break;
    case TRT_EG_EQ: pass = trt_equals(v, K[d->c1], K[d->c0]); break;
    case TRT_EG_TYPE:
      trt_r_class(b, v);
      pass = v && (PyObject *)Py_TYPE(v) == K[d->c0];
      break;
    case TRT_EG_SAME: pass = v && v == e[d->nsteps - 1]; break;
    case TRT_EG_NOTIN: {
      PyObject *dd = trt_r_instdict(b, v);
      pass = dd && PyDict_Contains(dd, c->N[d->name]) == 0;
      if (PyErr_Occurred()) { trt_guard_clear(); pass = 0; }
      Py_XDECREF(dd);
      break;
    }
    case TRT_EG_CONTAINS: {
      int r = (d->flags & TRT_EGF_SET) ? trt_set_has(v, K[d->c0]) : trt_dict_has(v, K[d->c0]);
      pass = r == ((d->flags & TRT_EGF_PRESENT) ? 1 : 0);
      break;
    }
    case TRT_EG_LEN: pass = trt_len_is(v, K[d->c0], (Py_ssize_t)d->n); break;
    default: pass = trt_dict_keys(v, K[d->c0]); break;
  }
  for (int j = 0; j < d->nsteps; ++j) Py_XDECREF(e[j]);
  return pass;
}

static int eb_eval_plain(const trt_envg_desc *d, const int *ix, int n, const trt_envctx *ctx,
                         int32_t *failed) {
  for (int i = 0; i < n; ++i)
    if (!eg_run(&d[i], ctx, NULL, NULL)) { *failed = ix[i]; return 0; }
  return 1;
}

static int eb_eval(trt_envblock *b, const trt_envg_desc *d, const int *ix, int n,
                   const trt_envctx *ctx, int32_t *failed);

int trt_envblock_eval(trt_envblock *b, const trt_envg_desc *d, const int *ix, int n,
                      const trt_envctx *ctx, int32_t *failed) {
  /* A guard's read can run Python (a property, __eq__) that calls this function again: the
   * inner call evaluates without touching the block the outer one is recording. */
  if (b->busy) return eb_eval_plain(d, ix, n, ctx, failed);
  b->busy = 1;
  int r = eb_eval(b, d, ix, n, ctx, failed);
  b->busy = 0;
  return r;
}

static int eb_eval(trt_envblock *b, const trt_envg_desc *d, const int *ix, int n,
                   const trt_envctx *ctx, int32_t *failed) {
  eb_clear(b);
  b->nguards = n;
  b->nlive = n;
  if (!TRT_HAVE_DICT_TAGS) return eb_eval_plain(d, ix, n, ctx, failed);
  if (!b->live) {
    b->live = (unsigned char *)calloc((size_t)(n > 0 ? n : 1), 1);
    b->anchor = (trt_envanchor *)calloc((size_t)(n > 0 ? n : 1), sizeof(trt_envanchor));
    if (!b->live || !b->anchor) {  /* no memory for the block: evaluate, never cache */
      free(b->live);
      free(b->anchor);
      b->live = NULL;
      b->anchor = NULL;
      return eb_eval_plain(d, ix, n, ctx, failed);
    }
    for (int i = 0; i < n; ++i) b->anchor[i].step = -1;
  }
  int nlive = 0;
  for (int i = 0; i < n; ++i) {
    b->uncovered = 0;
    if (!eg_run(&d[i], ctx, b, &b->anchor[i])) {
      *failed = ix[i];
      if (b->uncovered) {
        eb_clear(b);
      } else {
        /* It fails again while what it read holds (whatever the others do): cached too. */
        b->valid = 2;
        b->failed = ix[i];
      }
      b->nlive = -1;
      return 0;
    }
    b->live[i] = (unsigned char)(b->uncovered != 0);
    nlive += b->live[i];
  }
  b->nlive = nlive;
  b->valid = 1;
  return 1;
}

int trt_envblock_live(trt_envblock *b, const trt_envg_desc *d, const int *ix, int n,
                      const trt_envctx *ctx, int32_t *failed) {
  for (int i = 0; i < n; ++i)
    if (b->live[i] && !eg_run(&d[i], ctx, NULL, &b->anchor[i])) { *failed = ix[i]; return 0; }
  return 1;
}

typedef struct scm_state {
  PyObject *consts;       /* (globals, builtins, *pool of each version); owned */
  trt_tensor_spec *probe; /* the dispatch index's probes, group after group (NULL: none) */
  void *v[];              /* each version's state, in dispatch order */
} scm_state;

/* ---- the dispatch index (scm_dispatch.h) ------------------------------- */

/* Every size and stride symbolic: a probe checks all of tensor_match but them. */
static const int64_t probe_dyn[TRT_SCM_INDEX_NDIM] = {
    TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN,
    TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN, TRT_DYN};
_Static_assert(TRT_SCM_INDEX_NDIM == 16, "probe_dyn has TRT_SCM_INDEX_NDIM entries");

static int probes_init(scm_state *S) {
  const trt_dispatch_index *x = &trt_scm_index;
  /* The limits the generator keeps (codegen/c.py), checked once: the call reads within them. */
  int n = 0, bad = x->ngroups > TRT_SCM_INDEX_GROUPS;
  for (int g = 0; g < x->ngroups && !bad; ++g) {
    int w = 0;
    for (int i = 0; i < x->groups[g].nprobes; ++i) {
      const trt_scm_probe *p = &x->groups[g].probes[i];
      for (int j = 0; j < p->nkey; ++j) bad |= p->pos[j] < 0 || p->pos[j] >= 2 * p->ndim;
      w += p->nkey;
    }
    bad |= w != x->groups[g].width || w > TRT_SCM_INDEX_WIDTH;
    n += x->groups[g].nprobes;
  }
  if (bad) {
    PyErr_SetString(PyExc_SystemError, "trident: malformed dispatch index");
    return -1;
  }
  if (!n) return 0;
  S->probe = (trt_tensor_spec *)calloc((size_t)n, sizeof(trt_tensor_spec));
  if (!S->probe) { PyErr_NoMemory(); return -1; }
  Py_ssize_t nk = PyTuple_GET_SIZE(S->consts);
  int j = 0;
  for (int g = 0; g < x->ngroups; ++g)
    for (int i = 0; i < x->groups[g].nprobes; ++i, ++j) {
      const trt_scm_probe *p = &x->groups[g].probes[i];
      if (p->type_k < 0 || p->type_k >= nk ||
          !PyType_Check(PyTuple_GET_ITEM(S->consts, p->type_k)) || p->ndim < 0 ||
          p->ndim > TRT_SCM_INDEX_NDIM) {
        PyErr_SetString(PyExc_SystemError, "trident: malformed dispatch index");
        return -1;
      }
      /* the type is borrowed: the constant tuple owns it */
      S->probe[j] = (trt_tensor_spec){(PyTypeObject *)PyTuple_GET_ITEM(S->consts, p->type_k),
                                      p->dtype, p->device_type, p->device_index,
                                      p->requires_grad, p->dispatch_keys, p->ndim,
                                      probe_dyn, probe_dyn};
    }
  return 0;
}

/* The call's key in group g (its probes' specs start at spec): 1 when every probe passed. */
static int group_key(const trt_scm_group *g, const trt_tensor_spec *spec, PyObject *const *L,
                     int64_t *key) {
  int64_t meta[2 * TRT_SCM_INDEX_NDIM + 1];
  int w = 0;
  for (int i = 0; i < g->nprobes; ++i) {
    const trt_scm_probe *p = &g->probes[i];
    PyObject *o = L[p->local];
    if (!o || !api->tensor_match(o, &spec[i], meta)) return 0;
    for (int j = 0; j < p->nkey; ++j) key[w++] = meta[p->pos[j]];
  }
  return 1;
}

/* The row of `key` in g's sorted keys, or -1. */
static int group_find(const trt_scm_group *g, const int64_t *key) {
  int lo = 0, hi = g->nkeys;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    const int64_t *row = g->keys + (size_t)mid * g->width;
    int c = 0;
    for (int j = 0; j < g->width && !c; ++j) c = (row[j] > key[j]) - (row[j] < key[j]);
    if (!c) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

/* The candidates of every group and the keyless versions, tried in ascending dispatch
 * position.  When none hits, every other version in order (so each version runs at most once
 * per call, and every version has recorded the guard that failed it). */
static PyObject *index_dispatch(scm_state *S, PyObject *const *L, const trt_global_state *now,
                                int *status) {
  const trt_dispatch_index *x = &trt_scm_index;
  const int32_t *list[TRT_SCM_INDEX_GROUPS + 1];
  int len[TRT_SCM_INDEX_GROUPS + 1], at[TRT_SCM_INDEX_GROUPS + 1];
  int nl = 0;
  const trt_tensor_spec *spec = S->probe;
  for (int gi = 0; gi < x->ngroups; ++gi) {
    const trt_scm_group *g = &x->groups[gi];
    int64_t key[TRT_SCM_INDEX_WIDTH];
    int k = group_key(g, spec, L, key) ? group_find(g, key) : -1;
    spec += g->nprobes;
    if (k < 0) continue;
    list[nl] = g->vers + g->start[k];
    len[nl] = g->start[k + 1] - g->start[k];
    at[nl++] = 0;
  }
  if (x->nkeyless) {
    list[nl] = x->keyless;
    len[nl] = x->nkeyless;
    at[nl++] = 0;
  }
  PyObject *r;
  for (;;) {
    int best = -1;
    for (int i = 0; i < nl; ++i)
      if (at[i] < len[i] && (best < 0 || list[i][at[i]] < list[best][at[best]])) best = i;
    if (best < 0) break;
    int32_t pos = list[best][at[best]++];
    r = x->fns[pos](S->v[pos], L, now, status);
    if (*status != TRT_MISS) return r;
  }
  /* No candidate hit: the ordered scan over the versions not tried above. */
  for (int i = 0; i < nl; ++i) at[i] = 0;
  for (int32_t pos = 0; pos < trt_scm_nversions; ++pos) {
    int tried = 0;
    for (int i = 0; i < nl; ++i) {
      while (at[i] < len[i] && list[i][at[i]] < pos) ++at[i];
      tried |= at[i] < len[i] && list[i][at[i]] == pos;
    }
    if (tried) continue;
    r = x->fns[pos](S->v[pos], L, now, status);
    if (*status != TRT_MISS) return r;
  }
  *status = TRT_MISS;
  return NULL;
}

TRT_EXPORT PyObject *trident_scm_call(void *st, PyObject *const *L, int *status) {
  scm_state *S = (scm_state *)st;
  /* One snapshot per call; every version compares it with its own. */
  trt_global_state now;
  api->global_state_now(&now);
  if (trt_scm_index.ngroups) return index_dispatch(S, L, &now, status);
  return trt_scm_dispatch(S->v, L, &now, status);
}

TRT_EXPORT void trident_scm_free(void *st) {
  scm_state *S = (scm_state *)st;
  if (!S) return;
  for (int i = 0; i < trt_scm_nversions; ++i)
    if (S->v[i]) trt_scm_frees[i](S->v[i]);
  free(S->probe);
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

TRT_EXPORT int trident_scm_profile(void *st, int64_t *out, int32_t n) {
  scm_state *S = (scm_state *)st;
  for (int i = 0; i < n && i < trt_scm_nversions; ++i) {
    const trt_version_head *h = (const trt_version_head *)S->v[i];
    int64_t *o = out + 8 * i;
    o[0] = h->ns_guards;
    o[1] = h->ns_program;
    o[2] = h->misses;
    o[3] = h->ns_misses;
    o[4] = h->eb.nguards;
    o[5] = h->eb.n;
    o[6] = h->eb.nlive;
    o[7] = h->eb.valid;
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
  if (probes_init(S) != 0) {
    trident_scm_free(S);
    return -1;
  }
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
