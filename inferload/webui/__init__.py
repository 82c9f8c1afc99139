"""The Inference tab of Locust's web UI (docs/web-ui.md).

`live.py` computes what the tab shows from the run's own record (pure: exact percentiles merged
over workers, server figures, open loop, SLO state); `series.py` the per-window chart data;
`server_view.py` the servers' figures so far; `gpu.py` the collector's GPU figures read back from
InfluxDB; `tab.py` wires it into Locust's Flask app (one JSON route, the stock tab and table, the
chart script `static/inference.js`); `attach.py` is the one call `inferload.run.plugin` makes, on a
master or local runner with a web UI (nothing else imports this package).
"""
