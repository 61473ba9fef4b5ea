"""A CPU-only build: no CUDA (the `nixl` meta package then takes whichever
nixl_cuXX is installed)."""

cuda = None
