"""Training from Python: every training command's config and the function it runs, in one module
(docs/api.md, "Training from Python").

    from textebm.training import ClassifyTrainConfig, classify_train

    metrics = classify_train(ClassifyTrainConfig(data="data/rt", encoder="minilm-l6", out="runs/rt", epochs=1))

| command          | config                | function         |
|------------------|-----------------------|------------------|
| `classify train` | `ClassifyTrainConfig` | `classify_train` |
| `cloze train`    | `ClozeTrainConfig`    | `cloze_train`    |
| `lm train`       | `LMTrainConfig`       | `lm_train`       |
| `tag train`      | `TagTrainConfig`      | `tag_train`      |
| `detect train`   | `DetectTrainConfig`   | `detect_train`   |
| `detect fit`     | `FitConfig`           | `fit_zeroshot`   |

The names are the commands' own, re-exported: the command line calls the same functions on the
same dataclasses (one field an option: `--batch-size` is `batch_size`), so a run started here
writes the folder the command writes, under the same rules (a folder holding anything else is
refused; `overwrite=True` replaces only this command's earlier run; `resume=True` continues one),
and returns what it writes to RUN/metrics.json (`detect train` adds its decision rule, `detect
fit`, which trains nothing, returns the rule it writes to detector.json). A bad value raises a
`TextebmError` naming the option by its flag before any work (its type, choices and bounds, as
the command line checks them: `textebm.options.check_config`); an interrupt raises
`KeyboardInterrupt` and leaves a run that `resume=True` continues. Progress is a bar on a
terminal, a log line now and then elsewhere, nothing with `progress=False`; the rest goes to
`logging`.

This module is the one place outside `cli/` and the command modules that imports command
configs (tests/test_architecture.py). `import textebm` does not load it; `textebm.training` does,
on first use.
"""

from __future__ import annotations

from textebm.classify.train import ClassifyTrainConfig, classify_train
from textebm.cloze.train import ClozeTrainConfig, cloze_train
from textebm.detection.commands import FitConfig, fit_zeroshot
from textebm.detection.train import DetectTrainConfig, detect_train
from textebm.lm.train import LMTrainConfig, lm_train
from textebm.tagging.train import TagTrainConfig, tag_train

__all__ = ["ClassifyTrainConfig", "classify_train", "ClozeTrainConfig", "cloze_train", "LMTrainConfig", "lm_train",
           "TagTrainConfig", "tag_train", "DetectTrainConfig", "detect_train", "FitConfig", "fit_zeroshot"]
