"""Portage integration: sync module implementation, hook entry points, fetch wrapper."""
