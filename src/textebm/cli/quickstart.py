"""The main job (filled in by the calibration issue)."""
from dataclasses import dataclass

@dataclass
class QuickstartConfig:
    out: str = "runs/quickstart"

def quickstart(cfg: QuickstartConfig) -> None:
    raise SystemExit("not yet")

COMMAND = (QuickstartConfig, quickstart)
