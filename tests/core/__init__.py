"""Tests of `tfp_adaptive.core`."""
