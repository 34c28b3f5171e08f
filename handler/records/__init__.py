"""The one record pipeline: routing, dispatch to vLLM's routes, formats and framing."""
