"""The card's dense bf16 peak, by its name (PEAKS), scaled to the share of the card a partition has."""

from __future__ import annotations

# Dense bf16 tensor peaks (TFLOPS, FP32 accumulate, no sparsity, boost clock; NVIDIA's datasheets) and the
# whole card's SM count, matched in order against torch.cuda.get_device_name(); a partition (a MIG slice,
# ZeroGPU's half card) is given the share of SMs it has. None: the card is known, its peak is not here.
PEAKS = (("H100 PCIe", 756.0, 114), ("H100 NVL", 835.5, 132), ("H100", 989.4, 132), ("H200 NVL", 835.5, 132),
         ("H200", 989.4, 132), ("A100", 312.0, 108), ("RTX PRO 6000 Blackwell Max-Q", None, 188),
         ("RTX PRO 6000 Blackwell", 503.8, 188))


def card_peak(name: str, sms: int) -> dict:
    """The card's dense bf16 peak from PEAKS, scaled to the share of its SMs this device has (a MIG slice,
    ZeroGPU's half card); None for a card not in the table."""
    for key, tflops, full_sms in PEAKS:
        if key.lower() in name.lower():
            if tflops is None:
                return dict(card=key, peak_tflops=None, note=f"{key}: no datasheet peak in the table")
            share = min(1.0, sms / full_sms)
            note = "" if share == 1 else f"{sms} of its {full_sms} SMs: {share:.0%} of {tflops:g} TFLOPS"
            return dict(card=key, peak_tflops=tflops * share, note=note)
    return dict(card=None, peak_tflops=None, note=f"unknown card ({name}): no peak to compare with")
