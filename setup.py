"""What pyproject.toml cannot say: the checkout's data folders shipped inside the package, and the
native extension when it was built.

The top-level ``scenarios/``, ``model_repository/`` (Triton configs) and ``model_store/``
(TorchServe handler) are the one source; a wheel carries them as ``inferload/samples/<folder>/``,
where ``inferload.paths.samples_dir()`` finds them when inferload is not run from a checkout.
Built artifacts (``model.pt``, ``model.py``, ``.mar``) are never packaged: they are built on first use.

``inferload/_native.abi3.so`` (``make build``: the Rust crate in ``native/``, built by maturin) goes
into the wheel when it is there; the wheel is then platform-specific (``cp310-abi3-linux_x86_64``:
the module uses Python's stable ABI from 3.10 on). Without it the wheel is pure and inferload runs
its Python path. Everything else about the project is in pyproject.toml.
"""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.dist import Distribution

SAMPLES = {
    "inferload.samples.scenarios": "scenarios",
    "inferload.samples.model_repository": "model_repository",
    "inferload.samples.model_store": "model_store",
}
#: the native module, when `make build` made it
NATIVE_MODULES = sorted(Path(__file__).resolve().parent.joinpath("inferload").glob("_native*.so"))


class NativeDistribution(Distribution):
    """A distribution with a compiled module is not pure: its wheel gets a platform tag."""

    def has_ext_modules(self) -> bool:
        return bool(NATIVE_MODULES)


setup(
    packages=[*find_packages(include=["inferload", "inferload.*", "collectors", "collectors.*"]), *SAMPLES],
    package_dir=SAMPLES,
    package_data={
        "inferload": ["_native*.so"],  # the native extension, when built (matches nothing otherwise)
        "inferload.samples.scenarios": ["*.yaml", "*.csv"],  # .csv: the recordings replay scenarios play
        "inferload.samples.model_repository": ["*/config.pbtxt", "*/configs/*.pbtxt"],
        "inferload.samples.model_store": ["handler.py"],
        "inferload.webui": ["static/*.js"],  # the web UI's Inference tab script
    },
    distclass=NativeDistribution,
    # the module is abi3 (pyo3's abi3-py310): one wheel for every CPython >= 3.10
    options={"bdist_wheel": {"py_limited_api": "cp310"}} if NATIVE_MODULES else {},
)
