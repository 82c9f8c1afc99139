"""What a run measured: HDR latency statistics, the per-window run record, the per-request log, signed worker reports."""
