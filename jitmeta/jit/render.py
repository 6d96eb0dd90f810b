"""Render a :class:`~jitmeta.jit.source.KernelSource` into self-contained CUDA source.

Pure and deterministic: the same source value gives byte-identical CUDA. One Jinja2
environment with ``StrictUndefined`` (a typo fails instead of becoming an empty
string in CUDA); templates and headers are read from the installed
``jitmeta.templates`` package. Headers hold no template syntax and are passed to the
template as values (``headers[name]``), which keeps Jinja from lexing hundreds of lines
on a process's first call.

Compiling a template is most of a cache hit's cost in a fresh process (several ms), so
the build may hand :func:`render` a directory for Jinja's compiled templates (Jinja's
own bytecode cache, keyed by the template's checksum). That cache is best effort: a
failed read or write of it (a full disk, a read-only directory) never fails a render.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from importlib import resources

import jinja2

from .source import KernelSource

__all__ = ["render", "header_text"]

log = logging.getLogger("jitmeta")


_PACKAGE = "jitmeta.templates"


@functools.lru_cache(maxsize=1)
def _package_dir() -> str | None:
    """The directory of the templates package when it is one on disk (a wheel or an
    editable install), else None. Reading files there directly spares a fresh
    process's first render the import of ``importlib.resources``' readers (about a
    millisecond of a cache hit's cost); where an installed wheel puts the package
    beside this one, its directory is found without importing it (a fifth of a
    millisecond more)."""
    beside = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          _PACKAGE.rpartition(".")[2])
    if os.path.isfile(os.path.join(beside, "__init__.py")):
        return beside
    paths = getattr(importlib.import_module(_PACKAGE), "__path__", ())
    return next((p for p in paths if os.path.isdir(p)), None)


def _read_packaged(name: str) -> str:
    """The text of file ``name`` of the templates package (FileNotFoundError if none)."""
    base = _package_dir()
    if base is not None:
        with open(os.path.join(base, name), encoding="utf-8") as f:
            return f.read()
    return resources.files(_PACKAGE).joinpath(name).read_text(encoding="utf-8")


class _PackageLoader(jinja2.BaseLoader):
    """Loads templates from the ``jitmeta.templates`` package (wheel or editable)."""

    def get_source(self, environment, template):
        try:
            text = _read_packaged(template)
        except FileNotFoundError:
            raise jinja2.TemplateNotFound(template) from None
        return text, None, lambda: True


class _BestEffortBytecode(jinja2.FileSystemBytecodeCache):
    """Jinja's file bytecode cache, minus the failures: an unreadable or unwritable
    file is a miss (logged at debug level), never an error."""

    def load_bytecode(self, bucket):
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError) as exc:
            log.debug("jinja bytecode cache unreadable (%s); compiling the template", exc)
            bucket.reset()

    def dump_bytecode(self, bucket):
        try:
            super().dump_bytecode(bucket)
        except OSError as exc:
            log.debug("jinja bytecode cache not written (%s)", exc)


@functools.lru_cache(maxsize=8)
def _environment(bytecode_dir: str | None = None) -> jinja2.Environment:
    cache = _BestEffortBytecode(bytecode_dir) if bytecode_dir else None
    return jinja2.Environment(loader=_PackageLoader(), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False,
                              bytecode_cache=cache)


@functools.lru_cache(maxsize=32)
def header_text(name: str) -> str:
    """The text of the packaged header ``name``."""
    return _read_packaged(name)


@functools.lru_cache(maxsize=512)
def _render(source: KernelSource, bytecode_dir: str | None) -> str:
    headers = {h: header_text(h) for h in source.headers}
    return _environment(bytecode_dir).get_template(source.template).render(
        headers=headers, **dict(source.params))


def render(source: KernelSource, bytecode_dir: str | None = None) -> str:
    """Self-contained CUDA source for ``source``.

    ``bytecode_dir``: where Jinja may keep compiled templates (None: nowhere); it never
    changes the result.
    """
    return _render(source, bytecode_dir)
