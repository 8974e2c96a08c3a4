"""The sequential order of a sharded manifest (``data.shards.order: sequential``): each
process reads whole shards, one after another, in a seeded order per epoch, through a
shuffle buffer, as WebDataset or tf.data read from an object store. The ``offset`` order
draws every batch from across the corpus instead, one small read anywhere in it per
utterance: cheap on a local disk, slow where each read is a request.

How an epoch's order is made, step by step:

1. Streams. A global batch is cut into micro-batches (``train.micro_batch_size``; unset,
   one per process) that are dealt round robin to the processes
   (``deepspeech.data.sampler``). Here micro-batch ``j`` of every global batch comes from
   stream ``j``, so of ``W`` processes, process ``r`` reads streams ``r``, ``r + W``, ...:
   with the micro-batch size unset, one stream each; a stream reads one shard at a time.
2. Shards to streams. The shards are permuted with the epoch's generator (seed, epoch)
   and dealt in that order, each to the stream that holds the fewest micro-batches' worth
   of utterances so far (the first of equals), so that the streams come out about as
   long. A stream, and so a process, reads only its own shards.
3. A stream reads its shards one after another, each one's members in their order in the
   tar (by byte offset), through a shuffle buffer of ``data.shards.shuffle_buffer``
   utterances: once the buffer is full, each utterance read takes the place of one drawn
   at random from it, which goes out; at the end the buffer empties in random order. An
   utterance goes out at most ``shuffle_buffer - 1`` places ahead of its place in the
   reading order (never sooner than that), and the end of one shard mixes with the next.
4. Equal steps: every process takes every step. A stream is cut into its micro-batches;
   the epoch has as many steps as the shortest stream has micro-batches, and the rest of
   each longer stream (the last utterances out of its buffer; by the deal, fewer than a
   shard and a micro-batch) sits this epoch out: truncation, as a distributed sampler
   drops its last batch. Wrapping around instead would read a shard twice in one epoch.
   The next epoch deals other shards together, so other utterances fall off the end.
5. Resume. The order is a pure function of (seed, epoch, streams); the streams follow
   ``train.batch_size`` and the micro-batch size, which unset follows the number of
   processes. A resumed run recomputes the epoch and starts ``step`` batches in, as the
   other orders do.

The order is what this module makes; the reading stays that of ``deepspeech.data.shards``:
a loader worker reads each member with one ``pread`` when its batch comes. A process's
reads thus move forward through its own shards, mostly within the one or two that each
stream is passing, never more than ``shuffle_buffer`` utterances ahead of the reading
order: near-sequential access that the read-ahead of a shared file system or a mounted
object store serves.

This is another order than ``offset``'s, so the same seed trains other weights, and it
has no SortaGrad (a shortest-first epoch needs the whole corpus sorted: the config
refuses ``train.sortagrad`` with it). With ``train.micro_batch_size`` set the order does
not depend on the number of processes, and ``distributed.deterministic`` then gives the
same bits for any number of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from deepspeech.data.shards import member_ref


@dataclass(frozen=True)
class ShardStream:
    """What the sequential order reads: the utterances of each shard (indices into the
    corpus, in byte order; shards by name) and the shuffle buffer's size."""

    members: list[list[int]]
    shuffle_buffer: int

    @classmethod
    def of(cls, paths: Iterable[str], shuffle_buffer: int) -> ShardStream:
        """The shards that ``paths`` name; a plain file among them raises ``ValueError``."""
        by_shard: dict[str, list[tuple[int, int]]] = {}
        for index, path in enumerate(paths):
            ref = member_ref(path)
            if ref is None:
                raise ValueError(f"{path}: not a shard member (deepspeech data shard)")
            by_shard.setdefault(ref.shard, []).append((ref.offset, index))
        return cls([[index for _, index in sorted(by_shard[shard])]
                    for shard in sorted(by_shard)], shuffle_buffer)

    def epoch_batches(self, chunks: Sequence[int], generator: torch.Generator
                      ) -> list[list[int]]:
        """The epoch's global batches: micro-batch ``j`` of ``chunks[j]`` utterances from
        stream ``j``, as many batches as the shortest stream fills."""
        permutation = torch.randperm(len(self.members), generator=generator).tolist()
        streams = []
        for shards in deal_shards([len(m) for m in self.members], permutation, chunks):
            read = [index for shard in shards for index in self.members[shard]]
            draws = torch.rand(len(read), generator=generator, dtype=torch.float64).tolist()
            streams.append(shuffled(read, self.shuffle_buffer, draws))
        steps = min(len(stream) // chunk for stream, chunk in zip(streams, chunks, strict=True))
        return [[index for stream, chunk in zip(streams, chunks, strict=True)
                 for index in stream[step * chunk:(step + 1) * chunk]]
                for step in range(steps)]


def deal_shards(sizes: Sequence[int], order: Sequence[int], chunks: Sequence[int]
                ) -> list[list[int]]:
    """Shards (numbers into ``sizes``), taken in ``order``, dealt to streams whose
    micro-batches hold ``chunks`` utterances: each to the stream with the fewest
    micro-batches' worth so far, the first of equals."""
    dealt: list[list[int]] = [[] for _ in chunks]
    held = [0] * len(chunks)
    for shard in order:
        stream = min(range(len(chunks)), key=lambda s: (held[s] / chunks[s], s))
        dealt[stream].append(shard)
        held[stream] += sizes[shard]
    return dealt


def shuffled(items: Sequence[int], size: int, draws: Sequence[float]) -> list[int]:
    """``items`` through a shuffle buffer of ``size`` (1: unchanged); ``draws`` holds one
    uniform number in [0, 1) per item, each choosing the slot that goes out next."""
    buffer: list[int] = []
    out: list[int] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        slot = int(draws[len(out)] * size)
        out.append(buffer[slot])
        buffer[slot] = item
    while buffer:
        slot = int(draws[len(out)] * len(buffer))
        buffer[slot], buffer[-1] = buffer[-1], buffer[slot]
        out.append(buffer.pop())
    return out
