"""The `inferload` command's processes: Locust started as a child (headless, master, workers) with
signals forwarded and nothing left behind, and the self-contained locustfile a worker is given.
What runs inside Locust is `inferload.run`."""
