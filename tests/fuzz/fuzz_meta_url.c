/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_meta_url.c — libFuzzer target for the metadata parsers written in src/meta: the URL
 * scheme splitter (meta_url_scheme), the memory:// URL parser, the keyspace key parser and the
 * operation-id parser. The first input byte picks the parser; the rest is the text. Properties
 * checked beyond "no crash": a key that parses rebuilds to the same bytes, and a scheme that
 * parses is lower-case and a prefix of the URL (case-insensitively).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "meta/keyspace.h"
#include "meta/meta_backend.h"
#include "meta/meta_memory.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0'; /* inputs with inner NULs are simply shorter strings */
    switch (data[0] % 4) {
    case 0: {
        char scheme[32];
        if (meta_url_scheme(s, scheme, sizeof(scheme)) == 0) {
            size_t n = strlen(scheme);
            if (n == 0 || strncasecmp(s, scheme, n) != 0 || strncmp(s + n, "://", 3) != 0)
                abort();
            for (size_t i = 0; i < n; i++)
                if (scheme[i] >= 'A' && scheme[i] <= 'Z')
                    abort();
        }
        break;
    }
    case 1: {
        char name[META_MEMORY_NAME_MAX + 1];
        if (meta_memory_parse_url(s, name, sizeof(name)) == 0 &&
            strlen(name) > META_MEMORY_NAME_MAX)
            abort();
        break;
    }
    case 2: {
        ks_parsed_t *p = malloc(sizeof(*p));
        if (p && ks_parse(s, p) == 0) {
            ks_part_t parts[KS_MAX_PARTS];
            for (size_t i = 0; i < p->n_parts; i++)
                parts[i] = (ks_part_t){.s = p->parts[i].s, .u = p->parts[i].u};
            char k[KS_KEY_CAP];
            if (ks_key(k, sizeof(k), p->deployment, p->family, parts) != 0 || strcmp(k, s) != 0)
                abort();
        }
        free(p);
        break;
    }
    case 3: {
        uint64_t e, q;
        if (ks_opid_parse(s, &e, &q) == 0) {
            char again[KS_OPID_LEN + 1];
            ks_opid_format(again, e, q);
            if (strcmp(again, s) != 0)
                abort();
        }
        break;
    }
    }
    free(s);
    return 0;
}
