/* SPDX-License-Identifier: Apache-2.0 */
/* Store runtime in one process: several runtimes on one memory:// metadata store (MetadataOnly
 * routes), real RPC and transports over loopback. put/get/remove/exists/size/route query,
 * overwrite with reclaim, replication on distinct owners, preferred owners and hard pins,
 * scatter/gather, registered buffers, batches, membership view; a reservation whose route
 * publication timed out is held past its TTL until an exact lookup releases it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "loop_gate.h"
#include "meta/meta_memory.h"
#include "obs/http.h"
#include "obs/metrics.h"
#include "store/data.h"

#define NRT 3

static kvmesh_t *rts[NRT];
static const kvmesh_scope_t scope = {"tenant-a", NULL};

static kvmesh_config_t *mkcfg(const char *mem, const char *memsize)
{
    kvmesh_config_t *c = kvmesh_config_new();
    assert_non_null(c);
    assert_int_equal(kvmesh_config_set(c, "metadata_url", mem), 0);
    assert_int_equal(kvmesh_config_set(c, "route_mode", "metadata_only"), 0);
    assert_int_equal(kvmesh_config_set(c, "memory_size", memsize), 0);
    assert_int_equal(kvmesh_config_set(c, "segment_size", memsize), 0);
    assert_int_equal(kvmesh_config_set(c, "max_object_size", memsize), 0);
    assert_int_equal(kvmesh_config_set(c, "lease_ttl_ms", "2000"), 0);
    return c;
}

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < NRT; i++) {
        kvmesh_config_t *c = mkcfg("memory://store_local", "67108864");
        int rc = kvmesh_open(&rts[i], c);
        if (rc)
            fprintf(stderr, "open: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
        assert_int_equal(rc, 0);
        kvmesh_config_free(c);
    }
    /* wait until everyone sees everyone */
    for (int t = 0; t < 100; t++) {
        size_t n = 0;
        kvmesh_members(rts[0], NULL, 0, &n);
        if (n == NRT)
            break;
        usleep(50000);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NRT; i++)
        kvmesh_close(rts[i]);
    return 0;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
}

static void test_put_get_remove(void **state)
{
    (void)state;
    size_t sizes[] = {1, 7, 4096, 256 << 10, 3 << 20, (1 << 20) + 4093};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s];
        uint8_t *v = malloc(len);
        fill(v, len, (uint32_t)s);
        char key[32];
        snprintf(key, sizeof(key), "obj-%zu", len);
        int rc = kvmesh_put(rts[s % NRT], &scope, key, strlen(key), v, len, NULL);
        if (rc)
            fprintf(stderr, "put: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
        assert_int_equal(rc, 0);
        for (int r = 0; r < NRT; r++) {
            void *out = NULL;
            size_t out_len = 0;
            rc = kvmesh_get(rts[r], &scope, key, strlen(key), &out, &out_len);
            if (rc)
                fprintf(stderr, "get: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
            assert_int_equal(rc, 0);
            assert_int_equal(out_len, len);
            assert_memory_equal(out, v, len);
            kvmesh_free(out);
            bool ex = false;
            assert_int_equal(kvmesh_exists(rts[r], &scope, key, strlen(key), &ex), 0);
            assert_true(ex);
            uint64_t sz = 0;
            assert_int_equal(kvmesh_size(rts[r], &scope, key, strlen(key), &sz), 0);
            assert_int_equal(sz, len);
        }
        assert_int_equal(kvmesh_remove(rts[(s + 1) % NRT], &scope, key, strlen(key)), 0);
        void *out = NULL;
        size_t out_len = 0;
        assert_int_equal(kvmesh_get(rts[s % NRT], &scope, key, strlen(key), &out, &out_len),
                         KVMESH_ENOENT);
        assert_int_equal(kvmesh_remove(rts[s % NRT], &scope, key, strlen(key)), KVMESH_ENOENT);
        bool ex = true;
        assert_int_equal(kvmesh_exists(rts[2], &scope, key, strlen(key), &ex), 0);
        assert_false(ex);
        free(v);
    }
}

static void test_replicas_and_overwrite(void **state)
{
    (void)state;
    uint8_t a[1000], b[3000];
    fill(a, sizeof(a), 1);
    fill(b, sizeof(b), 2);
    kvmesh_put_opts_t o = {.replicas = 3};
    assert_int_equal(kvmesh_put(rts[0], &scope, "rep", 3, a, sizeof(a), &o), 0);
    kvmesh_route_info_t ri;
    assert_int_equal(kvmesh_route_query(rts[1], &scope, "rep", 3, &ri), 0);
    assert_int_equal(ri.n_replicas, 3);
    assert_int_equal(ri.length, sizeof(a));
    for (uint32_t i = 0; i < 3; i++)
        for (uint32_t j = i + 1; j < 3; j++)
            assert_string_not_equal(ri.replicas[i].owner, ri.replicas[j].owner);
    uint64_t v1 = ri.primary_sequence;
    /* overwrite with a different size */
    o.replicas = 2;
    assert_int_equal(kvmesh_put(rts[2], &scope, "rep", 3, b, sizeof(b), &o), 0);
    assert_int_equal(kvmesh_route_query(rts[0], &scope, "rep", 3, &ri), 0);
    assert_int_equal(ri.n_replicas, 2);
    assert_true(ri.primary_sequence > v1);
    uint8_t buf[4000];
    size_t n = 0;
    assert_int_equal(kvmesh_get_into(rts[1], &scope, "rep", 3, buf, sizeof(buf), &n), 0);
    assert_int_equal(n, sizeof(b));
    assert_memory_equal(buf, b, sizeof(b));
    /* too small a buffer: ETOOBIG, size reported, buffer untouched */
    memset(buf, 0xAB, sizeof(buf));
    assert_int_equal(kvmesh_get_into(rts[1], &scope, "rep", 3, buf, 100, &n), KVMESH_ETOOBIG);
    assert_int_equal(n, sizeof(b));
    assert_int_equal(buf[0], 0xAB);
    /* more replicas than owners */
    o.replicas = 4;
    assert_int_equal(kvmesh_put(rts[0], &scope, "rep4", 4, a, sizeof(a), &o), KVMESH_EUNAVAILABLE);
    assert_true(strstr(kvmesh_last_error(), "replicas") != NULL);
}

static void test_pins(void **state)
{
    (void)state;
    char id[KVMESH_ID_HEX_LEN + 1];
    uint64_t ep;
    assert_int_equal(kvmesh_self(rts[2], id, &ep), 0);
    assert_true(ep >= 1);
    const char *pref[] = {id};
    kvmesh_put_opts_t o = {
        .replicas = 1, .preferred_owners = pref, .n_preferred = 1, .hard_pin = true};
    uint8_t v[100];
    fill(v, sizeof(v), 9);
    assert_int_equal(kvmesh_put(rts[0], &scope, "pinned", 6, v, sizeof(v), &o), 0);
    kvmesh_route_info_t ri;
    assert_int_equal(kvmesh_route_query(rts[0], &scope, "pinned", 6, &ri), 0);
    assert_string_equal(ri.replicas[0].owner, id);
    const char *bogus[] = {"0123456789abcdef0123456789abcdef"};
    o.preferred_owners = bogus;
    assert_int_equal(kvmesh_put(rts[0], &scope, "pinned2", 7, v, sizeof(v), &o),
                     KVMESH_EUNAVAILABLE);
    o.hard_pin = false; /* a hint falls back */
    assert_int_equal(kvmesh_put(rts[0], &scope, "pinned2", 7, v, sizeof(v), &o), 0);
}

static void test_scatter_gather_registered(void **state)
{
    (void)state;
    uint8_t p1[5000], p2[1], p3[70000];
    fill(p1, sizeof(p1), 3);
    fill(p2, sizeof(p2), 4);
    fill(p3, sizeof(p3), 5);
    struct iovec in[3] = {{p1, sizeof(p1)}, {p2, sizeof(p2)}, {p3, sizeof(p3)}};
    kvmesh_put_opts_t o = {.replicas = 2};
    assert_int_equal(kvmesh_putv(rts[1], &scope, "sg", 2, in, 3, &o), 0);
    size_t total = sizeof(p1) + sizeof(p2) + sizeof(p3);
    uint8_t *reg = malloc(total + 10);
    assert_int_equal(kvmesh_register_buffer(rts[0], reg, total + 10), 0);
    assert_int_equal(kvmesh_register_buffer(rts[0], reg, total + 10), KVMESH_EEXIST);
    struct iovec out[2] = {{reg, 10}, {reg + 10, total}};
    size_t n = 0;
    assert_int_equal(kvmesh_getv(rts[0], &scope, "sg", 2, out, 2, &n), 0);
    assert_int_equal(n, total);
    assert_memory_equal(reg, p1, sizeof(p1));
    assert_memory_equal(reg + sizeof(p1), p2, 1);
    assert_memory_equal(reg + sizeof(p1) + 1, p3, sizeof(p3));
    assert_int_equal(kvmesh_unregister_buffer(rts[0], reg), 0);
    assert_int_equal(kvmesh_unregister_buffer(rts[0], reg), KVMESH_ENOENT);
    free(reg);
}

static void test_batches(void **state)
{
    (void)state;
    enum { N = 100 };
    kvmesh_batch_item_t it[N];
    char keys[N][16];
    uint8_t vals[N][300];
    uint8_t outb[N][400];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "b%03d", i);
        fill(vals[i], sizeof(vals[i]), (uint32_t)i);
        it[i] = (kvmesh_batch_item_t){
            .key = keys[i], .key_len = strlen(keys[i]), .buf = vals[i], .len = 100 + (size_t)i};
    }
    it[7].key_len = 0; /* a bad key fails only its own item */
    assert_int_equal(kvmesh_batch_put(rts[0], &scope, it, N, NULL), KVMESH_EBADKEY);
    for (int i = 0; i < N; i++)
        assert_int_equal(it[i].rc, i == 7 ? KVMESH_EBADKEY : 0);
    for (int i = 0; i < N; i++)
        it[i].buf = outb[i], it[i].len = sizeof(outb[i]);
    it[7].key_len = strlen(keys[7]);
    assert_int_equal(kvmesh_batch_get(rts[1], &scope, it, N), KVMESH_ENOENT);
    for (int i = 0; i < N; i++) {
        if (i == 7) {
            assert_int_equal(it[i].rc, KVMESH_ENOENT);
            continue;
        }
        assert_int_equal(it[i].rc, 0);
        assert_int_equal(it[i].out_len, 100 + (size_t)i);
        assert_memory_equal(outb[i], vals[i], 100 + (size_t)i);
    }
    assert_int_equal(kvmesh_batch_exists(rts[2], &scope, it, N), KVMESH_ENOENT);
    assert_int_equal(it[3].rc, 0);
    assert_int_equal(it[3].out_len, 103);
    assert_int_equal(kvmesh_batch_remove(rts[2], &scope, it, N), KVMESH_ENOENT);
    assert_int_equal(kvmesh_batch_exists(rts[0], &scope, it, N), KVMESH_ENOENT);
    for (int i = 0; i < N; i++)
        assert_int_equal(it[i].rc, KVMESH_ENOENT);
}

static void test_members_and_scopes(void **state)
{
    (void)state;
    kvmesh_member_info_t m[8];
    size_t n = 0;
    assert_int_equal(kvmesh_members(rts[0], m, 8, &n), 0);
    assert_int_equal(n, NRT);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(m[i].state, "active");
        assert_true(m[i].capacity_bytes >= 64 << 20);
    }
    /* same key, different tenant/domain: independent objects */
    kvmesh_scope_t s2 = {"tenant-b", NULL}, s3 = {"tenant-a", "d1"};
    assert_int_equal(kvmesh_put(rts[0], &scope, "k", 1, "A", 1, NULL), 0);
    assert_int_equal(kvmesh_put(rts[0], &s2, "k", 1, "B", 1, NULL), 0);
    assert_int_equal(kvmesh_put(rts[0], &s3, "k", 1, "C", 1, NULL), 0);
    char c = 0;
    size_t len = 0;
    assert_int_equal(kvmesh_get_into(rts[1], &s2, "k", 1, &c, 1, &len), 0);
    assert_int_equal(c, 'B');
    assert_int_equal(kvmesh_get_into(rts[1], &s3, "k", 1, &c, 1, &len), 0);
    assert_int_equal(c, 'C');
    assert_int_equal(kvmesh_get_into(rts[1], &scope, "k", 1, &c, 1, &len), 0);
    assert_int_equal(c, 'A');
}

static void test_admin_endpoints(void **state)
{
    (void)state;
    kvmesh_config_t *c = mkcfg("memory://store_local", "16777216");
    assert_int_equal(kvmesh_config_set(c, "admin_listen", "127.0.0.1:0"), 0);
    kvmesh_t *kv = NULL;
    assert_int_equal(kvmesh_open(&kv, c), 0);
    kvmesh_config_free(c);
    kvm_rt_t *rt = kvmesh_runtime_of(kv);
    assert_true(kvm_rt_admin_port(rt) > 0);
    assert_int_equal(kvmesh_put(kv, &scope, "adm", 3, "xyz", 3, NULL), 0);
    char out[8];
    size_t n;
    assert_int_equal(kvmesh_get_into(kv, &scope, "adm", 3, out, sizeof(out), &n), 0);
    struct obs_buf b;
    const char *ct;
    obs_buf_init(&b, 1 << 20);
    assert_int_equal(obs_http_render(rt->admin, "GET", "/healthz", NULL, &b, &ct), 200);
    obs_buf_free(&b);
    obs_buf_init(&b, 4 << 20);
    assert_int_equal(obs_http_render(rt->admin, "GET", "/metrics", NULL, &b, &ct), 200);
    assert_non_null(strstr(b.data, "kvmesh_requests_total{operation=\"put\",result=\"ok\"}"));
    assert_non_null(strstr(b.data, "kvmesh_segment_capacity_bytes"));
    obs_buf_free(&b);
    obs_buf_init(&b, 1 << 20);
    assert_int_equal(obs_http_render(rt->admin, "GET", "/stats", NULL, &b, &ct), 200);
    char id[KVMESH_ID_HEX_LEN + 1];
    uint64_t ep;
    kvmesh_self(kv, id, &ep);
    assert_non_null(strstr(b.data, id));
    obs_buf_free(&b);
    kvmesh_close(kv);
}

/* Corrupts one byte of a replica in its owner's segment (the test plays a faulty DIMM). */
static void corrupt_replica(const kvmesh_replica_info_t *rep)
{
    for (int i = 0; i < NRT; i++) {
        char id[KVMESH_ID_HEX_LEN + 1];
        uint64_t ep;
        kvmesh_self(rts[i], id, &ep);
        if (strcmp(id, rep->owner) != 0)
            continue;
        struct seg *sg = seg_find(kvmesh_runtime_of(rts[i])->reg, rep->segment);
        assert_non_null(sg);
        sg->base[rep->offset + rep->length / 2] ^= 0x5a;
        return;
    }
    fail_msg("owner %s not found", rep->owner);
}

static void test_checksum_failover(void **state)
{
    (void)state;
    uint8_t v[9000], out[9000];
    fill(v, sizeof(v), 77);
    kvmesh_put_opts_t o = {.replicas = 2};
    assert_int_equal(kvmesh_put(rts[0], &scope, "crc", 3, v, sizeof(v), &o), 0);
    kvmesh_route_info_t ri;
    assert_int_equal(kvmesh_route_query(rts[0], &scope, "crc", 3, &ri), 0);
    assert_int_equal(ri.n_replicas, 2);
    corrupt_replica(&ri.replicas[0]);
    /* every runtime reads the right bytes: the corrupt replica fails its checksum and the
     * other one is read */
    for (int r = 0; r < NRT; r++) {
        size_t n = 0;
        memset(out, 0, sizeof(out));
        assert_int_equal(kvmesh_get_into(rts[r], &scope, "crc", 3, out, sizeof(out), &n), 0);
        assert_memory_equal(out, v, sizeof(v));
    }
    corrupt_replica(&ri.replicas[1]);
    size_t n = 0;
    assert_int_equal(kvmesh_get_into(rts[1], &scope, "crc", 3, out, sizeof(out), &n),
                     KVMESH_ECHECKSUM);
    assert_non_null(strstr(kvmesh_last_error(), "checksum"));
    /* an overwrite replaces both replicas; reads are right again */
    assert_int_equal(kvmesh_put(rts[2], &scope, "crc", 3, v, sizeof(v), &o), 0);
    assert_int_equal(kvmesh_get_into(rts[1], &scope, "crc", 3, out, sizeof(out), &n), 0);
    assert_memory_equal(out, v, sizeof(v));
}

/* Many application threads on one handle at once: own keys must read back exactly; a shared
 * key overwritten by everyone must always read as one complete value (never a mix). */
#define MT_THREADS 8
#define MT_OPS     150

struct mt_arg {
    int id;
    int bad;
};

static void *mt_worker(void *p)
{
    struct mt_arg *a = p;
    kvmesh_t *kv = rts[a->id % NRT];
    uint8_t v[3000], out[3000];
    for (int i = 0; i < MT_OPS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "mt-%d-%d", a->id, i % 20);
        fill(v, sizeof(v), (uint32_t)(a->id * 1000 + i));
        kvmesh_put_opts_t o = {.replicas = (uint32_t)(1 + i % 2)};
        int rc = kvmesh_put(kv, &scope, key, strlen(key), v, sizeof(v), &o);
        if (rc != 0) {
            fprintf(stderr, "mt put %s: %s: %s\n", key, kvmesh_errname(rc), kvmesh_last_error());
            a->bad++;
            continue;
        }
        size_t n = 0;
        rc = kvmesh_get_into(kv, &scope, key, strlen(key), out, sizeof(out), &n);
        if (rc != 0 || n != sizeof(v) || memcmp(out, v, n) != 0) {
            fprintf(stderr, "mt get %s: %s: %s\n", key, kvmesh_errname(rc), kvmesh_last_error());
            a->bad++;
        }
        /* the shared key: write our value, read whatever is there, check it is whole */
        v[0] = (uint8_t)a->id;
        memset(v + 1, a->id, sizeof(v) - 1);
        rc = kvmesh_put(kv, &scope, "mt-shared", 9, v, sizeof(v), NULL);
        if (rc != 0) {
            fprintf(stderr, "mt shared put: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
            a->bad++;
        }
        rc = kvmesh_get_into(kv, &scope, "mt-shared", 9, out, sizeof(out), &n);
        if (rc != 0 || n != sizeof(v)) {
            fprintf(stderr, "mt shared get: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
            a->bad++;
        } else
            for (size_t k = 1; k < n; k++)
                if (out[k] != out[0]) {
                    a->bad++;
                    break;
                }
        if (i % 10 == 9 && (rc = kvmesh_remove(kv, &scope, key, strlen(key))) != 0) {
            fprintf(stderr, "mt remove %s: %s: %s\n", key, kvmesh_errname(rc), kvmesh_last_error());
            a->bad++;
        }
    }
    return NULL;
}

static void test_many_threads(void **state)
{
    (void)state;
    pthread_t th[MT_THREADS];
    struct mt_arg args[MT_THREADS];
    for (int i = 0; i < MT_THREADS; i++) {
        args[i] = (struct mt_arg){.id = i};
        assert_int_equal(pthread_create(&th[i], NULL, mt_worker, &args[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < MT_THREADS; i++) {
        pthread_join(th[i], NULL);
        bad += args[i].bad;
    }
    assert_int_equal(bad, 0);
}

static uint64_t capacity_seen(kvmesh_t *observer, const char *id)
{
    kvmesh_member_info_t m[8];
    size_t n = 0;
    assert_int_equal(kvmesh_members(observer, m, 8, &n), 0);
    for (size_t i = 0; i < n && i < 8; i++)
        if (strcmp(m[i].id, id) == 0)
            return m[i].capacity_bytes;
    return 0;
}

static void test_storage_resize(void **state)
{
    (void)state;
    char id[KVMESH_ID_HEX_LEN + 1];
    uint64_t ep;
    assert_int_equal(kvmesh_self(rts[0], id, &ep), 0);
    kvm_rt_t *rt = kvmesh_runtime_of(rts[0]);
    const char *pref[] = {id};
    kvmesh_put_opts_t o = {
        .replicas = 1, .preferred_owners = pref, .n_preferred = 1, .hard_pin = true};
    uint8_t v[20][5000];
    uint64_t old_seg = 0;
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "rsz%d", i);
        fill(v[i], sizeof(v[i]), (uint32_t)i + 500);
        /* put from the owner itself: other runtimes may still hold it in quarantine after the
         * checksum test reported one of its replicas (until two fresh heartbeats) */
        assert_int_equal(kvmesh_put(rts[0], &scope, key, strlen(key), v[i], sizeof(v[i]), &o), 0);
        kvmesh_route_info_t ri;
        assert_int_equal(kvmesh_route_query(rts[1], &scope, key, strlen(key), &ri), 0);
        old_seg = ri.replicas[0].segment;
    }
    uint64_t before = capacity_seen(rts[2], id), new_seg = 0;
    assert_int_equal(kvm_store_add_segment(rt, 16 << 20, &new_seg), 0);
    for (int t = 0; t < 100 && capacity_seen(rts[2], id) != before + (16 << 20); t++)
        usleep(20000);
    assert_int_equal(capacity_seen(rts[2], id), before + (16 << 20));
    /* retire the original segment: its replicas move into the new one, then it leaves */
    int rc = kvm_store_retire_segment(rt, old_seg, 20000);
    if (rc)
        fprintf(stderr, "retire: %s\n", kvmesh_last_error());
    assert_int_equal(rc, 0);
    for (int t = 0; t < 100 && capacity_seen(rts[2], id) != (16 << 20); t++)
        usleep(20000);
    assert_int_equal(capacity_seen(rts[2], id), 16 << 20);
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "rsz%d", i);
        kvmesh_route_info_t ri;
        assert_int_equal(kvmesh_route_query(rts[2], &scope, key, strlen(key), &ri), 0);
        assert_int_equal(ri.n_replicas, 1);
        assert_string_equal(ri.replicas[0].owner, id);
        assert_int_equal(ri.replicas[0].segment, new_seg);
        uint8_t out[5000];
        size_t n = 0;
        assert_int_equal(kvmesh_get_into(rts[2], &scope, key, strlen(key), out, sizeof(out), &n),
                         0);
        assert_memory_equal(out, v[i], sizeof(out));
    }
    assert_int_equal(kvm_store_retire_segment(rt, old_seg, 1000), KVMESH_ENOENT);
}

/* The owner block of /stats and the reservation families of /metrics. */
/* held[0], released[0]: /stats; held[1], released[1]: /metrics */
static void held_view(kvm_rt_t *rt, int64_t held[2], int64_t released[2])
{
    struct obs_buf b;
    const char *ct;
    obs_buf_init(&b, 1 << 20);
    assert_int_equal(obs_http_render(rt->admin, "GET", "/stats", NULL, &b, &ct), 200);
    const char *o = strstr(b.data, "\"owner\":{\"reservations_held\":");
    assert_non_null(o);
    long long h = -1, r = -1;
    assert_int_equal(sscanf(o,
                            "\"owner\":{\"reservations_held\":%lld,"
                            "\"reservations_released_after_lookup\":%lld}",
                            &h, &r),
                     2);
    obs_buf_free(&b);
    int64_t mh = -1, mr = -1;
    assert_int_equal(obs_metrics_read(rt->metrics, "reservations_held", OBS_NONE, OBS_NONE, &mh),
                     0);
    assert_int_equal(obs_metrics_read(rt->metrics, "reservations_released_after_lookup_total",
                                      OBS_NONE, OBS_NONE, &mr),
                     0);
    /* /stats was read first; the two agree whenever nothing moved in between (the caller
     * compares them once the state is settled) */
    held[0] = h;
    held[1] = mh;
    released[0] = r;
    released[1] = mr;
}

static void test_held_reservation(void **state)
{
    (void)state;
    kvmesh_config_t *c = mkcfg("memory://store_held", "4194304");
    assert_int_equal(kvmesh_config_set(c, "admin_listen", "127.0.0.1:0"), 0);
    assert_int_equal(kvmesh_config_set(c, "replicas", "1"), 0);
    assert_int_equal(kvmesh_config_set(c, "request_timeout_ms", "400"), 0); /* TTL 800 ms */
    assert_int_equal(kvmesh_config_set(c, "lease_ttl_ms", "30000"), 0);
    kvmesh_t *kv = NULL;
    assert_int_equal(kvmesh_open(&kv, c), 0);
    kvmesh_config_free(c);
    kvm_rt_t *rt = kvmesh_runtime_of(kv);
    int64_t held[2], released[2];
    held_view(rt, held, released);
    assert_true(held[0] == 0 && held[1] == 0);
    assert_true(released[0] == 0 && released[1] == 0);
    /* the route update gets no answer: the put times out, its outcome unknown to the writer, so
     * the reservation is not released; past its TTL the owner holds it (its lookup cannot
     * settle it while metadata is unreachable) */
    meta_memory_faults_t f = {.partitioned = true};
    assert_int_equal(meta_memory_set_faults(rt->meta, &f), 0);
    uint8_t v[4096];
    fill(v, sizeof(v), 7);
    assert_int_not_equal(kvmesh_put(kv, &scope, "held", 4, v, sizeof(v), NULL), 0);
    for (int i = 0; i < 300 && held[0] == 0; i++) { /* 30 s at most */
        usleep(100000);
        held_view(rt, held, released);
    }
    held_view(rt, held, released); /* settled: held until metadata answers */
    assert_true(held[0] == 1 && held[1] == 1);
    assert_true(released[0] == 0 && released[1] == 0);
    /* metadata back: the exact lookup finds no route referencing it, and releases it */
    f = (meta_memory_faults_t){0};
    assert_int_equal(meta_memory_set_faults(rt->meta, &f), 0);
    for (int i = 0; i < 300 && held[0] != 0; i++) {
        usleep(100000);
        held_view(rt, held, released);
    }
    held_view(rt, held, released);
    assert_true(held[0] == 0 && held[1] == 0);
    assert_true(released[0] == 1 && released[1] == 1);
    kvmesh_close(kv);
}

/* The number right after `needle` in the admin server's answer to GET path (as a scrape gets it).
 */
static long long admin_number(kvm_rt_t *rt, const char *path, const char *needle)
{
    struct obs_buf b;
    const char *ct;
    obs_buf_init(&b, 4 << 20);
    assert_int_equal(obs_http_render(rt->admin, "GET", path, NULL, &b, &ct), 200);
    const char *at = strstr(b.data, needle);
    assert_non_null(at);
    long long v = -1;
    assert_int_equal(sscanf(at + strlen(needle), "%lld", &v), 1);
    obs_buf_free(&b);
    return v;
}

/* kvmesh_notes_stale_total from rt's /metrics and owner.notes_stale from its /stats. */
static void stale_view(kvm_rt_t *rt, long long *metric, long long *stats)
{
    *metric = admin_number(rt, "/metrics", "\nkvmesh_notes_stale_total ");
    *stats = admin_number(rt, "/stats", "\"notes_stale\":");
}

struct late_note {
    kvm_rt_t *from;
    kvm_ident_t id;
    kvm_hot_replica_t rep;
};

static void send_late_release(void *arg)
{
    struct late_note *n = arg;
    kvm_ops_release_replica(n->from, &n->id, &n->rep);
}

/* A RELEASE that names an object no longer at its (segment, offset) -- what a late note for a
 * slot that was reclaimed and whose bytes hold another object now looks like -- sent over RPC
 * from another runtime: the owner ignores it (the object there stays readable) and counts it in
 * kvmesh_notes_stale_total and /stats owner.notes_stale. */
static void test_stale_note(void **state)
{
    (void)state;
    kvmesh_t *kv[2];
    for (int i = 0; i < 2; i++) {
        kvmesh_config_t *c = mkcfg("memory://store_stale", "4194304");
        assert_int_equal(kvmesh_config_set(c, "admin_listen", "127.0.0.1:0"), 0);
        assert_int_equal(kvmesh_config_set(c, "replicas", "1"), 0);
        assert_int_equal(kvmesh_open(&kv[i], c), 0);
        kvmesh_config_free(c);
    }
    size_t nm = 0;
    for (int t = 0; t < 100 && nm != 2; t++) {
        kvmesh_members(kv[0], NULL, 0, &nm);
        if (nm != 2)
            usleep(50000);
    }
    assert_int_equal(nm, 2);
    uint8_t v[4096], out[4096];
    fill(v, sizeof(v), 11);
    assert_int_equal(kvmesh_put(kv[0], &scope, "cur", 3, v, sizeof(v), NULL), 0);
    kvmesh_route_info_t ri;
    assert_int_equal(kvmesh_route_query(kv[0], &scope, "cur", 3, &ri), 0);
    assert_int_equal(ri.n_replicas, 1);
    int owner = -1;
    for (int i = 0; i < 2; i++) {
        char id[KVMESH_ID_HEX_LEN + 1];
        uint64_t ep;
        kvmesh_self(kv[i], id, &ep);
        if (strcmp(id, ri.replicas[0].owner) == 0)
            owner = i;
    }
    assert_true(owner >= 0);
    kvm_rt_t *ort = kvmesh_runtime_of(kv[owner]);
    long long metric = -1, stats = -1;
    stale_view(ort, &metric, &stats);
    assert_true(metric == 0 && stats == 0);
    struct late_note n = {.from = kvmesh_runtime_of(kv[1 - owner])};
    assert_int_equal(kvm_ident_init(&n.id, scope.tenant, NULL, "old", 3), 0);
    assert_int_equal(kvm_id128_parse(ri.replicas[0].owner, &n.rep.owner), 0);
    n.rep.segment = ri.replicas[0].segment;
    n.rep.offset = ri.replicas[0].offset;
    n.rep.length = ri.replicas[0].length;
    assert_int_equal(env_uv_thread_call(n.from->thread, send_late_release, &n), 0);
    kvm_ident_free(&n.id);
    for (int i = 0; i < 300 && metric == 0; i++) { /* a notification: 30 s at most */
        usleep(100000);
        stale_view(ort, &metric, &stats);
    }
    assert_true(metric == 1 && stats == 1);
    size_t got = 0;
    assert_int_equal(kvmesh_get_into(kv[1 - owner], &scope, "cur", 3, out, sizeof(out), &got), 0);
    assert_int_equal(got, sizeof(v));
    assert_memory_equal(out, v, sizeof(v));
    for (int i = 0; i < 2; i++)
        kvmesh_close(kv[i]);
}

static bool port_listens(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* A close whose loop is blocked in a callback returns KVMESH_ETIMEDOUT once its bound (2 x
 * request_timeout_ms + 5 s) passed, naming what it still waited for, instead of hanging; once the
 * loop is free again the close finishes and frees the runtime (its admin listener goes away). */
static void test_close_blocked_loop(void **state)
{
    (void)state;
    kvmesh_config_t *c = mkcfg("memory://store_close", "4194304");
    assert_int_equal(kvmesh_config_set(c, "admin_listen", "127.0.0.1:0"), 0);
    assert_int_equal(kvmesh_config_set(c, "request_timeout_ms", "300"), 0);
    kvmesh_t *kv = NULL;
    assert_int_equal(kvmesh_open(&kv, c), 0);
    kvmesh_config_free(c);
    kvm_rt_t *rt = kvmesh_runtime_of(kv);
    uint16_t port = kvm_rt_admin_port(rt);
    assert_true(port > 0 && port_listens(port));
    assert_int_equal(kvm_rt_close_bound_ms(&rt->cfg), 5600);
    /* static, not on this stack (tests/support/loop_gate.h) */
    static struct loop_gate g = LOOP_GATE_INIT;
    assert_int_equal(env_post(rt->env, loop_gate_block, &g), 0);
    loop_gate_wait_entered(&g);
    uint64_t t0 = env_clock_mono_ms();
    assert_int_equal(kvmesh_close(kv), KVMESH_ETIMEDOUT);
    fprintf(stderr, "close with a blocked loop returned after %llu ms (bound 5600 ms): %s\n",
            (unsigned long long)(env_clock_mono_ms() - t0), kvmesh_last_error());
    assert_non_null(strstr(kvmesh_last_error(), "the loop to start the close"));
    assert_true(port_listens(port)); /* not freed while the loop is blocked */
    loop_gate_open(&g);
    for (int i = 0; i < 300 && port_listens(port); i++) /* 30 s at most */
        usleep(100000);
    assert_false(port_listens(port));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_remove),
        cmocka_unit_test(test_replicas_and_overwrite),
        cmocka_unit_test(test_pins),
        cmocka_unit_test(test_scatter_gather_registered),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_members_and_scopes),
        cmocka_unit_test(test_many_threads),
        /* after this one, readers hold the owners of the corrupted replicas in quarantine for
         * two heartbeats: later tests put from the owner itself */
        cmocka_unit_test(test_checksum_failover),
        cmocka_unit_test(test_admin_endpoints),
        cmocka_unit_test(test_held_reservation),
        cmocka_unit_test(test_stale_note),
        cmocka_unit_test(test_close_blocked_loop),
        cmocka_unit_test(test_storage_resize),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
