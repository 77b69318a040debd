/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire_priv.h — helpers shared by the core record codecs inside src/core: wire.c (framing and
 * the protobuf-c codecs) and wire_route.c (the hand-written route codec). Not for other layers.
 */
#ifndef KVMESH_CORE_WIRE_PRIV_H
#define KVMESH_CORE_WIRE_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "core/route.h"

/* Standalone checks of a cold backing (kind, op ids, owner/tier, locator length); route-level
 * consistency is kvm_route_validate's. Returns 0 or `err` with a kvm_errf message. */
int wire_cold_check(const kvm_cold_backing_t *c, int err);

/* Re-labels the calling thread's last message as KVMESH_EPROTO with a "wire: ctx: " prefix. */
int wire_proto_err(const char *ctx);

/* The frame size checks of every encoder: body_len bytes of protobuf after the header must fit
 * KVM_WIRE_MAX_RECORD_LEN and `cap`. Returns 0 or KVMESH_ETOOBIG (message set). */
int wire_frame_fits(size_t body_len, const uint8_t *buf, size_t cap);

#endif
