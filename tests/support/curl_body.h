/* SPDX-License-Identifier: Apache-2.0 */
/*
 * curl_body.h — the response body of a libcurl request in the tests (header-only): a growing,
 * NUL-terminated buffer and the CURLOPT_WRITEFUNCTION that appends to it.
 *
 * Ownership: the buffer is the caller's (start from {0}, free(data) when done). A failed growth
 * returns 0 from the sink, which makes libcurl fail the transfer (CURLE_WRITE_ERROR).
 */
#ifndef KVMESH_TESTS_SUPPORT_CURL_BODY_H
#define KVMESH_TESTS_SUPPORT_CURL_BODY_H

#include <stdlib.h>
#include <string.h>

struct tcurl_body {
    char *data; /* NUL-terminated, malloc'd */
    size_t len;
};

/* CURLOPT_WRITEFUNCTION with CURLOPT_WRITEDATA a struct tcurl_body *. */
static inline size_t tcurl_body_sink(char *p, size_t sz, size_t n, void *arg)
{
    struct tcurl_body *b = arg;
    char *d = realloc(b->data, b->len + sz * n + 1);
    if (!d)
        return 0;
    memcpy(d + b->len, p, sz * n);
    b->data = d;
    b->len += sz * n;
    d[b->len] = '\0';
    return sz * n;
}

#endif
