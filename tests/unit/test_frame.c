/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_frame.c — the fixed frame header codec: round trip, byte layout, and every rejection
 * reason (magic, version, kind, reserved, header size, frame size, kind shape, short input).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "codec_fixture.h"
#include "net/frame.h"

static void test_roundtrip_and_layout(void **state)
{
    (void)state;
    struct frame_header h = fixture_frame_header(), d;
    uint8_t b[FRAME_FIXED_SIZE];
    frame_encode(&h, b);
    assert_memory_equal(b, "KVMR", 4);
    assert_int_equal(b[4], FRAME_VERSION);
    assert_int_equal(b[5], FRAME_REQUEST);
    assert_int_equal(b[6], 0x12);
    assert_int_equal(b[7], 0x34);
    assert_int_equal(b[8], 0x01);
    assert_int_equal(b[15], 0x08);
    assert_int_equal(b[18], 0x05); /* 1500 = 0x05DC */
    assert_int_equal(b[19], 0xDC);
    assert_int_equal(b[23], 77);
    assert_int_equal(b[29], 0x10); /* 1 MiB = 0x100000 */
    assert_int_equal(b[32], 1);
    assert_int_equal(b[48], 0xF0);
    assert_int_equal(b[56], 1);
    for (int i = 57; i < 64; i++)
        assert_int_equal(b[i], 0);
    assert_int_equal(frame_decode(b, sizeof(b), 64u << 20, &d), FRAME_OK);
    assert_int_equal(d.version, FRAME_VERSION);
    assert_int_equal(d.kind, h.kind);
    assert_int_equal(d.type, h.type);
    assert_true(d.request_id == h.request_id);
    assert_int_equal(d.deadline_ms, h.deadline_ms);
    assert_int_equal(d.header_len, h.header_len);
    assert_true(d.payload_len == h.payload_len);
    assert_memory_equal(&d.trace, &h.trace, sizeof(h.trace));
}

static void test_rejections(void **state)
{
    (void)state;
    struct frame_header h = fixture_frame_header(), d;
    uint8_t b[FRAME_FIXED_SIZE], x[FRAME_FIXED_SIZE];
    frame_encode(&h, b);
    assert_int_equal(frame_decode(b, FRAME_FIXED_SIZE - 1, 1u << 30, &d), FRAME_ERR_SHORT);
    memcpy(x, b, sizeof(b));
    x[0] = 'X';
    assert_int_equal(frame_decode(x, sizeof(x), 1u << 30, &d), FRAME_ERR_MAGIC);
    memcpy(x, b, sizeof(b));
    x[4] = 9;
    assert_int_equal(frame_decode(x, sizeof(x), 1u << 30, &d), FRAME_ERR_VERSION);
    assert_int_equal(d.version, 9);
    memcpy(x, b, sizeof(b));
    x[5] = 0;
    assert_int_equal(frame_decode(x, sizeof(x), 1u << 30, &d), FRAME_ERR_KIND);
    x[5] = FRAME_KIND_MAX + 1;
    assert_int_equal(frame_decode(x, sizeof(x), 1u << 30, &d), FRAME_ERR_KIND);
    memcpy(x, b, sizeof(b));
    x[56] = 0x02;
    assert_int_equal(frame_decode(x, sizeof(x), 1u << 30, &d), FRAME_ERR_RESERVED);
    memcpy(x, b, sizeof(b));
    x[63] = 1;
    assert_int_equal(frame_decode(x, sizeof(x), 1u << 30, &d), FRAME_ERR_RESERVED);
    memcpy(x, b, sizeof(b));
    x[21] = 0x20; /* header_len 2 MiB */
    assert_int_equal(frame_decode(x, sizeof(x), 1ull << 40, &d), FRAME_ERR_HEADER_SIZE);
    /* Total size: exactly the limit passes, one more byte fails; huge lengths never wrap. */
    uint64_t total = FRAME_FIXED_SIZE + 77 + (1u << 20);
    assert_int_equal(frame_decode(b, sizeof(b), total, &d), FRAME_OK);
    assert_int_equal(frame_decode(b, sizeof(b), total - 1, &d), FRAME_ERR_TOO_BIG);
    memcpy(x, b, sizeof(b));
    memset(x + 24, 0xff, 8);
    assert_int_equal(frame_decode(x, sizeof(x), UINT64_MAX, &d), FRAME_ERR_TOO_BIG);
    assert_int_equal(frame_decode(b, sizeof(b), 10, &d), FRAME_ERR_TOO_BIG);
}

static void test_shapes(void **state)
{
    (void)state;
    struct frame_header h = {.kind = FRAME_CANCEL, .request_id = 5}, d;
    uint8_t b[FRAME_FIXED_SIZE];
    frame_encode(&h, b);
    assert_int_equal(frame_decode(b, sizeof(b), 1u << 20, &d), FRAME_OK);
    h.payload_len = 1;
    frame_encode(&h, b);
    assert_int_equal(frame_decode(b, sizeof(b), 1u << 20, &d), FRAME_ERR_SHAPE);
    struct frame_header hs = {.kind = FRAME_HELLO, .header_len = 10, .payload_len = 1};
    frame_encode(&hs, b);
    assert_int_equal(frame_decode(b, sizeof(b), 1u << 20, &d), FRAME_ERR_SHAPE);
    struct frame_header rq = {.kind = FRAME_REQUEST, .request_id = 0, .type = 3};
    frame_encode(&rq, b);
    assert_int_equal(frame_decode(b, sizeof(b), 1u << 20, &d), FRAME_ERR_SHAPE);
    struct frame_header nt = {.kind = FRAME_NOTIFY, .type = 3};
    frame_encode(&nt, b);
    assert_int_equal(frame_decode(b, sizeof(b), 1u << 20, &d), FRAME_OK);
    assert_string_equal(frame_error_name(FRAME_ERR_TOO_BIG), "frame_too_big");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_and_layout),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
