"""The strict argument checks of the public entry points (``jitmeta.plan``,
``jitmeta.reference_schedule``, ``jitmeta.get_paged_mqa_logits_metadata``,
``jitmeta.warm``) and of ``jitmeta.validate`` and ``jitmeta.args``.

Every bad argument raises TypeError or ValueError naming the argument, what was
expected and what was given, before anything is planned, allocated or compiled: never a
ZeroDivisionError, an AssertionError, a huge allocation or a dump of an array. NumPy
integers are integers. CPU only: results are checked against ``tests/spec_oracle.py``.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import jitmeta
from jitmeta import args
from jitmeta.args import MAX_NUM_SMS, MAX_SPLIT_KV

from spec_oracle import spec_schedule

I32 = torch.int32
get = jitmeta.get_paged_mqa_logits_metadata
CTX = torch.tensor([[300], [0], [512], [1]], dtype=I32)
# CTX with split_kv 256 and 3 SMs, by hand: segs [2, 0, 2, 1], total 5, starts [0, 2, 4, 5]
CTX_SMXX_3 = [[0, 0], [2, 0], [3, 0], [4, 0]]


def as_rows(t: torch.Tensor) -> list[tuple[int, int]]:
    return [tuple(r) for r in t.tolist()]


@pytest.fixture
def no_schedule_work(monkeypatch):
    """Any schedule computation fails the test: a bad argument must be refused first
    (so a huge num_sms is never allocated)."""
    from jitmeta import api, dispatch

    def refuse(*args, **kwargs):
        raise AssertionError("a schedule was computed for a bad argument")

    monkeypatch.setattr(api, "_reference", refuse)
    monkeypatch.setattr(dispatch, "reference_schedule", refuse)
    monkeypatch.setattr(dispatch, "prepare", refuse)


# --- jitmeta.plan ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(batch=100, num_sms=0), ValueError, ["num_sms", "got 0"]),
    (dict(batch=100, num_sms=-3), ValueError, ["num_sms", "got -3"]),
    (dict(batch=100, num_sms=2**31), ValueError, ["num_sms", str(MAX_NUM_SMS)]),
    (dict(batch=100, num_sms=4.0), TypeError, ["num_sms", "float"]),
    (dict(batch=10.5), TypeError, ["batch", "10.5"]),
    (dict(batch="10"), TypeError, ["batch", "str"]),
    (dict(batch=0), ValueError, ["batch", ">= 1"]),
    (dict(batch=True), TypeError, ["batch", "bool"]),
    (dict(batch=10, next_n=0), ValueError, ["next_n"]),
    (dict(batch=10, varlen="no"), TypeError, ["varlen", "'no'"]),
    (dict(batch=10, varlen=1), TypeError, ["varlen", "bool"]),
    (dict(batch=10, next_n=2, varlen=True), ValueError, ["next_n"]),
    (dict(batch=10, split_kv=0), ValueError, ["split_kv"]),
    (dict(batch=10, split_kv=2**31), ValueError, ["split_kv", str(MAX_SPLIT_KV)]),
    (dict(batch=10, schedule="sm120"), ValueError, ["schedule", "'sm120'"]),
    (dict(batch=10, schedule=None), ValueError, ["schedule"]),
    (dict(batch=10, arch="sm_90", device=0), ValueError, ["arch or device"]),
    (dict(batch=10, arch="gfx90a"), ValueError, ["gfx90a"]),
])
def test_plan_rejects_bad_arguments_by_name(kwargs, exc, words):
    kwargs = dict(kwargs)
    batch = kwargs.pop("batch")
    if "device" not in kwargs:
        kwargs.setdefault("arch", "sm_90")  # no GPU needed
    with pytest.raises(exc) as info:
        jitmeta.plan(batch, **kwargs)
    assert type(info.value) is exc
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_plan_accepts_numpy_integers():
    p = jitmeta.plan(np.int64(100), np.int32(1), num_sms=np.int64(64), split_kv=np.int64(128),
                     arch="sm_90")
    assert (p.batch, p.num_sms, p.code.split_kv) == (100, 64, 128)
    assert type(p.batch) is int and type(p.num_sms) is int and type(p.code.split_kv) is int
    assert p == jitmeta.plan(100, 1, num_sms=64, split_kv=128, arch="sm_90")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only torch message")
def test_device_on_cpu_only_torch_says_a_gpu_is_needed():
    for call in (lambda: jitmeta.plan(100, device=0),
                 lambda: jitmeta.warm(device=0)):
        with pytest.raises(RuntimeError, match="needs a CUDA GPU") as info:
            call()
        assert "arch=" in str(info.value)  # what to do instead
    with pytest.raises(ValueError, match="device"):
        jitmeta.plan(100, device=-1)
    with pytest.raises(TypeError, match="device"):
        jitmeta.plan(100, device="cuda:0")


# --- jitmeta.warm ---------------------------------------------------------------------------

def test_warm_stays_the_function_whatever_was_imported_first():
    """Importing the module behind ``jitmeta.warm`` (for WarmResult, say) must not
    replace the public function by a module (a fresh interpreter: nothing imported)."""
    script = ("import jitmeta.warmup\nfrom jitmeta.warmup import WarmResult\n"
              "import jitmeta\nassert callable(jitmeta.warm), jitmeta.warm\n"
              "assert jitmeta.warm is jitmeta.warmup.warm\nprint('ok')\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


@pytest.mark.parametrize("kwargs,exc,name", [
    (dict(varlen=("yes",)), TypeError, "varlen"),
    (dict(varlen=True), TypeError, "varlen"),
    (dict(num_sms=0), ValueError, "num_sms"),
    (dict(num_sms=2**40), ValueError, "num_sms"),
    (dict(next_n=(0,)), ValueError, "next_n"),
    (dict(next_n=2), TypeError, "next_n"),
    (dict(schedules=("sm120",)), ValueError, "schedules"),
    (dict(schedules="smxx"), TypeError, "schedules must be a sequence"),
    (dict(split_kv=2**31), ValueError, "split_kv"),
    (dict(jobs=0), ValueError, "jobs"),
    (dict(load=True), ValueError, "device"),
])
def test_warm_rejects_bad_arguments_before_compiling(kwargs, exc, name, fresh_jit):
    with pytest.raises(exc, match=name):
        jitmeta.warm("sm_90", batches="1-100", **kwargs)
    assert fresh_jit.stats()["compiles"] == 0 and fresh_jit.stats()["misses"] == 0


# --- jitmeta.reference_schedule ---------------------------------------------------------------

@pytest.mark.parametrize("num_sms,exc,words", [
    (0, ValueError, ["num_sms", "got 0"]),
    (-1, ValueError, ["num_sms", "got -1"]),
    (2**31, ValueError, ["num_sms", str(MAX_NUM_SMS), str(2**31)]),
    (2**63, ValueError, ["num_sms", str(MAX_NUM_SMS)]),
    (MAX_NUM_SMS + 1, ValueError, ["num_sms", str(MAX_NUM_SMS)]),
    (1.0, TypeError, ["num_sms", "float"]),
    (None, TypeError, ["num_sms"]),
])
def test_reference_schedule_checks_num_sms(num_sms, exc, words, no_schedule_work):
    with pytest.raises(exc) as info:
        jitmeta.reference_schedule(CTX, num_sms)
    assert type(info.value) is exc  # not ZeroDivisionError / MemoryError
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.parametrize("kwargs,exc,name", [
    (dict(split_kv=2**31), ValueError, "split_kv"),
    (dict(split_kv=2**40), ValueError, "split_kv"),
    (dict(split_kv=0), ValueError, "split_kv"),
    (dict(split_kv=256.0), TypeError, "split_kv"),
    (dict(schedule="sm120"), ValueError, "schedule"),
    (dict(schedule=["smxx"]), ValueError, "schedule"),
])
def test_reference_schedule_checks_split_kv_and_schedule(kwargs, exc, name, no_schedule_work):
    with pytest.raises(exc, match=name):
        jitmeta.reference_schedule(CTX, 3, **kwargs)


def test_reference_schedule_bounds_are_inclusive():
    assert as_rows(jitmeta.reference_schedule(CTX, 3, split_kv=256)) \
        == spec_schedule(CTX.tolist(), 3) == [tuple(r) for r in CTX_SMXX_3]
    # split_kv at its bound: every non-empty request is one split
    ctx = torch.tensor([[5], [0], [2**31 - 1]], dtype=I32)
    assert as_rows(jitmeta.reference_schedule(ctx, 2, split_kv=MAX_SPLIT_KV)) \
        == spec_schedule(ctx.tolist(), 2, split_kv=MAX_SPLIT_KV)
    with pytest.raises(TypeError, match="context_lens"):
        jitmeta.reference_schedule(CTX.tolist(), 3)


# --- get_paged_mqa_logits_metadata ------------------------------------------------------------

@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(num_sms=2**31), ValueError, ["num_sms", str(MAX_NUM_SMS)]),
    (dict(num_sms=2**63), ValueError, ["num_sms", str(MAX_NUM_SMS)]),
    (dict(split_kv=2**31), ValueError, ["split_kv", str(MAX_SPLIT_KV)]),
    (dict(split_kv=2**62, block_kv=1), ValueError, ["split_kv"]),
    (dict(block_kv=np.float64(64)), TypeError, ["block_kv", "float"]),
])
def test_huge_sizes_are_refused_before_any_work(kwargs, exc, words, no_schedule_work):
    args = dict(block_kv=64, num_sms=3, split_kv=256) | kwargs
    with pytest.raises(exc) as info:
        get(CTX, args["block_kv"], args["num_sms"], split_kv=args["split_kv"])
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_numpy_integers_are_accepted():
    for kind in (np.int64, np.int32, np.uint16):
        got = get(CTX, kind(64), kind(3), split_kv=kind(256))
        assert as_rows(got) == [tuple(r) for r in CTX_SMXX_3], kind
        out = torch.empty(4, 2, dtype=I32)
        assert get(CTX, kind(64), kind(3), out=out, split_kv=kind(256)) is out
        assert as_rows(out) == [tuple(r) for r in CTX_SMXX_3], kind
    with pytest.raises(ValueError, match="block_kv"):
        get(CTX, np.int64(96), 3)  # 96 does not divide 256, numpy or not


@pytest.mark.parametrize("value", [np.arange(100_000, dtype=np.int32),
                                   np.arange(100_000, dtype=np.int32).reshape(-1, 2),
                                   list(range(100_000))], ids=["np-1d", "np-2d", "list"])
def test_a_non_tensor_context_lens_gives_a_short_message(value):
    with pytest.raises(TypeError) as info:
        get(value, 64, 4)
    msg = str(info.value)
    assert msg.startswith("context_lens must be a torch.Tensor"), msg
    assert len(msg) < 200, f"{len(msg)} characters: {msg[:300]}"
    assert "99999" not in msg  # no dump of the values
    if isinstance(value, np.ndarray):
        assert f"shape={value.shape}" in msg and "int32" in msg, msg


def test_int_arg_and_bool_arg():
    assert args.int_arg("x", np.int64(7)) == 7 and type(args.int_arg("x", np.int8(7))) is int
    assert args.int_arg("x", 5, 1, 5) == 5
    for bad, exc in ((True, TypeError), (7.0, TypeError), ("7", TypeError), (None, TypeError),
                     (0, ValueError), (6, ValueError)):
        with pytest.raises(exc, match="x must be") as info:
            args.int_arg("x", bad, 1, 5)
        assert "from 1 to 5" in str(info.value)
    assert args.bool_arg("flag", False) is False
    with pytest.raises(TypeError, match="flag must be a bool"):
        args.bool_arg("flag", np.bool_(True))
    with pytest.raises(TypeError, match="x must be an int"):
        args.int_arg("x", torch.tensor(3))  # a 0-d tensor has __index__ but is refused
    assert "shape=(3, 4)" in args.describe(torch.zeros(3, 4))
    assert len(args.describe("x" * 500)) < 100
