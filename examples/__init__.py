"""Examples built on the framework and its layers (not part of the core)."""
