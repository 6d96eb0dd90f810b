"""``jitmeta-cache``: warm, inspect, verify, prune and ship jitmeta's cubin cache.

Installed as ``jitmeta.cache_tools`` (see pyproject's package-dir mapping); the
console script is :func:`jitmeta.cache_tools.cli.main`.
"""
