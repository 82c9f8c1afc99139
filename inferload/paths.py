"""Where the repository's own files are (inferload runs from a checkout)."""

from pathlib import Path

from inferload.local.models.paths import project_root

REPO_ROOT = project_root()
LOCUSTFILE = REPO_ROOT / "locustfiles" / "inferload_locustfile.py"
DEFAULT_STATE_DIR = Path(".inferload") / "servers"
