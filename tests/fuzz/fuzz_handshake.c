/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_handshake.c — libFuzzer target for the handshake decoders. The first input byte picks
 * the decoder (descriptor, Hello, HelloAck, Auth, Verdict), the rest is the message. Accepted
 * messages must satisfy the decoder's guarantees (valid descriptor, bounded strings), survive a
 * re-encode/decode round trip unchanged, and go through the compatibility check.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "net/handshake.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct hs_descriptor local_desc(void)
{
    struct hs_descriptor d;
    memset(&d, 0, sizeof(d));
    snprintf(d.deployment_id, sizeof(d.deployment_id), "dep");
    snprintf(d.runtime_id, sizeof(d.runtime_id), "local");
    for (int i = 0; i < HS_PROTO_COUNT; i++) {
        d.proto[i].min = 1;
        d.proto[i].max = 2;
    }
    return d;
}

static void check_desc(const struct hs_descriptor *d)
{
    KVM_ASSERT(hs_descriptor_validate(d) == 0);
    struct hs_descriptor l = local_desc();
    char msg[HS_MSG_MAX];
    struct hs_negotiated neg;
    enum hs_reason r = hs_check_compat(&l, d, "x", &neg, msg, sizeof(msg));
    KVM_ASSERT(r <= HS_REASON_MAX);
    KVM_ASSERT(strlen(msg) < sizeof(msg));
    uint8_t *buf;
    size_t n;
    KVM_ASSERT(hs_descriptor_encode(d, &buf, &n) == 0);
    struct hs_descriptor e;
    KVM_ASSERT(hs_descriptor_decode(buf, n, &e) == 0);
    KVM_ASSERT(memcmp(d, &e, sizeof(e)) == 0);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *m = data + 1;
    size_t n = size - 1;
    struct hs_hello *h = malloc(sizeof(*h));
    if (!h)
        return 0;
    switch (data[0] % 5) {
    case 0: {
        struct hs_descriptor d;
        if (hs_descriptor_decode(m, n, &d) == 0)
            check_desc(&d);
        break;
    }
    case 1:
        if (hs_hello_decode(m, n, h) == 0) {
            check_desc(&h->desc);
            KVM_ASSERT(strlen(h->expect_runtime_id) <= HS_ID_MAX);
            uint8_t *b;
            size_t bn;
            KVM_ASSERT(hs_hello_encode(h->desc_raw, h->desc_raw_len, h->nonce, h->expect_runtime_id,
                                       &b, &bn) == 0);
            struct hs_hello *h2 = malloc(sizeof(*h2));
            KVM_ASSERT(h2 && hs_hello_decode(b, bn, h2) == 0);
            KVM_ASSERT(memcmp(&h2->desc, &h->desc, sizeof(h->desc)) == 0);
            free(h2);
            free(b);
        }
        break;
    case 2:
        if (hs_ack_decode(m, n, h) == 0) {
            check_desc(&h->desc);
            KVM_ASSERT(!h->auth_required || h->has_mac);
        }
        break;
    case 3: {
        uint8_t mac[HS_MAC_LEN];
        int has = 0;
        (void)hs_auth_decode(m, n, mac, &has);
        break;
    }
    default: {
        enum hs_reason r;
        char msg[HS_MSG_MAX];
        if (hs_verdict_decode(m, n, &r, msg, sizeof(msg)) == 0) {
            KVM_ASSERT(r <= HS_REASON_MAX);
            for (const char *p = msg; *p; p++)
                KVM_ASSERT(*p >= 0x20 && *p < 0x7f);
        }
        break;
    }
    }
    free(h);
    return 0;
}
