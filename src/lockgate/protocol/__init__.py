"""Sans-IO Kafka wire protocol: frames, headers, message bodies and record batch headers.

Nothing in this package may import asyncio or touch a socket.
"""
