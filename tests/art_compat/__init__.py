"""Tests of art_compat."""
