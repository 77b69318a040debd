/* SPDX-License-Identifier: Apache-2.0 */
/*
 * curl_body.h — the response body of a libcurl request in the tests (header-only): a growing,
 * NUL-terminated buffer and the CURLOPT_WRITEFUNCTION that appends to it.
 *
 * Also a plain GET of a local admin port into such a body (tcurl_get_local).
 *
 * Ownership: the buffer is the caller's (start from {0}, free(data) when done). A failed growth
 * returns 0 from the sink, which makes libcurl fail the transfer (CURLE_WRITE_ERROR).
 */
#ifndef KVMESH_TESTS_SUPPORT_CURL_BODY_H
#define KVMESH_TESTS_SUPPORT_CURL_BODY_H

#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>
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

/* GET http://127.0.0.1:<port><path> (20 s timeout, no signals) into *b (from {0}; b->data stays
 * NULL when nothing came). The response code, or -1 when the request failed (or no handle). */
static inline long tcurl_get_local(uint16_t port, const char *path, struct tcurl_body *b)
{
    char u[256];
    snprintf(u, sizeof(u), "http://127.0.0.1:%u%s", (unsigned)port, path);
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    curl_easy_setopt(c, CURLOPT_URL, u);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, tcurl_body_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    long code = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    return code;
}

#endif
