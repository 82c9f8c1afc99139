"""inferload's sidecar collector entry: `python -m collectors` (logic in inferload.observe.collector)."""
