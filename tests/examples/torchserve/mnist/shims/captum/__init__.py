"""A stand-in for captum (see ../../SOURCE.md): TorchServe's ``VisionHandler`` makes an
``IntegratedGradients`` at start; only the explanations API uses it, which these tests do not call."""
