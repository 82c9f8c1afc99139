"""`inferload calibrate`: inferload certifies its own figures on this machine (docs/calibration.md).

For other parts: ``read_calibration``, ``latest_calibration`` and `Calibration` (calibration.json's
schema, ``roofline_rps_per_process``) in `inferload.results.calibration`.
"""
