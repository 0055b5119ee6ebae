# setup.py — only the compiled fast paths: the producer's (lockgate/client/_fastpath.c, chosen by
# lockgate/client/fastpath.py), the Fetch decoder into Arrow columns (lockgate/client/_columns.c,
# chosen by lockgate/client/columns.py) and the decoding of a batch's records
# (lockgate/protocol/_records.c, chosen by lockgate/protocol/fastpath.py); everything else is
# declared in pyproject.toml. The extensions are optional: without a compiler the install goes
# on and the pure-Python twins do the work.
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lockgate.client._fastpath",
            sources=["src/lockgate/client/_fastpath.c"],
            optional=True,
        ),
        Extension(
            "lockgate.client._columns",
            sources=["src/lockgate/client/_columns.c"],
            optional=True,
        ),
        Extension(
            "lockgate.protocol._records",
            sources=["src/lockgate/protocol/_records.c"],
            optional=True,
        ),
    ]
)
