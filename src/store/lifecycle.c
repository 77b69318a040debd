/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lifecycle.c — an operator's lifecycle requests for a member (`kvmesh admin drain|activate`),
 * read by the runtime they name.
 *
 * Owns: the record kvmesh/v1/<dep>/lifecycle/<runtime-id> (codec) and the step that applies it
 * to this runtime's membership state.
 *
 *   record   JSON {"v":1,"state":"draining","at_ms":<wall ms of the request>}; written by the
 *            admin tool (not bound to a lease: the request outlives a restart of the member);
 *            absent = active (activate deletes it). Only "draining" and "active" are requests.
 *   reading  every write of this runtime's member record (the keepalive rewrite, every lease
 *            period / 3, and each state change) is a metadata transaction that also GETs this
 *            key: the request costs no extra round trip, and a runtime applies it within one
 *            keepalive period (kvm_lifecycle_apply, called from member.c).
 *   applying ACTIVE + "draining"  -> DRAINING (admin_drained set): no new placements land here
 *            (placement skips members that are not active; kvm_owner_reserve refuses), reads of
 *            its replicas go on, it stops being route-capable (as any draining member), and the
 *            record says "draining" to every other runtime, the admin tool and the status page.
 *            DRAINING by an operator + no request (or "active") -> ACTIVE. A drain begun by
 *            kvmesh_drain (SIGTERM of kvmeshd) clears admin_drained, so an activate never
 *            interrupts a runtime that is leaving. STANDBY and GONE ignore requests (a restarted
 *            member applies the request at its first write after it became active).
 */
#include <jansson.h>
#include <string.h>

#include "core/util.h"
#include "store/store.h"

int kvm_lifecycle_encode(enum kvm_member_state want, uint64_t at_ms, char *buf, size_t cap)
{
    if (want != KVM_MS_DRAINING && want != KVM_MS_ACTIVE)
        return kvm_errf(KVMESH_EINVAL, "a lifecycle request is draining or active, not %s",
                        kvm_member_state_name(want));
    int n = snprintf(buf, cap, "{\"v\":1,\"state\":\"%s\",\"at_ms\":%llu}",
                     kvm_member_state_name(want), (unsigned long long)at_ms);
    if (n < 0 || (size_t)n >= cap)
        return kvm_errf(KVMESH_ETOOBIG, "lifecycle record does not fit %zu bytes", cap);
    return 0;
}

int kvm_lifecycle_decode(const uint8_t *v, size_t len, enum kvm_member_state *want, uint64_t *at_ms)
{
    json_error_t jerr;
    json_t *o = json_loadb((const char *)v, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return kvm_errf(KVMESH_EPROTO, "lifecycle record is not JSON: %s", jerr.text);
    json_int_t ver = 0, at = 0;
    const char *state = NULL;
    int rc = 0;
    if (json_unpack(o, "{s:I,s:s,s:I}", "v", &ver, "state", &state, "at_ms", &at) != 0 ||
        ver != 1 || at < 0)
        rc = kvm_errf(KVMESH_EPROTO, "lifecycle record is malformed (want v 1, state, at_ms)");
    else if (strcmp(state, "draining") == 0)
        *want = KVM_MS_DRAINING;
    else if (strcmp(state, "active") == 0)
        *want = KVM_MS_ACTIVE;
    else
        rc = kvm_errf(KVMESH_EPROTO, "lifecycle record asks for state '%.20s'", state);
    if (rc == 0 && at_ms)
        *at_ms = (uint64_t)at;
    json_decref(o);
    return rc;
}

bool kvm_lifecycle_apply(kvm_rt_t *rt, const meta_kv_t *kv)
{
    enum kvm_member_state want = KVM_MS_ACTIVE;
    if (kv->found && kvm_lifecycle_decode(kv->value, kv->value_len, &want, NULL) != 0)
        return false; /* a malformed request changes nothing (admin members shows it) */
    if (want == KVM_MS_DRAINING && rt->state == KVM_MS_ACTIVE) {
        kvm_member_set_state(rt, KVM_MS_DRAINING);
        rt->admin_drained = true;
        return true;
    }
    if (want == KVM_MS_ACTIVE && rt->state == KVM_MS_DRAINING && rt->admin_drained) {
        rt->admin_drained = false;
        kvm_member_set_state(rt, KVM_MS_ACTIVE);
        return true;
    }
    return false;
}
