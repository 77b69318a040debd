# SPDX-License-Identifier: Apache-2.0
"""The wheel: its file list shares nothing with a Mooncake wheel's (mooncake/...), holds the
native module, and (under scripts/python-test.sh) the package under test is the installed one."""
import glob
import os
import subprocess
import sys
import zipfile

import kvmesh
from conftest import BUILD, REPO


def _wheel(tmp_path):
    w = os.environ.get("KVMESH_WHEEL")
    if w:
        return w
    out = tmp_path / "dist"
    env = dict(os.environ, KVMESH_BUILD_DIR=BUILD)
    subprocess.run(["/usr/bin/python3", "-m", "build", "--no-isolation", "--wheel", "--outdir",
                    str(out)], cwd=os.path.join(REPO, "python"), env=env, check=True,
                   capture_output=True)
    return glob.glob(str(out / "kvmesh-*.whl"))[0]


def test_wheel_file_list(tmp_path):
    names = zipfile.ZipFile(_wheel(tmp_path)).namelist()
    assert not [n for n in names if n.split("/")[0].lower().startswith("mooncake")]
    tops = {n.split("/")[0] for n in names}
    assert tops == {"kvmesh", "kvmesh-0.1.0.dist-info"}, tops
    assert any(n.startswith("kvmesh/_native.cpython-") and n.endswith(".so") for n in names)
    for mod in ("__init__.py", "_errors.py", "store.py", "mooncake.py", "tensor.py"):
        assert f"kvmesh/{mod}" in names


def test_installed_package_is_tested():
    native = kvmesh._native.__file__
    if os.environ.get("KVMESH_EXPECT_INSTALLED") == "1":
        assert not native.startswith(os.path.join(REPO, "python")), native
        assert native.startswith(sys.prefix), (native, sys.prefix)
    # only the module init function is exported by the native module (libkvmesh stays local)
    out = subprocess.run(["nm", "-D", "--defined-only", native], capture_output=True,
                         text=True, check=True).stdout
    exported = [ln.split()[-1] for ln in out.splitlines() if " T " in ln]
    assert exported == ["PyInit__native"], exported
