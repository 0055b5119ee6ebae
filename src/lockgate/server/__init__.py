"""The broker process: configuration, listener, connections, lifecycle."""
