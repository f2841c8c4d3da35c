"""Holds the ``sitecustomize`` shim that ``ddp-lsp feasibility`` puts on ``PYTHONPATH``."""
