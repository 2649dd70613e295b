"""Physical lower bounds on a kernel's time: a faster measurement means the measurement was gamed.

Peaks come from the config when set, else from this table of datasheet values (dense, no sparsity)
matched against the device name.  Unknown devices get no bound rather than a wrong one.
"""

from __future__ import annotations

from rl_kernels.config import RooflineConfig

# name fragment -> (fp16 tensor TFLOP/s, fp32 non-tensor TFLOP/s, memory GB/s)
KNOWN_DEVICES: dict[str, tuple[float, float, float]] = {
    "H200": (989.0, 67.0, 4800.0),
    "H100 SXM": (989.0, 67.0, 3350.0),
    "H100 PCIe": (756.0, 51.0, 2000.0),
    "H100": (989.0, 67.0, 3350.0),
    "A100-SXM4-80GB": (312.0, 19.5, 2039.0),
    "A100": (312.0, 19.5, 2039.0),
    "RTX 3090": (142.0, 35.6, 936.0),
}


def device_peaks(device_name: str, cfg: RooflineConfig) -> tuple[float | None, float | None]:
    """(peak fp16 FLOP/s, peak bytes/s) for the named device, config overrides first."""
    flops = cfg.peak_tflops_fp16 * 1e12 if cfg.peak_tflops_fp16 else None
    bw = cfg.peak_gbps * 1e9 if cfg.peak_gbps else None
    for fragment, (tf16, _tf32, gbps) in KNOWN_DEVICES.items():
        if fragment in device_name:
            flops = flops or tf16 * 1e12
            bw = bw or gbps * 1e9
            break
    return flops, bw


def min_time_ms(flops: float, nbytes: float, device_name: str, cfg: RooflineConfig) -> float | None:
    peak_flops, peak_bw = device_peaks(device_name, cfg)
    bounds = []
    if peak_flops and flops > 0:
        bounds.append(flops / peak_flops)
    if peak_bw and nbytes > 0:
        bounds.append(nbytes / peak_bw)
    return max(bounds) * 1e3 if bounds else None
