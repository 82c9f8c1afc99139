"""A run inside Locust: the plugin that wires the parts, options, signals, the workers of a distributed run."""
