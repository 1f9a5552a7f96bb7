"""The emulated node state, its tools, and the fabric model."""
