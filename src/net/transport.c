/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport.c — the transport engine: configuration, the engine address, registered local
 * memory, the automatic choice of transport per opened segment, batches and the completion
 * path shared by the transports (see transport.h and transport_int.h).
 *
 * Invariants: a batch's pending count equals the number of submitted requests whose status is
 * still TP_STATUS_PENDING; the callback runs once per transition of pending to 0 and
 * tp_batch_wait/free wait for it to return (cb_running), so a batch is never freed under a
 * running callback or a chunk still in a transport queue.
 */
#include "net/transport.h"
#include "obs/metrics.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "env/clock.h"
#include "net/transport_int.h"

const char *tp_kind_name(enum tp_kind k)
{
    switch (k) {
    case TP_AUTO:
        return "auto";
    case TP_TCP:
        return "tcp";
    case TP_SHM:
        return "shm";
    }
    return "?";
}

/* ---- socket helpers ------------------------------------------------------------------------ */

static int io_errno_to_rc(int e)
{
    return (e == EAGAIN || e == EWOULDBLOCK) ? KVMESH_ETIMEDOUT : KVMESH_ECONN;
}

uint64_t tp_io_now_ms(void)
{
    return env_clock_mono_ms();
}

static bool io_past(uint64_t deadline_ms)
{
    return deadline_ms && tp_io_now_ms() >= deadline_ms;
}

int tp_io_send_all(int fd, struct iovec *iov, int iovcnt)
{
    return tp_io_send_all_by(fd, iov, iovcnt, 0);
}

int tp_io_recv_all(int fd, void *buf, size_t len)
{
    return tp_io_recv_all_by(fd, buf, len, 0);
}

int tp_io_send_all_by(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms)
{
    while (iovcnt > 0) {
        if (io_past(deadline_ms))
            return KVMESH_ETIMEDOUT;
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return io_errno_to_rc(errno);
        }
        size_t left = (size_t)n;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

int tp_io_recv_all_by(int fd, void *buf, size_t len, uint64_t deadline_ms)
{
    char *p = buf;
    while (len > 0) {
        if (io_past(deadline_ms))
            return KVMESH_ETIMEDOUT;
        ssize_t n = recv(fd, p, len, MSG_WAITALL);
        if (n == 0)
            return KVMESH_ECONN;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return io_errno_to_rc(errno);
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

void tp_io_set_timeout(int fd, int timeout_ms)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* ---- addresses ----------------------------------------------------------------------------- */

int tp_addr_parse(const char *s, struct tp_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (!s || strncmp(s, "kvt1;", 5) != 0 || strlen(s) >= TP_ADDR_MAX)
        return kvm_errf(KVMESH_EINVAL,
                        "transport address \"%s\" malformed; expected "
                        "\"kvt1;host=...;tcp=IP:PORT;shm=NAME\"",
                        s ? s : "(null)");
    char buf[TP_ADDR_MAX];
    snprintf(buf, sizeof(buf), "%s", s + 5);
    char *save = NULL;
    for (char *f = strtok_r(buf, ";", &save); f; f = strtok_r(NULL, ";", &save)) {
        if (strncmp(f, "host=", 5) == 0 && strlen(f + 5) < sizeof(out->host)) {
            snprintf(out->host, sizeof(out->host), "%s", f + 5);
        } else if (strncmp(f, "tcp=", 4) == 0) {
            char *colon = strrchr(f + 4, ':');
            if (!colon || (size_t)(colon - (f + 4)) >= sizeof(out->tcp_ip))
                goto bad;
            char *end = NULL;
            long port = strtol(colon + 1, &end, 10);
            if (*end || port <= 0 || port > 65535)
                goto bad;
            memcpy(out->tcp_ip, f + 4, (size_t)(colon - (f + 4)));
            out->tcp_port = (uint16_t)port;
        } else if (strncmp(f, "shm=", 4) == 0 && strlen(f + 4) < sizeof(out->shm)) {
            snprintf(out->shm, sizeof(out->shm), "%s", f + 4);
        } else {
            goto bad;
        }
    }
    if (!out->host[0])
        goto bad;
    return 0;
bad:
    return kvm_errf(KVMESH_EINVAL, "transport address \"%s\" has a malformed field", s);
}

static void read_host_id(char *out, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    out[0] = 0;
    if (f) {
        if (fgets(out, (int)len, f))
            out[strcspn(out, "\n")] = 0;
        fclose(f);
    }
    if (!out[0]) {
        char h[64] = "unknown";
        gethostname(h, sizeof(h) - 1);
        snprintf(out, len, "%s", h);
    }
}

/* ---- engine -------------------------------------------------------------------------------- */

int tp_engine_new(const struct tp_config *cfg, struct seg_registry *reg, struct tp_engine **out)
{
    struct tp_config def = {0};
    if (!cfg)
        cfg = &def;
    if (cfg->kind != TP_AUTO && cfg->kind != TP_TCP && cfg->kind != TP_SHM)
        return kvm_errf(KVMESH_ECONFIG, "transport kind %d unknown; use auto, tcp or shm",
                        (int)cfg->kind);
    if (cfg->conns_per_peer > TP_MAX_CONNS)
        return kvm_errf(KVMESH_ECONFIG, "conns_per_peer %u above the limit %d", cfg->conns_per_peer,
                        TP_MAX_CONNS);
    struct tp_engine *e = seg_calloc(1, sizeof(*e));
    if (!e)
        return kvm_errf(KVMESH_ENOMEM, "transport engine allocation failed");
    e->cfg = *cfg;
    e->cfg.listen_host = NULL; /* not kept: copied below */
    e->cfg.host_id = NULL;
    e->reg = reg;
    pthread_mutex_init(&e->mu, NULL);
    if (cfg->host_id)
        snprintf(e->host_id, sizeof(e->host_id), "%s", cfg->host_id);
    else
        read_host_id(e->host_id, sizeof(e->host_id));
    if (cfg->conns_per_peer) {
        e->nconns = cfg->conns_per_peer;
    } else {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        e->nconns = (unsigned)KVM_MIN(KVM_MAX(n, 2), 8);
    }
    e->stripe_min = cfg->stripe_min ? cfg->stripe_min : (256u << 10);
    e->chunk_max = cfg->chunk_max ? KVM_MAX(cfg->chunk_max, 4096u) : (512u << 10);
    e->io_timeout_ms = cfg->io_timeout_ms > 0 ? cfg->io_timeout_ms : 10000;
    e->idle_timeout_ms = cfg->idle_timeout_ms;
    snprintf(e->tcp_listen, sizeof(e->tcp_listen), "%s:0",
             cfg->listen_host ? cfg->listen_host : "127.0.0.1");
    int rc = 0;
    if (!cfg->no_server) {
        if ((rc = tp_tcp_ops.server_start(e)) != 0)
            goto fail;
        if ((rc = tp_shm_ops.server_start(e)) != 0)
            goto fail;
    }
    int n = snprintf(e->addr, sizeof(e->addr), "kvt1;host=%s", e->host_id);
    if (!cfg->no_server)
        snprintf(e->addr + n, sizeof(e->addr) - (size_t)n, ";tcp=%s;shm=%s", e->tcp_listen,
                 e->shm_name);
    *out = e;
    return 0;
fail:
    tp_shm_ops.server_stop(e);
    tp_tcp_ops.server_stop(e);
    pthread_mutex_destroy(&e->mu);
    free(e);
    return rc;
}

static void batch_destroy(struct tp_batch *b);

void tp_engine_free(struct tp_engine *e)
{
    if (!e)
        return;
    tp_shm_ops.server_stop(e);
    tp_tcp_ops.server_stop(e);
    tp_tcp_ops.client_stop(e);
    tp_shm_ops.client_stop(e);
    struct tp_batch *spare = atomic_exchange(&e->batch_spare, NULL);
    if (spare)
        batch_destroy(spare);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

const char *tp_engine_address(const struct tp_engine *e)
{
    return e->addr;
}

struct seg_registry *tp_engine_registry(const struct tp_engine *e)
{
    return e->reg;
}

int tp_register_memory(struct tp_engine *e, void *addr, size_t len)
{
    if (!addr || len == 0)
        return kvm_errf(KVMESH_EINVAL, "cannot register an empty or NULL region");
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    if (e->nregions >= TP_MAX_REGIONS)
        rc = kvm_errf(KVMESH_ENOSPC, "too many registered regions (max %d)", TP_MAX_REGIONS);
    else
        e->regions[e->nregions++] = (struct tp_region){(uintptr_t)addr, len};
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int tp_unregister_memory(struct tp_engine *e, void *addr)
{
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->nregions; i++) {
        if (e->regions[i].addr == (uintptr_t)addr) {
            e->regions[i] = e->regions[--e->nregions];
            pthread_mutex_unlock(&e->mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&e->mu);
    return kvm_errf(KVMESH_ENOENT, "region %p is not registered", addr);
}

static bool local_registered(struct tp_engine *e, const void *p, uint64_t len)
{
    uintptr_t a = (uintptr_t)p;
    bool ok = false;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->nregions && !ok; i++) {
        const struct tp_region *r = &e->regions[i];
        ok = a >= r->addr && a - r->addr <= r->len && len <= r->len - (a - r->addr);
    }
    pthread_mutex_unlock(&e->mu);
    return ok || seg_local_contains(e->reg, p, len);
}

/* ---- segments ------------------------------------------------------------------------------ */

int tp_open_segment(struct tp_engine *e, const char *owner_addr, uint64_t seg_id, uint64_t token,
                    struct tp_segment **out)
{
    struct tp_addr a;
    int rc = tp_addr_parse(owner_addr, &a);
    if (rc)
        return rc;
    enum tp_kind k = e->cfg.kind;
    bool same_host = strcmp(a.host, e->host_id) == 0 && a.shm[0];
    if (k == TP_AUTO)
        k = same_host ? TP_SHM : TP_TCP;
    if (k == TP_SHM && !same_host)
        return kvm_errf(KVMESH_EINCOMPAT,
                        "shm transport forced but %s is not on this host "
                        "(or serves no shm); use tcp or auto",
                        owner_addr);
    if (k == TP_TCP && !a.tcp_port)
        return kvm_errf(KVMESH_EINCOMPAT, "peer %s serves no tcp data port", owner_addr);
    struct tp_segment *s = seg_calloc(1, sizeof(*s));
    if (!s)
        return kvm_errf(KVMESH_ENOMEM, "segment handle allocation failed");
    s->e = e;
    s->kind = k;
    s->ops = k == TP_SHM ? &tp_shm_ops : &tp_tcp_ops;
    s->seg_id = seg_id;
    s->token = token;
    pthread_mutex_init(&s->mu, NULL);
    if (k == TP_SHM)
        snprintf(s->owner, sizeof(s->owner), "%s/%s", a.host, a.shm);
    else
        snprintf(s->owner, sizeof(s->owner), "%s:%u", a.tcp_ip, a.tcp_port);
    unsigned tr = k == TP_SHM ? OBS_TRANSPORT_SHM : OBS_TRANSPORT_TCP;
    uint64_t t0 = env_clock_mono_ns();
    rc = s->ops->open(e, &a, s);
    obs_count(e->cfg.metrics, transport_operations_total, tr, OBS_XOP_OPEN, 1);
    obs_observe(e->cfg.metrics, transport_duration_seconds, tr, OBS_XOP_OPEN,
                env_clock_mono_ns() - t0);
    if (rc) {
        obs_count(e->cfg.metrics, transport_failures_total, tr, OBS_XOP_OPEN, 1);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void tp_close_segment(struct tp_segment *s)
{
    if (!s)
        return;
    s->ops->close(s);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

enum tp_kind tp_segment_kind(const struct tp_segment *s)
{
    return s->kind;
}

void tp_segment_note_grant(struct tp_segment *s, const struct seg_grant *g)
{
    if (s->kind == TP_SHM && g->token != 0 && g->seg_id == s->seg_id)
        tp_shm_note_grant(s, g);
}

/* ---- batches ------------------------------------------------------------------------------- */

int tp_batch_new(struct tp_engine *e, unsigned capacity, struct tp_batch **out)
{
    if (capacity == 0 || capacity > TP_MAX_BATCH)
        return kvm_errf(KVMESH_EINVAL, "batch capacity %u outside [1, %d]", capacity, TP_MAX_BATCH);
    unsigned slots_cap = capacity <= TP_BATCH_SPARE_CAP ? TP_BATCH_SPARE_CAP : capacity;
    struct tp_batch *b =
        slots_cap == TP_BATCH_SPARE_CAP ? atomic_exchange(&e->batch_spare, NULL) : NULL;
    if (b) { /* the spare: its lock and condition stay initialized; the rest starts over */
        memset(b->slots, 0, (size_t)b->slots_cap * sizeof(*b->slots));
        b->cap = capacity;
        b->n = b->pending = b->cb_running = 0;
        __atomic_store_n(&b->exchanges, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&b->canceled, 0, __ATOMIC_RELAXED);
        b->deadline_ms = 0;
        b->cb = NULL;
        b->cb_arg = NULL;
        *out = b;
        return 0;
    }
    b = seg_calloc(1, sizeof(*b));
    struct tp_slot *slots = seg_calloc(slots_cap, sizeof(*slots));
    if (!b || !slots) {
        free(b);
        free(slots);
        return kvm_errf(KVMESH_ENOMEM, "batch allocation failed");
    }
    b->e = e;
    b->cap = capacity;
    b->slots_cap = slots_cap;
    b->slots = slots;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    *out = b;
    return 0;
}

static void batch_destroy(struct tp_batch *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b->slots);
    free(b);
}

void tp_batch_free(struct tp_batch *b)
{
    if (!b)
        return;
    tp_cancel(b);
    tp_batch_wait(b, -1); /* (no request and no callback of b runs any more) */
    struct tp_batch *none = NULL;
    if (b->slots_cap == TP_BATCH_SPARE_CAP &&
        atomic_compare_exchange_strong(&b->e->batch_spare, &none, b))
        return; /* kept as the engine's spare (freed with the engine) */
    batch_destroy(b);
}

void tp_batch_set_callback(struct tp_batch *b, tp_batch_cb cb, void *arg)
{
    pthread_mutex_lock(&b->mu);
    b->cb = cb;
    b->cb_arg = arg;
    pthread_mutex_unlock(&b->mu);
}

void tp_batch_set_deadline(struct tp_batch *b, uint64_t deadline_ms)
{
    pthread_mutex_lock(&b->mu);
    b->deadline_ms = deadline_ms;
    pthread_mutex_unlock(&b->mu);
}

uint64_t tp_batch_deadline(struct tp_batch *b)
{
    pthread_mutex_lock(&b->mu);
    uint64_t d = b->deadline_ms;
    pthread_mutex_unlock(&b->mu);
    return d;
}

unsigned tp_batch_exchanges(const struct tp_batch *b)
{
    return __atomic_load_n(&b->exchanges, __ATOMIC_RELAXED);
}

unsigned tp_batch_count(const struct tp_batch *b)
{
    struct tp_batch *mb = (struct tp_batch *)b;
    pthread_mutex_lock(&mb->mu);
    unsigned n = b->n;
    pthread_mutex_unlock(&mb->mu);
    return n;
}

int tp_batch_canceled(const struct tp_batch *b)
{
    return __atomic_load_n(&b->canceled, __ATOMIC_ACQUIRE);
}

void tp_cancel(struct tp_batch *b)
{
    __atomic_store_n(&b->canceled, 1, __ATOMIC_RELEASE);
}

void tp_batch_abort(struct tp_batch *b)
{
    tp_cancel(b);
    if (tp_tcp_ops.abort)
        tp_tcp_ops.abort(b->e, b);
    if (tp_shm_ops.abort)
        tp_shm_ops.abort(b->e, b);
}

bool tp_segment_usable(const struct tp_segment *s)
{
    return !s->ops->usable || s->ops->usable(s);
}

bool tp_segment_sums(const struct tp_segment *s, unsigned nreq)
{
    return s->ops == &tp_shm_ops || (s->ops == &tp_tcp_ops && nreq == 1);
}

void tp_slot_set_chunks(struct tp_batch *b, unsigned idx, uint32_t chunks)
{
    pthread_mutex_lock(&b->mu);
    b->slots[idx].chunks_left = chunks;
    pthread_mutex_unlock(&b->mu);
}

/* Counts one finished request in the engine's registry (the one place data-plane requests are
 * counted): kvmesh_transport_operations_total, _bytes_total (successful bytes), _failures_total
 * and _duration_seconds, labelled by the transport its segment was opened with. *now_ns: the
 * completion time, read here on first use (0 before): one clock read for the requests that
 * tp_chunks_done completes together. */
static void count_request(const struct tp_engine *e, const struct tp_slot *s, uint64_t *now_ns)
{
    struct obs_registry *reg = e->cfg.metrics;
    if (!reg)
        return;
    unsigned tr =
        s->r.segment && s->r.segment->kind == TP_SHM ? OBS_TRANSPORT_SHM : OBS_TRANSPORT_TCP;
    unsigned op = s->r.op == TP_READ ? OBS_XOP_READ : OBS_XOP_WRITE;
    obs_count(reg, transport_operations_total, tr, op, 1);
    if (s->first_err)
        obs_count(reg, transport_failures_total, tr, op, 1);
    else
        obs_count(reg, transport_bytes_total, tr, op, s->r.length);
    if (!*now_ns)
        *now_ns = env_clock_mono_ns();
    obs_observe(reg, transport_duration_seconds, tr, op, *now_ns - s->start_ns);
}

/* Records chunk idx's result (b->mu held); true when it was its request's last one. */
static bool chunk_done_locked(struct tp_batch *b, unsigned idx, int status, uint8_t reason,
                              uint64_t *now_ns)
{
    struct tp_slot *s = &b->slots[idx];
    KVM_ASSERT(s->chunks_left > 0);
    if (status && !s->first_err) {
        s->first_err = status;
        s->reason = reason;
    }
    if (--s->chunks_left > 0)
        return false;
    __atomic_store_n(&s->status, s->first_err, __ATOMIC_RELEASE);
    count_request(b->e, s, now_ns);
    KVM_ASSERT(b->pending > 0);
    b->pending--;
    return true;
}

/* The batch has nothing pending: runs its callback and wakes its waiters (b->mu held, released
 * while the callback runs). */
static void batch_drained_locked(struct tp_batch *b)
{
    if (b->cb) {
        tp_batch_cb cb = b->cb;
        void *arg = b->cb_arg;
        b->cb_running++;
        pthread_mutex_unlock(&b->mu);
        cb(b, arg);
        pthread_mutex_lock(&b->mu);
        b->cb_running--;
    }
    pthread_cond_broadcast(&b->cv);
}

void tp_chunk_done(struct tp_batch *b, unsigned idx, int status, uint8_t reason)
{
    uint64_t now_ns = 0;
    pthread_mutex_lock(&b->mu);
    if (chunk_done_locked(b, idx, status, reason, &now_ns) && b->pending == 0)
        batch_drained_locked(b);
    pthread_mutex_unlock(&b->mu);
}

void tp_chunks_done(struct tp_batch *b, const unsigned *idx, const int *status,
                    const uint8_t *reason, unsigned n, uint64_t *now_ns)
{
    if (n == 0)
        return;
    pthread_mutex_lock(&b->mu);
    for (unsigned i = 0; i < n; i++)
        chunk_done_locked(b, idx[i], status[i], reason[i], now_ns);
    /* (pending reaches 0 at the last of them at the earliest: each one's request was pending) */
    if (b->pending == 0)
        batch_drained_locked(b);
    pthread_mutex_unlock(&b->mu);
}

int tp_submit(struct tp_batch *b, const struct tp_request *reqs, unsigned n)
{
    if (n == 0)
        return 0;
    if (!reqs)
        return kvm_errf(KVMESH_EINVAL, "NULL request array");
    pthread_mutex_lock(&b->mu);
    if (n > b->cap - b->n) {
        unsigned have = b->cap - b->n;
        pthread_mutex_unlock(&b->mu);
        return kvm_errf(KVMESH_ETOOBIG, "batch has room for %u more requests, %u submitted", have,
                        n);
    }
    unsigned first = b->n;
    const uint64_t now_ns = env_clock_mono_ns(); /* one clock read per submit */
    for (unsigned i = 0; i < n; i++) {
        struct tp_slot *s = &b->slots[first + i];
        memset(s, 0, sizeof(*s));
        s->r = reqs[i];
        s->status = TP_STATUS_PENDING;
        s->chunks_left = 1;
        s->start_ns = now_ns;
    }
    b->n += n;
    b->pending += n;
    pthread_mutex_unlock(&b->mu);
    /* A run of consecutive valid requests to one transport with submit_run is started in one
     * call of it (tcp queues the whole run before it wakes its I/O threads). */
    const struct tp_ops *run_ops = NULL;
    unsigned run_first = first, run_n = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned idx = first + i;
        const struct tp_request *r = &reqs[i];
        enum seg_reason reason = SEG_OK;
        int rc = 0;
        if (r->op != TP_READ && r->op != TP_WRITE)
            rc = kvm_errf(KVMESH_EINVAL, "request %u: op %d is neither READ nor WRITE", idx,
                          (int)r->op);
        else if (r->length == 0 || r->length > TP_MAX_REQ_LEN)
            rc = kvm_errf(KVMESH_EINVAL, "request %u: length %llu outside [1, %llu]", idx,
                          (unsigned long long)r->length, (unsigned long long)TP_MAX_REQ_LEN);
        else if (!r->segment || r->segment->e != b->e)
            rc = kvm_errf(KVMESH_EINVAL, "request %u: segment not opened by this engine", idx);
        else if (!r->local || !local_registered(b->e, r->local, r->length))
            rc = kvm_errf(KVMESH_EINVAL,
                          "request %u: local buffer not registered memory; call "
                          "tp_register_memory first",
                          idx);
        else if (tp_batch_canceled(b))
            rc = KVMESH_ECANCELED;
        else if (r->segment->ops->submit_run) {
            if (run_n && run_ops != r->segment->ops) {
                run_ops->submit_run(b, run_first, run_n);
                run_n = 0;
            }
            if (!run_n) {
                run_ops = r->segment->ops;
                run_first = idx;
            }
            run_n++;
            continue;
        } else
            rc = r->segment->ops->submit(b, idx, &reason);
        if (run_n) { /* keeps the submission order */
            run_ops->submit_run(b, run_first, run_n);
            run_n = 0;
        }
        if (rc)
            tp_chunk_done(b, idx, rc, (uint8_t)reason);
    }
    if (run_n)
        run_ops->submit_run(b, run_first, run_n);
    return 0;
}

int tp_status(const struct tp_batch *b, unsigned i, enum seg_reason *reason)
{
    struct tp_batch *mb = (struct tp_batch *)b;
    pthread_mutex_lock(&mb->mu);
    int st = i < b->n ? b->slots[i].status : KVMESH_EINVAL;
    if (reason)
        *reason = i < b->n && st != TP_STATUS_PENDING ? b->slots[i].reason : SEG_OK;
    pthread_mutex_unlock(&mb->mu);
    return st;
}

int tp_batch_result(const struct tp_batch *b)
{
    struct tp_batch *mb = (struct tp_batch *)b;
    int rc = 0;
    pthread_mutex_lock(&mb->mu);
    for (unsigned i = 0; i < b->n && !rc; i++)
        if (b->slots[i].status != 0)
            rc = b->slots[i].status;
    pthread_mutex_unlock(&mb->mu);
    return rc;
}

int tp_batch_wait(struct tp_batch *b, int timeout_ms)
{
    struct timespec dl;
    if (timeout_ms >= 0)
        env_clock_after(CLOCK_REALTIME, (uint64_t)timeout_ms, &dl);
    int rc = 0;
    pthread_mutex_lock(&b->mu);
    while (b->pending > 0 || b->cb_running > 0) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&b->cv, &b->mu);
        } else if (pthread_cond_timedwait(&b->cv, &b->mu, &dl) == ETIMEDOUT) {
            rc = kvm_errf(KVMESH_ETIMEDOUT, "%u requests still pending after %d ms", b->pending,
                          timeout_ms);
            break;
        }
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}
