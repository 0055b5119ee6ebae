# The compiled twin of lockgate.client._purecolumns: the same class (see _columns.c).
from lockgate.client._purecolumns import ColumnBuilder as ColumnBuilder

IMPLEMENTATION: str
