# setup.py — only the producer's compiled fast path (lockgate/client/_fastpath.c, chosen by
# lockgate/client/fastpath.py); everything else is declared in pyproject.toml. The extension is
# optional: without a compiler the install goes on and the pure-Python twin does the work.
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lockgate.client._fastpath",
            sources=["src/lockgate/client/_fastpath.c"],
            optional=True,
        )
    ]
)
