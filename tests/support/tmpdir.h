/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tmpdir.h — the tests' scratch directories: made under $TMPDIR (or /tmp when it is unset or
 * empty) with a per-test prefix, and removed with everything below them, on success and on the
 * failure paths the harness allows (a CHECK that calls its cleanup, or exit()).
 *
 *   char dir[256];
 *   if (ttmp_make(dir, sizeof(dir), "kvmesh-cold-store") != 0) ...
 * "$TMPDIR/kvmesh-cold-store-XXXXXX"
 *   ...
 *   ttmp_remove(dir);                       rm -rf, then dir[0] = '\0' (safe to call twice)
 *
 * ttmp_make_auto also removes the directory when the process exits (atexit), so a cmocka test
 * whose failed assertion leaves the test function early still cleans up. Only the process that
 * made it removes it (a forked child that exits leaves it alone); abort() and SIGKILL skip
 * atexit, so such a directory stays (its prefix says which test left it).
 *
 * Ownership: the caller owns buf; ttmp_make_auto keeps a pointer to it until exit or until
 * ttmp_remove(buf). Threading: ttmp_make from any thread; ttmp_make_auto and ttmp_remove from
 * one thread at a time.
 */
#ifndef KVMESH_TESTS_SUPPORT_TMPDIR_H
#define KVMESH_TESTS_SUPPORT_TMPDIR_H

#include <stddef.h>

#define TTMP_AUTO_MAX 16 /* directories ttmp_make_auto tracks per process */

/* Makes "<$TMPDIR or /tmp>/<prefix>-XXXXXX" (mode 0700) into buf. Returns 0, or -1 with the
 * reason on stderr and buf empty. */
int ttmp_make(char *buf, size_t cap, const char *prefix);

/* ttmp_make, and removal at exit. buf must stay valid until then (a static or global). */
int ttmp_make_auto(char *buf, size_t cap, const char *prefix);

/* Removes dir and everything below it (symbolic links are removed, not followed) when dir[0] is
 * not NUL, then empties dir. Returns 0, or -1 when something could not be removed (named on
 * stderr). */
int ttmp_remove(char *dir);

#endif
