/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c — the kvmesh command-line tool: dispatches to the verbs (object operations, cluster
 * view, configuration listing, the demo and the benchmark) and prints the top-level help.
 * Every verb parses its own options (cli.h) and has a complete --help.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} verbs[] = {
    {"put", cmd_put, "store a value under a key (from an argument, a file or stdin)"},
    {"get", cmd_get, "read a value to stdout or a file"},
    {"rm", cmd_rm, "remove a key"},
    {"stat", cmd_stat, "show whether a key exists, its size, checksum and replica count"},
    {"route", cmd_route, "show a key's route: fencing token, sequence and every replica"},
    {"members", cmd_members, "list the live runtimes of the deployment"},
    {"admin", cmd_admin,
     "operator view of the metadata: members, shards, drain/activate, tenants, quota, cleanup"},
    {"config", cmd_config, "list configuration fields, or print a config file with defaults"},
    {"demo", cmd_demo,
     "run a 3-runtime cluster in this process with a KV-cache workload, a kill and a restart"},
    {"bench", cmd_bench,
     "measure put/get/batch throughput and latency against Redis and memcached"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvmesh COMMAND [options] [arguments]\n"
            "\n"
            "kvmesh %s: the command-line tool of kvmesh, a masterless distributed object "
            "store\nfor LLM KV-cache blocks.\n\ncommands:\n",
            kvmesh_version());
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        fprintf(out, "  %-9s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(out, "\n"
                 "The object and cluster commands (put, get, rm, stat, route, members) join the\n"
                 "deployment named by --metadata URL and --deployment NAME as a client-only\n"
                 "runtime (memory_size 0) and leave when done. Every command takes --help.\n"
                 "\n"
                 "global options:\n"
                 "  --help, -h     show this help\n"
                 "  --version      print the version\n"
                 "\n"
                 "examples:\n"
                 "  kvmesh demo\n"
                 "  kvmesh put --metadata redis://127.0.0.1:6379 --deployment prod k1 hello\n"
                 "  kvmesh get --metadata redis://127.0.0.1:6379 --deployment prod k1\n"
                 "  kvmesh bench --quick --verify\n"
                 "\n"
                 "exit status: 0 success, 1 failure, 2 bad command line, 3 key not found.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *v = argv[1];
    if (strcmp(v, "--help") == 0 || strcmp(v, "-h") == 0 || strcmp(v, "help") == 0) {
        if (strcmp(v, "help") == 0 && argc > 2) {
            for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
                if (strcmp(argv[2], verbs[i].name) == 0) {
                    char *hargv[] = {argv[2], "--help", NULL};
                    return verbs[i].fn(2, hargv);
                }
            }
            fprintf(stderr, "kvmesh: unknown command \"%s\"; see kvmesh --help\n", argv[2]);
            return CLI_EXIT_USAGE;
        }
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(v, "--version") == 0) {
        printf("kvmesh %s\n", kvmesh_version());
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        if (strcmp(v, verbs[i].name) == 0)
            return verbs[i].fn(argc - 1, argv + 1);
    if (v[0] == '-')
        fprintf(stderr, "kvmesh: unknown option \"%s\" before the command; see kvmesh --help\n", v);
    else
        fprintf(stderr, "kvmesh: unknown command \"%s\"; see kvmesh --help\n", v);
    return CLI_EXIT_USAGE;
}
