"""Runnable examples: ``python -m rxgraph.examples.hello``."""
