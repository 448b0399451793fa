"""Tests of envs."""
