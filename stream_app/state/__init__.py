"""A partition's state: the domain's tables (tables.py), the leagues as apply.apply
reads and writes them over those tables (league_tables.py), and the memory backend the
replay keeps them in (memory.py); the stream keeps them in its transaction over
RocksDB (stream/transaction.py)."""
