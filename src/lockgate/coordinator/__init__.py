"""Coordinators: pure state machines plus the glue that logs and applies their transitions."""
