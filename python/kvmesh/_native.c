// SPDX-License-Identifier: Apache-2.0
/*
 * _native.c — kvmesh._native, the CPython extension under the kvmesh Python package. It owns
 * the thin, exact binding of the public C API (include/kvmesh.h, nothing else):
 *   - Handle: one kvmesh_t, opened from (field, value) string pairs through kvmesh_config_set;
 *     every object operation, batch, registration, drain and close;
 *   - argument validation (types, negative sizes, NUL bytes, raw pointers that are not inside a
 *     registered buffer) with clear TypeError / kvmesh.InvalidArgument messages;
 *   - translation of every negative KVMESH_E* code into the typed exception built by
 *     kvmesh._errors.make(code, name, message), carrying kvmesh_errname and kvmesh_last_error.
 *
 * Threading: the GIL is released around every call into libkvmesh that can block. A handle
 * counts the calls in flight (mutex + condition variable); close() marks the handle closing,
 * waits (GIL released) until no call is in flight, then calls kvmesh_close, so close never races
 * another call (kvmesh.h forbids that). Registrations are changed and looked up with the GIL
 * held; a call that uses a raw pointer pins the registration it falls in, and unregistering a
 * pinned registration fails with KVMESH_EAGAIN instead of freeing memory a transfer writes to.
 *
 * Ownership: keys, values and targets are borrowed from Python objects that this module keeps
 * referenced (tuples of the caller's sequences, Py_buffer views) until the C call returns. A
 * registration made from a buffer-protocol object holds its Py_buffer (the exporter cannot
 * resize or free it) until unregister_buffer or close.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kvmesh.h"

#define REG_MAX    4096 /* registrations per handle */
#define IOV_MAX_PY 64   /* parts per putv/getv, as the C API's bound */

static PyObject *make_error_fn; /* kvmesh._errors.make(code, name, message) -> Error instance */

/* Raises the typed kvmesh exception for rc with message msg (NULL: kvmesh_strerror). */
static PyObject *raise_code(int rc, const char *msg)
{
    if (!msg || !*msg)
        msg = kvmesh_strerror(rc);
    PyObject *inst = PyObject_CallFunction(make_error_fn, "iss", rc, kvmesh_errname(rc), msg);
    if (inst) {
        PyErr_SetObject((PyObject *)Py_TYPE(inst), inst);
        Py_DECREF(inst);
    }
    return NULL;
}

static PyObject *raise_invalid(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return raise_code(KVMESH_EINVAL, buf);
}

/* ---- the handle --------------------------------------------------------------------------- */

typedef struct reg {
    uintptr_t addr;
    size_t len;
    Py_buffer view; /* held when has_view */
    bool has_view;
    bool readonly; /* registered from a read-only buffer object: never written through */
    int pins;      /* calls in flight that use a raw pointer inside this registration */
} reg_t;

typedef struct {
    PyObject_HEAD kvmesh_t *kv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inflight;
    bool closing;
    reg_t **regs; /* sorted by addr, non-overlapping */
    size_t nregs;
} HandleObject;

/* Starts a call: fails with kvmesh.Closed when the handle is closed or closing. GIL held. */
static int h_enter(HandleObject *h)
{
    pthread_mutex_lock(&h->mu);
    if (!h->kv || h->closing) {
        pthread_mutex_unlock(&h->mu);
        raise_code(KVMESH_ECLOSED, "the store is closed; open a new one");
        return -1;
    }
    h->inflight++;
    pthread_mutex_unlock(&h->mu);
    return 0;
}

static void h_leave(HandleObject *h)
{
    pthread_mutex_lock(&h->mu);
    if (--h->inflight == 0)
        pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* The registration that contains [addr, addr+len), or NULL. GIL held. */
static reg_t *reg_find(HandleObject *h, uintptr_t addr, size_t len)
{
    size_t lo = 0, hi = h->nregs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->regs[mid]->addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    reg_t *r = h->regs[lo - 1];
    if (addr - r->addr > r->len || len > r->len - (addr - r->addr))
        return NULL;
    return r;
}

/* ---- argument conversion ------------------------------------------------------------------- */

/* A key: str (UTF-8) or bytes. Borrowed pointer valid while obj lives. */
static int get_key(PyObject *obj, const char **p, size_t *n, const char *what)
{
    Py_ssize_t len;
    if (PyUnicode_Check(obj)) {
        *p = PyUnicode_AsUTF8AndSize(obj, &len);
        if (!*p)
            return -1;
    } else if (PyBytes_Check(obj)) {
        *p = PyBytes_AS_STRING(obj);
        len = PyBytes_GET_SIZE(obj);
    } else {
        PyErr_Format(PyExc_TypeError, "%s must be str or bytes, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *n = (size_t)len;
    return 0;
}

/* A NUL-free string for a tenant, domain or runtime id. None allowed when nullable. */
static int get_cstr(PyObject *obj, const char **out, bool nullable, const char *what)
{
    if (obj == Py_None && nullable) {
        *out = NULL;
        return 0;
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be str%s, not %.100s", what,
                     nullable ? " or None" : "", Py_TYPE(obj)->tp_name);
        return -1;
    }
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(obj, &len);
    if (!s)
        return -1;
    if ((Py_ssize_t)strlen(s) != len) {
        raise_invalid("%s contains a NUL character", what);
        return -1;
    }
    *out = s;
    return 0;
}

/* An optional non-negative size: None -> *out = -1. */
static int get_size(PyObject *obj, Py_ssize_t *out, const char *what)
{
    if (obj == Py_None) {
        *out = -1;
        return 0;
    }
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    Py_ssize_t v = PyLong_AsSsize_t(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0) {
        raise_invalid("%s must be >= 0, got %zd", what, v);
        return -1;
    }
    *out = v;
    return 0;
}

/* A memory span: a buffer-protocol object (optionally limited to size bytes) or a raw pointer
 * (int) with a size, which must lie inside a registered buffer (the registration is pinned). */
typedef struct span {
    void *ptr;
    size_t len;
    Py_buffer view;
    bool has_view;
    reg_t *pin;
} span_t;

static void span_release(span_t *s)
{
    if (s->has_view)
        PyBuffer_Release(&s->view);
    if (s->pin)
        s->pin->pins--;
    memset(s, 0, sizeof(*s));
}

static int span_get(HandleObject *h, PyObject *obj, PyObject *size_obj, bool writable, span_t *s,
                    const char *what)
{
    memset(s, 0, sizeof(*s));
    Py_ssize_t size;
    if (get_size(size_obj, &size, "size") != 0)
        return -1;
    if (PyLong_Check(obj) && !PyBool_Check(obj)) {
        void *p = PyLong_AsVoidPtr(obj);
        if (!p && PyErr_Occurred())
            return -1;
        if (size < 0) {
            raise_invalid("%s is a raw pointer: give its size too", what);
            return -1;
        }
        if (!p) {
            raise_invalid("%s is a NULL pointer", what);
            return -1;
        }
        reg_t *r = reg_find(h, (uintptr_t)p, (size_t)size);
        if (!r) {
            raise_invalid("%s: pointer 0x%zx with size %zd is not inside a registered buffer; "
                          "call register_buffer(ptr, size) first",
                          what, (size_t)(uintptr_t)p, size);
            return -1;
        }
        if (writable && r->readonly) {
            raise_invalid("%s: pointer 0x%zx lies in a buffer registered from a read-only "
                          "object; register a writable buffer to read into it",
                          what, (size_t)(uintptr_t)p);
            return -1;
        }
        r->pins++;
        s->pin = r;
        s->ptr = p;
        s->len = (size_t)size;
        return 0;
    }
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must support the buffer protocol (bytes, bytearray, memoryview, "
                     "numpy array, ...) or be a raw pointer (int) with a size, not %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(obj, &s->view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) != 0) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyObject *vs = v ? PyObject_Str(v) : NULL;
        const char *m = vs ? PyUnicode_AsUTF8(vs) : NULL;
        PyErr_Clear();
        raise_invalid("%s: %s buffer is needed (%s)", what,
                      writable ? "a writable C-contiguous" : "a C-contiguous", m ? m : "?");
        Py_XDECREF(vs);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        return -1;
    }
    s->has_view = true;
    s->ptr = s->view.buf;
    s->len = (size_t)s->view.len;
    if (size >= 0) {
        if ((size_t)size > s->len) {
            raise_invalid("%s: size %zd is larger than the buffer (%zu bytes)", what, size, s->len);
            span_release(s);
            return -1;
        }
        s->len = (size_t)size;
    }
    return 0;
}

typedef struct put_args {
    kvmesh_put_opts_t opts;
    PyObject *pref_tuple;
    const char **pref;
} put_args_t;

static void put_args_release(put_args_t *pa)
{
    Py_XDECREF(pa->pref_tuple);
    PyMem_Free(pa->pref);
    memset(pa, 0, sizeof(*pa));
}

static int put_args_get(PyObject *replicas, PyObject *preferred, PyObject *hard_pin, put_args_t *pa)
{
    memset(pa, 0, sizeof(*pa));
    Py_ssize_t r;
    if (get_size(replicas, &r, "replicas") != 0)
        return -1;
    if (r > KVMESH_MAX_REPLICAS) {
        raise_invalid("replicas must be 0 (the configured default) .. %d, got %zd",
                      KVMESH_MAX_REPLICAS, r);
        return -1;
    }
    pa->opts.replicas = r < 0 ? 0 : (uint32_t)r;
    if (hard_pin != Py_None) {
        if (!PyBool_Check(hard_pin)) {
            PyErr_Format(PyExc_TypeError, "hard_pin must be a bool, not %.100s",
                         Py_TYPE(hard_pin)->tp_name);
            return -1;
        }
        pa->opts.hard_pin = hard_pin == Py_True;
    }
    if (preferred != Py_None) {
        if (PyUnicode_Check(preferred) || PyBytes_Check(preferred)) {
            PyErr_SetString(PyExc_TypeError, "preferred must be a sequence of runtime ids (str)");
            return -1;
        }
        pa->pref_tuple = PySequence_Tuple(preferred);
        if (!pa->pref_tuple)
            return -1;
        Py_ssize_t n = PyTuple_GET_SIZE(pa->pref_tuple);
        pa->pref = PyMem_Calloc((size_t)(n ? n : 1), sizeof(char *));
        if (!pa->pref) {
            put_args_release(pa);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (get_cstr(PyTuple_GET_ITEM(pa->pref_tuple, i), &pa->pref[i], false,
                         "preferred[i]") != 0) {
                put_args_release(pa);
                return -1;
            }
        }
        pa->opts.preferred_owners = n ? pa->pref : NULL;
        pa->opts.n_preferred = (size_t)n;
    }
    if (pa->opts.hard_pin && pa->opts.n_preferred == 0) {
        put_args_release(pa);
        raise_invalid("hard_pin needs at least one preferred owner");
        return -1;
    }
    return 0;
}

/* ---- Handle: lifecycle -------------------------------------------------------------------- */

static int Handle_init(HandleObject *h, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fields", NULL};
    PyObject *fields;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:Handle", kwlist, &fields))
        return -1;
    if (h->kv) {
        raise_invalid("the handle is already open");
        return -1;
    }
    PyObject *t = PySequence_Tuple(fields);
    if (!t)
        return -1;
    kvmesh_config_t *cfg = kvmesh_config_new();
    if (!cfg) {
        Py_DECREF(t);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        PyObject *pair = PyTuple_GET_ITEM(t, i);
        const char *name, *value;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "fields must be (name, value) pairs of str");
            goto fail;
        }
        if (get_cstr(PyTuple_GET_ITEM(pair, 0), &name, false, "config field name") != 0 ||
            get_cstr(PyTuple_GET_ITEM(pair, 1), &value, false, "config field value") != 0)
            goto fail;
        int rc = kvmesh_config_set(cfg, name, value);
        if (rc) {
            raise_code(rc, kvmesh_last_error());
            goto fail;
        }
    }
    Py_DECREF(t);
    t = NULL;
    kvmesh_t *kv = NULL;
    int rc;
    char msg[1024];
    Py_BEGIN_ALLOW_THREADS;
    rc = kvmesh_open(&kv, cfg);
    snprintf(msg, sizeof(msg), "%s", rc ? kvmesh_last_error() : "");
    kvmesh_config_free(cfg);
    Py_END_ALLOW_THREADS;
    if (rc) {
        raise_code(rc, msg);
        return -1;
    }
    h->kv = kv;
    h->closing = false;
    return 0;
fail:
    Py_XDECREF(t);
    kvmesh_config_free(cfg);
    return -1;
}

static PyObject *Handle_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    HandleObject *h = (HandleObject *)type->tp_alloc(type, 0);
    if (!h)
        return NULL;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    return (PyObject *)h;
}

static void regs_release_all(HandleObject *h)
{
    for (size_t i = 0; i < h->nregs; i++) {
        if (h->regs[i]->has_view)
            PyBuffer_Release(&h->regs[i]->view);
        PyMem_Free(h->regs[i]);
    }
    PyMem_Free(h->regs);
    h->regs = NULL;
    h->nregs = 0;
}

/* Closes: waits for calls in flight (GIL released), then kvmesh_close. Idempotent. */
static void handle_close(HandleObject *h)
{
    pthread_mutex_lock(&h->mu);
    if (!h->kv || h->closing) {
        pthread_mutex_unlock(&h->mu);
        return;
    }
    h->closing = true;
    kvmesh_t *kv = h->kv;
    pthread_mutex_unlock(&h->mu);
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&h->mu);
    while (h->inflight > 0)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    kvmesh_close(kv);
    Py_END_ALLOW_THREADS;
    h->kv = NULL;
    regs_release_all(h);
}

static void Handle_dealloc(HandleObject *h)
{
    handle_close(h);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyObject *Handle_close(HandleObject *h, PyObject *unused)
{
    handle_close(h);
    Py_RETURN_NONE;
}

static PyObject *Handle_is_open(HandleObject *h, void *unused)
{
    return PyBool_FromLong(h->kv && !h->closing);
}

static PyObject *Handle_drain(HandleObject *h, PyObject *args)
{
    unsigned int timeout_ms = 0;
    if (!PyArg_ParseTuple(args, "|I:drain", &timeout_ms))
        return NULL;
    if (h_enter(h))
        return NULL;
    int rc;
    char msg[1024];
    Py_BEGIN_ALLOW_THREADS;
    rc = kvmesh_drain(h->kv, timeout_ms);
    snprintf(msg, sizeof(msg), "%s", rc ? kvmesh_last_error() : "");
    Py_END_ALLOW_THREADS;
    h_leave(h);
    if (rc)
        return raise_code(rc, msg);
    Py_RETURN_NONE;
}

/* ---- single operations --------------------------------------------------------------------- */

#define SCOPE_ARGS                                                                                 \
    PyObject *tenant_o, *domain_o, *key_o;                                                         \
    kvmesh_scope_t scope;                                                                          \
    const char *key;                                                                               \
    size_t key_len
#define SCOPE_PARSE()                                                                              \
    (get_cstr(tenant_o, &scope.tenant, false, "tenant") == 0 &&                                    \
     get_cstr(domain_o, &scope.domain, true, "domain") == 0 &&                                     \
     get_key(key_o, &key, &key_len, "key") == 0)

/* Runs CALL with the GIL released and the handle entered; rc and msg receive the outcome. */
#define BLOCKING(h, CALL)                                                                          \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS;                                                                    \
        rc = (CALL);                                                                               \
        snprintf(msg, sizeof(msg), "%s", rc ? kvmesh_last_error() : "");                           \
        Py_END_ALLOW_THREADS;                                                                      \
    } while (0)

/* put_args_get(), then h_enter(): 0 with pa filled and the handle entered (the caller leaves it
 * and releases pa), or -1 with the Python exception set and nothing held. */
static int put_args_enter(HandleObject *h, PyObject *rep_o, PyObject *pref_o, PyObject *pin_o,
                          put_args_t *pa)
{
    if (put_args_get(rep_o, pref_o, pin_o, pa))
        return -1;
    if (h_enter(h)) {
        put_args_release(pa);
        return -1;
    }
    return 0;
}

static PyObject *Handle_put(HandleObject *h, PyObject *args)
{
    SCOPE_ARGS;
    PyObject *value_o, *size_o, *rep_o, *pref_o, *pin_o;
    if (!PyArg_ParseTuple(args, "OOOOOOOO:put", &tenant_o, &domain_o, &key_o, &value_o, &size_o,
                          &rep_o, &pref_o, &pin_o))
        return NULL;
    if (!SCOPE_PARSE())
        return NULL;
    put_args_t pa;
    if (put_args_enter(h, rep_o, pref_o, pin_o, &pa))
        return NULL;
    span_t s;
    if (span_get(h, value_o, size_o, false, &s, "value")) {
        h_leave(h);
        put_args_release(&pa);
        return NULL;
    }
    int rc;
    char msg[1024];
    BLOCKING(h, kvmesh_put(h->kv, &scope, key, key_len, s.ptr, s.len, &pa.opts));
    span_release(&s);
    h_leave(h);
    put_args_release(&pa);
    if (rc)
        return raise_code(rc, msg);
    Py_RETURN_NONE;
}

/* parts: a sequence of buffer objects. */
static int spans_get(HandleObject *h, PyObject *seq, bool writable, span_t **out, Py_ssize_t *n)
{
    if (PyUnicode_Check(seq) || PyBytes_Check(seq) || PyObject_CheckBuffer(seq)) {
        PyErr_SetString(PyExc_TypeError, "parts must be a sequence of buffers (e.g. a list)");
        return -1;
    }
    PyObject *t = PySequence_Tuple(seq);
    if (!t)
        return -1;
    *n = PyTuple_GET_SIZE(t);
    if (*n == 0 || *n > IOV_MAX_PY) {
        Py_DECREF(t);
        raise_invalid("parts: %zd buffers given; 1..%d allowed", *n, IOV_MAX_PY);
        return -1;
    }
    span_t *s = PyMem_Calloc((size_t)*n, sizeof(*s));
    if (!s) {
        Py_DECREF(t);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        if (span_get(h, PyTuple_GET_ITEM(t, i), Py_None, writable, &s[i], "parts[i]")) {
            for (Py_ssize_t j = 0; j < i; j++)
                span_release(&s[j]);
            PyMem_Free(s);
            Py_DECREF(t);
            return -1;
        }
    }
    Py_DECREF(t); /* the views keep the exporters alive */
    *out = s;
    return 0;
}

static PyObject *Handle_putv(HandleObject *h, PyObject *args)
{
    SCOPE_ARGS;
    PyObject *parts_o, *rep_o, *pref_o, *pin_o;
    if (!PyArg_ParseTuple(args, "OOOOOOO:putv", &tenant_o, &domain_o, &key_o, &parts_o, &rep_o,
                          &pref_o, &pin_o))
        return NULL;
    if (!SCOPE_PARSE())
        return NULL;
    put_args_t pa;
    if (put_args_enter(h, rep_o, pref_o, pin_o, &pa))
        return NULL;
    span_t *s;
    Py_ssize_t n;
    if (spans_get(h, parts_o, false, &s, &n)) {
        h_leave(h);
        put_args_release(&pa);
        return NULL;
    }
    struct iovec iov[IOV_MAX_PY];
    for (Py_ssize_t i = 0; i < n; i++)
        iov[i] = (struct iovec){s[i].ptr, s[i].len};
    int rc;
    char msg[1024];
    BLOCKING(h, kvmesh_putv(h->kv, &scope, key, key_len, iov, (int)n, &pa.opts));
    for (Py_ssize_t i = 0; i < n; i++)
        span_release(&s[i]);
    PyMem_Free(s);
    h_leave(h);
    put_args_release(&pa);
    if (rc)
        return raise_code(rc, msg);
    Py_RETURN_NONE;
}

static PyObject *Handle_get(HandleObject *h, PyObject *args)
{
    SCOPE_ARGS;
    if (!PyArg_ParseTuple(args, "OOO:get", &tenant_o, &domain_o, &key_o))
        return NULL;
    if (!SCOPE_PARSE() || h_enter(h))
        return NULL;
    void *out = NULL;
    size_t out_len = 0;
    int rc;
    char msg[1024];
    BLOCKING(h, kvmesh_get(h->kv, &scope, key, key_len, &out, &out_len));
    h_leave(h);
    if (rc)
        return raise_code(rc, msg);
    PyObject *b = PyBytes_FromStringAndSize(out, (Py_ssize_t)out_len);
    kvmesh_free(out);
    return b;
}

static PyObject *Handle_get_into(HandleObject *h, PyObject *args)
{
    SCOPE_ARGS;
    PyObject *target_o, *size_o;
    if (!PyArg_ParseTuple(args, "OOOOO:get_into", &tenant_o, &domain_o, &key_o, &target_o, &size_o))
        return NULL;
    if (!SCOPE_PARSE() || h_enter(h))
        return NULL;
    span_t s;
    if (span_get(h, target_o, size_o, true, &s, "buffer")) {
        h_leave(h);
        return NULL;
    }
    size_t out_len = 0;
    int rc;
    char msg[1024];
    BLOCKING(h, kvmesh_get_into(h->kv, &scope, key, key_len, s.ptr, s.len, &out_len));
    span_release(&s);
    h_leave(h);
    if (rc == KVMESH_ETOOBIG) {
        char m2[1200];
        snprintf(m2, sizeof(m2), "%s (object is %zu bytes)", msg, out_len);
        return raise_code(rc, m2);
    }
    if (rc)
        return raise_code(rc, msg);
    return PyLong_FromSize_t(out_len);
}

static PyObject *Handle_getv(HandleObject *h, PyObject *args)
{
    SCOPE_ARGS;
    PyObject *parts_o;
    if (!PyArg_ParseTuple(args, "OOOO:getv", &tenant_o, &domain_o, &key_o, &parts_o))
        return NULL;
    if (!SCOPE_PARSE() || h_enter(h))
        return NULL;
    span_t *s;
    Py_ssize_t n;
    if (spans_get(h, parts_o, true, &s, &n)) {
        h_leave(h);
        return NULL;
    }
    struct iovec iov[IOV_MAX_PY];
    for (Py_ssize_t i = 0; i < n; i++)
        iov[i] = (struct iovec){s[i].ptr, s[i].len};
    size_t out_len = 0;
    int rc;
    char msg[1024];
    BLOCKING(h, kvmesh_getv(h->kv, &scope, key, key_len, iov, (int)n, &out_len));
    for (Py_ssize_t i = 0; i < n; i++)
        span_release(&s[i]);
    PyMem_Free(s);
    h_leave(h);
    if (rc)
        return raise_code(rc, msg);
    return PyLong_FromSize_t(out_len);
}

/* The operations on one key that only read back a result (no buffers). */
enum keyop { KO_REMOVE, KO_EXISTS, KO_SIZE, KO_ROUTE };

union keyop_out {
    bool exists;
    uint64_t size;
    kvmesh_route_info_t route;
};

/* Parses (tenant, domain, key) with fmt (e.g. "OOO:size"), runs op with the GIL released and
 * the handle entered, and fills out. 0, or -1 with the Python exception set. */
static int key_op(HandleObject *h, PyObject *args, const char *fmt, enum keyop op,
                  union keyop_out *out)
{
    SCOPE_ARGS;
    if (!PyArg_ParseTuple(args, fmt, &tenant_o, &domain_o, &key_o))
        return -1;
    if (!SCOPE_PARSE() || h_enter(h))
        return -1;
    memset(out, 0, sizeof(*out));
    int rc = KVMESH_EINVAL;
    char msg[1024];
    switch (op) {
    case KO_REMOVE:
        BLOCKING(h, kvmesh_remove(h->kv, &scope, key, key_len));
        break;
    case KO_EXISTS:
        BLOCKING(h, kvmesh_exists(h->kv, &scope, key, key_len, &out->exists));
        break;
    case KO_SIZE:
        BLOCKING(h, kvmesh_size(h->kv, &scope, key, key_len, &out->size));
        break;
    case KO_ROUTE:
        BLOCKING(h, kvmesh_route_query(h->kv, &scope, key, key_len, &out->route));
        break;
    }
    h_leave(h);
    if (rc) {
        raise_code(rc, msg);
        return -1;
    }
    return 0;
}

static PyObject *Handle_remove(HandleObject *h, PyObject *args)
{
    union keyop_out o;
    if (key_op(h, args, "OOO:remove", KO_REMOVE, &o))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Handle_exists(HandleObject *h, PyObject *args)
{
    union keyop_out o;
    if (key_op(h, args, "OOO:exists", KO_EXISTS, &o))
        return NULL;
    return PyBool_FromLong(o.exists);
}

static PyObject *Handle_size(HandleObject *h, PyObject *args)
{
    union keyop_out o;
    if (key_op(h, args, "OOO:size", KO_SIZE, &o))
        return NULL;
    return PyLong_FromUnsignedLongLong(o.size);
}

static PyObject *Handle_route(HandleObject *h, PyObject *args)
{
    union keyop_out o;
    if (key_op(h, args, "OOO:route", KO_ROUTE, &o))
        return NULL;
    const kvmesh_route_info_t ri = o.route;
    PyObject *reps = PyList_New(0);
    if (!reps)
        return NULL;
    for (uint32_t i = 0; i < ri.n_replicas && i < KVMESH_MAX_REPLICAS; i++) {
        PyObject *r = Py_BuildValue("{s:s,s:K,s:K,s:K}", "owner", ri.replicas[i].owner, "segment",
                                    (unsigned long long)ri.replicas[i].segment, "offset",
                                    (unsigned long long)ri.replicas[i].offset, "length",
                                    (unsigned long long)ri.replicas[i].length);
        if (!r || PyList_Append(reps, r)) {
            Py_XDECREF(r);
            Py_DECREF(reps);
            return NULL;
        }
        Py_DECREF(r);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:N,s:O}", "fencing_token",
                         (unsigned long long)ri.fencing_token, "primary_sequence",
                         (unsigned long long)ri.primary_sequence, "length",
                         (unsigned long long)ri.length, "checksum", (unsigned long long)ri.checksum,
                         "replicas", reps, "cold_backed", ri.cold_backed ? Py_True : Py_False);
}

/* ---- registrations ------------------------------------------------------------------------- */

static PyObject *Handle_register_buffer(HandleObject *h, PyObject *args)
{
    PyObject *target_o, *size_o;
    if (!PyArg_ParseTuple(args, "OO:register_buffer", &target_o, &size_o))
        return NULL;
    reg_t *r = PyMem_Calloc(1, sizeof(*r));
    if (!r)
        return PyErr_NoMemory();
    Py_ssize_t size;
    if (get_size(size_o, &size, "size"))
        goto fail;
    if (PyLong_Check(target_o) && !PyBool_Check(target_o)) {
        void *p = PyLong_AsVoidPtr(target_o);
        if (!p && PyErr_Occurred())
            goto fail;
        if (!p || size <= 0) {
            raise_invalid("register_buffer: a raw pointer needs a non-NULL address and a size "
                          "> 0 (got 0x%zx, %zd)",
                          (size_t)(uintptr_t)p, size);
            goto fail;
        }
        r->addr = (uintptr_t)p;
        r->len = (size_t)size;
    } else {
        if (!PyObject_CheckBuffer(target_o)) {
            PyErr_Format(PyExc_TypeError,
                         "register_buffer: need a buffer-protocol object or a raw pointer (int) "
                         "with a size, not %.100s",
                         Py_TYPE(target_o)->tp_name);
            goto fail;
        }
        if (PyObject_GetBuffer(target_o, &r->view, PyBUF_WRITABLE) != 0) {
            PyErr_Clear();
            if (PyObject_GetBuffer(target_o, &r->view, PyBUF_SIMPLE) != 0) {
                PyErr_Clear();
                raise_invalid("register_buffer: the object is not one C-contiguous buffer");
                goto fail;
            }
            r->readonly = true;
        }
        r->has_view = true;
        r->addr = (uintptr_t)r->view.buf;
        r->len = (size_t)r->view.len;
        if (size >= 0) {
            if ((size_t)size > r->len) {
                raise_invalid("register_buffer: size %zd is larger than the buffer (%zu bytes)",
                              size, r->len);
                goto fail;
            }
            r->len = (size_t)size;
        }
        if (r->len == 0) {
            raise_invalid("register_buffer: the buffer is empty");
            goto fail;
        }
    }
    if (h->nregs >= REG_MAX) {
        raise_invalid("register_buffer: %d registrations already; unregister some first", REG_MAX);
        goto fail;
    }
    /* insertion point; overlap with a neighbour is refused */
    size_t pos = 0;
    while (pos < h->nregs && h->regs[pos]->addr < r->addr)
        pos++;
    if ((pos > 0 && h->regs[pos - 1]->addr + h->regs[pos - 1]->len > r->addr) ||
        (pos < h->nregs && r->addr + r->len > h->regs[pos]->addr)) {
        raise_invalid("register_buffer: [0x%zx, +%zu) overlaps a registered buffer; unregister "
                      "it first",
                      (size_t)r->addr, r->len);
        goto fail;
    }
    if (h_enter(h))
        goto fail;
    int rc;
    char msg[1024];
    BLOCKING(h, kvmesh_register_buffer(h->kv, (void *)r->addr, r->len));
    h_leave(h);
    if (rc) {
        raise_code(rc, msg);
        goto fail;
    }
    reg_t **nr = PyMem_Realloc(h->regs, (h->nregs + 1) * sizeof(*nr));
    if (!nr) {
        Py_BEGIN_ALLOW_THREADS;
        kvmesh_unregister_buffer(h->kv, (void *)r->addr);
        Py_END_ALLOW_THREADS;
        PyErr_NoMemory();
        goto fail;
    }
    h->regs = nr;
    memmove(&h->regs[pos + 1], &h->regs[pos], (h->nregs - pos) * sizeof(*nr));
    h->regs[pos] = r;
    h->nregs++;
    return PyLong_FromVoidPtr((void *)r->addr);
fail:
    if (r->has_view)
        PyBuffer_Release(&r->view);
    PyMem_Free(r);
    return NULL;
}

static PyObject *Handle_unregister_buffer(HandleObject *h, PyObject *args)
{
    PyObject *target_o;
    if (!PyArg_ParseTuple(args, "O:unregister_buffer", &target_o))
        return NULL;
    uintptr_t addr;
    if (PyLong_Check(target_o) && !PyBool_Check(target_o)) {
        void *p = PyLong_AsVoidPtr(target_o);
        if (!p && PyErr_Occurred())
            return NULL;
        addr = (uintptr_t)p;
    } else if (PyObject_CheckBuffer(target_o)) {
        Py_buffer v;
        if (PyObject_GetBuffer(target_o, &v, PyBUF_SIMPLE) != 0) {
            PyErr_Clear();
            return raise_invalid("unregister_buffer: the object is not one C-contiguous buffer");
        }
        addr = (uintptr_t)v.buf;
        PyBuffer_Release(&v);
    } else {
        PyErr_Format(PyExc_TypeError,
                     "unregister_buffer: need the registered object or its address (int), not "
                     "%.100s",
                     Py_TYPE(target_o)->tp_name);
        return NULL;
    }
    size_t pos = 0;
    while (pos < h->nregs && h->regs[pos]->addr != addr)
        pos++;
    if (pos == h->nregs)
        return raise_invalid("unregister_buffer: 0x%zx is not the start of a registered buffer",
                             (size_t)addr);
    reg_t *r = h->regs[pos];
    if (r->pins > 0)
        return raise_code(KVMESH_EAGAIN, "unregister_buffer: the buffer is in use by a call in "
                                         "flight; retry after it returns");
    if (h_enter(h))
        return NULL;
    int rc;
    char msg[1024];
    BLOCKING(h, kvmesh_unregister_buffer(h->kv, (void *)addr));
    h_leave(h);
    if (rc)
        return raise_code(rc, msg);
    memmove(&h->regs[pos], &h->regs[pos + 1], (h->nregs - pos - 1) * sizeof(*h->regs));
    h->nregs--;
    if (r->has_view)
        PyBuffer_Release(&r->view);
    PyMem_Free(r);
    Py_RETURN_NONE;
}

static PyObject *Handle_registered(HandleObject *h, PyObject *unused)
{
    PyObject *l = PyList_New((Py_ssize_t)h->nregs);
    if (!l)
        return NULL;
    for (size_t i = 0; i < h->nregs; i++) {
        PyObject *t = Py_BuildValue("(Nn)", PyLong_FromVoidPtr((void *)h->regs[i]->addr),
                                    (Py_ssize_t)h->regs[i]->len);
        if (!t) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
}

/* ---- batches ------------------------------------------------------------------------------- */

enum bkind { BK_PUT, BK_GET_INTO, BK_GET, BK_EXISTS, BK_REMOVE };

/* seq as a tuple of one item per key (n keys); what names an item ("buffer"). A new reference,
 * or NULL with the Python exception set. */
static PyObject *tuple_per_key(PyObject *seq, Py_ssize_t n, const char *what)
{
    PyObject *t = PySequence_Tuple(seq);
    if (t && PyTuple_GET_SIZE(t) != n) {
        raise_invalid("%zd keys but %zd %ss; give one %s per key", n, PyTuple_GET_SIZE(t), what,
                      what);
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

/* One batch call of any kind, split into chunks of KVMESH_BATCH_MAX. Returns a list of
 * (rc, out_len) tuples (BK_GET: rc or bytes), one per key, in order. */
static PyObject *do_batch(HandleObject *h, enum bkind kind, PyObject *tenant_o, PyObject *domain_o,
                          PyObject *keys_o, PyObject *bufs_o, PyObject *sizes_o,
                          const put_args_t *pa)
{
    kvmesh_scope_t scope;
    if (get_cstr(tenant_o, &scope.tenant, false, "tenant") ||
        get_cstr(domain_o, &scope.domain, true, "domain"))
        return NULL;
    if (PyUnicode_Check(keys_o) || PyBytes_Check(keys_o)) {
        PyErr_SetString(PyExc_TypeError, "keys must be a sequence of keys (e.g. a list), not a "
                                         "single str/bytes");
        return NULL;
    }
    PyObject *keys = PySequence_Tuple(keys_o), *bufs = NULL, *sizes = NULL, *result = NULL;
    if (!keys)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(keys);
    kvmesh_batch_item_t *items = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*items));
    span_t *spans = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*spans));
    PyObject **outs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*outs));
    bool entered = false;
    if (!items || !spans || !outs) {
        PyErr_NoMemory();
        goto out;
    }
    bool with_bufs = kind == BK_PUT || kind == BK_GET_INTO;
    if (with_bufs) {
        if (!(bufs = tuple_per_key(bufs_o, n, "buffer")))
            goto out;
        if (sizes_o != Py_None && !(sizes = tuple_per_key(sizes_o, n, "size")))
            goto out;
    }
    if (h_enter(h))
        goto out;
    entered = true;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        if (get_key(PyTuple_GET_ITEM(keys, i), &k, &kl, "keys[i]"))
            goto out;
        items[i].key = k;
        items[i].key_len = kl;
        if (with_bufs) {
            if (span_get(h, PyTuple_GET_ITEM(bufs, i), sizes ? PyTuple_GET_ITEM(sizes, i) : Py_None,
                         kind == BK_GET_INTO, &spans[i],
                         kind == BK_PUT ? "values[i]" : "buffers[i]"))
                goto out;
            items[i].buf = spans[i].ptr;
            items[i].len = spans[i].len;
        }
    }
    if (kind == BK_GET) {
        /* sizes first, then one buffer per existing object, then the reads */
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t off = 0; off < n; off += KVMESH_BATCH_MAX) {
            size_t m = (size_t)(n - off) < KVMESH_BATCH_MAX ? (size_t)(n - off) : KVMESH_BATCH_MAX;
            kvmesh_batch_exists(h->kv, &scope, items + off, m);
        }
        Py_END_ALLOW_THREADS;
        for (int attempt = 0; attempt < 3; attempt++) {
            Py_ssize_t todo = 0;
            for (Py_ssize_t i = 0; i < n; i++) {
                if (attempt > 0 && items[i].rc != KVMESH_ETOOBIG)
                    continue;
                if (attempt == 0 && items[i].rc != 0)
                    continue;
                Py_CLEAR(outs[i]);
                size_t want = items[i].out_len;
                outs[i] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(want ? want : 1));
                if (!outs[i])
                    goto out;
                items[i].buf = PyBytes_AS_STRING(outs[i]);
                items[i].len = want ? want : 1;
                todo++;
            }
            if (!todo)
                break;
            /* only the items that got a buffer this round are read: the others keep their rc */
            Py_BEGIN_ALLOW_THREADS;
            {
                /* gather the selected items into a compact array per chunk */
                kvmesh_batch_item_t *sel = malloc((size_t)todo * sizeof(*sel));
                Py_ssize_t *idx = malloc((size_t)todo * sizeof(*idx));
                if (sel && idx) {
                    Py_ssize_t j = 0;
                    for (Py_ssize_t i = 0; i < n; i++)
                        if (items[i].buf)
                            idx[j] = i, sel[j++] = items[i];
                    for (Py_ssize_t off = 0; off < todo; off += KVMESH_BATCH_MAX) {
                        size_t m = (size_t)(todo - off) < KVMESH_BATCH_MAX ? (size_t)(todo - off)
                                                                           : KVMESH_BATCH_MAX;
                        kvmesh_batch_get(h->kv, &scope, sel + off, m);
                    }
                    for (Py_ssize_t k = 0; k < todo; k++) {
                        items[idx[k]].rc = sel[k].rc;
                        items[idx[k]].out_len = sel[k].out_len;
                        items[idx[k]].buf = NULL;
                    }
                } else {
                    for (Py_ssize_t i = 0; i < n; i++)
                        if (items[i].buf)
                            items[i].rc = KVMESH_ENOMEM, items[i].buf = NULL;
                }
                free(sel);
                free(idx);
            }
            Py_END_ALLOW_THREADS;
        }
    } else {
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t off = 0; off < n; off += KVMESH_BATCH_MAX) {
            size_t m = (size_t)(n - off) < KVMESH_BATCH_MAX ? (size_t)(n - off) : KVMESH_BATCH_MAX;
            switch (kind) {
            case BK_PUT:
                kvmesh_batch_put(h->kv, &scope, items + off, m, &pa->opts);
                break;
            case BK_GET_INTO:
                kvmesh_batch_get(h->kv, &scope, items + off, m);
                break;
            case BK_EXISTS:
                kvmesh_batch_exists(h->kv, &scope, items + off, m);
                break;
            case BK_REMOVE:
                kvmesh_batch_remove(h->kv, &scope, items + off, m);
                break;
            case BK_GET:
                break;
            }
        }
        Py_END_ALLOW_THREADS;
    }
    result = PyList_New(n);
    if (!result)
        goto out;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t;
        if (kind == BK_GET) {
            if (items[i].rc == 0 && outs[i]) {
                if ((size_t)PyBytes_GET_SIZE(outs[i]) != items[i].out_len &&
                    _PyBytes_Resize(&outs[i], (Py_ssize_t)items[i].out_len)) {
                    Py_CLEAR(result);
                    goto out;
                }
                t = outs[i];
                outs[i] = NULL;
            } else {
                t = PyLong_FromLong(items[i].rc ? items[i].rc : KVMESH_EINTERNAL);
            }
        } else {
            t = Py_BuildValue("(in)", items[i].rc, (Py_ssize_t)items[i].out_len);
        }
        if (!t) {
            Py_CLEAR(result);
            goto out;
        }
        PyList_SET_ITEM(result, i, t);
    }
out:
    for (Py_ssize_t i = 0; spans && i < n; i++)
        span_release(&spans[i]);
    for (Py_ssize_t i = 0; outs && i < n; i++)
        Py_XDECREF(outs[i]);
    if (entered)
        h_leave(h);
    PyMem_Free(items);
    PyMem_Free(spans);
    PyMem_Free(outs);
    Py_XDECREF(keys);
    Py_XDECREF(bufs);
    Py_XDECREF(sizes);
    return result;
}

static PyObject *Handle_batch_put(HandleObject *h, PyObject *args)
{
    PyObject *t, *d, *k, *v, *s, *rep_o, *pref_o, *pin_o;
    if (!PyArg_ParseTuple(args, "OOOOOOOO:batch_put", &t, &d, &k, &v, &s, &rep_o, &pref_o, &pin_o))
        return NULL;
    put_args_t pa;
    if (put_args_get(rep_o, pref_o, pin_o, &pa))
        return NULL;
    PyObject *r = do_batch(h, BK_PUT, t, d, k, v, s, &pa);
    put_args_release(&pa);
    return r;
}

static PyObject *Handle_batch_get_into(HandleObject *h, PyObject *args)
{
    PyObject *t, *d, *k, *v, *s;
    if (!PyArg_ParseTuple(args, "OOOOO:batch_get_into", &t, &d, &k, &v, &s))
        return NULL;
    return do_batch(h, BK_GET_INTO, t, d, k, v, s, NULL);
}

/* A batch call that takes only (tenant, domain, keys), parsed with fmt. */
static PyObject *batch_of_keys(HandleObject *h, PyObject *args, const char *fmt, enum bkind kind)
{
    PyObject *t, *d, *k;
    if (!PyArg_ParseTuple(args, fmt, &t, &d, &k))
        return NULL;
    return do_batch(h, kind, t, d, k, NULL, NULL, NULL);
}

static PyObject *Handle_batch_get(HandleObject *h, PyObject *args)
{
    return batch_of_keys(h, args, "OOO:batch_get", BK_GET);
}

static PyObject *Handle_batch_exists(HandleObject *h, PyObject *args)
{
    return batch_of_keys(h, args, "OOO:batch_exists", BK_EXISTS);
}

static PyObject *Handle_batch_remove(HandleObject *h, PyObject *args)
{
    return batch_of_keys(h, args, "OOO:batch_remove", BK_REMOVE);
}

/* ---- cluster view -------------------------------------------------------------------------- */

static PyObject *Handle_members(HandleObject *h, PyObject *unused)
{
    if (h_enter(h))
        return NULL;
    size_t cap = 256, n = 0;
    kvmesh_member_info_t *m = NULL;
    int rc = 0;
    char msg[1024];
    for (int attempt = 0; attempt < 4; attempt++) {
        kvmesh_member_info_t *nm = PyMem_Realloc(m, cap * sizeof(*m));
        if (!nm) {
            PyMem_Free(m);
            h_leave(h);
            return PyErr_NoMemory();
        }
        m = nm;
        BLOCKING(h, kvmesh_members(h->kv, m, cap, &n));
        if (rc || n <= cap)
            break;
        cap = n + 16;
    }
    h_leave(h);
    if (rc) {
        PyMem_Free(m);
        return raise_code(rc, msg);
    }
    if (n > cap)
        n = cap;
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *d = Py_BuildValue("{s:s,s:K,s:s,s:s,s:d,s:K,s:K}", "id", m[i].id, "epoch",
                                    (unsigned long long)m[i].epoch, "address", m[i].address,
                                    "state", m[i].state, "weight", m[i].weight, "capacity_bytes",
                                    (unsigned long long)m[i].capacity_bytes, "used_bytes",
                                    (unsigned long long)m[i].used_bytes);
        if (!d) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, d);
    }
    PyMem_Free(m);
    return l;
}

static PyObject *Handle_self(HandleObject *h, PyObject *unused)
{
    if (h_enter(h))
        return NULL;
    char id[KVMESH_ID_HEX_LEN + 1] = "";
    uint64_t epoch = 0;
    int rc;
    char msg[1024];
    BLOCKING(h, kvmesh_self(h->kv, id, &epoch));
    h_leave(h);
    if (rc)
        return raise_code(rc, msg);
    return Py_BuildValue("(sK)", id, (unsigned long long)epoch);
}

static PyMethodDef Handle_methods[] = {
    {"close", (PyCFunction)Handle_close, METH_NOARGS, "close(): leave at once; idempotent"},
    {"drain", (PyCFunction)Handle_drain, METH_VARARGS, "drain([timeout_ms])"},
    {"put", (PyCFunction)Handle_put, METH_VARARGS,
     "put(tenant, domain, key, value, size, replicas, preferred, hard_pin)"},
    {"putv", (PyCFunction)Handle_putv, METH_VARARGS,
     "putv(tenant, domain, key, parts, replicas, preferred, hard_pin)"},
    {"get", (PyCFunction)Handle_get, METH_VARARGS, "get(tenant, domain, key) -> bytes"},
    {"get_into", (PyCFunction)Handle_get_into, METH_VARARGS,
     "get_into(tenant, domain, key, target, size) -> bytes read"},
    {"getv", (PyCFunction)Handle_getv, METH_VARARGS,
     "getv(tenant, domain, key, parts) -> bytes read"},
    {"remove", (PyCFunction)Handle_remove, METH_VARARGS, "remove(tenant, domain, key)"},
    {"exists", (PyCFunction)Handle_exists, METH_VARARGS, "exists(tenant, domain, key) -> bool"},
    {"size", (PyCFunction)Handle_size, METH_VARARGS, "size(tenant, domain, key) -> int"},
    {"route", (PyCFunction)Handle_route, METH_VARARGS, "route(tenant, domain, key) -> dict"},
    {"register_buffer", (PyCFunction)Handle_register_buffer, METH_VARARGS,
     "register_buffer(target, size) -> address"},
    {"unregister_buffer", (PyCFunction)Handle_unregister_buffer, METH_VARARGS,
     "unregister_buffer(target)"},
    {"registered", (PyCFunction)Handle_registered, METH_NOARGS,
     "registered() -> [(address, size)]"},
    {"batch_put", (PyCFunction)Handle_batch_put, METH_VARARGS,
     "batch_put(tenant, domain, keys, values, sizes, replicas, preferred, hard_pin) -> "
     "[(rc, 0)]"},
    {"batch_get_into", (PyCFunction)Handle_batch_get_into, METH_VARARGS,
     "batch_get_into(tenant, domain, keys, buffers, sizes) -> [(rc, out_len)]"},
    {"batch_get", (PyCFunction)Handle_batch_get, METH_VARARGS,
     "batch_get(tenant, domain, keys) -> [bytes | rc]"},
    {"batch_exists", (PyCFunction)Handle_batch_exists, METH_VARARGS,
     "batch_exists(tenant, domain, keys) -> [(rc, size)]"},
    {"batch_remove", (PyCFunction)Handle_batch_remove, METH_VARARGS,
     "batch_remove(tenant, domain, keys) -> [(rc, 0)]"},
    {"members", (PyCFunction)Handle_members, METH_NOARGS, "members() -> [dict]"},
    {"self_id", (PyCFunction)Handle_self, METH_NOARGS, "self_id() -> (id, epoch)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Handle_getset[] = {
    {"is_open", (getter)Handle_is_open, NULL, "True until close()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvmesh._native.Handle",
    .tp_basicsize = sizeof(HandleObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Handle(fields): one open kvmesh runtime (kvmesh_t). Use kvmesh.Store instead.",
    .tp_new = Handle_new,
    .tp_init = (initproc)Handle_init,
    .tp_dealloc = (destructor)Handle_dealloc,
    .tp_methods = Handle_methods,
    .tp_getset = Handle_getset,
};

/* ---- module functions ----------------------------------------------------------------------- */

static PyObject *mod_errname(PyObject *m, PyObject *arg)
{
    int rc = (int)PyLong_AsLong(arg);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(kvmesh_errname(rc));
}

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
    int rc = (int)PyLong_AsLong(arg);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(kvmesh_strerror(rc));
}

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
    return PyUnicode_FromString(kvmesh_version());
}

static PyObject *mod_config_fields(PyObject *m, PyObject *unused)
{
    size_t n = 0;
    const kvmesh_config_field_t *f = kvmesh_config_fields(&n);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *t = Py_BuildValue("(sss)", f[i].name, f[i].default_value, f[i].help);
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
}

/* Validates fields against the C table without opening: returns the dict of effective values. */
static PyObject *mod_config_check(PyObject *m, PyObject *fields)
{
    PyObject *t = PySequence_Tuple(fields);
    if (!t)
        return NULL;
    kvmesh_config_t *cfg = kvmesh_config_new();
    PyObject *res = NULL;
    if (!cfg) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        PyObject *pair = PyTuple_GET_ITEM(t, i);
        const char *name, *value;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "fields must be (name, value) pairs of str");
            goto out;
        }
        if (get_cstr(PyTuple_GET_ITEM(pair, 0), &name, false, "config field name") ||
            get_cstr(PyTuple_GET_ITEM(pair, 1), &value, false, "config field value"))
            goto out;
        int rc = kvmesh_config_set(cfg, name, value);
        if (rc) {
            raise_code(rc, kvmesh_last_error());
            goto out;
        }
    }
    res = PyDict_New();
    size_t n = 0;
    const kvmesh_config_field_t *f = kvmesh_config_fields(&n);
    char buf[1024];
    for (size_t i = 0; res && i < n; i++) {
        if (kvmesh_config_get(cfg, f[i].name, buf, sizeof(buf)) != 0)
            continue;
        PyObject *v = PyUnicode_FromString(buf);
        if (!v || PyDict_SetItemString(res, f[i].name, v)) {
            Py_XDECREF(v);
            Py_CLEAR(res);
            break;
        }
        Py_DECREF(v);
    }
out:
    kvmesh_config_free(cfg);
    Py_DECREF(t);
    return res;
}

/* address(obj) -> the address of a C-contiguous buffer-protocol object (for raw-pointer APIs) */
static PyObject *mod_address(PyObject *m, PyObject *obj)
{
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) != 0)
        return NULL;
    PyObject *r = PyLong_FromVoidPtr(v.buf);
    PyBuffer_Release(&v);
    return r;
}

static PyMethodDef mod_methods[] = {
    {"errname", mod_errname, METH_O, "errname(code) -> 'KVMESH_E...'"},
    {"strerror", mod_strerror, METH_O, "strerror(code) -> description"},
    {"version", mod_version, METH_NOARGS, "version() -> 'MAJOR.MINOR.PATCH' of libkvmesh"},
    {"config_fields", mod_config_fields, METH_NOARGS, "config_fields() -> [(name, default, help)]"},
    {"config_check", mod_config_check, METH_O,
     "config_check(fields) -> {name: value}; raises on a bad field"},
    {"address", mod_address, METH_O, "address(buffer) -> int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    "kvmesh._native",
    "The C binding of libkvmesh (include/kvmesh.h). Use the kvmesh package instead.",
    -1,
    mod_methods,
};

static void add_code(PyObject *codes, const char *name, int value)
{
    PyObject *v = PyLong_FromLong(value);
    if (v) {
        PyDict_SetItemString(codes, name, v);
        Py_DECREF(v);
    }
}

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *errs = PyImport_ImportModule("kvmesh._errors");
    if (!errs)
        return NULL;
    make_error_fn = PyObject_GetAttrString(errs, "make");
    Py_DECREF(errs);
    if (!make_error_fn)
        return NULL;
    if (PyType_Ready(&HandleType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (!m)
        return NULL;
    Py_INCREF(&HandleType);
    if (PyModule_AddObject(m, "Handle", (PyObject *)&HandleType) < 0) {
        Py_DECREF(&HandleType);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *codes = PyDict_New();
    if (!codes) {
        Py_DECREF(m);
        return NULL;
    }
#define X_CODE(name, value, desc) add_code(codes, #name, value);
    KVMESH_ERROR_LIST(X_CODE)
#undef X_CODE
    PyModule_AddObject(m, "CODES", codes);
    PyModule_AddIntConstant(m, "BATCH_MAX", KVMESH_BATCH_MAX);
    PyModule_AddIntConstant(m, "MAX_REPLICAS", KVMESH_MAX_REPLICAS);
    PyModule_AddIntConstant(m, "MAX_KEY_LEN", 1024);
    PyModule_AddIntConstant(m, "IOV_MAX", IOV_MAX_PY);
    return m;
}
