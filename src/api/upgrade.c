// SPDX-License-Identifier: Apache-2.0
/*
 * upgrade.c — the kvmesh_upgrade_* calls of kvmesh_tools.h: the two sides of a hot upgrade over
 * a unix socket (src/store/handoff.h has the protocol and the codec).
 *
 * Order of the predecessor's steps, and why: the state goes out while it still serves reads (its
 * record still names its data address), the successor's MAPPED says it holds every segment fd
 * (the memfd pages now outlive this process), only then is the runtime closed (lease revoked:
 * the successor's join cannot be overtaken by a keepalive of the old record), and CLOSED lets
 * the successor join. Before MAPPED the predecessor still owns its memory: a failure there
 * restarts its housekeeping and leaves it open for the caller's ordinary drain (the successor
 * joins only after CLOSED, so the two never serve the same memory).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/config.h"
#include "api/kvmesh_tools.h"
#include "api/upgrade.h"
#include "core/util.h"
#include "core/version.h"
#include "store/handoff.h"
#include "store/store.h"

static void refuse(int sock, const char *why)
{
    (void)kvm_handoff_send_msg(sock, KVM_HANDOFF_REFUSE, why, strlen(why), NULL, 0, 1000);
}

/* Reads one frame and insists on its type; a REFUSE becomes an error with the peer's reason. */
static int expect(int sock, uint8_t want, uint8_t **payload, size_t *len, int *fds,
                  uint32_t max_fds, uint32_t *n_fds, uint32_t timeout_ms)
{
    uint8_t type = 0;
    uint32_t nf = 0;
    int rc = kvm_handoff_recv_msg(sock, &type, payload, len, fds, max_fds, &nf, timeout_ms);
    if (rc)
        return rc;
    if (n_fds)
        *n_fds = nf;
    if (type == want)
        return 0;
    for (uint32_t i = 0; i < nf; i++)
        close(fds[i]);
    if (type == KVM_HANDOFF_REFUSE) {
        rc = kvm_errf(KVMESH_EUNAVAILABLE, "the handoff peer refused: %.*s",
                      (int)(*len > 400 ? 400 : *len), *payload ? (const char *)*payload : "");
    } else {
        rc = kvm_errf(KVMESH_EPROTO, "handoff frame type %u where %u was expected", type, want);
    }
    free(*payload);
    *payload = NULL;
    return rc;
}

int kvmesh_upgrade_hello(const kvmesh_config_t *cfg, int sock, uint32_t timeout_ms)
{
    kvm_runtime_id_t id;
    if (!cfg || kvm_id128_parse(cfg->runtime_id, &id) != 0)
        return kvm_errf(KVMESH_ECONFIG, "a hot-upgrade successor needs runtime_id set to its "
                                        "predecessor's (32 hex digits)");
    return kvm_handoff_send_msg(sock, KVM_HANDOFF_HELLO, id.b, sizeof(id.b), NULL, 0, timeout_ms);
}

int kvmesh_upgrade_accept(kvmesh_t *kv, int sock, uint32_t timeout_ms)
{
    kvm_rt_t *rt = kvmesh_runtime_of(kv);
    if (!rt)
        return kvm_errf(KVMESH_EINVAL, "kvmesh_upgrade_accept: no runtime");
    uint8_t *p = NULL;
    size_t len = 0;
    int rc = expect(sock, KVM_HANDOFF_HELLO, &p, &len, NULL, 0, NULL, timeout_ms);
    if (rc)
        return rc;
    if (len != sizeof(rt->self.id.b) || memcmp(p, rt->self.id.b, len) != 0) {
        free(p);
        refuse(sock, "the successor's runtime_id is not this runtime's; start it with the same "
                     "runtime_id");
        return kvm_errf(KVMESH_ECONFIG, "a successor with another runtime id connected; refused");
    }
    free(p);
    return 0;
}

int kvmesh_upgrade_hand_over(kvmesh_t **kv, int sock, uint32_t timeout_ms)
{
    kvm_rt_t *rt = kvmesh_runtime_of(*kv);
    if (!rt)
        return kvm_errf(KVMESH_EINVAL, "kvmesh_upgrade_hand_over: no runtime");
    struct kvm_handoff h;
    kvm_handoff_init(&h);
    int rc = kvm_handoff_export(rt, timeout_ms, &h);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (!rc)
        rc = kvm_handoff_encode(&h, &buf, &len);
    if (rc) {
        char why[300];
        snprintf(why, sizeof(why), "the predecessor could not export its state: %s",
                 kvmesh_last_error());
        refuse(sock, why);
        kvm_handoff_free(&h);
        return kvm_errf(rc, "%s", why);
    }
    int fds[KVM_HANDOFF_MAX_SEGS];
    for (uint32_t i = 0; i < h.n_segs; i++)
        fds[i] = h.segs[i].fd;
    rc = kvm_handoff_send_msg(sock, KVM_HANDOFF_STATE, buf, len, fds, h.n_segs, timeout_ms);
    free(buf);
    kvm_handoff_free(&h); /* our duplicates; the kernel gave the successor its own */
    uint8_t *p = NULL;
    if (!rc)
        rc = expect(sock, KVM_HANDOFF_MAPPED, &p, &len, NULL, 0, NULL, timeout_ms);
    free(p);
    if (rc) {
        /* No MAPPED: the successor will not join (it joins only after CLOSED), so this runtime
         * still owns its memory; housekeeping restarts and the caller drains. */
        char why[300];
        snprintf(why, sizeof(why), "%s", kvmesh_last_error());
        kvm_handoff_resume(rt);
        return kvm_errf(rc, "the successor did not confirm the state: %s", why);
    }
    kvmesh_close(*kv);
    *kv = NULL;
    return kvm_handoff_send_msg(sock, KVM_HANDOFF_CLOSED, NULL, 0, NULL, 0, timeout_ms);
}

/* What seg_adopt will insist on, checked before MAPPED commits the predecessor to leaving. */
static int check_fd(int fd, uint64_t size)
{
    int seals = fcntl(fd, F_GET_SEALS);
    off_t real = lseek(fd, 0, SEEK_END);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
        real < 0 || (uint64_t)real < size)
        return kvm_errf(KVMESH_EPROTO,
                        "a handed-over segment fd is not a sealed memfd of %llu "
                        "bytes",
                        (unsigned long long)size);
    return 0;
}

int kvmesh_upgrade_take_over(kvmesh_t **out, const kvmesh_config_t *cfg, int sock,
                             uint32_t timeout_ms, uint32_t *n_segs, uint32_t *n_slots)
{
    *out = NULL;
    *n_segs = *n_slots = 0;
    kvm_runtime_id_t id;
    if (kvm_id128_parse(cfg->runtime_id, &id) != 0)
        return kvm_errf(KVMESH_ECONFIG, "runtime_id must be set to the predecessor's");
    uint8_t *p = NULL;
    size_t len = 0;
    int fds[KVM_HANDOFF_MAX_SEGS];
    uint32_t nf = 0;
    int rc = expect(sock, KVM_HANDOFF_STATE, &p, &len, fds, KVM_HANDOFF_MAX_SEGS, &nf, timeout_ms);
    if (rc)
        return rc;
    struct kvm_handoff h;
    rc = kvm_handoff_decode(p, len, &h);
    free(p);
    if (!rc && (nf != h.n_segs || !kvm_id128_equal(&h.id, &id)))
        rc = kvm_errf(KVMESH_EPROTO,
                      "the handoff carried %u fds for %u segments, or another "
                      "runtime's id",
                      nf, h.n_segs);
    for (uint32_t i = 0; i < nf; i++) {
        if (!rc && i < h.n_segs) {
            h.segs[i].fd = fds[i];
            rc = check_fd(fds[i], h.segs[i].size);
        } else {
            close(fds[i]);
        }
    }
    if (rc) {
        refuse(sock, kvmesh_last_error());
        kvm_handoff_free(&h);
        return rc;
    }
    if ((rc = kvm_handoff_send_msg(sock, KVM_HANDOFF_MAPPED, NULL, 0, NULL, 0, timeout_ms)) != 0 ||
        (rc = expect(sock, KVM_HANDOFF_CLOSED, &p, &len, NULL, 0, NULL, timeout_ms)) != 0) {
        kvm_handoff_free(&h);
        return rc;
    }
    free(p);
    *n_segs = h.n_segs;
    *n_slots = h.n_slots;
    rc = kvm_api_open(out, cfg, &h);
    kvm_handoff_free(&h);
    return rc;
}
