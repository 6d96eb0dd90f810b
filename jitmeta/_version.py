"""The one place jitmeta's version is written (pyproject reads it from here)."""

__version__ = "0.1.0"
