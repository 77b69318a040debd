// SPDX-License-Identifier: Apache-2.0
/*
 * cold_health.c — the cold device's health fed by the running store's own backend I/O
 * (docs/cold.md "Device health", src/store/cold_health.h). One storage runtime, in-memory
 * metadata, a real LocalDir device in a temporary directory, cold_write_through on (so a put's
 * answer says whether its cold copy was written), its /metrics read over HTTP:
 *   1. healthy: a put succeeds with a cold copy; kvmesh_cold_device_health = 1 (healthy);
 *   2. the device breaks: its object directory <root>/ld is replaced by a plain file (every
 *      create under it fails with ENOTDIR, also as root, where chmod would not stop writes);
 *      puts fail (their offloads get KVMESH_EIO) until the consecutive errors mark the device
 *      record DEGRADED: the gauge reads 2;
 *   3. placement skips the degraded device: the next put fails at once with KVMESH_EUNAVAILABLE
 *      before its route CAS ("no healthy, schedulable cold device");
 *   4. the directory is put back: the periodic probe succeeds, the record is HEALTHY again
 *      (gauge 1) and a put gets its cold copy again.
 *   5. lifecycle (kvmesh_admin_device_lifecycle, what `kvmesh admin devices` runs): retire is
 *      refused while the device holds used bytes; drain makes it unschedulable, and a put then
 *      fails at once with KVMESH_EUNAVAILABLE (placement skips a draining device) while the
 *      object written before reads back with its bytes.
 * Without the feeding (kvm_cold_health_tick not called) step 2's bounded wait fails: the gauge
 * stays 1. Every wait is bounded; the directory is removed at the end.
 */
#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"
#include "cold_itest.h"
#include "proc.h"
#include "coldfiles.h"
#include "env/clock.h"
#include "tmpdir.h"

struct kvm_rt;
struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);
uint16_t kvm_rt_admin_port(struct kvm_rt *rt);

#define OBJ_LEN (64u << 10)
#define PUTS    40 /* bounded: puts while the device is broken */

static char tmpdir[64];
static kvmesh_t *kv;
static const kvmesh_scope_t sc = {"health", NULL};

static void cleanup(void)
{
    if (kv) {
        kvmesh_close(kv);
        kv = NULL;
    }
    tcold_remove_dir(tmpdir);
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static double health(void)
{
    double x = -1;
    CHECK(cold_itest_metric(kvm_rt_admin_port(kvmesh_runtime_of(kv)), "kvmesh_cold_device_health",
                            NULL, NULL, &x) == 0);
    return x;
}

static int put(uint32_t i, uint8_t *buf)
{
    char k[32];
    snprintf(k, sizeof(k), "health-%04u", i);
    memset(buf, (int)(i & 0xff), OBJ_LEN);
    return kvmesh_put(kv, &sc, k, strlen(k), buf, OBJ_LEN, NULL);
}

/* Waits (bounded by ms) until the health gauge reads want; returns what it read last. */
static double wait_health(double want, uint32_t ms)
{
    uint64_t end = env_clock_mono_ms() + ms;
    double h = health();
    while (h != want && env_clock_mono_ms() < end) {
        usleep(50000);
        h = health();
    }
    return h;
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-health") == 0);
    char root[128], ld[160], ld_saved[160], dep[64], url[96];
    snprintf(root, sizeof(root), "%s/dev", tmpdir);
    snprintf(ld, sizeof(ld), "%s/ld", root);
    snprintf(ld_saved, sizeof(ld_saved), "%s/ld.saved", root);
    CHECK(mkdir(root, 0700) == 0);
    snprintf(dep, sizeof(dep), "coldhealth%d", (int)getpid());
    snprintf(url, sizeof(url), "memory://%s", dep);
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "deployment", dep) == 0);
    CHECK(kvmesh_config_set(c, "admin_listen", "127.0.0.1:0") == 0);
    CHECK(kvmesh_config_set(c, "memory_size", "8MiB") == 0);
    CHECK(kvmesh_config_set(c, "segment_size", "8MiB") == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "1MiB") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_config_set(c, "request_timeout_ms", "3000") == 0);
    CHECK(kvmesh_config_set(c, "cold_kind", "localdir") == 0);
    CHECK(kvmesh_config_set(c, "cold_root", root) == 0);
    CHECK(kvmesh_config_set(c, "cold_capacity", "64MiB") == 0);
    CHECK(kvmesh_config_set(c, "cold_write_through", "true") == 0);
    CHECK(kvmesh_config_set(c, "cold_retry_backoff_ms", "1") == 0);
    CHECK(kvmesh_config_set(c, "cold_retry_backoff_max_ms", "10") == 0);
    CHECK(kvmesh_open(&kv, c) == 0);
    kvmesh_config_free(c);
    uint8_t *buf = malloc(OBJ_LEN);
    CHECK(buf);

    /* 1. healthy */
    CHECK(put(0, buf) == 0);
    CHECK(wait_health(1, 5000) == 1);

    /* 2. the object directory becomes a plain file: offloads fail, the record goes DEGRADED */
    CHECK(rename(ld, ld_saved) == 0);
    int fd = open(ld, O_CREAT | O_WRONLY | O_EXCL, 0600);
    CHECK(fd >= 0);
    close(fd);
    double h = health();
    int failed = 0;
    uint64_t end = env_clock_mono_ms() + 20000;
    for (uint32_t i = 1; i <= PUTS && h != 2 && env_clock_mono_ms() < end; i++) {
        int rc = put(i, buf);
        failed += rc != 0;
        h = wait_health(2, 300);
    }
    printf("broken device: %d puts failed; kvmesh_cold_device_health = %.0f\n", failed, h);
    CHECK(h == 2 && failed > 0);

    /* 3. placement skips it: a put fails before its route CAS */
    int rc = put(1000, buf);
    printf("put on the degraded device: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
    CHECK(rc == KVMESH_EUNAVAILABLE && strstr(kvmesh_last_error(), "no healthy") != NULL);

    /* 4. repaired: the probe clears it, puts get their cold copy again */
    CHECK(unlink(ld) == 0);
    CHECK(rename(ld_saved, ld) == 0);
    h = wait_health(1, 15000);
    printf("repaired device: kvmesh_cold_device_health = %.0f\n", h);
    CHECK(h == 1);
    rc = -1;
    end = env_clock_mono_ms() + 10000;
    for (int t = 0; t < 50 && rc != 0 && env_clock_mono_ms() < end; t++) {
        rc = put(2000, buf); /* the view may trail the record by a tick */
        if (rc)
            usleep(100000);
    }
    CHECK(rc == 0);
    kvmesh_route_info_t ri;
    CHECK(kvmesh_route_query(kv, &sc, "health-2000", 11, &ri) == 0 && ri.cold_backed);

    /* 5. lifecycle: retire refused while it holds bytes; drain: no new placement */
    kvmesh_admin_t *adm = NULL;
    CHECK(tproc_admin_open(url, dep, &adm) == 0);
    kvmesh_admin_device_t dv;
    size_t ndv = 0;
    bool more = false, changed = false;
    CHECK(kvmesh_admin_devices(adm, NULL, 1, &dv, &ndv, &more) == 0 && ndv == 1);
    rc = kvmesh_admin_device_lifecycle(adm, dv.id, "retire", &dv, &changed);
    printf("retire: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
    CHECK(rc == KVMESH_EAGAIN && !changed && strstr(kvmesh_last_error(), "still holds"));
    CHECK(kvmesh_admin_device_lifecycle(adm, dv.id, "drain", &dv, &changed) == 0 && changed);
    CHECK(strcmp(dv.lifecycle, "draining") == 0 && !dv.schedulable);
    kvmesh_admin_close(adm);
    /* until the view shows it (a tick); meanwhile a put placed from the old view may succeed or
     * have its reserve refused in metadata (the record already says draining) */
    rc = 0;
    for (uint32_t t = 0; t < 50; t++) {
        rc = put(3000 + t, buf);
        if (rc == KVMESH_EUNAVAILABLE && strstr(kvmesh_last_error(), "no healthy, schedulable"))
            break;
        usleep(50000);
    }
    printf("put on the draining device: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
    CHECK(rc == KVMESH_EUNAVAILABLE && strstr(kvmesh_last_error(), "no healthy, schedulable"));
    void *out = NULL;
    size_t len = 0;
    CHECK(kvmesh_get(kv, &sc, "health-2000", 11, &out, &len) == 0 && len == OBJ_LEN);
    memset(buf, 2000 & 0xff, OBJ_LEN);
    CHECK(memcmp(out, buf, OBJ_LEN) == 0);
    kvmesh_free(out);
    free(buf);
    cleanup();
    curl_global_cleanup();
    printf("cold_health: ok\n");
    return 0;
}
