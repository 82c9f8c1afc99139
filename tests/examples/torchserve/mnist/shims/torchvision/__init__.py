"""A stand-in for torchvision, archived next to TorchServe's MNIST handler (see ../../SOURCE.md).

torchvision from PyPI is a CUDA build that fails to import beside the CPU torch used here; the
handler (and TorchServe's own ``ts.torch_handler.image_classifier``) only need ``transforms``.
"""

from . import transforms

__all__ = ["transforms"]
