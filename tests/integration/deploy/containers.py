"""podman for the deployment tests: local Debian base images (no registry is needed), the project's
image built by ``make image`` from them, and containers removed by name afterwards."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[3]
CONTAINERS_CONF = Path(__file__).with_name("containers.conf")
RUN_BASE = "localhost/streamgate-run-base:bookworm"
BUILD_BASE = "localhost/streamgate-build-base:bookworm"
# Redis and etcd for the chart's own datastore pods, from Debian's packages (no registry here)
DATASTORES = "localhost/streamgate-datastores:bookworm"
# what each image adds to Debian's minbase: the runtime's Python; the build's compiler and headers;
# the datastores' servers and their command-line tools
BASE_PACKAGES = {
    RUN_BASE: ["python3", "ca-certificates"],
    BUILD_BASE: ["python3", "python3-venv", "python3-dev", "gcc", "libc6-dev", "ca-certificates"],
    DATASTORES: ["redis-server", "redis-tools", "etcd-server", "etcd-client"],
}
# documentation and translations are left out of the bases
SLIM = ["--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-exclude=/usr/share/info/*"]
MIRROR = "http://deb.debian.org/debian"


def load_helper(relative: str) -> ModuleType:
    """A helper module of another test folder by its path from the repository's root (test folders
    are not packages), imported once under its file name."""
    path = ROOT / relative
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def podman_env() -> dict[str, str]:
    """The environment podman runs in: the project's containers.conf (runc, ulimits)."""
    return os.environ | {"CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(*args: str, timeout_s: float = 120, check: bool = True
           ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout_s,
                          env=podman_env(), check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({done.returncode}):\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def require_podman(report_missing: Callable[[str], NoReturn]) -> None:
    """podman and mmdebstrap (``make deps``): skip locally, fail in CI."""
    lacking = [tool for tool in ("podman", "mmdebstrap") if shutil.which(tool) is None]
    if lacking:
        report_missing(f"{lacking} missing: `make deps` installs them")


def image_exists(name: str) -> bool:
    return podman("image", "exists", name, check=False).returncode == 0


def build_base(name: str) -> None:
    """Debian bookworm minbase with the base's packages, imported as ``name``."""
    with tempfile.TemporaryDirectory(prefix="sg-base-") as folder:
        tarball = Path(folder) / "base.tar"
        done = subprocess.run(
            ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES[name]),
             *SLIM, "bookworm", str(tarball), MIRROR],
            capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"mmdebstrap failed:\n{done.stderr[-3000:]}"
        podman("import", "--quiet", str(tarball), name, timeout_s=300)


def ensure_bases(*names: str) -> None:
    """The named Debian images (default: both bases), built side by side when missing (kept in
    podman's store afterwards)."""
    missing = [name for name in names or (RUN_BASE, BUILD_BASE) if not image_exists(name)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(build_base, missing))


def build_image(tag: str) -> None:
    """``make image`` from the local bases."""
    done = subprocess.run(
        ["make", "--no-print-directory", "image", f"IMAGE={tag}", f"BASE_IMAGE={RUN_BASE}",
         f"BUILD_IMAGE={BUILD_BASE}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=podman_env(), check=False)
    assert done.returncode == 0, f"make image failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    # the build stage's layers are not needed again
    podman("image", "prune", "--force", check=False)
