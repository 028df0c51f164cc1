"""Bounded in-memory state: sliding windows and history ring buffers."""
