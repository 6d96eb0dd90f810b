"""Code generation (render) and launch of the schedule kernels."""
