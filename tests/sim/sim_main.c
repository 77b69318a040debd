/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_main.c — kvmesh-sim: runs simulator scenarios over seed ranges.
 *
 *   kvmesh-sim --list
 *   kvmesh-sim --scenario NAME --seeds A..B [--soak N] [--variant V] [--verbose] [--hash]
 *   kvmesh-sim --scenario NAME --seed N ...
 *   kvmesh-sim --all --seeds A..B ...
 *   kvmesh-sim ... --max-failures N     stop after N failing seeds
 *   kvmesh-sim ... --expect-failure     exit 0 only if at least one seed failed
 *
 * Prints every failing seed with the command that replays it, and ends with the line
 * "N passed, M failed"; exits 1 when M > 0 (or, with --expect-failure, when M == 0). An abort
 * inside a run (an assertion) prints the replay command of the seed that was running.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim.h"

#define SIM_MAX_SEEDS_PER_RUN 100000000ull

static char replay_line[1024];

static void on_abort(int sig)
{
    /* async-signal-safe: write the preformatted line, then die with the same signal */
    static const char hdr[] = "\nkvmesh-sim: aborted; replay with:\n  ";
    ssize_t r1 = write(2, hdr, sizeof(hdr) - 1);
    ssize_t r2 = write(2, replay_line, strlen(replay_line));
    ssize_t r3 = write(2, "\n", 1);
    (void)r1;
    (void)r2;
    (void)r3;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s --list\n"
            "       %s (--scenario NAME | --all) [--seed N | --seeds A..B] [--soak N]\n"
            "          [--variant V] [--verbose] [--hash] [--max-failures N] [--expect-failure]\n"
            "  --seeds A..B      inclusive seed range (default 1..100)\n"
            "  --soak N          longer runs: multiply each scenario's workload by N\n"
            "  --variant V       scenario-defined test-only switch (e.g. a broken protocol)\n"
            "  --verbose         print the event trace and scenario logs\n"
            "  --hash            print each seed's trace hash\n"
            "  --max-failures N  stop after N failing seeds\n"
            "  --expect-failure  succeed only if some seed fails (proves a checker can fail)\n",
            argv0, argv0);
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s)
        return -1;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_range(const char *s, uint64_t *a, uint64_t *b)
{
    const char *dots = strstr(s, "..");
    if (!dots)
        return -1;
    char left[64];
    size_t n = (size_t)(dots - s);
    if (n == 0 || n >= sizeof(left))
        return -1;
    memcpy(left, s, n);
    left[n] = '\0';
    if (parse_u64(left, a) != 0 || parse_u64(dots + 2, b) != 0 || *a > *b)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *scenario = NULL, *variant = NULL;
    bool all = false, list = false, verbose = false, print_hash = false, expect_failure = false;
    uint64_t seed_a = 1, seed_b = 100, soak = 1, max_failures = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--list") == 0) {
            list = true;
        } else if (strcmp(a, "--all") == 0) {
            all = true;
        } else if (strcmp(a, "--verbose") == 0) {
            verbose = true;
        } else if (strcmp(a, "--hash") == 0) {
            print_hash = true;
        } else if (strcmp(a, "--expect-failure") == 0) {
            expect_failure = true;
        } else if (strcmp(a, "--scenario") == 0 && v) {
            scenario = v;
            i++;
        } else if (strcmp(a, "--variant") == 0 && v) {
            variant = v;
            i++;
        } else if (strcmp(a, "--seed") == 0 && v) {
            if (parse_u64(v, &seed_a) != 0) {
                fprintf(stderr, "kvmesh-sim: bad --seed '%s'; expected a number\n", v);
                return 2;
            }
            seed_b = seed_a;
            i++;
        } else if (strcmp(a, "--seeds") == 0 && v) {
            if (parse_range(v, &seed_a, &seed_b) != 0) {
                fprintf(stderr, "kvmesh-sim: bad --seeds '%s'; expected A..B with A <= B\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--soak") == 0 && v) {
            if (parse_u64(v, &soak) != 0 || soak == 0 || soak > 1000) {
                fprintf(stderr, "kvmesh-sim: bad --soak '%s'; expected 1..1000\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--max-failures") == 0 && v) {
            if (parse_u64(v, &max_failures) != 0 || max_failures == 0) {
                fprintf(stderr, "kvmesh-sim: bad --max-failures '%s'; expected N >= 1\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, argv[0]);
            return 0;
        } else {
            fprintf(stderr, "kvmesh-sim: unknown or incomplete argument '%s'\n", a);
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (list) {
        for (size_t i = 0; sim_scenarios[i]; i++)
            printf("%s\n", sim_scenarios[i]->name);
        return 0;
    }
    if (!all && !scenario) {
        fprintf(stderr, "kvmesh-sim: give --scenario NAME, --all or --list\n");
        usage(stderr, argv[0]);
        return 2;
    }
    if (seed_b - seed_a >= SIM_MAX_SEEDS_PER_RUN) {
        fprintf(stderr, "kvmesh-sim: seed range too large (max %llu seeds)\n",
                (unsigned long long)SIM_MAX_SEEDS_PER_RUN);
        return 2;
    }
    const sim_scenario_t *one = NULL;
    if (scenario) {
        one = sim_scenario_find(scenario);
        if (!one) {
            fprintf(stderr, "kvmesh-sim: no scenario '%s'; --list shows them\n", scenario);
            return 2;
        }
    }
    signal(SIGABRT, on_abort);
    setvbuf(stdout, NULL, _IOLBF, 0);

    uint64_t passed = 0, failed = 0;
    bool stop = false;
    for (size_t si = 0; !stop && (all ? sim_scenarios[si] != NULL : si == 0); si++) {
        const sim_scenario_t *sc = all ? sim_scenarios[si] : one;
        for (uint64_t seed = seed_a;; seed++) {
            char extra[256] = "";
            int l = 0;
            if (variant)
                l = snprintf(extra, sizeof(extra), " --variant %s", variant);
            if (soak > 1 && l >= 0 && (size_t)l < sizeof(extra))
                snprintf(extra + l, sizeof(extra) - (size_t)l, " --soak %" PRIu64, soak);
            snprintf(replay_line, sizeof(replay_line), "%s --scenario %s --seed %" PRIu64 "%s",
                     argv[0], sc->name, seed, extra);
            sim_run_opts_t ro = {.seed = seed,
                                 .soak = (uint32_t)soak,
                                 .verbose = verbose,
                                 .variant = variant,
                                 .out = stdout};
            sim_result_t res;
            memset(&res, 0, sizeof(res));
            int rc = sc->run(&ro, &res);
            if (print_hash)
                printf("%s seed %" PRIu64 " hash %016" PRIx64 " steps %" PRIu64 "\n", sc->name,
                       seed, res.trace_hash, res.steps);
            if (rc != 0 || res.failed) {
                failed++;
                printf("FAIL %s seed %" PRIu64 ": %s\n  replay: %s --verbose\n", sc->name, seed,
                       res.msg[0] ? res.msg : "(scenario reported failure)", replay_line);
            } else {
                passed++;
            }
            if (verbose)
                printf("%s seed %" PRIu64 ": %s; %" PRIu64 " steps, %.3f ms virtual, msgs sent "
                       "%" PRIu64 " delivered %" PRIu64 " dropped %" PRIu64 " duplicated %" PRIu64
                       ", crashes %" PRIu64 ", trace hash %016" PRIx64 "\n",
                       sc->name, seed, res.failed ? "FAILED" : "passed", res.steps,
                       (double)res.end_ns / 1e6, res.msgs_sent, res.msgs_delivered,
                       res.msgs_dropped, res.msgs_duplicated, res.crashes, res.trace_hash);
            if (max_failures && failed >= max_failures) {
                stop = true;
                break;
            }
            if (seed == seed_b)
                break;
        }
    }
    printf("%" PRIu64 " passed, %" PRIu64 " failed\n", passed, failed);
    if (expect_failure) {
        if (failed == 0)
            fprintf(stderr, "kvmesh-sim: --expect-failure: no seed failed; the checker did not "
                            "catch the variant\n");
        return failed > 0 ? 0 : 1;
    }
    return failed > 0 ? 1 : 0;
}
