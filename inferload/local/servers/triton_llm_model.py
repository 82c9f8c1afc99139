"""Triton Python-backend model: the built-in LLM behind Triton's generate extension, decoupled.

Triton loads it as ``<repository>/random-llama/1/model.py`` (`triton_local.llm_repository` writes the
model's folder: this file, ``llamacpp_engine.py`` beside it, and a ``config.pbtxt`` whose parameters
name the GGUF file and llama.cpp's slots). It runs llama.cpp's engine in the backend's stub process
(`llamacpp_engine`: the same settings as llama.cpp's own server) and answers each request on its own
thread, so the engine's slots decode requests together:

- input ``text_input`` (one string: the prompt, sent as a plain completion), request parameters
  ``max_tokens`` (default 16) and ``stream`` (default true);
- output ``text_output``: streamed, one response per piece of text llama.cpp produced (what
  ``generate_stream`` sends as one event each); not streamed, one response with the whole text (what
  ``generate`` answers). The final flag follows the last response; a request llama.cpp refuses gets
  one error response naming llama.cpp's reason.

Its engine's scheduler is on Triton's metrics page, as Triton's vLLM backend puts vLLM's there:
custom gauges (``pb_utils.MetricFamily``) under llama.cpp's own names, labelled with the model and
version, ``llamacpp:requests_processing`` (requests in a slot) and ``llamacpp:requests_deferred``
(requests waiting for one), read from the engine's metrics every ``metrics_interval_ms`` (parameter,
default 100) by a thread of the model.
"""

import json
import sys
import threading
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llamacpp_engine import EngineError, EngineSettings, start_engine, stream_completion

DEFAULT_MAX_TOKENS = 16
#: the engine's gauges this model puts on Triton's page (llama.cpp's names, and what they count)
ENGINE_GAUGES = {
    "llamacpp:requests_processing": "Requests llama.cpp is generating now (in a slot)",
    "llamacpp:requests_deferred": "Requests waiting in llama.cpp for a free slot",
}


def engine_gauges(page):
    """The values of `ENGINE_GAUGES` on llama.cpp's metrics page (text), by name."""
    values = {}
    for line in page.splitlines():
        name, _, value = line.partition(" ")
        if name in ENGINE_GAUGES:
            values[name] = float(value)
    return values


def _text_tensor(text):
    return pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_))


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        settings = EngineSettings(
            gguf=parameters["gguf"],
            alias=config["name"],
            parallel=int(parameters.get("parallel", "4")),
            threads=int(parameters.get("threads", "1")),
        )
        self.engine = start_engine(settings)
        labels = {"model": args["model_name"], "version": args["model_version"]}
        # each family outlives its metric (Triton refuses a metric whose family is gone)
        self.families = {
            name: pb_utils.MetricFamily(name=name, description=words, kind=pb_utils.MetricFamily.GAUGE)
            for name, words in ENGINE_GAUGES.items()
        }
        self.gauges = {name: family.Metric(labels=labels) for name, family in self.families.items()}
        self.stopping = threading.Event()
        interval_s = int(parameters.get("metrics_interval_ms", "100")) / 1000.0
        self.reporter = threading.Thread(target=self._report_gauges, args=(interval_s,), daemon=True)
        self.reporter.start()

    def _report_gauges(self, interval_s):
        """The engine's gauges onto Triton's page, every `interval_s` until the model is unloaded."""
        while not self.stopping.wait(interval_s):
            for name, value in engine_gauges(self.engine.handle_metrics()).items():
                self.gauges[name].set(value)

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._answer, args=(request,), daemon=True).start()
        return None

    def _answer(self, request):
        sender = request.get_response_sender()
        try:
            prompt, max_tokens, stream = self._read(request)
            pieces = []

            def on_text(text):
                if stream:
                    sender.send(pb_utils.InferenceResponse(output_tensors=[_text_tensor(text)]))
                else:
                    pieces.append(text)
                return False

            stream_completion(self.engine, prompt, max_tokens, on_text)
            if not stream:
                sender.send(pb_utils.InferenceResponse(output_tensors=[_text_tensor("".join(pieces))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except (EngineError, ValueError, KeyError, TypeError) as exc:
            error = pb_utils.TritonError(f"llama.cpp: {exc}")
            sender.send(pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    @staticmethod
    def _read(request):
        """The prompt, the most tokens and whether to stream (a ValueError naming what is wrong)."""
        tensor = pb_utils.get_input_tensor_by_name(request, "text_input")
        if tensor is None:
            raise ValueError("the request has no text_input")
        values = tensor.as_numpy().reshape(-1)
        if values.size != 1:
            raise ValueError(f"text_input holds {values.size} strings; expected one")
        prompt = values[0].decode("utf-8") if isinstance(values[0], bytes) else str(values[0])
        parameters = json.loads(request.parameters() or "{}")
        max_tokens = parameters.get("max_tokens", DEFAULT_MAX_TOKENS)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"parameter max_tokens is {max_tokens!r}; expected a whole number >= 1")
        stream = parameters.get("stream", True)
        if not isinstance(stream, bool):
            raise ValueError(f"parameter stream is {stream!r}; expected true or false")
        return prompt, max_tokens, stream

    def finalize(self):
        self.stopping.set()
        self.reporter.join(timeout=5)
        self.gauges = self.families = None
        self.engine = None
