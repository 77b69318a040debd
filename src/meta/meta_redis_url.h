/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_redis_url.h — parser for the Redis metadata backend's URLs.
 *
 * Grammar (RFC 3986 subset, scheme lower case):
 *   redis://[[user]:password@]host[:port][/db][?ns=NAME]
 *   host  = DNS name or IPv4 literal, or an IPv6 literal in brackets ("[::1]")
 *   port  = 1..65535 (default 6379)
 *   db    = 0..META_REDIS_DB_MAX (default 0; "/" alone is db 0)
 *   user, password: percent-encoding (%XX) is decoded; "user:pass@" sends AUTH user pass (ACL),
 *                   ":pass@" sends AUTH pass (the default user); "user@" without a password is
 *                   refused (Redis AUTH needs a password).
 *   ns    = the namespace of this deployment inside Redis ([A-Za-z0-9_.-], 1..META_REDIS_NS_MAX
 *           bytes; default META_REDIS_NS_DEFAULT): every key the backend writes starts with
 *           "kvm:{NS}:".
 *   rediss://… is refused with KVMESH_EURL: this build's hiredis (0.14) has no TLS.
 *
 * Input is external (configuration, command lines): every malformed URL is rejected with
 * KVMESH_EURL and a message (kvmesh_last_error) saying what is wrong; never a crash. The parser
 * allocates nothing; the result is a plain value.
 */
#ifndef KVMESH_META_META_REDIS_URL_H
#define KVMESH_META_META_REDIS_URL_H

#include <stdbool.h>
#include <stdint.h>

#define META_REDIS_URL_MAX      2048 /* bytes of a whole URL */
#define META_REDIS_HOST_MAX     255  /* bytes of a host name (without brackets) */
#define META_REDIS_CRED_MAX     255  /* bytes of a decoded user name or password */
#define META_REDIS_NS_MAX       64
#define META_REDIS_DB_MAX       1000000 /* Redis's "databases" setting bounds it further */
#define META_REDIS_PORT_DEFAULT 6379
#define META_REDIS_NS_DEFAULT   "kvmesh"

typedef struct meta_redis_url {
    char host[META_REDIS_HOST_MAX + 1]; /* without IPv6 brackets */
    uint16_t port;
    int db;
    bool has_user; /* user given (ACL AUTH user pass) */
    bool has_pass; /* password given (AUTH) */
    char user[META_REDIS_CRED_MAX + 1];
    char pass[META_REDIS_CRED_MAX + 1];
    char ns[META_REDIS_NS_MAX + 1];
} meta_redis_url_t;

/* Parses url into *out (fully overwritten). Returns 0 or KVMESH_EURL with a detailed message. */
int meta_redis_url_parse(const char *url, meta_redis_url_t *out);

#endif
