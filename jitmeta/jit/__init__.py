"""Compile (NVRTC), cache (disk + memory) and run (driver) the generated kernels."""
