"""The Inference tab of Locust's web UI (docs/web-ui.md).

`live.py` computes what the tab shows from the run's own record (pure: exact percentiles merged
over workers, server figures so far, open loop, SLO state, the per-window chart data); `tab.py`
wires it into Locust's Flask app (one JSON route, the stock tab and table, the chart script
`static/inference.js`), reads the collector's GPU figures back from InfluxDB, and holds
`attach_inference_tab`, the one call `inferload.run.plugin` makes, on a master or local runner with
a web UI (nothing else imports this package but for `live.py`'s pure server figures).
"""
