/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h — shared pieces of the kvmesh command-line tool: a small table-driven option parser
 * with generated help, the options every verb shares (metadata URL, deployment, tenant, config
 * overrides), opening a client-only runtime, a live progress line, timing and statistics.
 *
 * Ownership: option tables are static; parsed strings point into argv (valid for the process).
 * Threading: progress lines and statistics are single-threaded helpers.
 */
#ifndef KVMESH_TOOLS_CLI_H
#define KVMESH_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvmesh.h"

#define CLI_MAX_SETS 64 /* --set FIELD=VALUE occurrences per command line */
#define CLI_MAX_POS  8  /* positional arguments per verb */

/* Exit codes. */
#define CLI_EXIT_OK     0
#define CLI_EXIT_FAIL   1 /* the operation failed (message on stderr) */
#define CLI_EXIT_USAGE  2 /* bad command line */
#define CLI_EXIT_ENOENT 3 /* get/stat/route: the object does not exist */

enum cli_opt_kind {
    CLI_FLAG, /* bool, no argument */
    CLI_STR,  /* const char * */
    CLI_U64,  /* uint64_t, decimal */
    CLI_SIZE, /* uint64_t, size with unit (256KiB) */
    CLI_SET,  /* FIELD=VALUE, appended to struct cli_sets */
    CLI_CSV,  /* const char *, comma separated list validated by the verb */
};

typedef struct cli_opt {
    const char *name; /* long option without "--" */
    const char *arg;  /* placeholder in help (NULL for flags) */
    enum cli_opt_kind kind;
    void *dst;
    const char *help;
} cli_opt_t;

struct cli_sets {
    size_t n;
    const char *items[CLI_MAX_SETS]; /* "field=value" */
};

/* Options shared by the verbs that join a deployment. */
struct cli_common {
    const char *metadata;   /* NULL = config/default */
    const char *deployment; /* NULL = config/default */
    const char *tenant;     /* NULL = config default_tenant */
    const char *domain;     /* NULL = none */
    const char *config;     /* YAML file */
    uint64_t timeout_ms;    /* 0 = config default */
    struct cli_sets sets;
    bool help;
};

/* Appends the common options (metadata, deployment, tenant, domain, config, set, timeout-ms,
 * help) to opts[*n..]; returns the new count. cap bounds the table. */
size_t cli_common_opts(struct cli_common *c, cli_opt_t *opts, size_t n, size_t cap);

/*
 * Parses argv[0..argc) (argv[0] is the verb) against opts. Positionals go to pos (at most
 * maxpos). "--" ends options. Prints a clear error naming the option and the verb and
 * returns CLI_EXIT_USAGE on an unknown option, a missing or malformed argument, or too many
 * positionals; 0 otherwise.
 */
int cli_parse(const char *verb, const cli_opt_t *opts, size_t nopts, int argc, char **argv,
              const char **pos, size_t maxpos, size_t *npos);
/* Prints "usage: kvmesh VERB SYNOPSIS", the description, and every option with its help. */
void cli_usage(FILE *out, const char *verb, const char *synopsis, const char *desc,
               const cli_opt_t *opts, size_t nopts);

/* Builds a config: defaults, then the YAML file, then --metadata/--deployment/--timeout-ms,
 * then each --set in order. *cfg is caller-allocated (kvmesh_config_new). 0 or an error
 * already printed to stderr. */
int cli_build_config(const struct cli_common *c, kvmesh_config_t *cfg, const char *verb);
/* Opens a client-only runtime (memory_size 0) of the deployment. Prints the error (with the
 * metadata URL) and returns non-zero on failure. */
int cli_open_client(const struct cli_common *c, const char *verb, kvmesh_t **out,
                    kvmesh_config_t **cfg_out);
/* kvmesh_open for the demo and the bench: when this build lacks the configured embedded_wrh
 * route mode (KVMESH_ENOTSUP naming route_mode), says so once on stderr, switches cfg to
 * metadata_only and retries. Returns kvmesh_open's result. */
int cli_open_runtime(kvmesh_t **out, kvmesh_config_t *cfg, const char *verb);
/* Applies one "field=value" to cfg; prints and returns non-zero on error. */
int cli_apply_set(kvmesh_config_t *cfg, const char *item, const char *verb);

/* Prints "kvmesh VERB: WHAT: <strerror>: <last_error>" to stderr. */
void cli_report(const char *verb, const char *what, int rc);

/* Latency samples (bounded: CLI_LAT_MAX samples; past that, reservoir sampling). */
#define CLI_LAT_MAX 200000
typedef struct cli_lat {
    uint64_t *ns;
    size_t n, seen;
    uint64_t rng;
} cli_lat_t;
void cli_lat_init(cli_lat_t *l);
void cli_lat_add(cli_lat_t *l, uint64_t ns);
/* Percentile (0..100) in nanoseconds; sorts in place. 0 when empty. */
uint64_t cli_lat_pct(cli_lat_t *l, double pct);
void cli_lat_free(cli_lat_t *l);

/* A live progress line: on a TTY a \r-updated line, otherwise one line per interval. */
typedef struct cli_progress {
    bool tty;
    uint64_t last_ns, interval_ns;
    size_t last_len;
    FILE *out;
} cli_progress_t;
void cli_progress_init(cli_progress_t *p, FILE *out, uint64_t non_tty_interval_ms);
/* Updates the line (rate limited to 10/s on a TTY; force ignores the limit). */
void cli_progress(cli_progress_t *p, bool force, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Ends the line (a newline on a TTY when something was drawn). */
void cli_progress_done(cli_progress_t *p);

/* Deterministic content for verification: fills buf with bytes derived from seed. */
void cli_fill(void *buf, size_t len, uint64_t seed);
/* Returns the offset of the first byte that differs from cli_fill(seed), or len when equal. */
size_t cli_check(const void *buf, size_t len, uint64_t seed);
uint64_t cli_hash64(const void *p, size_t n);

/* ---- verbs --------------------------------------------------------------------------------- */
int cmd_put(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_route(int argc, char **argv);
int cmd_members(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_demo_cold(int argc, char **argv); /* kvmesh demo --cold (demo_cold.c) */
int cmd_bench(int argc, char **argv);
int cmd_admin(int argc, char **argv);
struct kvmesh_admin;
/* s as a JSON string (quotes and escapes) on stdout (admin.c). */
void admin_json_str(const char *s);
/* kvmesh admin policy set (admin_policy.c): the exit status; a is the open admin handle. */
int admin_policy_set(struct kvmesh_admin *a, const kvmesh_config_t *cfg, const char *tenant,
                     const char *const *assign, size_t n, bool apply, bool json);
/* kvmesh admin quota TENANT object KEY (admin_object.c): the exit status. */
int admin_quota_object(struct kvmesh_admin *a, const kvmesh_config_t *cfg, const char *tenant,
                       const char *domain, const char *key, bool json);
/* kvmesh admin devices drain|retire DEVICE (admin_device.c): the exit status. */
int admin_device_action(struct kvmesh_admin *a, const kvmesh_config_t *cfg, const char *action,
                        const char *id, bool json);

#endif
