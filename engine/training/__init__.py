"""The training loop and what it needs: schedules, optimiser and speed helpers."""
