# The compiled twin of lockgate.protocol._purerecords: the same functions (see _records.c).
from lockgate.protocol._purerecords import apply_offset_commits as apply_offset_commits
from lockgate.protocol._purerecords import decode_records as decode_records
from lockgate.protocol._purerecords import put_records as put_records
from lockgate.protocol._purerecords import unpack_fields as unpack_fields

IMPLEMENTATION: str
