"""What pyproject.toml cannot say: the checkout's data folders shipped inside the package.

The top-level ``scenarios/``, ``model_repository/`` (Triton configs) and ``model_store/``
(TorchServe handler) are the one source; a wheel carries them as ``inferload/samples/<folder>/``,
where ``inferload.paths.samples_dir()`` finds them when inferload is not run from a checkout.
Built artifacts (``model.pt``, ``model.py``, ``.mar``) are never packaged: they are built on first use.
Everything else about the project is in pyproject.toml.
"""

from setuptools import find_packages, setup

SAMPLES = {
    "inferload.samples.scenarios": "scenarios",
    "inferload.samples.model_repository": "model_repository",
    "inferload.samples.model_store": "model_store",
}

setup(
    packages=[*find_packages(include=["inferload", "inferload.*", "collectors", "collectors.*"]), *SAMPLES],
    package_dir=SAMPLES,
    package_data={
        "inferload.samples.scenarios": ["*.yaml"],
        "inferload.samples.model_repository": ["*/config.pbtxt", "*/configs/*.pbtxt"],
        "inferload.samples.model_store": ["handler.py"],
        "inferload.webui": ["static/*.js"],  # the web UI's Inference tab script
    },
)
