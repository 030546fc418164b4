"""Renderers: text (terminal), markdown (issues), json (tools). They read only the Report."""
