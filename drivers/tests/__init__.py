"""Tests of recap_drivers (unittest; pytest runs them too)."""
