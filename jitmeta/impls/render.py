"""Render a :class:`~jitmeta.heuristics.plan.CodeSpec` into self-contained CUDA source.

Pure and deterministic: the same spec gives byte-identical source. One Jinja2
environment with ``StrictUndefined`` (a typo fails instead of becoming an empty
string in CUDA); templates are read from the installed ``jitmeta.templates``.
"""

from __future__ import annotations

import functools
from importlib import resources

import jinja2

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


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=_PackageLoader(), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


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
    return _environment().get_template(TEMPLATE).render(
        schedule_header=_header(), code_name=code.name, variant=code.variant,
        varlen=code.varlen, schedule=code.schedule, split_kv=code.split_kv,
        threads=code.threads, capacity=code.capacity)
