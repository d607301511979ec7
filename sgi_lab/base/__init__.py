"""Shared low helpers every layer may use: atomic files, JSON lines, paths, threads, errors."""
