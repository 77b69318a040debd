/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_support_tmpdir — the tests' scratch directories (tests/support/tmpdir.h): made under
 * $TMPDIR with the test's prefix, removed with everything below them (a killed process's
 * leftover temporaries included; symbolic links removed, never followed), removed at exit when
 * made with ttmp_make_auto, and only by the process that made them.
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tmpdir.h"

static char base[64]; /* this test's own TMPDIR */

static bool exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

static void touch(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof(base), "/tmp/kvmesh-ttmp-XXXXXX");
    if (!mkdtemp(base))
        return -1;
    return setenv("TMPDIR", base, 1);
}

static int teardown(void **state)
{
    (void)state;
    unsetenv("TMPDIR");
    return ttmp_remove(base);
}

/* Under $TMPDIR with the prefix; everything below removed, links not followed. */
static void test_make_and_remove_tree(void **state)
{
    (void)state;
    char d[256], outside[256], p[512];
    assert_int_equal(ttmp_make(d, sizeof(d), "kvmesh-x"), 0);
    snprintf(p, sizeof(p), "%s/kvmesh-x-", base);
    assert_int_equal(strncmp(d, p, strlen(p)), 0);
    assert_int_equal(strlen(d), strlen(p) + 6);
    /* what route_proc's killed runtimes left: a status file's temporary, nested directories */
    touch(d, "rt0.tmp");
    snprintf(p, sizeof(p), "%s/ld", d);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof(p), "%s/ld/ab", d);
    assert_int_equal(mkdir(p, 0700), 0);
    touch(p, "obj");
    assert_int_equal(ttmp_make(outside, sizeof(outside), "kvmesh-outside"), 0);
    touch(outside, "keep");
    snprintf(p, sizeof(p), "%s/link", d);
    assert_int_equal(symlink(outside, p), 0);
    assert_int_equal(ttmp_remove(d), 0);
    assert_string_equal(d, "");
    snprintf(p, sizeof(p), "%s/keep", outside);
    assert_true(exists(p));              /* the link was removed, not followed */
    assert_int_equal(ttmp_remove(d), 0); /* twice: a no-op */
    assert_int_equal(ttmp_remove(outside), 0);
    assert_false(exists(p));
}

/* A path that does not fit the buffer: an error, an empty buffer, nothing made. */
static void test_too_long(void **state)
{
    (void)state;
    char d[24];
    assert_int_equal(ttmp_make(d, sizeof(d), "kvmesh-a-rather-long-prefix"), -1);
    assert_string_equal(d, "");
}

/* Auto directories go at exit, but only in the process that made them. */
static void test_auto_at_exit(void **state)
{
    (void)state;
    static char mine[256];
    assert_int_equal(ttmp_make_auto(mine, sizeof(mine), "kvmesh-auto"), 0);
    char child_dir[256] = "";
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        static char theirs[256];
        close(fds[0]);
        int ok = ttmp_make_auto(theirs, sizeof(theirs), "kvmesh-auto-child") == 0;
        if (ok) {
            touch(theirs, "left-by-a-failed-check");
            ok = write(fds[1], theirs, strlen(theirs) + 1) > 0;
        }
        exit(ok ? 0 : 1); /* atexit: removes theirs (with its file), leaves the parent's mine */
    }
    close(fds[1]);
    ssize_t n = read(fds[0], child_dir, sizeof(child_dir) - 1);
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(n > 0);
    assert_false(exists(child_dir));
    assert_true(exists(mine));
    char copy[256];
    snprintf(copy, sizeof(copy), "%s", mine);
    assert_int_equal(ttmp_remove(mine), 0);
    assert_false(exists(copy));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_make_and_remove_tree),
        cmocka_unit_test(test_too_long),
        cmocka_unit_test(test_auto_at_exit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
