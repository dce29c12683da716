"""gpugate's rules and everything they need. Pure: no network I/O."""
