"""Measurement (guest): can every example program take a counter per basic block?

Bytecode instrumentation as a third coverage source: before load, insert at the
start of each basic block `lock *(u64 *)(counters + 8 * block) += 1`, then load
the result and read the verifier's answer. This script measures it on the real
examples: each object is loaded by libbpf as usual (maps created, relocations
applied), its final instructions (`bpf_program__insns`) are rewritten (jumps,
subprogram calls and callback references re-aimed; two registers dead at the
block's start, or spilled below the program's stack) and loaded again with
`bpf_prog_load`, without BTF line and function records (they would have to be
rewritten too) and with the verifier's log.

    pytest-lbr vm --kernel 6.12 --results /tmp/i --exec \
        "python bench/instrument_probe.py --out /tmp/i/6.12/instrument.json"

Prints one line per program: its blocks, instructions before and after, and the
verifier's verdict (its last log lines when it refused).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, save_json  # noqa: E402

__all__ = ["main"]

_LD_IMM64, _PSEUDO_MAP_VALUE, _PSEUDO_CALL, _PSEUDO_FUNC = 0x18, 2, 1, 4
_MAP_TYPE_ARRAY = 2
_LOG_SIZE = 1 << 22


class _LoadOpts(ctypes.Structure):
    """libbpf 1.1's struct bpf_prog_load_opts."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("attempts", ctypes.c_int),
        ("expected_attach_type", ctypes.c_int),
        ("prog_btf_fd", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_ifindex", ctypes.c_uint32),
        ("kern_version", ctypes.c_uint32),
        ("attach_btf_id", ctypes.c_uint32),
        ("attach_prog_fd", ctypes.c_uint32),
        ("attach_btf_obj_fd", ctypes.c_uint32),
        ("fd_array", ctypes.c_void_p),
        ("func_info", ctypes.c_void_p),
        ("func_info_cnt", ctypes.c_uint32),
        ("func_info_rec_size", ctypes.c_uint32),
        ("line_info", ctypes.c_void_p),
        ("line_info_cnt", ctypes.c_uint32),
        ("line_info_rec_size", ctypes.c_uint32),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_char_p),
    ]


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return (
        bytes([code, (src << 4) | dst])
        + off.to_bytes(2, "little", signed=True)
        + (imm & 0xFFFFFFFF).to_bytes(4, "little")
    )


def _uses_defs(ins: Any) -> tuple[set[int], set[int]]:
    """Registers an instruction reads and writes (calls: r1-r5 read, r0-r5 written)."""
    cls, op, mode = ins.code & 7, ins.code & 0xF0, ins.code & 0xE0
    x = bool(ins.code & 0x08)
    if ins.code == _LD_IMM64:
        return set(), {ins.dst}
    if cls == 0:  # LD_ABS / LD_IND
        return {6} | ({ins.src} if mode == 0x40 else set()), {0, 1, 2, 3, 4, 5}
    if cls == 1:
        return {ins.src}, {ins.dst}
    if cls == 2:
        return {ins.dst}, set()
    if cls == 3:
        if mode == 0xC0:  # atomics: FETCH writes src back, CMPXCHG uses and writes r0
            if ins.imm == 0xF1:
                return {ins.dst, ins.src, 0}, {0}
            return {ins.dst, ins.src}, ({ins.src} if ins.imm & 1 else set())
        return {ins.dst, ins.src}, set()
    if cls in (4, 7):
        if op == 0xB0:  # MOV
            return ({ins.src} if x else set()), {ins.dst}
        return {ins.dst} | ({ins.src} if x and op not in (0x80, 0xD0) else set()), {ins.dst}
    # JMP / JMP32
    if op == 0x80:
        return {1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}
    if op == 0x90:
        return {0}, set()
    if op == 0x00:
        return set(), set()
    return {ins.dst} | ({ins.src} if x else set()), set()


def _live_in(flow: Any) -> dict[int, set[int]]:
    """Registers live at each block's first instruction (backward dataflow)."""
    insns = flow.insns
    succ: dict[int, list[int]] = {}
    for b, blk in enumerate(flow.blocks):
        last = blk.end - 1
        ins = insns[last] if blk.end > blk.start else None
        nxt = []
        if ins is not None:
            cls, op = ins.code & 7, ins.code & 0xF0
            jmp = cls in (5, 6) and op not in (0x80,)
            targets = []
            if ins.code == _LD_IMM64 or not jmp:
                targets = [blk.end]
            elif op == 0x90:
                targets = []
            elif op == 0x00:
                targets = [last + 1 + (ins.imm if cls == 6 else ins.off)]
            else:
                targets = [last + 1, last + 1 + ins.off]
            nxt = [
                flow.block_of[t] for t in targets if 0 <= t < len(insns) and flow.block_of[t] >= 0
            ]
        succ[b] = nxt
    live: dict[int, set[int]] = {b: set() for b in range(len(flow.blocks))}
    changed = True
    while changed:
        changed = False
        for b in reversed(range(len(flow.blocks))):
            blk = flow.blocks[b]
            regs: set[int] = set().union(*(live[s] for s in succ[b])) if succ[b] else set()
            for i in reversed(range(blk.start, blk.end)):
                if i > blk.start and insns[i - 1].code == _LD_IMM64 and flow.block_of[i] < 0:
                    continue
                uses, defs = _uses_defs(insns[i])
                regs = (regs - defs) | uses
            if regs != live[b]:
                live[b], changed = regs, True
    return live


def instrument(insns: bytes, map_fd: int) -> tuple[bytes, int, list[int]]:
    """The instructions with a counter per block, how many blocks, and where each
    function starts now (for the rewritten func_info)."""
    from pytest_lbr.bytecode.flow import control_flow
    from pytest_lbr.bytecode.instructions import decode_insns

    decoded = decode_insns(insns)
    starts = {0}
    for i, ins in enumerate(decoded):
        if (ins.code == 0x85 and ins.src == _PSEUDO_CALL) or (
            ins.code == _LD_IMM64 and ins.src == _PSEUDO_FUNC
        ):
            starts.add(i + 1 + ins.imm)
    flow = control_flow(insns, sorted(starts))
    live = _live_in(flow)
    depth = min(
        [ins.off for ins in decoded if 10 in (ins.dst, ins.src) and ins.off < 0]
        + [ins.imm for ins in decoded if ins.code == 0x07 and -512 <= ins.imm < 0]
        + [0]
    )
    slot = (depth // 8) * 8 - 16  # two spill slots below anything the program uses
    prologue: dict[int, list[bytes]] = {}
    for b, blk in enumerate(flow.blocks):
        free = [r for r in range(10) if r not in live[b]][:2]
        spill = [r for r in (1, 2, 3, 4, 5, 6, 7, 8, 9) if r not in free][: 2 - len(free)]
        a, c = (free + spill)[:2]
        seq = [_insn(0x7B, 10, r, slot + 8 * k) for k, r in enumerate(spill)]  # spill
        seq += [_insn(0x18, a, _PSEUDO_MAP_VALUE, 0, map_fd), _insn(0, 0, 0, 0, 0)]
        seq += [_insn(0xB7, c, 0, 0, 1), _insn(0xDB, a, c, 8 * b, 0)]  # lock += 1
        seq += [_insn(0x79, r, 10, slot + 8 * k) for k, r in enumerate(spill)]  # fill
        prologue[blk.start] = seq
    new_at: list[int] = []
    pos = 0
    for i in range(len(decoded)):
        new_at.append(pos)  # where the block's counter (if any) starts
        pos += len(prologue.get(i, ())) + 1
    new_at.append(pos)
    out = bytearray()
    for i, ins in enumerate(decoded):
        for piece in prologue.get(i, ()):
            out += piece
        me = len(out) // 8
        raw = bytearray(insns[8 * i : 8 * i + 8])
        cls, op = ins.code & 7, ins.code & 0xF0
        if (
            cls in (5, 6)
            and op not in (0x80, 0x90)
            and not (i and decoded[i - 1].code == _LD_IMM64)
        ):
            if cls == 6 and op == 0x00:
                raw[4:8] = (new_at[i + 1 + ins.imm] - me - 1).to_bytes(4, "little", signed=True)
            else:
                raw[2:4] = (new_at[i + 1 + ins.off] - me - 1).to_bytes(2, "little", signed=True)
        elif (ins.code == 0x85 and ins.src == _PSEUDO_CALL) or (
            ins.code == _LD_IMM64 and ins.src == _PSEUDO_FUNC
        ):
            raw[4:8] = (new_at[i + 1 + ins.imm] - me - 1).to_bytes(4, "little", signed=True)
        out += raw
    return bytes(out), len(flow.blocks), [new_at[f] for f in sorted(starts)]


class _FuncInfo(ctypes.Structure):
    _fields_ = [("insn_off", ctypes.c_uint32), ("type_id", ctypes.c_uint32)]


_XDP, _SCHED_CLS = 6, 3
#: An Ethernet frame with an IPv4 header's type and zeros (what it carries does not matter).
_FRAME = bytes(12) + b"\x08\x00" + bytes(50)


def _run_and_count(fd: int, map_fd: int, blocks: int) -> str:
    """Run the instrumented program once on `_FRAME`; how many blocks counted a run."""
    from pytest_lbr.bpf.libbpf import bpf_test_run_opts, lib

    data = ctypes.create_string_buffer(_FRAME, len(_FRAME))
    out = ctypes.create_string_buffer(256)
    opts = bpf_test_run_opts(sz=ctypes.sizeof(bpf_test_run_opts))
    opts.data_in, opts.data_size_in = ctypes.addressof(data), len(_FRAME)
    opts.data_out, opts.data_size_out = ctypes.addressof(out), 256
    opts.repeat = 1
    if lib.bpf_prog_test_run_opts(fd, ctypes.byref(opts)) != 0:
        return "test run failed"
    key = ctypes.c_uint32(0)
    value = ctypes.create_string_buffer(8 * 4096)
    lib.bpf_map_lookup_elem(map_fd, ctypes.byref(key), value)
    counts = [int.from_bytes(value.raw[8 * b : 8 * b + 8], "little") for b in range(blocks)]
    return (
        f"{sum(1 for c in counts if c)} of {blocks} blocks counted one run (retval {opts.retval})"
    )


def probe(obj_path: Path) -> list[dict[str, Any]]:
    from pytest_lbr.bpf import BpfObject
    from pytest_lbr.bpf.libbpf import lib, prog_info
    from pytest_lbr.programs.info import program_details

    i, p = ctypes.c_int, ctypes.c_void_p
    lib.bpf_map_create.restype, lib.bpf_map_create.argtypes = i, [i, p, i, i, i, p]
    lib.bpf_btf_get_fd_by_id.restype, lib.bpf_btf_get_fd_by_id.argtypes = i, [ctypes.c_uint32]
    out = []
    with BpfObject(obj_path) as obj:
        for name, prog in obj.programs.items():
            ptr = prog._ptr
            insns = ctypes.string_at(
                lib.bpf_program__insns(ptr), lib.bpf_program__insn_cnt(ptr) * 8
            )
            info, _ = prog_info(prog.fd)
            row: dict[str, Any] = {"object": str(obj_path.relative_to(REPO)), "program": name}
            fd_map = lib.bpf_map_create(_MAP_TYPE_ARRAY, None, 4, 8 * 4096, 1, None)
            try:
                new, blocks, funcs = instrument(insns, fd_map)
                row.update(blocks=blocks, before=len(insns) // 8, after=len(new) // 8)
                log = ctypes.create_string_buffer(_LOG_SIZE)
                opts = _LoadOpts(sz=ctypes.sizeof(_LoadOpts))
                # BTF function records (callbacks need them), re-aimed; no line records.
                details = program_details(prog.fd)
                func_info = (_FuncInfo * len(funcs))(
                    *(_FuncInfo(at, t) for at, t in zip(funcs, details.func_types, strict=False))
                )
                if details.btf_id and len(details.func_types) == len(funcs):
                    opts.prog_btf_fd = lib.bpf_btf_get_fd_by_id(details.btf_id)
                    opts.func_info = ctypes.addressof(func_info)
                    opts.func_info_cnt = len(funcs)
                    opts.func_info_rec_size = ctypes.sizeof(_FuncInfo)
                opts.expected_attach_type = lib.bpf_program__expected_attach_type(ptr)
                opts.attach_btf_id = info.attach_btf_id
                if info.attach_btf_obj_id:
                    opts.attach_btf_obj_fd = lib.bpf_btf_get_fd_by_id(info.attach_btf_obj_id)
                opts.log_level, opts.log_size, opts.log_buf = 1, _LOG_SIZE, ctypes.addressof(log)
                buf = ctypes.create_string_buffer(new, len(new))
                fd = lib.bpf_prog_load(
                    info.type, b"cov_probe", b"GPL", buf, len(new) // 8, ctypes.byref(opts)
                )
                text = log.value.decode(errors="replace").strip().splitlines()
                if fd >= 0:
                    row["verdict"] = "loaded"
                    row["processed"] = next((ln for ln in text if ln.startswith("processed")), "")
                    if info.type in (_XDP, _SCHED_CLS):
                        row["counted"] = _run_and_count(fd, fd_map, blocks)
                    os.close(fd)
                else:
                    row["verdict"] = f"refused ({os.strerror(-fd)})"
                    row["log"] = text[-6:]
            finally:
                os.close(fd_map)
            out.append(row)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for obj in sorted((REPO / "examples").glob("*/build/*.bpf.o")):
        try:
            rows += probe(obj)
        except Exception as exc:  # an object that does not load here at all
            rows.append({"object": str(obj.relative_to(REPO)), "verdict": f"not loaded: {exc}"})
    for r in rows:
        print(
            f"{r['object']} {r.get('program', '')}: {r.get('blocks', '-')} blocks, "
            f"{r.get('before', '-')} -> {r.get('after', '-')} insns: {r['verdict']} {r.get('processed', '')} {r.get('counted', '')}"
        )
        for line in r.get("log", ()):
            print(f"    {line}")
    save_json(args.out, {"programs": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
