"""A local server's own virtual environment, keyed by a hash of what it holds, made once under a lock.

A server whose dependencies conflict with the load generator's (KServe: numpy 2, fastapi,
kubernetes ...) gets a venv of its own under ``$INFERLOAD_VENVS/<name>-<hash>`` (default
``$INFERLOAD_HOME/venvs``, i.e. ``./.inferload/venvs``; the Makefile keeps them out of the clone). The hash
covers the pinned requirements, the Python version and the main environment's site-packages path,
so a CI cache of ``$INFERLOAD_HOME/venvs`` keyed by the same text is reused until one changes.
torch is not installed a second time: the packages named in ``links`` (torch, torchgen,
functorch) are symlinked from the main environment into ``<venv>/linked`` and a ``.pth`` file
puts that folder on the venv's path, so the venv sees the main torch and nothing else of it.
A marker file says the install finished; a half-made venv (an interrupted install) is redone.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from inferload.errors import ServerError
from inferload.paths import home_dir

VENVS_ENV = "INFERLOAD_VENVS"
PTH_NAME = "zz_inferload_linked.pth"
DONE_MARKER = ".inferload-complete"
INSTALL_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class VenvSpec:
    """What one server's venv holds: pinned requirements, and the main environment's packages linked in."""

    name: str
    requirements: tuple[str, ...]
    links: tuple[str, ...] = ("torch", "torchgen", "functorch")

    def key_text(self) -> str:
        """The text the venv's hash is taken of (also what a CI cache key can hash)."""
        return "\n".join([*self.requirements, *self.links, sys.version.split()[0], sysconfig.get_paths()["purelib"]])

    def key(self) -> str:
        return hashlib.sha256(self.key_text().encode()).hexdigest()[:12]


def venvs_root() -> Path:
    """``$INFERLOAD_VENVS``, else ``$INFERLOAD_HOME/venvs`` (``./.inferload/venvs``)."""
    return Path(os.environ[VENVS_ENV]).absolute() if os.environ.get(VENVS_ENV) else home_dir() / "venvs"


def venv_dir(spec: VenvSpec, root: Path | None = None) -> Path:
    return (root or venvs_root()) / f"{spec.name}-{spec.key()}"


def _run(step: list[str], log: Path) -> None:
    with open(log, "a") as out:
        try:
            result = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise ServerError(f"{' '.join(step[:4])} ... took over {INSTALL_TIMEOUT_S:.0f}s; log {log}") from None
    if result.returncode != 0:
        raise ServerError(f"{' '.join(step[:5])} ... failed (exit {result.returncode}); log {log}")


def link_main_packages(spec: VenvSpec, venv: Path) -> None:
    """``<venv>/linked/<package>`` -> the main environment's package, and the .pth that finds them."""
    main_site = Path(sysconfig.get_paths()["purelib"])
    linked = venv / "linked"
    linked.mkdir(exist_ok=True)
    for name in spec.links:
        source = main_site / name
        if not source.exists():
            raise ServerError(f"{source} is missing: the main environment needs {name} (pip install -e '.[servers]')")
        link = linked / name
        if link.is_symlink():
            link.unlink()
        link.symlink_to(source)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / PTH_NAME).write_text(f"{linked}\n")


def ensure_venv(spec: VenvSpec, root: Path | None = None) -> Path:
    """The venv of ``spec`` (made and installed on first use, under a lock); returns its folder."""
    venv = venv_dir(spec, root)
    if (venv / DONE_MARKER).is_file():
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing it: wait for it
        if (venv / DONE_MARKER).is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        log = venv.parent / f"{venv.name}-install.log"
        print(
            f"inferload: making {spec.name}'s own venv in {venv} (first use: about a minute; log {log}) ...",
            file=sys.stderr,
            flush=True,
        )
        log.write_text("")
        _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], log)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
        _run([*pip, *spec.requirements], log)  # exact pins, resolved once: no resolver run, no surprise upgrades
        link_main_packages(spec, venv)
        (venv / DONE_MARKER).write_text(spec.key_text() + "\n")
    return venv
