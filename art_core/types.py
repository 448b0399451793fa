"""ART's `art.types`: its config and message types, here where art_core defines them.

from art_core.types import TrainConfig, Messages, Tools
"""

from art_core.backend import TrainResult
from art_core.sft import TrainSFTConfig
from art_core.training.config import TrainConfig
from art_core.trajectories import Messages, MessagesAndChoices, Tools

__all__ = ["Messages", "MessagesAndChoices", "Tools", "TrainConfig", "TrainResult", "TrainSFTConfig"]
