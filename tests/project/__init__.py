"""Tests of the project as users meet it: documentation, examples, snippets, benchmarks, argument checks."""
