"""Screen sizes the grammar tests use (smart-resize model sizes noted where they are used)."""

HD, FHD, UHD, BIG, PHONE = (1280, 720), (1920, 1080), (3840, 2160), (5120, 2880), (1080, 2400)
