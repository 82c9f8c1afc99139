"""Build the served artifacts of the sample models.

    python -m inferload.local.models.build [--models tiny,cnn,identity] [--force]

For each model, under ``artifacts_root()`` (the checkout, or ``$INFERLOAD_HOME/models`` when
installed; see ``inferload.local.models.specs``): ``model_repository/<m>/1/model.pt``
(TorchScript, ``torch.jit.trace``), ``1/model.py`` (Triton's Python backend) and
``model_store/<m>.mar`` (torch-model-archiver: the shipped ``handler.py``, the same model.pt and
``model_spec.json``); installed, also the shipped ``config.pbtxt`` and ``configs/``. Outputs
newer than their sources are left alone, so ``ensure_models`` is cheap when nothing changed
(torch is only imported to build).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from inferload.errors import InferloadError
from inferload.local.models.specs import (
    MODEL_NAMES,
    artifacts_root,
    config_sources,
    get_spec,
    handler_source,
    mar_path,
    model_repository_dir,
    torchscript_path,
)

#: the code a built model depends on (the models' definitions, their specs, this build)
CODE_SOURCES = tuple(Path(__file__).with_name(name) for name in ("definitions.py", "specs.py", "build.py"))
TRITON_MODEL_PY = Path(__file__).with_name("triton_python_model.py")


class BuildError(InferloadError):
    """A sample model could not be built (archiver failed, sources missing)."""


@dataclass(frozen=True)
class BuildResult:
    model: str
    torchscript: Path
    mar: Path
    built: bool  # False when both outputs were already up to date


def _newer_than(output: Path, sources: list[Path]) -> bool:
    if not output.exists():
        return False
    mtime = output.stat().st_mtime
    return all(mtime >= s.stat().st_mtime for s in sources)


def _trace(model: str, out: Path) -> None:
    try:
        import torch

        from inferload.local.models import definitions
    except ImportError as error:
        raise BuildError(
            f"building the sample models needs torch ({error}): install inferload with its servers extra, "
            "pip install 'inferload[servers]'"
        ) from None
    module = definitions.create_model(model)
    example = definitions.example_input(model, batch=2)
    with torch.no_grad():
        traced = torch.jit.trace(module, example)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".model-", suffix=".pt", dir=out.parent)
    os.close(fd)
    traced.save(tmp)
    os.replace(tmp, out)  # atomic: a server loading model.pt never sees half a file


def spec_json(model: str) -> str:
    spec = get_spec(model)
    return json.dumps(
        {
            "name": spec.name,
            "input_name": spec.input_name,
            "input_shape": list(spec.input_shape),
            "dtype": spec.dtype,
            "output_name": spec.output_name,
            "output_shape": list(spec.output_shape),
            "max_batch_size": spec.max_batch_size,
        },
        indent=2,
    )


def _archive(model: str, torchscript: Path, handler: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"inferload-mar-{model}-") as tmp:
        spec_file = Path(tmp) / "model_spec.json"
        spec_file.write_text(spec_json(model))
        cmd = [
            sys.executable,
            "-m",
            "model_archiver.model_packaging",
            "--model-name",
            model,
            "--version",
            "1.0",
            "--serialized-file",
            str(torchscript),
            "--handler",
            str(handler),
            "--extra-files",
            str(spec_file),
            "--export-path",
            tmp,
            "--force",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        built = Path(tmp) / f"{model}.mar"
        if proc.returncode != 0 or not built.exists():
            raise BuildError(
                f"torch-model-archiver failed for {model!r} (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()[-2000:]}"
            )
        staged = out.parent / f".{model}.mar.{os.getpid()}"
        shutil.copyfile(built, staged)
        os.replace(staged, out)  # atomic, also when two builds race


def _copy_if_changed(source: Path, target: Path) -> None:
    if not target.exists() or target.read_bytes() != source.read_bytes():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def install_triton_configs(model: str, root: Path) -> Path:
    """The model's shipped ``config.pbtxt`` and ``configs/*.pbtxt`` in ``root``'s repository
    (nothing to do in a checkout, where they are the same files)."""
    source = config_sources(model)
    target = model_repository_dir(root) / model
    if not (source / "config.pbtxt").is_file():
        raise BuildError(f"Triton config of {model!r} not found: {source / 'config.pbtxt'}")
    if source.resolve() != target.resolve():
        for config in [source / "config.pbtxt", *sorted((source / "configs").glob("*.pbtxt"))]:
            _copy_if_changed(config, target / config.relative_to(source))
    return target / "config.pbtxt"


def install_triton_model_py(model: str, root: Path) -> Path:
    """Triton's Python backend loads `<model>/1/model.py`: one source serves every model."""
    target = model_repository_dir(root) / model / "1" / "model.py"
    source = TRITON_MODEL_PY.read_text()
    if not target.exists() or target.read_text() != source:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source)
    return target


def is_built(model: str, root: Path | None = None) -> bool:
    """Whether the model's TorchScript and .mar exist and are newer than their sources."""
    root = root or artifacts_root()
    pt = torchscript_path(model, root)
    return _newer_than(pt, list(CODE_SOURCES)) and _newer_than(mar_path(model, root), [pt, handler_source(), *CODE_SOURCES])


def build_model(model: str, root: Path | None = None, force: bool = False) -> BuildResult:
    """Build one model's TorchScript and .mar unless both are newer than their sources."""
    get_spec(model)
    root = root or artifacts_root()
    handler = handler_source()
    if not handler.exists():
        raise BuildError(f"TorchServe handler not found: {handler}")
    install_triton_configs(model, root)
    install_triton_model_py(model, root)
    pt = torchscript_path(model, root)
    mar = mar_path(model, root)
    built = False
    if force or not _newer_than(pt, list(CODE_SOURCES)):
        _trace(model, pt)
        built = True
    if force or built or not _newer_than(mar, [pt, handler, *CODE_SOURCES]):
        _archive(model, pt, handler, mar)
        built = True
    return BuildResult(model, pt, mar, built)


def build_models(models: tuple[str, ...] = MODEL_NAMES, root: Path | None = None, force: bool = False) -> list[BuildResult]:
    """Build every named model (see ``build_model``); returns one result per model."""
    return [build_model(m, root, force) for m in models]


def ensure_models(models: tuple[str, ...], root: Path | None = None) -> list[BuildResult]:
    """Build what the local servers need before they start, saying so when it builds
    (`inferload servers up` and `inferload demo` on first use)."""
    root = root or artifacts_root()
    for model in models:
        if not is_built(model, root):
            print(f"inferload: building the sample model {model!r} in {root} (first use) ...", file=sys.stderr, flush=True)
    return build_models(models, root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferload.local.models.build", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODEL_NAMES), help="comma-separated model names")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    names = tuple(n.strip() for n in args.models.split(",") if n.strip())
    try:
        results = build_models(names, force=args.force)
    except (ValueError, BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in results:
        state = "built" if r.built else "up to date"
        print(f"{r.model}: {state}: {r.torchscript} {r.mar}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
