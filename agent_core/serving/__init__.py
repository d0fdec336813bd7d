"""Serving policies on an inference engine: a vLLM process and the agent that manages it.

Owns: `engine` (start, watch and stop one vLLM OpenAI-compatible server; its adapters and metrics),
`agent` (the policy-server process: registers and heartbeats into the web app, loads the LoRA adapters
the web app says it should serve, restarts a dead engine). Calls nothing of the platform but HTTP.
Called by: `python -m agent_core.serving` (make run, docker-compose, the tests), bench/serving_bench.py.
"""
