"""The group coordinator: classic consumer groups, committed offsets, KIP-447 fencing."""
