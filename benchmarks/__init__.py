"""Benchmarks of gradviz_widgets on the example model zoo (not tests; see benchmarks/run.py)."""
