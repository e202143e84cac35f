"""Unpickling the digest cache's entries with no code but the constructors of the data they hold.

A pickle names the functions it calls; plain pickle.loads calls any (os.system included).
Entries are only read from this user's private folder (tracelab/cachedir.py), and on top of
that `loads` resolves only what digests are made of, so a forged entry builds data or nothing:
- tracelab's own dataclasses, named tuples and enums (the digests), by their class;
- pandas' frames, series, indexes, arrays and dtypes, numpy's arrays, dtypes and scalars, by
  their class, and the few functions pandas and numpy pickle them with (_ALLOWED_FUNCTIONS);
- warning categories (the warnings a parse raised, said again on a hit), slice and the plain
  containers.
Anything else (a function, a module's other classes: subprocess.Popen, pandas' readers) is an
UnpicklingError: the entry is a miss and the trace is parsed again.
"""
from __future__ import annotations

import dataclasses
import enum
import io
import pickle
import sys
from typing import Any

# the functions pandas 2.x and numpy 1.x/2.x pickle frames and arrays with (module, name)
_ALLOWED_FUNCTIONS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("pandas._libs.arrays", "__pyx_unpickle_NDArrayBacked"),
    ("pandas._libs.internals", "_unpickle_block"),
    ("pandas.core.indexes.base", "_new_Index"),
    ("pandas._libs.tslibs.timestamps", "_unpickle_timestamp"),
    ("pandas._libs.tslibs.timedeltas", "_timedelta_unpickle"),
    ("pandas._libs.missing", "NA"), ("pandas._libs.tslibs.nattype", "NaT"),
}
_PACKAGES = ("tracelab", "pandas", "numpy", "builtins")
_PLAIN = {"slice", "complex", "set", "frozenset", "bytearray", "range"}


class _DigestUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_FUNCTIONS or (module == "builtins" and name in _PLAIN):
            return super().find_class(module, name)
        # no dotted name (an attribute of an attribute: tracelab.x.os.system), and only modules
        # already imported (the digests' are, by the reducers that made the key): naming one runs nothing
        if "." in name or module.split(".")[0] not in _PACKAGES or module not in sys.modules:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a digest")
        found = super().find_class(module, name)
        if not (isinstance(found, type) and _data_class(found)):
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a digest")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not part of a digest")


def _data_class(cls: type) -> bool:
    """A class whose construction from pickled fields builds data and runs nothing else."""
    import numpy as np
    import pandas as pd
    from pandas.api.extensions import ExtensionArray, ExtensionDtype
    from pandas.core.internals.managers import BaseBlockManager

    if issubclass(cls, Warning):
        return True
    if cls.__module__.startswith("tracelab."):
        return dataclasses.is_dataclass(cls) or issubclass(cls, (tuple, enum.Enum))
    if cls.__module__.startswith("numpy"):
        return issubclass(cls, (np.ndarray, np.dtype, np.generic)) and not issubclass(cls, np.memmap)
    return issubclass(cls, (pd.DataFrame, pd.Series, pd.Index, ExtensionArray, ExtensionDtype, BaseBlockManager,
                            pd.Timestamp, pd.Timedelta, pd.Interval, pd.Period))


def loads(payload: bytes) -> Any:
    """The object pickled in `payload`, built only from the digests' classes; UnpicklingError
    (or any error pickle raises on damaged bytes) otherwise."""
    return _DigestUnpickler(io.BytesIO(payload)).load()
