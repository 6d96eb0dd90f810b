"""Render a :class:`~jitmeta.heuristics.plan.CodeSpec` into self-contained CUDA source.

Pure and deterministic: the same spec gives byte-identical source. One Jinja2
environment with ``StrictUndefined`` (a typo fails instead of becoming an empty
string in CUDA); templates are read from the installed ``jitmeta.templates``.

Compiling the template is most of a cache hit's cost in a fresh process (several ms),
so Jinja's compiled templates are kept next to the cubins, in ``<cache>/v*/jinja``
(Jinja's own bytecode cache, keyed by the template's checksum), under the same trust
rules as the cubins; without a usable disk cache the template is compiled as usual.
"""

from __future__ import annotations

import functools
import os
import stat
from importlib import resources

import jinja2

from .. import envs
from ..heuristics.plan import CodeSpec

__all__ = ["render", "kernel_names", "TEMPLATE"]

TEMPLATE = "paged_mqa_metadata.cu.j2"
HEADER = "jitmeta_schedule.cuh"


class _PackageLoader(jinja2.BaseLoader):
    """Loads templates from the ``jitmeta.templates`` package (wheel or editable)."""

    def get_source(self, environment, template):
        ref = resources.files("jitmeta.templates").joinpath(template)
        try:
            text = ref.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise jinja2.TemplateNotFound(template) from None
        return text, None, lambda: True


@functools.lru_cache(maxsize=8)
def _environment(bytecode_dir: str | None = None) -> jinja2.Environment:
    cache = jinja2.FileSystemBytecodeCache(bytecode_dir) if bytecode_dir else None
    return jinja2.Environment(loader=_PackageLoader(), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False,
                              bytecode_cache=cache)


def _bytecode_dir() -> str | None:
    """Where compiled templates are kept: the disk cache's ``jinja`` directory when the
    disk cache is on, writable and trusted (loading them runs their code, like a
    cubin's), else None."""
    if envs.get("JITMETA_DISABLE_DISK_CACHE"):
        return None
    from ..jit.build import cache_for_root
    from ..jit.cache import CacheError, makedirs_private

    cache = cache_for_root()
    path = cache.jinja_dir
    try:
        makedirs_private(path)
        cache.check_trusted()
        st = path.lstat()
    except (OSError, CacheError):
        return None
    mine = st.st_uid == os.getuid() and stat.S_ISDIR(st.st_mode)
    if not mine or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return str(path) if os.access(path, os.W_OK | os.X_OK) else None


def kernel_names(code: CodeSpec) -> tuple[str, ...]:
    """The ``extern "C"`` kernels the rendered source defines."""
    return ("jitmeta_emit",)


@functools.lru_cache(maxsize=1)
def _header() -> str:
    """The kernel logic, inserted verbatim: it holds no template syntax, and passing
    it as a value keeps Jinja from lexing 300 lines on a process's first call."""
    return resources.files("jitmeta.templates").joinpath(HEADER).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=256)
def render(code: CodeSpec) -> str:
    """Self-contained CUDA source for ``code``: the stub instantiating the header."""
    return _environment(_bytecode_dir()).get_template(TEMPLATE).render(
        schedule_header=_header(), code_name=code.name, variant=code.variant,
        varlen=code.varlen, schedule=code.schedule, split_kv=code.split_kv,
        threads=code.threads, capacity=code.capacity)
