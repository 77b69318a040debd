/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_verify — the verify_reads policy (docs/configuration.md) against a corrupted replica.
 *
 * Two storage runtimes in this process (the transport named by argv[1], tcp by default, or shm:
 * ctest runs both; embedded in-memory metadata, one replica per object): SR with
 * verify_reads=remote and SA with verify_reads=always; three client-only
 * runtimes with verify_reads always, remote and never. A 256 KiB value is put by SR itself (its
 * local replica: the put's checksum comes from the fused copy + hash) and one by SA; every
 * reader first reads both correctly (so the fused checksums are right). Then one byte of each
 * replica is flipped in the owner's segment memory, and each reader's verdict is checked (a
 * third value, put by a client — over shm its checksum comes from the transport's fused copy +
 * hash — must carry libxxhash's XXH3-64 of the value in its route, as must the other two):
 *
 *   reader                       replica   verdict
 *   client, always               remote    KVMESH_ECHECKSUM
 *   client, remote               remote    KVMESH_ECHECKSUM
 *   client, never                remote    success, the flipped byte returned (no pass counted)
 *   SR (remote) reading its own  local     success, the flipped byte returned (trusted copy)
 *   SA (always) reading its own  local     KVMESH_ECHECKSUM (checksum fused with the copy)
 *
 * Then a larger value (BIGSIZE: striped over the tcp connections, so its chunks land in
 * parallel and the transport folds them into the checksum in order) is put by a client — its
 * route must carry libxxhash's XXH3-64 — read back intact by the always and remote clients, one
 * byte of its last chunk flipped, and both must refuse it with KVMESH_ECHECKSUM while the never
 * client gets the flipped byte.
 *
 * No timing is asserted; every wait is bounded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "net/seg.h"
#include "obs/metrics.h"
#include "store/store.h"
#include "tcheck.h"

#define CHECK(c) TCHECK_FATAL(c)

#define VSIZE   (256u << 10)
#define FLIP_AT 100000u
/* several tcp chunks and 4 MiB shm copy steps, the last one short; over shm a read this large
 * goes into the caller's buffer with streaming stores (transport_shm.c SHM_READ_STREAM_MIN) */
#define BIGSIZE ((16u << 20) + 1234u)
#define BIGFLIP (BIGSIZE - 777u)

static const char *transport = "tcp";

static kvmesh_t *open_rt(const char *url, bool storage, const char *verify)
{
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "transport", transport) == 0);
    CHECK(kvmesh_config_set(c, "memory_size", storage ? "67108864" : "0") == 0);
    CHECK(kvmesh_config_set(c, "segment_size", "67108864") == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "33554432") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_config_set(c, "verify_reads", verify) == 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    kvmesh_config_free(c);
    return kv;
}

/* Flips the byte at `at` of the replica (len bytes) of `key` in its owner `owner` (this
 * process; NULL: whichever of the storage runtimes holds it). */
static kvmesh_t *storage[2];
static void corrupt_at(kvmesh_t *owner, kvmesh_t *any, const kvmesh_scope_t *sc, const char *key,
                       size_t len, size_t at)
{
    kvmesh_route_info_t ri;
    CHECK(kvmesh_route_query(any, sc, key, strlen(key), &ri) == 0 && ri.n_replicas == 1);
    for (size_t i = 0; i < 2 && !owner; i++)
        if (strcmp(ri.replicas[0].owner, kvmesh_runtime_of(storage[i])->idhex) == 0)
            owner = storage[i];
    CHECK(owner);
    kvm_rt_t *rt = kvmesh_runtime_of(owner);
    CHECK(strcmp(ri.replicas[0].owner, rt->idhex) == 0);
    bool done = false;
    for (uint32_t i = 0; i < rt->n_segs && !done; i++) {
        if (!rt->segs[i].seg || rt->segs[i].seg->id != ri.replicas[0].segment)
            continue;
        uint8_t *p;
        struct seg *pin;
        enum seg_reason why;
        CHECK(seg_check(rt->reg, ri.replicas[0].segment, ri.replicas[0].offset, len, SEG_READ,
                        rt->segs[i].read_token, &p, &pin, &why) == 0);
        p[at] ^= 0xff;
        seg_unpin(rt->reg, pin);
        done = true;
    }
    CHECK(done);
}

static void corrupt(kvmesh_t *owner, kvmesh_t *any, const kvmesh_scope_t *sc, const char *key)
{
    corrupt_at(owner, any, sc, key, VSIZE, FLIP_AT);
}

static int64_t sums(kvmesh_t *kv)
{
    int64_t v = 0;
    CHECK(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, "op_checksum_passes_total", OBS_OP_GET,
                           OBS_NONE, &v) == 0);
    return v;
}

static uint8_t val[VSIZE], out[VSIZE], big[BIGSIZE];
/* The large reads land 20 bytes past a cache line (as a malloc'd buffer does, 16 past): the
 * streaming copy then writes lines that straddle the value's 64-byte stripes. */
static _Alignas(64) uint8_t bigbuf[BIGSIZE + 64];
static uint8_t *const bigout = bigbuf + 20;

/* Reads key into out; returns the rc. */
static int read_key(kvmesh_t *kv, const kvmesh_scope_t *sc, const char *key)
{
    size_t got = 0;
    memset(out, 0, VSIZE);
    int rc = kvmesh_get_into(kv, sc, key, strlen(key), out, VSIZE, &got);
    CHECK(rc != 0 || got == VSIZE);
    return rc;
}

static int read_big(kvmesh_t *kv, const kvmesh_scope_t *sc)
{
    size_t got = 0;
    memset(bigout, 0, BIGSIZE);
    int rc = kvmesh_get_into(kv, sc, "big", 3, bigout, BIGSIZE, &got);
    CHECK(rc != 0 || got == BIGSIZE);
    return rc;
}

/* The striped value: put by a client (checksum folded as the chunks are sent), verified as its
 * chunks arrive, refused once a byte of its last chunk is flipped. */
static void big_value(kvmesh_t *CA, kvmesh_t *CR, kvmesh_t *CN, const kvmesh_scope_t *sc)
{
    for (size_t i = 0; i < BIGSIZE; i++)
        big[i] = (uint8_t)(i * 2654435761u >> 13);
    CHECK(kvmesh_put(CA, sc, "big", 3, big, BIGSIZE, NULL) == 0);
    kvmesh_route_info_t ri;
    CHECK(kvmesh_route_query(CA, sc, "big", 3, &ri) == 0);
    CHECK(ri.length == BIGSIZE && ri.checksum == XXH3_64bits(big, BIGSIZE));
    CHECK(read_big(CA, sc) == 0 && memcmp(bigout, big, BIGSIZE) == 0);
    CHECK(read_big(CR, sc) == 0 && memcmp(bigout, big, BIGSIZE) == 0);
    printf("a %u-byte value put and read over %s: its route carries the value's XXH3-64\n", BIGSIZE,
           transport);
    corrupt_at(NULL, CA, sc, "big", BIGSIZE, BIGFLIP);
    int rc = read_big(CA, sc);
    printf("client, verify_reads=always, %u-byte value: %s\n", BIGSIZE, kvmesh_strerror(rc));
    CHECK(rc == KVMESH_ECHECKSUM);
    rc = read_big(CR, sc);
    printf("client, verify_reads=remote, %u-byte value: %s\n", BIGSIZE, kvmesh_strerror(rc));
    CHECK(rc == KVMESH_ECHECKSUM);
    const uint8_t flipped = (uint8_t)~big[BIGFLIP];
    rc = read_big(CN, sc);
    CHECK(rc == 0 && bigout[BIGFLIP] == flipped);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        transport = argv[1];
    char url[64];
    snprintf(url, sizeof(url), "memory://verify-%ld", (long)getpid());
    kvmesh_t *SR = open_rt(url, true, "remote"), *SA = open_rt(url, true, "always");
    kvmesh_t *CA = open_rt(url, false, "always"), *CR = open_rt(url, false, "remote"),
             *CN = open_rt(url, false, "never");
    storage[0] = SR;
    storage[1] = SA;
    const kvmesh_scope_t sc = {"verify", NULL};
    for (size_t i = 0; i < VSIZE; i++)
        val[i] = (uint8_t)(i * 131 + 7);

    /* Warm-up until each storage runtime can write its own key and every reader reads both
     * (membership and shard primaries settle right after start). Bounded: 120 s. */
    kvmesh_t *readers[] = {CA, CR, CN, SR, SA};
    uint64_t end = env_clock_mono_ms() + 120000;
    for (;;) {
        bool ok = kvmesh_put(SR, &sc, "r", 1, val, VSIZE, NULL) == 0 &&
                  kvmesh_put(SA, &sc, "a", 1, val, VSIZE, NULL) == 0;
        for (size_t i = 0; ok && i < 5; i++)
            ok = read_key(readers[i], &sc, "r") == 0 && memcmp(out, val, VSIZE) == 0 &&
                 read_key(readers[i], &sc, "a") == 0 && memcmp(out, val, VSIZE) == 0;
        if (ok)
            break;
        CHECK(env_clock_mono_ms() < end);
        usleep(100 * 1000);
    }
    /* local first: each storage runtime holds the replica of its own put */
    kvmesh_route_info_t ri;
    CHECK(kvmesh_route_query(CA, &sc, "r", 1, &ri) == 0);
    CHECK(strcmp(ri.replicas[0].owner, kvmesh_runtime_of(SR)->idhex) == 0);
    CHECK(kvmesh_route_query(CA, &sc, "a", 1, &ri) == 0);
    CHECK(strcmp(ri.replicas[0].owner, kvmesh_runtime_of(SA)->idhex) == 0);
    printf("both values read back intact by all five runtimes (fused put checksums are right)\n");

    /* a client's put: the replica is remote, the checksum computed beside the transfer */
    CHECK(kvmesh_put(CA, &sc, "c", 1, val, VSIZE, NULL) == 0);
    CHECK(read_key(CA, &sc, "c") == 0 && memcmp(out, val, VSIZE) == 0);
    const uint64_t want = XXH3_64bits(val, VSIZE);
    const char *keys[] = {"r", "a", "c"};
    for (size_t i = 0; i < 3; i++) {
        CHECK(kvmesh_route_query(CA, &sc, keys[i], 1, &ri) == 0);
        CHECK(ri.length == VSIZE && ri.checksum == want);
    }
    printf("the routes of the owners' puts and of the client's put (over %s) carry the value's "
           "XXH3-64\n",
           transport);

    const uint8_t flipped = (uint8_t)~val[FLIP_AT];
    corrupt(SR, CA, &sc, "r");
    corrupt(SA, CA, &sc, "a");

    int rc = read_key(CA, &sc, "r");
    printf("client, verify_reads=always, remote replica: %s\n", kvmesh_strerror(rc));
    CHECK(rc == KVMESH_ECHECKSUM);

    rc = read_key(CR, &sc, "r");
    printf("client, verify_reads=remote, remote replica: %s\n", kvmesh_strerror(rc));
    CHECK(rc == KVMESH_ECHECKSUM);

    int64_t s0 = sums(CN);
    rc = read_key(CN, &sc, "r");
    printf("client, verify_reads=never, remote replica: %s, byte %u %s\n", kvmesh_strerror(rc),
           FLIP_AT, rc == 0 && out[FLIP_AT] != val[FLIP_AT] ? "corrupted" : "intact");
    CHECK(rc == 0 && out[FLIP_AT] == flipped);
    out[FLIP_AT] ^= 0xff;
    CHECK(memcmp(out, val, VSIZE) == 0); /* exactly the flipped byte */
    CHECK(sums(CN) == s0);               /* no checksum pass */

    rc = read_key(SR, &sc, "r");
    printf("owner, verify_reads=remote, local replica: %s, byte %u %s\n", kvmesh_strerror(rc),
           FLIP_AT, rc == 0 && out[FLIP_AT] != val[FLIP_AT] ? "corrupted" : "intact");
    CHECK(rc == 0 && out[FLIP_AT] == flipped);

    rc = read_key(SA, &sc, "a");
    printf("owner, verify_reads=always, local replica: %s\n", kvmesh_strerror(rc));
    CHECK(rc == KVMESH_ECHECKSUM);

    big_value(CA, CR, CN, &sc);

    kvmesh_close(CN);
    kvmesh_close(CR);
    kvmesh_close(CA);
    kvmesh_close(SA);
    kvmesh_close(SR);
    printf("every verify_reads policy gave its documented verdict\n");
    return 0;
}
