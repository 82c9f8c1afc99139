"""A run inside Locust: the plugin that wires the parts, options, start checks, signals, distributed mode."""
