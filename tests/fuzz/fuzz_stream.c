/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_stream.c — libFuzzer target for the whole receive path of an RPC connection: the input is
 * written as a byte stream into one end of a socketpair whose other end is served by a real
 * endpoint (rpc_accept_fd), then half-closed. Exercises frame decoding, the handshake state
 * machine (inputs may pipeline HELLO + AUTH + requests), request dispatch and every close
 * reason. Invariants: no crash or leak, the connection always ends, queues drain to zero.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/util.h"
#include "net/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void echo(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    (void)arg;
    uv_buf_t b = uv_buf_init((char *)req->payload, (unsigned)req->payload_len);
    struct rpc_msg m = {.body = req->body, .body_len = req->body_len, .iov = &b, .niov = 1};
    if (rpc_reply_send(reply, 0, NULL, &m, NULL, NULL) == KVMESH_EAGAIN)
        rpc_reply_drop(reply);
}

static void note(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    (void)reply;
    (void)req;
    (void)arg;
}

static void closed(void *arg)
{
    *(int *)arg = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 16))
        return 0;
    uv_loop_t loop;
    KVM_ASSERT(uv_loop_init(&loop) == 0);
    struct rpc_config c;
    rpc_config_init(&c);
    strcpy(c.local.deployment_id, "dep");
    strcpy(c.local.runtime_id, "srv");
    for (int i = 0; i < HS_PROTO_COUNT; i++) {
        c.local.proto[i].min = 1;
        c.local.proto[i].max = 2;
    }
    c.max_frame_bytes = 1u << 20;
    c.handshake_timeout_ms = 1000;
    rpc_endpoint *ep;
    KVM_ASSERT(rpc_endpoint_new(&loop, &c, &ep) == 0);
    rpc_register_handler(ep, 10, echo, NULL);
    rpc_register_notify_handler(ep, RPC_TYPE_ENV_MESSAGE, note, NULL);
    int sv[2];
    KVM_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    int big = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    KVM_ASSERT(rpc_accept_fd(ep, sv[0]) == 0);
    size_t off = 0;
    struct rpc_stats st;
    /* Write everything (running the loop so the server drains), then half-close. */
    for (int turns = 0; off < size && turns < 100000; turns++) {
        ssize_t n = send(sv[1], data + off, size - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0)
            off += (size_t)n;
        else
            uv_run(&loop, UV_RUN_NOWAIT);
        rpc_get_stats(ep, &st);
        if (st.conns_open == 0)
            break;
    }
    shutdown(sv[1], SHUT_WR);
    /* Drain what the server writes so it never blocks, until it closed the connection. */
    char sink[4096];
    for (int turns = 0; turns < 100000; turns++) {
        rpc_get_stats(ep, &st);
        if (st.conns_open == 0)
            break;
        while (recv(sv[1], sink, sizeof(sink), MSG_DONTWAIT) > 0)
            ;
        uv_run(&loop, UV_RUN_ONCE);
    }
    rpc_get_stats(ep, &st);
    KVM_ASSERT(st.conns_open == 0);
    KVM_ASSERT(st.queued_bytes == 0 && st.queued_msgs == 0);
    if (getenv("KVMESH_FUZZ_VERBOSE")) {
        for (int i = 0; i < RPC_CLOSE_COUNT; i++)
            if (st.close[i])
                fprintf(stderr, "close %s ", rpc_close_reason_name(i));
        fprintf(stderr, "handshakes %llu requests %llu notifies %llu replies %llu\n",
                (unsigned long long)st.handshakes_ok, (unsigned long long)st.requests_received,
                (unsigned long long)st.notifies_received, (unsigned long long)st.replies_sent);
    }
    int done = 0;
    rpc_endpoint_close(ep, closed, &done);
    while (!done)
        uv_run(&loop, UV_RUN_ONCE);
    close(sv[1]);
    KVM_ASSERT(uv_loop_close(&loop) == 0);
    return 0;
}
