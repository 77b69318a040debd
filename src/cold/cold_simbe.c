/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_simbe.c — the in-memory cold backend of the simulator and the unit tests, through the
 * same table as LocalDir and ExtentStore (cold_backend.h). A payload is stored under its backend
 * operation id; its locator is 'S' + the id (17 bytes), so put is idempotent by id and find is a
 * lookup. Payloads survive the crash of the runtime that wrote them (the store belongs to the
 * test, like a disk). Fault knobs: put/get failures by count, a capacity, and corruption of one
 * stored payload (get must then fail verification).
 *
 * Threading: a mutex guards the table, so worker threads may call it concurrently.
 * Ownership: the backend copies payloads in and out; cold_simbe_free releases everything.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cold/cold_simbe.h"
#include "core/util.h"

typedef struct sb_obj {
    cold_opid_t id;
    uint64_t len, checksum;
    uint8_t *data;
    bool live;
} sb_obj_t;

struct cold_simbe {
    pthread_mutex_t mu;
    sb_obj_t *o;
    size_t n, cap;
    uint64_t capacity, used;
    uint32_t fail_puts, fail_gets;
    uint64_t puts, dels;
};

static void errmsg(cold_backend_err_t *e, const char *m)
{
    if (e)
        snprintf(e->msg, sizeof(e->msg), "%s", m);
}

static sb_obj_t *by_id(cold_simbe_t *s, const cold_opid_t *id)
{
    for (size_t i = 0; i < s->n; i++)
        if (memcmp(s->o[i].id.b, id->b, COLD_OPID_LEN) == 0)
            return &s->o[i];
    return NULL;
}

static sb_obj_t *by_loc(cold_simbe_t *s, const cold_locator_t *l)
{
    if (l->len != 1 + COLD_OPID_LEN || l->b[0] != 'S')
        return NULL;
    cold_opid_t id;
    memcpy(id.b, l->b + 1, COLD_OPID_LEN);
    return by_id(s, &id);
}

static void mkloc(const cold_opid_t *id, cold_locator_t *out)
{
    memset(out, 0, sizeof(*out));
    out->len = 1 + COLD_OPID_LEN;
    out->b[0] = 'S';
    memcpy(out->b + 1, id->b, COLD_OPID_LEN);
}

static int sb_put(void *be, const cold_opid_t *op, const struct iovec *iov, int iovcnt,
                  uint64_t len, uint64_t checksum, cold_locator_t *out, cold_backend_err_t *err)
{
    cold_simbe_t *s = be;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    sb_obj_t *o = by_id(s, op);
    if (o && o->live) {
        mkloc(op, out); /* idempotent repeat */
        goto out;
    }
    if (s->fail_puts) {
        s->fail_puts--;
        errmsg(err, "simulated backend: injected write failure");
        rc = KVMESH_EIO;
        goto out;
    }
    if (len > s->capacity - s->used) {
        errmsg(err, "simulated backend: device full");
        rc = KVMESH_ENOSPC;
        goto out;
    }
    uint8_t *d = malloc(len ? len : 1);
    if (!d) {
        rc = KVMESH_ENOMEM;
        goto out;
    }
    uint64_t off = 0;
    for (int i = 0; i < iovcnt && off < len; i++) {
        size_t n = KVM_MIN((uint64_t)iov[i].iov_len, len - off);
        memcpy(d + off, iov[i].iov_base, n);
        off += n;
    }
    if (off != len) {
        free(d);
        errmsg(err, "simulated backend: iovecs shorter than len");
        rc = KVMESH_EINVAL;
        goto out;
    }
    if (!o) {
        if (s->n == s->cap) {
            size_t nc = s->cap ? s->cap * 2 : 64;
            sb_obj_t *no = realloc(s->o, nc * sizeof(*no));
            if (!no) {
                free(d);
                rc = KVMESH_ENOMEM;
                goto out;
            }
            s->o = no;
            s->cap = nc;
        }
        o = &s->o[s->n++];
        memset(o, 0, sizeof(*o));
        o->id = *op;
    }
    o->data = d;
    o->len = len;
    o->checksum = checksum;
    o->live = true;
    s->used += len;
    s->puts++;
    mkloc(op, out);
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sb_get(void *be, const cold_locator_t *loc, uint64_t len, uint64_t checksum, void *buf,
                  cold_backend_err_t *err)
{
    cold_simbe_t *s = be;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    sb_obj_t *o = by_loc(s, loc);
    if (!o || !o->live) {
        errmsg(err, "simulated backend: no payload at this locator");
        rc = KVMESH_ENOENT;
    } else if (s->fail_gets) {
        s->fail_gets--;
        errmsg(err, "simulated backend: injected read failure");
        rc = KVMESH_EIO;
    } else if (o->len != len || o->checksum != checksum) {
        errmsg(err, "simulated backend: stored length/checksum differ from the locator's");
        rc = KVMESH_ECORRUPT;
    } else if (kvm_checksum(o->data, len) != checksum) {
        errmsg(err, "simulated backend: payload checksum mismatch");
        rc = KVMESH_ECHECKSUM;
    } else {
        memcpy(buf, o->data, len);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sb_get_batch(void *be, cold_read_t *reads, size_t n, cold_backend_err_t *err)
{
    for (size_t i = 0; i < n; i++)
        reads[i].rc = sb_get(be, &reads[i].loc, reads[i].len, reads[i].checksum, reads[i].buf, err);
    return 0;
}

static int sb_del(void *be, const cold_locator_t *loc, cold_backend_err_t *err)
{
    (void)err;
    cold_simbe_t *s = be;
    pthread_mutex_lock(&s->mu);
    sb_obj_t *o = by_loc(s, loc);
    if (o && o->live) {
        o->live = false;
        s->used -= o->len;
        free(o->data);
        o->data = NULL;
        s->dels++;
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int sb_find(void *be, const cold_opid_t *op, cold_locator_t *out, cold_backend_err_t *err)
{
    cold_simbe_t *s = be;
    pthread_mutex_lock(&s->mu);
    sb_obj_t *o = by_id(s, op);
    int rc = o && o->live ? 0 : KVMESH_ENOENT;
    if (rc == 0)
        mkloc(op, out);
    else
        errmsg(err, "simulated backend: no payload for this operation");
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sb_stat(void *be, cold_backend_stat_t *out)
{
    cold_simbe_t *s = be;
    pthread_mutex_lock(&s->mu);
    uint64_t objs = 0;
    for (size_t i = 0; i < s->n; i++)
        objs += s->o[i].live;
    *out = (cold_backend_stat_t){.capacity_bytes = s->capacity,
                                 .used_bytes = s->used,
                                 .file_bytes = s->used,
                                 .objects = objs,
                                 .healthy = true};
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void sb_close(void *be)
{
    (void)be; /* the test owns it: cold_simbe_free */
}

static const cold_backend_ops_t sb_ops = {
    .kind = COLD_BACKEND_SIM,
    .name = "sim",
    .put = sb_put,
    .get = sb_get,
    .get_batch = sb_get_batch,
    .del = sb_del,
    .find = sb_find,
    .stat = sb_stat,
    .maintain = NULL,
    .close = sb_close,
};

cold_simbe_t *cold_simbe_new(uint64_t capacity)
{
    cold_simbe_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->capacity = capacity;
    return s;
}

void cold_simbe_free(cold_simbe_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->o[i].data);
    free(s->o);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

cold_backend_t cold_simbe_backend(cold_simbe_t *s)
{
    return (cold_backend_t){.ops = &sb_ops, .be = s};
}

bool cold_simbe_has(cold_simbe_t *s, const uint8_t *loc, size_t len)
{
    if (len != 1 + COLD_OPID_LEN)
        return false;
    cold_locator_t l = {.len = (uint16_t)len};
    memcpy(l.b, loc, len);
    pthread_mutex_lock(&s->mu);
    sb_obj_t *o = by_loc(s, &l);
    bool r = o && o->live;
    pthread_mutex_unlock(&s->mu);
    return r;
}

int cold_simbe_corrupt(cold_simbe_t *s, const cold_locator_t *loc)
{
    pthread_mutex_lock(&s->mu);
    sb_obj_t *o = by_loc(s, loc);
    int rc = o && o->live && o->len ? 0 : KVMESH_ENOENT;
    if (rc == 0)
        o->data[o->len / 2] ^= 0x5a;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void cold_simbe_fail(cold_simbe_t *s, uint32_t puts, uint32_t gets)
{
    pthread_mutex_lock(&s->mu);
    s->fail_puts = puts;
    s->fail_gets = gets;
    pthread_mutex_unlock(&s->mu);
}

void cold_simbe_stat(cold_simbe_t *s, uint64_t *used, uint64_t *objects)
{
    cold_backend_stat_t st;
    sb_stat(s, &st);
    if (used)
        *used = st.used_bytes;
    if (objects)
        *objects = st.objects;
}
