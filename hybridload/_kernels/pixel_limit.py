"""The decompression-bomb guard every decode path shares (the full decode, the structure check
and the crop window's library), below the modules that use it."""

from __future__ import annotations

#: Images with more pixels than this are refused (a decompression-bomb guard; Pillow's limit).
MAX_IMAGE_PIXELS = 178_956_970
