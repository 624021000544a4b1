"""The xgboost device the learned policies run on: asking for one that is not there is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from ripplecp_policy.learned import DEVICES, check_device


def test_cpu_is_always_there_and_other_names_are_refused() -> None:
    assert DEVICES == ("cpu", "cuda")
    check_device("cpu")
    with pytest.raises(ValueError, match="device must be cpu or cuda, got 'tpu'"):
        check_device("tpu")


def test_cuda_only_where_xgboost_finds_a_gpu() -> None:
    """No NVIDIA device node: xgboost would fall back to the CPU, so ``cuda`` is an error;
    with one, xgboost trains on it."""
    if not Path("/dev/nvidia0").exists():
        with pytest.raises(ValueError, match="cuda: .*(finds no GPU|without CUDA)"):
            check_device("cuda")
    else:
        check_device("cuda")
