"""The kernel-facing layer: what the kernel says about BPF programs and BTF.

Each kind of kernel object is asked about in one place, so capture and
symbolization read the same facts the same way (see docs/architecture.md).
"""
