#!/usr/bin/env python3
"""A PyTorch Dataset of fixed-size records on an NVMe-oF volume, read by a DataLoader with
several workers. Each worker opens its own Volume in worker_init_fn (a volume must not cross a
fork). With --embedded one path is reset in the middle of every epoch: the epoch still completes
and every sample is verified. --batched hands each worker whole batches of indices and reads a
batch through a Ring (one call starts the batch's reads, one reaps them; no Python object per
read) instead of one blocking pread per sample.

    PYTHONPATH=build/python python3 examples/dataloader.py --embedded --workers 1 2 4
    python3 examples/dataloader.py --paths 10.0.0.1:4420 10.0.0.2:4420 --nqn nqn.... --no-write
"""
import argparse
import sys
import time

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, get_worker_info

import nvmeof


def record(index: int, size: int) -> np.ndarray:
    """Record `index`: its index in the first 8 bytes, then a pattern derived from it."""
    r = (np.arange(size // 8, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(index)
    r[0] = index
    return r.view(np.uint8)


class VolumeRecords(Dataset):
    def __init__(self, paths, nqn, record_size, count, io_deadline=0.0, caller_drive=False):
        self.paths, self.nqn, self.io_deadline = list(paths), nqn, io_deadline
        self.record_size, self.count = record_size, count
        self.caller_drive = caller_drive
        self.vol = None  # opened per process: worker_init_fn, or lazily in the main process

    def open(self):
        # caller_drive: this process's reaping thread runs its reactor (one busy thread fewer).
        host = nvmeof.Host(caller_drive=True) if self.caller_drive else None
        self.vol = nvmeof.Volume(self.paths, nqn=self.nqn, io_deadline=self.io_deadline, host=host)
        self.buf = nvmeof.alloc(self.record_size)

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        if self.vol is None:
            self.open()
        self.vol.pread(self.buf, i * self.record_size)
        sample = torch.frombuffer(bytearray(self.buf), dtype=torch.uint8)
        ok = bool(np.array_equal(sample.numpy(), record(i, self.record_size)))
        return i, ok, sample


class BatchedVolumeRecords(VolumeRecords):
    """__getitem__ takes a whole batch of indices (a BatchSampler as the DataLoader's sampler)
    and reads them through a Ring."""

    def __init__(self, *a, batch_size=32, **kw):
        super().__init__(*a, **kw)
        self.batch_size = batch_size

    def open(self):
        super().open()
        self.ring = self.vol.ring(nvmeof.alloc(self.batch_size * self.record_size), self.record_size)
        self.slots = np.empty(self.batch_size, np.uint64)
        self.status = np.empty(self.batch_size, np.uint16)

    def __getitem__(self, idxs):
        if self.vol is None:
            self.open()
        idx = np.asarray(idxs, dtype=np.uint64)
        k = len(idx)
        started = self.ring.read(np.arange(k, dtype=np.uint64), idx * np.uint64(self.record_size))
        if started != k:  # the volume's queue depth (256) is far above a batch
            raise RuntimeError(f"only {started} of {k} reads started")
        got = 0
        while got < k:
            n = self.ring.reap(self.slots, self.status, timeout=30.0, min_complete=k - got)
            if n == 0:
                raise TimeoutError("a batch's reads did not finish within 30 s")
            if self.status[:n].any():
                raise nvmeof.NvmeError(int(self.status[:n].max()), "read")
            got += n
        data = np.frombuffer(self.ring._buffer, dtype=np.uint8)[:k * self.record_size].reshape(k, -1).copy()
        ok = [bool(np.array_equal(data[j], record(int(idx[j]), self.record_size))) for j in range(k)]
        return torch.from_numpy(idx.astype(np.int64)), torch.tensor(ok), torch.from_numpy(data)


def worker_init_fn(_worker_id):
    get_worker_info().dataset.open()


def run_epoch(ds, workers, batch_size, reset=None):
    if isinstance(ds, BatchedVolumeRecords):  # the dataset reads whole batches itself
        loader = DataLoader(ds, batch_size=None, num_workers=workers, worker_init_fn=worker_init_fn,
                            sampler=BatchSampler(RandomSampler(ds), batch_size, drop_last=False))
    else:
        loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                            worker_init_fn=worker_init_fn, persistent_workers=False)
    seen = np.zeros(len(ds), dtype=np.int32)
    bad = 0
    half = len(loader) // 2
    t0 = time.perf_counter()
    for b, (idx, ok, _samples) in enumerate(loader):
        seen[idx.numpy()] += 1
        bad += int((~ok).sum())
        if reset and b == half:
            reset()  # a path goes away mid-epoch; the workers' volumes fail over
    dt = time.perf_counter() - t0
    if bad or not (seen == 1).all():
        raise RuntimeError(f"epoch: {bad} samples wrong, {(seen != 1).sum()} not read exactly once")
    return len(ds) / dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", nargs="*", default=[])
    ap.add_argument("--nqn", default="")
    ap.add_argument("--embedded", action="store_true", help="start the embedded target (build tree)")
    ap.add_argument("--io-deadline", type=float, default=0.0,
                    help="seconds before a slow command fails its path (0: derived)")
    ap.add_argument("--records", type=int, default=2048)
    ap.add_argument("--record-size", type=int, default=16 << 10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, nargs="+", default=[2])
    ap.add_argument("--no-write", action="store_true", help="the records are already on the volume")
    ap.add_argument("--batched", action="store_true",
                    help="each worker reads whole batches through a Ring (one call per batch)")
    ap.add_argument("--caller-drive", action="store_true",
                    help="with --batched: each worker's reaping thread runs its volume's reactor "
                         "(nvmeof.Host(caller_drive=True))")
    args = ap.parse_args()

    target = None
    if args.embedded:
        from nvmeof import _testing
        size = max(64 << 20, args.records * args.record_size)
        target = _testing.Target(ports=2, size=(size + (1 << 20) - 1) & ~((1 << 20) - 1))
        args.paths, args.nqn = target.addresses, target.nqn
    if not args.paths or not args.nqn:
        ap.error("give --paths and --nqn, or --embedded")

    if not args.no_write:
        with nvmeof.Volume(args.paths, nqn=args.nqn, io_deadline=args.io_deadline) as vol:
            for start in range(0, args.records, 64):
                items = [(record(i, args.record_size), i * args.record_size)
                         for i in range(start, min(start + 64, args.records))]
                vol.wait(vol.write_batch(items), timeout=30.0)

    if args.batched:
        ds = BatchedVolumeRecords(args.paths, args.nqn, args.record_size, args.records, args.io_deadline,
                                  caller_drive=args.caller_drive, batch_size=args.batch_size)
    else:
        ds = VolumeRecords(args.paths, args.nqn, args.record_size, args.records, args.io_deadline)
    for w in args.workers:
        reset = (lambda: target.reset(0)) if target else None
        rate = run_epoch(ds, w, args.batch_size, reset)
        print(f"dataloader: {w} worker(s): {rate:.0f} samples/s ({rate * args.record_size / 1e6:.0f} MB/s), "
              f"{args.records} samples of {args.record_size >> 10} KiB verified"
              + (", batches through a Ring" if args.batched else "")
              + (", the reaping thread drives" if args.batched and args.caller_drive else "")
              + (", path 0 reset mid-epoch" if reset else ""))
    if target:
        target.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
