"""Tests of `tfp_adaptive.mcmc`."""
