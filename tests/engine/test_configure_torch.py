"""What a worker process pays before its first step: engine.runner.execution.configure_torch with
train.deterministic on and off, the default run not importing torch._inductor (1 to 2.5 s a process)
to switch off what is off, and the worker's and the CLI's imports leaving out the libraries only
some runs or readers need (pandas 0.25 s, scikit-image's segmentation with scipy.cluster 0.5 s)."""

from __future__ import annotations

import subprocess
import sys

import torch

from engine.runner.execution import configure_torch


def test_deterministic_is_switched_on_and_back_off():
    threads = torch.get_num_threads()
    try:
        configure_torch(1, True)
        import torch._inductor.config as inductor_config  # noqa: PLC0415 (the call above imported it; read its flag)

        assert torch.are_deterministic_algorithms_enabled() and inductor_config.deterministic
        configure_torch(1, False)
        assert not torch.are_deterministic_algorithms_enabled() and not inductor_config.deterministic
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)


def test_a_default_run_does_not_import_the_compiler():
    code = ("import sys; from engine.runner.execution import configure_torch; n = configure_torch(1, False); "
            "print(n, 'torch._inductor' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["1", "False"], out


def test_a_worker_and_the_cli_start_without_pandas_and_superpixels():
    code = ("import sys; import engine.runner.worker, engine.runner.execution, engine.cli, engine.api; "
            "print([m for m in ('pandas', 'skimage.segmentation', 'scipy.cluster') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out
