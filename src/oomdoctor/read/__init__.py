"""Bytes to lines: read a log in bounded memory and normalise what is kept.

* ``reader``        — whole small logs; regions of large or compressed ones (head, tail,
  windows around anchors), with notes on what was dropped or damaged;
* ``prefilter``     — the multi-literal anchor search (Hyperscan, or pure Python);
* ``literals``      — the literals every match of a regex must hold (gates before regexes);
* ``literal_index`` — which lines hold which literals, answered by one pass over a log;
* ``normalise``     — ANSI, timestamps, logger headers, rank prefixes, progress bars; original
  line numbers kept.
"""
