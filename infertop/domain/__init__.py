"""Plain value types shared by every layer. No I/O, no imports of infertop."""
