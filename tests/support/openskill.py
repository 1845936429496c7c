"""openskill's models (the reference of `weng-lin`, a test dependency) by our model names."""

from __future__ import annotations

from openskill import models

OPENSKILL = {
    "plackett-luce": models.PlackettLuce,
    "bradley-terry-full": models.BradleyTerryFull,
    "bradley-terry-part": models.BradleyTerryPart,
    "thurstone-mosteller-full": models.ThurstoneMostellerFull,
    "thurstone-mosteller-part": models.ThurstoneMostellerPart,
}
