"""Tests for ddp_lsp.runtime: the memory-growth monitor, the dead-rank guard, smallrun."""
