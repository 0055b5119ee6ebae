# Process lifecycle: logging, event loop choice, signals, and a clean stop on SIGTERM/SIGINT.
from __future__ import annotations

import asyncio
import logging
import signal

from lockgate.config.properties import BrokerConfig
from lockgate.server.broker import Broker
from lockgate.server.log_format import log_handler

log = logging.getLogger(__name__)


def configure_logging(level: str = "INFO", log_format: str = "plain") -> None:
    """Root logging to stderr as plain text or JSON lines (log_format.py)."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO), handlers=[log_handler(log_format)]
    )


async def serve(config: BrokerConfig) -> None:
    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await broker.start()
    await stop.wait()
    await broker.stop()


def run(config: BrokerConfig) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(config))
    else:
        uvloop.run(serve(config))
