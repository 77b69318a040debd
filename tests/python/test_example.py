# SPDX-License-Identifier: Apache-2.0
"""examples/python/paged_kv_cache.py runs and verifies its reloaded blocks: in one process
(memory://) and as a client of the 3-kvmeshd Redis cluster."""
import os
import subprocess
import sys

import kvmesh
from conftest import REPO

EXAMPLE = os.path.join(REPO, "examples", "python", "paged_kv_cache.py")


def run(*args):
    # the kvmesh under test (installed, or python/ of the tree) for the child too
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(kvmesh.__file__)))
    p = subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True,
                       timeout=180, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "verified:" in p.stdout
    return p.stdout


def test_example_in_process():
    run()


def test_example_on_cluster(cluster):
    run("--metadata", cluster.url, "--deployment", cluster.deployment, "--segment", "0",
        "--set", "lease_ttl_ms=1000", "--set", "segment_size=32MiB",
        "--set", "max_object_size=32MiB", "--set", "request_timeout_ms=20000")
