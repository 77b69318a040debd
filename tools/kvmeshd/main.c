/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c — kvmeshd: one kvmesh runtime as a daemon.
 *
 * Configuration: defaults, then the YAML file (--config FILE), then the command-line overrides
 * in the order given (--set FIELD=VALUE, or --FIELD VALUE for every field of the table; dashes
 * and underscores are interchangeable). Cross-field checks run before anything starts. Logs go
 * to stderr, one line per event, with a UTC timestamp.
 *
 * Signals (handled synchronously by sigtimedwait in the main thread; every thread blocks them):
 *
 *   running --SIGTERM/SIGINT--> draining --drain done--> exit 0 (exit 1 if the drain failed)
 *   draining --SIGINT--> exit 130 immediately (no further drain; the lease expires)
 *   draining --SIGTERM--> logged, ignored (the drain is already bounded by drain_timeout_ms)
 *
 * The drain runs on its own thread (kvmesh_drain) so the main thread keeps answering signals.
 *
 * Hot upgrade (docs/operations.md "Hot upgrade"): with --upgrade-socket PATH the daemon listens
 * there for a standby successor (same runtime_id, started with --upgrade-from PATH), which
 * announces itself and waits. On SIGTERM with a successor connected the daemon hands its
 * memory over instead of draining (src/store/handoff.h):
 *
 *   running --successor HELLO ok--> running+standby --SIGTERM--> handing over
 *   handing over --CLOSED sent--> exit 0 (the successor serves the same memory)
 *   handing over --failed, runtime still open--> draining (as without a successor)
 *
 *   successor: connect + HELLO --> standby --state received--> taking over --open--> running
 *   standby --SIGTERM/SIGINT--> exit 0 (the predecessor keeps running)
 *
 * Admin HTTP (/healthz, /metrics, /stats, ...): served by the runtime itself on admin_listen
 * (kvmesh_open starts the obs module's server); /healthz turns not-ready while draining.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"

#define D_EXIT_OK       0
#define D_EXIT_FAIL     1
#define D_EXIT_USAGE    2
#define D_EXIT_SIGINT   130
#define D_MAX_OVERRIDES 128

static void dlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void dlog(const char *fmt, ...)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[32];
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03ldZ kvmeshd[%ld]: %s\n", ts, (long)(tv.tv_usec / 1000), (long)getpid(),
            msg);
    fflush(stderr);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvmeshd [--config FILE] [--set FIELD=VALUE]... [--FIELD VALUE]... [options]\n"
            "\n"
            "kvmeshd %s runs one kvmesh runtime as a daemon: it joins the deployment named by\n"
            "metadata_url and deployment, contributes memory_size bytes of memory, serves peers\n"
            "on listen, and (when admin_listen is set) HTTP /healthz, /metrics and a status\n"
            "page. Logs go to stderr.\n"
            "\n"
            "Configuration is applied in this order: built-in defaults, the YAML file given with\n"
            "--config (a strict subset: `field: value` lines; an error names the line and the\n"
            "field), then the command-line overrides in the order given. See\n"
            "docs/configuration.md and examples/kvmeshd.yaml.\n"
            "\n"
            "options:\n"
            "  --config FILE          read configuration fields from a YAML file\n"
            "  --set FIELD=VALUE      set a configuration field (repeatable)\n"
            "  --FIELD VALUE          the same for each field below (--memory-size 1GiB)\n"
            "  --check-config         validate the configuration, print it as YAML, and exit\n"
            "  --ready-file PATH      write \"ID EPOCH\\n\" to PATH once the runtime has joined\n"
            "  --upgrade-socket PATH  listen on the unix socket PATH for a hot-upgrade successor\n"
            "  --upgrade-from PATH    start as the standby successor of the runtime listening on\n"
            "                         PATH (same runtime_id): take over its memory on its SIGTERM\n"
            "  --help, -h             show this help\n"
            "  --version              print the version\n"
            "\n"
            "signals:\n"
            "  SIGTERM                graceful drain (replicas move to other runtimes, bounded\n"
            "                         by drain_timeout_ms), then exit 0 (1 if the drain failed);\n"
            "                         with a standby successor connected: hand the memory over\n"
            "  SIGINT                 the same; a second SIGINT exits immediately (status 130)\n"
            "\n"
            "configuration fields (flag, default, allowed values):\n",
            kvmesh_version());
    size_t n;
    const kvmesh_config_field_t *t = kvmesh_config_fields(&n);
    for (size_t i = 0; i < n; i++) {
        char flag[64], allowed[320];
        snprintf(flag, sizeof(flag), "--%s", t[i].name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_')
                *p = '-';
        kvmesh_tools_config_allowed(t[i].name, allowed, sizeof(allowed));
        fprintf(out, "  %-24s default \"%s\"; %s\n  %-24s %s\n", flag, t[i].default_value, allowed,
                "", t[i].help);
    }
    fprintf(out, "\nexit status: 0 after a clean drain, 1 on failure, 2 on a bad command line or "
                 "configuration,\n130 after a second SIGINT.\n");
}

/* ---- command line ------------------------------------------------------------------------------
 */

struct override {
    char field[64];
    const char *value;
    const char *origin; /* the flag as written, for messages */
};

struct dopts {
    const char *config;
    const char *ready_file;
    const char *upgrade_socket, *upgrade_from;
    bool check;
    size_t n;
    struct override ov[D_MAX_OVERRIDES];
};

static int add_override(struct dopts *o, const char *field, size_t flen, const char *value,
                        const char *origin)
{
    if (o->n >= D_MAX_OVERRIDES) {
        fprintf(stderr, "kvmeshd: at most %d configuration overrides\n", D_MAX_OVERRIDES);
        return -1;
    }
    struct override *v = &o->ov[o->n];
    if (flen >= sizeof(v->field)) {
        fprintf(stderr, "kvmeshd: %s: unknown configuration field; see kvmeshd --help\n", origin);
        return -1;
    }
    memcpy(v->field, field, flen);
    v->field[flen] = '\0';
    for (char *p = v->field; *p; p++)
        if (*p == '-')
            *p = '_';
    v->value = value;
    v->origin = origin;
    o->n++;
    return 0;
}

/* Returns -1 to continue, or an exit status. */
static int parse_args(int argc, char **argv, struct dopts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return D_EXIT_OK;
        }
        if (strcmp(a, "--version") == 0) {
            printf("kvmeshd %s\n", kvmesh_version());
            return D_EXIT_OK;
        }
        if (strcmp(a, "--check-config") == 0) {
            o->check = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "kvmeshd: unexpected argument \"%s\"; see kvmeshd --help\n", a);
            return D_EXIT_USAGE;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        const char *val = eq ? eq + 1 : NULL;
        bool is_config = nl == 6 && strncmp(name, "config", 6) == 0;
        bool is_set = nl == 3 && strncmp(name, "set", 3) == 0;
        bool is_ready = nl == 10 && strncmp(name, "ready-file", 10) == 0;
        bool is_usock = nl == 14 && strncmp(name, "upgrade-socket", 14) == 0;
        bool is_ufrom = nl == 12 && strncmp(name, "upgrade-from", 12) == 0;
        is_ready = is_ready || is_usock || is_ufrom; /* the same shape: a path */
        char field[64];
        bool is_field = false;
        if (!is_config && !is_set && !is_ready && nl < sizeof(field)) {
            memcpy(field, name, nl);
            field[nl] = '\0';
            for (char *p = field; *p; p++)
                if (*p == '-')
                    *p = '_';
            is_field = kvmesh_tools_config_has(field);
        }
        if (!is_config && !is_set && !is_ready && !is_field) {
            fprintf(stderr,
                    "kvmeshd: unknown option \"--%.*s\"; see kvmeshd --help for the "
                    "options and configuration fields\n",
                    (int)nl, name);
            return D_EXIT_USAGE;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kvmeshd: option --%.*s needs a value\n", (int)nl, name);
                return D_EXIT_USAGE;
            }
            val = argv[++i];
        }
        if (is_config) {
            o->config = val;
        } else if (is_usock) {
            o->upgrade_socket = val;
        } else if (is_ufrom) {
            o->upgrade_from = val;
        } else if (is_ready) {
            o->ready_file = val;
        } else if (is_set) {
            const char *e = strchr(val, '=');
            if (!e) {
                fprintf(stderr, "kvmeshd: --set \"%s\" is not FIELD=VALUE\n", val);
                return D_EXIT_USAGE;
            }
            if (add_override(o, val, (size_t)(e - val), e + 1, a) != 0)
                return D_EXIT_USAGE;
        } else if (add_override(o, field, strlen(field), val, a) != 0) {
            return D_EXIT_USAGE;
        }
    }
    return -1;
}

/* ---- drain thread ------------------------------------------------------------------------------
 */

struct drain_ctx {
    kvmesh_t *kv;
    atomic_int done; /* 0 running, 1 finished */
    int rc;
    char err[512];
};

static void *drain_main(void *arg)
{
    struct drain_ctx *d = arg;
    d->rc = kvmesh_drain(d->kv, 0);
    if (d->rc)
        snprintf(d->err, sizeof(d->err), "%s", kvmesh_last_error());
    atomic_store(&d->done, 1);
    return NULL;
}

static int write_ready_file(const char *path, const char *id, uint64_t epoch)
{
    char tmp[1024];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%s %" PRIu64 "\n", id, epoch);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

/* ---- hot upgrade ----------------------------------------------------------------------------
 */

static int unix_addr(const char *path, struct sockaddr_un *a)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(a->sun_path)) {
        dlog("upgrade socket path %s is longer than %zu bytes", path, sizeof(a->sun_path) - 1);
        return -1;
    }
    memcpy(a->sun_path, path, strlen(path));
    return 0;
}

/* A non-blocking listening socket at path (a stale socket file is replaced). */
static int upgrade_listen(const char *path)
{
    struct sockaddr_un a;
    if (unix_addr(path, &a) != 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    unlink(path);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4) != 0) {
        dlog("cannot listen on upgrade socket %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    chmod(path, 0600);
    return fd;
}

static int upgrade_connect(const char *path)
{
    struct sockaddr_un a;
    if (unix_addr(path, &a) != 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        dlog("cannot connect to the predecessor's upgrade socket %s: %s (is it running with "
             "--upgrade-socket %s?)",
             path, strerror(errno), path);
        close(fd);
        return -1;
    }
    return fd;
}

/* A standby successor: announce, wait for the predecessor's state (its operator's SIGTERM),
 * take over. Returns 0 with *kv open, or an exit status (>0) with *kv NULL. */
static int standby(const struct dopts *o, kvmesh_config_t *cfg, const sigset_t *set, kvmesh_t **kv)
{
    uint32_t timeout = (uint32_t)kvmesh_tools_config_uint(cfg, "drain_timeout_ms");
    int sock = upgrade_connect(o->upgrade_from);
    if (sock < 0)
        return D_EXIT_FAIL;
    if (kvmesh_upgrade_hello(cfg, sock, 5000) != 0) {
        dlog("cannot announce this successor: %s", kvmesh_last_error());
        close(sock);
        return D_EXIT_FAIL;
    }
    dlog("standby: successor of runtime %s on %s; waiting for the predecessor's SIGTERM",
         kvmesh_tools_config_str(cfg, "runtime_id"), o->upgrade_from);
    for (;;) {
        struct pollfd p = {.fd = sock, .events = POLLIN};
        int n = poll(&p, 1, 100);
        if (n > 0)
            break;
        struct timespec zero = {0, 0};
        int sig = sigtimedwait(set, NULL, &zero);
        if (sig == SIGTERM || sig == SIGINT) {
            dlog("standby stopped by signal %d; the predecessor keeps running", sig);
            close(sock);
            return D_EXIT_OK;
        }
    }
    uint64_t t0 = kvmesh_tools_now_ns();
    uint32_t nsegs = 0, nslots = 0;
    int e = kvmesh_upgrade_take_over(kv, cfg, sock, timeout, &nsegs, &nslots);
    close(sock);
    if (e) {
        dlog("take-over failed: %s: %s", kvmesh_strerror(e), kvmesh_last_error());
        return D_EXIT_FAIL;
    }
    dlog("took over: %" PRIu32 " segments and %" PRIu32 " slots from the predecessor in %" PRIu64
         " ms",
         nsegs, nslots, (kvmesh_tools_now_ns() - t0) / 1000000u);
    return 0;
}

int main(int argc, char **argv)
{
    struct dopts *o = calloc(1, sizeof(*o));
    kvmesh_config_t *cfg = kvmesh_config_new();
    kvmesh_t *kv = NULL;
    int rc = D_EXIT_FAIL;
    if (!o || !cfg) {
        fprintf(stderr, "kvmeshd: out of memory\n");
        goto out;
    }
    rc = parse_args(argc, argv, o);
    if (rc >= 0)
        goto out;
    rc = D_EXIT_USAGE;
    if (o->config && kvmesh_tools_config_load_file(cfg, o->config) != 0) {
        fprintf(stderr, "kvmeshd: %s\n", kvmesh_last_error());
        goto out;
    }
    for (size_t i = 0; i < o->n; i++) {
        if (kvmesh_config_set(cfg, o->ov[i].field, o->ov[i].value) != 0) {
            fprintf(stderr, "kvmeshd: %s: %s\n", o->ov[i].origin, kvmesh_last_error());
            goto out;
        }
    }
    if (kvmesh_tools_config_validate(cfg) != 0) {
        fprintf(stderr, "kvmeshd: %s\n", kvmesh_last_error());
        goto out;
    }
    if (o->check) {
        static char buf[1 << 16];
        size_t len = kvmesh_tools_config_dump_yaml(cfg, buf, sizeof(buf));
        fwrite(buf, 1, len < sizeof(buf) ? len : sizeof(buf) - 1, stdout);
        fprintf(stderr, "kvmeshd: configuration OK\n");
        rc = D_EXIT_OK;
        goto out;
    }

    /* Every thread the runtime starts inherits this mask: signals reach only sigtimedwait. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char mem[32];
    kvmesh_tools_format_size(kvmesh_tools_config_uint(cfg, "memory_size"), mem, sizeof(mem));
    const char *deployment = kvmesh_tools_config_str(cfg, "deployment");
    const char *metadata_url = kvmesh_tools_config_str(cfg, "metadata_url");
    const char *admin_listen = kvmesh_tools_config_str(cfg, "admin_listen");
    dlog("starting: deployment %s, metadata %s, memory %s, listen %s, transport %s", deployment,
         metadata_url, mem, kvmesh_tools_config_str(cfg, "listen"),
         kvmesh_tools_config_str(cfg, "transport"));
    if (o->upgrade_from) {
        rc = standby(o, cfg, &set, &kv);
        if (rc > 0 || !kv)
            goto out;
    }
    int e = kv ? 0 : kvmesh_open(&kv, cfg);
    if (e) {
        const char *d = kvmesh_last_error();
        dlog("cannot join deployment %s at %s: %s%s%s", deployment, metadata_url,
             kvmesh_strerror(e), d[0] ? ": " : "", d);
        rc = D_EXIT_FAIL;
        goto out;
    }
    char id[KVMESH_ID_HEX_LEN + 1] = "";
    uint64_t epoch = 0;
    kvmesh_self(kv, id, &epoch);
    dlog("ready: runtime %s epoch %" PRIu64 " joined deployment %s%s%s", id, epoch, deployment,
         admin_listen[0] ? ", admin http on " : "", admin_listen);
    if (o->ready_file && write_ready_file(o->ready_file, id, epoch) != 0)
        dlog("warning: cannot write ready file %s: %s", o->ready_file, strerror(errno));

    int lsock = o->upgrade_socket ? upgrade_listen(o->upgrade_socket) : -1, succ = -1;
    if (o->upgrade_socket && lsock < 0) {
        rc = D_EXIT_FAIL;
        kvmesh_close(kv);
        kv = NULL;
        goto out;
    }
    bool handed_over = false;
    struct drain_ctx dc = {.kv = kv};
    pthread_t drain_thread;
    bool draining = false;
    for (;;) {
        struct timespec tick = {.tv_sec = 0, .tv_nsec = 100000000L};
        siginfo_t si;
        int sig = sigtimedwait(&set, &si, &tick);
        if (lsock >= 0 && succ < 0 && !draining) {
            int c = accept4(lsock, NULL, NULL, SOCK_CLOEXEC);
            struct ucred cr;
            socklen_t crl = sizeof(cr);
            if (c >= 0 && (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &crl) != 0 ||
                           (cr.uid != getuid() && cr.uid != 0))) {
                /* the memory goes only to a process of this daemon's user (or root) */
                dlog("upgrade connection refused: the peer is not this daemon's user");
                close(c);
                c = -1;
            }
            if (c >= 0 && kvmesh_upgrade_accept(kv, c, 2000) == 0) {
                dlog("standby successor connected on %s; SIGTERM hands the memory over",
                     o->upgrade_socket);
                succ = c;
            } else if (c >= 0) {
                dlog("upgrade connection refused: %s", kvmesh_last_error());
                close(c);
            }
        } else if (succ >= 0) {
            struct pollfd p = {.fd = succ, .events = POLLIN};
            if (poll(&p, 1, 0) > 0) { /* a standby sends nothing: it left */
                dlog("standby successor disconnected");
                close(succ);
                succ = -1;
            }
        }
        if (sig == SIGTERM && succ >= 0 && !draining) {
            dlog("SIGTERM: handing the memory over to the standby successor");
            uint64_t t0 = kvmesh_tools_now_ns();
            int hr = kvmesh_upgrade_hand_over(
                &kv, succ, (uint32_t)kvmesh_tools_config_uint(cfg, "drain_timeout_ms"));
            close(succ);
            succ = -1;
            if (!kv) {
                if (hr == 0)
                    dlog("handed over in %" PRIu64 " ms; exiting",
                         (kvmesh_tools_now_ns() - t0) / 1000000u);
                else
                    dlog("hand-over failed after the runtime closed: %s", kvmesh_last_error());
                rc = hr == 0 ? D_EXIT_OK : D_EXIT_FAIL;
                handed_over = true;
                break;
            }
            dlog("hand-over failed: %s: %s; draining instead", kvmesh_strerror(hr),
                 kvmesh_last_error());
        }
        if (draining && atomic_load(&dc.done)) {
            pthread_join(drain_thread, NULL);
            if (dc.rc == 0) {
                dlog("drained: replicas moved, left the deployment; exiting");
                rc = D_EXIT_OK;
            } else {
                dlog("drain failed: %s: %s; exiting", kvmesh_strerror(dc.rc), dc.err);
                rc = D_EXIT_FAIL;
            }
            break;
        }
        if (sig < 0)
            continue; /* timeout or EINTR */
        if (sig == SIGHUP) {
            dlog("SIGHUP ignored (configuration is read at start only)");
            continue;
        }
        if (!draining) {
            dlog("%s: draining (bounded by drain_timeout_ms %" PRIu32 ")%s",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT",
                 (uint32_t)kvmesh_tools_config_uint(cfg, "drain_timeout_ms"),
                 sig == SIGINT ? "; SIGINT again to exit immediately" : "");
            if (pthread_create(&drain_thread, NULL, drain_main, &dc) != 0) {
                dlog("cannot start the drain thread; closing without a drain");
                rc = D_EXIT_FAIL;
                break;
            }
            draining = true;
        } else if (sig == SIGINT) {
            dlog("second SIGINT: exiting immediately without finishing the drain");
            _exit(D_EXIT_SIGINT);
        } else {
            dlog("SIGTERM during drain ignored; SIGINT exits immediately");
        }
    }
    if (succ >= 0)
        close(succ);
    if (lsock >= 0) {
        close(lsock);
        if (!handed_over) /* after a hand-over the path may be the successor's socket already */
            unlink(o->upgrade_socket);
    }
    kvmesh_close(kv);
    kv = NULL;
out:
    kvmesh_config_free(cfg);
    free(o);
    return rc;
}
