"""engine.runner.execution.configure_torch: train.deterministic on and off, and the default run's
worker not paying for torch._inductor's import (1 to 2.5 s a process) to switch off what is off."""

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
