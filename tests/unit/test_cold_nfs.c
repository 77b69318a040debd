/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cold_nfs.c — the NFS target check (src/cold/cold_nfs.c): a real local directory (a scratch
 * directory under $TMPDIR or /tmp, tests/support/tmpdir.h, removed at exit even after a failed
 * assertion; tmpfs/ext4/overlay: whatever holds it) configured as NFS is refused, by cold_nfs_check
 * and by cold_backend_open with require_nfs, with a message naming the path and the filesystem type
 * found in /proc/self/mountinfo; with mountinfo files written here: an nfs4 rw hard mount is
 * accepted, soft and ro ones are refused naming why, the longest mount-point prefix (not a
 * string prefix) is chosen, escaped mount points are read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cold/cold_backend_open.h"
#include "cold/cold_nfs.h"
#include "kvmesh.h"
#include "tmpdir.h"

static char dir[PATH_MAX];
/* The canonical path of dir's parent as a mountinfo field (spaces and backslashes escaped as
 * the kernel writes them), and the same without its last character (a string prefix of it that
 * is not a mount point above dir). */
static char parent_mi[PATH_MAX], parent_cut[PATH_MAX];

static void mi_escape(char *out, size_t cap, const char *in, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        if (in[i] == ' ' || in[i] == '\\' || in[i] == '\t' || in[i] == '\n')
            o += (size_t)snprintf(out + o, cap - o, "\\%03o", (unsigned char)in[i]);
        else
            out[o++] = in[i];
    }
    out[o] = 0;
}

static int setup(void **state)
{
    (void)state;
    if (ttmp_make_auto(dir, sizeof(dir), "kvmesh-nfs") != 0)
        return -1;
    char canon[PATH_MAX];
    if (!realpath(dir, canon))
        return -1;
    char *slash = strrchr(canon, '/');
    size_t n = (size_t)(slash - canon);
    if (n < 2)
        return -1; /* (a scratch directory right under "/": no parent to test prefixes with) */
    mi_escape(parent_mi, sizeof(parent_mi), canon, n);
    mi_escape(parent_cut, sizeof(parent_cut), canon, n - 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return ttmp_remove(dir);
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
}

static const char *write_mountinfo(const char *body)
{
    static char p[PATH_MAX + 16];
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
    char body[3 * PATH_MAX];
    cold_backend_err_t err = {{0}};
    /* a mount at a string prefix of dir's parent must not match, one at the parent must, the
     * last "/" is the root */
    snprintf(body, sizeof(body),
             "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
             "30 22 0:40 / %s rw - tmpfs tmpfs rw\n"
             "31 22 0:41 / %s rw,relatime shared:9 - nfs4 srv:/export "
             "rw,vers=4.2,hard,proto=tcp\n",
             parent_cut, parent_mi);
    const char *mi = write_mountinfo(body);
    assert_int_equal(cold_nfs_check(dir, mi, &err), 0);
    cold_nfs_mount_t m;
    assert_int_equal(cold_nfs_find_mount(dir, mi, &m, &err), 0);
    char parent[PATH_MAX];
    assert_non_null(realpath(dir, parent));
    *strrchr(parent, '/') = 0;
    assert_string_equal(m.mount_point, parent);
    assert_string_equal(m.fstype, "nfs4");
    /* soft */
    snprintf(body, sizeof(body),
             "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
             "31 22 0:41 / %s rw - nfs srv:/export rw,vers=3,soft,proto=tcp\n",
             parent_mi);
    mi = write_mountinfo(body);
    assert_int_equal(cold_nfs_check(dir, mi, &err), KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, "soft"));
    /* read-only */
    snprintf(body, sizeof(body),
             "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
             "31 22 0:41 / %s ro,relatime - nfs4 srv:/export ro,hard\n",
             parent_mi);
    mi = write_mountinfo(body);
    assert_int_equal(cold_nfs_check(dir, mi, &err), KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, "read-only"));
    /* an escaped mount point: "/t\040x" is "/t x", which does not hold dir; the root is xfs:
     * refused naming xfs */
    snprintf(body, sizeof(body),
             "22 1 8:1 / / rw - xfs /dev/sda1 rw\n"
             "31 22 0:41 / /t\\040x rw - nfs4 srv:/export rw,hard\n");
    mi = write_mountinfo(body);
    assert_int_equal(cold_nfs_check(dir, mi, &err), KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, "on filesystem type xfs"));
    assert_int_equal(cold_nfs_find_mount("/t x/y", mi, &m, &err), 0);
    assert_string_equal(m.mount_point, "/t x");
    /* a directory that does not exist */
    char missing[PATH_MAX + 8];
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
