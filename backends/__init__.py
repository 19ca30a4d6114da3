"""Backends (CPU via llvmlite, PTX, CUDA) arrive with later issues."""
