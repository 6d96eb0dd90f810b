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
    if code.variant == "chunked":
        return ("jitmeta_emit", "jitmeta_summarize")
    return ("jitmeta_emit",)


@functools.lru_cache(maxsize=256)
def render(code: CodeSpec) -> str:
    """CUDA source for ``code`` (arch does not enter the source)."""
    return _environment().get_template(TEMPLATE).render(
        code_name=code.name, variant=code.variant, varlen=code.varlen,
        schedule=code.schedule, split_kv=code.split_kv, threads=code.threads,
        capacity=code.capacity)
