"""Example functions with Triton kernels (GPU only)."""
