"""Plug-in modules loaded through $MASKLAB_PLUGINS by tests (defined here, never under engine/)."""
