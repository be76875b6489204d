"""The OpenAI-compatible server and the capture proxy: agent programs written against the OpenAI
API, trained and evaluated here.

``protocol.py`` (the chat wire format and its errors), ``recorder.py`` (one episode's segments of
exact token ids, with the sampled ids spliced in), ``app.py`` (the HTTP routes over the policy),
``completions.py`` (``/v1/completions`` and the trainer's control routes), ``programs.py`` (agent
programs as episodes of a training run), ``serve.py`` (``agent-rl serve``, alias ``agent-rl proxy``).
Guide: ``docs/agent-programs.md``.
"""
