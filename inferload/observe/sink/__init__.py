"""The InfluxDB sink: line protocol, the v1 and v2 writers, and the non-blocking background writer.

settings = SinkSettings(url="http://127.0.0.1:8086", database="inferload")
sink = open_sink(settings)          # a started BackgroundWriter
sink.submit([Point("requests", {"run_id": "r1"}, {"count": 3}, time_ns)])
stats = sink.close()                # SinkStats: points_written, points_dropped, ...
"""

from __future__ import annotations

from inferload.observe.sink.background import BackgroundWriter, SinkStats, Writer
from inferload.observe.sink.errors import SinkError
from inferload.observe.sink.line_protocol import Point, encode_point, encode_points, seconds_to_ns
from inferload.observe.sink.secrets import mask_secrets
from inferload.observe.sink.settings import SinkSettings, settings_from_mapping

__all__ = [
    "BackgroundWriter",
    "Point",
    "SinkError",
    "SinkSettings",
    "SinkStats",
    "Writer",
    "encode_point",
    "encode_points",
    "make_writer",
    "mask_secrets",
    "open_sink",
    "seconds_to_ns",
    "settings_from_mapping",
]


def make_writer(settings: SinkSettings) -> Writer:
    """The synchronous writer for the settings' API."""
    if settings.api == "v2":
        from inferload.observe.sink.influx_v2 import V2Writer

        return V2Writer(settings)
    from inferload.observe.sink.http_v1 import V1Writer

    return V1Writer(settings)


def open_sink(settings: SinkSettings, writer: Writer | None = None, start: bool = True) -> BackgroundWriter:
    """A BackgroundWriter for the settings (started unless `start` is False)."""
    sink = BackgroundWriter(
        writer if writer is not None else make_writer(settings),
        batch_size=settings.batch_size,
        flush_interval_s=settings.flush_interval_s,
        max_buffer_points=settings.max_buffer_points,
        backoff_initial_s=settings.backoff_initial_s,
        backoff_max_s=settings.backoff_max_s,
    )
    if start:
        sink.start()
    return sink
