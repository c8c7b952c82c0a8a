"""Reproductions of published tables and figures, one module each."""
