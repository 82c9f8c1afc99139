"""Local real servers of the embedded default (Triton, TorchServe, InfluxDB), the sample models and the demo."""
