/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cold_nfs.c — the NFS target check (src/cold/cold_nfs.c): a real local directory
 * (tmpfs/ext4/overlay: whatever /tmp is) configured as NFS is refused, by cold_nfs_check and by
 * cold_backend_open with require_nfs, with a message naming the path and the filesystem type
 * found in /proc/self/mountinfo; with mountinfo files written here: an nfs4 rw hard mount is
 * accepted, soft and ro ones are refused naming why, the longest mount-point prefix (not a
 * string prefix) is chosen, escaped mount points are read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cold/cold_backend_open.h"
#include "cold/cold_nfs.h"
#include "kvmesh.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kvmesh-nfs-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof(p), "%s/mountinfo", dir);
    unlink(p);
    return rmdir(dir);
}

static void test_local_dir_refused(void **state)
{
    (void)state;
    cold_nfs_mount_t m;
    cold_backend_err_t err = {{0}};
    assert_int_equal(cold_nfs_find_mount(dir, NULL, &m, &err), 0);
    assert_true(strcmp(m.fstype, "nfs") != 0 && strcmp(m.fstype, "nfs4") != 0);
    int rc = cold_nfs_check(dir, NULL, &err);
    printf("refused: %s\n", err.msg);
    assert_int_equal(rc, KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, dir));
    char type[64];
    snprintf(type, sizeof(type), "on filesystem type %s", m.fstype);
    assert_non_null(strstr(err.msg, type));
    /* the backend opener refuses it too, and opens it without require_nfs */
    cold_backend_config_t bc = {
        .kind = COLD_BACKEND_LOCALDIR, .root = dir, .capacity_bytes = 1 << 20, .require_nfs = true};
    cold_backend_t be;
    memset(&err, 0, sizeof(err));
    assert_int_equal(cold_backend_open(&bc, &be, &err), KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, dir));
    assert_non_null(strstr(err.msg, type));
    bc.require_nfs = false;
    assert_int_equal(cold_backend_open(&bc, &be, &err), 0);
    cold_backend_close(&be);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s/ld", dir);
    assert_int_equal(system(cmd), 0);
}

static const char *write_mountinfo(const char *body)
{
    static char p[128];
    snprintf(p, sizeof(p), "%s/mountinfo", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(body, f);
    fclose(f);
    return p;
}

static void test_mountinfo_cases(void **state)
{
    (void)state;
    char body[2048];
    cold_backend_err_t err = {{0}};
    /* dir lies under /tmp: a "/tm" mount must not match, "/tmp" must, the last "/" is the root */
    snprintf(body, sizeof(body),
             "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
             "30 22 0:40 / /tm rw - tmpfs tmpfs rw\n"
             "31 22 0:41 / /tmp rw,relatime shared:9 - nfs4 srv:/export "
             "rw,vers=4.2,hard,proto=tcp\n");
    const char *mi = write_mountinfo(body);
    assert_int_equal(cold_nfs_check(dir, mi, &err), 0);
    cold_nfs_mount_t m;
    assert_int_equal(cold_nfs_find_mount(dir, mi, &m, &err), 0);
    assert_string_equal(m.mount_point, "/tmp");
    assert_string_equal(m.fstype, "nfs4");
    /* soft */
    snprintf(body, sizeof(body),
             "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
             "31 22 0:41 / /tmp rw - nfs srv:/export rw,vers=3,soft,proto=tcp\n");
    mi = write_mountinfo(body);
    assert_int_equal(cold_nfs_check(dir, mi, &err), KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, "soft"));
    /* read-only */
    snprintf(body, sizeof(body),
             "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
             "31 22 0:41 / /tmp ro,relatime - nfs4 srv:/export ro,hard\n");
    mi = write_mountinfo(body);
    assert_int_equal(cold_nfs_check(dir, mi, &err), KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, "read-only"));
    /* an escaped mount point holding dir's parent: "/t\040x" is "/t x", not /tmp; the root is
     * xfs: refused naming xfs */
    snprintf(body, sizeof(body),
             "22 1 8:1 / / rw - xfs /dev/sda1 rw\n"
             "31 22 0:41 / /t\\040x rw - nfs4 srv:/export rw,hard\n");
    mi = write_mountinfo(body);
    assert_int_equal(cold_nfs_check(dir, mi, &err), KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, "on filesystem type xfs"));
    assert_int_equal(cold_nfs_find_mount("/t x/y", mi, &m, &err), 0);
    assert_string_equal(m.mount_point, "/t x");
    /* a directory that does not exist */
    char missing[128];
    snprintf(missing, sizeof(missing), "%s/none", dir);
    assert_int_equal(cold_nfs_check(missing, mi, &err), KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, missing));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_dir_refused),
        cmocka_unit_test(test_mountinfo_cases),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
