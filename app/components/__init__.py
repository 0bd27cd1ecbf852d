"""Reusable UI pieces for the pages: images and mask overlays, metric charts, the run table,
cached dataset views, URL state and the engine-error helper."""

from app.components.charts import counts_chart, ema, metrics_chart, render_metrics_chart, show_read_warnings
from app.components.errors import guarded, user_errors
from app.components.images import image_grid, image_rows, mask_overlay, recon_rows, upscale
from app.components.runs import (
    format_duration,
    run_label,
    run_table,
    runs_frame,
    runs_or_stop,
    short_label,
    status_badge,
    status_label,
    status_message,
)

__all__ = [
    "counts_chart", "ema", "format_duration", "guarded", "image_grid", "image_rows", "mask_overlay",
    "metrics_chart", "recon_rows", "render_metrics_chart", "run_label", "run_table", "runs_frame",
    "runs_or_stop", "short_label", "show_read_warnings", "status_badge", "status_label", "status_message",
    "upscale", "user_errors",
]
