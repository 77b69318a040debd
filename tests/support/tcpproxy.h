/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcpproxy — a loopback TCP proxy for fault-injection tests: it listens on 127.0.0.1 (a free
 * port), connects each accepted client to one upstream address, and forwards both directions.
 * While held (tcpproxy_hold(p, true)) the requests still go upstream but the replies are kept
 * back (buffered, in order, up to TCPPROXY_HOLD_MAX bytes per connection: a connection beyond
 * that is cut); tcpproxy_hold(p, false) delivers what was kept, in order, to the clients still
 * connected. This makes "the update was applied but its caller timed out" reproducible against a
 * real server (Redis, etcd): a call made while held reaches the server and its answer arrives
 * after the caller's deadline, or never (the caller closed the connection).
 *
 * One thread per proxy (poll over at most TCPPROXY_MAX_CONNS connection pairs). Ownership: the
 * caller owns the proxy from tcpproxy_start until tcpproxy_stop, which joins the thread and
 * closes every socket. tcpproxy_hold and tcpproxy_port are safe from any thread.
 */
#ifndef KVMESH_TEST_TCPPROXY_H
#define KVMESH_TEST_TCPPROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TCPPROXY_MAX_CONNS 64
#define TCPPROXY_HOLD_MAX  (4u << 20)

typedef struct tcpproxy tcpproxy_t;

/* Listens on 127.0.0.1:<free port>, forwarding to 127.0.0.1:up_port. 0 or -1 (errno). */
int tcpproxy_start(tcpproxy_t **out, uint16_t up_port);
uint16_t tcpproxy_port(const tcpproxy_t *p);
void tcpproxy_hold(tcpproxy_t *p, bool hold);
/* Arms a trigger: the nth request chunk (client -> upstream) from now that contains the bytes
 * pat[0..len) turns the hold on before it is forwarded, so that its reply, and every later one,
 * is kept back (until tcpproxy_hold(p, false)). len <= 256. A chunk is what one read returned:
 * a pattern split across two reads is not seen (hiredis and curl write a request whole). */
void tcpproxy_hold_on(tcpproxy_t *p, const void *pat, size_t len, unsigned nth);
/* Request chunks that matched the armed pattern so far. */
unsigned tcpproxy_matches(const tcpproxy_t *p);
/* Replies kept back so far (bytes, all connections, since the proxy started). */
uint64_t tcpproxy_held_bytes(const tcpproxy_t *p);
void tcpproxy_stop(tcpproxy_t *p);

#endif
