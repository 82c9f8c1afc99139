"""The torchvision transforms TorchServe's image handlers use, with Pillow and numpy.

``ToTensor`` and ``Normalize`` behave as torchvision's do for the 8-bit images (modes L, RGB, RGBA)
the MNIST example sends; ``Resize`` and ``CenterCrop`` (made by ``ts.torch_handler.image_classifier``
at import, not used by the MNIST handler) resize the shorter side and crop the centre.
"""

import numpy as np
import torch
from PIL import Image


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, image):
        for transform in self.transforms:
            image = transform(image)
        return image


class ToTensor:
    """A PIL image as a float tensor C x H x W in [0, 1]."""

    def __call__(self, image):
        array = np.asarray(image, dtype=np.uint8)
        if array.ndim == 2:
            array = array[:, :, None]
        return torch.from_numpy(array.transpose(2, 0, 1).astype(np.float32) / 255.0)


class Normalize:
    """(tensor - mean) / std per channel."""

    def __init__(self, mean, std):
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def __call__(self, tensor):
        return (tensor - self.mean) / self.std


class Resize:
    """The shorter side to ``size`` (an int), keeping the aspect ratio; (h, w) resizes to exactly that."""

    def __init__(self, size):
        self.size = size

    def __call__(self, image):
        if isinstance(self.size, int):
            width, height = image.size
            scale = self.size / min(width, height)
            return image.resize((round(width * scale), round(height * scale)), Image.BILINEAR)
        height, width = self.size
        return image.resize((width, height), Image.BILINEAR)


class CenterCrop:
    def __init__(self, size):
        self.size = (size, size) if isinstance(size, int) else tuple(size)

    def __call__(self, image):
        height, width = self.size
        left = (image.size[0] - width) // 2
        top = (image.size[1] - height) // 2
        return image.crop((left, top, left + width, top + height))
