"""Scorers: official benchmark evaluators and judges."""
