"""Scenarios: the YAML file, its frozen model, and every rule a valid scenario follows.

``loader`` (file or dict → ``Scenario``, problems as ``file: key.path: message`` lines) reads
through ``yaml_file`` (bounded, regular files only) and validates ``model.Scenario``, made of
``targets`` (targets, inputs, data, SLO) and ``shapes`` (the ten load shapes), built on
``fields`` (field types), ``addresses``, ``durations``, ``tensors`` (sizes, dtypes, npy files),
``messages`` (how problems are raised and worded) and ``limits`` (the documented bounds).
"""
