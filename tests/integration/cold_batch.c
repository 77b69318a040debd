// SPDX-License-Identifier: Apache-2.0
/*
 * cold_batch.c — batch restore in real runtimes (docs/cold.md "Batch restore"): two storage
 * runtimes A and B, each with 4 MiB of DRAM and its own cold device (argv[1]: localdir or
 * extent) in a temporary directory, and a client-only runtime C without a cold tier; in-memory
 * metadata, the transport argv[2] (tcp or shm). 128 objects of 64 KiB are written pinned to A
 * and 128 to B (2x each one's DRAM), so many become cold-only on the device of their owner.
 * 32 cold-only objects of each owner, interleaved, are then read with one kvmesh_batch_get of 64
 * items:
 *   - through C (both groups remote): every item succeeds with its bytes, and C's
 *     kvmesh_cold_restore_batches_total{transport=<argv[2]>} rises by exactly 2 = the (owner,
 *     device) groups (not 64), its batch items by 64;
 *   - through A (its own group local, B's remote): every item succeeds, A counts 1 batch with
 *     transport "local" (32 items) and 1 with argv[2] (32 items);
 *   - with one payload byte flipped in one object's cold copy on each device, the same batch
 *     gets fail exactly those 2 items with KVMESH_ECHECKSUM (or KVMESH_ECORRUPT) and no bytes,
 *     the other 62 read back intact, through C and through A.
 *   - with the owners answering as an older release (no batched cold read: KVMESH_ENOTSUP,
 *     kvm_cold_test_refuse_batch) the client reads the same batch one object at a time: no
 *     batch counted, every intact item still read;
 *   - the owners' staging pools are empty again afterwards (every slot ACKed, none expired);
 *   - (argv[3] = split) every runtime's staging pool has 5 slots: each remote group of 32 is
 *     staged in rounds of at most 5 (the rest answered backpressure and asked for again), never
 *     failed: every item succeeds, at least 7 batches per remote group (their items counted
 *     once per request that carried them), kvmesh_cold_restore_retries_total rises.
 * Bounded waits only; the directory and the runtimes go at the end (also on failure).
 */
#include <curl/curl.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cold/extent.h"
#include "cold/localdir.h"
#include "cold_itest.h"
#include "proc.h"
#include "coldfiles.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "store/data.h"
#include "tmpdir.h"

struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);
void kvm_cold_test_refuse_batch(bool on); /* (store/cold_glue.h) */

#define PER       128 /* objects per owner */
#define NOBJ      (2 * PER)
#define PICK      32 /* cold-only objects per owner in the batch */
#define OBJ_LEN   (64u << 10)
#define PUT_TRIES 400

static char tmpdir[64];
static kvmesh_t *ka, *kb, *kc;
static const kvmesh_scope_t sc = {"tenant-b", NULL};

static void cleanup(void)
{
    kvmesh_t **hs[3] = {&kc, &kb, &ka};
    for (int i = 0; i < 3; i++)
        if (*hs[i]) {
            kvmesh_close(*hs[i]);
            *hs[i] = NULL;
        }
    tcold_remove_dir(tmpdir);
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static void fill(uint8_t *buf, uint32_t i)
{
    cold_itest_fill(buf, OBJ_LEN, 0x9e3779b97f4a7c15ull * (i + 7));
}

static void key_of(uint32_t i, char *k, size_t cap)
{
    snprintf(k, cap, "batch-obj-%04u", i);
}

static double metric(kvmesh_t *kv, const char *name, const char *l, const char *v)
{
    double x = 0;
    CHECK(cold_itest_metric(kvm_rt_admin_port(kvmesh_runtime_of(kv)), name, l, v, &x) == 0);
    return x;
}

static bool cold_only(uint32_t i)
{
    char k[32];
    key_of(i, k, sizeof(k));
    kvmesh_route_info_t ri;
    CHECK(kvmesh_route_query(kc, &sc, k, strlen(k), &ri) == 0);
    return ri.n_replicas == 0 && ri.cold_backed;
}

/* One kvmesh_batch_get of the picked objects through kv; bad[] (n_bad) must fail with a
 * verification error and no bytes, every other item must read back intact. */
static void batch_read(kvmesh_t *kv, const uint32_t *objs, size_t n, const uint32_t *bad,
                       size_t n_bad)
{
    kvmesh_batch_item_t *it = calloc(n, sizeof(*it));
    char(*keys)[32] = calloc(n, 32);
    uint8_t *want = malloc(OBJ_LEN);
    CHECK(it && keys && want);
    for (size_t j = 0; j < n; j++) {
        key_of(objs[j], keys[j], 32);
        it[j] = (kvmesh_batch_item_t){
            .key = keys[j], .key_len = strlen(keys[j]), .buf = malloc(OBJ_LEN), .len = OBJ_LEN};
        CHECK(it[j].buf);
        memset(it[j].buf, 0xee, OBJ_LEN);
    }
    int rc = kvmesh_batch_get(kv, &sc, it, n);
    size_t ok = 0, refused = 0;
    for (size_t j = 0; j < n; j++) {
        bool is_bad = false;
        for (size_t b = 0; b < n_bad; b++)
            is_bad |= bad[b] == objs[j];
        if (is_bad) {
            if (it[j].rc != KVMESH_ECHECKSUM && it[j].rc != KVMESH_ECORRUPT)
                fprintf(stderr, "corrupted %s: rc %s\n", keys[j], kvmesh_errname(it[j].rc));
            CHECK(it[j].rc == KVMESH_ECHECKSUM || it[j].rc == KVMESH_ECORRUPT);
            refused++;
            continue;
        }
        if (it[j].rc)
            fprintf(stderr, "get %s: %s\n", keys[j], kvmesh_errname(it[j].rc));
        fill(want, objs[j]);
        CHECK(it[j].rc == 0 && it[j].out_len == OBJ_LEN && memcmp(it[j].buf, want, OBJ_LEN) == 0);
        ok++;
    }
    CHECK(n_bad ? rc != 0 : rc == 0);
    CHECK(ok == n - n_bad && refused == n_bad);
    for (size_t j = 0; j < n; j++)
        free(it[j].buf);
    free(it);
    free(keys);
    free(want);
}

struct bcount {
    double local, remote, local_items, remote_items, retries;
};

static struct bcount counts(kvmesh_t *kv, const char *tp)
{
    struct bcount c;
    c.local = metric(kv, "kvmesh_cold_restore_batches_total", "transport", "local");
    c.remote = metric(kv, "kvmesh_cold_restore_batches_total", "transport", tp);
    c.local_items = metric(kv, "kvmesh_cold_restore_batch_items_total", "transport", "local");
    c.remote_items = metric(kv, "kvmesh_cold_restore_batch_items_total", "transport", tp);
    c.retries = metric(kv, "kvmesh_cold_restore_retries_total", NULL, NULL);
    return c;
}

static void flip_at(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    uint8_t b;
    CHECK(pread(fd, &b, 1, at) == 1);
    b ^= 0x5a;
    CHECK(pwrite(fd, &b, 1, at) == 1);
    close(fd);
}

/* Flips a payload byte of the cold copy of object i on the device under root, found through
 * the locator of its route (an exact lookup through the runtime's store: the public route
 * query does not return locators) in the backend's own file layout. */
static void corrupt_obj(const char *kind, const char *root, uint32_t i)
{
    char k[32];
    key_of(i, k, sizeof(k));
    kvm_ident_t id;
    CHECK(kvm_ident_init(&id, sc.tenant, sc.domain, k, strlen(k)) == 0);
    kvm_route_t r;
    kvm_route_init(&r);
    int rrc = -1;
    CHECK(kvm_store_lookup(kvmesh_runtime_of(kc), &id, 1, &r, &rrc) == 0 && rrc == 0);
    CHECK(r.cold.kind == KVM_COLD_MATERIALIZED && r.cold.u.mat.locator_len > 0 &&
          r.cold.u.mat.locator_len <= COLD_LOCATOR_MAX);
    cold_locator_t loc = {.len = (uint16_t)r.cold.u.mat.locator_len};
    memcpy(loc.b, r.cold.u.mat.locator, loc.len);
    kvm_route_free(&r);
    kvm_ident_free(&id);
    char path[512];
    if (strcmp(kind, "localdir") == 0) {
        cold_opid_t op;
        CHECK(cold_ld_loc_decode(&loc, &op) == 0);
        char hex[2 * COLD_OPID_LEN + 1];
        for (int b = 0; b < COLD_OPID_LEN; b++)
            snprintf(hex + 2 * b, 3, "%02x", op.b[b]);
        snprintf(path, sizeof(path), "%s/%s/%02x/%s.obj", root, COLD_LD_SUBDIR, op.b[0], hex);
        flip_at(path, COLD_LD_HDR_LEN + OBJ_LEN / 2);
    } else {
        cold_ext_loc_t l;
        CHECK(cold_ext_loc_decode(&loc, &l) == 0);
        snprintf(path, sizeof(path), "%s/%s/seg-%08x.dat", root, COLD_EXT_SUBDIR, l.seg);
        flip_at(path, (off_t)(l.off + COLD_EXT_HDR_LEN + OBJ_LEN / 2));
    }
}

static int put_retry(kvmesh_t *who, const char *k, const uint8_t *buf,
                     const kvmesh_put_opts_t *opts)
{
    int rc = -1;
    for (int t = 0; t < PUT_TRIES && rc != 0; t++) {
        rc = kvmesh_put(who, &sc, k, strlen(k), buf, OBJ_LEN, opts);
        if (rc)
            usleep(20000);
    }
    return rc;
}

int main(int argc, char **argv)
{
    const char *kind = argc > 1 ? argv[1] : "localdir";
    const char *tp = argc > 2 ? argv[2] : "tcp";
    bool split = argc > 3 && strcmp(argv[3], "split") == 0;
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-batch") == 0);
    char root_a[128], root_b[128];
    snprintf(root_a, sizeof(root_a), "%s/a", tmpdir);
    snprintf(root_b, sizeof(root_b), "%s/b", tmpdir);
    CHECK(mkdir(root_a, 0700) == 0 && mkdir(root_b, 0700) == 0);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    char dep[64], url[96];
    snprintf(dep, sizeof(dep), "coldbatch%d", (int)getpid());
    snprintf(url, sizeof(url), "memory://%s", dep);
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "deployment", dep) == 0);
    CHECK(kvmesh_config_set(c, "transport", tp) == 0);
    CHECK(kvmesh_config_set(c, "evict_low_watermark", "0") == 0); /* no re-promotion */
    CHECK(kvmesh_config_set(c, "admin_listen", "127.0.0.1:0") == 0);
    CHECK(kvmesh_config_set(c, "memory_size", "4MiB") == 0);
    CHECK(kvmesh_config_set(c, "segment_size", "4MiB") == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "1MiB") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_config_set(c, "reclaim_grace_ms", "50") == 0);
    /* no re-replication: not what this test is about, and the close of the last storage
     * runtime would wait for a scan of the departed one's objects (repair.c scan_page waits
     * up to request_timeout_ms for its answer, not for the stop) */
    CHECK(kvmesh_config_set(c, "rereplicate_max_copies", "0") == 0);
    CHECK(kvmesh_config_set(c, "request_timeout_ms", "10000") == 0);
    CHECK(kvmesh_config_set(c, "cold_kind", kind) == 0);
    CHECK(kvmesh_config_set(c, "cold_capacity", "64MiB") == 0);
    CHECK(kvmesh_config_set(c, "cold_staging_slots", split ? "5" : "64") == 0);
    CHECK(kvmesh_config_set(c, "cold_staging_bytes", "8MiB") == 0);
    CHECK(kvmesh_config_set(c, "cold_root", root_a) == 0);
    CHECK(kvmesh_open(&ka, c) == 0);
    CHECK(kvmesh_config_set(c, "cold_root", root_b) == 0);
    CHECK(kvmesh_open(&kb, c) == 0);
    CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
    CHECK(kvmesh_config_set(c, "cold_kind", "off") == 0);
    CHECK(kvmesh_open(&kc, c) == 0);
    kvmesh_config_free(c);
    /* A sees B as a storage member before it pins objects there (bounded wait) */
    CHECK(cold_itest_wait_storage(ka, 2));
    char ida[KVMESH_ID_HEX_LEN + 1], idb[KVMESH_ID_HEX_LEN + 1];
    uint64_t ep;
    CHECK(kvmesh_self(ka, ida, &ep) == 0 && kvmesh_self(kb, idb, &ep) == 0);
    const char *pin_a[1] = {ida}, *pin_b[1] = {idb};
    uint64_t t_start = env_clock_mono_ms();
    kvmesh_put_opts_t on_a = {.preferred_owners = pin_a, .n_preferred = 1, .hard_pin = true};
    kvmesh_put_opts_t on_b = {.preferred_owners = pin_b, .n_preferred = 1, .hard_pin = true};

    /* 1. even objects on A, odd ones on B, 2x each one's DRAM */
    uint8_t *buf = malloc(OBJ_LEN);
    CHECK(buf);
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        fill(buf, i);
        CHECK(put_retry(i % 2 ? kb : ka, k, buf, i % 2 ? &on_b : &on_a) == 0);
    }
    free(buf);
    uint64_t t_put = env_clock_mono_ms();
    printf("wrote %u objects in %llu ms\n", NOBJ, (unsigned long long)(t_put - t_start));
    /* 2. PICK cold-only objects of each owner, interleaved */
    uint32_t objs[2 * PICK];
    size_t na = 0, nb = 0;
    for (uint32_t i = 0; i < NOBJ && (na < PICK || nb < PICK); i++) {
        size_t *cnt = i % 2 ? &nb : &na;
        if (*cnt < PICK && cold_only(i))
            objs[2 * (*cnt)++ + i % 2] = i;
    }
    printf("cold-only picked: %zu on A, %zu on B\n", na, nb);
    CHECK(na == PICK && nb == PICK);

    /* 3. through the client: two remote groups */
    struct bcount c0 = counts(kc, tp);
    uint64_t t0 = env_clock_mono_ms();
    batch_read(kc, objs, 2 * PICK, NULL, 0);
    uint64_t t1 = env_clock_mono_ms();
    struct bcount c1 = counts(kc, tp);
    printf("client: %.0f remote batches of %.0f items (%s), %.0f local, %.0f retries, %llu ms\n",
           c1.remote - c0.remote, c1.remote_items - c0.remote_items, tp, c1.local - c0.local,
           c1.retries - c0.retries, (unsigned long long)(t1 - t0));
    CHECK(c1.local == c0.local);
    if (split) /* 5 slots: each group of 32 staged in >= 7 rounds, the rest asked for again */
        CHECK(c1.remote - c0.remote >= 14 && c1.retries > c0.retries &&
              c1.remote_items - c0.remote_items > 2 * PICK);
    else
        CHECK(c1.remote - c0.remote == 2 && c1.remote_items - c0.remote_items == 2 * PICK);

    /* 4. through A: its own group local, B's remote */
    struct bcount a0 = counts(ka, tp);
    batch_read(ka, objs, 2 * PICK, NULL, 0);
    struct bcount a1 = counts(ka, tp);
    printf("A: %.0f local batches of %.0f items, %.0f remote batches of %.0f items (%s)\n",
           a1.local - a0.local, a1.local_items - a0.local_items, a1.remote - a0.remote,
           a1.remote_items - a0.remote_items, tp);
    CHECK(a1.local - a0.local == 1 && a1.local_items - a0.local_items == PICK);
    CHECK(split ? a1.remote - a0.remote >= 7 && a1.remote_items - a0.remote_items > PICK
                : a1.remote - a0.remote == 1 && a1.remote_items - a0.remote_items == PICK);

    /* 5. one corrupted cold copy per device: only those two items fail */
    uint32_t bad[2] = {objs[2 * 3], objs[2 * 5 + 1]}; /* (an A object, a B object) */
    corrupt_obj(kind, root_a, bad[0]);
    corrupt_obj(kind, root_b, bad[1]);
    uint64_t t2 = env_clock_mono_ms();
    batch_read(kc, objs, 2 * PICK, bad, 2);
    batch_read(ka, objs, 2 * PICK, bad, 2);
    uint64_t t3 = env_clock_mono_ms();
    printf("corrupted %s objects %u (A) and %u (B): refused, the other %d read intact through "
           "the client and A (%llu ms)\n",
           kind, bad[0], bad[1], 2 * PICK - 2, (unsigned long long)(t3 - t2));
    /* 6. owners of an older release (no batched cold read: KVMESH_ENOTSUP): the reader falls
     * back to one object at a time; every intact item still reads back, no batch counted */
    kvm_cold_test_refuse_batch(true);
    struct bcount f0 = counts(kc, tp);
    double r0 = metric(kc, "kvmesh_cold_restores_total", "result", "ok");
    batch_read(kc, objs, 2 * PICK, bad, 2);
    struct bcount f1 = counts(kc, tp);
    double r1 = metric(kc, "kvmesh_cold_restores_total", "result", "ok");
    kvm_cold_test_refuse_batch(false);
    printf("owners without batched cold reads: %.0f batches, %.0f single restores ok\n",
           f1.remote - f0.remote, r1 - r0);
    CHECK(f1.remote == f0.remote && r1 - r0 >= 2 * PICK - 2);
    /* 7. every staged slot's pins went (the readers' ACKs): both pools back to empty, no slot
     * expired (exported every 200 ms: bounded wait) */
    double used = -1, bytes = -1, exp = -1, acq = 0;
    for (int t = 0; t < 100 && (used != 0 || bytes != 0); t++) {
        used = metric(ka, "kvmesh_cold_staging_slots_used", NULL, NULL) +
               metric(kb, "kvmesh_cold_staging_slots_used", NULL, NULL);
        bytes = metric(ka, "kvmesh_cold_staging_bytes_used", NULL, NULL) +
                metric(kb, "kvmesh_cold_staging_bytes_used", NULL, NULL);
        exp = metric(ka, "kvmesh_cold_staging_expiries_total", NULL, NULL) +
              metric(kb, "kvmesh_cold_staging_expiries_total", NULL, NULL);
        acq = metric(ka, "kvmesh_cold_staging_acquired_total", NULL, NULL) +
              metric(kb, "kvmesh_cold_staging_acquired_total", NULL, NULL);
        if (used != 0 || bytes != 0)
            usleep(100000);
    }
    printf("staging: %.0f slots acquired, %.0f expired, %.0f slots / %.0f bytes in use after\n",
           acq, exp, used, bytes);
    CHECK(used == 0 && bytes == 0 && exp == 0 && acq >= 3 * PICK);
    cleanup();
    curl_global_cleanup();
    printf("cold_batch: ok\n");
    return 0;
}
