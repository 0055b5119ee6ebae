"""Operator tools behind `lockgate topics|produce|consume`."""

from __future__ import annotations

import argparse


def register_tools(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds the tool subcommands (each module registers its own)."""
