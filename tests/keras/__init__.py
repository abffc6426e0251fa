"""Tests of `tfp_adaptive.keras`."""
