"""Byte storage behind one interface: the local disk by default, memory for tests."""
