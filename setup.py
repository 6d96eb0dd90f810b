"""The one compiled part of jitmeta: ``jitmeta._launch`` (a kernel launch from C).

Everything else is in pyproject.toml. The extension is optional: without a C compiler
or Python's headers the build goes on without it, and jitmeta launches through
cuda.bindings (a few microseconds more per call).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("jitmeta._launch", ["jitmeta/_launch.c"], optional=True)])
