"""Kernel family: the paged-MQA-logits schedule in the token format ("sm100").

Current DeepGEMM's Blackwell format, used for every varlen call: rows are
``(q_token_idx, kv_split_idx)``, a request is a next_n-token row (decode) or a maximal
run of equal ``indices`` (prefill), and work sums are 64-bit (``docs/schedule.md``).

It runs on the engine the atom formats use (loading, block scan, cooperative chunked
exchange; ``templates/jitmeta_engine.cuh``); what differs is its format header
(``templates/jitmeta_sm100.cuh``: the run-aware 64-bit summary and the row walk) and
the layout numbers below.
"""

from __future__ import annotations

from ..heuristics.plan import CodeSpec, TileLayout
from .paged_mqa import TileScheduleFamily

__all__ = ["FAMILY"]


def _format_type(code: CodeSpec) -> str:
    return f"jitmeta::Sm100<{code.threads}, {code.split_kv}u, {str(code.varlen).lower()}>"


#: Dense: a summary is one 64-bit work sum. Varlen: a 64-bit sum, the segs of the
#: leading run end and the last run boundary, 16 bytes; a slot holds one tagged 64-bit
#: word per 32-bit field.
#: Static tiles are declared in whole pairs of words, so the 8-byte summaries declared
#: next to them need no padding.
FAMILY = TileScheduleFamily(
    name="paged_mqa_schedule_sm100", schedules=("sm100",), header="jitmeta_sm100.cuh",
    rows_are_tokens=True,
    layouts={False: TileLayout(summary_bytes=8, slot_words=8, tile_align=2),
             True: TileLayout(summary_bytes=16, slot_words=8, tile_align=2)},
    format_type=_format_type)
