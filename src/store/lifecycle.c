/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lifecycle.c — an operator's lifecycle requests for a member (`kvmesh admin drain|activate`),
 * read by the runtime they name.
 *
 * Owns: the record kvmesh/v1/<dep>/lifecycle/<runtime-id> (codec, pure). The step that applies
 * it to this runtime's membership state is member.c's (lifecycle_apply), which owns that state.
 *
 *   record   JSON {"v":1,"state":"draining","at_ms":<wall ms of the request>}; written by the
 *            admin tool (not bound to a lease: the request outlives a restart of the member);
 *            absent = active (activate deletes it). Only "draining" and "active" are requests.
 *   reading  every write of this runtime's member record (the keepalive rewrite, every lease
 *            period / 3, and each state change) is a metadata transaction that also GETs this
 *            key: the request costs no extra round trip, and a runtime applies it within one
 *            keepalive period (member.c, lifecycle_apply).
 *   applying ACTIVE + "draining"  -> DRAINING (admin_drained set): no new placements land here
 *            (placement skips members that are not active; kvm_owner_reserve refuses), reads of
 *            its replicas go on, it stops being route-capable (as any draining member), and the
 *            record says "draining" to every other runtime, the admin tool and the status page.
 *            DRAINING by an operator + no request (or "active") -> ACTIVE. A drain begun by
 *            kvmesh_drain (SIGTERM of kvmeshd) clears admin_drained, so an activate never
 *            interrupts a runtime that is leaving. STANDBY and GONE ignore requests (a restarted
 *            member applies the request at its first write after it became active).
 *   segments optional "segments":["<16 hex>",...]: segments of this member an operator drained
 *            (`kvmesh admin segments drain`). A record may then say "active" (the member itself
 *            is not drained). Applied in every state but GONE (kvm_owner_drain_segments): a
 *            listed segment takes no new slots (reserve skips it, placements go to the
 *            member's other segments or other owners), its replicas stay readable where they
 *            are and leave only as any replica does (release, eviction); a segment no longer
 *            listed takes slots again. The member record lists each segment with its state.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/hex.h"
#include "core/util.h"
#include "store/store.h"

int kvm_lifecycle_encode_req(const struct kvm_lifecycle_req *r, char *buf, size_t cap)
{
    if (r->want != KVM_MS_DRAINING && r->want != KVM_MS_ACTIVE)
        return kvm_errf(KVMESH_EINVAL, "a lifecycle request is draining or active, not %s",
                        kvm_member_state_name(r->want));
    if (r->n_segs > STORE_MAX_SEGS)
        return kvm_errf(KVMESH_EINVAL, "a lifecycle request names at most %d segments, not %u",
                        STORE_MAX_SEGS, r->n_segs);
    int n = snprintf(buf, cap, "{\"v\":1,\"state\":\"%s\",\"at_ms\":%llu",
                     kvm_member_state_name(r->want), (unsigned long long)r->at_ms);
    size_t off = n > 0 ? (size_t)n : cap;
    if (r->n_segs && off < cap) {
        n = snprintf(buf + off, cap - off, ",\"segments\":[");
        off += n > 0 ? (size_t)n : cap;
        for (uint32_t i = 0; i < r->n_segs && off < cap; i++) {
            n = snprintf(buf + off, cap - off, "%s\"%016" PRIx64 "\"", i ? "," : "", r->segs[i]);
            off += n > 0 ? (size_t)n : cap;
        }
        if (off < cap) {
            n = snprintf(buf + off, cap - off, "]");
            off += n > 0 ? (size_t)n : cap;
        }
    }
    if (off < cap) {
        n = snprintf(buf + off, cap - off, "}");
        off += n > 0 ? (size_t)n : cap;
    }
    if (off >= cap)
        return kvm_errf(KVMESH_ETOOBIG, "lifecycle record does not fit %zu bytes", cap);
    return 0;
}

int kvm_lifecycle_encode(enum kvm_member_state want, uint64_t at_ms, char *buf, size_t cap)
{
    struct kvm_lifecycle_req r = {.want = want, .at_ms = at_ms};
    return kvm_lifecycle_encode_req(&r, buf, cap);
}

int kvm_lifecycle_decode_req(const uint8_t *v, size_t len, struct kvm_lifecycle_req *r)
{
    memset(r, 0, sizeof(*r));
    json_error_t jerr;
    json_t *o = json_loadb((const char *)v, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return kvm_errf(KVMESH_EPROTO, "lifecycle record is not JSON: %s", jerr.text);
    json_int_t ver = 0, at = 0;
    const char *state = NULL;
    json_t *segs = NULL;
    int rc = 0;
    if (json_unpack(o, "{s:I,s:s,s:I,s?o}", "v", &ver, "state", &state, "at_ms", &at, "segments",
                    &segs) != 0 ||
        ver != 1 || at < 0)
        rc = kvm_errf(KVMESH_EPROTO, "lifecycle record is malformed (want v 1, state, at_ms)");
    else if (strcmp(state, "draining") == 0)
        r->want = KVM_MS_DRAINING;
    else if (strcmp(state, "active") == 0)
        r->want = KVM_MS_ACTIVE;
    else
        rc = kvm_errf(KVMESH_EPROTO, "lifecycle record asks for state '%.20s'", state);
    if (rc == 0 && segs && (!json_is_array(segs) || json_array_size(segs) > STORE_MAX_SEGS))
        rc = kvm_errf(KVMESH_EPROTO, "lifecycle record: segments is not an array of at most %d",
                      STORE_MAX_SEGS);
    for (size_t i = 0; rc == 0 && segs && i < json_array_size(segs); i++) {
        const char *s = json_string_value(json_array_get(segs, i));
        uint64_t id = 0;
        if (!s || kvm_hex_u64(s, strlen(s), KVM_HEX_ANY, &id) != 0)
            rc = kvm_errf(KVMESH_EPROTO, "lifecycle record: segment %zu is not a hex id", i);
        for (uint32_t k = 0; rc == 0 && k < r->n_segs; k++)
            if (r->segs[k] == id)
                rc = kvm_errf(KVMESH_EPROTO, "lifecycle record names segment %016" PRIx64 " twice",
                              id);
        if (rc == 0)
            r->segs[r->n_segs++] = id;
    }
    if (rc == 0)
        r->at_ms = (uint64_t)at;
    json_decref(o);
    return rc;
}

int kvm_lifecycle_decode(const uint8_t *v, size_t len, enum kvm_member_state *want, uint64_t *at_ms)
{
    struct kvm_lifecycle_req *r = malloc(sizeof(*r));
    if (!r)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    int rc = kvm_lifecycle_decode_req(v, len, r);
    if (rc == 0) {
        *want = r->want;
        if (at_ms)
            *at_ms = r->at_ms;
    }
    free(r);
    return rc;
}
