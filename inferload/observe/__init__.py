"""Live observability: the InfluxDB sink, client-side streaming, the sidecar collector and its sources (servers, NVML)."""
