"""Hugging Face Hub ids: fetched with ``huggingface_hub`` into the workspace's model cache."""

from __future__ import annotations

import os
from pathlib import Path

from engine.pretrained.store import PretrainedError, models_root

ALLOW = ["config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
         "vocab.txt", "special_tokens_map.json"]


def hub_cache(workspace=None) -> Path:
    """``<workspace>/models/.hub-cache``: what the Hub fetches are kept in."""
    return models_root(workspace) / ".hub-cache"


def fetch(repo_id: str, workspace=None) -> Path:
    """The folder of the Hub model ``repo_id`` (safetensors weights and the files beside them).

    Raises:
        PretrainedError: offline (``HF_HUB_OFFLINE=1`` or no network), or the Hub refused the id;
            the message says how to import a downloaded folder instead.
    """
    offline_hint = (f"download it elsewhere (hf download {repo_id} --local-dir DIR) and import the "
                    f"folder: python -m engine models import DIR --name NAME")
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        raise PretrainedError(f"{repo_id}: HF_HUB_OFFLINE is set, so the Hub is not asked; {offline_hint}")
    try:
        from huggingface_hub import snapshot_download  # noqa: PLC0415 (huggingface_hub is needed only for a Hub download)
    except ImportError:
        raise PretrainedError(f"{repo_id}: huggingface_hub is not installed; {offline_hint}") from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=ALLOW, cache_dir=str(hub_cache(workspace))))
    except Exception as e:  # noqa: BLE001 (network, auth and not-found errors of several libraries)
        raise PretrainedError(f"{repo_id}: could not be fetched from the Hugging Face Hub ({type(e).__name__}); "
                              f"{offline_hint}") from e
