"""Partition logs: segments, indexes, leader epochs, producer state."""
