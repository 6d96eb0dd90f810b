"""``jitmeta.get_paged_mqa_logits_metadata`` on the CPU path, and argument validation.

CPU tensors run the pure-PyTorch reference path, so these tests need neither a GPU
nor a compiler; every CPU result is checked against the independent line-by-line oracle
``tests/spec_oracle.py`` (plain Python lists and uint32 arithmetic), never against
``reference_schedule`` itself. Validation runs before any device work and is the same
for CUDA tensors. A device mismatch between two real devices cannot be built on
a CPU-only machine; it is simulated with ``meta`` tensors, which are neither CPU nor
CUDA.

Randomness is fresh on every run; the seed is printed and put in every assertion
message. Rerun a failure with ``JITMETA_TEST_SEED=<seed> pytest tests/test_api.py``.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

import jitmeta
from jitmeta import envs

from spec_oracle import spec_schedule

_env_seed = os.environ.get("JITMETA_TEST_SEED")
SEED = int(_env_seed) if _env_seed else int.from_bytes(os.urandom(8), "little")
SEED_NOTE = f"JITMETA_TEST_SEED={SEED}"

FORMATS = ("smxx", "sm90")
I32 = torch.int32
INT32_MAX = 2**31 - 1

get = jitmeta.get_paged_mqa_logits_metadata



def _ctx(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=I32)


def oracle(ctx: torch.Tensor, num_sms: int, indices=None, split_kv: int = 256,
           schedule: str = "smxx") -> torch.Tensor:
    """The independent oracle's schedule as the int32 tensor the API returns (its uint32
    values reinterpreted as int32, as the kernel's output buffer holds them)."""
    rows = spec_schedule(ctx.reshape(ctx.shape[0], -1).tolist(), num_sms,
                         None if indices is None else indices.tolist(), split_kv, schedule)
    flat = [v - 2**32 if v >= 2**31 else v for row in rows for v in row]
    return torch.tensor(flat, dtype=I32).view(num_sms + 1, 2)


def _random_case(rng: random.Random):
    batch = rng.choice([1, 2, 3, 31, 32, 33, rng.randrange(1, 300)])
    varlen = rng.random() < 0.4
    next_n = 1 if varlen else rng.randrange(1, 7)
    hi = rng.choice([0, 1, 300, 5000, 200000])
    vals = [[rng.choice([0, rng.randrange(0, hi + 1), 255, 256, 257])
             for _ in range(next_n)] for _ in range(batch)]
    ctx = torch.tensor(vals, dtype=I32).reshape(batch, next_n)
    indices = None
    if varlen:
        runs, req = [], 0
        while len(runs) < batch:
            runs += [req] * rng.randrange(1, 5)
            req += rng.choice([1, 1, 2]) if rng.random() < 0.8 else -rng.randrange(0, 3)
        indices = torch.tensor(runs[:batch], dtype=I32)
    split_kv = rng.choice([64, 128, 256, 512])
    block_kv = rng.choice([d for d in (1, 16, 32, 64) if split_kv % d == 0])
    num_sms = rng.choice([1, 2, 8, 132, rng.randrange(1, 600), batch + 1])
    return ctx, indices, split_kv, block_kv, num_sms


# --- the CPU path is the reference ------------------------------------------------------

def test_cpu_path_equals_the_oracle_on_random_cases():
    rng = random.Random(SEED)
    for case in range(400):
        ctx, indices, split_kv, block_kv, num_sms = _random_case(rng)
        for schedule in FORMATS:
            note = (f"{SEED_NOTE} case {case}: shape {tuple(ctx.shape)} varlen "
                    f"{indices is not None} split_kv {split_kv} num_sms {num_sms} {schedule}")
            before = ctx.clone()
            got = get(ctx, block_kv, num_sms, indices, split_kv=split_kv, schedule=schedule)
            want = oracle(ctx, num_sms, indices, split_kv, schedule)
            assert got.dtype == I32 and got.shape == (num_sms + 1, 2), note
            assert got.device.type == "cpu" and got.is_contiguous(), note
            assert torch.equal(got, want), note
            assert torch.equal(ctx, before), f"{note}: context_lens was modified"


def test_one_dimensional_context_lens_means_next_n_1():
    rng = random.Random(SEED)
    for case in range(50):
        batch = rng.randrange(1, 200)
        flat = torch.tensor([rng.randrange(0, 3000) for _ in range(batch)], dtype=I32)
        num_sms = rng.randrange(1, 300)
        for schedule in FORMATS:
            a = get(flat, 64, num_sms, schedule=schedule)
            b = get(flat.view(batch, 1), 64, num_sms, schedule=schedule)
            assert torch.equal(a, b), f"{SEED_NOTE} case {case}"
            idx = torch.arange(batch, dtype=I32) // 2
            assert torch.equal(get(flat, 64, num_sms, idx, schedule=schedule),
                               get(flat.view(batch, 1), 64, num_sms, idx, schedule=schedule))


# Hand-worked from the schedule's definition (docs/schedule.md; split_kv 256):
# dense [300, 0, 512, 1]: segs [2,0,2,1], P [2,2,4,5], total 5, S = 3
#   smxx starts [0,2,4,5] -> rows (0,0) (2,0) (3,0) (4,0)
#   sm90 pivot 1, starts [0,1,3,5] -> (0,0) (0,1) (2,1), forced (4,0)
# next_n 3 (atoms of 2, A = 2), last column [600, 256]: segs [3,1], P*A [6,8], S = 3
#   smxx starts [0,3,6,8] -> (0,0) (1,0) (2,0) (4,0)
# varlen ctx [10,20,300,5,600], indices [0,0,0,1,2]: atoms at tokens [0,2,3,4] with
#   ctx [20,300,5,600], segs [1,2,1,3], P [1,3,4,7], S = 4
#   smxx starts [0,2,4,6,7] -> (0,0) (2,1) (4,0) (4,2) (5,0)
#   sm90 pivot 1, starts [0,1,3,5,7] -> (0,0) (2,0) (3,0) (4,1) (5,0)
HAND = [
    ("dense-smxx", [[300], [0], [512], [1]], None, 3, "smxx",
     [[0, 0], [2, 0], [3, 0], [4, 0]]),
    ("dense-sm90", [[300], [0], [512], [1]], None, 3, "sm90",
     [[0, 0], [0, 1], [2, 1], [4, 0]]),
    ("next3-smxx", [[0, 0, 600], [0, 0, 256]], None, 3, "smxx",
     [[0, 0], [1, 0], [2, 0], [4, 0]]),
    ("varlen-smxx", [[10], [20], [300], [5], [600]], [0, 0, 0, 1, 2], 4, "smxx",
     [[0, 0], [2, 1], [4, 0], [4, 2], [5, 0]]),
    ("varlen-sm90", [[10], [20], [300], [5], [600]], [0, 0, 0, 1, 2], 4, "sm90",
     [[0, 0], [2, 0], [3, 0], [4, 1], [5, 0]]),
    ("all-zero-dense-sm90", [[0, 0]] * 32, None, 5, "sm90", [[32, 0]] * 6),
    ("all-zero-varlen", [[0]] * 32, list(range(32)), 2, "smxx", [[32, 0]] * 3),
]


@pytest.mark.parametrize("ctx,indices,num_sms,schedule,want", [h[1:] for h in HAND],
                         ids=[h[0] for h in HAND])
def test_hand_worked_schedules(ctx, indices, num_sms, schedule, want):
    idx = None if indices is None else torch.tensor(indices, dtype=I32)
    got = get(torch.tensor(ctx, dtype=I32), 64, num_sms, idx, schedule=schedule)
    assert got.tolist() == want
    assert spec_schedule(ctx, num_sms, indices, 256, schedule) == [tuple(r) for r in want]


@pytest.mark.parametrize("schedule", FORMATS)
def test_out_is_filled_and_returned(schedule):
    rng = random.Random(SEED)
    for case in range(40):
        ctx, indices, split_kv, block_kv, num_sms = _random_case(rng)
        out = torch.full((num_sms + 1, 2), -7, dtype=I32)
        res = get(ctx, block_kv, num_sms, indices, out=out, split_kv=split_kv,
                  schedule=schedule)
        assert res is out, f"{SEED_NOTE} case {case}"
        want = oracle(ctx, num_sms, indices, split_kv, schedule)
        assert torch.equal(out, want), f"{SEED_NOTE} case {case}"


# --- bad input: TypeError / ValueError naming the argument -------------------------------

def _good():
    return dict(context_lens=torch.ones(8, 1, dtype=I32), block_kv=64, num_sms=4,
                indices=None, out=None, split_kv=256, schedule="smxx")


def _call(**changes):
    kw = _good() | changes
    return get(kw.pop("context_lens"), kw.pop("block_kv"), kw.pop("num_sms"),
               kw.pop("indices"), **kw)


BAD = [
    # context_lens
    ("ctx-list", dict(context_lens=[[1], [2]]), TypeError, "context_lens"),
    ("ctx-int64", dict(context_lens=torch.ones(8, 1, dtype=torch.int64)), TypeError,
     "context_lens"),
    ("ctx-float", dict(context_lens=torch.ones(8, 1)), TypeError, "context_lens"),
    ("ctx-uint32", dict(context_lens=torch.ones(8, 1, dtype=torch.uint32)), TypeError,
     "context_lens"),
    ("ctx-rank3", dict(context_lens=torch.ones(2, 2, 2, dtype=I32)), ValueError,
     "context_lens"),
    ("ctx-rank0", dict(context_lens=torch.tensor(5, dtype=I32)), ValueError,
     "context_lens"),
    ("ctx-noncontig", dict(context_lens=torch.ones(4, 8, dtype=I32)[:, ::2]), ValueError,
     "context_lens"),
    ("ctx-transposed", dict(context_lens=torch.ones(3, 8, dtype=I32).t()), ValueError,
     "context_lens"),
    ("ctx-empty", dict(context_lens=torch.ones(0, 1, dtype=I32)), ValueError,
     "context_lens"),
    ("ctx-next_n-0", dict(context_lens=torch.ones(8, 0, dtype=I32)), ValueError,
     "context_lens"),
    # num_sms
    ("num_sms-0", dict(num_sms=0), ValueError, "num_sms"),
    ("num_sms-neg", dict(num_sms=-3), ValueError, "num_sms"),
    ("num_sms-float", dict(num_sms=4.0), TypeError, "num_sms"),
    ("num_sms-str", dict(num_sms="4"), TypeError, "num_sms"),
    ("num_sms-None", dict(num_sms=None), TypeError, "num_sms"),
    ("num_sms-True", dict(num_sms=True), TypeError, "num_sms"),
    # a 0-d tensor has __index__; taking it would read (on CUDA: synchronize on) a
    # device value for a host-side size
    ("num_sms-tensor", dict(num_sms=torch.tensor(4)), TypeError, "num_sms"),
    # block_kv / split_kv
    ("block_kv-not-dividing", dict(block_kv=96), ValueError, "block_kv"),
    ("block_kv-larger", dict(block_kv=512), ValueError, "block_kv"),
    ("block_kv-0", dict(block_kv=0), ValueError, "block_kv"),
    ("block_kv-float", dict(block_kv=64.0), TypeError, "block_kv"),
    ("block_kv-bool", dict(block_kv=True), TypeError, "block_kv"),
    ("split_kv-0", dict(split_kv=0), ValueError, "split_kv"),
    ("split_kv-str", dict(split_kv="256"), TypeError, "split_kv"),
    ("split_kv-not-multiple", dict(split_kv=100), ValueError, "block_kv"),
    # schedule
    ("schedule-bad", dict(schedule="sm120"), ValueError, "schedule"),
    ("schedule-case", dict(schedule="SMXX"), ValueError, "schedule"),
    ("schedule-None", dict(schedule=None), ValueError, "schedule"),
    # indices
    ("indices-list", dict(indices=[0] * 8), TypeError, "indices"),
    ("indices-int64", dict(indices=torch.zeros(8, dtype=torch.int64)), TypeError, "indices"),
    ("indices-short", dict(indices=torch.zeros(7, dtype=I32)), ValueError, "indices"),
    ("indices-long", dict(indices=torch.zeros(9, dtype=I32)), ValueError, "indices"),
    ("indices-2d", dict(indices=torch.zeros(8, 1, dtype=I32)), ValueError, "indices"),
    ("indices-noncontig", dict(indices=torch.zeros(16, dtype=I32)[::2]), ValueError,
     "indices"),
    ("indices-with-next_n-2", dict(context_lens=torch.ones(8, 2, dtype=I32),
                                   indices=torch.zeros(8, dtype=I32)), ValueError, "next_n"),
    ("indices-meta", dict(indices=torch.zeros(8, dtype=I32, device="meta")), ValueError,
     "indices"),
    # out
    ("out-list", dict(out=[[0, 0]] * 5), TypeError, "out"),
    ("out-rows", dict(out=torch.zeros(4, 2, dtype=I32)), ValueError, "out"),
    ("out-cols", dict(out=torch.zeros(5, 3, dtype=I32)), ValueError, "out"),
    ("out-flat", dict(out=torch.zeros(10, dtype=I32)), ValueError, "out"),
    ("out-int64", dict(out=torch.zeros(5, 2, dtype=torch.int64)), TypeError, "out"),
    ("out-noncontig", dict(out=torch.zeros(2, 5, dtype=I32).t()), ValueError, "out"),
    ("out-misaligned", dict(out=torch.zeros(11, 2, dtype=I32).view(-1)[1:11].view(5, 2)),
     ValueError, "out"),
    ("out-meta", dict(out=torch.zeros(5, 2, dtype=I32, device="meta")), ValueError, "out"),
]


def _bad_params():
    for b in BAD:
        if hasattr(b, "marks"):  # a pytest.param carrying marks
            yield pytest.param(*b.values[1:], id=b.values[0], marks=b.marks)
        else:
            yield pytest.param(*b[1:], id=b[0])


@pytest.mark.parametrize("changes,exc,name", list(_bad_params()))
def test_bad_input_raises_naming_the_argument(changes, exc, name):
    with pytest.raises(exc) as info:
        _call(**changes)
    assert type(info.value) in (TypeError, ValueError), type(info.value)
    assert name in str(info.value), str(info.value)


def test_messages_say_what_was_given():
    with pytest.raises(TypeError, match="int64"):
        _call(context_lens=torch.ones(8, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"\(2, 2, 2\)"):
        _call(context_lens=torch.ones(2, 2, 2, dtype=I32))
    with pytest.raises(ValueError, match="block_kv=96.*split_kv=256"):
        _call(block_kv=96)
    with pytest.raises(ValueError, match=r"\[5, 2\].*\(4, 2\)"):
        _call(out=torch.zeros(4, 2, dtype=I32))
    with pytest.raises(ValueError, match="next_n = 2"):
        _call(context_lens=torch.ones(8, 2, dtype=I32), indices=torch.zeros(8, dtype=I32))
    with pytest.raises(ValueError, match="'sm120'"):
        _call(schedule="sm120")
    with pytest.raises(TypeError, match="bool"):
        _call(num_sms=True)


def test_context_lens_on_unsupported_device_raises_naming_it():
    """A meta tensor is neither CPU (reference path) nor CUDA (kernel path)."""
    ctx = torch.ones(8, 1, dtype=I32, device="meta")
    with pytest.raises((TypeError, ValueError)) as info:
        get(ctx, 64, 4)
    assert "context_lens" in str(info.value), str(info.value)


def test_bad_input_raises_before_any_work_in_check_mode():
    with envs.override(JITMETA_CHECK_INPUTS="1"):
        with pytest.raises(ValueError, match="num_sms"):
            _call(context_lens=torch.full((4, 1), -1, dtype=I32), num_sms=0)


def test_num_sms_larger_than_batch_and_large():
    ctx = _ctx([1000], [5])
    for num_sms in (1, 2, 3, 4096, 5000):
        for schedule in FORMATS:
            got = get(ctx, 64, num_sms, schedule=schedule)
            assert got.shape == (num_sms + 1, 2)
            assert torch.equal(got, oracle(ctx, num_sms, schedule=schedule))
            assert got[-1].tolist() == [2, 0]


# --- value checks: always on the CPU path ------------------------------------------------
#
# The CPU path reads the values anyway, so it always checks them (JITMETA_CHECK_INPUTS
# only decides whether the CUDA path synchronizes to do so: test_gpu_serving.py).

@pytest.mark.parametrize("knob", [None, "0", "1"], ids=["unset", "off", "on"])
def test_cpu_path_rejects_negative_lengths(knob):
    with envs.override(JITMETA_CHECK_INPUTS=knob):
        with pytest.raises(jitmeta.InputValueError, match="-5"):
            get(_ctx([3], [-5], [7]), 64, 4)
        with pytest.raises(jitmeta.InputValueError, match="context_lens"):
            get(_ctx([3, 1], [4, -1]), 64, 4)
        with pytest.raises(jitmeta.InputValueError, match="element 1"):
            get(_ctx([3], [-1]), 64, 4, torch.tensor([0, 1], dtype=I32))
        out = torch.full((5, 2), -7, dtype=I32)
        with pytest.raises(jitmeta.InputValueError):
            get(_ctx([3], [-1]), 64, 4, out=out)
        assert (out == -7).all()  # nothing written
    assert issubclass(jitmeta.InputValueError, ValueError)


@pytest.mark.parametrize("knob", [None, "0", "1"], ids=["unset", "off", "on"])
def test_cpu_path_rejects_uint32_overflow(knob):
    big = INT32_MAX
    with envs.override(JITMETA_CHECK_INPUTS=knob):
        # 3 x (2^31 - 1) kv splits of 1 token > 2^32 - 1
        with pytest.raises(jitmeta.InputValueError, match="uint32|4294967295"):
            get(_ctx([big], [big], [big]), 1, 4, split_kv=1)
        # one request, next_n 5 -> 3 atoms: 3 x (2^31 - 1) > 2^32 - 1
        with pytest.raises(jitmeta.InputValueError):
            get(_ctx([0, 0, 0, 0, big]), 1, 4, split_kv=1)
        # varlen: three single-token atoms of 2^31 - 1 each
        with pytest.raises(jitmeta.InputValueError):
            get(_ctx([big], [big], [big]), 1, 4, torch.tensor([0, 1, 2], dtype=I32),
                split_kv=1)


def test_cpu_path_accepts_totals_that_fit():
    big = INT32_MAX
    # exactly 2^32 - 1 = (2^31 - 1) + (2^31 - 1) + 1 splits: fits
    ctx = _ctx([big], [big], [1])
    assert torch.equal(get(ctx, 1, 4, split_kv=1), oracle(ctx, 4, split_kv=1))
    # next_n 3 -> 2 atoms: 2 x (2^31 - 1) = 2^32 - 2 splits: fits
    ctx = _ctx([0, 0, big])
    assert torch.equal(get(ctx, 1, 4, split_kv=1), oracle(ctx, 4, split_kv=1))
    # default split_kv: no overflow at all
    ctx = _ctx([big], [big], [big])
    assert torch.equal(get(ctx, 64, 4), oracle(ctx, 4))


def test_check_inputs_knob_accepts_good_random_input():
    rng = random.Random(SEED)
    with envs.override(JITMETA_CHECK_INPUTS="1"):
        for case in range(100):
            ctx, indices, split_kv, block_kv, num_sms = _random_case(rng)
            got = get(ctx, block_kv, num_sms, indices, split_kv=split_kv)
            want = oracle(ctx, num_sms, indices, split_kv)
            assert torch.equal(got, want), f"{SEED_NOTE} case {case}"


def test_value_check_counts_varlen_atoms_not_tokens():
    """Varlen pairs two tokens of a request into one atom with the second's length.

    Tokens [2^31-1, 2^31-1, 2^31-1] with indices [0, 0, 1] form two atoms, so the
    total is 2 x (2^31 - 1) = 2^32 - 2 kv splits: it fits uint32 and must not raise.
    """
    big = INT32_MAX
    ctx = _ctx([big], [big], [big])
    idx = torch.tensor([0, 0, 1], dtype=I32)
    assert torch.equal(get(ctx, 1, 4, idx, split_kv=1), oracle(ctx, 4, idx, split_kv=1))


def test_check_inputs_knob_is_off_by_default():
    with envs.override(JITMETA_CHECK_INPUTS=None):
        assert envs.get("JITMETA_CHECK_INPUTS") is False
        assert envs.snapshot().check_inputs is False
    with envs.override(JITMETA_CHECK_INPUTS="1"):
        assert envs.snapshot().check_inputs is True


def test_check_values_directly():
    """validate.check_values(ctx2, indices, split_kv, schedule): the checks themselves."""
    from jitmeta.validate import check_values

    big = INT32_MAX
    check_values(_ctx([big], [big], [1]), None, 1, "smxx")  # 2^32 - 1: fits
    for schedule in ("smxx", "sm90"):
        with pytest.raises(jitmeta.InputValueError, match="4294967295"):
            check_values(_ctx([big], [big], [2]), None, 1, schedule)
    with pytest.raises(jitmeta.InputValueError, match="element 3"):
        check_values(_ctx([1, 2], [3, -4]), None, 256, "smxx")
    # varlen: counted per atom, not per token
    check_values(_ctx([big], [big], [big]), torch.tensor([0, 0, 1], dtype=I32), 1, "smxx")
