"""The critical path's walk back (path.Hops.walk) as a chase of integers done by numpy: each
vertex has one next vertex, so the path from a vertex is produced by doubling (the first 2^j
vertices, then where each of them is 2^j moves on, from a table of 2^j moves made once per
graph), and cut where the walk stops. The same vertices as a loop over them, in log2(length)
numpy calls instead of one Python step per vertex. Pure."""
from __future__ import annotations

import numpy as np


class Chase:
    """`nxt`: each vertex's next (a negative one indexes from the end, as a list's would, and
    is given back as it is: what the loop did); `time`: each vertex's time; `stop_at`: vertices after
    which the walk ends (pinned starts); `most`: the longest walk."""

    def __init__(self, nxt: np.ndarray, time: np.ndarray, stop_at: np.ndarray, most: int):
        size = len(nxt)
        self.time, self.stop_at, self.most, self.nxt = time, stop_at, most, np.asarray(nxt, np.int64)
        self.jumps = [np.asarray(nxt, np.int64) % max(size, 1)]  # jumps[j][v]: where v is 2^j moves on

    def _jump(self, j: int) -> np.ndarray:
        while len(self.jumps) <= j:
            last = self.jumps[-1]
            self.jumps.append(last[last])
        return self.jumps[j]

    def walk(self, start: int, stop_ns: int) -> np.ndarray:
        """The vertices from `start`: each next one's, until one at or before `stop_ns` (not
        kept; the first vertex is kept whatever its time), after a `stop_at` vertex (kept), or
        `most` vertices."""
        path, j = np.array([start], np.int64), 0
        while True:
            before = self.time[path] <= stop_ns
            before[0] = False
            end = before | self.stop_at[path]
            if end.any():
                k = int(np.argmax(end))
                return self._as_read(path[:min(k if before[k] else k + 1, self.most)])
            if len(path) >= self.most:
                return self._as_read(path[:self.most])
            path = np.concatenate([path, self._jump(j)[path]])
            j += 1

    def _as_read(self, path: np.ndarray) -> np.ndarray:
        """The path with each vertex as its predecessor's `nxt` gives it (a negative one as it is)."""
        out = path.copy()
        out[1:] = self.nxt[path[:-1]]
        return out
