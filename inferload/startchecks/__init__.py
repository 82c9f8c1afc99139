"""The start checks: before any load is sent, each target's server is asked what it serves and the
target is fitted to it (`fit`: one frozen fit per target), one module per server (`triton`, `kserve`,
`torchserve`, `bentoml`, `openai`); `model_metadata` holds what a server says of its model to the
types inferload reads."""
