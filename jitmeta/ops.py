"""``jitmeta::paged_mqa_logits_metadata`` as PyTorch custom ops (``torch.library``).

Two ops, registered when this module is imported: by ``import jitmeta`` when torch is
already imported, else by the first use of a torch-facing public name (and nothing else
happens then: no CUDA initialization, no directory, no environment read):

* ``torch.ops.jitmeta.paged_mqa_logits_metadata(context_lens, block_kv, num_sms,
  indices=None, split_kv=256, schedule="smxx", pdl=False) -> Tensor`` — a new
  int32 ``[num_sms + 1, 2]`` tensor on the input's device;
* ``torch.ops.jitmeta.paged_mqa_logits_metadata_out(context_lens, block_kv, num_sms,
  out, indices=None, split_kv=256, schedule="smxx", pdl=False) -> ()`` — writes
  ``out`` in place (CUDA graphs, preallocated buffers).

Both have CPU and CUDA implementations (the eager :func:`jitmeta.get_paged_mqa_logits_metadata`
path: reference on CPU, JIT kernel on CUDA) and a fake implementation that validates
the arguments and describes the result, so ``torch.compile(fullgraph=True)`` traces
through them. ``jitmeta.get_paged_mqa_logits_metadata`` routes through these ops only
while compiling; eager calls skip the dispatcher.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import dispatch, kernels
from .validate import validate

__all__ = ["paged_mqa_logits_metadata", "paged_mqa_logits_metadata_out"]


@torch.library.custom_op("jitmeta::paged_mqa_logits_metadata", mutates_args=(),
                         device_types=("cpu", "cuda"))
def paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int,
                              indices: Optional[torch.Tensor] = None, split_kv: int = 256,
                              schedule: str = "smxx", pdl: bool = False) -> torch.Tensor:
    """The schedule metadata as a new tensor (``jitmeta.get_paged_mqa_logits_metadata``)."""
    return dispatch.eager(context_lens, block_kv, num_sms, indices, None, split_kv, schedule,
                          pdl)


@paged_mqa_logits_metadata.register_fake
def _paged_mqa_logits_metadata_fake(context_lens, block_kv, num_sms, indices=None,
                                    split_kv=256, schedule="smxx", pdl=False):
    validate(context_lens, block_kv, num_sms, indices, None, split_kv, schedule,
             kernels.SCHEDULES, pdl=pdl, fake=True)
    return context_lens.new_empty((num_sms + 1, 2))


@torch.library.custom_op("jitmeta::paged_mqa_logits_metadata_out", mutates_args=("out",),
                         device_types=("cpu", "cuda"))
def paged_mqa_logits_metadata_out(context_lens: torch.Tensor, block_kv: int, num_sms: int,
                                  out: torch.Tensor, indices: Optional[torch.Tensor] = None,
                                  split_kv: int = 256, schedule: str = "smxx",
                                  pdl: bool = False) -> None:
    """The schedule metadata written into ``out`` (int32 ``[num_sms + 1, 2]``)."""
    dispatch.eager(context_lens, block_kv, num_sms, indices, out, split_kv, schedule, pdl)


@paged_mqa_logits_metadata_out.register_fake
def _paged_mqa_logits_metadata_out_fake(context_lens, block_kv, num_sms, out, indices=None,
                                        split_kv=256, schedule="smxx", pdl=False):
    validate(context_lens, block_kv, num_sms, indices, out, split_kv, schedule,
             kernels.SCHEDULES, pdl=pdl, fake=True)
