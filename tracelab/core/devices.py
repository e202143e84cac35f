"""Device peaks for the roofline (reports/roofline/roofline.py): dense FLOP/s per dtype class and memory
bandwidth, and which device a trace ran on.

Figures are the vendors' datasheet numbers, dense (no 2:4 sparsity), boost clocks; a kernel
can beat none of them, and real kernels reach 70-90% of them at best. Each entry names its
source. A dtype class maps a row's `dtype` (events schema) to a peak: "16" for bf16/fp16 and
proton's 16-bit FLOPs, "8" for fp8/int8 and proton's 8-bit ones.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tracelab.core.errors import UsageError
from tracelab.core.meta import Meta


@dataclass(frozen=True)
class Device:
    """A device's roofs: tflop_s per dtype class, HBM and host-link bandwidth in GB/s."""

    name: str
    tflop_s: dict[str, float]
    hbm_gb_s: float
    host_link_gb_s: float | None
    source: str
    arch: str | None = None
    aliases: tuple[str, ...] = field(default=())
    # told only by its name: an unnamed device (proton) of its architecture and bandwidth may as
    # well be a sibling the table lacks (an sm_75 part of 320 GB/s: a T4, or an RTX 2060 at 336)
    by_name_only: bool = False

    def peak_tflop_s(self, dtype: str) -> float | None:
        return self.tflop_s.get(DTYPE_CLASS.get(dtype, ""))

    @property
    def tensor_dtypes(self) -> frozenset[str]:
        """The dtypes its matrix units (tensor cores, AMD's matrix cores) run: from its architecture
        where the table gives one, else the dtype classes its datasheet lists a matrix peak for."""
        by_arch = arch_tensor_dtypes(self.arch)
        if by_arch is not None:
            return by_arch
        return frozenset(d for d in ("fp16", "bf16", "tf32", "fp8", "int8") if DTYPE_CLASS[d] in self.tflop_s)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "peaks": {"tflop_s": self.tflop_s, "hbm_gb_s": self.hbm_gb_s,
                                             "host_link_gb_s": self.host_link_gb_s}, "figures_from": self.source}


CLASS_LABEL = {"16": "bf16/fp16", "8": "fp8/int8"}  # a peak's dtype class as a reader names it


def class_label(dtype_class: str) -> str:
    return CLASS_LABEL.get(dtype_class, dtype_class)


DTYPE_CLASS = {"bf16": "16", "fp16": "16", "16-bit": "16", "fp8": "8", "8-bit": "8", "int8": "8", "uint8": "8",
               "tf32": "tf32", "fp32": "fp32", "fp64": "fp64"}

_PCIE5_GB_S, _PCIE4_GB_S = 64.0, 32.0  # x16, one direction: 32 GT/s and 16 GT/s, 128b/130b
DEVICES = [
    # NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5 column: FP64 34, FP32 67, TF32 989/2,
    # BF16/FP16 1979/2, FP8 3958/2 TFLOPS (the halves: dense); HBM3 3.35 TB/s; PCIe Gen5
    Device("H100 SXM", {"fp64": 33.5, "fp32": 66.9, "tf32": 494.7, "16": 989.4, "8": 1978.9}, 3350.0, _PCIE5_GB_S,
           "NVIDIA H100 datasheet, SXM5, dense", "90", ("h100", "h100-sxm", "h100 80gb hbm3", "h100 sxm5")),
    # same datasheet, PCIe column: FP64 26, FP32 51, TF32 756/2, BF16 1513/2, FP8 3026/2; HBM2e 2.0 TB/s
    Device("H100 PCIe", {"fp64": 25.6, "fp32": 51.2, "tf32": 378.0, "16": 756.5, "8": 1513.0}, 2000.0, _PCIE5_GB_S,
           "NVIDIA H100 datasheet, PCIe, dense", "90", ("h100-pcie", "h100 pcie")),
    # same datasheet, H100 NVL column, per GPU: FP32 60, TF32 835/2, BF16 1671/2, FP8 3341/2; 3.9 TB/s
    Device("H100 NVL", {"fp64": 30.0, "fp32": 60.0, "tf32": 417.5, "16": 835.5, "8": 1670.5}, 3900.0, _PCIE5_GB_S,
           "NVIDIA H100 datasheet, NVL, dense", "90", ("h100-nvl", "h100 nvl")),
    # NVIDIA H200 Tensor Core GPU datasheet (2024), SXM: the H100 SXM's compute, HBM3e 4.8 TB/s
    Device("H200", {"fp64": 33.5, "fp32": 66.9, "tf32": 494.7, "16": 989.4, "8": 1978.9}, 4800.0, _PCIE5_GB_S,
           "NVIDIA H200 datasheet, SXM, dense", "90", ("h200", "h200-sxm", "h200 sxm")),
    # NVIDIA A100 Tensor Core GPU datasheet (2021): FP64 9.7, FP32 19.5, TF32 156, BF16/FP16 312,
    # INT8 624 TOPS (dense); 80GB SXM HBM2e 2,039 GB/s; PCIe Gen4
    Device("A100 SXM 80GB", {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "16": 312.0, "8": 624.0}, 2039.0,
           _PCIE4_GB_S, "NVIDIA A100 datasheet, 80GB SXM, dense", "80", ("a100", "a100-80gb", "a100-sxm4-80gb")),
    Device("A100 40GB", {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "16": 312.0, "8": 624.0}, 1555.0, _PCIE4_GB_S,
           "NVIDIA A100 datasheet, 40GB, dense", "80", ("a100-40gb", "a100-sxm4-40gb", "a100-pcie-40gb")),
    Device("A100 PCIe 80GB", {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "16": 312.0, "8": 624.0}, 1935.0,
           _PCIE4_GB_S, "NVIDIA A100 datasheet, 80GB PCIe, dense", "80", ("a100-pcie", "a100 80gb pcie")),
    # NVIDIA HGX B200 datasheet (2024), per GPU: FP64 40, TF32 2.2/2 PF, BF16/FP16 4.5/2 PF, FP8 9/2 PF
    # (sparse/2 = dense); FP32 80 TFLOPS; HBM3e 8 TB/s; PCIe Gen5 to the host
    Device("B200", {"fp64": 40.0, "fp32": 80.0, "tf32": 1100.0, "16": 2250.0, "8": 4500.0}, 8000.0, _PCIE5_GB_S,
           "NVIDIA HGX B200 datasheet, per GPU, dense", "100", ("b200",)),
    # NVIDIA L40S datasheet (2023): FP32 91.6, TF32 366/2, BF16/FP16 733/2, FP8 1466/2 (dense); GDDR6 864 GB/s
    Device("L40S", {"fp32": 91.6, "tf32": 183.0, "16": 362.0, "8": 733.0}, 864.0, _PCIE4_GB_S,
           "NVIDIA L40S datasheet, dense", "89", ("l40s",)),
    # NVIDIA L4 datasheet (2023): FP32 30.3, TF32 120/2, BF16/FP16 242/2, FP8 485/2 (dense); 300 GB/s
    Device("L4", {"fp32": 30.3, "tf32": 60.0, "16": 121.0, "8": 242.5}, 300.0, _PCIE4_GB_S,
           "NVIDIA L4 datasheet, dense", "89", ("l4",)),
    # NVIDIA A10 datasheet (2021): FP32 31.2, TF32 62.5, BF16/FP16 125, INT8 250 (dense); GDDR6 600 GB/s
    Device("A10", {"fp32": 31.2, "tf32": 62.5, "16": 125.0, "8": 250.0}, 600.0, _PCIE4_GB_S,
           "NVIDIA A10 datasheet, dense", "86", ("a10",)),
    # NVIDIA V100 datasheet (2020), SXM2: FP64 7.8, FP32 15.7, tensor (fp16) 125; HBM2 900 GB/s; PCIe
    # Gen3 x16 to the host (15.75 GB/s one way). No bf16 tensor cores: "16" is fp16's.
    Device("V100 SXM2", {"fp64": 7.8, "fp32": 15.7, "16": 125.0}, 900.0, 15.75,
           "NVIDIA V100 datasheet, SXM2", "70", ("v100", "v100-sxm2")),
    Device("V100 PCIe", {"fp64": 7.0, "fp32": 14.0, "16": 112.0}, 900.0, 15.75,
           "NVIDIA V100 datasheet, PCIe", "70", ("v100-pcie",)),
    # NVIDIA H800 SXM: the H100 SXM5's tensor-core and FP32 compute and 3.35 TB/s of HBM3 (the export
    # part differs in NVLink); no FP64 figure is given here rather than a guessed one
    Device("H800", {"fp32": 66.9, "tf32": 494.7, "16": 989.4, "8": 1978.9}, 3350.0, _PCIE5_GB_S,
           "NVIDIA H800 SXM (H100 SXM5 compute), dense", "90", ("h800", "h800-sxm"), by_name_only=True),
    # NVIDIA H20 (2024): FP32 44, TF32 74, BF16/FP16 148, FP8/INT8 296 (dense); HBM3 4.0 TB/s
    Device("H20", {"fp32": 44.0, "tf32": 74.0, "16": 148.0, "8": 296.0}, 4000.0, _PCIE5_GB_S,
           "NVIDIA H20 specifications, dense", "90", ("h20",), by_name_only=True),
    # NVIDIA Ada Lovelace whitepaper (2022), RTX 4090: FP32 82.6, TF32 82.6, FP16 (FP32 accumulate)
    # 165.2, FP8 330.3 (dense); GDDR6X 1,008 GB/s
    Device("RTX 4090", {"fp32": 82.6, "tf32": 82.6, "16": 165.2, "8": 330.3}, 1008.0, _PCIE4_GB_S,
           "NVIDIA Ada Lovelace whitepaper, RTX 4090, dense", "89", ("rtx-4090", "rtx 4090", "4090"),
           by_name_only=True),
    # NVIDIA Ampere GA102 whitepaper (2020), RTX 3090: FP32 35.6, TF32 35.6, FP16/BF16 (FP32
    # accumulate) 71 (dense); GDDR6X 936 GB/s
    Device("RTX 3090", {"fp32": 35.6, "tf32": 35.6, "16": 71.0}, 936.0, _PCIE4_GB_S,
           "NVIDIA Ampere GA102 whitepaper, RTX 3090, dense", "86", ("rtx-3090", "rtx 3090", "3090"),
           by_name_only=True),
    # NVIDIA Turing whitepaper (2018), RTX 2080 Ti reference: FP32 13.4, FP16 tensor (FP32 accumulate)
    # 53.8, INT8 215.2; GDDR6 616 GB/s; PCIe Gen3 x16. Turing has no bf16 or TF32.
    Device("RTX 2080 Ti", {"fp32": 13.4, "16": 53.8, "8": 215.2}, 616.0, 15.75,
           "NVIDIA Turing whitepaper, RTX 2080 Ti", "75", ("rtx-2080-ti", "rtx 2080 ti", "2080ti"), by_name_only=True),
    # NVIDIA T4 datasheet (2019): FP32 8.1, FP16 (mixed) 65, INT8 130; GDDR6 320 GB/s; PCIe Gen3
    Device("T4", {"fp32": 8.1, "16": 65.0, "8": 130.0}, 320.0, 15.75, "NVIDIA T4 datasheet", "75", ("t4",),
           by_name_only=True),
    # AMD Instinct MI300X datasheet (2023): FP64 matrix 163.4, FP32 163.4, TF32 653.7, FP16/BF16 1307.4,
    # FP8 2614.9 (dense); HBM3 5.3 TB/s; PCIe Gen5
    Device("MI300X", {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "16": 1307.4, "8": 2614.9}, 5300.0, _PCIE5_GB_S,
           "AMD Instinct MI300X datasheet, dense", None, ("mi300x",)),
    # AMD Instinct MI250X datasheet (2021): FP64/FP32 matrix 95.7, FP16/BF16 383; HBM2e 3.2768 TB/s
    Device("MI250X", {"fp64": 95.7, "fp32": 95.7, "16": 383.0}, 3276.8, _PCIE4_GB_S,
           "AMD Instinct MI250X datasheet", None, ("mi250x",)),
    # AMD Instinct MI325X datasheet (2024): FP32 163.4, TF32 653.7, FP16/BF16 1307.4, FP8 2614.9 (dense);
    # HBM3E 6 TB/s
    Device("MI325X", {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "16": 1307.4, "8": 2614.9}, 6000.0, _PCIE5_GB_S,
           "AMD Instinct MI325X datasheet, dense", None, ("mi325x",)),
    # AMD Instinct MI210 datasheet (2022): FP64/FP32 matrix 45.3, FP16/BF16 181; HBM2e 1.6384 TB/s
    Device("MI210", {"fp64": 45.3, "fp32": 45.3, "16": 181.0}, 1638.4, _PCIE4_GB_S,
           "AMD Instinct MI210 datasheet", None, ("mi210",)),
]
_BY_KEY = {alias: d for d in DEVICES for alias in (d.name.lower(), *d.aliases)}
# the names CUDA gives (cudaDeviceProp.name) -> table entry; checked in order
_NAME_PATTERNS = [(re.compile(p, re.IGNORECASE), name) for p, name in [
    (r"H100.*NVL", "H100 NVL"), (r"H100.*PCIe", "H100 PCIe"), (r"H100", "H100 SXM"), (r"H200", "H200"),
    (r"H800", "H800"), (r"\bH20\b", "H20"), (r"RTX 4090", "RTX 4090"), (r"RTX 3090(?! Ti)", "RTX 3090"),
    (r"RTX 2080 Ti", "RTX 2080 Ti"), (r"\bT4\b", "T4"), (r"MI325X", "MI325X"), (r"MI210", "MI210"),
    (r"A100.*PCIe.*80|A100 80GB PCIe", "A100 PCIe 80GB"), (r"A100.*40GB", "A100 40GB"), (r"A100", "A100 SXM 80GB"),
    (r"B200", "B200"), (r"L40S", "L40S"), (r"\bL4\b", "L4"), (r"\bA10\b(?!0)", "A10"),
    (r"V100.*PCIE", "V100 PCIe"), (r"V100", "V100 SXM2"), (r"MI300X", "MI300X"), (r"MI250X?", "MI250X")]]


# The dtypes NVIDIA's tensor cores run, by compute capability (CUDA C++ Programming Guide, "Warp Matrix
# Functions"; the architecture whitepapers): Volta fp16; Turing adds int8; Ampere bf16 and TF32; Ada and
# Hopper fp8; Blackwell keeps them. Before Volta there are none. AMD's matrix cores by gfx target (CDNA
# instruction set references): MI100/MI200 fp16, bf16, int8; MI300 adds TF32 (xf32) and fp8.
_AMPERE = frozenset({"fp16", "bf16", "tf32", "int8"})
_ARCH_TENSOR_DTYPES = {"70": frozenset({"fp16"}), "72": frozenset({"fp16"}), "75": frozenset({"fp16", "int8"}),
                       "80": _AMPERE, "86": _AMPERE, "87": _AMPERE, "89": _AMPERE | {"fp8"},
                       "90": _AMPERE | {"fp8"}, "100": _AMPERE | {"fp8"}, "101": _AMPERE | {"fp8"},
                       "103": _AMPERE | {"fp8"}, "110": _AMPERE | {"fp8"}, "120": _AMPERE | {"fp8"},
                       "121": _AMPERE | {"fp8"},
                       "gfx908": frozenset({"fp16", "bf16", "int8"}), "gfx90a": frozenset({"fp16", "bf16", "int8"}),
                       "gfx940": _AMPERE | {"fp8"}, "gfx941": _AMPERE | {"fp8"}, "gfx942": _AMPERE | {"fp8"}}


def arch_tensor_dtypes(arch: str | None) -> frozenset[str] | None:
    """The dtypes an architecture's matrix units run ("86": compute capability 8.6; "gfx90a"), the
    empty set for an NVIDIA architecture before Volta, None where the architecture is unknown."""
    if not arch:
        return None
    arch = str(arch).strip().lower()
    if arch in _ARCH_TENSOR_DTYPES:
        return _ARCH_TENSOR_DTYPES[arch]
    return frozenset() if arch.isdigit() and int(arch) < 70 else None


def tensor_dtypes(props: dict[str, Any]) -> frozenset[str] | None:
    """What a trace's device can run on its matrix units: its table entry's, else its architecture's
    (a GeForce RTX 2070 SUPER, sm_75, is in no table but is Turing); None when neither is known, so
    that no advice is given for features the device may not have."""
    found = detect(props)
    if found is not None:
        return found.tensor_dtypes
    return arch_tensor_dtypes(props.get("arch") or str(props.get("capability") or "").replace(".", ""))


def meta_tensor_dtypes(meta: Meta) -> frozenset[str] | None:
    """tensor_dtypes of a trace's first GPU (as meta_device picks it), None where it names none."""
    gpus = [props for props in meta.devices.values() if isinstance(props, dict)]
    return tensor_dtypes(gpus[0]) if gpus else None


def by_option(name: str) -> Device:
    """A device named on the command line: H100, H100-PCIe, H200, A100, A100-40GB, B200, ..."""
    device = _BY_KEY.get(name.strip().lower().replace("_", "-"))
    if device is None:
        device = _from_name(name)
    if device is None:
        raise UsageError("--device", f"unknown device {name!r}; known: {', '.join(d.name for d in DEVICES)} "
                                     "(or give --peak-tflops and --peak-gb-s)")
    return device


def _from_name(name: str) -> Device | None:
    for pattern, entry in _NAME_PATTERNS:
        if pattern.search(name):
            return _BY_KEY[entry.lower()]
    return None


def custom(peak_tflop_s: float, peak_gb_s: float, base: Device | None = None) -> Device:
    """Peaks given as options: one FLOP/s roof for every dtype (or the base device's others)."""
    classes = ("fp64", "fp32", "tf32", "16", "8")
    return Device(f"{base.name} (peaks given)" if base else "given peaks", {c: peak_tflop_s for c in classes},
                  peak_gb_s, base.host_link_gb_s if base else None, "--peak-tflops / --peak-gb-s")


def _sized(found: Device, memory_bytes) -> Device:
    """An A100 whose name gives no size (HTA's 'NVIDIA A100-PG509-200', 39.4 GiB): its memory tells
    the 40 GB part (1,555 GB/s of HBM2) from the 80 GB one (2,039 GB/s)."""
    if found.name == "A100 SXM 80GB" and isinstance(memory_bytes, (int, float)) and 0 < memory_bytes < 60 * 2**30:
        return _BY_KEY["a100 40gb"]
    return found


# an unnamed device (proton) is told by its architecture and a memory bandwidth within this fraction
# of the entry's: a 176 GB/s sm_86 laptop part is no 600 GB/s A10
BANDWIDTH_MATCH = 0.10


def detect(props: dict[str, Any]) -> Device | None:
    """The table entry for a trace's device properties (Kineto deviceProperties, nsys
    TARGET_INFO_GPU, run.json devices): by name, None for a name not in the table; else (proton:
    no name) by architecture and the nearest memory bandwidth (proton-viewer's memory clock x bus
    width), None unless within BANDWIDTH_MATCH of it."""
    name = props.get("name")
    if isinstance(name, str) and name.strip():  # a named device not in the table is unknown: a GeForce
        found = _from_name(name)                # RTX 3080 (sm_86) is no A10, whatever its bandwidth
        return _sized(found, props.get("memory_bytes") or props.get("total_memory_bytes")) if found else None
    if props.get("type") not in (None, "CUDA"):  # an AMD gfx90a is no sm_90: by name only
        return None
    arch, bandwidth = props.get("arch") or str(props.get("capability", "")).replace(".", ""), \
        props.get("memory_bandwidth_gb_s")
    same = [d for d in DEVICES if d.arch == arch and not d.by_name_only]
    if not same or not isinstance(bandwidth, (int, float)):
        return None
    nearest = min(same, key=lambda d: abs(d.hbm_gb_s - bandwidth))
    return nearest if abs(nearest.hbm_gb_s - bandwidth) <= BANDWIDTH_MATCH * nearest.hbm_gb_s else None


MAX_PEAK = 1e7  # TFLOP/s or GB/s: 100x any device made so far


def given_device(name: str | None, tflops: float | None, gb_s: float | None) -> tuple[Device | None, str]:
    """The device the options name (--device, --peak-tflops with --peak-gb-s), or (None, ...)."""
    if (tflops is None) != (gb_s is None):
        raise UsageError("--peak-tflops" if tflops is None else "--peak-gb-s",
                         "give --peak-tflops and --peak-gb-s together")
    for option, value in (("--peak-tflops", tflops), ("--peak-gb-s", gb_s)):
        if value is not None and not 0 < value <= MAX_PEAK:  # NaN and inf too: every output is finite
            raise UsageError(option, f"must be above 0 and at most {MAX_PEAK:g}, not {value}")
    base = by_option(name) if name else None
    if tflops is not None:
        return custom(tflops, gb_s, base), "option"
    return base, "option"
