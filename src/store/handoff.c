/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handoff.c — the hot-upgrade index codec, its socket frames (SCM_RIGHTS for the segment fds)
 * and the predecessor's export (handoff.h has the protocol). The owner-side halves that touch
 * slots (kvm_owner_export, kvm_owner_adopt) live in owner.c, which owns the slot type; the index
 * container they fill (init/free/add_slot) is handoff_set.c, below both.
 */
#include "store/handoff.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/util.h"
#include "env/clock.h"
#include "env/env_uv.h"
#include "net/seg.h"
#include "store/alloc.h"
#include "store/data.h"
#include "store/store.h"

_Static_assert(KVM_HANDOFF_MAX_SEGS == STORE_MAX_SEGS, "one handoff segment per store segment");

/* ---- codec ---------------------------------------------------------------------------------- */

int kvm_handoff_encode(const struct kvm_handoff *h, uint8_t **out, size_t *len)
{
    kvm_wr_t w;
    kvm_wr_growing(&w, KVM_HANDOFF_MAX_BYTES);
    kvm_wr_u32le(&w, KVM_HANDOFF_VERSION);
    kvm_wr_bytes(&w, h->id.b, sizeof(h->id.b));
    kvm_wr_u64le(&w, h->epoch);
    kvm_wr_u64le(&w, h->slot_seq);
    kvm_wr_u32le(&w, h->n_segs);
    for (uint32_t i = 0; i < h->n_segs; i++) {
        kvm_wr_u64le(&w, h->segs[i].id);
        kvm_wr_u64le(&w, h->segs[i].size);
    }
    kvm_wr_u32le(&w, h->n_slots);
    for (uint32_t i = 0; i < h->n_slots; i++) {
        const struct kvm_handoff_slot *s = &h->slots[i];
        kvm_wr_u8(&w, (uint8_t)s->segi);
        kvm_wr_u8(&w, s->state);
        kvm_wr_u64le(&w, s->off);
        kvm_wr_u64le(&w, s->len);
        kvm_wr_u64le(&w, s->seq);
        kvm_wr_lp16le(&w, s->ident.enc, s->ident.enc_len);
    }
    int rc = kvm_wr_finish(&w, len);
    if (rc) {
        kvm_wr_free(&w);
        return kvm_errf(rc, "the handoff index does not fit %u bytes", KVM_HANDOFF_MAX_BYTES);
    }
    *out = kvm_wr_take(&w, len);
    return *out ? 0 : KVMESH_ENOMEM;
}

struct span {
    uint32_t segi;
    uint64_t off, end;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->segi != y->segi)
        return x->segi < y->segi ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int bad(struct kvm_handoff *h, const char *what, uint64_t a, uint64_t b)
{
    kvm_handoff_free(h);
    return kvm_errf(KVMESH_EPROTO, "handoff index rejected: %s (%" PRIu64 ", %" PRIu64 ")", what, a,
                    b);
}

int kvm_handoff_decode(const uint8_t *buf, size_t len, struct kvm_handoff *h)
{
    kvm_handoff_init(h);
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    uint32_t version = kvm_rd_u32le(&r);
    if (!kvm_rd_ok(&r) || version != KVM_HANDOFF_VERSION)
        return bad(h, "unknown version", version, KVM_HANDOFF_VERSION);
    kvm_rd_copy(&r, h->id.b, sizeof(h->id.b));
    h->epoch = kvm_rd_u64le(&r);
    h->slot_seq = kvm_rd_u64le(&r);
    uint32_t n_segs = kvm_rd_u32le(&r);
    if (!kvm_rd_ok(&r) || n_segs == 0 || n_segs > KVM_HANDOFF_MAX_SEGS)
        return bad(h, "segment count outside [1, 64]", n_segs, 0);
    if (kvm_id128_is_nil(&h->id) || h->epoch == 0)
        return bad(h, "nil runtime id or zero epoch", h->epoch, 0);
    for (uint32_t i = 0; i < n_segs; i++) {
        struct kvm_handoff_seg *s = &h->segs[i];
        s->id = kvm_rd_u64le(&r);
        s->size = kvm_rd_u64le(&r);
        if (!kvm_rd_ok(&r))
            return bad(h, "truncated segment table", i, n_segs);
        /* (an owner's allocator takes at most ALLOC_MAX_SIZE: below SEG_MAX_SIZE) */
        if (s->id == 0 || s->size == 0 || s->size > SEG_MAX_SIZE || s->size > ALLOC_MAX_SIZE ||
            s->size % ALLOC_ALIGN)
            return bad(h, "segment id zero or size invalid", s->id, s->size);
        for (uint32_t j = 0; j < i; j++)
            if (h->segs[j].id == s->id)
                return bad(h, "duplicate segment id", s->id, j);
        h->n_segs = i + 1;
    }
    uint32_t n_slots = kvm_rd_u32le(&r);
    if (!kvm_rd_ok(&r) || n_slots > KVM_HANDOFF_MAX_SLOTS)
        return bad(h, "slot count too large", n_slots, KVM_HANDOFF_MAX_SLOTS);
    /* Each slot is at least 29 bytes: a count the input cannot hold is refused before any
     * allocation. */
    if ((uint64_t)n_slots * 29u > kvm_rd_remaining(&r))
        return bad(h, "slot count exceeds the input", n_slots, kvm_rd_remaining(&r));
    struct span *sp = n_slots ? malloc((size_t)n_slots * sizeof(*sp)) : NULL;
    if (n_slots && !sp) {
        kvm_handoff_free(h);
        return KVMESH_ENOMEM;
    }
    int rc = 0;
    for (uint32_t i = 0; i < n_slots && !rc; i++) {
        uint32_t segi = kvm_rd_u8(&r);
        uint8_t state = kvm_rd_u8(&r);
        uint64_t off = kvm_rd_u64le(&r), slen = kvm_rd_u64le(&r), seq = kvm_rd_u64le(&r);
        uint16_t il = 0;
        const uint8_t *ie = kvm_rd_lp16le(&r, &il);
        if (!kvm_rd_ok(&r)) {
            rc = bad(h, "truncated slot", i, n_slots);
            break;
        }
        if (segi >= h->n_segs || (state != KVM_HANDOFF_COMMITTED && state != KVM_HANDOFF_RECLAIM)) {
            rc = bad(h, "slot segment index or state invalid", segi, state);
            break;
        }
        uint64_t size = h->segs[segi].size;
        if (slen == 0 || off % ALLOC_ALIGN || off >= size || slen > size - off) {
            rc = bad(h, "slot outside its segment or misaligned", off, slen);
            break;
        }
        if (seq > h->slot_seq) {
            rc = bad(h, "slot commit sequence above the counter", seq, h->slot_seq);
            break;
        }
        kvm_ident_t id;
        if (kvm_ident_from_canonical(&id, ie, il) != 0) {
            rc = bad(h, "slot identity invalid", i, il);
            break;
        }
        int arc = kvm_handoff_add_slot(h, segi, state, off, slen, seq, &id);
        kvm_ident_free(&id);
        if (arc) {
            kvm_handoff_free(h);
            rc = arc;
            break;
        }
        uint64_t end = off + ((slen + ALLOC_ALIGN - 1) & ~(uint64_t)(ALLOC_ALIGN - 1));
        sp[i] = (struct span){segi, off, end};
    }
    if (!rc && !kvm_rd_end(&r))
        rc = bad(h, "trailing bytes after the slots", kvm_rd_remaining(&r), 0);
    if (!rc && n_slots) {
        qsort(sp, n_slots, sizeof(*sp), span_cmp);
        for (uint32_t i = 1; i < n_slots && !rc; i++)
            if (sp[i].segi == sp[i - 1].segi && sp[i].off < sp[i - 1].end)
                rc = bad(h, "slots overlap", sp[i - 1].off, sp[i].off);
        for (uint32_t i = 0; i < n_slots && !rc; i++)
            if (sp[i].end > h->segs[sp[i].segi].size)
                rc = bad(h, "slot rounded to the alignment overruns its segment", sp[i].off,
                         sp[i].end);
    }
    free(sp);
    return rc;
}

/* ---- frames --------------------------------------------------------------------------------- */

int kvm_handoff_parse_hdr(const uint8_t *hdr, uint8_t *type, uint32_t *len, uint32_t *n_fds)
{
    kvm_rd_t r;
    kvm_rd_init(&r, hdr, KVM_HANDOFF_HDR_LEN);
    uint32_t magic = kvm_rd_u32le(&r);
    uint8_t version = kvm_rd_u8(&r);
    *type = kvm_rd_u8(&r);
    kvm_rd_zeros(&r, 2);
    *len = kvm_rd_u32le(&r);
    *n_fds = kvm_rd_u32le(&r);
    if (!kvm_rd_end(&r) || magic != KVM_HANDOFF_MAGIC)
        return kvm_errf(KVMESH_EPROTO, "not a kvmesh handoff frame (wrong magic or padding)");
    if (version != KVM_HANDOFF_VERSION)
        return kvm_errf(KVMESH_EPROTO,
                        "handoff frame version %u, this build speaks %u; upgrade "
                        "between builds that share a handoff version",
                        version, KVM_HANDOFF_VERSION);
    if (*type < KVM_HANDOFF_HELLO || *type > KVM_HANDOFF_REFUSE || *len > KVM_HANDOFF_MAX_BYTES ||
        *n_fds > KVM_HANDOFF_MAX_SEGS || (*n_fds && *type != KVM_HANDOFF_STATE))
        return kvm_errf(KVMESH_EPROTO, "handoff frame type %u, length %u or fd count %u invalid",
                        *type, *len, *n_fds);
    return 0;
}

static int wait_fd(int sock, short ev, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t now = env_clock_mono_ms();
        if (now >= deadline_ms)
            return kvm_errf(KVMESH_ETIMEDOUT, "handoff peer did not answer in time");
        struct pollfd p = {.fd = sock, .events = ev};
        int n = poll(&p, 1, (int)(deadline_ms - now));
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return kvm_errf(KVMESH_EIO, "poll on the handoff socket: %s", strerror(errno));
    }
}

int kvm_handoff_send_msg(int sock, uint8_t type, const void *payload, size_t len, const int *fds,
                         uint32_t n_fds, uint32_t timeout_ms)
{
    if (len > KVM_HANDOFF_MAX_BYTES || n_fds > KVM_HANDOFF_MAX_SEGS)
        return kvm_errf(KVMESH_EINVAL, "handoff frame too large");
    uint64_t deadline = env_clock_mono_ms() + timeout_ms;
    uint8_t hdr[KVM_HANDOFF_HDR_LEN];
    kvm_wr_t w;
    kvm_wr_fixed(&w, hdr, sizeof(hdr));
    kvm_wr_u32le(&w, KVM_HANDOFF_MAGIC);
    kvm_wr_u8(&w, KVM_HANDOFF_VERSION);
    kvm_wr_u8(&w, type);
    kvm_wr_zeros(&w, 2);
    kvm_wr_u32le(&w, (uint32_t)len);
    kvm_wr_u32le(&w, n_fds);
    size_t hl;
    KVM_ASSERT(kvm_wr_finish(&w, &hl) == 0 && hl == sizeof(hdr));
    union {
        struct cmsghdr c;
        char buf[CMSG_SPACE(sizeof(int) * KVM_HANDOFF_MAX_SEGS)];
    } cm;
    memset(&cm, 0, sizeof(cm));
    size_t sent = 0;
    while (sent < sizeof(hdr)) { /* the fds travel with the header's first byte */
        struct iovec iov = {.iov_base = hdr + sent, .iov_len = sizeof(hdr) - sent};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (sent == 0 && n_fds) {
            mh.msg_control = cm.buf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
            memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
        }
        int rc = wait_fd(sock, POLLOUT, deadline);
        if (rc)
            return rc;
        ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return kvm_errf(KVMESH_EIO, "handoff send failed: %s", strerror(errno));
        sent += (size_t)n;
    }
    const uint8_t *p = payload;
    for (size_t off = 0; off < len;) {
        int rc = wait_fd(sock, POLLOUT, deadline);
        if (rc)
            return rc;
        ssize_t n = send(sock, p + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return kvm_errf(KVMESH_EIO, "handoff send failed: %s", strerror(errno));
        off += (size_t)n;
    }
    return 0;
}

static void close_fds(int *fds, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

int kvm_handoff_recv_msg(int sock, uint8_t *type, uint8_t **payload, size_t *len, int *fds,
                         uint32_t max_fds, uint32_t *n_fds, uint32_t timeout_ms)
{
    *payload = NULL;
    *len = 0;
    *n_fds = 0;
    uint64_t deadline = env_clock_mono_ms() + timeout_ms;
    uint8_t hdr[KVM_HANDOFF_HDR_LEN];
    size_t got = 0;
    uint32_t nrecv = 0;
    int rfds[KVM_HANDOFF_MAX_SEGS];
    int rc = 0;
    while (got < sizeof(hdr)) {
        union {
            struct cmsghdr c;
            char buf[CMSG_SPACE(sizeof(int) * KVM_HANDOFF_MAX_SEGS)];
        } cm;
        struct iovec iov = {.iov_base = hdr + got, .iov_len = sizeof(hdr) - got};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm)};
        if ((rc = wait_fd(sock, POLLIN, deadline)) != 0)
            goto fail;
        ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n == 0) {
            rc = kvm_errf(KVMESH_ECLOSED, "handoff peer closed the connection");
            goto fail;
        }
        if (n < 0) {
            rc = kvm_errf(KVMESH_EIO, "handoff receive failed: %s", strerror(errno));
            goto fail;
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                if (nrecv < KVM_HANDOFF_MAX_SEGS)
                    rfds[nrecv++] = fd;
                else
                    close(fd);
            }
        }
        if (mh.msg_flags & MSG_CTRUNC) {
            rc = kvm_errf(KVMESH_EPROTO, "handoff frame carried more fds than allowed");
            goto fail;
        }
        got += (size_t)n;
    }
    uint32_t plen, nf;
    if ((rc = kvm_handoff_parse_hdr(hdr, type, &plen, &nf)) != 0)
        goto fail;
    if (nf != nrecv || nf > max_fds) {
        rc = kvm_errf(KVMESH_EPROTO, "handoff frame announced %u fds, carried %u (at most %u)", nf,
                      nrecv, max_fds);
        goto fail;
    }
    uint8_t *p = plen ? malloc(plen) : NULL;
    if (plen && !p) {
        rc = KVMESH_ENOMEM;
        goto fail;
    }
    for (size_t off = 0; off < plen;) {
        if ((rc = wait_fd(sock, POLLIN, deadline)) != 0) {
            free(p);
            goto fail;
        }
        ssize_t n = recv(sock, p + off, plen - off, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            free(p);
            rc = kvm_errf(n == 0 ? KVMESH_ECLOSED : KVMESH_EIO, "handoff payload cut short");
            goto fail;
        }
        off += (size_t)n;
    }
    if (nrecv)
        memcpy(fds, rfds, sizeof(int) * nrecv);
    *n_fds = nrecv;
    *payload = p;
    *len = plen;
    return 0;
fail:
    close_fds(rfds, nrecv);
    return rc;
}

/* ---- predecessor export --------------------------------------------------------------------- */

struct export_call {
    kvm_rt_t *rt;
    struct kvm_handoff *out;
    bool settled, exported;
    int rc;
};

static void export_on_loop(void *arg)
{
    struct export_call *c = arg;
    kvm_rt_t *rt = c->rt;
    c->settled = kvm_owner_settled(rt);
    if (!c->settled)
        return;
    kvm_owner_stop(rt); /* no eviction, TTL or reclaim step changes the exported index */
    c->rc = kvm_owner_export(rt, c->out);
    c->exported = true;
}

static void resume_on_loop(void *arg)
{
    kvm_owner_start(arg);
}

int kvm_handoff_resume(kvm_rt_t *rt)
{
    return env_uv_thread_call(rt->thread, resume_on_loop, rt);
}

/* Exports on the loop once the owner has no reservation, reservation waiter or eviction in
 * flight; between attempts waits for slots to settle (kvm_store_wait_slots). */
static int export_when_settled(kvm_rt_t *rt, struct export_call *c, uint64_t deadline_ms)
{
    uint64_t gen = kvm_waitq_enter(&rt->wq_slots);
    int rc;
    while ((rc = env_uv_thread_call(rt->thread, export_on_loop, c)) == 0 && !c->exported) {
        if ((rc = kvm_store_wait_slots(rt, &gen, deadline_ms)) != 0) {
            if (rc == KVMESH_ECLOSED)
                rc = kvm_errf(rc, "the runtime closed before its memory was handed over");
            break;
        }
    }
    kvm_waitq_leave(&rt->wq_slots);
    return rc;
}

int kvm_handoff_export(kvm_rt_t *rt, uint32_t timeout_ms, struct kvm_handoff *out)
{
    kvm_op_t *op = kvm_op_new(rt, KVM_OP_DRAIN_BEGIN, 0);
    if (!op)
        return KVMESH_ENOMEM;
    int rc = kvm_op_run(op);
    kvm_op_unref(op);
    if (rc)
        return rc;
    struct export_call c = {.rt = rt, .out = out};
    if ((rc = export_when_settled(rt, &c, env_clock_mono_ms() + timeout_ms)) != 0)
        return rc == KVMESH_ETIMEDOUT ? kvm_errf(rc,
                                                 "reservations or evictions still in flight after "
                                                 "%u ms; the memory was not handed over",
                                                 timeout_ms)
                                      : rc;
    if (c.rc) {
        kvm_handoff_free(out);
        return c.rc;
    }
    return 0;
}
