"""Tests of inference."""
