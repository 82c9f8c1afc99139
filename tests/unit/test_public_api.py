"""The public API: what `inferload.__all__` promises, and that `import inferload` costs nothing.

The import check runs in a fresh interpreter (this one has Locust imported by tests/conftest.py).
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from locust.env import Environment

import inferload
import inferload.errors
from tests.support.system_tools import REPO

#: what `import inferload` must not bring in: Locust (and with it gevent's monkey patching), gRPC,
#: the Triton client, torch, numpy, pydantic, YAML, matplotlib
HEAVY_MODULES = ("locust", "gevent", "grpc", "tritonclient", "torch", "numpy", "pydantic", "yaml", "matplotlib")


def fresh_python(code: str) -> dict[str, object]:
    """Run `code` in a new interpreter from the checkout; it prints one JSON object."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_name_in_all_exists_is_public_and_comes_from_inferload():
    assert inferload.__all__ == sorted(set(inferload.__all__))
    for name in inferload.__all__:
        assert not name.startswith("_"), name
        value = getattr(inferload, name)
        assert value.__module__.startswith("inferload."), (name, value.__module__)
        assert name in dir(inferload)
    namespace: dict[str, object] = {}
    exec("from inferload import *", namespace)
    assert set(inferload.__all__) <= set(namespace)


def test_the_api_names_every_user_class_the_client_the_loaders_the_run_hooks_and_every_error():
    import inferload.users
    from inferload.run.attached_run import attach
    from inferload.run.locust_classes import scenario_classes
    from inferload.scenario.loader import load_scenario
    from inferload.users.base import InferenceUser

    assert inferload.load_scenario is load_scenario
    assert inferload.scenario_classes is scenario_classes and inferload.attach is attach
    user_classes = {name for name in inferload.users.__all__ if inspect.isclass(getattr(inferload.users, name))} - {
        "InferenceClient",
        "InferResult",
    }
    assert user_classes == {
        name for name in inferload.__all__ if name.endswith("User")
    }  # every kind's class, the stream user too
    for name in user_classes:
        assert getattr(inferload, name) is getattr(inferload.users, name)
        assert issubclass(getattr(inferload, name), InferenceUser)
    assert {"InferenceClient", "InferResult", "inference_task", "Slo", "AttachedRun", "ScenarioClasses"} <= set(inferload.__all__)
    errors = {
        name
        for name, value in vars(inferload.errors).items()
        if inspect.isclass(value) and value.__module__ == "inferload.errors" and not name.startswith("_")
    }
    assert errors - set(inferload.__all__) == set(), "errors missing from inferload.__all__"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'TritonUser'"):
        _ = inferload.TritonUser


def test_import_inferload_imports_nothing_heavy_and_patches_nothing():
    seen = fresh_python(
        "import json, socket, sys\n"
        "import inferload\n"
        f"heavy = {HEAVY_MODULES!r}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(json.dumps({'loaded': loaded, 'socket': socket.socket.__module__}))\n"
    )
    assert seen == {"loaded": [], "socket": "socket"}


def test_a_name_imports_what_it_needs_when_first_used_and_never_torch():
    seen = fresh_python(
        "import json, sys\n"
        "import inferload\n"
        "inferload.load_scenario\n"
        "after_loader = 'locust' in sys.modules\n"
        "inferload.TritonGrpcUser\n"
        "print(json.dumps({'locust_after_loader': after_loader, 'locust': 'locust' in sys.modules, 'torch': 'torch' in sys.modules}))\n"
    )
    assert seen == {"locust_after_loader": False, "locust": True, "torch": False}


def test_a_user_class_needs_only_a_target_built_in_python():
    class TinyModel(inferload.TritonGrpcUser):
        target = inferload.Target(
            name="tiny-grpc",
            kind="triton-grpc",
            address="127.0.0.1:8001",
            model="tiny",
            batch_size=4,
            inputs=[inferload.InputSpec(name="INPUT__0", shape=(16,), dtype="FP32")],
        )

    assert TinyModel.abstract is False  # Locust runs it: the base classes are abstract, a subclass is not
    user = TinyModel(Environment(user_classes=[TinyModel]))
    [(spec, array)] = user.input_arrays()
    assert (spec.name, array.shape, str(array.dtype)) == ("INPUT__0", (4, 16), "float32")


def test_scenario_classes_returns_the_classes_and_binds_no_name_of_the_caller():
    seen = fresh_python(
        "import locust, json\n"
        "from inferload import scenario_classes, scenario_from_dict\n"
        "data = {'name': 's', 'duration': '10s', 'shape': {'kind': 'steady', 'users': 1}, 'targets': [{'name': 'tiny-grpc',\n"
        "        'kind': 'triton-grpc', 'address': '127.0.0.1:8001', 'model': 'tiny',\n"
        "        'inputs': [{'name': 'INPUT__0', 'shape': [16], 'dtype': 'FP32'}]}]}\n"
        "before = set(globals())\n"
        "classes = scenario_classes(scenario_from_dict(data))\n"
        "made = sorted(set(globals()) - before)\n"
        "print(json.dumps({'users': sorted(classes.user_classes), 'shape': classes.shape_class.__name__,\n"
        "                  'made': made}))\n"
    )
    assert seen == {
        "users": ["TinyGrpcUser"],
        "shape": "ScenarioShape",
        "made": ["before", "classes"],  # the caller's namespace holds what it bound, nothing more
    }
