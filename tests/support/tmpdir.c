// SPDX-License-Identifier: Apache-2.0
/*
 * tmpdir.c — the tests' scratch directories (tmpdir.h).
 */
#include "tmpdir.h"

#include <errno.h>
#include <stdbool.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Directories to remove at exit, each with the process that made it (a forked child inherits
 * the table and the atexit handler, and must leave its parent's entries alone). */
static struct {
    char *dir;
    pid_t pid;
} autos[TTMP_AUTO_MAX];
static bool auto_registered;
static int rm_failed;

int ttmp_make(char *buf, size_t cap, const char *prefix)
{
    const char *t = getenv("TMPDIR");
    int n = snprintf(buf, cap, "%s/%s-XXXXXX", t && *t ? t : "/tmp", prefix);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "ttmp_make: the path of %s under %s does not fit %zu bytes\n", prefix,
                t && *t ? t : "/tmp", cap);
        if (cap)
            buf[0] = '\0';
        return -1;
    }
    if (!mkdtemp(buf)) {
        fprintf(stderr, "ttmp_make: mkdtemp %s: %s\n", buf, strerror(errno));
        buf[0] = '\0';
        return -1;
    }
    return 0;
}

static void remove_auto(void)
{
    for (int i = 0; i < TTMP_AUTO_MAX; i++)
        if (autos[i].dir && autos[i].pid == getpid())
            (void)ttmp_remove(autos[i].dir);
}

int ttmp_make_auto(char *buf, size_t cap, const char *prefix)
{
    int slot = -1;
    for (int i = 0; i < TTMP_AUTO_MAX && slot < 0; i++)
        if (!autos[i].dir || autos[i].dir == buf || autos[i].pid != getpid())
            slot = i; /* free, this buffer again, or an entry inherited from a parent */
    if (slot < 0) {
        fprintf(stderr, "ttmp_make_auto: more than %d directories\n", TTMP_AUTO_MAX);
        return -1;
    }
    if (ttmp_make(buf, cap, prefix) != 0)
        return -1;
    if (!auto_registered) {
        auto_registered = true;
        if (atexit(remove_auto) != 0)
            fprintf(stderr, "ttmp_make_auto: atexit failed; %s is not removed at exit\n", buf);
    }
    autos[slot].dir = buf;
    autos[slot].pid = getpid();
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0 && errno != ENOENT) {
        fprintf(stderr, "ttmp_remove: %s: %s\n", path, strerror(errno));
        rm_failed = 1;
    }
    return 0; /* go on: remove what can be removed */
}

int ttmp_remove(char *dir)
{
    if (!dir || !dir[0])
        return 0;
    for (int i = 0; i < TTMP_AUTO_MAX; i++)
        if (autos[i].dir == dir)
            autos[i].dir = NULL;
    rm_failed = 0;
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) {
        fprintf(stderr, "ttmp_remove: %s: %s\n", dir, strerror(errno));
        rm_failed = 1;
    }
    dir[0] = '\0';
    return rm_failed ? -1 : 0;
}
