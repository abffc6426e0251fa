"""Tests of `tfp_adaptive.diagnostics`."""
