# Process lifecycle: logging, event loop choice, signals, and a clean stop on SIGTERM/SIGINT.
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

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
    if config.flag("remote.log.storage.system.enable"):
        # the object store client's own threads may still finish a request of a task the stop
        # cancelled, and one that hands its result back while the interpreter finalizes
        # aborts the process (SIGABRT): the stop is complete, so the process ends here
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
