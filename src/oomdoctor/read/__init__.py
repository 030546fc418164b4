"""Bytes to lines: read a log in bounded memory and normalise what is kept.

* ``reader``        — whole small logs; regions of large or compressed ones, with notes on
  what was dropped or damaged;
* ``regions``       — which regions a large log keeps (head, tail, the latest failure's
  window always; repeated messages and the middle dropped first);
* ``inflate``       — gz/bz2/xz/zst read as far as they decompress (truncated, damaged,
  trailing garbage), with a cap on the inflated size;
* ``sniff``         — text or binary: byte-order marks (UTF-16/32), NUL runs, printable share;
* ``pull``          — the stream plumbing the inflating and transcoding readers share;
* ``remote``        — fsspec URLs (s3://, memory://, file:// ...) opened where a path is taken;
* ``prefilter``     — the multi-literal anchor search (Hyperscan, or pure Python);
* ``literals``      — the literals every match of a regex must hold (gates before regexes);
* ``literal_index`` — which lines hold which literals, answered by one pass over a log;
* ``normalise``     — ANSI, timestamps, logger headers, rank prefixes, progress bars; original
  line numbers kept.
"""
