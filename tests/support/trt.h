/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trt.h — the in-process runtimes of the store tests: open one from lists of configuration
 * pairs, wait until a pair of runtimes can put and read a key, and run a function on a runtime's
 * loop thread (where its control state may be read without locks).
 *
 *   static const char *const base[][2] = {{"memory_size", "16MiB"}, ..., {NULL, NULL}};
 *   const char *const mine[][2] = {{"metadata_url", url}, {NULL, NULL}};
 *   kvmesh_t *kv = trt_open(base, mine);             base's pairs, then mine's (later wins)
 *   assert_non_null(kv);
 *
 * Every call reports what failed on stderr (the field refused, or kvmesh_open's error) and
 * returns NULL / -1, so a cmocka test asserts on the result and a CHECK-style test checks it.
 *
 * Ownership: trt_open returns a runtime the caller closes (kvmesh_close). Threading: any
 * application thread.
 */
#ifndef KVMESH_TESTS_SUPPORT_TRT_H
#define KVMESH_TESTS_SUPPORT_TRT_H

#include <stdint.h>

#include "kvmesh.h"
#include "store/store.h"

/* A fresh configuration with the pairs {field, value} of base and then of more (each list ends
 * with a {NULL, NULL} pair; either may be NULL) set in order, opened. The runtime, or NULL with
 * the reason on stderr. */
kvmesh_t *trt_open(const char *const base[][2], const char *const more[][2]);

/* Until `writer` puts `key` (a 4 KiB value) and `reader` reads it back whole (leases held,
 * members seen), retrying every 50 ms for up to timeout_ms. 0, or -1 with the last error on
 * stderr. */
int trt_wait_put_get(kvmesh_t *writer, kvmesh_t *reader, const kvmesh_scope_t *sc, const char *key,
                     int timeout_ms);

/* The shard warm-up of the in-process tests (not counted by them): until keys "warm-0" ..
 * "warm-<keys-1>" (64-byte values) spread over the shards can each be put by rts[k % n] and read
 * back by rts[(k + 1) % n] (n == 1: one runtime does both) — right after start the shard
 * primaries are still acquiring their leases and installing their authority sets. Each key is
 * retried every 100 ms; the whole is bounded by timeout_ms. 0, or -1 with the key and the last
 * error on stderr. */
int trt_warm(kvmesh_t *const *rts, size_t n, const kvmesh_scope_t *sc, int keys, int timeout_ms);

/* Runs fn(rt, arg) on kv's loop thread and waits up to timeout_ms for it to return. 0, or -1
 * (not posted, or not run in time: the call may still run later, so arg must outlive the test;
 * the caller fails the test). */
int trt_on_loop(kvmesh_t *kv, void (*fn)(kvm_rt_t *rt, void *arg), void *arg, int timeout_ms);

/* Flips (XOR 0x5a) the byte at offset off of kv's local segment seg, the way a byte goes bad in
 * the owner's memory, for tests of checksum refusals; twice restores it. The segment is found on
 * kv's loop thread (its segment table is the loop's); the byte is read and written through the
 * segment's memfd (pread/pwrite), not by a store into the mapping: the runtime's transport threads
 * read that memory without any order against a test thread (a served READ's send, or a landing),
 * so a plain store would be a data race (ThreadSanitizer reports it); the kernel's write is not
 * one, and every mapping of the memfd sees it. 0, or -1 with the reason on stderr (no such
 * segment or offset, the loop did not run it in time, or the memfd refused: a hugetlbfs segment
 * takes no write()). */
int trt_flip_byte(kvmesh_t *kv, uint64_t seg, uint64_t off);

/* The primary of key's shard in kv's route view (route_primary_hint, read on kv's loop thread,
 * waited for up to 10 s): 0 with *primary set, or the hint's error (-1 when not run in time). */
int trt_primary_of(kvmesh_t *kv, const kvmesh_scope_t *sc, const char *key, kvm_runtime_t *primary);

/* The critical-path counts of one op kind at kv (docs/observability.md: op_round_trips_total by
 * stage, op_handoffs_total, op_checksum_passes_total) and kv's tcp reads
 * (transport_operations_total{tcp,read}). trt_cp_snap exits the test (status 1, the reason on
 * stderr) when a counter cannot be read. */
typedef struct trt_cp {
    int64_t lookup, payload, reserve, cas, handoffs, checksums, reads;
} trt_cp_t;
trt_cp_t trt_cp_snap(kvmesh_t *kv, unsigned op); /* op: an OBS_OP_* */
trt_cp_t trt_cp_delta(trt_cp_t before, trt_cp_t after);
int64_t trt_cp_round_trips(const trt_cp_t *d); /* lookup + payload + reserve + cas */
/* One line on stdout: what, the round trips (route_lookup, payload), hand-offs, checksum passes
 * and tcp reads of d. */
void trt_cp_show(const char *what, const trt_cp_t *d);

#endif
