"""Where inferload's own files are, from a checkout or from an installed wheel.

From a checkout (``pip install -e .``, the tests, ``make``), the top-level ``scenarios/``,
``model_repository/`` and ``model_store/`` are the files themselves. A wheel carries copies of
them inside the package, as ``inferload/samples/<folder>/`` (setup.py maps the top-level folders
there when it builds; there is no such folder in a checkout). ``samples_dir()`` is the one place
that tells the two apart. Installed, the sample models are built under ``home_dir()``
(``$INFERLOAD_HOME``, or ``.inferload`` in the working folder); see inferload.local.models.paths.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: the locustfile `inferload run` gives Locust (also `python -m inferload.locustfile`)
LOCUSTFILE = PACKAGE_DIR / "locustfile.py"
#: the checkout's root when inferload runs from one (tests, bench); see `checkout_root()`
REPO_ROOT = PACKAGE_DIR.parent
DEFAULT_STATE_DIR = Path(".inferload") / "servers"
HOME_ENV = "INFERLOAD_HOME"


def checkout_root() -> Path | None:
    """The source checkout inferload runs from, or None when it is installed from a wheel."""
    marker = REPO_ROOT / "model_store" / "handler.py"
    return REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() and marker.is_file() else None


def samples_dir() -> Path:
    """The folder holding ``scenarios/``, ``model_repository/`` (configs) and ``model_store/`` (handler)."""
    return checkout_root() or PACKAGE_DIR / "samples"


def scenarios_dir() -> Path:
    """The sample scenarios (``steady.yaml``, ``compare.yaml``, ...)."""
    return samples_dir() / "scenarios"


def home_dir() -> Path:
    """``$INFERLOAD_HOME``, or ``.inferload`` in the working folder (absolute)."""
    return Path(os.environ.get(HOME_ENV) or ".inferload").absolute()
