"""Benchmarks: per-call overhead of warp-interop against the alternatives a user would pick."""
