#!/usr/bin/env python3
"""Shows which pages Linux's PAGEMAP_SCAN reports as written with and without
PAGE_IS_PRESENT in the category mask: the reason `faas` stays on Wasmtime 48.

Maps 4 MiB of anonymous memory, writes pages 0-2, 100 and 300, reads page 500 (the
zero page), and scans the way Wasmtime resets a pool slot (written, not the zero page,
not a file page). Wasmtime 48 also requires PRESENT; Wasmtime 50.0.1 dropped it so that
swapped-out pages are reset too, and on Linux 6.18 the untouched pages of a populated
page table then match as well, so every event resets (and faults in) pages it never
touched. Asking for pages present *or* swapped (`category_anyof_mask`) keeps both the
swap fix and the short answer. README, "Performance", has the benchmark figures.

    python3 bench/pagemap-scan-probe.py
"""
import ctypes
import fcntl
import os
import struct

PAGE = os.sysconf("SC_PAGE_SIZE")
PAGES = 1024
WRITTEN, FILE, PRESENT, SWAPPED, PFNZERO = 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5
# _IOWR('f', 16, struct pm_scan_arg), the argument being 12 u64s.
PAGEMAP_SCAN = (3 << 30) | (96 << 16) | (ord("f") << 8) | 16
MAX_REGIONS = 64

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
PROT_READ_WRITE, MAP_PRIVATE_ANONYMOUS = 3, 0x22
base = libc.mmap(None, PAGES * PAGE, PROT_READ_WRITE, MAP_PRIVATE_ANONYMOUS, -1, 0)
if base in (None, ctypes.c_void_p(-1).value):
    raise SystemExit(f"mmap failed: {os.strerror(ctypes.get_errno())}")
memory = (ctypes.c_char * (PAGES * PAGE)).from_address(base)
for page in (0, 1, 2, 100, 300):
    memory[page * PAGE] = b"x"
_ = memory[500 * PAGE]


def scan(mask: int, any_of: int = 0) -> list[tuple[int, int]]:
    """The page ranges the kernel reports for `mask` (PFNZERO and FILE inverted) and,
    if given, at least one category of `any_of`."""
    regions = (ctypes.c_uint64 * (3 * MAX_REGIONS))()
    arg = bytearray(struct.pack("12Q", 96, 0, base, base + PAGES * PAGE, 0,
                                ctypes.addressof(regions), MAX_REGIONS, 0,
                                PFNZERO | FILE, mask, any_of, 0))
    pagemap = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        found = fcntl.ioctl(pagemap, PAGEMAP_SCAN, arg)
    except OSError as err:
        raise SystemExit(f"PAGEMAP_SCAN failed ({err}): it needs Linux 6.7 or later")
    finally:
        os.close(pagemap)
    return [((regions[3 * i] - base) // PAGE, (regions[3 * i + 1] - base) // PAGE)
            for i in range(found)]


print(f"Linux {os.uname().release}; pages written: 0-2, 100, 300; page 500 read")
print("written and present (Wasmtime 48):   ", scan(WRITTEN | PRESENT | PFNZERO | FILE))
print("written, present or not (50.0.1):    ", scan(WRITTEN | PFNZERO | FILE))
print("written, and present or swapped:     ",
      scan(WRITTEN | PFNZERO | FILE, any_of=PRESENT | SWAPPED))
