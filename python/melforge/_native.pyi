"""Types of the compiled extension (crates/py); `melforge.features` wraps it."""

from typing import Any, List, Mapping, Optional, Tuple

import numpy as np
import numpy.typing as npt

def kaldi(
    kind: str,
    waveforms: List[npt.NDArray[np.float32]],
    options: Optional[Mapping[str, Any]] = None,
    threads: int = 1,
    seed: int = 0,
) -> List[npt.NDArray[np.float32]]: ...
def kaldi_option_names(kind: str) -> List[str]: ...
def whisper(
    waveforms: List[npt.NDArray[np.float32]],
    n_mels: int = 80,
    threads: int = 1,
) -> List[Tuple[npt.NDArray[np.float32], float]]: ...
def log_mel(
    waveforms: List[npt.NDArray[np.float32]],
    options: Optional[Mapping[str, Any]] = None,
    threads: int = 1,
) -> List[npt.NDArray[np.float32]]: ...

LOG_MEL_OPTIONS: List[str]

def decode(
    data: bytes, offset: float = 0.0, duration: Optional[float] = None, sr: Optional[int] = None
) -> Tuple[npt.NDArray[np.float32], int]: ...
